//! Landlock: the filesystem (and TCP, and scope) layer.
//!
//! [`prepare`] runs in the parent before fork: it opens every rule's path once,
//! builds the ruleset at the highest ABI the kernel offers with **every**
//! filesystem right of that ABI handled (so anything not granted is denied), adds
//! every rule, and reports what it built. Without `best_effort` every right and
//! rule is a hard requirement, so a ruleset `prepare` returns is fully enforced
//! once restricted. [`ChildRules::restrict`] runs in the child stage: it adds
//! the child's own `/proc/self` and calls `landlock_restrict_self`.
//!
//! Fail closed: when the kernel lacks Landlock, or something the plan needs
//! (TCP rules on ABI < 4, scopes on ABI < 6), `prepare` fails naming what is
//! missing and the first kernel that has it, unless `best_effort`, in which case
//! it is listed in [`Report::missing`].
//!
//! Carve-outs of denied paths beneath grants are described in `carveout.rs`. In
//! short: Landlock cannot subtract, so a grant with a denied path beneath it is
//! expanded into rules on the siblings along the way; entries created later
//! directly in an expanded directory are not reachable, and symbolic links in an
//! expanded directory get no rule of their own.
//!
//! The `landlock` crate (0.4.8) knows ABIs up to 10; a newer kernel is used at
//! ABI 10. This layer's types never expose the crate's.

mod abi;
mod carveout;
mod child;
mod error;
mod report;
mod rights;

#[cfg(test)]
mod tests;

use landlock::{
    AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

pub use child::ChildRules;
pub use error::LandlockError;
pub use report::{Report, RuleKind, RuleLine};

use crate::plan::{Access, FsPlan, Origin};

/// TCP rules (ABI 4+).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetRules {
    /// Deny TCP bind and connect, except connect to `connect_ports`.
    pub handle_tcp: bool,
    /// Ports the child may connect to (on any address: pair with seccomp or a netns).
    pub connect_ports: Vec<u16>,
    /// Whether Landlock is the layer that enforces the TCP rules (the
    /// proxy's no-namespace path): then a kernel without them (ABI < 4) is
    /// refused. Elsewhere they are a second layer, applied where available.
    pub tcp_required: bool,
}

/// IPC scopes (ABI 6+).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes {
    /// No signals to processes outside the sandbox.
    pub signal: bool,
    /// No connecting to abstract Unix sockets created outside the sandbox.
    pub abstract_unix: bool,
}

/// A ruleset with every rule added, ready for the child to apply to itself.
#[derive(Debug)]
pub struct Prepared {
    /// None when Landlock is unavailable and best effort was allowed.
    ruleset: Option<RulesetCreated>,
    report: Report,
    abi: ABI,
    proc_self: bool,
}

/// Build the ruleset for `fs`, `net` and `scopes` at the kernel's highest ABI.
///
/// Opens every rule's path (once); the returned [`Prepared`] holds one ruleset fd
/// (close-on-exec). Fails closed unless `best_effort`, see the module docs.
pub fn prepare(
    fs: &FsPlan,
    net: &NetRules,
    scopes: &Scopes,
    best_effort: bool,
) -> Result<Prepared, LandlockError> {
    let kernel = crate::kernel::probe().landlock_abi;
    let abi_n = abi::effective(kernel);
    let abi = abi::to_crate(abi_n);
    let want_scopes = scopes.signal || scopes.abstract_unix;
    let missing = abi::missing_features(kernel, net.handle_tcp && net.tcp_required, want_scopes);
    if !missing.is_empty() && !best_effort {
        return Err(LandlockError::Unsupported {
            kernel_abi: kernel,
            missing,
        });
    }
    for m in &missing {
        tracing::warn!(missing = %m, "best effort: Landlock protection not enforced");
    }
    if kernel > abi_n {
        tracing::debug!(
            kernel,
            used = abi_n,
            "kernel Landlock ABI is newer than the landlock crate knows"
        );
    }

    let fs_on = abi_n >= 1;
    let tcp_on = net.handle_tcp && abi_n >= 4;
    let scopes_on = want_scopes && abi_n >= 6;
    let mut ruleset = if fs_on {
        Some(create_ruleset(abi, best_effort, tcp_on, scopes_on, scopes)?)
    } else {
        None
    };
    // Each path rule is added as soon as it is planned, and its descriptor
    // closed (see carveout::Sink).
    let planned = carveout::plan(fs, abi, &mut |fd, rights| {
        let Some(created) = ruleset.take() else {
            return Ok(());
        };
        if rights.is_empty() {
            ruleset = Some(created);
            return Ok(());
        }
        ruleset = Some(
            created
                .add_rule(PathBeneath::new(fd, rights))
                .map_err(|e| LandlockError::ruleset("add path rule", e))?,
        );
        Ok(())
    })?;
    if let Some(mut created) = ruleset.take_if(|_| tcp_on) {
        for &port in &net.connect_ports {
            created = created
                .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                .map_err(|e| LandlockError::ruleset("add TCP port rule", e))?;
        }
        ruleset = Some(created);
    }

    let mut rules = planned.lines;
    if fs.proc_self {
        rules.push(RuleLine {
            path: "/proc/self".into(),
            access: Access::READ,
            kind: RuleKind::ProcSelf,
            origin: Origin::System,
        });
    }
    let report = Report {
        abi: abi_n,
        fs: fs_on,
        tcp: tcp_on,
        scopes: scopes_on,
        scoped: if scopes_on {
            scope_names(scopes)
        } else {
            Vec::new()
        },
        missing,
        rules,
        denied: planned.denied,
        dropped: planned.dropped,
        connect_ports: if tcp_on {
            net.connect_ports.clone()
        } else {
            Vec::new()
        },
    };
    Ok(Prepared {
        ruleset,
        report,
        abi,
        proc_self: fs.proc_self,
    })
}

impl Prepared {
    /// Rights for the rules init adds for the view's new mounts (None without a ruleset).
    pub fn view_rights(&self) -> Option<crate::sandbox::view::ViewRights> {
        self.ruleset.as_ref()?;
        Some(crate::sandbox::view::ViewRights {
            read_dir: rights::for_access(Access::READ, self.abi, true).bits(),
            write_dir: rights::for_access(Access::WRITE, self.abi, true).bits(),
            write_file: rights::for_access(Access::WRITE, self.abi, false).bits(),
        })
    }

    /// What this ruleset enforces, one line per rule (for `--dry-run` and `check`).
    pub fn report(&self) -> &Report {
        &self.report
    }
}

/// The ruleset, created with every filesystem right of `abi` handled (and
/// TCP and scopes where the plan uses them); rules are added by the caller.
fn create_ruleset(
    abi: ABI,
    best_effort: bool,
    tcp_on: bool,
    scopes_on: bool,
    scopes: &Scopes,
) -> Result<RulesetCreated, LandlockError> {
    let level = if best_effort {
        CompatLevel::BestEffort
    } else {
        CompatLevel::HardRequirement
    };
    let mut rs = Ruleset::default()
        .set_compatibility(level)
        .handle_access(rights::handled(abi))
        .map_err(|e| LandlockError::ruleset("handle filesystem rights", e))?;
    if tcp_on {
        rs = rs
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(|e| LandlockError::ruleset("handle TCP rights", e))?;
    }
    if scopes_on {
        let mut s = BitFlags::<Scope>::EMPTY;
        use crate::sandbox::mutation::{removed, Layer};
        if scopes.signal && !removed(Layer::SignalScope) {
            s |= Scope::Signal;
        }
        if scopes.abstract_unix && !removed(Layer::UnixScope) {
            s |= Scope::AbstractUnixSocket;
        }
        rs = rs
            .scope(s)
            .map_err(|e| LandlockError::ruleset("scope", e))?;
    }
    rs.create()
        .map_err(|e| LandlockError::ruleset("create ruleset", e))
}

fn scope_names(scopes: &Scopes) -> Vec<&'static str> {
    let mut v = Vec::with_capacity(2);
    if scopes.signal {
        v.push("signals");
    }
    if scopes.abstract_unix {
        v.push("abstract unix sockets");
    }
    v
}

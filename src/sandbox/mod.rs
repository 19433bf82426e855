//! The sandbox layers, prepared in the parent and applied by the child to
//! itself before exec (`child`).
//!
//! [`prepare`] turns a [`Plan`] into ready-to-apply layers — the Landlock
//! ruleset fd with every rule added, the compiled seccomp programs, the
//! rlimits, the run's cgroup — and decides, fail-closed, whether what the
//! policy asks for can be enforced on this kernel: anything missing is an
//! error unless `--best-effort`, and then it is listed in `missing`.

pub mod cgroup;
pub mod child;
pub mod landlock;
pub mod rlimits;
pub mod seccomp;

use std::collections::BTreeMap;

use nix::sys::resource::Resource;
use thiserror::Error;

use crate::plan::Plan;
use crate::policy::NetMode;
use rlimits::Mechanism;

#[derive(Debug, Error)]
pub enum SandboxError {
    #[error(transparent)]
    Landlock(#[from] landlock::LandlockError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("{what} cannot be enforced here: {why} (run with --best-effort to accept this)")]
    Unavailable { what: String, why: String },
}

/// Layers ready for the child.
pub struct Layers {
    pub landlock: Option<landlock::Prepared>,
    pub seccomp: Option<seccomp::Filters>,
    pub rlimits: Vec<(Resource, u64)>,
    pub cgroup: cgroup::RunCgroup,
    /// limit name -> mechanism label, for the result.
    pub limits: BTreeMap<String, String>,
    /// Protections asked for but not enforced (only with best_effort).
    pub missing: Vec<String>,
    pub landlock_abi: u32,
    /// Whether the seccomp filter will be installed.
    pub seccomp_enforced: bool,
    /// Whether a pid namespace is expected to be available.
    pub want_pidns: bool,
}

/// Whether this process may create a pid namespace (root, or unprivileged
/// user namespaces are allowed).
pub fn namespaces_available() -> bool {
    // Asked by the proxy set-up and by `prepare` in the same run: read the sysctls once.
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(probe_namespaces)
}

fn probe_namespaces() -> bool {
    if std::env::var_os("CAPSULE_NO_NAMESPACES").is_some() {
        return false;
    }
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return false;
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return false;
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return false;
    }
    true
}

/// Prepare every layer for `plan`. `proxy_port` is the loopback port the
/// child may connect to in proxy mode without a network namespace.
pub fn prepare(plan: &Plan, proxy_port: Option<u16>) -> Result<Layers, SandboxError> {
    let best_effort = plan.best_effort;
    let mut missing = Vec::new();
    let unavailable =
        |what: &str, why: &str, missing: &mut Vec<String>| -> Result<(), SandboxError> {
            if best_effort {
                let line = format!("{what}: {why}");
                tracing::warn!("not enforced (--best-effort): {line}");
                missing.push(line);
                Ok(())
            } else {
                Err(SandboxError::Unavailable {
                    what: what.into(),
                    why: why.into(),
                })
            }
        };
    let want_pidns = namespaces_available();
    if !want_pidns {
        tracing::info!(
            "no pid namespace available: descendants are killed through a child subreaper, and a setsid'd \
             grandchild can outlive capsule if capsule itself is SIGKILLed"
        );
    }

    // Landlock.
    let abi = landlock::kernel_abi();
    let scopes = landlock::Scopes {
        signal: abi >= 6,
        abstract_unix: abi >= 6,
    };
    if abi < 6 && !want_pidns {
        unavailable(
            "signal isolation",
            "needs Landlock ABI 6 (Linux 6.12) or a pid namespace (user namespaces are disabled)",
            &mut missing,
        )?;
    }
    if abi < 6 && plan.net.allow_unix_sockets {
        unavailable(
            "abstract Unix socket isolation",
            "allow_unix_sockets needs Landlock ABI 6 (Linux 6.12) to keep abstract sockets of the host out of reach",
            &mut missing,
        )?;
    }
    let net = landlock::NetRules {
        handle_tcp: plan.net.mode != NetMode::Unrestricted,
        connect_ports: proxy_port.into_iter().collect(),
    };
    let ll = landlock::prepare(&plan.fs, &net, &scopes, best_effort)?;
    tracing::debug!("landlock ruleset ready ({} rules)", ll.report().rules.len());
    missing.extend(ll.report().missing.iter().cloned());

    // seccomp.
    let filters = if seccomp::kernel_supports_seccomp() {
        Some(seccomp::build(&seccomp::SeccompOptions {
            net: plan.net.mode,
            allow_unix_sockets: plan.net.allow_unix_sockets,
            // Strictest until the spawn tells which namespaces the child got
            // (a CLONE_NEWPID can still fall back to a subreaper).
            private_ipc: false,
            private_pid: false,
            memfd_noexec_seal: false,
        })?)
    } else {
        unavailable(
            "seccomp",
            "the kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)",
            &mut missing,
        )?;
        None
    };

    tracing::debug!("seccomp filters ready");
    // Limits: a cgroup where capsule may make one, else rlimits.
    let l = &plan.limits;
    let root = nix::unistd::getuid().is_root();
    let cg = cgroup::RunCgroup::create(&plan.run_id, l.memory_bytes, l.max_processes);
    let memory = match (l.memory_bytes, cg.memory) {
        (None, _) => Mechanism::None,
        (Some(_), Some(m)) => m,
        (Some(_), None) => Mechanism::Rlimit,
    };
    let procs = match (l.max_processes, cg.procs) {
        (None, _) => Mechanism::None,
        (Some(_), Some(m)) => m,
        (Some(_), None) if !root => Mechanism::Rlimit,
        (Some(_), None) => {
            unavailable(
                "limits.max_processes",
                "capsule runs as root (RLIMIT_NPROC does not bind uid 0) and cannot create a cgroup with the pids controller beneath its own",
                &mut missing,
            )?;
            Mechanism::None
        }
    };
    let nproc_base = if procs == Mechanism::Rlimit && !want_pidns {
        rlimits::uid_process_count(nix::unistd::getuid().as_raw())
    } else {
        0
    };
    let mut limits = BTreeMap::new();
    if l.memory_bytes.is_some() {
        limits.insert("memory_mb".into(), memory.label("rlimit-data"));
    }
    if l.max_processes.is_some() {
        limits.insert("max_processes".into(), procs.label("rlimit-nproc"));
    }
    for (name, set) in [
        ("cpu_seconds", l.cpu_seconds.is_some()),
        ("max_file_size_mb", l.max_file_size_bytes.is_some()),
        ("max_open_files", l.max_open_files.is_some()),
    ] {
        if set {
            limits.insert(name.into(), "rlimit".into());
        }
    }
    Ok(Layers {
        landlock_abi: ll.report().abi,
        landlock: Some(ll),
        seccomp_enforced: filters.is_some(),
        seccomp: filters,
        rlimits: rlimits::plan(l, memory, procs, nproc_base),
        cgroup: cg,
        limits,
        missing,
        want_pidns,
    })
}

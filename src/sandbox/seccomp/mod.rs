//! seccomp: the syscall layer.
//!
//! Three classic-BPF filters are built in the parent, before fork
//! ([`build`]), and stacked by the child right before execve
//! ([`Filters::install`]):
//!
//! 1. **arch** (`arch.rs`, hand-built): a syscall from a foreign ABI (i386
//!    `int 0x80` on x86_64) or with an x32 number kills the process.
//! 2. **allowlist** (`allowlist.rs`): the known syscalls, in the shape of
//!    Docker's default profile, are allowed; anything else fails with ENOSYS,
//!    so a new kernel syscall never opens a hole and libc falls back
//!    (clone3 → clone).
//! 3. **deny** (`deny.rs`, `sockets.rs`): explicit denials with EPERM:
//!    ptrace, mounts, namespaces, bpf, keyrings, modules, io_uring, ...,
//!    `clone` with `CLONE_NEW*`, `personality` changes, `ioctl(TIOCSTI)`,
//!    and sockets by domain/type/protocol per network mode; everything else
//!    is allowed (by this filter).
//!
//! Precedence: seccompiler gives each filter one match action, so the policy
//! is split over filters. The kernel runs every installed filter and takes the
//! most restrictive action (KILL_PROCESS > ... > ERRNO > ... > ALLOW); among
//! equal actions the *most recently installed* filter's data wins
//! (`seccomp_run_filters` walks from the newest filter and replaces only on
//! a strictly more restrictive action). So "deny" is installed last: for a
//! syscall both unknown to the allowlist (ENOSYS) and denied (EPERM), the
//! caller sees EPERM. The arch filter's KILL beats both. Tested in `tests.rs`
//! (including the reversed order, which yields ENOSYS).
//!
//! Names are translated to numbers with per-architecture tables (`table.rs`);
//! x86_64 is the target, aarch64 builds too.

mod allowlist;
mod arch;
mod deny;
mod install;
mod sockets;
mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule};

use self::table::Arch;

pub use nix::errno::Errno;

/// The kernel's limit on one classic-BPF program (BPF_MAXINSNS).
pub const MAX_INSTRUCTIONS: usize = 4096;

/// What the filter depends on in the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompOptions {
    pub net: crate::policy::NetMode,
    pub allow_unix_sockets: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error(
        "seccomp: no filter for architecture {arch}: capsule builds seccomp filters for x86_64 \
         and aarch64 (use --best-effort to run without one)"
    )]
    UnsupportedArch { arch: &'static str },
    #[error("seccomp: compiling the {filter} filter failed: {source}")]
    Compile {
        filter: &'static str,
        #[source]
        source: seccompiler::BackendError,
    },
    #[error(
        "seccomp: the {filter} filter has {len} BPF instructions; the kernel accepts 1 to {max}"
    )]
    BadLength {
        filter: &'static str,
        len: usize,
        max: usize,
    },
}

/// One prepared filter.
struct Stage {
    name: &'static str,
    program: BpfProgram,
}

/// The prepared filters, in installation order. Built before fork; installing
/// them only reads this memory.
pub struct Filters {
    stages: Vec<Stage>,
    arch: Arch,
    opts: SeccompOptions,
    allowed_count: usize,
}

impl std::fmt::Debug for Filters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = f.debug_list();
        for s in &self.stages {
            l.entry(&format_args!("{} ({} insns)", s.name, s.program.len()));
        }
        l.finish()
    }
}

fn compile(
    name: &'static str,
    arch: Arch,
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    on_match: SeccompAction,
) -> Result<Stage, SeccompError> {
    let program = SeccompFilter::new(rules, mismatch, on_match, arch.target())
        .and_then(BpfProgram::try_from)
        .map_err(|source| match source {
            seccompiler::BackendError::FilterTooLarge(len) => SeccompError::BadLength {
                filter: name,
                len,
                max: MAX_INSTRUCTIONS,
            },
            source => SeccompError::Compile {
                filter: name,
                source,
            },
        })?;
    Ok(Stage { name, program })
}

fn check_length(stage: &Stage) -> Result<(), SeccompError> {
    let len = stage.program.len();
    if len == 0 || len > MAX_INSTRUCTIONS {
        return Err(SeccompError::BadLength {
            filter: stage.name,
            len,
            max: MAX_INSTRUCTIONS,
        });
    }
    Ok(())
}

/// Builds and length-checks the filters for `opts`. Call in the parent, before fork.
pub fn build(opts: &SeccompOptions) -> Result<Filters, SeccompError> {
    let arch = Arch::native().ok_or(SeccompError::UnsupportedArch {
        arch: std::env::consts::ARCH,
    })?;

    let arch_stage = Stage {
        name: "arch",
        program: arch::program(arch),
    };

    let allowed: BTreeMap<i64, Vec<SeccompRule>> = allowlist::ALLOWED
        .iter()
        .filter_map(|name| arch.nr(name))
        .map(|nr| (nr, Vec::new()))
        .collect();
    let allowed_count = allowed.len();
    let allow_stage = compile(
        "allowlist",
        arch,
        allowed,
        SeccompAction::Errno(libc::ENOSYS as u32),
        SeccompAction::Allow,
    )?;

    let deny_rules = deny::rules(arch, opts).map_err(|source| SeccompError::Compile {
        filter: "deny",
        source,
    })?;
    let deny_stage = compile(
        "deny",
        arch,
        deny_rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
    )?;

    let stages = vec![arch_stage, allow_stage, deny_stage];
    for stage in &stages {
        check_length(stage)?;
    }
    let filters = Filters {
        stages,
        arch,
        opts: *opts,
        allowed_count,
    };
    tracing::debug!(?filters, arch = arch.name(), "seccomp filters built");
    Ok(filters)
}

fn summarize(arch: Arch, opts: &SeccompOptions, allowed: usize, stages: &[Stage]) -> Vec<String> {
    let mut lines = Vec::new();
    let x32 = if arch == Arch::X86_64 {
        " and x32 syscall numbers"
    } else {
        ""
    };
    lines.push(format!(
        "seccomp ({}): syscalls from a foreign ABI (e.g. i386 int 0x80){x32} kill the process",
        arch.name()
    ));
    lines.push(format!(
        "seccomp: {allowed} known syscalls allowed; any other fails with ENOSYS \
         (clone3 → ENOSYS, libc falls back to clone)"
    ));
    for (group, names) in deny::DENIED {
        let present: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| arch.nr(n).is_some())
            .collect();
        if !present.is_empty() {
            lines.push(format!("seccomp: EPERM ({group}): {}", present.join(", ")));
        }
    }
    let flags: Vec<&str> = deny::CLONE_NEW_FLAGS.iter().map(|(n, _)| *n).collect();
    lines.push(format!(
        "seccomp: EPERM: clone with {}; personality other than 0 and 0xffffffff; \
         ioctl TIOCSTI/TIOCLINUX (low 32 bits of the request)",
        flags.join("|")
    ));
    lines.push(format!("seccomp: {}", sockets::describe(opts)));
    let sizes: Vec<String> = stages
        .iter()
        .map(|s| format!("{} {}", s.name, s.program.len()))
        .collect();
    lines.push(format!(
        "seccomp: BPF instructions per filter (limit {MAX_INSTRUCTIONS}): {}",
        sizes.join(", ")
    ));
    lines
}

impl Filters {
    /// Installs the filters on the calling thread, in order (arch, allowlist,
    /// deny). Call in the forked child right before execve.
    ///
    /// Async-signal-safe: no allocation, no locks; only `prctl` and `seccomp`
    /// syscalls. Sets `PR_SET_NO_NEW_PRIVS` itself (idempotent). On error the
    /// child may be left with some of the filters: it must not exec, only
    /// report the errno and `_exit`.
    pub fn install(&self) -> Result<(), Errno> {
        install::set_no_new_privs()?;
        for stage in &self.stages {
            install::install_one(&stage.program)?;
        }
        Ok(())
    }

    /// Human-readable lines for `--dry-run`, `check` and `doctor`.
    pub fn summary(&self) -> Vec<String> {
        summarize(self.arch, &self.opts, self.allowed_count, &self.stages)
    }

    /// Number of filters [`Filters::install`] loads.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Always false: [`build`] makes every filter.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }
}

/// Whether this kernel can enforce the filters: seccomp is configured
/// (`PR_GET_SECCOMP` answers) and filter mode knows the actions used here
/// (`SECCOMP_GET_ACTION_AVAIL`, Linux 4.14+, needed for KILL_PROCESS).
pub fn kernel_supports_seccomp() -> bool {
    // SAFETY: prctl with integer arguments only.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        return false;
    }
    [
        libc::SECCOMP_RET_KILL_PROCESS,
        libc::SECCOMP_RET_ERRNO,
        libc::SECCOMP_RET_ALLOW,
    ]
    .iter()
    .all(|action| {
        let action: u32 = *action;
        // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 through the pointer,
        // which points at a live local; it changes no state.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_GET_ACTION_AVAIL,
                0 as libc::c_uint,
                &action as *const u32,
            )
        };
        rc == 0
    })
}

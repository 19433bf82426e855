//! seccomp: the syscall layer.
//!
//! ONE classic-BPF program is built in the parent, before fork ([`build`]),
//! and installed by the child right before execve ([`Filters::install`]):
//!
//! 1. **architecture** (`arch.rs`): a syscall from a foreign ABI (i386
//!    `int 0x80` on x86_64) or with an x32 number kills the process;
//! 2. **allowlist** (`allowlist.rs`): the known syscalls, in the shape of
//!    Docker's default profile, are allowed; anything else fails with ENOSYS,
//!    so a new kernel syscall never opens a hole and libc falls back
//!    (clone3 → clone);
//! 3. **denials** (`deny.rs`, `sockets.rs`), which win over the allowlist:
//!    EPERM for ptrace, mounts, namespaces, bpf, keyrings, modules,
//!    io_uring, ..., `clone` with `CLONE_NEW*`, `personality` changes,
//!    `ioctl(TIOCSTI)`, chmod with a setuid/setgid bit, `execveat` with
//!    `AT_EMPTY_PATH` (fexecve), sockets by domain/type/protocol per network
//!    mode; and, unless [`SeccompOptions`] says the child has namespaces of
//!    its own, SysV/POSIX IPC and limit/priority/scheduling changes aimed at
//!    another process.
//!
//! The tables are declarative; `compile.rs` turns them into a binary search
//! over syscall-number intervals plus small argument checks (~110
//! instructions), because loading seccomp filters costs kernel time per
//! filter and per instruction (see there). The decisions are exactly those of
//! the three stacked seccompiler filters capsule installed before (arch,
//! allowlist, deny — deny last, so its EPERM beat the allowlist's ENOSYS);
//! `equivalence.rs` checks that with a BPF interpreter against that
//! reference (`oracle.rs`, seccompiler, a dev-dependency now), and `tests.rs`
//! checks the program in the real kernel.
//!
//! Names are translated to numbers with per-architecture tables (`table.rs`);
//! x86_64 and aarch64 each have their programs precompiled
//! (`precompiled.rs`), and the drift and equivalence tests check both on any host.

mod allowlist;
mod arch;
mod arg_check;
mod bpf;
mod compile;
mod deny;
#[cfg(test)]
mod equivalence;
mod install;
#[cfg(test)]
mod oracle;
mod precompiled;
pub mod signals;
mod sockets;
mod table;
#[cfg(test)]
mod tests;
pub mod truncate;

use self::bpf::SockFilter;
use self::table::Arch;

pub use self::compile::CompileError;
pub use self::signals::{listener_available, notify_filter, NetPart, NotifyFilter, Parts};
pub use self::truncate::{truncate_guard, TruncateGuard};

/// The number of syscall `name` on this machine's architecture.
pub fn native_nr(name: &str) -> Option<i64> {
    table::Arch::native().and_then(|a| a.nr(name))
}
pub use nix::errno::Errno;

/// The kernel's limit on one classic-BPF program (BPF_MAXINSNS).
pub const MAX_INSTRUCTIONS: usize = 4096;

/// What the filter depends on: the policy, and the namespaces the child is in.
///
/// `private_ipc` and `private_pid` default to `false`, the strictest program;
/// set one only when the child is certainly in that namespace (the clone that
/// made it succeeded), because each `true` gives the child back syscalls that
/// would otherwise reach the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompOptions {
    pub net: crate::policy::NetMode,
    pub allow_unix_sockets: bool,
    /// The child has an IPC namespace of its own (`CLONE_NEWIPC`). Without
    /// one, SysV IPC (shm*, msg*, sem*) and POSIX message queues (mq_*) fail
    /// with EPERM: they would reach the host's objects.
    pub private_ipc: bool,
    /// The child has a pid namespace of its own holding only the run
    /// (`CLONE_NEWPID`). Without one, limits, priority, CPU affinity,
    /// scheduling and I/O priority can be changed only for the calling process
    /// itself (pid/who argument 0; see `deny.rs`): otherwise the child could
    /// prlimit capsule to RLIMIT_FSIZE 0 or renice it.
    pub private_pid: bool,
    /// The child is in a network namespace of its own that holds nothing but
    /// its loopback (and, in proxy mode, the proxy's endpoint), and the policy
    /// did not turn the loopback off: AF_INET/AF_INET6 stream and datagram
    /// sockets (TCP and UDP) are allowed, because the namespace itself keeps
    /// them from reaching anything outside the run (see `sockets.rs`). Set
    /// only when the clone that made the namespace is certain to carry
    /// `CLONE_NEWNET`; `false` is the strict program.
    pub own_loopback: bool,
    /// `memfd_create` must carry `MFD_NOEXEC_SEAL` (else EPERM), so no memfd
    /// can ever be executed, also through `execve("/proc/self/fd/N")`, which
    /// no filter can tell apart. For where `vm.memfd_noexec = 2` cannot be set
    /// (no pid namespace, or an unprivileged user: the sysctl file belongs to
    /// the host's root). Only on kernels that know the flag (6.3+; older ones
    /// fail every memfd_create with it: EINVAL); and programs that create a
    /// memfd without the flag (Chromium, .NET's double mapping, Wayland
    /// clients) then fail. Not precompiled: the generator runs (~0.15 ms).
    pub memfd_noexec_seal: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error(
        "seccomp: no filter for architecture {arch}: capsule builds seccomp filters for x86_64 \
         and aarch64 (use --best-effort to run without one)"
    )]
    UnsupportedArch { arch: &'static str },
    #[error(transparent)]
    Compile(#[from] CompileError),
    #[error("seccomp: the filter has {len} BPF instructions; the kernel accepts 1 to {max}")]
    BadLength { len: usize, max: usize },
}

/// The prepared program. Built before fork; installing it only reads this memory.
pub struct Filters {
    program: std::borrow::Cow<'static, [SockFilter]>,
    arch: Arch,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests' summary"))]
    opts: SeccompOptions,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests' summary"))]
    allowed_count: usize,
    intervals: usize,
}

impl std::fmt::Debug for Filters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filters")
            .field("arch", &self.arch.name())
            .field("instructions", &self.program.len())
            .field("intervals", &self.intervals)
            .finish()
    }
}

/// Builds and length-checks the program for `opts`. Call in the parent, before fork.
pub fn build(opts: &SeccompOptions) -> Result<Filters, SeccompError> {
    let arch = Arch::native().ok_or(SeccompError::UnsupportedArch {
        arch: std::env::consts::ARCH,
    })?;
    let (program, allowed_count, intervals) = match precompiled::lookup(arch, opts) {
        Some(p) => (std::borrow::Cow::Borrowed(p.insns), p.allowed, p.intervals),
        None => {
            let c = compile::compile(arch, opts)?;
            (std::borrow::Cow::Owned(c.program), c.allowed, c.intervals)
        }
    };
    let len = program.len();
    if len == 0 || len > MAX_INSTRUCTIONS {
        return Err(SeccompError::BadLength {
            len,
            max: MAX_INSTRUCTIONS,
        });
    }
    let filters = Filters {
        program,
        arch,
        opts: *opts,
        allowed_count,
        intervals,
    };
    tracing::debug!(?filters, "seccomp program built");
    Ok(filters)
}

#[cfg(test)]
fn summarize(f: &Filters) -> Vec<String> {
    let (arch, opts) = (f.arch, &f.opts);
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
        "seccomp: {} known syscalls allowed; any other fails with ENOSYS \
         (clone3 → ENOSYS, libc falls back to clone)",
        f.allowed_count
    ));
    for (group, names) in deny::denied(opts) {
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
         ioctl TIOCSTI/TIOCLINUX and btrfs subvolume create/snapshot/destroy/setflags, fscrypt key add/remove (low 32 bits of the request)",
        flags.join("|")
    ));
    lines.push(
        "seccomp: EPERM: chmod/fchmod/fchmodat/fchmodat2 with a setuid or setgid bit in the mode \
         (in every mode: no setuid/setgid file is ever made); execveat with AT_EMPTY_PATH \
         (fexecve, the way to execute a memfd); memfd_create with MFD_HUGETLB (hugetlbfs ignores \
         the exec seal); mmap with MAP_HUGETLB (the host's huge page pool, which no memory cgroup counts)"
            .to_string(),
    );
    if opts.memfd_noexec_seal {
        lines.push(
            "seccomp: EPERM: memfd_create without MFD_NOEXEC_SEAL (no memfd is ever executable)"
                .to_string(),
        );
    }
    if !opts.private_pid {
        lines.push(format!(
            "seccomp: EPERM (no pid namespace of its own): {} aimed at another process \
             (pid/who not 0; setpriority/ioprio_set only for the caller or its process group); \
             prlimit64 reading another process's limits stays allowed",
            deny::OWN_PROCESS_ONLY.join(", ")
        ));
    }
    lines.push(format!("seccomp: {}", sockets::describe(opts)));
    lines.push(format!(
        "seccomp: one BPF program, {} instructions (limit {MAX_INSTRUCTIONS}): binary search \
         over {} syscall-number intervals",
        f.program.len(),
        f.intervals
    ));
    lines
}

impl Filters {
    /// Installs the program on the calling thread. Call in the command stage
    /// right before execve.
    ///
    /// Fit for a stage that shares the supervisor's memory: no allocation, no
    /// locks, only raw `prctl` and `seccomp` system calls. Sets `PR_SET_NO_NEW_PRIVS` itself (idempotent). On error the
    /// child must not exec, only report the errno and `_exit`.
    pub fn install(&self) -> Result<(), Errno> {
        install::set_no_new_privs()?;
        install::install_one(&self.program)
    }
}

/// What the unit tests read of a program; nothing shipped prints or rebuilds
/// it (`check` and `doctor` describe the seccomp layer from the kernel probe).
#[cfg(test)]
impl Filters {
    /// Human-readable lines: what the program refuses, and how.
    pub fn summary(&self) -> Vec<String> {
        summarize(self)
    }

    /// Number of BPF instructions in the program.
    pub fn instructions(&self) -> usize {
        self.program.len()
    }

    /// The options this program was built for.
    pub fn options(&self) -> SeccompOptions {
        self.opts
    }

    /// The program for the same policy and a child that has (or has not) IPC
    /// and pid namespaces of its own: a stored program is only pointed at,
    /// nothing is copied.
    pub fn for_namespaces(
        &self,
        private_ipc: bool,
        private_pid: bool,
    ) -> Result<Filters, SeccompError> {
        build(&SeccompOptions {
            private_ipc,
            private_pid,
            own_loopback: self.opts.own_loopback && private_pid,
            ..self.opts
        })
    }
}

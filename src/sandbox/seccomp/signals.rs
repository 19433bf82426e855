//! The notify filter: signal isolation where neither a pid namespace nor
//! Landlock's signal scope (ABI 6) exists, and the network guard of proxy
//! mode without a network namespace. One program, because the kernel gives a
//! process's filters one listener at most.
//!
//! A second, small program, installed by the command stage right after the
//! main one (so last before exec) with `SECCOMP_FILTER_FLAG_NEW_LISTENER`
//! when a part is notified. The listener goes to the supervisor
//! (`guards::notify_loop`: `guards::signals`, `guards::network`, ...), which decides each
//! notified call: for a signal the target must be a process of the run; a
//! connect must go to the proxy, and the supervisor makes it itself.
//!
//! ```text
//! foreign ABI, x32 number                     KILL_PROCESS (as the main program)
//! signals part:
//! kill(0, _)                                  ALLOW   the caller's own process group
//! kill(-1, _)                                 EPERM   every process the user may signal
//! kill(pid, _), tkill, tgkill,
//!   rt_sigqueueinfo, rt_tgsigqueueinfo        USER_NOTIF (the supervisor decides)
//! fcntl(_, F_SETOWN, _)                       USER_NOTIF (SIGIO/SIGURG, or any F_SETSIG
//!                                                         signal, go to the owner)
//! fcntl(_, F_SETOWN_EX, _)                    EPERM   the owner is behind a pointer
//! ioctl(_, FIOSETOWN | SIOCSPGRP, _)          EPERM   likewise
//! pidfd_send_signal                           ENOSYS  the target is behind a descriptor
//! network part (proxy mode on the host's network, see [`NetPart`]):
//! sendto/sendmmsg (flags arg 3),
//!   sendmsg (flags arg 2) with MSG_FASTOPEN   EPERM   TCP Fast Open connects without
//!                                                     connect(), unseen by Landlock
//! connect, listen                             USER_NOTIF (NetPart::Guard)
//! bind                                        USER_NOTIF (NetPart::Guard, NetPart::UnixBind)
//! listen                                      EACCES  (NetPart::NoListen)
//! memfd part (6.3+ where vm.memfd_noexec = 2 cannot be set for the run):
//! memfd_create                                USER_NOTIF (the supervisor makes it sealed,
//!                                                         and keeps it for the memory watchdog)
//!                                             ENOSYS  (memory_mb without a cgroup nor a listener)
//! metadata part (no mount namespace, see `guards::metadata`):
//! utime(s), futimesat, utimensat, the chmod,
//!   chown, setxattr and removexattr families  USER_NOTIF (the supervisor makes the call where a
//!                                                         write grant covers the target)
//! setxattrat, removexattrat, file_setattr     ENOSYS  arguments behind a struct
//! ioctl(_, FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS
//!   | FS_IOC_FSSETXATTR | FS_IOC(32)_SETVERSION
//!   | EXT4_IOC_MIGRATE | FS_IOC_SET_ENCRYPTION_POLICY
//!   | FS_IOC_ENABLE_VERITY, _)                EPERM   chattr and inode changes outside
//!                                                     write grants
//! SysV part (memory_mb without a cgroup, an unprivileged capsule's view):
//! shmget                                      ENOSPC  kernel.shmall cannot bound it there
//! pidfd part (no pid namespace: pidfd_open takes any host pid):
//! ioctl(_, type 0xFF nr 11 = PIDFD_GET_INFO,
//!   any size and direction, _)                EPERM   a host process's parent, uids, cgroup
//! process part (max_processes as root without a cgroup):
//! clone, fork, vfork                          USER_NOTIF (the supervisor counts the run's tasks)
//! anything else                               ALLOW   (the main program decides)
//! ```
//!
//! seccomp applies the most restrictive action of all filters, so ALLOW here
//! never overrides the main program's ERRNO or KILL. A pointer or descriptor
//! argument can be changed by another thread between the supervisor's check
//! and the kernel's own read, so calls that name their target that way are
//! refused outright, never checked: pidfd_send_signal fails with ENOSYS, as on
//! a kernel before 5.1, and programs (Go, systemd) fall back to kill(), which
//! is checked. connect and listen name theirs through a descriptor and a
//! pointer too, which is why the supervisor never lets them continue on an IP
//! socket: it takes the socket itself (pidfd_getfd) and makes the call with
//! its own copy of the address. The integer arguments read here (pid, cmd,
//! request, flags) are 32-bit in the kernel: only their low words are compared.

use super::arch::prologue;
use super::bpf::{
    arg_low, ret_errno, stmt, SockFilter, ALU_AND_K, JEQ_K, JSET_K, LD_W_ABS, RET_ALLOW, RET_K,
};
use super::install::StackedFilter;
use super::table::Arch;
use super::SeccompError;

/// The tag of the channel message that carries the listener to the supervisor.
pub const LISTENER_TAG: i32 = 0x7367; // "sg"

/// SECCOMP_RET_USER_NOTIF (linux/seccomp.h).
pub(super) const RET_USER_NOTIF: u32 = 0x7fc0_0000;

/// fcntl commands (asm-generic/fcntl.h; the same on x86_64 and aarch64).
pub const F_SETOWN: u32 = 8;
pub const F_SETOWN_EX: u32 = 15;
/// The type and number bits of an ioctl request (asm-generic/ioctl.h).
const IOC_TYPE_NR: u32 = 0xffff;
/// `PIDFD_GET_INFO` = `_IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info)`:
/// its type and number (linux/pidfd.h; the same on x86_64 and aarch64).
const PIDFD_GET_INFO_TYPE_NR: u32 = 0xff0b;
/// Socket ioctls that set the owner (asm-generic/sockios.h).
pub const FIOSETOWN: u32 = 0x8901;
pub const SIOCSPGRP: u32 = 0x8902;

/// The syscalls whose target pid the supervisor checks.
pub const NOTIFIED: &[&str] = &[
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
];

/// MSG_FASTOPEN (linux/socket.h).
pub const MSG_FASTOPEN: u32 = 0x2000_0000;

/// The network part of the notify filter: proxy mode where the run shares
/// the host's network namespace (no user namespaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetPart {
    /// None: no proxy, or the run has a network namespace of its own.
    None,
    /// The network guard: connect and listen go to the supervisor (a
    /// listener is needed); TCP Fast Open is refused.
    Guard,
    /// No listener to be had: Landlock's TCP rules hold connect, listen is
    /// refused (EACCES: it would bind an ephemeral port on every address),
    /// TCP Fast Open is refused.
    NoListen,
    /// Only TCP Fast Open refused: listen must work on Unix sockets
    /// (`allow_unix_sockets`) and no listener can be had.
    FastOpenOnly,
    /// No proxy, the host's network namespace and `allow_unix_sockets`:
    /// bind goes to the supervisor, which refuses the host's abstract names
    /// (a listener is needed; `guards::network`).
    UnixBind,
}

/// What the stacked program holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The signal checks (a listener is needed).
    pub signals: bool,
    pub net: NetPart,
    /// The process guard: clone, fork and vfork go to the supervisor, which
    /// counts the run's tasks (`limits.max_processes` as root without a
    /// cgroup; a listener is needed). clone3 stays ENOSYS (the main program).
    pub procs: bool,
    /// The memfd guard: memfd_create goes to the supervisor, which makes the
    /// memfd itself with MFD_NOEXEC_SEAL and hands it over (Linux 6.3+, where
    /// `vm.memfd_noexec = 2` cannot be set for the run; a listener is needed).
    pub memfd: bool,
    /// memfd_create fails with ENOSYS: memory_mb without a cgroup where no
    /// listener can be had (the memory watchdog could not count memfds).
    pub memfd_enosys: bool,
    /// The metadata guard (no mount namespace): the chmod, chown, utime and
    /// setxattr/removexattr families go to the supervisor, which makes each
    /// call itself where a write grant covers the target
    /// (`guards::metadata`; a listener is needed). setxattrat,
    /// removexattrat and file_setattr fail with ENOSYS, the
    /// FS_IOC_SETFLAGS/FS_IOC_FSSETXATTR ioctls with EPERM.
    pub meta: bool,
    /// shmget fails with ENOSPC: memory_mb without a cgroup in the run's own
    /// IPC namespace where capsule cannot bound it with kernel.shmall (an
    /// unprivileged capsule): segments no process maps are in no process's
    /// memory, and the memory watchdog could not see them.
    pub sysv_refuse: bool,
    /// msgget and semget fail with ENOSPC: memory_mb without a cgroup in the
    /// run's own IPC namespace. Message queues and semaphore arrays are
    /// kernel memory no process's counters show, and the namespace's
    /// defaults let a run hold gigabytes of them (32000 queues of 16 KiB,
    /// 32000 arrays of 32000 semaphores).
    pub ipc_refuse: bool,
    /// `exec --explain`: the path-taking calls ([`OBSERVED`]) go to the
    /// supervisor, which records the path and always answers CONTINUE
    /// (`guards::observer`; a listener is needed).
    pub observe: bool,
    /// No pid namespace: `ioctl(pidfd, PIDFD_GET_INFO)` fails with EPERM.
    /// `pidfd_open` takes any pid of the host there, and the ioctl (Linux
    /// 6.13+) answers with no ptrace check what the host's /proc, out of
    /// reach, would: a process's parent, uids, gids and cgroup (red team 8).
    /// The kernel takes it by type and number only (any size, any
    /// direction: an extensible struct), so only those 16 bits are compared.
    pub pidfd_info: bool,
}

/// The calls `exec --explain` observes (never decides).
pub const OBSERVED: &[&str] = &[
    "open",
    "creat",
    "openat",
    "openat2",
    "execve",
    "execveat",
    "truncate",
    "mkdir",
    "mkdirat",
    "rmdir",
    "unlink",
    "unlinkat",
    "mknod",
    "mknodat",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
];

/// The metadata guard's notified calls (`guards::metadata::NOTIFIED`).
pub const META_NOTIFIED: &[&str] = &[
    "utime",
    "utimes",
    "futimesat",
    "utimensat",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "lchown",
    "fchown",
    "fchownat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
];

/// Metadata calls whose arguments lie behind a struct: refused (ENOSYS).
pub const META_REFUSED: &[&str] = &["setxattrat", "removexattrat", "file_setattr"];

/// ioctls that change a file's attributes (chattr) or its inode, which an
/// owner (as root: of every file) may make on a descriptor opened only for
/// reading, and no Landlock ABI sees: refused (EPERM) with the metadata
/// guard. FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS, FS_IOC_FSSETXATTR; the inode's
/// generation (FS_IOC_SETVERSION, FS_IOC32_SETVERSION: NFS handles go
/// stale); ext4's extent migration (EXT4_IOC_MIGRATE); an encryption policy
/// on an empty directory (FS_IOC_SET_ENCRYPTION_POLICY); fs-verity, after
/// which the file can never be written again (FS_IOC_ENABLE_VERITY).
pub const META_IOCTLS: &[u32] = &[
    0x4008_6602,
    0x4004_6602,
    0x401c_5820,
    0x4008_7602,
    0x4004_7602,
    0x0000_6609,
    0x800c_6613,
    0x4080_6685,
];

impl Parts {
    pub const SIGNALS: Parts = Parts {
        signals: true,
        net: NetPart::None,
        procs: false,
        memfd: false,
        memfd_enosys: false,
        meta: false,
        sysv_refuse: false,
        ipc_refuse: false,
        observe: false,
        pidfd_info: false,
    };

    /// Whether the program notifies, and so needs a listener.
    pub fn notifies(self) -> bool {
        self.signals
            || self.procs
            || self.memfd
            || self.meta
            || self.observe
            || matches!(self.net, NetPart::Guard | NetPart::UnixBind)
    }

    /// Whether there is anything to install.
    pub fn any(self) -> bool {
        self.notifies()
            || self.net != NetPart::None
            || self.memfd_enosys
            || self.sysv_refuse
            || self.ipc_refuse
            || self.pidfd_info
    }
}

/// One instruction, jumps by label (resolved by [`assemble`]).
#[derive(Clone, Copy)]
enum Insn {
    Load(u32),
    /// if A == k goto label (else the next instruction)
    JeqTo(u32, Label),
    /// if A & k != 0 goto label (else the next instruction)
    JsetTo(u32, Label),
    /// A &= k
    And(u32),
    Ret(u32),
    Here(Label),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Kill,
    Fcntl,
    Ioctl,
    Allow,
    Notify,
    Eperm,
    Eacces,
    Enosys,
    Enospc,
    FastOpen2,
    FastOpen3,
}

fn assemble(code: &[Insn]) -> Result<Vec<SockFilter>, SeccompError> {
    let mut at = Vec::new();
    let mut n = 0usize;
    for i in code {
        match i {
            Insn::Here(l) => at.push((*l, n)),
            _ => n += 1,
        }
    }
    let pos = |l: Label| at.iter().find(|(x, _)| *x == l).map(|(_, p)| *p);
    let mut out = Vec::with_capacity(n);
    for i in code {
        match *i {
            Insn::Load(k) => out.push(stmt(LD_W_ABS, k)),
            Insn::Ret(k) => out.push(stmt(RET_K, k)),
            Insn::And(k) => out.push(stmt(ALU_AND_K, k)),
            Insn::JeqTo(k, l) | Insn::JsetTo(k, l) => {
                let here = out.len() + 1;
                let jt = pos(l)
                    .and_then(|p| p.checked_sub(here))
                    .and_then(|d| u8::try_from(d).ok())
                    .ok_or(SeccompError::BadLength {
                        len: n,
                        max: super::MAX_INSTRUCTIONS,
                    })?;
                let op = if matches!(i, Insn::JeqTo(..)) {
                    JEQ_K
                } else {
                    JSET_K
                };
                out.push(super::bpf::jump(op, k, jt, 0));
            }
            Insn::Here(_) => {}
        }
    }
    Ok(out)
}

/// The program for `arch` (see the module docs): a dispatch on the syscall
/// number, the checks of the arguments it jumps to, and the verdicts.
pub(super) fn program(arch: Arch, parts: Parts) -> Result<Vec<SockFilter>, SeccompError> {
    let mut code: Vec<Insn> = Vec::new();
    dispatch(arch, parts, &mut code);
    argument_checks(parts, &mut code);
    verdicts(&mut code);
    let mut prog = prologue(arch);
    prog.extend(assemble(&code)?);
    Ok(prog)
}

/// With A = the syscall number: a jump for each syscall `parts` decides
/// (those this architecture has), in this order; anything else is allowed.
fn dispatch(arch: Arch, parts: Parts, code: &mut Vec<Insn>) {
    let nr = |name: &str| arch.nr(name).map(|n| n as u32);
    for (name, to) in jumps(parts) {
        if let Some(n) = nr(name) {
            code.push(Insn::JeqTo(n, to));
        }
    }
    code.push(Insn::Ret(RET_ALLOW));
}

/// The syscalls `parts` decides, each with where it jumps.
fn jumps(parts: Parts) -> Vec<(&'static str, Label)> {
    let mut jumps: Vec<(&str, Label)> = Vec::new();
    if parts.signals || parts.meta || parts.pidfd_info {
        jumps.push(("ioctl", Label::Ioctl));
    }
    if parts.meta {
        jumps.extend(META_NOTIFIED.iter().map(|n| (*n, Label::Notify)));
        jumps.extend(META_REFUSED.iter().map(|n| (*n, Label::Enosys)));
    }
    if parts.signals {
        jumps.extend([
            ("kill", Label::Kill),
            ("fcntl", Label::Fcntl),
            ("pidfd_send_signal", Label::Enosys),
        ]);
        jumps.extend(
            NOTIFIED
                .iter()
                .filter(|n| **n != "kill")
                .map(|n| (*n, Label::Notify)),
        );
    }
    if !matches!(parts.net, NetPart::None | NetPart::UnixBind) {
        jumps.extend([
            ("sendto", Label::FastOpen3),
            ("sendmmsg", Label::FastOpen3),
            ("sendmsg", Label::FastOpen2),
        ]);
    }
    if parts.memfd {
        jumps.push(("memfd_create", Label::Notify));
    } else if parts.memfd_enosys {
        jumps.push(("memfd_create", Label::Enosys));
    }
    if parts.sysv_refuse {
        jumps.push(("shmget", Label::Enospc));
    }
    if parts.ipc_refuse {
        jumps.extend([("msgget", Label::Enospc), ("semget", Label::Enospc)]);
    }
    if parts.procs {
        jumps.extend([
            ("clone", Label::Notify),
            ("fork", Label::Notify),
            ("vfork", Label::Notify),
        ]);
    }
    match parts.net {
        NetPart::Guard => jumps.extend([
            ("connect", Label::Notify),
            ("listen", Label::Notify),
            ("bind", Label::Notify),
        ]),
        NetPart::UnixBind => jumps.push(("bind", Label::Notify)),
        NetPart::NoListen => jumps.push(("listen", Label::Eacces)),
        NetPart::None | NetPart::FastOpenOnly => {}
    }
    if parts.observe {
        jumps.extend(OBSERVED.iter().map(|n| (*n, Label::Notify)));
        if !parts.signals {
            // With the signal checks these are the judge's (above).
            jumps.extend(NOTIFIED.iter().map(|n| (*n, Label::Notify)));
        }
    }
    jumps
}

/// The checks of the arguments: kill's pid and fcntl's command (signals),
/// ioctl's request (signals, metadata), the send calls' MSG_FASTOPEN (net).
fn argument_checks(parts: Parts, code: &mut Vec<Insn>) {
    use Insn::*;
    if parts.signals {
        code.extend([
            Here(Label::Kill),
            Load(arg_low(0)),
            JeqTo(0, Label::Allow),
            JeqTo(u32::MAX, Label::Eperm),
            Ret(RET_USER_NOTIF),
            Here(Label::Fcntl),
            Load(arg_low(1)),
            JeqTo(F_SETOWN, Label::Notify),
            JeqTo(F_SETOWN_EX, Label::Eperm),
            Ret(RET_ALLOW),
        ]);
    }
    if parts.signals || parts.meta || parts.pidfd_info {
        code.extend([Here(Label::Ioctl), Load(arg_low(1))]);
        if parts.signals {
            code.extend([
                JeqTo(FIOSETOWN, Label::Eperm),
                JeqTo(SIOCSPGRP, Label::Eperm),
            ]);
        }
        if parts.meta {
            code.extend(META_IOCTLS.iter().map(|c| JeqTo(*c, Label::Eperm)));
        }
        if parts.pidfd_info {
            // Last: it changes A.
            code.extend([
                And(IOC_TYPE_NR),
                JeqTo(PIDFD_GET_INFO_TYPE_NR, Label::Eperm),
            ]);
        }
        code.push(Ret(RET_ALLOW));
    }
    if !matches!(parts.net, NetPart::None | NetPart::UnixBind) {
        code.extend([
            Here(Label::FastOpen2),
            Load(arg_low(2)),
            JsetTo(MSG_FASTOPEN, Label::Eperm),
            Ret(RET_ALLOW),
            Here(Label::FastOpen3),
            Load(arg_low(3)),
            JsetTo(MSG_FASTOPEN, Label::Eperm),
            Ret(RET_ALLOW),
        ]);
    }
}

/// The shared verdicts every check jumps to.
fn verdicts(code: &mut Vec<Insn>) {
    use Insn::*;
    code.extend([
        Here(Label::Allow),
        Ret(RET_ALLOW),
        Here(Label::Notify),
        Ret(RET_USER_NOTIF),
        Here(Label::Eperm),
        Ret(ret_errno(libc::EPERM)),
        Here(Label::Eacces),
        Ret(ret_errno(libc::EACCES)),
        Here(Label::Enosys),
        Ret(ret_errno(libc::ENOSYS)),
        Here(Label::Enospc),
        Ret(ret_errno(libc::ENOSPC)),
    ]);
}

/// The notify filter, built in the parent before the clone; the command
/// stage installs it with [`StackedFilter::install_with_listener`] when
/// [`Parts::notifies`], else with [`StackedFilter::install`].
pub type NotifyFilter = StackedFilter;

/// Build the notify filter with `parts` for this architecture. Call in the parent.
pub fn notify_filter(parts: Parts) -> Result<NotifyFilter, SeccompError> {
    StackedFilter::native("NotifyFilter", |arch| program(arch, parts))
}

/// Whether this process's children can get a signal filter with a listener:
/// the kernel knows SECCOMP_RET_USER_NOTIF and the listener flag, and no
/// filter capsule runs under already has a listener (EBUSY: capsule nested in
/// another capsule on this path). Asked once per process, by installing a
/// filter with a listener in a short-lived child (`sys::notify`).
pub fn listener_available() -> Result<(), nix::errno::Errno> {
    static PROBED: std::sync::OnceLock<Result<(), nix::errno::Errno>> = std::sync::OnceLock::new();
    *PROBED.get_or_init(|| {
        let arch = Arch::native().ok_or(nix::errno::Errno::ENOSYS)?;
        let prog = program(arch, Parts::SIGNALS).map_err(|_| nix::errno::Errno::EINVAL)?;
        crate::sys::notify::probe_listener(&prog)
    })
}

#[cfg(test)]
mod tests {
    use super::super::arch::{AUDIT_ARCH_X86_64, X32_SYSCALL_BIT};
    use super::super::bpf::{run, run_stacked, Data, RET_KILL_PROCESS};
    use super::super::equivalence::{answer, audit_arch};
    use super::*;

    fn decide(arch: Arch, name: &str, args: [u64; 6]) -> u32 {
        answer(&program(arch, Parts::SIGNALS).unwrap(), arch, name, args)
    }

    fn a(x: &[u64]) -> [u64; 6] {
        let mut out = [0u64; 6];
        out[..x.len()].copy_from_slice(x);
        out
    }

    const EPERM: u32 = ret_errno(libc::EPERM);
    const ENOSYS: u32 = ret_errno(libc::ENOSYS);
    const NEG1: u64 = 0xffff_ffff;

    #[test]
    fn decisions_per_syscall_on_both_architectures() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            // kill: own group allowed, everyone refused, a pid or group checked.
            assert_eq!(decide(arch, "kill", a(&[0, 9])), RET_ALLOW);
            assert_eq!(decide(arch, "kill", a(&[NEG1, 9])), EPERM);
            assert_eq!(decide(arch, "kill", a(&[u64::MAX, 0])), EPERM);
            assert_eq!(decide(arch, "kill", a(&[1234, 9])), RET_USER_NOTIF);
            assert_eq!(decide(arch, "kill", a(&[0xffff_fb2e, 9])), RET_USER_NOTIF);
            // High bits are ignored by the kernel (pid_t), and so here.
            assert_eq!(decide(arch, "kill", a(&[1 << 32, 9])), RET_ALLOW);
            assert_eq!(decide(arch, "kill", a(&[0xdead_0000_ffff_ffff, 9])), EPERM);
            for name in ["tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"] {
                for pid in [0, 1, 1234, NEG1] {
                    assert_eq!(
                        decide(arch, name, a(&[pid, pid, 9])),
                        RET_USER_NOTIF,
                        "{name}"
                    );
                }
            }
            assert_eq!(decide(arch, "pidfd_send_signal", a(&[3, 9])), ENOSYS);
            // fcntl: only the owner commands.
            let fcntl = |cmd: u64, arg: u64| decide(arch, "fcntl", a(&[3, cmd, arg]));
            assert_eq!(fcntl(u64::from(F_SETOWN), 1234), RET_USER_NOTIF);
            assert_eq!(fcntl(u64::from(F_SETOWN) | 1 << 32, 1234), RET_USER_NOTIF);
            assert_eq!(fcntl(u64::from(F_SETOWN_EX), 0x1000), EPERM);
            for cmd in [0, 1, 2, 3, 4, 9, 10, 16, 1024, 1030] {
                assert_eq!(fcntl(cmd, 1234), RET_ALLOW, "fcntl cmd {cmd}");
            }
            let ioctl = |req: u64| decide(arch, "ioctl", a(&[3, req, 0x1000]));
            assert_eq!(ioctl(u64::from(FIOSETOWN)), EPERM);
            assert_eq!(ioctl(u64::from(SIOCSPGRP)), EPERM);
            assert_eq!(ioctl(u64::from(SIOCSPGRP) | 0xffff_ffff_0000_0000), EPERM);
            for req in [0x5401u64, 0x8903, 0x8904, 0x5421, 0x541b] {
                assert_eq!(ioctl(req), RET_ALLOW, "ioctl {req:#x}");
            }
            for name in ["getpid", "read", "write", "openat", "clone", "execve"] {
                assert_eq!(decide(arch, name, a(&[1234, 8, 1234])), RET_ALLOW, "{name}");
            }
        }
    }

    #[test]
    fn the_network_part_per_variant_on_both_architectures() {
        const EACCES: u32 = ret_errno(libc::EACCES);
        let fo = u64::from(MSG_FASTOPEN);
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let go = |net: NetPart, name: &str, args: [u64; 6]| {
                let p = program(
                    arch,
                    Parts {
                        signals: false,
                        net,
                        procs: false,
                        memfd: false,
                        memfd_enosys: false,
                        meta: false,
                        sysv_refuse: false,
                        ipc_refuse: false,
                        observe: false,
                        pidfd_info: false,
                    },
                )
                .unwrap();
                answer(&p, arch, name, args)
            };
            for net in [NetPart::Guard, NetPart::NoListen, NetPart::FastOpenOnly] {
                // TCP Fast Open: refused by its flag, wherever the flags are.
                assert_eq!(go(net, "sendto", a(&[3, 0, 1, fo, 0x1000, 16])), EPERM);
                assert_eq!(go(net, "sendto", a(&[3, 0, 1, fo | 0x40, 0, 0])), EPERM);
                assert_eq!(go(net, "sendmmsg", a(&[3, 0x1000, 1, fo])), EPERM);
                assert_eq!(go(net, "sendmsg", a(&[3, 0x1000, fo])), EPERM);
                assert_eq!(go(net, "sendmsg", a(&[3, 0x1000, fo << 32])), RET_ALLOW);
                for flags in [0, 0x40, 0x4000, 0x8000] {
                    assert_eq!(go(net, "sendto", a(&[3, 0, 1, flags, 0, 0])), RET_ALLOW);
                    assert_eq!(go(net, "sendmsg", a(&[3, 0x1000, flags])), RET_ALLOW);
                    assert_eq!(go(net, "sendmmsg", a(&[3, 0x1000, 1, flags])), RET_ALLOW);
                }
                // Signals are not this part's; bind only the guard's.
                let bind = if net == NetPart::Guard {
                    RET_USER_NOTIF
                } else {
                    RET_ALLOW
                };
                assert_eq!(go(net, "bind", a(&[3, 0x1000, 16])), bind);
                assert_eq!(go(net, "kill", a(&[1234, 9])), RET_ALLOW);
            }
            // No proxy, the host's abstract names: only bind is notified.
            let ub = NetPart::UnixBind;
            assert_eq!(go(ub, "bind", a(&[3, 0x1000, 16])), RET_USER_NOTIF);
            for (name, args) in [
                ("connect", a(&[3, 0x1000, 16])),
                ("listen", a(&[3, 5])),
                ("sendto", a(&[3, 0, 1, fo, 0x1000, 16])),
                ("sendmsg", a(&[3, 0x1000, 0])),
                ("kill", a(&[1234, 9])),
            ] {
                assert_eq!(go(ub, name, args), RET_ALLOW, "{name}");
            }
            assert_eq!(
                go(NetPart::Guard, "connect", a(&[3, 0x1000, 16])),
                RET_USER_NOTIF
            );
            assert_eq!(go(NetPart::Guard, "listen", a(&[3, 5])), RET_USER_NOTIF);
            assert_eq!(
                go(NetPart::NoListen, "connect", a(&[3, 0x1000, 16])),
                RET_ALLOW
            );
            assert_eq!(go(NetPart::NoListen, "listen", a(&[3, 5])), EACCES);
            assert_eq!(
                go(NetPart::FastOpenOnly, "connect", a(&[3, 0x1000, 16])),
                RET_ALLOW
            );
            assert_eq!(go(NetPart::FastOpenOnly, "listen", a(&[3, 5])), RET_ALLOW);
            // Both parts in one program: each keeps its answers.
            let both = program(
                arch,
                Parts {
                    signals: true,
                    net: NetPart::Guard,
                    procs: true,
                    memfd: true,
                    memfd_enosys: false,
                    meta: true,
                    sysv_refuse: false,
                    ipc_refuse: false,
                    observe: true,
                    pidfd_info: true,
                },
            )
            .unwrap();
            // PIDFD_GET_INFO at any size and direction is refused, after
            // the exact requests (the mask changes A); others pass.
            for req in [
                0xc040_ff0bu64,
                0xc048_ff0b,
                0x8040_ff0b,
                0x0000_ff0b,
                0xffff_ffff_c040_ff0b,
            ] {
                assert_eq!(
                    answer(&both, arch, "ioctl", a(&[3, req, 0x1000])),
                    EPERM,
                    "{req:#x}"
                );
            }
            assert_eq!(
                answer(&both, arch, "ioctl", a(&[3, u64::from(FIOSETOWN), 0])),
                EPERM
            );
            for req in [0x5401u64, 0xc040_ff0c, 0xff0b_0000, 0x8004_6601] {
                assert_eq!(
                    answer(&both, arch, "ioctl", a(&[3, req, 0x1000])),
                    RET_ALLOW,
                    "{req:#x}"
                );
            }
            // The observer (--explain) notifies the path calls, and the
            // metadata guard keeps its own.
            for name in ["openat", "execve", "unlinkat", "renameat2", "chmod"] {
                if arch.nr(name).is_some() {
                    assert_eq!(
                        answer(&both, arch, name, a(&[3, 0x1000, 0])),
                        RET_USER_NOTIF,
                        "{name}"
                    );
                }
            }
            assert_eq!(answer(&both, arch, "read", a(&[3, 0x1000, 0])), RET_ALLOW);
            // memory_mb without a cgroup nor a listener: memfd_create refused.
            let refuse = Parts {
                memfd_enosys: true,
                sysv_refuse: true,
                ipc_refuse: true,
                ..Parts {
                    signals: false,
                    net: NetPart::None,
                    procs: false,
                    memfd: false,
                    memfd_enosys: false,
                    meta: false,
                    sysv_refuse: false,
                    ipc_refuse: false,
                    observe: false,
                    pidfd_info: false,
                }
            };
            assert!(refuse.any() && !refuse.notifies());
            let p = program(arch, refuse).unwrap();
            assert_eq!(
                answer(&p, arch, "memfd_create", a(&[0x1000, 0])),
                ret_errno(libc::ENOSYS)
            );
            assert_eq!(
                answer(&p, arch, "shmget", a(&[0, 1 << 20, 0o1600])),
                ret_errno(libc::ENOSPC)
            );
            for name in ["msgget", "semget"] {
                assert_eq!(
                    answer(&p, arch, name, a(&[0, 32000, 0o1600])),
                    ret_errno(libc::ENOSPC),
                    "{name}"
                );
            }
            assert_eq!(answer(&p, arch, "msgsnd", a(&[3, 0, 1, 0])), RET_ALLOW);
            assert_eq!(answer(&p, arch, "kill", a(&[1234, 9])), RET_ALLOW);
            let d = |name: &str, args: [u64; 6]| answer(&both, arch, name, args);
            assert_eq!(d("kill", a(&[1234, 9])), RET_USER_NOTIF);
            assert_eq!(d("kill", a(&[NEG1, 9])), EPERM);
            assert_eq!(d("connect", a(&[3, 0x1000, 16])), RET_USER_NOTIF);
            assert_eq!(d("sendto", a(&[3, 0, 1, fo, 0, 0])), EPERM);
            assert_eq!(d("pidfd_send_signal", a(&[3, 9])), ENOSYS);
            assert_eq!(d("read", a(&[3, 0, 1])), RET_ALLOW);
            assert_eq!(d("clone", a(&[0x11, 0, 0])), RET_USER_NOTIF);
            assert_eq!(d("memfd_create", a(&[0x1000, 1])), RET_USER_NOTIF);
            if arch == Arch::X86_64 {
                assert_eq!(d("fork", a(&[])), RET_USER_NOTIF);
                assert_eq!(d("vfork", a(&[])), RET_USER_NOTIF);
            }
            // Without the process part, clone is the main program's business.
            let p = program(arch, Parts::SIGNALS).unwrap();
            assert_eq!(answer(&p, arch, "clone", a(&[0x11, 0, 0])), RET_ALLOW);
            assert_eq!(answer(&p, arch, "memfd_create", a(&[0x1000, 1])), RET_ALLOW);
        }
    }

    #[test]
    fn foreign_abis_are_killed() {
        let p = program(Arch::X86_64, Parts::SIGNALS).unwrap();
        let kill = Arch::X86_64.nr("kill").unwrap() as u32;
        let go = |arch: u32, nr: u32| {
            run(
                &p,
                &Data {
                    nr,
                    arch,
                    args: [1234, 9, 0, 0, 0, 0],
                },
            )
        };
        // i386 kill (37) through int 0x80.
        assert_eq!(go(3 | 0x4000_0000, 37), RET_KILL_PROCESS);
        assert_eq!(
            go(AUDIT_ARCH_X86_64, kill | X32_SYSCALL_BIT),
            RET_KILL_PROCESS
        );
        assert_eq!(go(AUDIT_ARCH_X86_64, u32::MAX), RET_ALLOW);
        let p = program(Arch::Aarch64, Parts::SIGNALS).unwrap();
        let kill = Arch::Aarch64.nr("kill").unwrap() as u32;
        assert_eq!(
            run(
                &p,
                &Data {
                    nr: kill,
                    arch: AUDIT_ARCH_X86_64,
                    args: [1234, 9, 0, 0, 0, 0],
                }
            ),
            RET_KILL_PROCESS
        );
    }

    #[test]
    fn the_main_program_still_wins_where_it_is_stricter() {
        // Stacked with the main program, an ERRNO or KILL of the main program
        // beats USER_NOTIF and ALLOW here.
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let opts = super::super::SeccompOptions {
                net: crate::policy::NetMode::None,
                allow_unix_sockets: false,
                private_ipc: false,
                private_pid: false,
                own_loopback: false,
                memfd_noexec_seal: false,
            };
            let main = super::super::compile::compile(arch, &opts).unwrap().program;
            let sig = program(arch, Parts::SIGNALS).unwrap();
            let stack = [main.clone(), sig.clone()];
            let data = |name: &str, args: [u64; 6]| Data {
                nr: arch.nr(name).unwrap() as u32,
                arch: audit_arch(arch),
                args,
            };
            // ptrace: EPERM from the main program.
            assert_eq!(run_stacked(&stack, &data("ptrace", a(&[16, 1]))), EPERM);
            // kill(pid): the main program allows, this one notifies.
            assert_eq!(
                run_stacked(&stack, &data("kill", a(&[1234, 9]))),
                RET_USER_NOTIF
            );
            // An unknown syscall number: ENOSYS from the main program.
            let unknown = Data {
                nr: 1000,
                arch: audit_arch(arch),
                args: [0; 6],
            };
            assert_eq!(run_stacked(&stack, &unknown), ENOSYS);
            // Every syscall the main program refuses stays refused.
            for nr in 0..600u32 {
                let d = Data {
                    nr,
                    arch: audit_arch(arch),
                    args: [1234, 8, 1234, 0, 0, 0],
                };
                let alone = run(&main, &d);
                if alone != RET_ALLOW {
                    assert_eq!(run_stacked(&stack, &d), alone, "nr {nr}");
                }
            }
        }
    }

    /// In the kernel, with no listener left (the filter's descriptor closes
    /// at exec here, as it does if capsule's guard goes away): every checked
    /// call fails with ENOSYS, the ones decided in BPF keep their answers.
    #[test]
    fn without_a_listener_the_checked_calls_fail_closed() {
        if listener_available().is_err() {
            eprintln!("SKIP: no seccomp listener here (nested under one?)");
            return;
        }
        let opts = super::super::SeccompOptions {
            net: crate::policy::NetMode::None,
            allow_unix_sockets: false,
            private_ipc: false,
            private_pid: false,
            own_loopback: false,
            memfd_noexec_seal: false,
        };
        let main = super::super::build(&opts).unwrap();
        let sig = notify_filter(Parts::SIGNALS).unwrap();
        let script = r#"
import ctypes, errno, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
N = NUMBERS
pp = os.getppid()
s, t = socket.socketpair()
arg = ctypes.c_int(pp)
out = [
    sc(N["kill"], pp, 0), sc(N["kill"], 0, 0), sc(N["kill"], -1, 0),
    sc(N["tkill"], os.getpid(), 0), sc(N["tgkill"], os.getpid(), os.getpid(), 0),
    sc(N["pidfd_send_signal"], 0, 0, 0, 0),
    sc(N["fcntl"], s.fileno(), 8, pp), sc(N["fcntl"], s.fileno(), 3, 0),
    sc(N["ioctl"], s.fileno(), 0x8901, ctypes.addressof(arg)),
]
print(" ".join(out))
"#;
        let arch = Arch::native().unwrap();
        let numbers: Vec<String> = [
            "kill",
            "tkill",
            "tgkill",
            "pidfd_send_signal",
            "fcntl",
            "ioctl",
        ]
        .iter()
        .map(|n| format!("\"{n}\": {}", arch.nr(n).unwrap()))
        .collect();
        let script = script.replace("NUMBERS", &format!("{{{}}}", numbers.join(", ")));
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", &script]).stdin(std::process::Stdio::null());
        crate::sys::pre_exec_for_tests(&mut cmd, move || {
            main.install().map_err(std::io::Error::from)?;
            sig.install()
                .map(drop)
                .map_err(std::io::Error::from_raw_os_error)
        });
        let out = cmd.output().expect("python3");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim(),
            "ENOSYS ok EPERM ENOSYS ENOSYS ENOSYS ENOSYS ok EPERM",
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

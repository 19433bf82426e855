//! Explicit denials, EPERM. They win over the allowlist: a syscall both
//! unknown to the allowlist and denied here fails with EPERM.
//!
//! Whole syscalls are denied by name (grouped, with the reason, for
//! `--dry-run`; [`denied`] adds the IPC group when the child shares the
//! host's IPC namespace); some syscalls are denied only for some arguments
//! ([`arg_checks`]). Every argument comparison reads the low 32 bits, which
//! is all the kernel reads of these arguments (`int`, `pid_t`, `umode_t`,
//! `unsigned int`), except prlimit64's `new_limit` pointer, which is compared
//! whole (both 32-bit words) with NULL:
//!
//! * `clone` with any `CLONE_NEW*` flag (new namespaces). The legacy `clone`
//!   takes the flags in arg0 (x86_64 and aarch64) and the kernel reads only
//!   their low 32 bits. (`CLONE_NEWTIME` is 0x80, inside `CSIGNAL`: clone
//!   cannot ask for it; `unshare`, which can, is denied whole. `clone3`
//!   carries its flags behind a pointer no filter can read, so it fails with ENOSYS.)
//! * `personality` with anything but the query 0xffffffff and `PER_LINUX` 0.
//! * `ioctl` with `TIOCSTI` (push bytes into the terminal's input: run
//!   commands in the parent's shell) or `TIOCLINUX`. The kernel reads the
//!   request as `unsigned int`, so the comparison is on the low 32 bits:
//!   `TIOCSTI | 1 << 32` must not slip past (CVE-2019-10063). Also btrfs's
//!   subvolume ioctls ([`BTRFS_SUBVOLUME_IOCTLS`]): snapshots copy a
//!   readable subvolume's carve-outs into a write grant, and without a
//!   view make and change subvolumes where the run may only read; and
//!   fscrypt's key ioctls ([`FSCRYPT_KEY_IOCTLS`]): the run removed the
//!   user's key from the file system's keyring, locking the user's
//!   encrypted files on the host.
//! * `chmod`, `fchmod`, `fchmodat`, `fchmodat2` with `S_ISUID` or `S_ISGID`
//!   in the mode, in every mode and for every path: Landlock has no hook for
//!   chmod, and a setuid-root copy of a shell made by a sandboxed root command
//!   is a host compromise. A file created with those bits (`open(O_CREAT,
//!   04755)`) loses them at its first write, since the child has no
//!   CAP_FSETID; so only chmod can put them on a file with content.
//! * `execveat` with `AT_EMPTY_PATH`: `fexecve()`, which executes a file by
//!   descriptor; the way to run a memfd, whose file Landlock does not see
//!   (it lives on the kernel's internal shmem mount). `execveat` by path
//!   (dirfd + name) stays allowed: Landlock checks it like `execve`.
//!   `execve("/proc/self/fd/N")` of a memfd cannot be told apart by a filter;
//!   `vm.memfd_noexec = 2` in the run's pid namespace closes it.
//! * Without a pid namespace of its own ([`SeccompOptions::private_pid`]
//!   false): calls that change another process ([`OWN_PROCESS_ONLY`]) work
//!   only on the caller: `prlimit64` with pid 0, or any pid with a NULL
//!   `new_limit` (reading limits stays allowed: glibc's getrlimit and
//!   setrlimit pass pid 0, `prlimit --pid` reads); `setpriority` and
//!   `ioprio_set` with who 0 and which = process or process group (the
//!   child's own session: PRIO_USER 0 would be every process of the uid,
//!   capsule included); `sched_setaffinity`, `sched_setscheduler`,
//!   `sched_setparam`, `sched_setattr` with pid 0. The cost: a call naming
//!   the caller by its own pid or a thread by its tid (glibc's
//!   `pthread_setaffinity_np`, `pthread_setschedparam`) fails with EPERM,
//!   and `renice -p` of another process of the run too.
//! * With [`SeccompOptions::memfd_noexec_seal`]: `memfd_create` without
//!   `MFD_NOEXEC_SEAL`, which makes every memfd unexecutable, also by path.
//! * `open` and `openat` with access mode 3 (`flags & O_ACCMODE == 3`), in
//!   every mode. Linux reserves that mode for "check read and write
//!   permission, give a descriptor for ioctls only"; the descriptor has
//!   neither FMODE_READ nor FMODE_WRITE, so Landlock's open hook asks for no
//!   right at all: with `O_TRUNC` it empties a file outside every grant below
//!   Landlock ABI 3 (where the truncate right does not exist), and at every
//!   ABI it reaches ioctls such as `FS_IOC_SETFLAGS` on such files. Only a
//!   few device tools use the mode (old floppy and LILO utilities); no
//!   runtime, shell or build tool does. `openat2` carries its flags behind a
//!   pointer and fails with ENOSYS instead (not in the allowlist).
//! * `mmap` with `MAP_HUGETLB` ([`MAP_HUGETLB`]): the host's huge page pool,
//!   which no memory cgroup or rlimit counts.
//! * `socket` by domain, type and protocol, and `socketpair` by type, see
//!   `sockets.rs`.

use super::arg_check::ArgCheck;
use super::truncate::{O_RDWR, O_WRONLY};
use super::{sockets, SeccompOptions};

/// Syscalls denied whole, by group: (what the group is, the syscalls).
pub(super) const DENIED: &[(&str, &[&str])] = &[
    (
        "tracing other processes",
        &[
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "process_madvise",
            "pidfd_getfd",
            "kcmp",
        ],
    ),
    (
        "mounts and root changes",
        &[
            "mount",
            "umount2",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "move_mount",
            "open_tree",
            "open_tree_attr",
            "mount_setattr",
            "pivot_root",
            "chroot",
        ],
    ),
    ("namespaces", &["unshare", "setns"]),
    (
        "kernel attack surface",
        &[
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "fanotify_init",
        ],
    ),
    ("kernel keyrings", &["keyctl", "add_key", "request_key"]),
    (
        "kernel modules and kexec",
        &[
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
        ],
    ),
    (
        "host administration",
        &[
            "acct",
            "swapon",
            "swapoff",
            "reboot",
            "sethostname",
            "setdomainname",
            "quotactl",
            "quotactl_fd",
            "lookup_dcookie",
            "vhangup",
            "nfsservctl",
            "uselib",
            "syslog",
        ],
    ),
    (
        "clock changes",
        &["settimeofday", "clock_settime", "adjtimex", "clock_adjtime"],
    ),
    ("file handles", &["name_to_handle_at", "open_by_handle_at"]),
    ("raw I/O ports", &["iopl", "ioperm"]),
];

/// `CLONE_NEW*` flags that `clone` can carry (linux/sched.h).
pub(super) const CLONE_NEW_FLAGS: &[(&str, u32)] = &[
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
];

/// `personality` values that stay allowed: `PER_LINUX` and the query.
pub(super) const PERSONALITY_ALLOWED: &[u32] = &[0, 0xffff_ffff];

/// Terminal ioctls that are denied (asm-generic/ioctls.h; same values on x86_64 and aarch64).
pub(super) const TIOCSTI: u32 = 0x5412;
pub(super) const TIOCLINUX: u32 = 0x541C;

/// btrfs's subvolume ioctls (linux/btrfs.h; `_IOW`/`_IOWR` of magic 0x94,
/// the same on x86_64 and aarch64). No path operation, so no Landlock hook
/// and no view sees them, only an ioctl on a directory the run may open:
/// `SNAP_CREATE` copied a whole readable subvolume, its `deny` carve-outs
/// and credential files included, into a write grant where the run read
/// them (every path), and without a read-only view it (and
/// `SUBVOL_CREATE`) made directories of the run's choosing in directories
/// it may only read, `SNAP_DESTROY` (with `user_subvol_rm_allowed`) removes
/// a subvolume there, and `SUBVOL_SETFLAGS` and `SET_RECEIVED_SUBVOL`
/// change a subvolume it may only read (`tests/escape_redteam9.rs`).
pub(super) const BTRFS_SUBVOLUME_IOCTLS: &[u32] = &[
    0x5000_9401, // BTRFS_IOC_SNAP_CREATE
    0x5000_940e, // BTRFS_IOC_SUBVOL_CREATE
    0x5000_940f, // BTRFS_IOC_SNAP_DESTROY
    0x5000_9417, // BTRFS_IOC_SNAP_CREATE_V2
    0x5000_9418, // BTRFS_IOC_SUBVOL_CREATE_V2
    0x4008_941a, // BTRFS_IOC_SUBVOL_SETFLAGS
    0xc0c8_9425, // BTRFS_IOC_SET_RECEIVED_SUBVOL
    0xc0c0_9425, // BTRFS_IOC_SET_RECEIVED_SUBVOL_32 (the compat layout)
    0x5000_943f, // BTRFS_IOC_SNAP_DESTROY_V2
];

/// fscrypt's key ioctls (linux/fscrypt.h, `_IOWR('f', ...)`): the master
/// keys live in the file system's keyring, keyed by the user who added
/// them, and these take any descriptor of that file system (no path
/// operation, no Landlock hook; a read-only mount does not stop them). A
/// run that may only read an encrypted directory took its key identifier
/// and removed the user's key, locking the user's files on the host; keys
/// it adds stay in the keyring after it, charged to the user's quota.
/// Reading a policy or a key's status stays allowed.
pub(super) const FSCRYPT_KEY_IOCTLS: &[u32] = &[
    0xc050_6617, // FS_IOC_ADD_ENCRYPTION_KEY
    0xc040_6618, // FS_IOC_REMOVE_ENCRYPTION_KEY
    0xc040_6619, // FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS
];

/// Every ioctl request refused in every mode (EPERM).
pub(super) fn denied_ioctls() -> Vec<u32> {
    let mut v = vec![TIOCSTI, TIOCLINUX];
    v.extend_from_slice(BTRFS_SUBVOLUME_IOCTLS);
    v.extend_from_slice(FSCRYPT_KEY_IOCTLS);
    v
}

/// SysV IPC and POSIX message queues: denied whole when the child shares the
/// host's IPC namespace. (x86_64 and aarch64 have no multiplexed `ipc()`;
/// i386 and s390x do, and capsule builds no filter for them.)
pub(super) const IPC: &[&str] = &[
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
];

/// The group name of [`IPC`] in [`denied`].
const IPC_GROUP: &str = "SysV IPC and POSIX message queues (the host's: no IPC namespace)";

/// Syscalls denied whole for `opts`: [`DENIED`], plus [`IPC`] without a
/// private IPC namespace.
pub(super) fn denied(opts: &SeccompOptions) -> Vec<(&'static str, &'static [&'static str])> {
    let mut v = DENIED.to_vec();
    if !opts.private_ipc {
        v.push((IPC_GROUP, IPC));
    }
    v
}

/// `S_ISUID | S_ISGID`: never set by chmod.
pub(super) const SETID_BITS: u32 = 0o6000;

/// The chmod family and the index of its mode argument.
pub(super) const CHMOD_MODE_ARG: &[(&str, u8)] = &[
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("fchmodat2", 2),
];

/// `AT_EMPTY_PATH` (linux/fcntl.h), in `execveat`'s flags (arg 4).
pub(super) const AT_EMPTY_PATH: u32 = 0x1000;
pub(super) const EXECVEAT_FLAGS_ARG: u8 = 4;

/// Calls that change a process named by their arguments; without a pid
/// namespace of its own, the child may aim them only at itself.
#[cfg_attr(
    not(test),
    expect(dead_code, reason = "the tests check arg_checks against it")
)]
pub(super) const OWN_PROCESS_ONLY: &[&str] = &[
    "prlimit64",
    "setpriority",
    "ioprio_set",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
];

/// `MFD_NOEXEC_SEAL` (linux/memfd.h, 6.3+), in `memfd_create`'s flags (arg 1).
pub(super) const MFD_NOEXEC_SEAL: u32 = 0x0008;
/// `MFD_HUGETLB` (linux/memfd.h): refused in every mode. hugetlbfs ignores
/// the exec seal (its setattr never asks for F_SEAL_EXEC), so a hugetlb
/// memfd can be chmod'ed executable and run through /proc/self/fd/N even
/// under vm.memfd_noexec = 2 or the memfd guard (a red-team finding).
pub(super) const MFD_HUGETLB: u32 = 0x0004;

/// `MAP_HUGETLB` (linux/mman.h, the same on x86_64 and aarch64), in
/// `mmap`'s flags (arg 3): refused in every mode. Huge pages come from the
/// host's pool, which neither a memory cgroup (v1; v2 without
/// `memory_hugetlb_accounting`) nor RLIMIT_DATA counts: a run under
/// `memory_mb: 64` held 100 MiB of them, and can take a pool the host
/// reserved for its databases (`tests/escape_redteam9.rs`). Programs that
/// ask for huge pages fall back when the call fails, as on a host
/// without a pool. The bit lies in the low 32 bits the check reads.
pub(super) const MAP_HUGETLB: u32 = 0x0004_0000;
/// `mmap`'s flags argument.
pub(super) const MMAP_FLAGS_ARG: u8 = 3;

/// `setpriority`'s `which` values allowed with who 0: PRIO_PROCESS, PRIO_PGRP.
pub(super) const PRIO_OWN: &[u32] = &[0, 1];
/// `ioprio_set`'s `which` values allowed with who 0: IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP.
pub(super) const IOPRIO_OWN: &[u32] = &[1, 2];

/// `fcntl`'s F_SETLEASE command (linux/fcntl.h: F_LINUX_SPECIFIC_BASE + 0).
pub(super) const F_SETLEASE: u32 = 1024;

/// `open`'s and `openat`'s flags argument.
pub(super) const OPEN_FLAGS_ARG: &[(&str, u8)] = &[("open", 1), ("openat", 2)];
/// Refuses access mode 3 (both bits of `O_ACCMODE`, 0o3) in flags argument `arg`.
fn no_access_mode_3(arg: u8) -> ArgCheck {
    use ArgCheck::{Deny, Pass};
    ArgCheck::AnyBit {
        arg,
        mask: O_WRONLY,
        then: Box::new(ArgCheck::AnyBit {
            arg,
            mask: O_RDWR,
            then: Box::new(Deny),
            otherwise: Box::new(Pass),
        }),
        otherwise: Box::new(Pass),
    }
}

/// The syscalls denied only for some arguments, by name, with their check.
pub(super) fn arg_checks(opts: &SeccompOptions) -> Vec<(&'static str, ArgCheck)> {
    use ArgCheck::{Deny, Pass};
    let clone_new = CLONE_NEW_FLAGS
        .iter()
        .fold(0, |mask, &(_, flag)| mask | flag);
    let mut checks = vec![
        (
            "clone",
            ArgCheck::AnyBit {
                arg: 0,
                mask: clone_new,
                then: Box::new(Deny),
                otherwise: Box::new(Pass),
            },
        ),
        (
            "personality",
            ArgCheck::one_of(0, PERSONALITY_ALLOWED, Pass, Deny),
        ),
        ("ioctl", ArgCheck::one_of(1, &denied_ioctls(), Deny, Pass)),
        // A lease needs only a descriptor opened for reading (and, as root,
        // nothing else): a read lease held every host process that opened
        // a file the run may only read for writing blocked for
        // fs.lease-break-time (45 s) per open. No Landlock ABI, mount flag
        // or namespace sees it.
        ("fcntl", ArgCheck::one_of(1, &[F_SETLEASE], Deny, Pass)),
        ("socket", sockets::check(opts)),
        ("socketpair", sockets::pair_check(opts)),
        (
            "execveat",
            ArgCheck::AnyBit {
                arg: EXECVEAT_FLAGS_ARG,
                mask: AT_EMPTY_PATH,
                then: Box::new(Deny),
                otherwise: Box::new(Pass),
            },
        ),
    ];
    for &(name, arg) in OPEN_FLAGS_ARG {
        checks.push((name, no_access_mode_3(arg)));
    }
    for &(name, arg) in CHMOD_MODE_ARG {
        checks.push((
            name,
            ArgCheck::AnyBit {
                arg,
                mask: SETID_BITS,
                then: Box::new(Deny),
                otherwise: Box::new(Pass),
            },
        ));
    }
    let sealed = if opts.memfd_noexec_seal {
        ArgCheck::AnyBit {
            arg: 1,
            mask: MFD_NOEXEC_SEAL,
            then: Box::new(Pass),
            otherwise: Box::new(Deny),
        }
    } else {
        Pass
    };
    checks.push((
        "memfd_create",
        ArgCheck::AnyBit {
            arg: 1,
            mask: MFD_HUGETLB,
            then: Box::new(Deny),
            otherwise: Box::new(sealed),
        },
    ));
    checks.push((
        "mmap",
        ArgCheck::AnyBit {
            arg: MMAP_FLAGS_ARG,
            mask: MAP_HUGETLB,
            then: Box::new(Deny),
            otherwise: Box::new(Pass),
        },
    ));
    if !opts.private_pid {
        checks.extend(only_own_process());
    }
    checks
}

/// Without a private pid namespace: the scheduling and limit calls act only
/// on the caller's own process (pid 0), or only read.
fn only_own_process() -> Vec<(&'static str, ArgCheck)> {
    use ArgCheck::{Deny, Pass};
    let pid0 = |arg| ArgCheck::one_of(arg, &[0], Pass, Deny);
    let mut checks = Vec::new();
    // prlimit64(pid, resource, new_limit, old_limit).
    checks.push((
        "prlimit64",
        ArgCheck::one_of(
            0,
            &[0],
            Pass,
            ArgCheck::Null {
                arg: 2,
                then: Box::new(Pass),
                otherwise: Box::new(Deny),
            },
        ),
    ));
    // setpriority(which, who, prio), ioprio_set(which, who, ioprio).
    checks.push(("setpriority", ArgCheck::one_of(0, PRIO_OWN, pid0(1), Deny)));
    checks.push(("ioprio_set", ArgCheck::one_of(0, IOPRIO_OWN, pid0(1), Deny)));
    for name in [
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setparam",
        "sched_setattr",
    ] {
        checks.push((name, pid0(0)));
    }
    checks
}

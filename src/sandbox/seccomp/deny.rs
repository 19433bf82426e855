//! Explicit denials, EPERM. They win over the allowlist: a syscall both
//! unknown to the allowlist and denied here fails with EPERM.
//!
//! Whole syscalls are denied by name (grouped, with the reason, for
//! `--dry-run`); four syscalls are denied only for some arguments
//! ([`arg_checks`]). Every argument comparison reads the low 32 bits, which is
//! all the kernel reads of these arguments:
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
//!   `TIOCSTI | 1 << 32` must not slip past (CVE-2019-10063).
//! * `socket` by domain, type and protocol, see `sockets.rs`.

use super::compile::ArgCheck;
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

/// The syscalls denied only for some arguments, by name, with their check.
pub(super) fn arg_checks(opts: &SeccompOptions) -> Vec<(&'static str, ArgCheck)> {
    use ArgCheck::{Deny, Pass};
    let clone_new = CLONE_NEW_FLAGS
        .iter()
        .fold(0, |mask, &(_, flag)| mask | flag);
    vec![
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
        (
            "ioctl",
            ArgCheck::one_of(1, &[TIOCSTI, TIOCLINUX], Deny, Pass),
        ),
        ("socket", sockets::check(opts)),
    ]
}

//! Filter 3: explicit denials, EPERM. Installed last so that its EPERM wins
//! over the allowlist's ENOSYS (see `mod.rs` on precedence).
//!
//! Whole syscalls are denied by name (grouped, with the reason, for
//! `--dry-run`); four syscalls are denied only for some arguments:
//!
//! * `clone` with any `CLONE_NEW*` flag (new namespaces). The legacy `clone`
//!   takes the flags in arg0 (x86_64 and aarch64) and the kernel reads only
//!   their low 32 bits, so each flag is tested with `MaskedEq` on the low
//!   word. (`CLONE_NEWTIME` is 0x80, inside `CSIGNAL`: clone cannot ask for
//!   it; `unshare`, which can, is denied whole. `clone3` carries its flags
//!   behind a pointer no filter can read, so it fails with ENOSYS.)
//! * `personality` with anything but the query 0xffffffff and `PER_LINUX` 0.
//! * `ioctl` with `TIOCSTI` (push bytes into the terminal's input: run
//!   commands in the parent's shell) or `TIOCLINUX`. The kernel reads the
//!   request as `unsigned int`, so the comparison is on the low 32 bits:
//!   `TIOCSTI | 1 << 32` must not slip past (CVE-2019-10063).
//! * `socket` by domain, type and protocol, see `sockets.rs`.

use std::collections::BTreeMap;

use seccompiler::{BackendError, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};

use super::{sockets, table::Arch, SeccompOptions};

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
pub(super) const CLONE_NEW_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
];

/// `personality` values that stay allowed: `PER_LINUX` and the query.
pub(super) const PERSONALITY_ALLOWED: &[u64] = &[0, 0xffff_ffff];

/// Terminal ioctls that are denied (asm-generic/ioctls.h; same values on x86_64 and aarch64).
pub(super) const TIOCSTI: u64 = 0x5412;
pub(super) const TIOCLINUX: u64 = 0x541C;

pub(super) fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// Rules matching when 32-bit argument `arg` is NOT one of `allowed`, each
/// rule also requiring `also`. `allowed` must be sorted and without duplicates.
///
/// seccompiler's rules are an OR of ANDs; "not in {a < b < c}" is the union
/// of the gaps: `x < a`, `a < x < b`, `b < x < c`, `x > c` (empty gaps left out).
pub(super) fn not_in(
    arg: u8,
    allowed: &[u64],
    also: &[SeccompCondition],
) -> Result<Vec<SeccompRule>, BackendError> {
    let mut gaps: Vec<Vec<SeccompCondition>> = Vec::new();
    match (allowed.first(), allowed.last()) {
        (Some(&first), Some(&last)) => {
            if first > 0 {
                gaps.push(vec![cond(arg, SeccompCmpOp::Lt, first)?]);
            }
            for w in allowed.windows(2) {
                if w[1] > w[0] + 1 {
                    gaps.push(vec![
                        cond(arg, SeccompCmpOp::Gt, w[0])?,
                        cond(arg, SeccompCmpOp::Lt, w[1])?,
                    ]);
                }
            }
            if last < u64::from(u32::MAX) {
                gaps.push(vec![cond(arg, SeccompCmpOp::Gt, last)?]);
            }
        }
        // Nothing allowed: every value matches (`x >= 0` always holds).
        _ => gaps.push(vec![cond(arg, SeccompCmpOp::Ge, 0)?]),
    }
    gaps.into_iter()
        .map(|mut conds| {
            conds.extend_from_slice(also);
            SeccompRule::new(conds)
        })
        .collect()
}

/// The denial rules, keyed by syscall number of `arch`. An empty rule list
/// means "deny whatever the arguments".
pub(super) fn rules(
    arch: Arch,
    opts: &SeccompOptions,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
    let mut map = BTreeMap::new();
    for (_, names) in DENIED {
        for name in *names {
            if let Some(nr) = arch.nr(name) {
                map.insert(nr, Vec::new());
            }
        }
    }
    if let Some(nr) = arch.nr("clone") {
        let rules = CLONE_NEW_FLAGS
            .iter()
            .map(|&(_, flag)| SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?]))
            .collect::<Result<Vec<_>, _>>()?;
        map.insert(nr, rules);
    }
    if let Some(nr) = arch.nr("personality") {
        map.insert(nr, not_in(0, PERSONALITY_ALLOWED, &[])?);
    }
    if let Some(nr) = arch.nr("ioctl") {
        let rules = [TIOCSTI, TIOCLINUX]
            .iter()
            .map(|&req| SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, req)?]))
            .collect::<Result<Vec<_>, _>>()?;
        map.insert(nr, rules);
    }
    if let Some(nr) = arch.nr("socket") {
        map.insert(nr, sockets::rules(opts)?);
    }
    Ok(map)
}

//! The reference: the three stacked filters capsule used to install, built
//! with seccompiler from the same tables (tests only).
//!
//! 1. arch: the prologue (`arch.rs`) followed by `return ALLOW`;
//! 2. allowlist: the allowed syscalls → ALLOW, anything else → ENOSYS;
//! 3. deny: the denied syscalls and the argument rules → EPERM, anything else → ALLOW.
//!
//! The rules here are written the way seccompiler wants them (an OR of ANDs of
//! 32-bit comparisons), independently of the decision trees the compact
//! program is generated from; the tests check that both decide the same.

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::bpf::SockFilter;
use super::deny::{
    denied, AT_EMPTY_PATH, CHMOD_MODE_ARG, CLONE_NEW_FLAGS, EXECVEAT_FLAGS_ARG, F_SETLEASE,
    IOPRIO_OWN, MAP_HUGETLB, MFD_HUGETLB, MFD_NOEXEC_SEAL, MMAP_FLAGS_ARG, OPEN_FLAGS_ARG,
    PERSONALITY_ALLOWED, PRIO_OWN, SETID_BITS,
};
use super::sockets::{
    dgram_types, pair_types, stream_types, AF_INET, AF_INET6, AF_NETLINK, AF_UNIX, IPPROTO_TCP,
    IPPROTO_UDP, NETLINK_ROUTE,
};
use super::table::Arch;
use super::truncate::{O_RDWR, O_WRONLY};

/// Access mode 3: both bits of `O_ACCMODE`.
const O_ACCMODE: u32 = O_WRONLY | O_RDWR;
use super::{allowlist, arch, SeccompOptions};
use crate::policy::NetMode;

fn target(arch: Arch) -> TargetArch {
    match arch {
        Arch::X86_64 => TargetArch::x86_64,
        Arch::Aarch64 => TargetArch::aarch64,
    }
}

/// A comparison of the low 32 bits of argument `arg` (seccompiler's `Dword`).
pub(super) fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u32,
) -> Result<SeccompCondition, BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, u64::from(value))
}

/// Rules matching when 32-bit argument `arg` is NOT one of `allowed`, each
/// rule also requiring `also`. `allowed` must be sorted and without duplicates.
///
/// "not in {a < b < c}" is the union of the gaps: `x < a`, `a < x < b`,
/// `b < x < c`, `x > c` (empty gaps left out).
pub(super) fn not_in(
    arg: u8,
    allowed: &[u32],
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
            if last < u32::MAX {
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

/// The domains `socket` may create, sorted.
fn allowed_domains(opts: &SeccompOptions) -> Vec<u32> {
    let mut d = vec![AF_NETLINK];
    if opts.allow_unix_sockets {
        d.push(AF_UNIX);
    }
    if opts.net != NetMode::None || opts.own_loopback {
        d.push(AF_INET);
        d.push(AF_INET6);
    }
    d.sort_unstable();
    d
}

/// The rules on `socket`'s arguments that make it fail with EPERM.
fn socket_rules(opts: &SeccompOptions) -> Result<Vec<SeccompRule>, BackendError> {
    let mut rules = not_in(0, &allowed_domains(opts), &[])?;
    let is = |domain: u32| cond(0, SeccompCmpOp::Eq, domain);
    rules.extend(not_in(2, &[NETLINK_ROUTE], &[is(AF_NETLINK)?])?);
    if opts.own_loopback && opts.net != NetMode::Unrestricted {
        // The run's own loopback: TCP stream or UDP datagram sockets only.
        let mut both: Vec<u32> = stream_types().into_iter().chain(dgram_types()).collect();
        both.sort_unstable();
        for domain in [AF_INET, AF_INET6] {
            rules.extend(not_in(1, &both, &[is(domain)?])?);
            for (types, protos) in [
                (stream_types(), [0, IPPROTO_TCP]),
                (dgram_types(), [0, IPPROTO_UDP]),
            ] {
                for t in types {
                    let also = [is(domain)?, cond(1, SeccompCmpOp::Eq, t)?];
                    rules.extend(not_in(2, &protos, &also)?);
                }
            }
        }
    } else if opts.net == NetMode::Proxy {
        let mut types = stream_types();
        types.sort_unstable();
        for domain in [AF_INET, AF_INET6] {
            rules.extend(not_in(1, &types, &[is(domain)?])?);
            rules.extend(not_in(2, &[0, IPPROTO_TCP], &[is(domain)?])?);
        }
    }
    Ok(rules)
}

/// The rules on `socketpair`'s arguments that make it fail with EPERM: a
/// domain other than AF_UNIX; without `allow_unix_sockets`, a type other
/// than stream or seqpacket.
fn socketpair_rules(opts: &SeccompOptions) -> Result<Vec<SeccompRule>, BackendError> {
    let mut rules = not_in(0, &[AF_UNIX], &[])?;
    if !opts.allow_unix_sockets {
        rules.extend(not_in(1, &pair_types(), &[])?);
    }
    Ok(rules)
}

/// The rules of one filter, keyed by syscall number.
type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// The denial rules, keyed by syscall number. An empty rule list means
/// "deny whatever the arguments". Each step inserts its syscalls in turn (a
/// later step's rules replace an earlier one's for the same syscall).
fn deny_rules(arch: Arch, opts: &SeccompOptions) -> Result<Rules, BackendError> {
    let mut map = BTreeMap::new();
    denied_whatever_the_arguments(&mut map, arch, opts);
    namespace_tty_and_lease_rules(&mut map, arch)?;
    if let Some(nr) = arch.nr("socket") {
        map.insert(nr, socket_rules(opts)?);
    }
    if let Some(nr) = arch.nr("socketpair") {
        map.insert(nr, socketpair_rules(opts)?);
    }
    open_mode_rules(&mut map, arch)?;
    setid_exec_and_memfd_rules(&mut map, arch, opts)?;
    if !opts.private_pid {
        other_process_rules(&mut map, arch)?;
    }
    Ok(map)
}

/// The denied syscalls: no rule, denied whatever the arguments.
fn denied_whatever_the_arguments(map: &mut Rules, arch: Arch, opts: &SeccompOptions) {
    for (_, names) in denied(opts) {
        for nr in names.iter().filter_map(|n| arch.nr(n)) {
            map.insert(nr, Vec::new());
        }
    }
}

/// clone with a namespace flag, personality outside the allowed ones, the
/// TIOCSTI/TIOCLINUX ioctls, fcntl(F_SETLEASE).
fn namespace_tty_and_lease_rules(map: &mut Rules, arch: Arch) -> Result<(), BackendError> {
    if let Some(nr) = arch.nr("clone") {
        let rules = CLONE_NEW_FLAGS
            .iter()
            .map(|&(_, flag)| {
                SeccompRule::new(vec![cond(
                    0,
                    SeccompCmpOp::MaskedEq(u64::from(flag)),
                    flag,
                )?])
            })
            .collect::<Result<Vec<_>, _>>()?;
        map.insert(nr, rules);
    }
    if let Some(nr) = arch.nr("personality") {
        map.insert(nr, not_in(0, PERSONALITY_ALLOWED, &[])?);
    }
    if let Some(nr) = arch.nr("ioctl") {
        let rules = super::deny::denied_ioctls()
            .iter()
            .map(|&req| SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, req)?]))
            .collect::<Result<Vec<_>, _>>()?;
        map.insert(nr, rules);
    }
    if let Some(nr) = arch.nr("fcntl") {
        map.insert(
            nr,
            vec![SeccompRule::new(vec![cond(
                1,
                SeccompCmpOp::Eq,
                F_SETLEASE,
            )?])?],
        );
    }
    Ok(())
}

/// The open family with access mode 3.
fn open_mode_rules(map: &mut Rules, arch: Arch) -> Result<(), BackendError> {
    for &(name, arg) in OPEN_FLAGS_ARG {
        if let Some(nr) = arch.nr(name) {
            // Access mode 3: both bits of O_ACCMODE.
            let mode3 = cond(arg, SeccompCmpOp::MaskedEq(u64::from(O_ACCMODE)), O_ACCMODE)?;
            map.insert(nr, vec![SeccompRule::new(vec![mode3])?]);
        }
    }
    Ok(())
}

/// Any bit of `mask` set in 32-bit argument `arg`: one rule per bit.
fn any_bit(arg: u8, mask: u32) -> Result<Vec<SeccompRule>, BackendError> {
    (0..32)
        .map(|b| 1u32 << b)
        .filter(|bit| mask & bit != 0)
        .map(|bit| {
            SeccompRule::new(vec![cond(
                arg,
                SeccompCmpOp::MaskedEq(u64::from(bit)),
                bit,
            )?])
        })
        .collect()
}

/// chmod with a set-id bit, execveat with AT_EMPTY_PATH, memfd_create with
/// MFD_HUGETLB (or without MFD_NOEXEC_SEAL where it is asked for).
fn setid_exec_and_memfd_rules(
    map: &mut Rules,
    arch: Arch,
    opts: &SeccompOptions,
) -> Result<(), BackendError> {
    for &(name, arg) in CHMOD_MODE_ARG {
        if let Some(nr) = arch.nr(name) {
            map.insert(nr, any_bit(arg, SETID_BITS)?);
        }
    }
    if let Some(nr) = arch.nr("execveat") {
        map.insert(nr, any_bit(EXECVEAT_FLAGS_ARG, AT_EMPTY_PATH)?);
    }
    if let Some(nr) = arch.nr("mmap") {
        map.insert(nr, any_bit(MMAP_FLAGS_ARG, MAP_HUGETLB)?);
    }
    if let Some(nr) = arch.nr("memfd_create") {
        // MFD_HUGETLB in every mode; without MFD_NOEXEC_SEAL where it is asked for.
        let mut rules = any_bit(1, MFD_HUGETLB)?;
        if opts.memfd_noexec_seal {
            let seal = u64::from(MFD_NOEXEC_SEAL);
            rules.push(SeccompRule::new(vec![cond(
                1,
                SeccompCmpOp::MaskedEq(seal),
                0,
            )?])?);
        }
        map.insert(nr, rules);
    }
    Ok(())
}

/// Without a pid namespace of its own: limits, priorities and scheduling
/// of any process but the caller.
fn other_process_rules(map: &mut Rules, arch: Arch) -> Result<(), BackendError> {
    let not_zero = |arg: u8| cond(arg, SeccompCmpOp::Ne, 0);
    if let Some(nr) = arch.nr("prlimit64") {
        // pid != 0 and new_limit (the whole 64-bit pointer) != NULL.
        let new_limit = SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)?;
        map.insert(nr, vec![SeccompRule::new(vec![not_zero(0)?, new_limit])?]);
    }
    for (name, own) in [("setpriority", PRIO_OWN), ("ioprio_set", IOPRIO_OWN)] {
        if let Some(nr) = arch.nr(name) {
            let mut rules = not_in(0, own, &[])?;
            rules.push(SeccompRule::new(vec![not_zero(1)?])?);
            map.insert(nr, rules);
        }
    }
    for name in [
        "sched_setaffinity",
        "sched_setscheduler",
        "sched_setparam",
        "sched_setattr",
    ] {
        if let Some(nr) = arch.nr(name) {
            map.insert(nr, vec![SeccompRule::new(vec![not_zero(0)?])?]);
        }
    }
    Ok(())
}

fn convert(p: BpfProgram) -> Vec<SockFilter> {
    p.into_iter()
        .map(|i| SockFilter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

fn seccompiler(
    arch: Arch,
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    on_match: SeccompAction,
) -> Vec<SockFilter> {
    let filter =
        SeccompFilter::new(rules, mismatch, on_match, target(arch)).expect("reference filter");
    convert(BpfProgram::try_from(filter).expect("reference filter compiles"))
}

/// The three filters, in installation order: arch, allowlist, deny.
pub(super) fn three_filters(arch: Arch, opts: &SeccompOptions) -> Vec<Vec<SockFilter>> {
    let allowed: BTreeMap<i64, Vec<SeccompRule>> = allowlist::ALLOWED
        .iter()
        .filter_map(|name| arch.nr(name))
        .map(|nr| (nr, Vec::new()))
        .collect();
    let allow = seccompiler(
        arch,
        allowed,
        SeccompAction::Errno(libc::ENOSYS as u32),
        SeccompAction::Allow,
    );
    let deny = seccompiler(
        arch,
        deny_rules(arch, opts).expect("reference deny rules"),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
    );
    vec![arch::program(arch), allow, deny]
}

#[test]
fn not_in_rejects_empty_gaps() {
    // {0, 0xffffffff}: only the middle gap.
    assert_eq!(not_in(0, &[0, 0xffff_ffff], &[]).expect("rules").len(), 1);
    // {1, 2, 10, 16}: x<1, 2<x<10, 10<x<16, x>16.
    assert_eq!(not_in(0, &[1, 2, 10, 16], &[]).expect("rules").len(), 4);
    assert_eq!(not_in(0, &[], &[]).expect("rules").len(), 1);
}

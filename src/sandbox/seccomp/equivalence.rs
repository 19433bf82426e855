//! The compact program decides exactly as the three stacked filters did.
//!
//! Both forms run in the classic-BPF interpreter (`bpf::run`; the stack
//! combined the kernel's way, `bpf::run_stacked`, which
//! `tests::the_kernel_stacks_the_reference_filters_as_the_interpreter_does`
//! checks against the real kernel), for both architectures and every mode:
//! every syscall number 0..1024 and the edges of the 32-bit range, then a
//! matrix of argument values for the argument-checked syscalls, with and
//! without high bits (every pair where a check reads two arguments, e.g.
//! prlimit64's pid and its 64-bit `new_limit` pointer), then pseudo-random
//! arguments.

use super::arch::{AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT};
use super::bpf::{self, Data, SockFilter};
use super::deny::{AT_EMPTY_PATH, CLONE_NEW_FLAGS, IOPRIO_OWN, PERSONALITY_ALLOWED, PRIO_OWN};
use super::table::Arch;
use super::{compile, oracle, SeccompOptions};

pub(super) fn audit_arch(arch: Arch) -> u32 {
    match arch {
        Arch::X86_64 => AUDIT_ARCH_X86_64,
        Arch::Aarch64 => AUDIT_ARCH_AARCH64,
    }
}

/// What `prog` answers to syscall `name` of `arch` with `args` (the tests of
/// the stacked programs ask it call by call).
pub(super) fn answer(prog: &[SockFilter], arch: Arch, name: &str, args: [u64; 6]) -> u32 {
    let nr = arch.nr(name).unwrap_or_else(|| panic!("{name}")) as u32;
    bpf::run(
        prog,
        &Data {
            nr,
            arch: audit_arch(arch),
            args,
        },
    )
}

struct Pair {
    compact: Vec<SockFilter>,
    stack: Vec<Vec<SockFilter>>,
    checked: usize,
}

impl Pair {
    fn new(arch: Arch, opts: &SeccompOptions) -> Pair {
        Pair {
            compact: compile::compile(arch, opts).expect("compile").program,
            stack: oracle::three_filters(arch, opts),
            checked: 0,
        }
    }

    #[track_caller]
    fn same(&mut self, data: &Data) {
        let want = bpf::run_stacked(&self.stack, data);
        let got = bpf::run(&self.compact, data);
        assert_eq!(
            got, want,
            "nr {} arch {:#x} args {:x?}: compact {got:#x}, reference {want:#x}",
            data.nr, data.arch, data.args
        );
        self.checked += 1;
    }
}

/// The same 32-bit value with nothing, one bit, and all bits in the high word.
fn with_high_words(values: &[u32]) -> Vec<u64> {
    let mut out = Vec::new();
    for &v in values {
        let v = u64::from(v);
        out.extend([v, v | 1 << 32, v | 0xffff_ffff_0000_0000]);
    }
    out
}

/// Interesting 32-bit values for one argument of `name`.
fn interesting(name: &str, arg: usize) -> Vec<u32> {
    let mut v: Vec<u32> = vec![
        0,
        1,
        2,
        17,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_fffe,
        0xffff_ffff,
    ];
    match (name, arg) {
        ("clone", 0) => {
            for &(_, flag) in CLONE_NEW_FLAGS {
                v.extend([flag, flag | 17, flag | 0x0001_0f00, !flag, flag - 1]);
            }
            v.extend([0x80, 0x0001_0f00 | 17, 0x003d_0f00, 0x0120_0011]);
        }
        ("personality", 0) => {
            for &p in PERSONALITY_ALLOWED {
                v.extend([p.wrapping_add(1), p.wrapping_sub(1)]);
            }
            v.extend([0x0040_0000, 0x0002_0000, 0x0800_0000, 8]);
        }
        ("ioctl", 1) => {
            for r in super::deny::denied_ioctls() {
                v.extend([r, r + 1, r - 1, r | 0x8000_0000]);
            }
            v.extend([0x5413, 0x4004_5413]);
        }
        ("fcntl", 1) => v.extend([
            0, 1, 2, 3, 4, 8, 9, 1023, 1024, 1025, 1026, 1031, 1033, 0x1400,
        ]),
        ("socket", 0) => v.extend(0..=46u32),
        ("socket", 1) => {
            for t in 0..=11u32 {
                v.extend([t, t | 0x800, t | 0x8_0000, t | 0x8_0800, t | 0x100]);
            }
        }
        ("socket", 2) => v.extend([3, 6, 9, 15, 17, 41, 132, 136, 255, 256, 262, 263]),
        ("socketpair", 0) => v.extend([3, 10, 16, 30, 0x1_0001]),
        ("socketpair", 1) => {
            for t in 0..=11u32 {
                v.extend([t, t | 0x800, t | 0x8_0000, t | 0x8_0800, t | 0x100]);
            }
        }
        ("open", 1) | ("openat", 2) => {
            for base in [0u32, 1, 2, 3] {
                // O_TRUNC, O_CREAT, O_CLOEXEC, O_PATH, O_DIRECTORY.
                for extra in [0u32, 0o1000, 0o100, 0o2000000, 0o10000000, 0o200000] {
                    v.push(base | extra);
                }
            }
            v.extend([0xffff_fffc, 0xffff_fffd, 0xffff_fffe]);
        }
        ("chmod" | "fchmod", 1) | ("fchmodat" | "fchmodat2", 2) => v.extend([
            0o644,
            0o755,
            0o1755,
            0o2755,
            0o4755,
            0o6755,
            0o7777,
            0o2000,
            0o4000,
            0x1_0000 | 0o4755,
            !0o6000u32,
        ]),
        ("execveat", 4) => v.extend([
            AT_EMPTY_PATH,
            0x100,
            0x100 | AT_EMPTY_PATH,
            AT_EMPTY_PATH | 1,
            !AT_EMPTY_PATH,
        ]),
        ("memfd_create", 1) => v.extend([8, 9, 0x10, 0x18, 4, 5, 0xffff_fff7]),
        ("mmap", 3) => v.extend([
            0x22,
            0x4_0022,
            0x4_0021,
            0x5_4022,
            (21 << 26) | 0x4_0022,
            !0x4_0000u32,
        ]),
        ("setpriority", 0) => v.extend(PRIO_OWN.iter().chain(&[3, 4])),
        ("ioprio_set", 0) => v.extend(IOPRIO_OWN.iter().chain(&[3, 4])),
        (_, _) if super::deny::OWN_PROCESS_ONLY.contains(&name) => v.extend([1234, 0x3fff_ffff]),
        _ => {}
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// The syscalls with argument checks (besides `socket`), each with the
/// arguments its check reads.
const CHECKED: &[(&str, &[usize])] = &[
    ("clone", &[0]),
    ("personality", &[0]),
    ("ioctl", &[1]),
    ("chmod", &[1]),
    ("fchmod", &[1]),
    ("fchmodat", &[2]),
    ("fchmodat2", &[2]),
    ("execveat", &[4]),
    ("prlimit64", &[0, 2]),
    ("setpriority", &[0, 1]),
    ("ioprio_set", &[0, 1]),
    ("sched_setaffinity", &[0]),
    ("sched_setscheduler", &[0]),
    ("sched_setparam", &[0]),
    ("sched_setattr", &[0]),
    ("memfd_create", &[1]),
    ("mmap", &[3]),
    ("socketpair", &[0, 1]),
    ("open", &[1]),
    ("openat", &[2]),
];

#[test]
fn compact_program_decides_like_the_three_filters() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let audit = audit_arch(arch);
        let mut modes = super::precompiled::all_modes();
        // memfd_noexec_seal is not stored: check it on the strictest and the
        // most relaxed program of each network mode.
        let extra: Vec<SeccompOptions> = modes
            .iter()
            .filter(|o| !o.allow_unix_sockets && o.private_ipc == o.private_pid)
            .map(|o| SeccompOptions {
                memfd_noexec_seal: true,
                ..*o
            })
            .collect();
        modes.extend(extra);
        for opts in modes {
            let mut p = Pair::new(arch, &opts);
            let data = |nr: u32, args: [u64; 6]| Data {
                nr,
                arch: audit,
                args,
            };

            // Every number 0..1024, the x32 range and the edges, no arguments
            // and all-ones arguments.
            let mut nrs: Vec<u32> = (0..1024).collect();
            nrs.extend([
                X32_SYSCALL_BIT,
                X32_SYSCALL_BIT | 39,
                X32_SYSCALL_BIT | 56,
                0x3fff_ffff,
                0x7fff_ffff,
                0x8000_0000,
                0x8000_0027,
                0xbfff_ffff,
                0xc000_0000,
                0xffff_fffe,
                0xffff_ffff,
            ]);
            for &nr in &nrs {
                p.same(&data(nr, [0; 6]));
                p.same(&data(nr, [u64::MAX; 6]));
                // A foreign ABI: killed, whatever the number.
                p.same(&Data {
                    nr,
                    arch: 3 | 0x4000_0000, // AUDIT_ARCH_I386
                    args: [0; 6],
                });
            }

            // The argument-checked syscalls: the matrix of interesting values
            // (every pair, where a check reads two arguments).
            for &(name, read) in CHECKED {
                // `chmod` is x86_64's only: aarch64 has fchmodat alone.
                let Some(nr) = arch.nr(name) else { continue };
                let nr = nr as u32;
                match *read {
                    [arg] => {
                        for v in with_high_words(&interesting(name, arg)) {
                            let mut args = [0u64; 6];
                            args[arg] = v;
                            p.same(&data(nr, args));
                            args[arg ^ 1] = u64::MAX; // noise in a neighbour argument
                            p.same(&data(nr, args));
                        }
                    }
                    [a, b] => {
                        let vb = with_high_words(&interesting(name, b));
                        for va in with_high_words(&interesting(name, a)) {
                            for &vb in &vb {
                                let mut args = [0u64; 6];
                                args[a] = va;
                                args[b] = vb;
                                p.same(&data(nr, args));
                            }
                        }
                    }
                    _ => unreachable!("{name}: checks read one or two arguments"),
                }
            }
            let socket = arch.nr("socket").expect("socket") as u32;
            // The socket rules depend on the namespaces only through
            // own_loopback: their full matrix once per (network mode,
            // allow_unix_sockets, own_loopback).
            let full_sockets = !opts.private_ipc && !opts.private_pid && !opts.memfd_noexec_seal;
            let (d, t, pr) = (
                interesting("socket", 0),
                interesting("socket", 1),
                interesting("socket", 2),
            );
            for &domain in d.iter().filter(|_| full_sockets) {
                for &ty in &t {
                    for &proto in &pr {
                        let args = [domain.into(), ty.into(), proto.into(), 0, 0, 0];
                        p.same(&data(socket, args));
                    }
                }
            }
            // High words on each socket argument in turn, on the cases that matter.
            for args in [
                [2u64, 1, 0],
                [10, 1, 6],
                [16, 3, 0],
                [1, 1, 0],
                [2, 2, 0],
                [2, 2, 17],
                [10, 0x80802, 17],
            ] {
                for i in 0..3 {
                    for high in [1u64 << 32, 0xffff_ffff_0000_0000] {
                        let mut a = [args[0], args[1], args[2], 0, 0, 0];
                        a[i] |= high;
                        p.same(&data(socket, a));
                    }
                }
            }

            // Pseudo-random arguments (xorshift) on the checked syscalls.
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let names = CHECKED.iter().map(|(n, _)| *n).chain(["socket"]);
            for nr in names.filter_map(|n| arch.nr(n)) {
                let nr = nr as u32;
                for _ in 0..2000 {
                    let mut args = [0u64; 6];
                    for a in &mut args {
                        // Mostly small values (the interesting ones), sometimes anything.
                        let r = next();
                        *a = if r & 3 == 0 { next() } else { r >> 58 };
                    }
                    p.same(&data(nr, args));
                }
            }
            eprintln!(
                "{} {:?} unix={} ipc={} pid={} loopback={} memfd_seal={}: {} instructions, {} cases identical",
                arch.name(),
                opts.net,
                opts.allow_unix_sockets,
                opts.private_ipc,
                opts.private_pid,
                opts.own_loopback,
                opts.memfd_noexec_seal,
                p.compact.len(),
                p.checked
            );
        }
    }
}

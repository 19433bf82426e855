//! The programs [`compile`](super::compile) makes, computed ahead of time.
//!
//! The generator is deterministic and depends only on (architecture, network
//! mode, `allow_unix_sockets`, `private_ipc`, `private_pid`, `own_loopback`),
//! but running it costs ~0.15 ms per `capsule exec` (name lookups, maps, the
//! assembler), which is a third of the start-up budget. So the 48 programs of each
//! architecture are stored here as constants (`precompiled_x86_64.rs`,
//! `precompiled_aarch64.rs`, generated) and [`build`](super::build) copies
//! nothing: it points at one. A build carries only its own architecture's
//! table (tests carry both, to check them).
//!
//! The test `precompiled_matches_the_generator` fails as soon as a table or
//! the generator changes without regenerating, for both architectures;
//! regenerate with
//! `cargo test --lib sandbox::seccomp::precompiled -- --ignored regenerate`.

use super::bpf::SockFilter;
use super::table::Arch;
use super::SeccompOptions;
use crate::policy::NetMode;

#[cfg(any(target_arch = "aarch64", test))]
#[path = "precompiled_aarch64.rs"]
mod aarch64;
#[cfg(any(target_arch = "x86_64", test))]
#[path = "precompiled_x86_64.rs"]
mod x86_64;

/// How many programs each architecture stores: 3 network modes × 2 × 2 × 2 × 2.
const MODES: usize = 48;

/// One stored program and the counts the summary reports.
pub(super) struct Program {
    pub insns: &'static [SockFilter],
    pub allowed: usize,
    pub intervals: usize,
}

/// Index of a mode in the stored tables: network mode, then
/// allow_unix_sockets, private_ipc, private_pid, own_loopback (the order of
/// [`all_modes`]).
fn index(opts: &SeccompOptions) -> usize {
    let net = match opts.net {
        NetMode::None => 0,
        NetMode::Proxy => 1,
        NetMode::Unrestricted => 2,
    };
    let bits = [
        opts.allow_unix_sockets,
        opts.private_ipc,
        opts.private_pid,
        opts.own_loopback,
    ];
    bits.iter().fold(net, |i, &b| i * 2 + usize::from(b))
}

/// The stored program for `arch` and `opts`, if this build carries that
/// architecture's table.
pub(super) fn lookup(arch: Arch, opts: &SeccompOptions) -> Option<&'static Program> {
    if opts.memfd_noexec_seal {
        return None;
    }
    stored(arch).and_then(|programs| programs.get(index(opts)))
}

fn stored(arch: Arch) -> Option<&'static [Program; MODES]> {
    match arch {
        #[cfg(any(target_arch = "x86_64", test))]
        Arch::X86_64 => Some(&x86_64::PROGRAMS),
        #[cfg(any(target_arch = "aarch64", test))]
        Arch::Aarch64 => Some(&aarch64::PROGRAMS),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// Every combination of options that is stored, in the order of [`index`]
/// (tests: the drift check, the regenerator, the equivalence test);
/// `memfd_noexec_seal` is never stored.
#[cfg(test)]
pub(super) fn all_modes() -> Vec<SeccompOptions> {
    let mut v = Vec::new();
    for net in [NetMode::None, NetMode::Proxy, NetMode::Unrestricted] {
        for allow_unix_sockets in [false, true] {
            for private_ipc in [false, true] {
                for private_pid in [false, true] {
                    for own_loopback in [false, true] {
                        v.push(SeccompOptions {
                            net,
                            allow_unix_sockets,
                            private_ipc,
                            private_pid,
                            own_loopback,
                            memfd_noexec_seal: false,
                        });
                    }
                }
            }
        }
    }
    v
}

/// Shorthand for the generated tables.
const fn i(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

#[cfg(test)]
mod tests {
    use super::super::compile;
    use super::*;

    const ARCHES: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    #[test]
    fn precompiled_matches_the_generator() {
        assert_eq!(all_modes().len(), MODES);
        for (i, opts) in all_modes().iter().enumerate() {
            assert_eq!(index(opts), i, "{opts:?}");
        }
        for arch in ARCHES {
            for opts in all_modes() {
                let c = compile::compile(arch, &opts).expect("compile");
                let p = lookup(arch, &opts).expect("stored");
                assert!(
                    p.insns == c.program.as_slice()
                        && p.allowed == c.allowed
                        && p.intervals == c.intervals,
                    "precompiled_{}.rs is stale for {opts:?}: run \
                     `cargo test --lib sandbox::seccomp::precompiled -- --ignored regenerate`",
                    arch.name()
                );
            }
        }
    }

    /// Writes `precompiled_<arch>.rs` for both architectures from the generator.
    #[test]
    #[ignore]
    fn regenerate() {
        use std::fmt::Write;
        for arch in ARCHES {
            let mut s = String::new();
            write!(
                s,
                "//! GENERATED by `cargo test --lib sandbox::seccomp::precompiled -- --ignored regenerate`\n\
                 //! from `compile.rs` and the tables; do not edit. The {} programs, one per\n\
                 //! (network mode, allow_unix_sockets, private_ipc, private_pid, own_loopback),\n\
                 //! in the order of `precompiled::index`.\n\n\
                 use super::{{i, Program, MODES}};\n\n\
                 pub(super) static PROGRAMS: [Program; MODES] = [\n",
                arch.name()
            )
            .unwrap();
            for opts in all_modes() {
                let c = compile::compile(arch, &opts).expect("compile");
                writeln!(
                    s,
                    "    // {:?}, allow_unix_sockets: {}, private_ipc: {}, private_pid: {}, \
                     own_loopback: {}",
                    opts.net,
                    opts.allow_unix_sockets,
                    opts.private_ipc,
                    opts.private_pid,
                    opts.own_loopback
                )
                .unwrap();
                writeln!(
                    s,
                    "    Program {{\n        allowed: {},\n        intervals: {},\n        insns: &[",
                    c.allowed, c.intervals
                )
                .unwrap();
                for f in &c.program {
                    writeln!(
                        s,
                        "            i({:#06x}, {}, {}, {:#010x}),",
                        f.code, f.jt, f.jf, f.k
                    )
                    .unwrap();
                }
                s.push_str("        ],\n    },\n");
            }
            s.push_str("];\n");
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "src/sandbox/seccomp/precompiled_{}.rs",
                arch.name()
            ));
            std::fs::write(&path, s).expect("write");
        }
    }
}

//! The shape of an argument check: a small decision tree on one syscall's
//! arguments. The tables write it (`deny.rs`, `sockets.rs`) and the generator
//! compiles it (`compile.rs`); it depends on neither, so the tables and the
//! generator import one way.

/// A decision on one syscall's arguments, as a small tree. Comparisons read
/// the low 32 bits of the argument (see `bpf::arg_low`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ArgCheck {
    /// The syscall goes on: the allowlist's answer for it (ALLOW for every
    /// syscall checked today).
    Pass,
    /// Refused with EPERM.
    Deny,
    /// The first arm that lists the argument's value decides; `otherwise` if none does.
    Match {
        arg: u8,
        arms: Vec<(Vec<u32>, ArgCheck)>,
        otherwise: Box<ArgCheck>,
    },
    /// `then` if the argument has any bit of `mask` set, else `otherwise`.
    AnyBit {
        arg: u8,
        mask: u32,
        then: Box<ArgCheck>,
        otherwise: Box<ArgCheck>,
    },
    /// `then` if the whole 64-bit argument is 0 (both words: a NULL pointer),
    /// else `otherwise`.
    Null {
        arg: u8,
        then: Box<ArgCheck>,
        otherwise: Box<ArgCheck>,
    },
}

impl ArgCheck {
    /// `then` if argument `arg` is one of `values`, else `otherwise`.
    pub(super) fn one_of(arg: u8, values: &[u32], then: ArgCheck, otherwise: ArgCheck) -> Self {
        ArgCheck::Match {
            arg,
            arms: vec![(values.to_vec(), then)],
            otherwise: Box::new(otherwise),
        }
    }
}

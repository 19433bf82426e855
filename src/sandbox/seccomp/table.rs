//! Syscall names to numbers, per architecture.
//!
//! The lists of allowed and denied syscalls are written once, by name; each
//! name is looked up in the table of the architecture capsule was built for.
//! A name that this architecture does not have (`iopl` on aarch64, say) is
//! simply skipped: there is nothing to allow or deny.

#[path = "syscalls_aarch64.rs"]
mod aarch64;
#[path = "syscalls_x86_64.rs"]
mod x86_64;

/// The architectures capsule builds seccomp filters for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture this binary was compiled for, if a filter can be built for it.
    pub(super) fn native() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    fn table(self) -> &'static [(&'static str, i64)] {
        match self {
            Arch::X86_64 => x86_64::TABLE,
            Arch::Aarch64 => aarch64::TABLE,
        }
    }

    /// The number of syscall `name` on this architecture, or `None` where it has no such syscall.
    pub(super) fn nr(self, name: &str) -> Option<i64> {
        let table = self.table();
        table
            .binary_search_by(|(n, _)| (*n).cmp(name))
            .ok()
            .map(|i| table[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_and_unique() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let t = arch.table();
            assert!(
                t.windows(2).all(|w| w[0].0 < w[1].0),
                "{} not sorted",
                arch.name()
            );
        }
    }

    #[test]
    fn known_numbers() {
        assert_eq!(Arch::X86_64.nr("getpid"), Some(39));
        assert_eq!(Arch::X86_64.nr("clone3"), Some(435));
        assert_eq!(Arch::X86_64.nr("open_tree_attr"), Some(467));
        assert_eq!(Arch::Aarch64.nr("getpid"), Some(172));
        assert_eq!(Arch::Aarch64.nr("open"), None);
        assert_eq!(Arch::X86_64.nr("no_such_syscall"), None);
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(Arch::X86_64.nr("ptrace"), Some(libc::SYS_ptrace));
            assert_eq!(Arch::X86_64.nr("socket"), Some(libc::SYS_socket));
        }
    }
}

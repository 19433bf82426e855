//! The architecture check: the prologue of capsule's seccomp program.
//!
//! A syscall made through another ABI (i386 `int 0x80` on x86_64, whose
//! `seccomp_data.arch` is AUDIT_ARCH_I386) kills the process: its numbers
//! mean other syscalls. So does an x32 syscall: it reports AUDIT_ARCH_X86_64
//! and sets bit 30 (`__X32_SYSCALL_BIT`) of the number, so a program keyed on
//! x86_64 numbers must test that bit itself.
//!
//! ```text
//! 0: A = seccomp_data.arch
//! 1: if A == AUDIT_ARCH_<native> goto 3
//! 2: return KILL_PROCESS                      foreign ABI (i386 int 0x80, ...)
//! 3: A = seccomp_data.nr
//! 4: if !(A & 0x40000000) goto 7              (x86_64 only: 4..6)
//! 5: if A == 0xffffffff goto 7                nr -1: what tracers use to skip a syscall
//! 6: return KILL_PROCESS                      x32 syscall number
//! 7: (the syscall decision follows, with A = nr)
//! ```
//!
//! Syscall number -1 is let through, as libseccomp does: the decision that
//! follows answers ENOSYS. aarch64 has no x32-like second ABI in the same
//! arch value, so there the prologue is instructions 0..3.

use super::bpf::{
    jump, stmt, SockFilter, JEQ_K, JSET_K, LD_W_ABS, OFFSET_ARCH, OFFSET_NR, RET_K,
    RET_KILL_PROCESS,
};
use super::table::Arch;

/// AUDIT_ARCH_X86_64 = EM_X86_64 (62) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE (linux/audit.h).
pub(super) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// AUDIT_ARCH_AARCH64 = EM_AARCH64 (183) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
pub(super) const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// Bit 30 of the syscall number marks the x32 ABI on x86_64 (asm/unistd.h).
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The prologue: kills the process on a foreign ABI (and, on x86_64, an x32
/// number); every other path reaches the instruction right after the
/// prologue (index `len()`) with A = the syscall number.
pub(super) fn prologue(arch: Arch) -> Vec<SockFilter> {
    match arch {
        Arch::X86_64 => vec![
            stmt(LD_W_ABS, OFFSET_ARCH),
            jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
            stmt(RET_K, RET_KILL_PROCESS),
            stmt(LD_W_ABS, OFFSET_NR),
            jump(JSET_K, X32_SYSCALL_BIT, 0, 2),
            jump(JEQ_K, u32::MAX, 1, 0),
            stmt(RET_K, RET_KILL_PROCESS),
        ],
        Arch::Aarch64 => vec![
            stmt(LD_W_ABS, OFFSET_ARCH),
            jump(JEQ_K, AUDIT_ARCH_AARCH64, 1, 0),
            stmt(RET_K, RET_KILL_PROCESS),
            stmt(LD_W_ABS, OFFSET_NR),
        ],
    }
}

/// The prologue followed by `return ALLOW`: a filter on its own (the first of
/// the three filters capsule used to stack; the tests' reference).
#[cfg(test)]
pub(super) fn program(arch: Arch) -> Vec<SockFilter> {
    let mut p = prologue(arch);
    p.push(stmt(RET_K, super::bpf::RET_ALLOW));
    p
}

#[cfg(test)]
mod tests {
    use super::super::bpf::{run, Data, RET_ALLOW};
    use super::*;

    fn go(p: &[SockFilter], arch: u32, nr: u32) -> u32 {
        run(
            p,
            &Data {
                nr,
                arch,
                args: [0; 6],
            },
        )
    }

    #[test]
    fn x86_64_prologue_decisions() {
        let p = program(Arch::X86_64);
        assert_eq!(go(&p, AUDIT_ARCH_X86_64, 39), RET_ALLOW);
        assert_eq!(
            go(&p, AUDIT_ARCH_X86_64, 39 | X32_SYSCALL_BIT),
            RET_KILL_PROCESS
        );
        assert_eq!(go(&p, AUDIT_ARCH_X86_64, u32::MAX), RET_ALLOW);
        // AUDIT_ARCH_I386 = EM_386 (3) | __AUDIT_ARCH_LE
        assert_eq!(go(&p, 3 | 0x4000_0000, 20), RET_KILL_PROCESS);
    }

    #[test]
    fn aarch64_prologue_decisions() {
        let p = program(Arch::Aarch64);
        assert_eq!(go(&p, AUDIT_ARCH_AARCH64, 172), RET_ALLOW);
        assert_eq!(go(&p, AUDIT_ARCH_X86_64, 172), RET_KILL_PROCESS);
    }
}

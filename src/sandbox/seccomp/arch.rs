//! Filter 1: the architecture check, hand-built BPF.
//!
//! seccompiler prefixes every filter with an architecture check (a syscall
//! made through another ABI, such as i386 `int 0x80` on x86_64, whose
//! `seccomp_data.arch` is AUDIT_ARCH_I386, kills the process), but it does
//! not check x32: an x32 syscall reports AUDIT_ARCH_X86_64 and sets bit 30
//! (`__X32_SYSCALL_BIT`) of the syscall number. A filter keyed on x86_64
//! numbers would never match such a number, so it would fall through to the
//! default action. So this first filter, installed before the others, is a
//! few instructions written by hand:
//!
//! ```text
//! 0: A = seccomp_data.arch
//! 1: if A == AUDIT_ARCH_<native> goto 3
//! 2: return KILL_PROCESS                      foreign ABI (i386 int 0x80, ...)
//! 3: A = seccomp_data.nr                      (x86_64 only from here on)
//! 4: if !(A & 0x40000000) goto 7
//! 5: if A == 0xffffffff goto 7                nr -1: what tracers use to skip a syscall
//! 6: return KILL_PROCESS                      x32 syscall number
//! 7: return ALLOW                             (the next filters decide)
//! ```
//!
//! Syscall number -1 is let through, as libseccomp does: it reaches the
//! allowlist filter, which answers ENOSYS. aarch64 has no x32-like second
//! ABI in the same arch value, so there the filter is instructions 0..2 and 7.

use seccompiler::{sock_filter, BpfProgram};

use super::table::Arch;

// Classic BPF opcodes (linux/bpf_common.h), as `sock_filter.code`.
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20)
const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JSET_K: u16 = 0x05 | 0x40; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

// Offsets in `struct seccomp_data { int nr; __u32 arch; __u64 ip; __u64 args[6]; }`.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

/// AUDIT_ARCH_X86_64 = EM_X86_64 (62) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE (linux/audit.h).
pub(super) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// AUDIT_ARCH_AARCH64 = EM_AARCH64 (183) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE.
pub(super) const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// Bit 30 of the syscall number marks the x32 ABI on x86_64 (asm/unistd.h).
pub(super) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const RET_KILL_PROCESS: u32 = 0x8000_0000; // SECCOMP_RET_KILL_PROCESS
const RET_ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The architecture (and, on x86_64, x32) check: kills the process on a foreign ABI.
pub(super) fn program(arch: Arch) -> BpfProgram {
    match arch {
        Arch::X86_64 => vec![
            stmt(BPF_LD_W_ABS, OFFSET_ARCH),
            jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
            stmt(BPF_RET_K, RET_KILL_PROCESS),
            stmt(BPF_LD_W_ABS, OFFSET_NR),
            jump(BPF_JSET_K, X32_SYSCALL_BIT, 0, 2),
            jump(BPF_JEQ_K, u32::MAX, 1, 0),
            stmt(BPF_RET_K, RET_KILL_PROCESS),
            stmt(BPF_RET_K, RET_ALLOW),
        ],
        Arch::Aarch64 => vec![
            stmt(BPF_LD_W_ABS, OFFSET_ARCH),
            jump(BPF_JEQ_K, AUDIT_ARCH_AARCH64, 1, 0),
            stmt(BPF_RET_K, RET_KILL_PROCESS),
            stmt(BPF_RET_K, RET_ALLOW),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny classic-BPF interpreter for the opcodes used above, to check the
    /// jump offsets without a kernel.
    fn run(prog: &[sock_filter], arch: u32, nr: u32) -> u32 {
        let mut pc = 0usize;
        let mut a = 0u32;
        loop {
            let i = &prog[pc];
            match i.code {
                BPF_LD_W_ABS => {
                    a = if i.k == OFFSET_ARCH { arch } else { nr };
                    pc += 1;
                }
                BPF_JEQ_K | BPF_JSET_K => {
                    let t = if i.code == BPF_JEQ_K {
                        a == i.k
                    } else {
                        a & i.k != 0
                    };
                    pc += 1 + usize::from(if t { i.jt } else { i.jf });
                }
                BPF_RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn x86_64_program_decisions() {
        let p = program(Arch::X86_64);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 39), RET_ALLOW);
        assert_eq!(
            run(&p, AUDIT_ARCH_X86_64, 39 | X32_SYSCALL_BIT),
            RET_KILL_PROCESS
        );
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, u32::MAX), RET_ALLOW);
        // AUDIT_ARCH_I386 = EM_386 (3) | __AUDIT_ARCH_LE
        assert_eq!(run(&p, 3 | 0x4000_0000, 20), RET_KILL_PROCESS);
    }

    #[test]
    fn aarch64_program_decisions() {
        let p = program(Arch::Aarch64);
        assert_eq!(run(&p, AUDIT_ARCH_AARCH64, 172), RET_ALLOW);
        assert_eq!(run(&p, AUDIT_ARCH_X86_64, 172), RET_KILL_PROCESS);
    }
}

//! Classic BPF as seccomp runs it: the instruction layout, the opcodes capsule
//! emits, the offsets in `struct seccomp_data` and the return values.
//!
//! Tests also get a small interpreter ([`run`]) for the opcodes seccomp
//! programs use here (ours and seccompiler's), to check decisions without a kernel.

/// One classic-BPF instruction, `struct sock_filter` (linux/filter.h); it
/// lives in `sys::raw`, which loads programs of them into the kernel.
pub(super) use crate::sys::raw::SockFilter;

// Opcodes (linux/bpf_common.h).
/// `A = *(u32 *)(seccomp_data + k)`: BPF_LD (0) | BPF_W (0) | BPF_ABS (0x20).
pub(super) const LD_W_ABS: u16 = 0x20;
/// `pc += k`: BPF_JMP | BPF_JA.
pub(super) const JA: u16 = 0x05;
/// `pc += (A == k) ? jt : jf`: BPF_JMP | BPF_JEQ | BPF_K.
pub(super) const JEQ_K: u16 = 0x05 | 0x10;
/// `pc += (A >= k) ? jt : jf` (unsigned): BPF_JMP | BPF_JGE | BPF_K.
pub(super) const JGE_K: u16 = 0x05 | 0x30;
/// `pc += (A & k) ? jt : jf`: BPF_JMP | BPF_JSET | BPF_K.
pub(super) const JSET_K: u16 = 0x05 | 0x40;
/// `A &= k`: BPF_ALU (0x04) | BPF_AND (0x50) | BPF_K.
pub(super) const ALU_AND_K: u16 = 0x04 | 0x50;
/// `return k`: BPF_RET | BPF_K.
pub(super) const RET_K: u16 = 0x06;

// Offsets in `struct seccomp_data { int nr; __u32 arch; __u64 ip; __u64 args[6]; }`.
pub(super) const OFFSET_NR: u32 = 0;
pub(super) const OFFSET_ARCH: u32 = 4;
const OFFSET_ARGS: u32 = 16;

/// Offset of the low 32 bits of argument `arg` (little-endian: the first word).
/// Every argument check capsule makes reads only this word: the kernel reads
/// `clone`'s flags, `socket`'s `int`s, `ioctl`'s request and `personality`'s
/// persona as 32-bit values, whatever the caller put in the high word.
pub(super) const fn arg_low(arg: u8) -> u32 {
    OFFSET_ARGS + 8 * arg as u32
}

/// Offset of the high 32 bits of argument `arg`: read only where an argument
/// is a pointer compared whole (prlimit64's `new_limit` with NULL).
pub(super) const fn arg_high(arg: u8) -> u32 {
    arg_low(arg) + 4
}

// Return values (linux/seccomp.h).
pub(super) const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(super) const RET_ERRNO: u32 = 0x0005_0000;
pub(super) const RET_ALLOW: u32 = 0x7fff_0000;

pub(super) const fn ret_errno(errno: i32) -> u32 {
    RET_ERRNO | (errno as u32 & 0xffff)
}

pub(super) const fn stmt(code: u16, k: u32) -> SockFilter {
    SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

pub(super) const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// What a seccomp program sees: `struct seccomp_data` without the
/// instruction pointer, which no capsule rule reads.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Data {
    pub nr: u32,
    pub arch: u32,
    pub args: [u64; 6],
}

/// Runs `prog` on `data` the way the kernel's classic-BPF interpreter does,
/// for the opcodes seccomp programs built here use. Panics on anything else,
/// on a jump out of the program and on a program that does not return.
#[cfg(test)]
pub(super) fn run(prog: &[SockFilter], data: &Data) -> u32 {
    const JGT_K: u16 = 0x05 | 0x20;
    let load = |k: u32| -> u32 {
        match k {
            OFFSET_NR => data.nr,
            OFFSET_ARCH => data.arch,
            k if (OFFSET_ARGS..OFFSET_ARGS + 48).contains(&k) && k.is_multiple_of(4) => {
                let arg = data.args[((k - OFFSET_ARGS) / 8) as usize];
                if (k - OFFSET_ARGS).is_multiple_of(8) {
                    arg as u32
                } else {
                    (arg >> 32) as u32
                }
            }
            k => panic!("load from unexpected offset {k}"),
        }
    };
    let mut a = 0u32;
    let mut pc = 0usize;
    loop {
        let i = prog
            .get(pc)
            .unwrap_or_else(|| panic!("pc {pc} ran off the program"));
        let cond = |t: bool| 1 + usize::from(if t { i.jt } else { i.jf });
        pc += match i.code {
            LD_W_ABS => {
                a = load(i.k);
                1
            }
            ALU_AND_K => {
                a &= i.k;
                1
            }
            JA => 1 + i.k as usize,
            JEQ_K => cond(a == i.k),
            JGT_K => cond(a > i.k),
            JGE_K => cond(a >= i.k),
            JSET_K => cond(a & i.k != 0),
            RET_K => return i.k,
            other => panic!("unexpected opcode {other:#x} at {pc}"),
        };
    }
}

/// The kernel's rule for stacked filters (`seccomp_run_filters`): every
/// filter runs, newest first, and a result replaces the one so far only if
/// its action is strictly more restrictive (signed comparison of the action
/// bits, so KILL_PROCESS < KILL_THREAD < ... < ERRNO < ... < ALLOW). Among
/// equal actions the newest filter's data (the errno) wins.
#[cfg(test)]
pub(super) fn run_stacked(filters: &[Vec<SockFilter>], data: &Data) -> u32 {
    let action = |ret: u32| (ret & 0xffff_0000) as i32;
    let mut ret = RET_ALLOW;
    for prog in filters.iter().rev() {
        let cur = run(prog, data);
        if action(cur) < action(ret) {
            ret = cur;
        }
    }
    ret
}

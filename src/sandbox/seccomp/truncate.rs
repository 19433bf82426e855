//! The truncate guard: truncate protection where neither Landlock's truncate
//! right (ABI 3, Linux 6.2) nor the run's read-only view exists (Landlock ABI
//! 1 or 2 without a mount namespace: Debian 12's 6.1 or Ubuntu 22.04's 5.15
//! where user namespaces are off).
//!
//! Landlock before ABI 3 checks a file's opening, not its truncation: the
//! path-based `truncate(2)` needs no right at all, and `open(O_RDONLY |
//! O_TRUNC)` needs only the read right, yet empties the file. Every other way
//! to shorten a file goes through a descriptor opened for writing
//! (`ftruncate`, `fallocate`, `O_WRONLY | O_TRUNC`, `O_RDWR | O_TRUNC`,
//! `creat`), which Landlock's write right already governs. So this small
//! second program, installed right after the main one, refuses:
//!
//! ```text
//! foreign ABI, x32 number                     KILL_PROCESS (as the main program)
//! truncate(path, _)                           EPERM   seccomp cannot read the path
//! open(_, flags), openat(_, _, flags)
//!   with O_TRUNC and O_RDONLY or access
//!   mode 3                                    EPERM   truncation without write access
//! openat2                                     ENOSYS  the flags are behind a pointer
//!                                                     (glibc and Python never call it;
//!                                                     callers fall back to openat)
//! anything else                               ALLOW   (the main program decides)
//! ```
//!
//! (Access mode 3, "neither read nor write", asks Landlock for no right at
//! all; the main program refuses it for every open in every mode, see
//! `deny.rs`, and this guard refuses it with `O_TRUNC` on its own as well.)
//!
//! The price: `truncate()` by path fails even inside a write grant (use
//! `ftruncate()` on a descriptor opened for writing, which coreutils'
//! `truncate` and every database do); the result lists it as a limitation.

use super::arch::prologue;
use super::bpf::{
    arg_low, jump, ret_errno, stmt, SockFilter, JEQ_K, JSET_K, LD_W_ABS, RET_ALLOW, RET_K,
};
use super::install::StackedFilter;
use super::table::Arch;
use super::SeccompError;

/// `O_TRUNC`, `O_WRONLY` and `O_RDWR` (asm-generic/fcntl.h; the same on
/// x86_64 and aarch64). Access mode 3 is both bits of `O_ACCMODE` (0o3).
pub const O_TRUNC: u32 = 0o1000;
pub const O_WRONLY: u32 = 0o1;
pub const O_RDWR: u32 = 0o2;

/// What the result says when the guard is in force.
pub const LIMITATION: &str =
    "truncate protection by seccomp (Landlock ABI 1-2 and no mount namespace): \
     truncate() by path fails with EPERM even inside write grants, and open(O_RDONLY|O_TRUNC) too; \
     ftruncate() on a descriptor opened for writing works";

/// The program for `arch` (see the module docs).
pub(super) fn program(arch: Arch) -> Result<Vec<SockFilter>, SeccompError> {
    let nr = |name: &str| arch.nr(name).map(|n| n as u32);
    // The open calls this architecture has, with the index of their flags.
    let opens: Vec<(u32, u8)> = [("open", 1u8), ("openat", 2)]
        .into_iter()
        .filter_map(|(n, a)| nr(n).map(|x| (x, a)))
        .collect();
    enum To {
        Eperm,
        Enosys,
        Check(usize),
    }
    let mut dispatch: Vec<(u32, To)> = Vec::new();
    if let Some(n) = nr("truncate") {
        dispatch.push((n, To::Eperm));
    }
    if let Some(n) = nr("openat2") {
        dispatch.push((n, To::Enosys));
    }
    for (i, (n, _)) in opens.iter().enumerate() {
        dispatch.push((*n, To::Check(i)));
    }
    // Layout after the prologue: the dispatch jumps, `return ALLOW`, one
    // block of five per open call, then ALLOW, EPERM and ENOSYS.
    let d = dispatch.len();
    let check_at = |i: usize| d + 1 + 5 * i;
    let allow_at = d + 1 + 5 * opens.len();
    let eperm_at = allow_at + 1;
    let enosys_at = allow_at + 2;
    let off = |from: usize, to: usize| -> Result<u8, SeccompError> {
        to.checked_sub(from + 1)
            .and_then(|x| u8::try_from(x).ok())
            .ok_or(SeccompError::BadLength {
                len: enosys_at + 1,
                max: super::MAX_INSTRUCTIONS,
            })
    };
    let mut code = Vec::with_capacity(enosys_at + 1);
    for (pc, (n, to)) in dispatch.iter().enumerate() {
        let target = match to {
            To::Eperm => eperm_at,
            To::Enosys => enosys_at,
            To::Check(i) => check_at(*i),
        };
        code.push(jump(JEQ_K, *n, off(pc, target)?, 0));
    }
    code.push(stmt(RET_K, RET_ALLOW));
    for (_, arg) in &opens {
        let pc = code.len();
        code.push(stmt(LD_W_ABS, arg_low(*arg)));
        // No O_TRUNC: allowed. O_TRUNC with write access (O_WRONLY 1,
        // O_RDWR 2): Landlock's write right decides. O_RDONLY (0) and access
        // mode 3 (both bits): EPERM.
        code.push(jump(JSET_K, O_TRUNC, 0, off(pc + 1, allow_at)?));
        code.push(jump(JSET_K, O_RDWR, 0, 1)); // O_RDWR or 3; else O_RDONLY or O_WRONLY
        code.push(jump(
            JSET_K,
            O_WRONLY,
            off(pc + 3, eperm_at)?,
            off(pc + 3, allow_at)?,
        ));
        code.push(jump(
            JSET_K,
            O_WRONLY,
            off(pc + 4, allow_at)?,
            off(pc + 4, eperm_at)?,
        ));
    }
    code.push(stmt(RET_K, RET_ALLOW));
    code.push(stmt(RET_K, ret_errno(libc::EPERM)));
    code.push(stmt(RET_K, ret_errno(libc::ENOSYS)));
    let mut prog = prologue(arch);
    prog.extend(code);
    Ok(prog)
}

/// The truncate guard, built in the parent before the clone; the command
/// stage installs it with [`StackedFilter::install`].
pub type TruncateGuard = StackedFilter;

/// Build the truncate guard for this architecture. Call in the parent.
pub fn truncate_guard() -> Result<TruncateGuard, SeccompError> {
    StackedFilter::native("TruncateGuard", program)
}

#[cfg(test)]
mod tests {
    use super::super::arch::{AUDIT_ARCH_X86_64, X32_SYSCALL_BIT};
    use super::super::bpf::{run, Data, RET_KILL_PROCESS};
    use super::super::equivalence::answer;
    use super::*;

    fn decide(arch: Arch, name: &str, args: [u64; 6]) -> u32 {
        answer(&program(arch).unwrap(), arch, name, args)
    }

    const EPERM: u32 = ret_errno(libc::EPERM);
    const ENOSYS: u32 = ret_errno(libc::ENOSYS);
    const RDONLY: u64 = 0;
    const WRONLY: u64 = 1;
    const RDWR: u64 = 2;
    const TRUNC: u64 = O_TRUNC as u64;
    const CREAT: u64 = 0o100;
    const CLOEXEC: u64 = 0o2000000;

    #[test]
    fn decisions_per_syscall_on_both_architectures() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let at = |flags: u64| decide(arch, "openat", [u64::MAX - 99, 0, flags, 0o644, 0, 0]);
            assert_eq!(decide(arch, "truncate", [0, 0, 0, 0, 0, 0]), EPERM);
            assert_eq!(decide(arch, "openat2", [0; 6]), ENOSYS);
            assert_eq!(at(RDONLY | TRUNC), EPERM, "{arch:?}");
            assert_eq!(at(RDONLY | TRUNC | CLOEXEC), EPERM);
            assert_eq!(at(RDONLY), RET_ALLOW);
            assert_eq!(at(RDONLY | CLOEXEC | CREAT), RET_ALLOW);
            assert_eq!(at(WRONLY | TRUNC | CREAT), RET_ALLOW);
            assert_eq!(at(RDWR | TRUNC), RET_ALLOW);
            // Access mode 3 (neither read nor write) asks Landlock for nothing.
            assert_eq!(at(3 | TRUNC), EPERM);
            assert_eq!(at(3 | TRUNC | CLOEXEC), EPERM);
            assert_eq!(
                at(3),
                RET_ALLOW,
                "without O_TRUNC: the main program's matter"
            );
            // The kernel reads the flags as 32 bits: a high word changes nothing.
            assert_eq!(at((1 << 40) | RDONLY | TRUNC), EPERM);
            assert_eq!(at((1 << 40) | WRONLY | TRUNC), RET_ALLOW);
            for other in ["ftruncate", "read", "write", "close", "fallocate"] {
                assert_eq!(
                    decide(arch, other, [3, 0, 0, 0, 0, 0]),
                    RET_ALLOW,
                    "{other}"
                );
            }
        }
        let open = |flags: u64| decide(Arch::X86_64, "open", [0, flags, 0o644, 0, 0, 0]);
        assert_eq!(open(RDONLY | TRUNC), EPERM);
        assert_eq!(open(WRONLY | TRUNC), RET_ALLOW);
        assert_eq!(open(RDONLY), RET_ALLOW);
        assert_eq!(
            decide(Arch::X86_64, "creat", [0, 0o644, 0, 0, 0, 0]),
            RET_ALLOW
        );
    }

    #[test]
    fn foreign_abis_are_killed_as_by_the_main_program() {
        let p = program(Arch::X86_64).unwrap();
        let x32 = Data {
            nr: X32_SYSCALL_BIT | 2,
            arch: AUDIT_ARCH_X86_64,
            args: [0, TRUNC, 0, 0, 0, 0],
        };
        assert_eq!(run(&p, &x32), RET_KILL_PROCESS);
        let i386 = Data {
            nr: 92, // truncate on i386
            arch: 0x4000_0003,
            args: [0; 6],
        };
        assert_eq!(run(&p, &i386), RET_KILL_PROCESS);
    }
}

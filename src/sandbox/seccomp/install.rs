//! Loading the prepared program into the kernel, in the forked child.
//!
//! Runs between fork and execve, so it must be async-signal-safe: it only
//! reads the program built before fork and makes `prctl`/`seccomp` syscalls;
//! no allocation, no locks, no logging. Errors are the raw errno.

use super::bpf::SockFilter;
use nix::errno::Errno;

/// `struct sock_fprog` (linux/filter.h); [`SockFilter`] is `#[repr(C)]` with
/// the kernel's layout (u16 code, u8 jt, u8 jf, u32 k).
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const SockFilter,
}

/// Sets `PR_SET_NO_NEW_PRIVS` (idempotent; the kernel refuses an unprivileged
/// filter without it).
pub(super) fn set_no_new_privs() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments only; touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if rc != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Installs one filter on the calling thread. `prog` was length-checked when
/// built (1..=4096 instructions); a program that is not gives EINVAL.
pub(super) fn install_one(prog: &[SockFilter]) -> Result<(), Errno> {
    let len = match libc::c_ushort::try_from(prog.len()) {
        Ok(len) if len > 0 => len,
        _ => return Err(Errno::EINVAL),
    };
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, which is alive and unchanged for the
    // whole call; the kernel copies the program (copy_from_user) and keeps no
    // pointer to our memory. Flags 0: this thread only (the forked child has one).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_ulong,
            &fprog as *const SockFprog,
        )
    };
    if rc != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// The program as a `struct sock_fprog` for a raw `seccomp()` call in the
/// child stage (which shares the supervisor's memory and must not use libc).
/// Valid for as long as `prog` is alive and unchanged.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawProgram {
    len: libc::c_ushort,
    filter: *const SockFilter,
}

impl RawProgram {
    pub(super) fn of(prog: &[SockFilter]) -> Option<RawProgram> {
        let len = libc::c_ushort::try_from(prog.len()).ok().filter(|&l| l > 0)?;
        Some(RawProgram { len, filter: prog.as_ptr() })
    }

    /// Pointer to pass as `seccomp(SECCOMP_SET_MODE_FILTER, 0, ptr)`.
    pub fn as_ptr(&self) -> *const std::ffi::c_void {
        (self as *const RawProgram).cast()
    }
}

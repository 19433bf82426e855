//! Loading the prepared program into the kernel, in the child stage.
//!
//! The command stage shares the supervisor's memory (see `sandbox::child`),
//! so this makes only raw `prctl`/`seccomp` system calls (`sys::raw`: no libc
//! wrapper, no errno), reads only the program built before the clone, and
//! neither allocates nor locks. Errors are the raw errno.

use super::bpf::SockFilter;
use crate::sys::raw;
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
    raw::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)
        .map(drop)
        .map_err(Errno::from_raw)
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
    // pointer to our memory. Flags 0: this thread only.
    unsafe { raw::seccomp_set_filter(std::ptr::addr_of!(fprog).cast()) }
        .map(drop)
        .map_err(Errno::from_raw)
}

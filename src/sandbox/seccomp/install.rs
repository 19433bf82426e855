//! Loading the prepared program into the kernel, in the child stage.
//!
//! The command stage shares the supervisor's memory (see `sandbox::child`),
//! so this makes only raw `prctl`/`seccomp` system calls (`sys::raw`: no libc
//! wrapper, no errno), reads only the program built before the clone, and
//! neither allocates nor locks. Errors are the raw errno.

use super::bpf::SockFilter;
use crate::sys::raw;
use nix::errno::Errno;

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
    raw::seccomp_install(prog)
        .map(drop)
        .map_err(Errno::from_raw)
}

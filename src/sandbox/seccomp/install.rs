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

/// A small program stacked after the main one (the signal filter, the
/// truncate guard), built in the parent before the clone for this machine's
/// architecture; the command stage installs it.
pub struct StackedFilter {
    what: &'static str,
    program: Vec<SockFilter>,
}

impl std::fmt::Debug for StackedFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.what)
            .field("instructions", &self.program.len())
            .finish()
    }
}

impl StackedFilter {
    /// `build`'s program for the native architecture. Call in the parent.
    pub(super) fn native(
        what: &'static str,
        build: impl Fn(super::table::Arch) -> Result<Vec<SockFilter>, super::SeccompError>,
    ) -> Result<StackedFilter, super::SeccompError> {
        let arch = super::table::Arch::native().ok_or(super::SeccompError::UnsupportedArch {
            arch: std::env::consts::ARCH,
        })?;
        Ok(StackedFilter {
            what,
            program: build(arch)?,
        })
    }

    /// Install the filter on the calling thread. For the command stage,
    /// after the main program (which set no_new_privs): raw system calls
    /// only, no allocation.
    pub fn install(&self) -> Result<(), i32> {
        raw::seccomp_install_flags(&self.program, 0).map(drop)
    }

    /// Install it with a new listener (`SECCOMP_FILTER_FLAG_NEW_LISTENER`);
    /// the listener's descriptor (close-on-exec) is returned, for the
    /// supervisor. Same constraints as [`StackedFilter::install`].
    pub fn install_with_listener(&self) -> Result<std::ffi::c_int, i32> {
        raw::seccomp_install_flags(&self.program, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER)
            .map(|fd| fd as std::ffi::c_int)
    }
}

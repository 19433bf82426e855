//! Handing the prepared ruleset to the child stage.
//!
//! The child runs in the supervisor's address space (CLONE_VM, see
//! `supervisor::spawn`) and may only make raw system calls, so it cannot use
//! the `landlock` crate's `restrict_self`. [`Prepared::into_child`] takes out
//! what those calls need: the ruleset descriptor (every rule already added)
//! and the rights of the child's own `/proc/self` rule, which can only be
//! opened after the clone. The crate's `RestrictionStatus` check moves to
//! [`prepare`](super::prepare): without `best_effort` the ruleset was built
//! with hard requirements, so it is fully enforced once
//! `landlock_restrict_self` succeeds; with `best_effort`, whatever was dropped
//! is already in the report. A ruleset of `None` means no Landlock at all (only
//! possible with `best_effort`): the child then sets no_new_privs and goes on.

use std::os::fd::{AsRawFd, OwnedFd};

use super::{rights, Prepared};
use crate::plan::Access;
use crate::sys::raw;

/// What the child needs to restrict itself with raw system calls.
#[derive(Debug)]
pub struct ChildRules {
    /// The ruleset (close-on-exec); None when the kernel has no Landlock.
    pub ruleset: Option<OwnedFd>,
    /// Rights for the child's own /proc/self (0: no such rule).
    pub proc_self_access: u64,
}

impl Prepared {
    /// A second descriptor of the ruleset (every path rule added), for a
    /// thread of capsule's that acts for the run under the run's own rules
    /// (the network guard's bind: `guards::network`). None without Landlock.
    pub fn ruleset_copy(&self) -> Option<OwnedFd> {
        let copy = self.ruleset.as_ref()?.try_clone().ok()?;
        Option::<OwnedFd>::from(copy)
    }

    /// Take out the ruleset descriptor and the /proc/self rights.
    pub fn into_child(self) -> ChildRules {
        let proc_self_access = if self.proc_self && self.ruleset.is_some() {
            rights::for_access(Access::READ, self.abi, true).bits()
        } else {
            0
        };
        let ruleset = self.ruleset.and_then(Option::<OwnedFd>::from);
        ChildRules {
            ruleset,
            proc_self_access,
        }
    }
}

impl ChildRules {
    /// Restrict the calling process: the child's own /proc/self rule (it can
    /// only be opened here), then `landlock_restrict_self`. No_new_privs must
    /// already be set. Raw system calls only (see `sandbox::child`); the error
    /// is the errno.
    pub fn restrict(&self) -> Result<(), i32> {
        let Some(ruleset) = self.ruleset.as_ref().map(AsRawFd::as_raw_fd) else {
            // No Landlock on this kernel (best effort only; already reported).
            return Ok(());
        };
        if self.proc_self_access != 0 {
            let fd = raw::openat(
                libc::AT_FDCWD,
                c"/proc/self",
                libc::O_PATH | libc::O_CLOEXEC,
            )? as libc::c_int;
            let r = raw::landlock_add_path_rule(ruleset, self.proc_self_access, fd);
            raw::close(fd);
            r?;
        }
        raw::landlock_restrict_self(ruleset).map(drop)
    }
}

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

use std::os::fd::OwnedFd;

use super::{rights, Prepared};
use crate::plan::Access;

/// What the child needs to restrict itself with raw system calls.
#[derive(Debug)]
pub struct ChildRules {
    /// The ruleset (close-on-exec); None when the kernel has no Landlock.
    pub ruleset: Option<OwnedFd>,
    /// Rights for the child's own /proc/self (0: no such rule).
    pub proc_self_access: u64,
}

impl Prepared {
    /// Take out the ruleset descriptor and the /proc/self rights.
    pub fn into_child(self) -> ChildRules {
        let proc_self_access = if self.proc_self && self.ruleset.is_some() {
            rights::for_access(Access::READ, self.abi, true).bits()
        } else {
            0
        };
        let ruleset = self.ruleset.and_then(Option::<OwnedFd>::from);
        ChildRules { ruleset, proc_self_access }
    }
}

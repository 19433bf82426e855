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
    /// Rights for the directories of the child's own /proc/self (0: no such rule).
    pub proc_self_access: u64,
    /// Rights for its files (what Landlock allows on a non-directory).
    pub proc_self_file_access: u64,
}

/// The entries of the child's own `/proc/self` (and of its main thread's
/// `/proc/thread-self`) that get a rule, each on its own: never `net`,
/// which shows the network namespace the process is in (without one of
/// its own: the host's connections, listeners and Unix socket names), nor
/// `task` (each thread's directory holds a `net` of its own; the main
/// thread's entries come through `/proc/thread-self`). Landlock cannot
/// subtract, so a rule on `/proc/self` itself would grant `net` too. The
/// magic links (`exe`, `cwd`, `root`) need none: opening through them is
/// checked where they lead. An entry this kernel lacks is skipped.
const PROC_SELF_ENTRIES: &[&std::ffi::CStr] = &[
    c"arch_status",
    c"attr",
    c"autogroup",
    c"auxv",
    c"cgroup",
    c"clear_refs",
    c"cmdline",
    c"comm",
    c"coredump_filter",
    c"cpu_resctrl_groups",
    c"cpuset",
    c"environ",
    c"fd",
    c"fdinfo",
    c"gid_map",
    c"io",
    c"ksm_merging_pages",
    c"ksm_stat",
    c"limits",
    c"loginuid",
    c"map_files",
    c"maps",
    c"mem",
    c"mountinfo",
    c"mounts",
    c"mountstats",
    c"ns",
    c"numa_maps",
    c"oom_adj",
    c"oom_score",
    c"oom_score_adj",
    c"pagemap",
    c"patch_state",
    c"personality",
    c"projid_map",
    c"sched",
    c"schedstat",
    c"sessionid",
    c"setgroups",
    c"smaps",
    c"smaps_rollup",
    c"stack",
    c"stat",
    c"statm",
    c"status",
    c"syscall",
    c"timens_offsets",
    c"timers",
    c"timerslack_ns",
    c"uid_map",
    c"wchan",
];

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
        let (proc_self_access, proc_self_file_access) = if self.proc_self && self.ruleset.is_some()
        {
            (
                rights::for_access(Access::READ, self.abi, true).bits(),
                rights::for_access(Access::READ, self.abi, false).bits(),
            )
        } else {
            (0, 0)
        };
        let ruleset = self.ruleset.and_then(Option::<OwnedFd>::from);
        ChildRules {
            ruleset,
            proc_self_access,
            proc_self_file_access,
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
            for dir in [c"/proc/self", c"/proc/thread-self"] {
                let dfd = raw::openat(
                    libc::AT_FDCWD,
                    dir,
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )? as libc::c_int;
                let r = self.add_entries(ruleset, dfd);
                raw::close(dfd);
                r?;
            }
        }
        raw::landlock_restrict_self(ruleset).map(drop)
    }

    /// One rule per entry of [`PROC_SELF_ENTRIES`] beneath the directory
    /// `dfd`: a directory's rights for a directory, a file's for the rest.
    fn add_entries(&self, ruleset: libc::c_int, dfd: libc::c_int) -> Result<(), i32> {
        let base = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        for name in PROC_SELF_ENTRIES {
            let (fd, access) = match raw::openat(dfd, name, base | libc::O_DIRECTORY) {
                Ok(fd) => (fd as libc::c_int, self.proc_self_access),
                Err(libc::ENOTDIR) => (
                    raw::openat(dfd, name, base)? as libc::c_int,
                    self.proc_self_file_access,
                ),
                Err(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let r = raw::landlock_add_path_rule(ruleset, access, fd);
            raw::close(fd);
            r?;
        }
        Ok(())
    }
}

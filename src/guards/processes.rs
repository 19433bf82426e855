//! The process guard: `limits.max_processes` as root where capsule has no
//! cgroup (a container whose cgroupfs is read-only, a host without systemd
//! or delegation). RLIMIT_NPROC does not bind uid 0, so the notify filter's
//! process part (`sandbox::seccomp::signals`) sends every clone, fork and
//! vfork of the run here, and the supervisor counts the run's tasks
//! (threads included, as the cgroup pids controller does):
//!
//! * below the limit the call continues (CONTINUE: the clone flags are the
//!   main program's business);
//! * at the limit it fails with EAGAIN, as the pids controller answers.
//!
//! Counting: with a pid namespace, the run's own `/proc` (reached through
//! the run's init: `/proc/INIT/root/proc`) lists exactly the run; where the
//! view holds the container's `/proc`, bound because no fresh procfs could be
//! mounted (the same filesystem as capsule's own `/proc`), or that path is out
//! of reach (no CAP_SYS_PTRACE over init, which shares capsule's non-dumpable
//! memory: a container's root), the run's tree is counted as without a pid
//! namespace (every parent chain of the run leads to its init); without
//! one, the host's `/proc` is scanned for processes that carry the run's
//! marks and descend from it (`judge::Judge::in_tree`).
//!
//! A fork that was let through but whose child has not appeared yet is
//! counted as one more task until its caller has returned from the call
//! (`/proc/TID/syscall` no longer shows it), so that forks decided one after
//! another never see a stale count. A vfork's caller stays in the call until
//! its child execs or exits, so that child counts twice meanwhile: stricter,
//! never looser.

use super::judge::{Judge, Tree};
use super::procfs::ProcFs;
use crate::sys::notify::{Notification, Reply};

/// How the run's tasks are found.
pub enum Census {
    /// The run's pid namespace, through its init's root; where that shows
    /// no procfs of the run's own, the run's tree (`tree`: None when
    /// capsule's /proc does not show capsule as itself).
    PidNamespace {
        init: libc::pid_t,
        tree: Option<Tree>,
    },
    /// No pid namespace: the host's `/proc`, judged by the run's tree.
    Tree(Tree),
}

/// The guard's state for one run.
pub struct ProcGuard {
    pub max: u64,
    pub census: Census,
    /// Callers let through whose call may not have made its task yet.
    pending: Vec<libc::pid_t>,
}

impl ProcGuard {
    pub fn new(max: u64, census: Census) -> ProcGuard {
        ProcGuard {
            max,
            census,
            pending: Vec::new(),
        }
    }

    /// Whether notification number `nr` is the guard's.
    pub fn handles(nr: i32) -> bool {
        let nr = i64::from(nr);
        nr == libc::SYS_clone || is_fork(nr)
    }

    /// Decide one clone/fork/vfork.
    pub fn decide(&mut self, n: &Notification) -> Reply {
        // The caller is making a new call: its previous one has returned.
        let caller = n.pid as libc::pid_t;
        self.pending
            .retain(|&tid| tid != caller && still_in_clone(tid));
        let Some(tasks) = self.count() else {
            tracing::warn!("process guard: cannot count the run's tasks; the fork is refused");
            return Reply::Fail(libc::EAGAIN);
        };
        let with_pending = tasks + self.pending.len() as u64;
        if with_pending >= self.max {
            tracing::debug!(
                "process guard: {tasks} tasks (+{} forking) at max_processes {}: EAGAIN",
                self.pending.len(),
                self.max
            );
            return Reply::Fail(libc::EAGAIN);
        }
        self.pending.push(caller);
        Reply::Continue
    }

    /// The run's tasks now.
    fn count(&self) -> Option<u64> {
        match &self.census {
            Census::PidNamespace { init, tree } => {
                let own = format!("/proc/{init}/root/proc");
                match same_filesystem(&own, "/proc") {
                    Some(false) => count_dir(&own, |_| true),
                    // The view holds the container's /proc, bound (it lists
                    // the whole container), or the run's own is out of
                    // reach (init shares capsule's memory, made
                    // non-dumpable, and capsule lacks CAP_SYS_PTRACE, as a
                    // container's root does): the run's tree in capsule's
                    // /proc, whose parent chains all lead to init.
                    _ => count_tree(tree.as_ref()?),
                }
            }
            Census::Tree(tree) => count_tree(tree),
        }
    }
}

/// The tasks of the processes in `tree`, found in capsule's /proc.
fn count_tree(tree: &Tree) -> Option<u64> {
    let judge = Judge {
        tree,
        procs: ProcFs,
    };
    count_dir("/proc", |pid| judge.in_tree(pid))
}

#[cfg(target_arch = "x86_64")]
fn is_fork(nr: i64) -> bool {
    nr == libc::SYS_fork || nr == libc::SYS_vfork
}

#[cfg(not(target_arch = "x86_64"))]
fn is_fork(_nr: i64) -> bool {
    false
}

/// Whether thread `tid` may still be inside a clone/fork/vfork:
/// `/proc/TID/syscall` starts with the number of the call it waits in, or
/// says "running" (on a CPU: perhaps still making the child, so it counts
/// until it is seen elsewhere). Gone: no.
fn still_in_clone(tid: libc::pid_t) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{tid}/syscall")) else {
        return false;
    };
    match text.split_whitespace().next() {
        Some("running") => true,
        Some(n) => n
            .parse::<i64>()
            .is_ok_and(|nr| nr == libc::SYS_clone || is_fork(nr)),
        None => false,
    }
}

/// The tasks (`Threads:`) of the processes listed in `dir` (a procfs) that
/// `keep` accepts. None when the directory cannot be read.
fn count_dir(dir: &str, keep: impl Fn(libc::pid_t) -> bool) -> Option<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if !keep(pid) {
            continue;
        }
        // A process that exits meanwhile no longer counts.
        let Ok(status) = std::fs::read_to_string(format!("{dir}/{pid}/status")) else {
            continue;
        };
        total += threads(&status).unwrap_or(1);
    }
    Some(total)
}

/// Whether `a` and `b` are on the same filesystem (one procfs, bound
/// elsewhere, or a procfs of its own). None when either cannot be reached.
fn same_filesystem(a: &str, b: &str) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    Some(std::fs::metadata(a).ok()?.dev() == std::fs::metadata(b).ok()?.dev())
}

/// `Threads:` of a `/proc/PID/status`.
fn threads(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_read_from_status() {
        assert_eq!(threads("Name:\tx\nThreads:\t7\nSigQ:\t0/1\n"), Some(7));
        assert_eq!(threads("Name:\tx\n"), None);
    }

    #[test]
    fn the_callers_of_clone_are_the_guards() {
        assert!(ProcGuard::handles(libc::SYS_clone as i32));
        assert!(!ProcGuard::handles(libc::SYS_clone3 as i32));
        assert!(!ProcGuard::handles(libc::SYS_kill as i32));
        #[cfg(target_arch = "x86_64")]
        assert!(
            ProcGuard::handles(libc::SYS_fork as i32) && ProcGuard::handles(libc::SYS_vfork as i32)
        );
    }

    #[test]
    fn this_process_counts_its_own_threads() {
        let me = std::process::id() as libc::pid_t;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        // This test's thread and the one just spawned, at least.
        let n = count_dir("/proc", |p| p == me).expect("/proc");
        assert!(n >= 2, "{n}");
        assert_eq!(count_dir("/proc", |_| false), Some(0));
        assert_eq!(count_dir("/nonexistent-proc", |_| true), None);
        drop(tx);
        let _ = t.join();
    }
}

//! Killing every process of a run.
//!
//! In a pid namespace this is one `kill(init, SIGKILL)`: the kernel takes the
//! whole namespace down. Without one, capsule and the keeper are child
//! subreapers: every process of the run is a descendant of the keeper, or of
//! capsule once the keeper is gone, so a run has ended exactly when capsule
//! has no child left but the ones it had before the run (`keep`). The kill
//! ([`kill_tree`]) walks that tree from capsule down and SIGKILLs every
//! process in it at once, through pidfds only ([`collect_below`]): a process
//! of the run may be reaped by its parent at any moment, after which its pid
//! may be anyone's, so capsule never signals a pid it does not hold a
//! descriptor of. Where the run has a v2 cgroup with `cgroup.kill` (Linux
//! 5.14+), the kernel kills the whole cgroup first, and no fork can race it.
//!
//! [`sweep`] repeats that kill and reaps what is reparented to capsule until
//! no process of the run is left, bounded by time ([`SWEEP_BOUND`]), not by a
//! count of rounds: a chain of processes each the child of the one before
//! dies in one round (each level is signalled, not only capsule's children),
//! and a fork racing the kill is caught by the next. What is still there when
//! the bound is reached is returned, for the result's `left_behind`: a result
//! never says the tree is gone when it is not. A run that exits normally
//! costs one listing of capsule's children, as before.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use crate::sys;

/// How long [`sweep`] may take to kill and reap every process of the run.
pub const SWEEP_BOUND: Duration = Duration::from_secs(5);

/// How many `left_behind` lines name a process; the rest are counted.
const LISTED: usize = 16;

/// Pids whose parent is `parent`: from /proc/PID/task/*/children when the
/// kernel has those files (cheap), else by scanning /proc/*/stat.
///
/// Which of the two is decided once, for the kernel, never per process: a
/// process of the run that has exited (every generation of a fork-and-exit
/// chain does so within a fork's time) has no task files to read, and has no
/// children either. Falling back to a scan of all of /proc for each such
/// process made the walk cost a scan of the whole host per vanished process,
/// on the event loop's thread: a run of fork-and-exit chains held the walk,
/// and with it the grace, the SIGKILL and the 124, for as long as it liked.
pub fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    if children_files() {
        return children_from_task_files(parent);
    }
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        if parent_of(pid) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// The parent of `pid` (its `ppid` in /proc/PID/stat), if it exists.
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...  — comm may contain spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut it = rest.split_whitespace();
    let _state = it.next();
    it.next()?.parse().ok()
}

/// Whether the process behind `fd` has not been reaped yet.
fn exists(fd: &OwnedFd) -> bool {
    sys::pidfd_signal(fd.as_fd(), 0).is_ok()
}

/// Every process below `root` (not `root` itself, nor the subtrees of its
/// children in `skip`), each with a pidfd, parents before children.
///
/// `root` must be this process or a child of it not reaped yet: its pid is
/// its own for the whole walk. Every other process is taken only once it is
/// proven to be the child of one already taken: a pidfd of the pid listed,
/// its parent read from /proc, and then both it and that parent still there
/// (a pid is not reused before its process is reaped, so both reads were of
/// the processes the descriptors hold). A pid reused meanwhile is never
/// taken. Returns false where pidfds are refused (ENOSYS, EPERM: an old
/// kernel or an outer seccomp profile).
fn collect_below(
    root: libc::pid_t,
    skip: &[libc::pid_t],
    out: &mut Vec<(libc::pid_t, OwnedFd)>,
) -> bool {
    let first = out.len();
    // (pid, index of its descriptor in `out`; None for the root)
    let mut todo: Vec<(libc::pid_t, Option<usize>)> = vec![(root, None)];
    while let Some((parent, at)) = todo.pop() {
        let kids = children_of(parent);
        for kid in kids {
            if at.is_none() && skip.contains(&kid) {
                continue;
            }
            let fd = match sys::pidfd_open(kid) {
                Ok(fd) => fd,
                Err(Errno::ESRCH) => continue,
                // Out of descriptors: what is taken is killed, and the next
                // round of the sweep takes the rest.
                Err(Errno::EMFILE | Errno::ENFILE) => return true,
                Err(_) => return out.len() > first,
            };
            if parent_of(kid) != Some(parent) {
                continue;
            }
            let parent_still = at.is_none_or(|i| exists(&out[i].1));
            if !parent_still || !exists(&fd) {
                continue;
            }
            out.push((kid, fd));
            todo.push((kid, Some(out.len() - 1)));
        }
    }
    true
}

/// Send `sig` to every process below `root` (this process or an unreaped
/// child of it: under the keeper, the keeper), through pidfds only.
/// Returns how many processes it reached.
pub fn signal_below(root: libc::pid_t, sig: libc::c_int) -> usize {
    let mut found = Vec::new();
    collect_below(root, &[], &mut found);
    found
        .iter()
        .filter(|(_, fd)| sys::pidfd_signal(fd.as_fd(), sig).is_ok())
        .count()
}

/// SIGKILL every descendant of capsule but the children in `keep` (and
/// theirs): the run's cgroup at once where it has `cgroup.kill`, then every
/// process of the tree through its pidfd. Where pidfds are refused, capsule's
/// own children get a plain kill(2) (a child's pid is not reused before
/// capsule reaps it) and the sweep goes round after round.
pub fn kill_tree(keep: &[libc::pid_t], cgroup_kill: Option<&std::path::Path>) {
    if let Some(file) = cgroup_kill {
        if let Err(e) = std::fs::write(file, "1") {
            tracing::debug!("{}: {e}", file.display());
        }
    }
    let me = nix::unistd::getpid().as_raw();
    let mut found = Vec::new();
    if collect_below(me, keep, &mut found) {
        for (_, fd) in &found {
            let _ = sys::pidfd_signal(fd.as_fd(), libc::SIGKILL);
        }
    } else {
        for k in own_children_except(keep) {
            sys::signal(k, libc::SIGKILL);
        }
    }
}

/// Kill every process of the run and reap what is reparented to capsule,
/// until capsule has no child left but those in `keep`, for at most `bound`.
/// Returns a `left_behind` line for each process still there after it (none
/// once the tree is gone). Costs one listing of capsule's children when
/// nothing is left, as after a run that ended by itself.
pub fn sweep(
    keep: &[libc::pid_t],
    cgroup_kill: Option<&std::path::Path>,
    bound: Duration,
) -> Vec<String> {
    let mut kids = own_children_except(keep);
    if kids.is_empty() {
        return Vec::new();
    }
    let start = Instant::now();
    let mut rounds = 0u32;
    loop {
        rounds += 1;
        kill_tree(keep, cgroup_kill);
        reap(&kids, start + bound);
        kids = own_children_except(keep);
        if kids.is_empty() {
            tracing::debug!(
                "tree kill: done in {rounds} round(s), {:?}",
                start.elapsed()
            );
            return Vec::new();
        }
        if start.elapsed() >= bound {
            return left_behind(keep, bound);
        }
    }
}

/// Reap each of `kids` (capsule's children, SIGKILLed) as it ends, until all
/// are reaped or `deadline`: a process stuck in the kernel (a dead network
/// file system) must not hang capsule.
fn reap(kids: &[libc::pid_t], deadline: Instant) {
    let mut waiting: Vec<libc::pid_t> = kids.to_vec();
    loop {
        waiting.retain(|&k| {
            use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
            // Still running: wait on; reaped (or ECHILD: reaped elsewhere,
            // by a tool's broker): done.
            matches!(
                waitpid(
                    nix::unistd::Pid::from_raw(k),
                    Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
                ),
                Ok(WaitStatus::StillAlive) | Err(Errno::EINTR)
            )
        });
        if waiting.is_empty() || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// The `left_behind` lines for what is still below capsule after the sweep,
/// also said on stderr.
fn left_behind(keep: &[libc::pid_t], bound: Duration) -> Vec<String> {
    let mut found = Vec::new();
    collect_below(nix::unistd::getpid().as_raw(), keep, &mut found);
    let mut pids: Vec<libc::pid_t> = found.iter().map(|(p, _)| *p).collect();
    if pids.is_empty() {
        // pidfds refused: capsule's children, by their pids.
        pids = own_children_except(keep);
    }
    let secs = bound.as_secs_f64();
    let mut lines: Vec<String> = pids
        .iter()
        .take(LISTED)
        .map(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            format!(
                "process {p} ({}): still there after {secs} s of killing the run's tree",
                comm.trim()
            )
        })
        .collect();
    if pids.len() > LISTED {
        lines.push(format!("... and {} more processes", pids.len() - LISTED));
    }
    crate::say!(
        "capsule: warning: {} process(es) of the run could not be killed within {secs} s; left behind:",
        pids.len()
    );
    for l in &lines {
        crate::say!("capsule:   {l}");
    }
    lines
}

/// capsule's own children, except those in `keep`.
pub fn own_children_except(keep: &[libc::pid_t]) -> Vec<libc::pid_t> {
    let me = nix::unistd::getpid().as_raw();
    children_of(me)
        .into_iter()
        .filter(|k| !keep.contains(k))
        .collect()
}

/// Whether this kernel has /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN),
/// asked once, of capsule's own main thread.
fn children_files() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAVE.get_or_init(|| {
        let me = nix::unistd::getpid().as_raw();
        std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// The children listed in `parent`'s task files; none for a process (or a
/// thread) that is gone meanwhile: it has no children any more.
fn children_from_task_files(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok()),
        );
    }
    out
}

//! Killing every process of a run.
//!
//! In a pid namespace this is one `kill(init, SIGKILL)`: the kernel takes the
//! whole namespace down. Without one, capsule is a child subreaper, so every
//! orphaned descendant is reparented to it; [`kill_descendants`] SIGKILLs
//! the command's process group and then, round after round, every child of
//! capsule it finds in /proc, reaping each, until none is left.

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::sys;

/// Pids whose parent is `parent`: from /proc/PID/task/*/children when the
/// kernel has it (cheap), else by scanning /proc/*/stat.
pub fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    if let Some(kids) = children_from_task_files(parent) {
        return kids;
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
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...  — comm may contain spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let _state = it.next();
        if it.next().and_then(|p| p.parse::<libc::pid_t>().ok()) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// SIGKILL the process group led by `leader` and every descendant reparented
/// to us (any child not in `keep`), reaping them. Gives up after `rounds`
/// rounds (a fork bomb racing the kill is bounded by the run's process limit).
pub fn kill_descendants(leader: Option<libc::pid_t>, keep: &[libc::pid_t], rounds: usize) {
    if let Some(l) = leader {
        sys::signal(-l, libc::SIGKILL);
    }
    kill_children(keep, rounds);
}

/// SIGKILL and reap every child of capsule not in `keep`, round after round
/// until none is left (orphans reparented to capsule as a subreaper).
pub fn kill_children(keep: &[libc::pid_t], rounds: usize) {
    for _ in 0..rounds {
        let kids = own_children_except(keep);
        if kids.is_empty() {
            return;
        }
        for &k in &kids {
            sys::signal(k, libc::SIGKILL);
        }
        for &k in &kids {
            let _ = waitpid(Pid::from_raw(k), Some(WaitPidFlag::__WALL));
        }
    }
}

/// capsule's own children, except those in `keep`.
pub fn own_children_except(keep: &[libc::pid_t]) -> Vec<libc::pid_t> {
    let me = nix::unistd::getpid().as_raw();
    children_of(me)
        .into_iter()
        .filter(|k| !keep.contains(k))
        .collect()
}

fn children_from_task_files(parent: libc::pid_t) -> Option<Vec<libc::pid_t>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{parent}/task"))
        .ok()?
        .flatten()
    {
        let text = std::fs::read_to_string(task.path().join("children")).ok()?;
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<libc::pid_t>().ok()),
        );
    }
    Some(out)
}

//! Resource limits applied with setrlimit in the child.
//!
//! Always: no core dumps, and no real-time or raised scheduling priority
//! (RLIMIT_RTPRIO and RLIMIT_NICE 0): a host's limits.d may give its user
//! `rtprio 95` (the `audio` and `pipewire` groups), with which the run's
//! spinning SCHED_FIFO threads held every core against the user's session
//! and capsule's own supervisor (`tests/escape_redteam9.rs`). From `limits`: RLIMIT_CPU, RLIMIT_FSIZE,
//! RLIMIT_NOFILE; and, when no cgroup can hold them, RLIMIT_DATA for
//! `memory_mb` (not RLIMIT_AS, which breaks runtimes that reserve address
//! space, such as Go, Java and Node) and RLIMIT_NPROC for `max_processes`.
//! RLIMIT_NPROC counts every process of the real uid system-wide (inside a
//! fresh user namespace: the run's processes), and does not bind uid 0.

use nix::sys::resource::Resource;

use crate::plan::LimitsPlan;

/// How `memory_mb` and `max_processes` are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    CgroupV2,
    CgroupV1,
    Rlimit,
    /// max_processes as root without a cgroup: the process guard
    /// (`guards::processes`) counts the run's tasks at every fork.
    ProcessGuard,
    /// Not enforced (only with --best-effort).
    None,
}

impl Mechanism {
    pub fn label(self, rlimit: &'static str) -> String {
        match self {
            Mechanism::CgroupV2 => "cgroup-v2".into(),
            Mechanism::CgroupV1 => "cgroup-v1".into(),
            Mechanism::Rlimit => rlimit.into(),
            Mechanism::ProcessGuard => "seccomp-notify".into(),
            Mechanism::None => "not-enforced".into(),
        }
    }
}

/// The setrlimit calls for the child.
///
/// `nproc_base` is added to `max_processes` when RLIMIT_NPROC counts the
/// whole uid (no user namespace): the processes the uid already has.
pub fn plan(
    l: &LimitsPlan,
    memory: Mechanism,
    procs: Mechanism,
    nproc_base: u64,
) -> Vec<(Resource, u64)> {
    let mut out = vec![
        (Resource::RLIMIT_CORE, 0),
        (Resource::RLIMIT_RTPRIO, 0),
        (Resource::RLIMIT_NICE, 0),
    ];
    if let Some(c) = l.cpu_seconds {
        out.push((Resource::RLIMIT_CPU, c));
    }
    if let Some(f) = l.max_file_size_bytes {
        out.push((Resource::RLIMIT_FSIZE, f));
    }
    if let Some(n) = l.max_open_files {
        out.push((Resource::RLIMIT_NOFILE, n));
    }
    if let (Some(m), Mechanism::Rlimit) = (l.memory_bytes, memory) {
        out.push((Resource::RLIMIT_DATA, m));
    }
    if let (Some(p), Mechanism::Rlimit) = (l.max_processes, procs) {
        out.push((Resource::RLIMIT_NPROC, p.saturating_add(nproc_base)));
    }
    out
}

/// Processes (threads count too) the real uid has now, from /proc.
pub fn uid_process_count(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let mut real = None;
        let mut threads = 1;
        for line in status.lines() {
            if let Some(v) = line.strip_prefix("Uid:") {
                real = v
                    .split_whitespace()
                    .next()
                    .and_then(|s| s.parse::<u32>().ok());
            } else if let Some(v) = line.strip_prefix("Threads:") {
                threads = v.trim().parse().unwrap_or(1);
            }
        }
        if real == Some(uid) {
            n += threads;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the host's limits allow, the run gets no real-time
    /// priority and cannot raise its own (red team 9).
    #[test]
    fn the_run_never_inherits_realtime_or_nice_headroom() {
        let out = plan(&LimitsPlan::default(), Mechanism::None, Mechanism::None, 0);
        assert!(out.contains(&(Resource::RLIMIT_RTPRIO, 0)), "{out:?}");
        assert!(out.contains(&(Resource::RLIMIT_NICE, 0)), "{out:?}");
    }
}

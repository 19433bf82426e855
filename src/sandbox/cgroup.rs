//! A cgroup for one run, for `memory_mb` and `max_processes`.
//!
//! capsule makes its cgroup beneath the cgroup it is itself in, and only
//! ever moves its own child there; it never moves any other process and
//! never changes a cgroup it did not create (no controller enabled, no mode
//! switched). On a pure cgroup v2 host the controllers must already be
//! enabled in capsule's cgroup's `cgroup.subtree_control` (root in a root
//! cgroup that systemd set up, or a systemd `Delegate=yes` unit); on hybrid hosts (v1 controllers under
//! /sys/fs/cgroup/<controller>) the v1 `memory` and `pids` hierarchies are
//! used. Where neither works the limits fall back to rlimits (see
//! `sandbox::rlimits`), and the result says which mechanism is in force.

use std::path::{Path, PathBuf};

use super::rlimits::Mechanism;

/// The cgroup(s) made for one run.
#[derive(Debug, Default)]
pub struct RunCgroup {
    dirs: Vec<PathBuf>,
    pub memory: Option<Mechanism>,
    pub procs: Option<Mechanism>,
    memory_dir: Option<(PathBuf, bool)>,
}

/// Where this process sits: the v2 path and the v1 path of each controller.
fn own_cgroups() -> (Option<String>, Vec<(String, String)>) {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if ctrls.is_empty() {
            v2 = Some(path.to_string());
        } else {
            for c in ctrls.split(',') {
                v1.push((c.to_string(), path.to_string()));
            }
        }
    }
    (v2, v1)
}

/// The cgroup2 mount point, if any.
pub fn v2_mount() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.join("cgroup.controllers").exists())
}

fn join_rel(mount: &Path, rel: &str) -> PathBuf {
    mount.join(rel.trim_start_matches('/'))
}

fn has_word(file: &Path, word: &str) -> bool {
    std::fs::read_to_string(file)
        .map(|s| s.split_whitespace().any(|w| w == word))
        .unwrap_or(false)
}

/// What `doctor` reports about cgroups on this host.
pub fn describe() -> String {
    let (v2, v1) = own_cgroups();
    let mut parts = Vec::new();
    if let (Some(m), Some(rel)) = (v2_mount(), v2) {
        let dir = join_rel(&m, &rel);
        let ctrls = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        parts.push(format!(
            "cgroup v2 at {} (delegated controllers: {})",
            dir.display(),
            if ctrls.trim().is_empty() {
                "none"
            } else {
                ctrls.trim()
            }
        ));
    }
    for c in ["memory", "pids"] {
        if let Some((_, rel)) = v1.iter().find(|(n, _)| n == c) {
            parts.push(format!(
                "cgroup v1 {c} at {}",
                join_rel(&Path::new("/sys/fs/cgroup").join(c), rel).display()
            ));
        }
    }
    if parts.is_empty() {
        "no cgroup available".into()
    } else {
        parts.join("; ")
    }
}

impl RunCgroup {
    /// Make the run's cgroup(s) for the limits asked; a limit that no cgroup
    /// can hold is left `None` for the caller to handle.
    pub fn create(run_id: &str, memory: Option<u64>, procs: Option<u64>) -> RunCgroup {
        let mut cg = RunCgroup::default();
        if memory.is_none() && procs.is_none() {
            return cg;
        }
        let (v2, v1) = own_cgroups();
        let name = format!("capsule-{run_id}");
        // cgroup v2, when the controllers are (or can be) delegated to our cgroup's children.
        if let (Some(mount), Some(rel)) = (v2_mount(), v2) {
            let parent = join_rel(&mount, &rel);
            let want: Vec<&str> = [("memory", memory.is_some()), ("pids", procs.is_some())]
                .into_iter()
                .filter(|(_, w)| *w)
                .map(|(c, _)| c)
                .collect();
            // Only where the controllers are already delegated to our
            // cgroup's children: capsule never writes cgroup.subtree_control
            // (or anything else) of a cgroup it did not create.
            let sc = parent.join("cgroup.subtree_control");
            if want.iter().any(|c| has_word(&sc, c)) {
                let dir = parent.join(&name);
                if std::fs::create_dir(&dir).is_ok() {
                    cg.dirs.push(dir.clone());
                    if let Some(m) = memory {
                        if has_word(&sc, "memory")
                            && std::fs::write(dir.join("memory.max"), m.to_string()).is_ok()
                        {
                            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                            cg.memory = Some(Mechanism::CgroupV2);
                            cg.memory_dir = Some((dir.clone(), true));
                        }
                    }
                    if let Some(p) = procs {
                        if has_word(&sc, "pids")
                            && std::fs::write(dir.join("pids.max"), p.to_string()).is_ok()
                        {
                            cg.procs = Some(Mechanism::CgroupV2);
                        }
                    }
                }
            }
        }
        // cgroup v1 hierarchies for what v2 could not take.
        let mut v1_make = |ctrl: &str, file: &str, value: u64| -> bool {
            let Some((_, rel)) = v1.iter().find(|(n, _)| n == ctrl) else {
                return false;
            };
            let dir = join_rel(&Path::new("/sys/fs/cgroup").join(ctrl), rel).join(&name);
            if std::fs::create_dir(&dir).is_err() {
                return false;
            }
            cg.dirs.push(dir.clone());
            if std::fs::write(dir.join(file), value.to_string()).is_ok() {
                if ctrl == "memory" {
                    let _ =
                        std::fs::write(dir.join("memory.memsw.limit_in_bytes"), value.to_string());
                    cg.memory_dir = Some((dir, false));
                }
                true
            } else {
                false
            }
        };
        if let (Some(m), None) = (memory, cg.memory) {
            if v1_make("memory", "memory.limit_in_bytes", m) {
                cg.memory = Some(Mechanism::CgroupV1);
            }
        }
        if let (Some(p), None) = (procs, cg.procs) {
            if v1_make("pids", "pids.max", p) {
                cg.procs = Some(Mechanism::CgroupV1);
            }
        }
        cg
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Move the (stopped, waiting) child into every cgroup of the run.
    pub fn join(&self, pid: libc::pid_t) -> Result<(), String> {
        for d in &self.dirs {
            std::fs::write(d.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("moving pid {pid} into {}: {e}", d.display()))?;
        }
        Ok(())
    }

    /// Whether the kernel's OOM killer acted in the run's memory cgroup.
    pub fn oom_killed(&self) -> bool {
        let Some((dir, v2)) = &self.memory_dir else {
            return false;
        };
        let file = if *v2 {
            dir.join("memory.events")
        } else {
            dir.join("memory.oom_control")
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        text.lines().any(|l| {
            l.strip_prefix("oom_kill ")
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0)
                > 0
        })
    }

    /// Remove the run's cgroups (every process is gone by now).
    pub fn remove(&mut self) {
        for d in self.dirs.drain(..) {
            for _ in 0..50 {
                if std::fs::remove_dir(&d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

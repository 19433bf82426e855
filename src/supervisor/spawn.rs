//! Spawning the confined child.
//!
//! Fork safety — the design: **capsule forks before any thread exists.**
//! `capsule exec` parses the policy, builds the plan, prepares the Landlock
//! ruleset (an fd with every rule already added), compiles and checks the
//! seccomp BPF programs and builds every CString and pointer array on the
//! main thread. Only then does it `clone()`; the tokio runtime (stdio
//! capture, timeout, proxy, RPC broker) starts after the fork. The child is
//! therefore a copy of a single-threaded process: no lock can be held by a
//! thread that does not exist in the child, so even allocation would be
//! sound there, though the child does almost nothing but apply what was
//! prepared (see `sandbox::child`). [`spawn`] checks the thread count and
//! refuses to fork from a multi-threaded process. A re-exec'd stage would
//! cost a whole extra exec (~1.5 ms on our 2-core VMs), which is three times
//! the start-up budget.
//!
//! Tree containment: the child is created with `CLONE_NEWPID` (plus
//! `CLONE_NEWUSER` when capsule is not root) and becomes pid 1 of the run's
//! own pid namespace, running a tiny init that forks the command. Killing
//! that init kills every process of the run — also ones that called setsid
//! or double-forked — and PR_SET_PDEATHSIG kills it when capsule dies. Where
//! the kernel refuses namespaces (no unprivileged user namespaces, or
//! `CAPSULE_NO_NAMESPACES=1`), capsule becomes a child subreaper and kills
//! every descendant it can find instead; the result reports which is used.

use nix::errno::Errno;
use thiserror::Error;

use crate::sandbox::child::{self, ChildSpec};
use crate::sys::{self, channel::Channel};

/// How the run's process tree is contained and killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeMode {
    /// The child is init of its own pid namespace.
    PidNamespace,
    /// capsule is a child subreaper and kills descendants it finds.
    Subreaper,
}

impl TreeMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TreeMode::PidNamespace => "pid-namespace",
            TreeMode::Subreaper => "subreaper",
        }
    }
}

#[derive(Debug, Error)]
pub enum SpawnError {
    #[error("refusing to fork: capsule has {0} threads (the child must be forked from a single-threaded process)")]
    Threaded(usize),
    #[error("clone() => {0}")]
    Clone(Errno),
    #[error("writing the user namespace maps of pid {pid}: {source}")]
    UserMap { pid: i32, source: std::io::Error },
    #[error("socketpair() => {0}")]
    Channel(Errno),
    #[error("starting the child: {0}")]
    Go(Errno),
    #[error("preparing the child's cgroup: {0}")]
    BeforeGo(String),
}

/// What the kernel should give the child.
#[derive(Debug, Clone, Copy, Default)]
pub struct NsRequest {
    /// Try a pid namespace (falls back to the subreaper if refused).
    pub pid: bool,
    /// A network namespace too (proxy mode); only honoured with `pid`.
    pub net: bool,
}

/// A running child.
#[derive(Debug)]
pub struct Spawned {
    pub pid: libc::pid_t,
    pub tree: TreeMode,
    pub netns: bool,
    /// Supervisor's end of the typed channel.
    pub chan: Channel,
}

/// Something to do between clone and "go" (e.g. joining a cgroup).
pub type BeforeGo<'a> = &'a mut dyn FnMut(libc::pid_t) -> Result<(), String>;

/// Fork the child and let it confine itself and exec.
///
/// `spec` must be complete; the parent's copies of the child's fds in it are
/// closed by the caller after this returns.
pub fn spawn(spec: &mut ChildSpec, ns: NsRequest, before_go: BeforeGo<'_>) -> Result<Spawned, SpawnError> {
    if let Some(n) = sys::thread_count() {
        if n > 1 {
            return Err(SpawnError::Threaded(n));
        }
    }
    let (ours, theirs) = sys::channel::pair().map_err(SpawnError::Channel)?;
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let root = uid.is_root();

    let mut attempts: Vec<(libc::c_int, TreeMode)> = Vec::new();
    // `ns.pid` already reflects `sandbox::namespaces_available()` (and thus CAPSULE_NO_NAMESPACES).
    if ns.pid {
        let mut flags = libc::CLONE_NEWPID;
        if !root {
            flags |= libc::CLONE_NEWUSER;
        }
        if ns.net {
            flags |= libc::CLONE_NEWNET;
        }
        attempts.push((flags, TreeMode::PidNamespace));
    }
    attempts.push((0, TreeMode::Subreaper));

    let parent_pid = nix::unistd::getpid().as_raw();
    for (flags, tree) in attempts {
        let userns = flags & libc::CLONE_NEWUSER != 0;
        let go_needed = userns || spec.wait_go;
        spec.wait_go = go_needed;
        if tree == TreeMode::Subreaper {
            // Orphaned descendants come to us, so we can find and kill them.
            let _ = sys::set_child_subreaper();
            spec.parent_pid = parent_pid;
        } else {
            spec.parent_pid = 0;
        }
        match sys::clone_process(flags) {
            Ok(0) => {
                drop(ours);
                match tree {
                    TreeMode::PidNamespace => child::init_stage(spec, &theirs),
                    TreeMode::Subreaper => child::command_stage(spec, &theirs),
                }
            }
            Ok(pid) => {
                drop(theirs);
                if userns {
                    write_id_maps(pid, uid.as_raw(), gid.as_raw())
                        .map_err(|source| SpawnError::UserMap { pid, source })?;
                }
                if let Err(msg) = before_go(pid) {
                    sys::signal(pid, libc::SIGKILL);
                    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
                    return Err(SpawnError::BeforeGo(msg));
                }
                if go_needed {
                    ours.send_go().map_err(SpawnError::Go)?;
                }
                return Ok(Spawned { pid, tree, netns: flags & libc::CLONE_NEWNET != 0, chan: ours });
            }
            Err(e @ (Errno::EPERM | Errno::EINVAL | Errno::ENOSPC | Errno::EUSERS | Errno::EACCES))
                if tree == TreeMode::PidNamespace =>
            {
                tracing::debug!("clone with namespaces refused ({e}); falling back to a subreaper");
                continue;
            }
            Err(e) => return Err(SpawnError::Clone(e)),
        }
    }
    Err(SpawnError::Clone(Errno::EAGAIN))
}

/// Map the caller's uid/gid to themselves inside the new user namespace, so
/// files the run creates keep the caller's ownership.
fn write_id_maps(pid: libc::pid_t, uid: u32, gid: u32) -> std::io::Result<()> {
    let base = format!("/proc/{pid}");
    std::fs::write(format!("{base}/uid_map"), format!("{uid} {uid} 1"))?;
    std::fs::write(format!("{base}/setgroups"), "deny")?;
    std::fs::write(format!("{base}/gid_map"), format!("{gid} {gid} 1"))?;
    Ok(())
}

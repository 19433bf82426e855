//! Spawning the confined child.
//!
//! Fork safety — the design: **the child stages share the supervisor's
//! memory and make nothing but raw system calls.** `capsule exec` parses the
//! policy, builds the plan, prepares the Landlock ruleset (an fd with every
//! rule already added), compiles the seccomp BPF program and builds every
//! CString and pointer array before the clone, in a [`ChildSpec`] that is
//! then leaked: it stays valid and unchanged for as long as any stage reads
//! it. The stages are created with `CLONE_VM` on stacks of their own
//! (posix_spawn does the same): no page table is copied, nothing is copied on
//! write afterwards, and nothing is torn down when init exits — a plain fork
//! of this large process, twice, cost about a millisecond of start-up. The
//! price is the rule `sandbox::child` follows: raw system calls only (no
//! libc wrapper, which would write the supervisor's thread-local errno), no
//! allocation, no lock, no panic. That rule also makes the child independent
//! of how many threads the supervisor has. Signals are blocked around the
//! clone, so no handler of the supervisor ever runs in a stage. A re-exec'd
//! stage would cost a whole extra exec (~1.5 ms on our 2-core VMs).
//!
//! Tree containment: the first stage is created with `CLONE_NEWPID` (plus
//! `CLONE_NEWUSER` when capsule is not root) and becomes pid 1 of the run's
//! own pid namespace, a tiny init that creates the command (`CLONE_VFORK`:
//! init sleeps until the command has exec'd). Killing that init kills every
//! process of the run — also ones that called setsid or double-forked — and
//! PR_SET_PDEATHSIG kills it when capsule dies. Where the kernel refuses
//! namespaces (no unprivileged user namespaces, or `CAPSULE_NO_NAMESPACES=1`),
//! capsule creates a keeper (`sandbox::child::keeper_main`, the same kind of
//! CLONE_VM stage) that creates the command: the keeper is a child subreaper,
//! so the run's orphans are reparented to it; when the command ends, or when
//! capsule dies (PR_SET_PDEATHSIG, even a SIGKILLed capsule), it kills every
//! process of the run it holds, round after round. capsule is a child
//! subreaper too: when it ends a running run (timeout, watchdog, a stop
//! signal) it kills the keeper and every process below it itself, until none
//! is left or a time bound (`treekill`); the result reports `subreaper` for
//! this mode. Root without
//! CAP_SYS_ADMIN (a container's root) gets a user namespace too, mapping root
//! to itself. A refusal of clone() itself, of the uid map, or of a set-up step
//! of init (reported before its `Ready`) is a [`SpawnError::Refused`]: the
//! supervisor re-plans on the next path.

use nix::errno::Errno;
use thiserror::Error;

use std::os::fd::OwnedFd;

use crate::sandbox::child::ChildSpec;
use crate::sandbox::NsRefusal;
use crate::sys::channel::{Msg, Stage};
use crate::sys::stage::Entry;
use crate::sys::{self, channel::Channel};

/// How the run's process tree is contained and killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeMode {
    /// The child is init of its own pid namespace.
    PidNamespace,
    /// The keeper (and capsule behind it) is a child subreaper and kills
    /// the descendants it holds.
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
    #[error("allocating a stack for the child: {0}")]
    Stack(Errno),
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
    #[error("the keeper did not report the command ({0})")]
    NoCommand(String),
    /// The seccomp program allows IP sockets for the run's own loopback,
    /// which only a network namespace of its own keeps from the host's:
    /// never spawned without one (fail closed).
    #[error("the run's own loopback was prepared without a network namespace to hold it (refusing rather than open the host's network)")]
    LoopbackWithoutNetns,
    /// The kernel refused the run's namespaces (clone() itself, or a step of
    /// their set-up: the uid map, the view, the network endpoint) before
    /// anything of the command ran: the supervisor prepares the next path
    /// (`sandbox::RunPath::after`) and tries again.
    #[error("the kernel refused the run's namespaces: {0:?}")]
    Refused(NsRefusal),
    /// A set-up step of the run's init failed for another reason.
    #[error("confining the child failed while {}: {}", .0.describe(), .1.desc())]
    Setup(Stage, Errno),
}

/// What the kernel should give the child.
#[derive(Debug, Clone, Copy, Default)]
pub struct NsRequest {
    /// Try a pid namespace (falls back to the subreaper if refused).
    pub pid: bool,
    /// A network namespace too (`none` and proxy modes); only honoured with `pid`.
    pub net: bool,
    /// Mount and IPC namespaces for the view; only honoured with `pid`.
    pub view: bool,
}

/// A running child.
#[derive(Debug)]
pub struct Spawned {
    /// capsule's child: init, or the keeper (no pid namespace).
    pub pid: libc::pid_t,
    /// The command stage's pid as capsule sees it: in a pid namespace,
    /// init's pid; under the keeper, its child, 0 until the command stage
    /// reports it (its first message: [`await_command`], or the event loop).
    /// capsule never waits for it unless a guard needs it before the run
    /// starts: the no-namespace path costs no more start-up than a clone.
    pub command: std::cell::Cell<libc::pid_t>,
    /// Under the keeper, a pidfd of the command stage, sent with its pid:
    /// the keeper reaps the command, and its pid may then be anyone's
    /// (even another user's, as root), so capsule signals the command
    /// through this and never by its pid (`event_loop::signal_run`).
    pub command_fd: std::cell::OnceCell<OwnedFd>,
    /// The run's v2 cgroup's `cgroup.kill` (Linux 5.14+), where the run has
    /// such a cgroup: the tree kill starts there (`treekill`).
    pub cgroup_kill: Option<std::path::PathBuf>,
    pub tree: TreeMode,
    pub netns: bool,
    /// Supervisor's end of the typed channel.
    pub chan: Channel,
    /// Children capsule had before the run (inherited across the exec that
    /// started it): never killed by the end-of-run sweeps. Filled in by the
    /// supervisor when a sweep can happen.
    pub inherited: Vec<libc::pid_t>,
    /// Descriptors init sent before it reported the namespaces ready (the
    /// proxy's endpoint), with their tags: the supervisor hands them to the
    /// services once they run.
    pub early_fds: Vec<(i32, Option<OwnedFd>)>,
    /// The run's network namespace's counters of failed attempts to reach
    /// the network (`net_counters`), where it has one of its own.
    pub net_counters: Option<super::net_counters::NetCounters>,
}

/// Something to do between clone and "go" (e.g. joining a cgroup); told
/// whether the first stage was born in the cgroup given to [`spawn`].
pub type BeforeGo<'a> = &'a mut dyn FnMut(libc::pid_t, bool) -> Result<(), String>;

/// How long the run's init may take to build its namespaces and view.
const READY_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// Stack size of each child stage (both run small, non-recursive code).
const STAGE_STACK: usize = 256 * 1024;

/// Create the child and let it confine itself and exec.
///
/// `spec` must be complete (sealed); it is leaked here, because the stages
/// read it from the shared address space until they exec or exit. The
/// caller closes its own copies of the child's descriptors after this
/// returns (the stages have their own descriptor tables).
///
/// The steps: the channel and the stages' stacks, the clone flags of the
/// run's path ([`clone_flags`]), the spec leaked and finished for the first
/// stage ([`stage_entry`]), the clone with every signal blocked, and then
/// in the parent the user namespace's maps, `before_go`, "go" and init's
/// `Ready` ([`start`]), or the clone's refusal ([`clone_error`]).
pub fn spawn(
    mut spec: ChildSpec,
    ns: NsRequest,
    cgroup: Option<std::os::fd::RawFd>,
    before_go: BeforeGo<'_>,
) -> Result<Spawned, SpawnError> {
    let (ours, theirs) = sys::channel::pair().map_err(SpawnError::Channel)?;
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let root = uid.is_root();
    let stack = || sys::leaked_stack(STAGE_STACK).map_err(SpawnError::Stack);
    spec.chan = theirs.raw();
    let command_stack = stack()?;
    spec.command_stack = Some(command_stack);
    // Init or the keeper, on a stack of its own.
    let init_stack = stack()?;

    let (flags, tree) = clone_flags(ns, root);

    // Fail closed: the program that lets the run make IP sockets for its
    // own loopback must never run in the host's network namespace.
    if spec.loopback_up && flags & libc::CLONE_NEWNET == 0 {
        return Err(SpawnError::LoopbackWithoutNetns);
    }
    let parent_pid = nix::unistd::getpid().as_raw();
    // The run's init makes the shared mm non-dumpable (`sandbox::child`),
    // and so this process too: a stage that is refused is followed by
    // another spawn, whose /proc/PID/uid_map must be this user's to write.
    let dumpable = nix::sys::prctl::get_dumpable().unwrap_or(true);
    let spec: &'static mut ChildSpec = Box::leak(Box::new(spec));
    let userns = flags & libc::CLONE_NEWUSER != 0;
    let go_needed = userns || spec.wait_go;
    spec.wait_go = go_needed;
    let entry = stage_entry(spec, tree, parent_pid);
    let stack = init_stack;
    // From here on the stages read the spec: nobody writes it any more.
    let spec: &'static ChildSpec = spec;
    let mask = sys::block_all_signals();
    // Born in the run's cgroup where clone3 can (`cgroup`: a v2 directory),
    // else cloned as before and moved by `before_go`.
    let born_in = cgroup.and_then(|cg| {
        sys::stage::clone_stage_into_cgroup(flags, stack, cg, entry, spec)
            .inspect_err(|e| {
                tracing::debug!("clone3(CLONE_INTO_CGROUP): {}", Errno::from_raw(*e));
            })
            .ok()
    });
    let placed = born_in.is_some();
    if placed {
        tracing::debug!("the run's first stage was born in its cgroup (clone3, CLONE_INTO_CGROUP)");
    }
    let cloned = born_in.map_or_else(|| sys::stage::clone_stage(flags, stack, entry, spec), Ok);
    sys::restore_signals(&mask);
    match cloned {
        Ok(pid) => {
            drop(theirs);
            let cloned = Cloned {
                pid,
                flags,
                tree,
                userns,
                go_needed,
                placed,
                dumpable,
                uid,
                gid,
                count_net: spec.loopback_up,
            };
            start(cloned, ours, before_go)
        }
        Err(e) => Err(clone_error(e, tree)),
    }
}

/// The clone flags of the run's path, and how its tree is contained.
///
/// `ns.pid` already reflects the run's path (`sandbox::RunPath`, and thus
/// CAPSULE_NO_NAMESPACES); when clone() refuses anyway, the supervisor
/// prepares the no-namespace path and calls again.
fn clone_flags(ns: NsRequest, root: bool) -> (libc::c_int, TreeMode) {
    if ns.pid {
        let mut flags = libc::CLONE_NEWPID;
        // Root without CAP_SYS_ADMIN (a container's root) needs a user
        // namespace too, mapping root to itself.
        if !root || crate::kernel::probe().root_needs_userns {
            flags |= libc::CLONE_NEWUSER;
        }
        if ns.net {
            flags |= libc::CLONE_NEWNET;
        }
        if ns.view {
            flags |= libc::CLONE_NEWNS | libc::CLONE_NEWIPC;
        }
        (flags, TreeMode::PidNamespace)
    } else {
        (0, TreeMode::Subreaper)
    }
}

/// The first stage: init of the run's pid namespace, or the keeper (then
/// capsule becomes a child subreaper too). The last writes to the spec
/// before the clone.
fn stage_entry(spec: &mut ChildSpec, tree: TreeMode, parent_pid: libc::pid_t) -> Entry {
    if tree == TreeMode::Subreaper {
        // Orphaned descendants go to the keeper; to us should it be gone.
        let _ = sys::set_child_subreaper();
        spec.parent_pid = parent_pid;
        spec.keeper = true;
        Entry::Keeper
    } else {
        spec.parent_pid = 0;
        Entry::Init
    }
}

/// The first stage as cloned, and what [`start`] needs to know of it.
struct Cloned {
    pid: libc::pid_t,
    flags: libc::c_int,
    tree: TreeMode,
    /// The stage is in a user namespace of its own: its maps are written here.
    userns: bool,
    /// The stage waits for "go".
    go_needed: bool,
    /// The stage was born in the cgroup given to `spawn`.
    placed: bool,
    /// Whether this process was dumpable before the stage made the shared
    /// mm non-dumpable (restored when the stage is killed).
    dumpable: bool,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    /// Count the run's failed attempts to reach the network (mode none
    /// with its own loopback: `net_counters`).
    count_net: bool,
}

/// In the parent, after the clone: the user namespace's maps, `before_go`,
/// "go", and on the namespace path init's `Ready`. A failure kills the stage.
fn start(c: Cloned, ours: Channel, before_go: BeforeGo<'_>) -> Result<Spawned, SpawnError> {
    let Cloned {
        pid,
        flags,
        tree,
        userns,
        go_needed,
        placed,
        dumpable,
        uid,
        gid,
        count_net,
    } = c;
    let kill = || {
        sys::signal(pid, libc::SIGKILL);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        if dumpable {
            let _ = nix::sys::prctl::set_dumpable(true);
        }
    };
    if userns {
        if let Err(source) = write_id_maps(pid, uid.as_raw(), gid.as_raw()) {
            kill();
            return Err(match source.raw_os_error() {
                Some(e @ (libc::EPERM | libc::EACCES)) => {
                    SpawnError::Refused(NsRefusal::Unusable {
                        step: "writing the user namespace's uid map",
                        errno: Errno::from_raw(e),
                    })
                }
                _ => SpawnError::UserMap { pid, source },
            });
        }
    }
    let mut net_counters = None;
    if flags & libc::CLONE_NEWNET != 0 {
        super::ns_hold::NET.keep(pid);
        if count_net {
            net_counters = super::net_counters::NetCounters::open(pid);
        }
    }
    if flags & libc::CLONE_NEWNS != 0 {
        super::ns_hold::MNT.keep(pid);
    }
    if let Err(msg) = before_go(pid, placed) {
        kill();
        return Err(SpawnError::BeforeGo(msg));
    }
    if go_needed {
        ours.send_go().map_err(SpawnError::Go)?;
    }
    let command = if tree == TreeMode::Subreaper { 0 } else { pid };
    // On the namespace path init reports its namespaces built (or
    // which step the kernel refused) before it creates the command.
    let early_fds = if tree == TreeMode::PidNamespace {
        match await_ready(&ours) {
            Ok(fds) => fds,
            Err(e) => {
                kill();
                return Err(e);
            }
        }
    } else {
        Vec::new()
    };
    Ok(Spawned {
        pid,
        command: std::cell::Cell::new(command),
        command_fd: std::cell::OnceCell::new(),
        cgroup_kill: None,
        tree,
        netns: flags & libc::CLONE_NEWNET != 0,
        chan: ours,
        inherited: Vec::new(),
        early_fds,
        net_counters,
    })
}

/// What a failed clone() is: on the namespace path, a refusal of the
/// namespaces (the supervisor takes the next path); else an error.
fn clone_error(e: libc::c_int, tree: TreeMode) -> SpawnError {
    match e {
        // ENOSYS: a container runtime's seccomp profile (podman's answers
        // what it does not allow so).
        libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::EACCES | libc::ENOSYS
            if tree == TreeMode::PidNamespace =>
        {
            tracing::debug!(
                "clone with namespaces refused ({}); the no-namespace path comes next",
                Errno::from_raw(e)
            );
            SpawnError::Refused(NsRefusal::Clone(Errno::from_raw(e)))
        }
        e => SpawnError::Clone(Errno::from_raw(e)),
    }
}

/// Wait for the command's pid under the keeper: the first message of the
/// command stage (it comes before anything else the run sends). A keeper or
/// command that failed first reports why instead (the run is then refused).
pub fn await_command(sp: &Spawned) -> Result<libc::pid_t, SpawnError> {
    use std::os::fd::AsFd;
    if sp.command.get() > 0 {
        return Ok(sp.command.get());
    }
    let chan = &sp.chan;
    let fd = chan
        .try_clone_fd()
        .map_err(|e| SpawnError::NoCommand(e.to_string()))?;
    let mut polled = [nix::poll::PollFd::new(
        fd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    // Set-up takes well under a millisecond; ten seconds means a stuck stage.
    match nix::poll::poll(&mut polled, nix::poll::PollTimeout::from(10_000u16)) {
        Ok(1..) => {}
        Ok(_) => return Err(SpawnError::NoCommand("no word from it in 10 s".into())),
        Err(e) => return Err(SpawnError::NoCommand(e.to_string())),
    }
    match chan.recv() {
        Ok(Some((Some(sys::channel::Msg::Command { pid }), fd))) if pid > 0 => {
            sp.command.set(pid);
            if let Some(fd) = fd {
                let _ = sp.command_fd.set(fd);
            }
            Ok(pid)
        }
        Ok(Some((Some(sys::channel::Msg::SetupFailed { stage, errno }), _))) => {
            Err(SpawnError::NoCommand(format!(
                "{}: {}",
                stage.describe(),
                Errno::from_raw(errno).desc()
            )))
        }
        Ok(Some((other, _))) => Err(SpawnError::NoCommand(format!(
            "unexpected message {other:?}"
        ))),
        Ok(None) => Err(SpawnError::NoCommand("it exited".into())),
        Err(e) => Err(SpawnError::NoCommand(e.to_string())),
    }
}

/// Wait for init's `Ready`; the descriptors it sent before (with their
/// tags). A set-up step the kernel refused (EPERM, EACCES, ENOSYS: a
/// seccomp or AppArmor profile, a container's masked /proc) is a
/// [`SpawnError::Refused`]; nothing of the command has run then.
///
/// Bounded by [`READY_BOUND`]: the event loop and its wall-clock limit
/// start only after this, and a mount that hangs (a dead network
/// filesystem beneath a grant) must not hang capsule.
fn await_ready(chan: &Channel) -> Result<Vec<(i32, Option<OwnedFd>)>, SpawnError> {
    let mut fds = Vec::new();
    let deadline = std::time::Instant::now() + READY_BOUND;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match chan.wait_readable(left) {
            Ok(false) => return Err(SpawnError::Setup(Stage::View, Errno::ETIMEDOUT)),
            Ok(true) | Err(Errno::EINTR) => {}
            Err(e) => return Err(SpawnError::Go(e)),
        }
        match chan.recv() {
            Ok(Some((Some(Msg::Ready), _))) => return Ok(fds),
            Ok(Some((Some(Msg::Fd { tag }), fd))) => fds.push((tag, fd)),
            Ok(Some((Some(Msg::SetupFailed { stage, errno }), _))) => {
                let errno = Errno::from_raw(errno);
                let refused = matches!(errno, Errno::EPERM | Errno::EACCES | Errno::ENOSYS);
                return Err(match stage {
                    Stage::ViewProc if refused => SpawnError::Refused(NsRefusal::Proc(errno)),
                    Stage::View | Stage::ViewDev | Stage::Network if refused => {
                        SpawnError::Refused(NsRefusal::Unusable {
                            step: stage.describe(),
                            errno,
                        })
                    }
                    _ => SpawnError::Setup(stage, errno),
                });
            }
            // Nothing else comes before Ready; end-of-file is init gone.
            Ok(Some(_)) => {}
            Ok(None) => return Err(SpawnError::Go(Errno::EPIPE)),
            Err(e) => return Err(SpawnError::Go(e)),
        }
    }
}

/// Build the namespaces and the view of `layers` in a throwaway child, as
/// `exec`'s init would, and stop before any command: what the kernel
/// refuses, if anything (`sandbox::predict`). `net`: the run gets its own
/// network namespace; `proxy_port`: the proxy endpoint init makes in it.
/// The Landlock rules of the view's new mounts are not added (the trial has
/// no ruleset of its own to spend).
pub fn trial(
    layers: &crate::sandbox::Layers,
    net: bool,
    proxy_port: Option<u16>,
) -> Option<NsRefusal> {
    let mut spec = ChildSpec::new(c"/bin/true".into(), Vec::new(), Vec::new(), c"/".into());
    spec.view = layers.view.clone();
    spec.net_setup = proxy_port.map(|port| crate::sandbox::netns::NetSetup {
        port,
        backlog: 1,
        tag: 0,
        host_listener: None,
    });
    // `none` mode brings the run's own loopback up in its namespace: a
    // refusal of that (RTM_NEWADDR under AppArmor's userns profile) is one
    // of the things the trial must meet.
    spec.loopback_up = layers.own_loopback && net && proxy_port.is_none();
    spec.trial = true;
    spec.seal();
    let ns = NsRequest {
        pid: true,
        net,
        view: spec.view.is_some(),
    };
    let dumpable = nix::sys::prctl::get_dumpable().unwrap_or(true);
    match spawn(spec, ns, None, &mut |_, _| Ok(())) {
        Ok(s) => {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(s.pid), None);
            // Its init shared this process's memory and made it non-dumpable.
            if dumpable {
                let _ = nix::sys::prctl::set_dumpable(true);
            }
            None
        }
        Err(SpawnError::Refused(r)) => Some(r),
        Err(e) => {
            // Not a refusal of the namespaces: `exec` would stop there too,
            // with the same error; the prediction keeps this path.
            tracing::debug!("trial child: {e}");
            None
        }
    }
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

//! The sandbox layers, prepared in the parent and applied by the child to
//! itself before exec (`child`).
//!
//! [`prepare`] turns a [`Plan`] into ready-to-apply layers — the Landlock
//! ruleset fd with every rule added, the compiled seccomp programs, the
//! rlimits, the run's cgroup — and decides, fail-closed, whether what the
//! policy asks for can be enforced on this kernel: anything missing is an
//! error unless `--best-effort`, and then it is listed in `missing`.

pub mod cgroup;
pub mod child;
pub mod landlock;
pub mod mutation;
pub mod netns;
pub mod rlimits;
pub mod seccomp;
pub mod view;

use std::collections::BTreeMap;

use nix::sys::resource::Resource;
use thiserror::Error;

use crate::kernel::{
    self, landlock_linux, LANDLOCK_FS, LANDLOCK_SCOPES, LANDLOCK_TCP, LANDLOCK_TRUNCATE,
};
use crate::plan::Plan;
use crate::policy::NetMode;
use rlimits::Mechanism;

#[derive(Debug, Error)]
pub enum SandboxError {
    #[error(transparent)]
    Landlock(#[from] landlock::LandlockError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error(transparent)]
    View(#[from] view::ViewError),
    #[error("{what} needs the run's own mount namespace, and {why}: mount it at its own path, or run where user namespaces are allowed")]
    NoView { what: String, why: String },
    #[error("{what} cannot be enforced here: {why} (run with --best-effort to accept this)")]
    Unavailable { what: String, why: String },
    #[error("network.loopback: true needs the run's own network namespace, and this run has none ({why}): the run's own loopback would be the host's; leave `loopback` out (then the run has no IP socket here), or run where user namespaces are allowed")]
    NoLoopback { why: &'static str },
}

/// Whether the run gets its own loopback (`network.loopback`): IP sockets
/// that reach only the run, because it is in a network namespace of its own
/// (`netns`: modes `none` and `proxy` with namespaces). One function for
/// `exec` and the `check`/`--dry-run` report.
pub fn own_loopback(net: &crate::plan::NetPlan, netns: bool) -> bool {
    net.mode != NetMode::Unrestricted && netns && net.loopback != Some(false)
}

/// Which layer keeps the run's signals inside the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalLayer {
    /// The run's own pid namespace: no process outside it can be named.
    PidNamespace,
    /// Landlock's signal scope (ABI 6+).
    LandlockScope,
    /// The seccomp signal filter, its listener served by the supervisor
    /// (`guards::signals`): no pid namespace and Landlock below ABI 6.
    SeccompNotify,
    /// None (only with --best-effort; listed in `missing`).
    None,
}

impl SignalLayer {
    /// The name in `enforcement.signals`.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalLayer::PidNamespace => "pid-namespace",
            SignalLayer::LandlockScope => "landlock-scope",
            SignalLayer::SeccompNotify => "seccomp-notify",
            SignalLayer::None => "none",
        }
    }

    /// One line for `check` and `doctor`.
    pub fn describe(self) -> &'static str {
        match self {
            SignalLayer::PidNamespace => {
                "enforced by the run's own pid namespace (no process outside the run can be named)"
            }
            SignalLayer::LandlockScope => {
                "enforced by Landlock's signal scope (ABI 6+): only processes of the run can be signalled"
            }
            SignalLayer::SeccompNotify => {
                "enforced by seccomp user notification: capsule checks that the target of every kill, tkill, \
                 tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo and F_SETOWN is a process of the run"
            }
            SignalLayer::None => "NOT ENFORCED (--best-effort): the run can signal any process of this user",
        }
    }
}

/// The limitation the seccomp signal layer brings (see `guards::signals`).
pub const SECCOMP_NOTIFY_LIMITATION: &str =
    "signal isolation by seccomp user notification (no pid namespace, Landlock below ABI 6): capsule checks \
     that the target of kill/tkill/tgkill/rt_sigqueueinfo/rt_tgsigqueueinfo and of F_SETOWN is a process of \
     the run, then lets the kernel go on; a target that exits and whose pid is reused by a new host process \
     between that check and the signal is hit instead (pid reuse: a residual race). pidfd_send_signal fails \
     with ENOSYS (programs fall back to kill); F_SETOWN_EX, FIOSETOWN and SIOCSPGRP fail with EPERM";

/// The limitation the network guard brings when the policy allows Unix
/// sockets (see `guards::network`).
pub const NET_GUARD_UNIX_LIMITATION: &str =
    "network guard with allow_unix_sockets: capsule makes every connect of the run itself (never lets one \
     through after its check, which a thread could race by swapping an IP socket in), so a connect to an \
     abstract Unix socket fails with EACCES (only Landlock's scope could tell the run's own from the \
     host's, and it does not bind capsule); pathname Unix sockets connect as usual, with the run's uid, gid \
     and no capability, but the server's SO_PEERCRED/SO_PEERPIDFD names capsule's pid (a server that judges \
     its peer by that pid's /proc entry sees capsule, not the run)";

/// What `allow_unix_sockets` hands over wherever it is allowed: no Landlock
/// ABI capsule uses (up to 7) has a right for connecting to a pathname Unix
/// socket, the view's read-only host does not stop a connect, and seccomp
/// cannot read the path (red team 8, `tests/escape_redteam8.rs`).
pub const UNIX_PATHNAME_LIMITATION: &str =
    "allow_unix_sockets: the run can connect to every pathname Unix socket of the host that its uid and gid \
     may open, outside its grants too (no Landlock right covers connecting to one, and a read-only mount does \
     not stop it): the user's session bus and systemd (/run/user/UID/bus: `systemd-run --user` runs a command \
     outside the sandbox), as root the system bus and /run/systemd/private, docker.sock, agents under \
     /run/user/UID. Allow Unix sockets only where no such socket is reachable";

pub const NET_GUARD_BIND_LIMITATION: &str =
    "no network namespace with allow_unix_sockets: the run shares the host's abstract Unix socket names, so \
     capsule makes every bind of the run itself and refuses an abstract name (EACCES; autobind, which the \
     kernel names, works): use a pathname socket in a write grant, which capsule binds from the caller's \
     directory with its umask under the run's own Landlock rules";

/// Whether the keeper of a run without a pid namespace can list its
/// children (`/proc/thread-self/children`), as it must to kill the run's
/// tree when capsule dies.
pub fn keeper_can_list_children() -> bool {
    std::fs::File::open("/proc/thread-self/children").is_ok()
}

/// Whether the network guard (`guards::network`) can serve a run on
/// this machine: a seccomp listener, and pidfd_getfd, process_vm_readv and
/// /proc/PID/fd of a child of capsule, tried as the guard does them (a
/// container's seccomp profile may refuse pidfd_getfd: Docker's and
/// containerd's RuntimeDefault without CAP_SYS_PTRACE). `Err` says why not.
pub fn net_guard_available() -> Result<(), String> {
    if !kernel::probe().seccomp {
        return Err("the kernel has no seccomp filter support".into());
    }
    seccomp::listener_available()
        .map_err(|e| format!("no seccomp user-notification listener here ({e})"))?;
    crate::sys::notify::fd_broker_available()
}

/// Without a network namespace `allow_unix_sockets` shares the host's
/// abstract Unix socket names, and Landlock's scope keeps the run from
/// connecting to the host's, not from binding a free one a host program
/// will connect to: in mode `none` (proxy mode has the whole network guard)
/// bind goes to the network guard, which refuses abstract names. Mode
/// `unrestricted` is the host's network, names and ports alike. Err: why
/// the guard cannot be had.
fn unix_bind_part(
    plan: &Plan,
    want_pidns: bool,
    seccomp_on: bool,
) -> Result<seccomp::NetPart, String> {
    if !plan.net.allow_unix_sockets || want_pidns || plan.net.mode != NetMode::None {
        return Ok(seccomp::NetPart::None);
    }
    if !seccomp_on {
        return Err("without a network namespace only capsule's network guard can refuse binding the host's \
                    abstract Unix socket names, and this kernel has no seccomp filter support"
            .into());
    }
    net_guard_available()
        .map(|()| seccomp::NetPart::UnixBind)
        .map_err(|why| {
            format!(
                "without a network namespace only capsule's network guard can refuse binding the host's abstract \
                 Unix socket names, and it cannot run here: {why}"
            )
        })
}

/// How proxy mode holds on the host's network (no user namespaces), for
/// `check` and `doctor`.
pub fn describe_host_proxy(k: &kernel::Probe) -> String {
    match (net_guard_available(), k.landlock_tcp()) {
        (Ok(()), tcp) => format!(
            "capsule's network guard (seccomp user notification): connect only to the proxy at 127.0.0.1, \
             made by capsule itself; listen() on IP sockets and TCP Fast Open refused{}",
            if tcp { "; Landlock's TCP port rule too" } else { "" }
        ),
        (Err(why), true) => format!(
            "Landlock TCP port rule + seccomp (TCP only; listen() and TCP Fast Open refused); cannot pin the \
             address, only the port (the network guard is unavailable: {why})"
        ),
        (Err(why), false) => format!(
            "unavailable: needs user namespaces, capsule's network guard ({why}) or Landlock ABI {LANDLOCK_TCP} \
             (Linux {})",
            landlock_linux(LANDLOCK_TCP)
        ),
    }
}

/// How proxy mode holds on the host's network namespace (no user
/// namespaces): `enforcement.network_path`.
pub fn host_network_path(net_part: seccomp::NetPart, landlock_abi: u32) -> &'static str {
    if net_part == seccomp::NetPart::Guard && landlock_abi < LANDLOCK_TCP {
        "seccomp-notify-fallback"
    } else {
        "landlock-tcp-fallback"
    }
}

/// The first of [`NO_VIEW_GAPS`] as it is for a run as root: uid 0 is the
/// owner of the host's system files, and an owner needs no capability to
/// change a file's mode, times or xattrs, or to chown it to itself (which
/// clears a setuid bit).
pub const ROOT_NO_VIEW_GAP: &str =
    "read-only view of the host (needs a mount namespace): capsule runs as root, so the mode, times and xattrs \
     of EVERY root-owned file of the host outside write grants can be changed (e.g. chmod 0666 /etc/shadow), \
     and chown to root clears setuid bits (Landlock has no hook for them; seccomp still refuses setting a \
     setuid or setgid bit). Run as an unprivileged user, or where user namespaces are allowed";

/// Why a run as root gets no view here, and the remedy (the refusal
/// without --best-effort).
fn root_no_view_why(path: &RunPath) -> String {
    let why = match path.fallbacks.last() {
        // Its reason, not where it leads.
        Some(f) => f.split(": the run takes").next().unwrap_or(f).to_string(),
        // As root only a missing mount_setattr keeps the namespaces off
        // without trying them (`kernel::Probe::namespaces`).
        None => "the view needs mount_setattr (Linux 5.12+), which this kernel or a seccomp profile refuses \
                 (ENOSYS)"
            .to_string(),
    };
    format!(
        "capsule runs as root and the run cannot have its own mount namespace ({why}), so the mode, times and \
         xattrs of EVERY root-owned file outside write grants could be changed (e.g. chmod 0666 /etc/shadow). \
         Run capsule as an unprivileged user (a container's --user 65534, Kubernetes runAsNonRoot), or allow \
         user namespaces (podman's default seccomp profile does; for Docker and Kubernetes see the seccomp \
         profile in examples/kubernetes)"
    )
}

/// The limitation the process guard brings (see `guards::processes`).
pub const PROCESS_GUARD_LIMITATION: &str =
    "max_processes by capsule's process guard (root without a cgroup: RLIMIT_NPROC does not bind uid 0): \
     every clone/fork/vfork of the run waits while capsule counts the run's tasks (threads included) and fails \
     with EAGAIN at the limit; each fork costs a scan of the run's processes (of the host's without a pid \
     namespace), and a fork whose child has not appeared yet is counted until its caller returns";

/// The limitation the memory watchdog brings (see `supervisor::memwatch`).
pub const MEMORY_WATCHDOG_LIMITATION: &str =
    "memory_mb without a cgroup: RLIMIT_DATA bounds each process's private memory, and capsule's memory \
     watchdog samples the whole run every 100 ms and kills it (kill_reason names limits.memory_mb) when it \
     holds more: its processes' anonymous, shared and locked memory (mlock'd page cache too; a quick bound from /proc/PID/status, and where \
     that is over the limit their proportional shares from smaps_rollup; swap not counted), every \
     memfd it made (capsule makes each one and keeps it: a memfd the run closed counts until the run ends), \
     the view's private /dev/shm and tmpfs /tmp, and what each host tmpfs the run may write (a write grant \
     on it, or its private TMPDIR there, as where /tmp is a tmpfs) holds beyond what it held when the run \
     began (what the host adds there meanwhile counts too, and where that is over the limit and the run \
     holds a Unix socket other than its RPC channel, or has bytes waiting unread in that channel, in which a \
     file can sit in flight unnamed, it stays the count: another program writing a lot to that tmpfs can \
     get such a run killed; where the closer count is needed, more than 50000 entries in the TMPDIR, or a \
     directory there capsule cannot read, count as over the limit). What remains: memory taken within one 100 ms interval before the kill; a \
     memfd or tmpfs file that is also mapped counts twice; what \
     other programs free meanwhile on a host tmpfs the run may write offsets what the run writes there (that \
     tmpfs never holds more than it did plus the limit); on a host tmpfs without a size (size=0) the \
     TMPDIR's files are walked, and one the run unlinked and holds only in flight in a Unix socket is not \
     counted, one it keeps only mapped only as far as its pages are touched; kernel memory (page tables, \
     socket and pipe buffers) is not counted; SysV shared \
     memory (the view's own \
     IPC namespace) is bounded by kernel.shmall = memory_mb there as root, and refused (shmget: ENOSPC) for an \
     unprivileged capsule, and SysV message queues and semaphores are refused there (msgget, semget: \
     ENOSPC); a process of the run whose share capsule needs but cannot read (made \
     non-dumpable) ends the run";

/// The limitation the metadata guard brings (see `guards::metadata`).
pub const META_GUARD_LIMITATION: &str =
    "metadata guard (no mount namespace, so no read-only view of the host): every chmod, chown, utime(s), \
     futimesat, utimensat and setxattr/removexattr of the run waits while capsule resolves its target once \
     (from the caller's working directory or descriptor) and makes the call itself on that object, with the \
     run's credentials and no capabilities, only where a write grant covers it (and no deny): elsewhere \
     EACCES. setxattrat, removexattrat and file_setattr fail with ENOSYS, and the FS_IOC_SETFLAGS and \
     FS_IOC_FSSETXATTR ioctls (chattr) with EPERM, inside write grants too; devices (/dev/null, a granted \
     device) and an object whose opened name was deleted while another name still reaches it are refused \
     (EACCES), and so is every such call of a process that made itself non-dumpable (unless capsule runs as \
     root); a path through a magic link other than the caller's /proc/self/fd/N, /dev/fd/N or /dev/stdin \
     fails with ELOOP";

/// What the metadata guard may let change: the plan's write grants, less
/// its carve-outs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaGuardPlan {
    pub write: Vec<std::path::PathBuf>,
    pub deny: Vec<std::path::PathBuf>,
}

/// The memory watchdog's plan: `limits.memory_mb` where no cgroup holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryWatchPlan {
    pub limit: u64,
    /// The view's private tmpfs mounts, as paths inside the run's root.
    pub view_tmpfs: Vec<std::path::PathBuf>,
    /// Host directories on a shared tmpfs whose files are the run's (the
    /// private TMPDIR on a host tmpfs without a size: walked).
    pub host_tmpfs: Vec<std::path::PathBuf>,
    /// Each host tmpfs the run may write, one per file system: what it holds
    /// beyond what it held when the run began counts.
    pub granted_tmpfs: Vec<TmpfsGroup>,
    /// Where the run sees those directories (the view shows the private
    /// TMPDIR at /tmp): its unlinked files there are found by these names.
    pub unlinked_in: Vec<std::path::PathBuf>,
}

/// One host tmpfs the run may write, for the memory watchdog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TmpfsGroup {
    /// The write grants on it, none beneath another.
    pub grants: Vec<std::path::PathBuf>,
    /// The private TMPDIR where it lies there (a tmpfs with a size) and not
    /// beneath a grant: the run's alone, walked whole.
    pub tmpdir: Option<std::path::PathBuf>,
    /// Where the run sees the TMPDIR when not at its own name (the view's
    /// /tmp): its unlinked files there are found by that name too.
    pub tmpdir_alias: Option<std::path::PathBuf>,
}

/// Where the run's /proc comes from when the fresh procfs is refused: the
/// limitation every such run carries (`enforcement.limitations`, doctor).
pub const BOUND_PROC_LIMITATION: &str =
    "/proc is the container's own, bound read-only into the run's view (the kernel refuses a fresh procfs in \
     a user namespace below a container runtime's masked /proc paths): the run's processes read their own \
     /proc/self, and Landlock keeps the environ, memory, maps, descriptors, cwd and root of every process \
     outside the run unreadable (ptrace access, at the same uid too), but those processes are listed (ps), \
     their cmdline, status and stat are readable, and so are the numbers (not the targets) of their open \
     descriptors and the container's network state through /proc/<pid>/net of any process outside the run \
     (its TCP and UDP connections and listeners, Unix socket names, interface counters: that directory shows \
     the process's network namespace, not the run's). The private /proc comes back with podman --security-opt \
     unmask=ALL, Docker --security-opt systempaths=unconfined, Kubernetes securityContext.procMount: Unmasked, \
     or a user-namespaced pod (hostUsers: false)";

/// What the kernel refused of the run's namespaces, before anything of the
/// command ran (`supervisor::spawn`): the run takes the next path
/// ([`RunPath::after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsRefusal {
    /// clone() with the namespace flags failed (a seccomp profile, no
    /// CAP_SYS_ADMIN and no user namespaces).
    Clone(nix::errno::Errno),
    /// The namespaces were made, but a step of their set-up was refused:
    /// the uid map, a mount, bringing up loopback (AppArmor's
    /// `unprivileged_userns` profile, a seccomp profile that denies mount).
    Unusable {
        step: &'static str,
        errno: nix::errno::Errno,
    },
    /// A fresh procfs was refused (a container's masked /proc: the kernel's
    /// `mount_too_revealing`).
    Proc(nix::errno::Errno),
}

/// The path a run takes: its namespaces and view, or none, and why it is
/// not the first one. `exec` starts from [`RunPath::initial`] and moves on
/// when the child reports a refusal ([`RunPath::after`]); `check`, `doctor`
/// and `--dry-run` ([`predict`]) move along the same steps with a trial
/// child, so they land where `exec` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPath {
    /// The run's own namespaces and view.
    pub namespaces: bool,
    /// The view keeps the container's /proc (read-only) instead of a fresh one.
    pub bound_proc: bool,
    /// Why an earlier path was left, one line each (`enforcement.limitations`).
    pub fallbacks: Vec<String>,
}

impl RunPath {
    /// The first path: namespaces where the host's settings allow them.
    pub fn initial() -> RunPath {
        RunPath {
            namespaces: kernel::probe().namespaces,
            bound_proc: false,
            fallbacks: Vec::new(),
        }
    }

    /// The path after the kernel refused `r` on this one; None when there
    /// is no further path (then the refusal is the run's).
    pub fn after(&self, r: NsRefusal) -> Option<RunPath> {
        if !self.namespaces {
            return None;
        }
        let mut next = self.clone();
        match r {
            NsRefusal::Proc(e) if !self.bound_proc => {
                next.bound_proc = true;
                next.fallbacks.push(format!(
                    "a fresh /proc for the run was refused ({e}); {BOUND_PROC_LIMITATION}"
                ));
            }
            NsRefusal::Clone(e) => {
                next.namespaces = false;
                next.bound_proc = false;
                next.fallbacks.push(format!(
                    "namespaces: clone() refused the run's namespaces ({e}: a seccomp profile such as a container \
                     runtime's default, or no CAP_SYS_ADMIN and no user namespaces): the run takes the \
                     no-namespace path"
                ));
            }
            NsRefusal::Proc(errno) | NsRefusal::Unusable { errno, .. } => {
                let step = match r {
                    NsRefusal::Unusable { step, .. } => step,
                    _ => "mounting the run's /proc",
                };
                next.namespaces = false;
                next.bound_proc = false;
                next.fallbacks.push(format!(
                    "namespaces: the kernel created the run's namespaces but refused {step} ({errno}: e.g. \
                     AppArmor's unprivileged_userns profile on Ubuntu 23.10+, or a seccomp profile that allows \
                     unshare but denies mount): the run takes the no-namespace path, chosen before anything of \
                     the command ran"
                ));
            }
        }
        Some(next)
    }
}

/// Layers ready for the child.
pub struct Layers {
    pub landlock: Option<landlock::Prepared>,
    pub seccomp: Option<seccomp::Filters>,
    pub rlimits: Vec<(Resource, u64)>,
    pub cgroup: cgroup::RunCgroup,
    /// limit name -> mechanism label, for the result.
    pub limits: BTreeMap<String, String>,
    /// Protections asked for but not enforced (only with best_effort).
    pub missing: Vec<String>,
    /// What works differently here without weakening a protection.
    pub limitations: Vec<String>,
    pub landlock_abi: u32,
    /// Whether the seccomp filter will be installed.
    pub seccomp_enforced: bool,
    /// Which layer keeps the run's signals inside it.
    pub signals: SignalLayer,
    /// The stacked notify filter (the signal checks with
    /// `SignalLayer::SeccompNotify`, the network part in proxy mode on the
    /// host's network) and whether it comes with a listener.
    pub notify_filter: Option<(seccomp::NotifyFilter, bool)>,
    /// What the notify filter holds (`exec --explain` adds the observer).
    pub notify_parts: seccomp::Parts,
    /// The network part of that filter (`NetPart::None` without one).
    pub net_part: seccomp::NetPart,
    /// What keeps a memfd from being executed: "pid-namespace-sysctl",
    /// "seccomp-notify" (the memfd guard) or "none" (listed in `missing`).
    pub memfd_exec: &'static str,
    /// Whether the memfd guard serves the run's memfd_create, and whether
    /// it seals each memfd against execution (6.3+).
    pub memfd_guard: Option<bool>,
    /// The memory watchdog (memory_mb without a cgroup).
    pub memory_watch: Option<MemoryWatchPlan>,
    /// The metadata guard (no mount namespace, a listener to be had).
    pub meta_guard: Option<MetaGuardPlan>,
    /// The seccomp truncate guard (Landlock ABI 1-2 without the view).
    pub truncate_guard: Option<seccomp::TruncateGuard>,
    /// Whether a pid namespace is expected to be available.
    pub want_pidns: bool,
    /// The run gets its own network namespace (modes `none` and `proxy`
    /// with namespaces): the supervisor must clone with `CLONE_NEWNET`.
    pub netns: bool,
    /// IP sockets on the run's own loopback are allowed (seccomp
    /// `own_loopback`, Landlock's TCP rules off): only with `netns`, and init
    /// brings `lo` up.
    pub own_loopback: bool,
    /// The run's private view of the host (mount, IPC and network
    /// namespaces), when namespaces are available.
    pub view: Option<view::View>,
}

/// What the no-namespace path cannot give, listed in `enforcement.missing`
/// of every run on it (they do not refuse the run: no layer there can give
/// them, and the default policy must run on such hosts). The first (and
/// [`ROOT_NO_VIEW_GAP`]) only where the metadata guard cannot run.
pub const NO_VIEW_GAPS: &[&str] = &[
    "read-only view of the host (needs a mount namespace): the mode, owner, times and xattrs of the \
     caller's own files outside write grants can be changed (Landlock has no hook for them)",
    "private /proc (needs a pid and mount namespace): processes the command starts cannot read their own \
     /proc/self, and ps sees nothing",
    "private /tmp, /dev/shm and /dev/pts (need a mount namespace): /tmp is not granted (use $TMPDIR), POSIX \
     shared memory and pseudo-terminals are unavailable",
];

/// The filesystem plan as Landlock applies it inside the view: all of /etc
/// readable (the view covers its secrets, so their Landlock carve-outs go:
/// carving /etc would make it unlistable), and no rules for the host's
/// /proc files (the view mounts a private /proc, granted whole by init).
pub fn fs_for_view(fs: &crate::plan::FsPlan) -> crate::plan::FsPlan {
    use crate::plan::{Access, FsGrant, Opened, Origin};
    let mut out = fs.clone();
    out.deny.retain(|d| !matches!(d.origin, Origin::Secret(_)));
    let system = out.grants.iter().any(|g| g.origin == Origin::System);
    out.grants.retain(|g| {
        !(g.origin == Origin::System && (g.path.starts_with("/etc") || g.path.starts_with("/proc")))
    });
    if system {
        out.grants.push(FsGrant {
            path: "/etc".into(),
            access: Access::READ,
            origin: Origin::System,
            opened: Opened::NONE,
        });
    }
    out.proc_self = false;
    out
}

/// What `exec` will do with `plan` on this kernel, as this user: the same
/// preparation, without running anything (the cgroup it may make is removed
/// at once). `Err` is the refusal `exec` would print; `check` and `doctor`
/// use this, so they predict `exec` exactly: where the sysctls allow
/// namespaces, a trial child makes them as `exec`'s init would and the
/// prediction follows the kernel's refusals to the same path.
pub struct Prediction {
    /// limit name -> how `exec` enforces it here, e.g. "cgroup-v2 (in a
    /// delegated systemd scope capsule asks for)".
    pub limits: BTreeMap<String, String>,
    pub missing: Vec<String>,
    pub limitations: Vec<String>,
    pub view: Option<view::ViewSummary>,
    pub signals: SignalLayer,
    /// The path `exec` takes here (after the trial child's refusals).
    pub path: RunPath,
}

/// `exec`'s refusal as predicted, with the path it was reached on.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct Refusal {
    pub error: SandboxError,
    pub path: RunPath,
}

/// The throwaway child that tries a namespace path's layers
/// (`supervisor::spawn::trial`; the sandbox layer does not spawn): what the
/// kernel refuses, if anything. Arguments: the layers, whether the run gets
/// its own network namespace, the proxy port.
pub type Trial = fn(&Layers, bool, Option<u16>) -> Option<NsRefusal>;

/// Run `f` with the plan's private TMPDIR made for a moment (its Landlock
/// rule needs it to exist, as in `exec`), then removed with what the trial
/// child's view made in it (the directories leading to a grant beneath /tmp)
/// by the walk `exec` removes the run's with. `check`, `--dry-run` and `why`
/// leave nothing behind.
pub fn with_trial_tmpdir<T>(plan: &Plan, f: impl FnOnce() -> T) -> T {
    let made = plan
        .tmpdir
        .as_ref()
        .filter(|t| std::fs::create_dir(t).is_ok());
    let out = f();
    if let Some(t) = made {
        let left = crate::supervisor::cleanup::remove_dir_or_tree(t);
        if !left.is_empty() {
            tracing::warn!("the trial's TMPDIR {} is left: {left:?}", t.display());
        }
    }
    out
}

pub fn predict(plan: &Plan, trial: Trial) -> Result<Prediction, Refusal> {
    // A stand-in port: the proxy's is only known when it listens.
    let port = (plan.net.mode == NetMode::Proxy).then_some(1);
    let (mut layers, path) = with_trial_tmpdir(plan, || predict_path(plan, port, trial))?;
    let source = layers.cgroup.source;
    layers.cgroup.remove();
    let limits = layers
        .limits
        .iter()
        .map(|(k, v)| {
            let v = match source {
                Some(s) if v.starts_with("cgroup-v2") => format!("{v} ({})", s.describe()),
                _ => v.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    Ok(Prediction {
        limits,
        missing: layers.missing.clone(),
        limitations: layers.limitations.clone(),
        view: layers.view.as_ref().map(|v| v.summary.clone()),
        signals: layers.signals,
        path,
    })
}

/// The layers of the path `exec` lands on: prepared for each path in turn,
/// and on a namespace path tried by a throwaway child that makes the same
/// namespaces and view as `exec`'s init and stops before any command
/// (`trial`: `supervisor::spawn::trial`); its refusal moves on as in `exec`.
pub fn predict_path(
    plan: &Plan,
    port: Option<u16>,
    trial: Trial,
) -> Result<(Layers, RunPath), Refusal> {
    let mut path = RunPath::initial();
    loop {
        let mut layers = match prepare(plan, port, &path) {
            Ok(l) => l,
            Err(error) => return Err(Refusal { error, path }),
        };
        if !path.namespaces {
            return Ok((layers, path));
        }
        let net = plan.net.mode != NetMode::Unrestricted;
        let refusal = trial(&layers, net, port);
        match refusal.and_then(|r| path.after(r).map(|next| (r, next))) {
            None => return Ok((layers, path)),
            Some((r, next)) => {
                tracing::debug!("trial child: {r:?}; predicting the next path");
                layers.cgroup.remove();
                path = next;
            }
        }
    }
}

/// Prepare every layer for `plan`. `proxy_port` is the loopback port the
/// child may connect to in proxy mode without a network namespace.
/// `path`: whether the child is to get its own namespaces and the view, and
/// which /proc (the supervisor asks again on the next path when the kernel
/// refuses them).
///
/// The steps run in this order, each deciding one layer (and, fail-closed,
/// refusing the run or adding to `missing` what it cannot give): the
/// signal layer, the run's own network, the network guard on the host's
/// network, the Landlock ruleset, the view, the seccomp programs, the
/// truncate guard, the limits, the guards that need a seccomp listener,
/// the notify filter that serves them, and the limitations to report.
pub fn prepare(
    plan: &Plan,
    proxy_port: Option<u16>,
    path: &RunPath,
) -> Result<Layers, SandboxError> {
    let mut p = Prep::new(plan, path);
    let signals = p.signal_layer()?;
    let (netns, loopback) = p.own_network()?;
    let host_net = p.host_network_guard()?;
    let ll = p.landlock(proxy_port, loopback, host_net.part)?;
    let view = p.view(&ll)?;
    let filters = p.seccomp(loopback)?;
    let truncate_guard = p.truncate_guard(filters.is_some())?;
    tracing::debug!("seccomp filters ready");
    let (cg, memory, procs) = p.limits(filters.is_some())?;
    let guards = p.guards(view.as_ref(), filters.is_some(), memory)?;
    let parts = p.notify_parts(signals, host_net.part, procs, &guards, view.is_some());
    let notify_filter = if parts.any() && filters.is_some() {
        Some((seccomp::notify_filter(parts)?, parts.notifies()))
    } else {
        None
    };
    let nproc_base = if procs == Mechanism::Rlimit && !p.want_pidns {
        // And the keeper, one more process of the uid.
        rlimits::uid_process_count(nix::unistd::getuid().as_raw()) + 1
    } else {
        0
    };
    let l = &plan.limits;
    let limits = limit_labels(l, memory, procs);
    let limitations = p.limitations(&parts, &guards, &host_net, truncate_guard.is_some());
    // The mutation check's layer switches (a test-only feature; a no-op in every other build).
    Ok(mutation::apply(Layers {
        limitations,
        landlock_abi: ll.report().abi,
        landlock: Some(ll),
        seccomp_enforced: filters.is_some(),
        seccomp: filters,
        signals,
        notify_filter,
        notify_parts: parts,
        net_part: host_net.part,
        memfd_exec: guards.memfd_exec,
        memfd_guard: guards.memfd_guard,
        memory_watch: guards.memory_watch,
        meta_guard: guards.meta_guard,
        truncate_guard,
        rlimits: rlimits::plan(l, memory, procs, nproc_base),
        cgroup: cg,
        limits,
        missing: p.missing,
        want_pidns: p.want_pidns,
        netns,
        own_loopback: loopback,
        view,
    }))
}

/// A protection the policy asks for that no layer gives here: the run's
/// refusal, or with `best_effort` a line of `missing` (and a warning).
fn unavailable(
    best_effort: bool,
    what: &str,
    why: &str,
    missing: &mut Vec<String>,
) -> Result<(), SandboxError> {
    if best_effort {
        let line = format!("{what}: {why}");
        tracing::warn!("not enforced (--best-effort): {line}");
        missing.push(line);
        Ok(())
    } else {
        Err(SandboxError::Unavailable {
            what: what.into(),
            why: why.into(),
        })
    }
}

/// What the steps of [`prepare`] read, and the protections they find
/// missing (in the order they find them).
struct Prep<'a> {
    plan: &'a Plan,
    path: &'a RunPath,
    k: &'static kernel::Probe,
    /// The run gets its own pid namespace (and with it the view).
    want_pidns: bool,
    /// Protections asked for but not enforced (only with best_effort).
    missing: Vec<String>,
}

/// How proxy mode holds on the host's network: the network part of the
/// notify filter, and why the network guard cannot run (where it cannot).
struct HostNet {
    part: seccomp::NetPart,
    guard_unavailable: Option<String>,
}

/// The guards that need a seccomp listener (memfd, metadata) and the
/// memory watchdog, as [`Prep::guards`] decides them.
struct Guards {
    memfd_exec: &'static str,
    memfd_guard: Option<bool>,
    /// No listener to count memfds with: memfd_create fails (ENOSYS).
    memfd_enosys: bool,
    memory_watch: Option<MemoryWatchPlan>,
    meta_guard: Option<MetaGuardPlan>,
}

/// Whether the memfd and metadata guards can be had: they need a seccomp
/// listener, and they read the caller's memory (process_vm_readv), which a
/// container's seccomp profile may refuse (Docker's and containerd's
/// RuntimeDefault without CAP_SYS_PTRACE).
fn remote_guards_available(seccomp: bool) -> bool {
    seccomp
        && seccomp::listener_available().is_ok()
        && crate::sys::notify::remote_read_available().is_ok()
}

impl<'a> Prep<'a> {
    fn new(plan: &'a Plan, path: &'a RunPath) -> Prep<'a> {
        let want_pidns = path.namespaces;
        if !want_pidns {
            tracing::info!(
                "no pid namespace available: descendants are killed through a child subreaper, and a setsid'd \
                 grandchild can outlive capsule if capsule itself is SIGKILLed"
            );
        }
        Prep {
            plan,
            path,
            k: kernel::probe(),
            want_pidns,
            missing: Vec::new(),
        }
    }

    fn unavailable(&mut self, what: &str, why: &str) -> Result<(), SandboxError> {
        unavailable(self.plan.best_effort, what, why, &mut self.missing)
    }

    /// Signals: the pid namespace hides every process outside the run;
    /// without one, Landlock's signal scope, and below it the seccomp signal
    /// filter, whose listener the supervisor serves.
    fn signal_layer(&mut self) -> Result<SignalLayer, SandboxError> {
        let k = self.k;
        let abi = k.landlock_abi;
        let scope_kernel = format!(
            "Landlock ABI {LANDLOCK_SCOPES} (Linux {})",
            landlock_linux(LANDLOCK_SCOPES)
        );
        let signals = if self.want_pidns {
            SignalLayer::PidNamespace
        } else if k.landlock_scopes() {
            SignalLayer::LandlockScope
        } else if abi == 0 {
            // Only Landlock's filesystem rules keep the run out of the host's
            // /proc, where capsule's listener sits in /proc/PID/fd: the kernel's
            // own checks stop a reopen there (ptrace access, the anon inode's
            // root:0600 mode) except for a run as root under a capsule that holds
            // no capabilities. Not claimed without Landlock.
            self.unavailable(
                "signal isolation",
                &format!(
                    "needs a pid namespace (user namespaces are disabled) or Landlock: {scope_kernel} for its \
                     signal scope, or any ABI for the seccomp user-notification layer, whose listener Landlock \
                     keeps out of the run's reach (capsule's /proc/PID/fd)"
                ),
            )?;
            SignalLayer::None
        } else if !k.seccomp {
            self.unavailable(
                "signal isolation",
                &format!(
                    "needs a pid namespace (user namespaces are disabled), {scope_kernel} or seccomp user \
                     notification, and this kernel has no seccomp filter support"
                ),
            )?;
            SignalLayer::None
        } else {
            match seccomp::listener_available() {
                Ok(()) => SignalLayer::SeccompNotify,
                Err(e) => {
                    let why = format!(
                        "needs a pid namespace (user namespaces are disabled), {scope_kernel} or a seccomp \
                         user-notification listener, which cannot be made here ({e}){}",
                        if e == nix::errno::Errno::EBUSY {
                            ": capsule runs under a seccomp filter that already has a listener, e.g. inside \
                             another capsule without namespaces"
                        } else {
                            ""
                        }
                    );
                    self.unavailable("signal isolation", &why)?;
                    SignalLayer::None
                }
            }
        };
        Ok(signals)
    }

    /// Whether the run gets its own network namespace, and its own loopback
    /// in it. Abstract Unix sockets belong to a network namespace: the run's
    /// own isolates them as well as Landlock's scope does.
    fn own_network(&mut self) -> Result<(bool, bool), SandboxError> {
        let plan = self.plan;
        let netns = self.want_pidns && plan.net.mode != NetMode::Unrestricted;
        let loopback = own_loopback(&plan.net, netns);
        if plan.net.loopback == Some(true) && plan.net.mode != NetMode::Unrestricted && !netns {
            // Not a weaker run but a different one: no --best-effort for this.
            return Err(SandboxError::NoLoopback {
                why: if kernel::probe().namespaces {
                    "clone() refused the namespaces"
                } else {
                    "no user namespaces here, or CAPSULE_NO_NAMESPACES"
                },
            });
        }
        if !self.k.landlock_scopes() && plan.net.allow_unix_sockets && !netns {
            self.unavailable(
                "abstract Unix socket isolation",
                &format!(
                    "allow_unix_sockets needs Landlock ABI {LANDLOCK_SCOPES} (Linux {}) to keep abstract sockets of the \
                     host out of reach",
                    landlock_linux(LANDLOCK_SCOPES)
                ),
            )?;
        }
        Ok((netns, loopback))
    }

    /// Who enforces the network: seccomp refuses every IP socket in `none`
    /// mode, and in proxy mode the run's network namespace holds nothing but
    /// the proxy. With the run's own loopback, the namespace is the layer in
    /// both modes: IP sockets (TCP, UDP) reach only the run and the proxy's
    /// endpoint, so Landlock's TCP rules, which cannot tell the run's own
    /// 127.0.0.1 from another, are off. Landlock's TCP rules are then a second layer, used where
    /// the kernel has them. On the host's network (no namespaces) the network
    /// guard (`guards::network`) holds connect to the proxy and refuses
    /// listen and TCP Fast Open, which no Landlock ABI sees; Landlock's TCP
    /// rules are required only where the guard cannot be had.
    fn host_network_guard(&mut self) -> Result<HostNet, SandboxError> {
        let plan = self.plan;
        let host_proxy = plan.net.mode == NetMode::Proxy && !self.want_pidns && self.k.seccomp;
        let guard_unavailable = if host_proxy {
            net_guard_available().err()
        } else {
            None
        };
        let net_part = match (host_proxy, &guard_unavailable) {
            (false, _) => match unix_bind_part(plan, self.want_pidns, self.k.seccomp) {
                Ok(part) => part,
                Err(why) => {
                    self.unavailable("bind() of abstract Unix socket names", &why)?;
                    seccomp::NetPart::None
                }
            },
            (true, None) => seccomp::NetPart::Guard,
            (true, Some(_)) if !plan.net.allow_unix_sockets => seccomp::NetPart::NoListen,
            (true, Some(why)) => {
                self.unavailable(
                    "listen() on IP sockets",
                    &format!(
                        "with allow_unix_sockets on the host's network only capsule's network guard can refuse \
                         listen() on an IP socket (which binds an ephemeral port on every address), and it cannot \
                         run here: {why}"
                    ),
                )?;
                // Nor, with no network namespace, binding the host's
                // abstract Unix socket names (reached under --best-effort).
                self.unavailable(
                    "bind() of abstract Unix socket names",
                    &format!(
                        "without a network namespace only capsule's network guard can refuse binding the \
                         host's abstract Unix socket names, and it cannot run here: {why}"
                    ),
                )?;
                seccomp::NetPart::FastOpenOnly
            }
        };
        if let Some(why) = &guard_unavailable {
            tracing::info!(
                "network guard unavailable ({why}): Landlock's TCP rules must hold connect"
            );
        }
        Ok(HostNet {
            part: net_part,
            guard_unavailable,
        })
    }

    /// The Landlock ruleset: the filesystem plan (as the view has it, on
    /// the namespace path), the TCP rules and the scopes.
    fn landlock(
        &mut self,
        proxy_port: Option<u16>,
        loopback: bool,
        net_part: seccomp::NetPart,
    ) -> Result<landlock::Prepared, SandboxError> {
        let (plan, k, want_pidns) = (self.plan, self.k, self.want_pidns);
        let scopes = landlock::Scopes {
            signal: k.landlock_scopes(),
            abstract_unix: k.landlock_scopes(),
        };
        let net = landlock::NetRules {
            handle_tcp: plan.net.mode != NetMode::Unrestricted && !loopback,
            connect_ports: proxy_port.into_iter().collect(),
            tcp_required: plan.net.mode == NetMode::Proxy
                && !want_pidns
                && net_part != seccomp::NetPart::Guard,
        };
        let viewed_fs;
        let fs = if want_pidns {
            viewed_fs = fs_for_view(&plan.fs);
            &viewed_fs
        } else {
            &plan.fs
        };
        let ll = landlock::prepare(fs, &net, &scopes, plan.best_effort)?;
        tracing::debug!("landlock ruleset ready ({} rules)", ll.report().rules.len());
        self.missing.extend(ll.report().missing.iter().cloned());
        Ok(ll)
    }

    /// The view (mount namespace) on the namespace path; without it, the
    /// gaps of the no-namespace path.
    fn view(&mut self, ll: &landlock::Prepared) -> Result<Option<view::View>, SandboxError> {
        let (plan, path, k) = (self.plan, self.path, self.k);
        let abi = k.landlock_abi;
        if self.want_pidns {
            if path.bound_proc && abi == 0 {
                // Nothing else keeps /proc/PID/environ of the processes outside
                // the run unreadable at the same uid.
                self.unavailable(
                    "private /proc",
                    "a fresh procfs is refused here (a container's masked /proc), and the container's /proc can be \
                     bound into the view only under Landlock, whose ptrace restriction keeps the environ, memory \
                     and descriptors of processes outside the run unreadable; this kernel has no Landlock. The \
                     private /proc comes back with podman --security-opt unmask=ALL, Docker --security-opt \
                     systempaths=unconfined or Kubernetes procMount: Unmasked",
                )?;
            }
            let input = view::ViewInput {
                tmp_size_mb: plan.limits.tmp_size_mb,
                rights: ll.view_rights(),
                memfd_noexec: k.memfd_noexec && !path.bound_proc,
                shm_pages: plan.limits.memory_bytes.map(|b| b.div_ceil(4096)),
                bound_proc: path.bound_proc,
            };
            Ok(Some(view::View::plan(plan, &input)?))
        } else {
            if let Some(m) = plan.fs.mounts.iter().find(|m| m.src != m.dst) {
                // Not a weaker run but a different one: no --best-effort for this.
                return Err(SandboxError::NoView {
                    what: format!("mounting {} at {}", m.src.display(), m.dst.display()),
                    why: match path.fallbacks.last() {
                        // The exact step the kernel or a container refused.
                        Some(why) => format!("the run has none here: {why}"),
                        None => {
                            "namespaces are not available here (no unprivileged user namespaces, or \
                                 CAPSULE_NO_NAMESPACES)"
                                .to_string()
                        }
                    },
                });
            }
            // The first gap (metadata outside write grants) is decided in
            // `guards`: the metadata guard closes it where a listener can be had.
            self.missing
                .extend(NO_VIEW_GAPS.iter().skip(1).map(|s| s.to_string()));
            // The keeper (`child::keeper_main`) kills the run's tree when capsule
            // dies, by the list of its children, which only /proc gives.
            if !keeper_can_list_children() {
                self.missing.push(
                    "pid namespace: a setsid'd descendant can outlive capsule if capsule itself is SIGKILLed (the \
                     keeper that takes the run down with capsule needs /proc/thread-self/children: /proc and a \
                     kernel with CONFIG_PROC_CHILDREN)"
                        .into(),
                );
            }
            Ok(None)
        }
    }

    /// The seccomp programs, where the kernel has seccomp.
    fn seccomp(&mut self, loopback: bool) -> Result<Option<seccomp::Filters>, SandboxError> {
        let (plan, want_pidns) = (self.plan, self.want_pidns);
        if self.k.seccomp {
            Ok(Some(seccomp::build(&seccomp::SeccompOptions {
                net: plan.net.mode,
                allow_unix_sockets: plan.net.allow_unix_sockets,
                // The spawn never falls back by itself: when clone() refuses the
                // namespaces, the supervisor prepares again with
                // `namespaces == false`, and so gets the strict program.
                private_ipc: want_pidns,
                private_pid: want_pidns,
                own_loopback: loopback,
                memfd_noexec_seal: false,
            })?))
        } else {
            self.unavailable(
                "seccomp",
                "the kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)",
            )?;
            Ok(None)
        }
    }

    /// Truncation: Landlock's truncate right arrives with ABI 3; the view's
    /// read-only host covers it everywhere outside write grants. Where
    /// neither exists, the seccomp truncate guard does.
    fn truncate_guard(
        &mut self,
        seccomp: bool,
    ) -> Result<Option<seccomp::TruncateGuard>, SandboxError> {
        let truncate_needs_guard = self.k.landlock_abi < LANDLOCK_TRUNCATE && !self.want_pidns;
        if !truncate_needs_guard {
            Ok(None)
        } else if seccomp {
            Ok(Some(seccomp::truncate_guard()?))
        } else {
            self.unavailable(
                "truncate protection",
                &format!(
                    "Landlock's truncate right needs ABI {LANDLOCK_TRUNCATE} (Linux {}), and without a mount namespace \
                     or seccomp nothing else stops truncate() of files outside write grants",
                    landlock_linux(LANDLOCK_TRUNCATE)
                ),
            )?;
            Ok(None)
        }
    }

    /// Limits: a cgroup where capsule may make one, else rlimits; how
    /// memory_mb and max_processes are held.
    fn limits(
        &mut self,
        seccomp: bool,
    ) -> Result<(cgroup::RunCgroup, Mechanism, Mechanism), SandboxError> {
        let l = &self.plan.limits;
        let root = nix::unistd::getuid().is_root();
        // As root nothing but a cgroup holds max_processes: capsule may ask
        // systemd for a delegated scope (see `cgroup`).
        let cg =
            cgroup::RunCgroup::create(&self.plan.run_id, l.memory_bytes, l.max_processes, root);
        let memory = match (l.memory_bytes, cg.memory) {
            (None, _) => Mechanism::None,
            (Some(_), Some(m)) => m,
            (Some(_), None) => Mechanism::Rlimit,
        };
        let procs = match (l.max_processes, cg.procs) {
            (None, _) => Mechanism::None,
            (Some(_), Some(m)) => m,
            (Some(_), None) if !root => Mechanism::Rlimit,
            (Some(_), None) => self.process_guard(seccomp, &cg)?,
        };
        Ok((cg, memory, procs))
    }

    /// max_processes as root without a cgroup: the process guard, where the
    /// supervisor can count the run's tasks at every clone/fork/vfork
    /// (seccomp user notification).
    fn process_guard(
        &mut self,
        seccomp: bool,
        cg: &cgroup::RunCgroup,
    ) -> Result<Mechanism, SandboxError> {
        let listener = seccomp::listener_available()
            .map_err(|e| {
                format!("no seccomp user-notification listener for the process guard ({e})")
            })
            .and_then(|()| {
                crate::sys::notify::proc_syscall_available()
                    .map_err(|e| format!("the process guard cannot watch the run's forks ({e})"))
            });
        match (seccomp, listener) {
            (true, Ok(())) => Ok(Mechanism::ProcessGuard),
            (_, listener) => {
                let mut why =
                    "capsule runs as root (RLIMIT_NPROC does not bind uid 0) and cannot create a \
                               cgroup with the pids controller beneath its own"
                        .to_string();
                if let Some(n) = &cg.systemd_note {
                    why.push_str(&format!("; no delegated systemd scope: {n}"));
                }
                why.push_str(&match listener {
                    Err(e) if seccomp => format!("; and {e}"),
                    _ => "; and no seccomp for the process guard".to_string(),
                });
                self.unavailable("limits.max_processes", &why)?;
                Ok(Mechanism::None)
            }
        }
    }

    /// The memfd guard, the memory watchdog and the metadata guard.
    fn guards(
        &mut self,
        view: Option<&view::View>,
        seccomp: bool,
        memory: Mechanism,
    ) -> Result<Guards, SandboxError> {
        let plan = self.plan;
        // A memfd executed through /proc/self/fd/N: Landlock does not check
        // files of the kernel's internal shmem mount, and seccomp cannot see the
        // path. vm.memfd_noexec = 2 in the run's pid namespace closes it (root
        // with the view); elsewhere on 6.3+ the memfd guard makes every memfd of
        // the run itself, sealed against execution (`guards::memfd`).
        let memfd_sysctl = view.is_some_and(|v| v.summary.memfd_noexec);
        // The memfd and metadata guards need a seccomp listener and
        // process_vm_readv ([`remote_guards_available`]). Probed only where
        // a guard would be planned: the default run with the view as root
        // needs neither.
        let remote = || remote_guards_available(seccomp);
        let memfd_seal = !memfd_sysctl && self.k.memfd_noexec_known && remote();
        // memory_mb without a cgroup: RLIMIT_DATA counts no shared memory, so
        // the memory watchdog (`supervisor::memwatch`) samples the run, and the
        // memfd guard makes every memfd of the run so that it can count them.
        let memory_watch = (memory == Mechanism::Rlimit).then(|| memory_watch_plan(plan, view));
        let count_memfds = memory_watch.is_some() && remote();
        // Without the view's read-only host, the metadata guard
        // (`guards::metadata`) makes every chmod/chown/utime/setxattr of
        // the run itself, only where a write grant covers the target.
        let meta_guard = (view.is_none() && remote() && crate::sys::meta::openat2_available())
            .then(|| meta_guard_plan(&plan.fs));
        if view.is_none() && meta_guard.is_none() {
            self.no_view_gap()?;
        }
        if memory_watch.is_some() && !seccomp {
            self.unavailable(
                "limits.memory_mb (shared memory)",
                "without a cgroup RLIMIT_DATA does not count memfds, and without seccomp capsule can neither make \
                 them itself (to count them) nor refuse them",
            )?;
        }
        let memfd_guard = (memfd_seal || count_memfds).then_some(memfd_seal);
        let memfd_exec = if memfd_sysctl {
            "pid-namespace-sysctl"
        } else if memfd_seal {
            "seccomp-notify"
        } else {
            "none"
        };
        let memfd_enosys = memory_watch.is_some() && !remote();
        if memfd_exec == "none" {
            self.missing.push(
                "execution of a memfd through /proc/self/fd/N (needs Linux 6.3+: vm.memfd_noexec=2 in the run's pid \
                 namespace, or capsule's memfd guard, which needs a seccomp listener and process_vm_readv of the run; \
                 fexecve of a memfd is refused \
                 by seccomp)"
                    .to_string(),
            );
        }
        Ok(Guards {
            memfd_exec,
            memfd_guard,
            memfd_enosys,
            memory_watch,
            meta_guard,
        })
    }

    /// Neither the view nor the metadata guard: the mode, owner, times and
    /// xattrs of files outside write grants can be changed.
    fn no_view_gap(&mut self) -> Result<(), SandboxError> {
        // uid 0 owns the host's system files: owner checks do not need the
        // capabilities the run lacks. Not a run without --best-effort where
        // the host took the view away and no guard closes the gap;
        // CAPSULE_NO_NAMESPACES=1 is the operator's own choice of this path,
        // and says it loudly.
        if nix::unistd::getuid().is_root() && !kernel::namespaces_disabled_by_env() {
            unavailable(
                self.plan.best_effort,
                "read-only view of the host",
                &root_no_view_why(self.path),
                &mut Vec::new(),
            )?;
        }
        self.missing.insert(
            0,
            if nix::unistd::getuid().is_root() {
                ROOT_NO_VIEW_GAP
            } else {
                NO_VIEW_GAPS[0]
            }
            .to_string(),
        );
        Ok(())
    }

    /// What the stacked notify filter holds.
    fn notify_parts(
        &self,
        signals: SignalLayer,
        net_part: seccomp::NetPart,
        procs: Mechanism,
        guards: &Guards,
        view: bool,
    ) -> seccomp::Parts {
        let root = nix::unistd::getuid().is_root();
        seccomp::Parts {
            signals: signals == SignalLayer::SeccompNotify,
            net: net_part,
            procs: procs == Mechanism::ProcessGuard,
            memfd: guards.memfd_guard.is_some(),
            // No listener to count memfds with: memfd_create fails (ENOSYS).
            memfd_enosys: guards.memfd_enosys,
            meta: guards.meta_guard.is_some(),
            // The view's IPC namespace bounds SysV segments with kernel.shmall
            // = memory_mb only where capsule may set it (as root); else they
            // are refused, as no process's memory shows one nobody maps.
            // kernel.shmall bounds SysV memory only where the view can write it:
            // root's fresh /proc (not the container's, bound read-only).
            sysv_refuse: guards.memory_watch.is_some() && view && (!root || self.path.bound_proc),
            // Message queues and semaphore arrays: kernel memory the watchdog
            // cannot see and no sysctl capsule sets bounds to memory_mb.
            ipc_refuse: guards.memory_watch.is_some() && view,
            observe: false,
            // Without a pid namespace of its own the run can open a pidfd of
            // any host process: no PIDFD_GET_INFO on it.
            pidfd_info: !self.path.namespaces,
        }
    }

    /// What works differently here without weakening a protection
    /// (`enforcement.limitations`).
    fn limitations(
        &self,
        parts: &seccomp::Parts,
        guards: &Guards,
        host_net: &HostNet,
        truncate_guard: bool,
    ) -> Vec<String> {
        let (plan, abi) = (self.plan, self.k.landlock_abi);
        let net_part = host_net.part;
        let mut limitations = self.path.fallbacks.clone();
        if parts.signals {
            limitations.push(SECCOMP_NOTIFY_LIMITATION.to_string());
        }
        if parts.procs {
            limitations.push(PROCESS_GUARD_LIMITATION.to_string());
        }
        if guards.meta_guard.is_some() {
            limitations.push(META_GUARD_LIMITATION.to_string());
        }
        if guards.memory_watch.is_some() {
            limitations.push(MEMORY_WATCHDOG_LIMITATION.to_string());
            if parts.memfd_enosys {
                limitations.push(
                    "memory_mb without a cgroup and without a seccomp listener: memfd_create fails with ENOSYS \
                     (capsule could not count the memfds)"
                        .to_string(),
                );
            }
        }
        if plan.net.allow_unix_sockets {
            limitations.push(UNIX_PATHNAME_LIMITATION.to_string());
        }
        if net_part == seccomp::NetPart::Guard && plan.net.allow_unix_sockets {
            limitations.push(NET_GUARD_UNIX_LIMITATION.to_string());
        }
        if matches!(
            net_part,
            seccomp::NetPart::Guard | seccomp::NetPart::UnixBind
        ) && plan.net.allow_unix_sockets
        {
            limitations.push(NET_GUARD_BIND_LIMITATION.to_string());
        }
        if let (true, Some(why)) = (
            net_part != seccomp::NetPart::Guard,
            &host_net.guard_unavailable,
        ) {
            limitations.push(format!(
                "proxy mode on the host's network without capsule's network guard ({why}): Landlock's TCP rule \
                 pins the proxy's port, not its address, so a listener on the same port number at another address \
                 is reachable too (the port is an ephemeral one the kernel chose)"
            ));
        }
        if truncate_guard {
            limitations.push(seccomp::truncate::LIMITATION.to_string());
        }
        if crate::plan::tools::has_command_tools(plan.tools.as_ref()) {
            limitations.push(crate::plan::tools::LIMITATION.to_string());
        }
        if let Some(b) = &plan.fs.ca_bundle {
            // Without the view (or a system bundle to show it at) only the
            // variables name the run's CA (contract section 8).
            if !self.want_pidns || b.system.is_none() {
                limitations.push(CA_VARIABLES_ONLY_LIMITATION.to_string());
            }
        }
        if abi == LANDLOCK_FS {
            limitations.push(format!(
                "Landlock ABI {LANDLOCK_FS} (Linux {}) has no refer right: renaming or linking a file between two \
                 directories fails with EXDEV, even inside one write grant (git, pip and mv may fail)",
                kernel::landlock_linux_span(LANDLOCK_FS)
            ));
        }
        limitations
    }
}

/// `enforcement.limitations` of a run with TLS-terminated hosts whose view
/// does not show the run's CA at the system bundle's path.
pub const CA_VARIABLES_ONLY_LIMITATION: &str =
    "TLS-terminated hosts without a view of the host: the system CA bundle is the host's, without the run's \
     CA; clients that read SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, \
     GIT_SSL_CAINFO, PIP_CERT, CARGO_HTTP_CAINFO or NPM_CONFIG_CAFILE trust it; a client with its own store \
     (Java, certifi-only code) refuses those hosts unless given the bundle";

/// Whether `path` lies on a file system whose files are memory: tmpfs, or
/// ramfs (which has no size; the watchdog walks it every time).
fn memory_backed(path: &std::path::Path) -> bool {
    use nix::sys::statfs::{FsType, TMPFS_MAGIC};
    const RAMFS_MAGIC: FsType = FsType(0x8584_58f6);
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == TMPFS_MAGIC || s.filesystem_type() == RAMFS_MAGIC)
}

/// The mount points of tmpfs and ramfs file systems in capsule's mount
/// namespace (`/proc/self/mountinfo`, whose view the run's copies).
fn memory_backed_mounts() -> Vec<std::path::PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            // `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER`
            let (head, tail) = line.split_once(" - ")?;
            let fstype = tail.split(' ').next()?;
            if fstype != "tmpfs" && fstype != "ramfs" {
                return None;
            }
            Some(std::path::PathBuf::from(unescape_mountinfo(
                head.split(' ').nth(4)?,
            )))
        })
        .collect()
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape_mountinfo(field: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push(
                    d.iter()
                        .fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// The memory watchdog's plan (memory_mb without a cgroup): the run's
/// private tmpfs mounts and the host tmpfs directories whose files are its.
fn memory_watch_plan(plan: &Plan, view: Option<&view::View>) -> MemoryWatchPlan {
    let mut w = MemoryWatchPlan {
        limit: plan.limits.memory_bytes.unwrap_or(u64::MAX),
        view_tmpfs: view
            .map(|v| {
                let mut t = Vec::new();
                if v.summary.private_shm {
                    t.push("/dev/shm".into());
                }
                if v.summary.private_tmp && plan.limits.tmp_size_mb.is_some() {
                    t.push("/tmp".into());
                }
                t
            })
            .unwrap_or_default(),
        host_tmpfs: plan
            .tmpdir
            .iter()
            .filter(|t| {
                nix::sys::statfs::statfs(t.as_path())
                    .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
            })
            .cloned()
            .collect(),
        granted_tmpfs: Vec::new(),
        unlinked_in: Vec::new(),
    };
    // Write grants on a host tmpfs (a pod's memory-backed emptyDir, /dev/shm
    // without the view), by file system, and the tmpfs mounted beneath a
    // write grant (a workspace's memory-backed scratch mount, /run/user/UID
    // beneath /run): Landlock's rule and the view's bind reach into them. A
    // private TMPDIR beneath one of them is counted with it, not walked twice;
    // elsewhere on a tmpfs with a size it joins that file system's group (its
    // growth is the first bound: a file there held only in flight in a Unix
    // socket is inside it).
    let mounts = memory_backed_mounts();
    let mut devs: Vec<u64> = Vec::new();
    let mut group = |w: &mut MemoryWatchPlan, dev: u64| -> usize {
        devs.iter().position(|d| *d == dev).unwrap_or_else(|| {
            devs.push(dev);
            w.granted_tmpfs.push(TmpfsGroup::default());
            devs.len() - 1
        })
    };
    for g in plan.fs.grants.iter().filter(|g| {
        g.access.write
            && !matches!(
                g.origin,
                crate::plan::Origin::System | crate::plan::Origin::Tmp
            )
    }) {
        let beneath = mounts
            .iter()
            .filter(|m| m.starts_with(&g.path) && **m != g.path);
        let here = memory_backed(&g.path).then_some(&g.path);
        for path in here.into_iter().chain(beneath) {
            let Ok(st) = nix::sys::stat::stat(path.as_path()) else {
                continue;
            };
            let i = group(&mut w, st.st_dev);
            let roots = &mut w.granted_tmpfs[i].grants;
            if roots.iter().any(|r| path.starts_with(r)) {
                continue;
            }
            roots.retain(|r| !r.starts_with(path));
            roots.push(path.clone());
        }
    }
    let tmp_bound =
        view.is_some_and(|v| v.summary.private_tmp) && plan.limits.tmp_size_mb.is_none();
    for t in std::mem::take(&mut w.host_tmpfs) {
        if w.granted_tmpfs
            .iter()
            .any(|g| g.grants.iter().any(|r| t.starts_with(r)))
        {
            continue;
        }
        let sized = nix::sys::statfs::statfs(t.as_path()).is_ok_and(|s| s.blocks() > 0);
        match nix::sys::stat::stat(t.as_path()) {
            Ok(st) if sized => {
                let i = group(&mut w, st.st_dev);
                let g = &mut w.granted_tmpfs[i];
                // A grant beneath the TMPDIR: walked with it.
                g.grants.retain(|r| !r.starts_with(&t));
                g.tmpdir = Some(t);
                g.tmpdir_alias = tmp_bound.then(|| "/tmp".into());
            }
            _ => w.host_tmpfs.push(t),
        }
    }
    w.unlinked_in = w.host_tmpfs.clone();
    if tmp_bound && !w.host_tmpfs.is_empty() {
        w.unlinked_in.push("/tmp".into());
    }
    w
}

/// What the metadata guard may let change: the write grants, less the
/// carve-outs.
fn meta_guard_plan(fs: &crate::plan::FsPlan) -> MetaGuardPlan {
    MetaGuardPlan {
        write: fs
            .grants
            .iter()
            // The system grants' writable devices are given for their data.
            .filter(|g| g.access.write && g.origin != crate::plan::Origin::System)
            .map(|g| g.path.clone())
            .collect(),
        deny: fs.deny.iter().map(|d| d.path.clone()).collect(),
    }
}

/// limit name -> mechanism label, for the result.
fn limit_labels(
    l: &crate::plan::LimitsPlan,
    memory: Mechanism,
    procs: Mechanism,
) -> BTreeMap<String, String> {
    let mut limits = BTreeMap::new();
    if l.memory_bytes.is_some() {
        limits.insert("memory_mb".into(), memory.label("rlimit-data+watchdog"));
    }
    if l.max_processes.is_some() {
        limits.insert("max_processes".into(), procs.label("rlimit-nproc"));
    }
    for (name, set) in [
        ("cpu_seconds", l.cpu_seconds.is_some()),
        ("max_file_size_mb", l.max_file_size_bytes.is_some()),
        ("max_open_files", l.max_open_files.is_some()),
    ] {
        if set {
            limits.insert(name.into(), "rlimit".into());
        }
    }
    limits
}

#[cfg(test)]
mod path_tests {
    use super::*;
    use nix::errno::Errno;

    fn first() -> RunPath {
        RunPath {
            namespaces: true,
            bound_proc: false,
            fallbacks: Vec::new(),
        }
    }

    #[test]
    fn a_refused_procfs_keeps_the_view_once_then_leaves_the_namespaces() {
        let bound = first()
            .after(NsRefusal::Proc(Errno::EPERM))
            .expect("a next path");
        assert!(bound.namespaces && bound.bound_proc, "{bound:?}");
        assert!(bound.fallbacks[0].contains("bound read-only"), "{bound:?}");
        let none = bound
            .after(NsRefusal::Proc(Errno::EPERM))
            .expect("a next path");
        assert!(!none.namespaces && !none.bound_proc, "{none:?}");
        assert_eq!(none.fallbacks.len(), 2);
        assert_eq!(none.after(NsRefusal::Clone(Errno::EPERM)), None);
    }

    #[test]
    fn a_refused_clone_or_set_up_step_leaves_the_namespaces_and_says_why() {
        let p = first()
            .after(NsRefusal::Clone(Errno::ENOSYS))
            .expect("next");
        assert!(!p.namespaces);
        assert!(p.fallbacks[0].contains("clone() refused") && p.fallbacks[0].contains("ENOSYS"));
        let p = first()
            .after(NsRefusal::Unusable {
                step: "writing the user namespace's uid map",
                errno: Errno::EACCES,
            })
            .expect("next");
        assert!(!p.namespaces);
        assert!(p.fallbacks[0].contains("uid map") && p.fallbacks[0].contains("AppArmor"));
    }
}

#[cfg(test)]
mod mountinfo_tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo(r"/x\134y\011"), "/x\\y\t");
        assert_eq!(unescape_mountinfo(r"/plain\04"), r"/plain\04");
    }

    #[test]
    fn this_hosts_tmpfs_mounts_are_listed() {
        let shm = std::path::Path::new("/dev/shm");
        if memory_backed(shm) {
            assert!(memory_backed_mounts().iter().any(|m| m == shm));
        }
    }
}

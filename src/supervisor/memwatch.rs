//! The memory watchdog: `limits.memory_mb` where capsule has no cgroup.
//!
//! Without a memory cgroup the child's RLIMIT_DATA holds the run's private
//! memory, but it does not count shared memory: a MAP_SHARED|MAP_ANONYMOUS
//! mapping, a memfd, a tmpfs file. So here a thread of the supervisor
//! samples, every [`INTERVAL`], what the run holds, and when the sum is over
//! the limit the event loop kills the whole run (`kill_reason` names
//! `limits.memory_mb`). The sum, an upper bound, never an estimate from below:
//!
//! * every process of the run: first a quick upper bound from the counters
//!   of `/proc/PID/status` (`RssAnon + RssShmem + HugetlbPages + VmLck`,
//!   the last for page cache pinned by mlock: no page
//!   walk, a shared page counted in every process mapping it); only when
//!   the sum is over the limit, `/proc/PID/smaps_rollup`'s `Pss_Anon +
//!   Pss_Shmem + Locked` (shared pages divided among the processes mapping them;
//!   `Pss` where the kernel has no `Pss_Anon`, before 5.14) plus hugetlb
//!   pages. Swap is not counted (nor does a cgroup's `memory.max`). Read
//!   through a task that still has the memory: a leader that exited alone
//!   (a bare `exit`, its other threads living on) shows none;
//! * every memfd the run made: the memfd guard (`guards::memfd`) makes each one
//!   itself and keeps a duplicate, whose allocated blocks count whether or
//!   not any process maps it or still holds it (a memfd parked in flight in a
//!   Unix socket is in no descriptor table; capsule cannot tell it from a
//!   closed one, so a closed memfd keeps counting until the run ends, held by
//!   capsule);
//! * the run's tmpfs: the view's private `/dev/shm` and tmpfs `/tmp`
//!   (statfs: exactly the run's), and the private TMPDIR when it lies on a
//!   host tmpfs without a size (its files' blocks, walked; more than
//!   [`MAX_ENTRIES`] entries there count as over the limit; and the files
//!   there the run unlinked but holds open, through its processes'
//!   descriptors);
//! * every host tmpfs the run may write (a write grant on it, or a tmpfs or
//!   ramfs mounted beneath a write grant: a pod's memory-backed emptyDir,
//!   the host's /dev/shm without the view; or its private TMPDIR there, as
//!   on hosts whose /tmp is a tmpfs): first
//!   what the whole file system holds beyond what it held when the run
//!   began; only when that is over the limit, the growth of the files
//!   beneath the grant and the TMPDIR's files plus those there the run
//!   unlinked but holds open
//!   (in any task's descriptor table, not only the leader's; a TMPDIR file
//!   by its name in the view, /tmp, too)
//!   or mapped (where a directory beneath a grant is unreadable, or a mapped
//!   file cannot be sized, or the run holds a Unix socket or has bytes
//!   waiting unread in its RPC channel, where a file can sit in flight: the
//!   file system's growth; a descriptor table that cannot be read counts as
//!   holding one, unless its task is a zombie, which holds none, or is
//!   exiting, which is asked again a few times first; the answer must hold
//!   over the whole closer count: a task of the run that appeared
//!   meanwhile, or a census that missed an orphan, asks again, at most
//!   [`CENSUS_TRIES`] times; where the TMPDIR cannot be walked: over the limit)
//!   ([`Grown`]).
//!
//! Who is of the run (`/proc/PID/task/TID/children`, at most
//! [`MAX_PROCESSES`]): with a pid namespace, the descendants of its init
//! (orphans are reparented to it); without one, the command's descendants
//! and those of capsule's children (orphans of the run are reparented to
//! capsule, a subreaper) that `guards::judge::Judge` places in the run. A process
//! that moves in the tree during a sample is seen at the next one. A process of the run whose `smaps_rollup` cannot be read
//! when it is needed (it made itself non-dumpable) counts as over the limit:
//! fail closed.
//!
//! The watchdog holds itself to a tenth of a core ([`pause`]): after a
//! sample that cost T of its CPU it waits 9 T (at least [`INTERVAL`]).
//!
//! What remains: memory taken between two samples (a burst of at most
//! [`INTERVAL`] of page faulting before the kill, longer where samples are
//! dear); a memfd or tmpfs file that
//! is also mapped counts twice; kernel memory (page tables, socket and pipe
//! buffers) is not counted, nor is a TMPDIR file on a host tmpfs without a
//! size that the run unlinked and holds only in flight in a Unix socket.
//! A run that holds a Unix socket counts all that a host tmpfs it may write
//! (its TMPDIR's too) grew by while it runs, whoever wrote it. SysV segments no
//! process maps are bounded by the view (`kernel.shmall`, or shmget
//! refused: `sandbox::prepare`).

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::guards::memfd::Memfds;

/// How often the run is sampled.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// The most entries of a host-tmpfs TMPDIR walked per sample.
pub const MAX_ENTRIES: usize = 50_000;
/// The most processes of a run in a pid namespace the watchdog walks (more
/// count as over the limit; the namespace's pid_max is the real bound).
pub const MAX_PROCESSES: usize = 1 << 16;
/// Who the run's processes are.
pub enum Census {
    /// The run's pid namespace: its own `/proc`, through its init's root.
    PidNamespace { init: libc::pid_t },
    /// No pid namespace: the host's `/proc`, below the keeper (the run's
    /// subreaper, which shares capsule's memory and is not counted).
    Keeper { keeper: libc::pid_t },
}

/// What the watchdog sums for one run.
pub struct Watch {
    pub limit: u64,
    pub census: Census,
    pub memfds: Memfds,
    /// Private tmpfs mounts of the view, as paths inside the run's root
    /// (e.g. "/dev/shm"): reached through the root of a process of the run.
    pub view_tmpfs: Vec<PathBuf>,
    /// Host directories on a shared tmpfs whose files are the run's (the
    /// private TMPDIR there, where that tmpfs has no size).
    pub host_tmpfs: Vec<PathBuf>,
    /// Those directories as the run names them (the view's /tmp too).
    pub unlinked_in: Vec<PathBuf>,
    /// The host tmpfs file systems the run may write (its TMPDIR on one
    /// with a size too), each with what it held when the run began.
    pub granted_tmpfs: Vec<Grown>,
    /// The inode of the run's end of its RPC socket pair.
    pub rpc_socket: Option<u64>,
    /// Capsule's end of that pair (a duplicate): what waits there unread.
    pub rpc_queue: Option<std::os::fd::OwnedFd>,
}

/// What the watchdog notes before the run exists.
pub struct Before {
    /// Each host tmpfs the run may write, as it was.
    pub granted: Vec<Grown>,
    /// The inode of the run's end of its RPC socket pair.
    pub rpc_socket: Option<u64>,
    /// Capsule's end of that pair (a duplicate).
    pub rpc_queue: Option<std::os::fd::OwnedFd>,
}

/// The most lines of a `/proc/PID/net/unix` read (more: as if the run held one).
const MAX_UNIX_SOCKETS: usize = 1 << 16;

/// Whether a process of the run holds a Unix socket other than `rpc`
/// (the sockets of its network namespace, `/proc/PID/net/unix`, against
/// the `socket:[INODE]` descriptors of its processes). What cannot be read
/// counts as one held, except a task that is exiting ([`Table`]): asked
/// again a few times, [`EXIT_WAIT`] apart, until it is gone or a zombie.
fn holds_unix_socket(pids: &[libc::pid_t], rpc: Option<u64>) -> bool {
    for _ in 0..EXIT_TRIES {
        match unix_socket_held(pids, rpc) {
            Held::No => return false,
            Held::Yes => return true,
            Held::Exiting => std::thread::sleep(EXIT_WAIT),
        }
    }
    true
}

/// How often, and how far apart, [`holds_unix_socket`] asks again while a
/// task of the run is exiting (its memory released, its descriptors not
/// yet: an exit takes microseconds to milliseconds).
const EXIT_TRIES: u32 = 10;
const EXIT_WAIT: Duration = Duration::from_millis(2);

/// One answer of [`holds_unix_socket`].
#[derive(Debug, PartialEq)]
enum Held {
    No,
    Yes,
    /// A table could not be read because its task is exiting: ask again.
    Exiting,
}

fn unix_socket_held(pids: &[libc::pid_t], rpc: Option<u64>) -> Held {
    let Some(first) = pids.first() else {
        return Held::No;
    };
    let Ok(table) = std::fs::read_to_string(format!("/proc/{first}/net/unix")) else {
        return Held::Yes;
    };
    let mut unix = std::collections::HashSet::new();
    for (i, line) in table.lines().skip(1).enumerate() {
        if i >= MAX_UNIX_SOCKETS {
            return Held::Yes;
        }
        // `Num RefCount Protocol Flags Type St Inode [Path]`
        if let Some(ino) = line
            .split_ascii_whitespace()
            .nth(6)
            .and_then(|v| v.parse::<u64>().ok())
        {
            unix.insert(ino);
        }
    }
    let mut exiting = false;
    for table in pids.iter().flat_map(|pid| fd_tables(*pid)) {
        let Ok(fds) = std::fs::read_dir(&table) else {
            match table.parent().map_or(Table::Gone, unreadable_table) {
                Table::Gone => {}
                Table::Exiting => exiting = true,
                Table::Hidden => return Held::Yes,
            }
            continue;
        };
        for e in fds.flatten() {
            let Ok(target) = std::fs::read_link(e.path()) else {
                continue;
            };
            let ino = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok());
            if let Some(ino) = ino {
                if unix.contains(&ino) && Some(ino) != rpc {
                    return Held::Yes;
                }
            }
        }
    }
    if exiting {
        Held::Exiting
    } else {
        Held::No
    }
}

/// Why the descriptor table of a task that was listed cannot be read.
#[derive(Debug, PartialEq)]
enum Table {
    /// The task is gone, or a zombie: it holds no descriptor, and no file
    /// through one (an exit closes them all before the zombie is made).
    Gone,
    /// Its memory is released and its exit goes on: while a task has no
    /// memory its `/proc` entries are root's, out of an unprivileged
    /// capsule's reach, though it may still hold descriptors a moment.
    Exiting,
    /// It is alive and made itself non-dumpable (or is mid-exec of a
    /// stage): what it holds cannot be seen.
    Hidden,
}

/// [`Table`] for the task at `task` (`/proc/PID` or `/proc/PID/task/TID`),
/// from its `status` (readable by everyone, whoever owns the task).
fn unreadable_table(task: &Path) -> Table {
    let Ok(status) = std::fs::read_to_string(task.join("status")) else {
        return if task.exists() {
            Table::Hidden
        } else {
            Table::Gone
        };
    };
    table_from_status(&status)
}

fn table_from_status(status: &str) -> Table {
    let state = status
        .lines()
        .find_map(|l| l.strip_prefix("State:"))
        .map(str::trim_start);
    if state.is_some_and(|s| s.starts_with('Z') || s.starts_with('X')) {
        return Table::Gone;
    }
    // A task has a `VmSize` line while it has memory (kernel threads never
    // are of the run).
    if status.lines().any(|l| l.starts_with("VmSize:")) {
        Table::Hidden
    } else {
        Table::Exiting
    }
}

/// The descriptor tables of process `pid`: `/proc/PID/fd` is only its
/// leader's, and a thread may have one of its own (`clone` with
/// `CLONE_THREAD` but not `CLONE_FILES`), or outlive a leader that exited
/// alone (whose table then reads as empty). Every table once, the
/// leader's first: a task whose table the kernel says is the leader's or the
/// last one listed (`kcmp`; two compares a task, never one per table) is
/// skipped, any other read (where it cannot tell, read again).
fn fd_tables(pid: libc::pid_t) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(format!("/proc/{pid}/fd"))];
    let mut last = pid;
    for t in other_tasks(pid) {
        let Some(tid) = t.rsplit('/').next().and_then(|v| v.parse().ok()) else {
            continue;
        };
        if [pid, last]
            .iter()
            .any(|seen| crate::sys::same_fd_table(*seen, tid) == Some(true))
        {
            continue;
        }
        last = tid;
        out.push(PathBuf::from(format!("{t}/fd")));
    }
    out
}

/// The tasks of process `pid` other than its leader
/// (`/proc/PID/task/TID`); none when it is gone.
fn other_tasks(pid: libc::pid_t) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|tid| tid.parse::<libc::pid_t>().is_ok_and(|t| t != pid))
        .map(|tid| format!("/proc/{pid}/task/{tid}"))
        .collect()
}

/// Whether something the run sent on its RPC socket waits there unread:
/// capsule drains that socket, but not while the run keeps it from doing so
/// (it stops reading the answers, and capsule's write of them blocks; the
/// pacing of a flood), and a descriptor sent along with those bytes holds
/// its file in flight meanwhile. What cannot be asked counts as waiting.
fn rpc_unread(queue: Option<&std::os::fd::OwnedFd>) -> bool {
    use std::os::fd::AsFd;
    queue.is_some_and(|q| crate::sys::socket_queued(q.as_fd()).map_or(true, |n| n > 0))
}

/// A host tmpfs the run may write (a write grant on it, or its private
/// TMPDIR there), as it was when the run began. First a quick upper bound:
/// what the whole file system holds beyond what it held then (`statfs`,
/// whoever wrote it: other programs writing there meanwhile count too).
/// Only when the run is over the limit with it, the growth of the files
/// beneath the grants and those of the TMPDIR (a walk) plus the files there
/// the run unlinked but holds open or mapped: other writers elsewhere on
/// that tmpfs (a parallel run, the host) no longer count. A tmpfs without a
/// size (`size=0`: statfs reports no blocks) is walked every time.
pub struct Grown {
    /// The grants on that file system (none beneath another).
    paths: Vec<PathBuf>,
    /// The run's private TMPDIR there (not beneath a grant): all its files
    /// are the run's; where it cannot be walked, over the limit.
    tmpdir: Option<PathBuf>,
    /// The names the run's unlinked files there show: the grants, the
    /// TMPDIR, and where the view binds it at /tmp, /tmp.
    unlinked_in: Vec<PathBuf>,
    /// Used bytes of the file system at the start; None where it has no size.
    fs_base: Option<u64>,
    /// Bytes of the files beneath the grants at the start; None: unknown
    /// (more than [`MAX_ENTRIES`] entries, or something unreadable there).
    tree_base: Option<u64>,
}

impl Grown {
    /// Note what the file system of the group (one), and the files beneath
    /// its grants, hold now.
    pub fn new(group: &crate::sandbox::TmpfsGroup) -> Grown {
        let paths = group.grants.clone();
        let unlinked_in = paths
            .iter()
            .chain(&group.tmpdir)
            .chain(&group.tmpdir_alias)
            .cloned()
            .collect();
        let fs_base = paths
            .first()
            .or(group.tmpdir.as_ref())
            .and_then(|p| fs_used(p));
        let mut g = Grown {
            paths,
            tmpdir: group.tmpdir.clone(),
            unlinked_in,
            fs_base,
            tree_base: None,
        };
        g.tree_base = g.trees();
        g
    }

    /// The bytes beneath the grants: a directory's files, walked; a file
    /// grant's own blocks.
    fn trees(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        self.paths.iter().try_fold(0u64, |t, p| {
            let here = match std::fs::symlink_metadata(p) {
                Ok(md) if !md.is_dir() => md.blocks().saturating_mul(512),
                _ => tree_bytes(p)?,
            };
            Some(t.saturating_add(here))
        })
    }

    /// A path on the file system (for statfs).
    fn on(&self) -> Option<&Path> {
        self.paths
            .first()
            .or(self.tmpdir.as_ref())
            .map(PathBuf::as_path)
    }

    /// The quick bound: the file system's growth (or, without a size, the
    /// trees'). None: unknown, over the limit.
    fn quick(&self) -> Option<u64> {
        match self.fs_base {
            Some(base) => Some(fs_used(self.on()?)?.saturating_sub(base)),
            None => self.tree_grown()?.checked_add(self.tmpdir_bytes()?),
        }
    }

    fn tree_grown(&self) -> Option<u64> {
        Some(self.trees()?.saturating_sub(self.tree_base?))
    }

    /// The TMPDIR's files; None where it cannot be walked.
    fn tmpdir_bytes(&self) -> Option<u64> {
        self.tmpdir.as_deref().map_or(Some(0), tree_bytes)
    }

    /// The closer bound, given the quick one: the grants' growth, the
    /// TMPDIR's files and the run's unlinked files there (held through a
    /// descriptor or a mapping), never more than `quick`. Where one of
    /// those cannot be told (a directory the run made unreadable beneath a
    /// grant, a mapped file whose size an unprivileged capsule cannot
    /// read), `quick`; where the TMPDIR cannot be walked (a directory there
    /// unreadable, more than [`MAX_ENTRIES`] entries), None: over the limit.
    fn refined(&self, quick: u64, pids: &[libc::pid_t]) -> Option<u64> {
        let mut seen = std::collections::HashSet::new();
        let fds = unlinked_fds(pids, &self.unlinked_in, self.on(), &mut seen);
        let (Some(t), Some(mapped)) = (
            self.tree_grown(),
            unlinked_mapped(pids, &self.unlinked_in, &mut seen),
        ) else {
            return Some(quick);
        };
        Some(
            t.saturating_add(self.tmpdir_bytes()?)
                .saturating_add(fds)
                .saturating_add(mapped)
                .min(quick),
        )
    }
}

/// The bytes a file system holds (used blocks); None where it reports no
/// size or cannot be read.
fn fs_used(path: &Path) -> Option<u64> {
    let s = nix::sys::statfs::statfs(path).ok()?;
    (s.blocks() > 0).then(|| {
        s.blocks()
            .saturating_sub(s.blocks_free())
            .saturating_mul(s.block_size() as u64)
    })
}

/// One sample: the bytes the run holds, or None when something of the run
/// could not be read (then it counts as over the limit).
fn sample(w: &Watch) -> Option<u64> {
    let mut total = w.memfds.bytes();
    let pids = census(w)?;
    if matches!(w.census, Census::PidNamespace { .. }) {
        // The view's tmpfs, through the root of a process of the run (init
        // shares capsule's memory and is not dumpable: its root is out of an
        // unprivileged capsule's reach). Any process's: the first may be a
        // leader that exited alone (no root any more) or have made itself
        // non-dumpable (capsule still reaches it: as root by its
        // capabilities, else as the owner of the run's user namespace).
        // Where none can be reached (before the command's exec every stage
        // shares capsule's non-dumpable memory), nothing of the run has run.
        for p in &w.view_tmpfs {
            let used = pids.iter().find_map(|pid| {
                let at = format!("/proc/{pid}/root{}", p.display());
                let s = nix::sys::statfs::statfs(at.as_str()).ok().or_else(|| {
                    other_tasks(*pid).into_iter().find_map(|t| {
                        nix::sys::statfs::statfs(format!("{t}/root{}", p.display()).as_str()).ok()
                    })
                })?;
                Some(
                    s.blocks()
                        .saturating_sub(s.blocks_free())
                        .saturating_mul(s.block_size() as u64),
                )
            });
            total = total.saturating_add(used.unwrap_or(0));
        }
    }
    for d in &w.host_tmpfs {
        total = total.saturating_add(tree_bytes(d)?);
    }
    if !w.unlinked_in.is_empty() {
        total = total.saturating_add(unlinked_bytes(&pids, &w.unlinked_in, &w.host_tmpfs));
    }
    // The host tmpfs it may write and the processes: first quick upper
    // bounds (a statfs each; the processes' counters, no page walk); only
    // when they are over the limit, the closer ones.
    let mut granted = Vec::with_capacity(w.granted_tmpfs.len());
    for g in &w.granted_tmpfs {
        granted.push(g.quick()?);
    }
    let granted_quick = granted.iter().fold(0u64, |t, b| t.saturating_add(*b));
    let quick = pids
        .iter()
        .fold(0u64, |t, pid| t.saturating_add(status_bytes(*pid)));
    if total.saturating_add(granted_quick).saturating_add(quick) <= w.limit {
        return Some(total.saturating_add(granted_quick).saturating_add(quick));
    }
    // A file in flight in a Unix socket (sent, then unlinked and closed) has
    // no name, no descriptor and no mapping: no closer bound sees it. It
    // lives only as long as a socket of the run does, so a run that holds a
    // Unix socket (other than its RPC channel, which capsule drains: what
    // it carried in flight is dropped as it is read, so only while nothing
    // waits unread there) keeps the quick bound.
    //
    // The answer must hold for the whole closer count: a holder that forks
    // and exits, again and again, is gone when its table is read, and its
    // successor was born after the census (nobody asks it). So the run's
    // tasks are listed before the socket check and again after the closer
    // count: a task that appeared meanwhile may hold what was not seen,
    // and the check is made again with it, at most [`CENSUS_TRIES`] times;
    // then the quick bound stands. (Tasks that ended do not matter: a
    // socket goes with its last holder unless a successor, new, has it;
    // but a process that ended while the census walked may hide its
    // children, reparented behind the walk: then it is not whole either.)
    let mut closer = None;
    if granted.iter().any(|q| *q > 0) && !rpc_unread(w.rpc_queue.as_ref()) {
        let mut pids = pids.clone();
        for _ in 0..CENSUS_TRIES {
            let before = tasks_of(&pids);
            if holds_unix_socket(&pids, w.rpc_socket) {
                break;
            }
            let mut sum = 0u64;
            for (g, q) in w.granted_tmpfs.iter().zip(&granted) {
                if *q > 0 {
                    sum = sum.saturating_add(g.refined(*q, &pids)?);
                }
            }
            let (now, whole) = census_whole(w)?;
            if whole && tasks_of(&now).is_subset(&before) {
                closer = Some(sum);
                break;
            }
            pids = now;
        }
    }
    total = total.saturating_add(closer.unwrap_or(granted_quick));
    if total.saturating_add(quick) <= w.limit {
        return Some(total.saturating_add(quick));
    }
    for pid in &pids {
        total = total.saturating_add(process_bytes("/proc", *pid)?);
    }
    Some(total)
}

/// How often [`sample`] makes its Unix socket check and closer count again
/// when the run's tasks grew meanwhile, before it keeps the quick bound.
const CENSUS_TRIES: u32 = 3;

/// The run's processes now (not its init or keeper).
fn census(w: &Watch) -> Option<Vec<libc::pid_t>> {
    census_with(w, false).map(|(pids, _)| pids)
}

/// [`census`], and whether it is whole ([`descendants_whole`]).
fn census_whole(w: &Watch) -> Option<(Vec<libc::pid_t>, bool)> {
    census_with(w, true)
}

fn census_with(w: &Watch, check: bool) -> Option<(Vec<libc::pid_t>, bool)> {
    match &w.census {
        Census::PidNamespace { init } => descendants_whole(*init, check),
        Census::Keeper { keeper } => descendants_whole(*keeper, check),
    }
}

/// Every task (process and thread ids) of the processes `pids`, as
/// `/proc/PID/task` lists them now (none of a process that is gone).
fn tasks_of(pids: &[libc::pid_t]) -> std::collections::HashSet<libc::pid_t> {
    let mut out = std::collections::HashSet::with_capacity(pids.len());
    for pid in pids {
        out.insert(*pid);
        let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        out.extend(rd.flatten().filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|t| t.parse::<libc::pid_t>().ok())
        }));
    }
    out
}

/// A quick upper bound of what process `pid` holds, from the counters of
/// `/proc/PID/status` (no page walk, readable for every process):
/// `RssAnon + RssShmem + HugetlbPages + VmLck` (the size of its mlock'd
/// mappings: page cache it pins is no anonymous or shmem memory), a shared
/// page counted in full in every process that maps it. 0 when it is gone.
fn status_bytes(pid: libc::pid_t) -> u64 {
    let Some(text) = with_memory(pid, "status") else {
        return 0;
    };
    kb_fields(&text, &["RssAnon:", "RssShmem:", "HugetlbPages:", "VmLck:"]).saturating_mul(1024)
}

/// `/proc/PID/NAME` (`status` or `maps`) as a task of `pid` that still has
/// the process's memory shows it: a leader that exited alone (a bare
/// `exit`, not `exit_group`) shows none (its status has no `Rss` lines, its
/// maps are empty) while its other threads live on with all of it. None
/// when no task has it (gone, or every thread exited).
fn with_memory(pid: libc::pid_t, name: &str) -> Option<String> {
    let has = |text: &str| match name {
        "status" => text.contains("RssAnon:"),
        _ => !text.is_empty(),
    };
    if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/{name}")) {
        if has(&text) {
            return Some(text);
        }
    }
    other_tasks(pid).into_iter().find_map(|t| {
        std::fs::read_to_string(format!("{t}/{name}"))
            .ok()
            .filter(|text| has(text))
    })
}

/// The sum of the `NAME: N kB` fields `names` of a /proc text.
fn kb_fields(text: &str, names: &[&str]) -> u64 {
    names
        .iter()
        .filter_map(|name| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum()
}

/// The files under `dirs` that the run unlinked but holds open (no walk
/// finds them any more): through the descriptors of its processes, each
/// file once.
fn unlinked_bytes(pids: &[libc::pid_t], dirs: &[PathBuf], on: &[PathBuf]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    if on.is_empty() {
        return unlinked_fds(pids, dirs, None, &mut seen);
    }
    on.iter().fold(0u64, |t, d| {
        t.saturating_add(unlinked_fds(pids, dirs, Some(d), &mut seen))
    })
}

/// [`unlinked_bytes`], each file counted once with those in `seen`.
/// `on`: a host path on the file system whose unlinked files count
/// whatever their descriptors' names say.
fn unlinked_fds(
    pids: &[libc::pid_t],
    dirs: &[PathBuf],
    on: Option<&Path>,
    seen: &mut std::collections::HashSet<(u64, u64)>,
) -> u64 {
    let mut total = 0u64;
    // An unlinked file on that file system is the run's whatever its
    // descriptor's name says, and one whose name is longer than PATH_MAX has
    // none (readlink: ENAMETOOLONG; a file opened deep in the TMPDIR, then
    // unlinked and its directories removed).
    let dev = on.and_then(|d| nix::sys::stat::stat(d).ok().map(|s| s.st_dev));
    for table in pids.iter().flat_map(|pid| fd_tables(*pid)) {
        let Ok(fds) = std::fs::read_dir(&table) else {
            continue;
        };
        for e in fds.flatten() {
            let by_name = match std::fs::read_link(e.path()) {
                Ok(target) => {
                    let target = target.to_string_lossy();
                    let Some(name) = target.strip_suffix(" (deleted)") else {
                        continue;
                    };
                    dirs.iter().any(|d| Path::new(name).starts_with(d))
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => false,
            };
            let Ok(st) = nix::sys::stat::stat(&e.path()) else {
                continue;
            };
            if st.st_nlink == 0
                && (by_name || dev == Some(st.st_dev))
                && seen.insert((st.st_dev, st.st_ino))
            {
                total = total.saturating_add((st.st_blocks as u64).saturating_mul(512));
            }
        }
    }
    total
}

/// The files under `dirs` that the run unlinked and keeps only mapped (its
/// descriptors closed: [`unlinked_fds`] does not see them, and pages never
/// touched are not in its processes' counters), through their maps, each
/// file once with those in `seen`. None when the size of one cannot be read
/// (`/proc/PID/map_files` needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN).
fn unlinked_mapped(
    pids: &[libc::pid_t],
    dirs: &[PathBuf],
    seen: &mut std::collections::HashSet<(u64, u64)>,
) -> Option<u64> {
    let mut total = 0u64;
    for pid in pids {
        let Some(maps) = with_memory(*pid, "maps") else {
            continue;
        };
        for line in maps.lines() {
            // `START-END PERMS OFFSET MAJ:MIN INODE   PATH (deleted)`
            let Some(name) = line.strip_suffix(" (deleted)") else {
                continue;
            };
            let Some(name) = name.find('/').map(|at| &name[at..]) else {
                continue;
            };
            if !dirs.iter().any(|d| Path::new(name).starts_with(d)) {
                continue;
            }
            let mut fields = line.split_ascii_whitespace();
            let (Some(range), Some(dev), Some(ino)) = (fields.next(), fields.nth(2), fields.next())
            else {
                continue;
            };
            let id = dev.split_once(':').and_then(|(maj, min)| {
                let maj = u32::from_str_radix(maj, 16).ok()?;
                let min = u32::from_str_radix(min, 16).ok()?;
                Some((libc::makedev(maj, min), ino.parse::<u64>().ok()?))
            });
            let Some(id) = id else { continue };
            if seen.contains(&id) {
                continue;
            }
            let st =
                nix::sys::stat::stat(format!("/proc/{pid}/map_files/{range}").as_str()).ok()?;
            if seen.insert((st.st_dev, st.st_ino)) {
                seen.insert(id);
                total = total.saturating_add((st.st_blocks as u64).saturating_mul(512));
            }
        }
    }
    Some(total)
}

/// The processes below `init` (not init itself), through the kernel's
/// `/proc/PID/task/TID/children` lists: in a pid namespace every process of
/// the run descends from its init (orphans are reparented to it). At most
/// [`MAX_PROCESSES`]; None when a list cannot be read. With whether the
/// list is whole: false when a process listed ended before its own
/// children were listed (reparented to `init`, whose list was read before,
/// they are missed this time).
/// Only with `check` is that found out (every list read twice); without,
/// it says false.
fn descendants_whole(init: libc::pid_t, check: bool) -> Option<(Vec<libc::pid_t>, bool)> {
    let mut out = Vec::new();
    let mut whole = check;
    walk(init, &mut out, usize::MAX, &mut whole)?;
    Some((out, whole))
}

/// Add the processes below `top` to `out` (at most `depth` levels),
/// clearing `whole` when a process ended before its children were listed.
fn walk(
    top: libc::pid_t,
    out: &mut Vec<libc::pid_t>,
    depth: usize,
    whole: &mut bool,
) -> Option<()> {
    let mut queue = vec![(top, 0usize)];
    while let Some((pid, level)) = queue.pop() {
        if level >= depth {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            // Exited meanwhile (its children are reparented: seen next time).
            *whole = false;
            continue;
        };
        for t in tasks.flatten() {
            let path = t.path().join("children");
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !t.path().exists() => {
                    *whole = false;
                    continue;
                }
                Err(e) => {
                    tracing::warn!("memory watchdog: {}: {e}", path.display());
                    return None;
                }
            };
            for c in text.split_whitespace().filter_map(|c| c.parse().ok()) {
                if out.len() >= MAX_PROCESSES {
                    return None;
                }
                out.push(c);
                queue.push((c, level + 1));
            }
        }
    }
    // An orphan goes to a subreaper (the run's init or keeper, or a process
    // of the run that made itself one): one whose parent ended after the
    // subreaper's list was read and before its own was (then empty) is
    // missed. Every list is read again: a process there that was not
    // listed makes the census not whole.
    if *whole {
        let seen: std::collections::HashSet<libc::pid_t> = out.iter().copied().collect();
        for pid in std::iter::once(top).chain(out.iter().copied()) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for t in tasks.flatten() {
                let Ok(text) = std::fs::read_to_string(t.path().join("children")) else {
                    continue;
                };
                if text
                    .split_whitespace()
                    .filter_map(|c| c.parse::<libc::pid_t>().ok())
                    .any(|c| !seen.contains(&c))
                {
                    *whole = false;
                    return Some(());
                }
            }
        }
    }
    Some(())
}

/// What process `pid` of the procfs `dir` holds; Some(0) when it is gone,
/// None when it is there but unreadable.
fn process_bytes(dir: &str, pid: libc::pid_t) -> Option<u64> {
    match std::fs::read_to_string(format!("{dir}/{pid}/smaps_rollup")) {
        Ok(text) => Some(rollup_bytes(&text)),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            // No memory: gone, or a leader that exited alone while its other
            // threads hold the process's memory: theirs.
            for t in other_tasks(pid) {
                match std::fs::read_to_string(format!("{t}/smaps_rollup")) {
                    Ok(text) => return Some(rollup_bytes(&text)),
                    Err(e)
                        if e.raw_os_error() == Some(libc::ESRCH)
                            || e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => {
                        tracing::warn!("memory watchdog: cannot read the memory of {t}: {e}");
                        return None;
                    }
                }
            }
            Some(0)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Some(0),
        Err(e) => {
            // Gone between the listing and the read: fine; still there: fail closed.
            if Path::new(&format!("{dir}/{pid}")).exists() {
                tracing::warn!("memory watchdog: cannot read the memory of pid {pid}: {e}");
                None
            } else {
                Some(0)
            }
        }
    }
}

/// What one process holds, from its `smaps_rollup` (values in kB): its
/// proportional share of anonymous and shared memory, and hugetlb pages.
pub fn rollup_bytes(text: &str) -> u64 {
    let resident = if text.contains("Pss_Anon:") {
        // Locked: the pages of its mlock'd mappings, page cache too (a
        // file's pages, pinned and unevictable; counted twice where they
        // are anonymous or shmem: more, never less).
        kb_fields(text, &["Pss_Anon:", "Pss_Shmem:", "Locked:"])
    } else {
        // Before 5.14: all of Pss (file pages too: more, never less).
        kb_fields(text, &["Pss:"])
    };
    resident
        .saturating_add(kb_fields(text, &["Shared_Hugetlb:", "Private_Hugetlb:"]))
        .saturating_mul(1024)
}

/// The bytes allocated to the files under `dir` (not following links).
/// None: more than [`MAX_ENTRIES`] entries, or a directory or entry that
/// cannot be read (counts as over the limit, or as unknown for a grant).
fn tree_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    // What cannot be read counts as unknown: a directory the run made
    // unreadable (mode 000; Landlock has no hook for chmod) would hide its
    // files from an unprivileged capsule. What vanished meanwhile is gone.
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    while let Some(d) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if gone(&e) => continue,
            Err(e) => {
                tracing::warn!("memory watchdog: cannot read {}: {e}", d.display());
                return None;
            }
        };
        for e in rd {
            let e = match e {
                Ok(e) => e,
                Err(e) if gone(&e) => continue,
                Err(e) => {
                    tracing::warn!("memory watchdog: cannot read {}: {e}", d.display());
                    return None;
                }
            };
            seen += 1;
            if seen > MAX_ENTRIES {
                tracing::warn!(
                    "memory watchdog: more than {MAX_ENTRIES} entries in {}",
                    dir.display()
                );
                return None;
            }
            let md = match e.metadata() {
                Ok(md) => md,
                Err(err) if gone(&err) => continue,
                Err(err) => {
                    tracing::warn!("memory watchdog: cannot stat {}: {err}", e.path().display());
                    return None;
                }
            };
            total = total.saturating_add(md.blocks().saturating_mul(512));
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Some(total)
}

/// At most this share of a core for the watchdog (1 / N): after a sample
/// that cost T of its CPU it waits (N - 1) T, at least [`INTERVAL`].
const CPU_SHARE: u32 = 10;

/// The wait after a sample that cost `cost` of the thread's CPU. A run
/// decides much of a sample's cost (the entries of a TMPDIR on a host
/// tmpfs, walked every time; its processes and descriptors), and capsule is
/// outside every limit of the run: unpaced, 49000 empty files in the
/// TMPDIR kept it at 40% of a core while the run slept.
fn pause(cost: Duration) -> Duration {
    INTERVAL.max(cost.saturating_mul(CPU_SHARE - 1))
}

/// The running watchdog: dropping it stops the thread.
pub struct Watchdog {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Start sampling `w`; the first sample over the limit is sent on `over`
/// (the bytes held, `u64::MAX` when something could not be read), and the
/// thread ends.
pub fn start(w: Watch, over: tokio::sync::oneshot::Sender<u64>) -> std::io::Result<Watchdog> {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("capsule-memwatch".into())
        .spawn(move || {
            let _ = crate::sys::block_all_signals();
            loop {
                let before = crate::sys::thread_cpu_time();
                let held = sample(&w).unwrap_or(u64::MAX);
                let cost = before
                    .zip(crate::sys::thread_cpu_time())
                    .map_or(Duration::ZERO, |(a, b)| b.saturating_sub(a));
                if held > w.limit {
                    tracing::info!(
                        "memory watchdog: the run holds {} bytes, over memory_mb ({} bytes)",
                        held,
                        w.limit
                    );
                    let _ = over.send(held);
                    return;
                }
                match stop_rx.recv_timeout(pause(cost)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        })?;
    Ok(Watchdog {
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollup_counts_anonymous_shared_and_huge_pages() {
        let modern = "Rss: 9000 kB\nPss: 5000 kB\nPss_Anon: 100 kB\nPss_File: 4000 kB\n\
                      Pss_Shmem: 900 kB\nSwap: 10 kB\nShared_Hugetlb: 2048 kB\nPrivate_Hugetlb: 0 kB\n\
                      Locked: 8192 kB\n";
        assert_eq!(rollup_bytes(modern), (100 + 900 + 8192 + 2048) * 1024);
        // Before 5.14: all of Pss (file pages too: more, never less).
        let old = "Rss: 9000 kB\nPss: 5000 kB\nSwap: 0 kB\n";
        assert_eq!(rollup_bytes(old), 5000 * 1024);
        assert_eq!(rollup_bytes(""), 0);
    }

    #[test]
    fn threads_sharing_a_descriptor_table_are_read_once() {
        let me = std::process::id() as libc::pid_t;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<libc::pid_t>();
        let t = std::thread::spawn(move || {
            // /proc/thread-self names this thread.
            let tid = std::fs::read_link("/proc/thread-self")
                .ok()
                .and_then(|p| p.file_name()?.to_str()?.parse().ok())
                .unwrap_or(0);
            let _ = ready_tx.send(tid);
            let _ = rx.recv();
        });
        let tid = ready_rx.recv().unwrap();
        if crate::sys::same_fd_table(me, me).is_some() && tid > 0 {
            // The test harness's other threads come and go (one gone
            // between the listing and kcmp is read as its own table, which
            // costs a failed read); this thread shares the leader's table.
            let tables = fd_tables(me);
            assert_eq!(tables[0], PathBuf::from(format!("/proc/{me}/fd")));
            assert!(
                !tables.contains(&PathBuf::from(format!("/proc/{me}/task/{tid}/fd"))),
                "{tables:?}"
            );
        }
        drop(tx);
        t.join().unwrap();
    }

    #[test]
    fn an_unreadable_table_is_told_by_the_tasks_state() {
        let alive = "Name:\tpython3\nState:\tS (sleeping)\nFDSize:\t64\nVmSize:\t  1000 kB\n";
        assert_eq!(table_from_status(alive), Table::Hidden);
        let exiting = "Name:\tpython3\nState:\tR (running)\nFDSize:\t64\n";
        assert_eq!(table_from_status(exiting), Table::Exiting);
        let zombie = "Name:\tpython3\nState:\tZ (zombie)\nFDSize:\t0\n";
        assert_eq!(table_from_status(zombie), Table::Gone);
        let dead = "Name:\tpython3\nState:\tX (dead)\n";
        assert_eq!(table_from_status(dead), Table::Gone);
        assert_eq!(
            unreadable_table(Path::new("/proc/self/task/0")),
            Table::Gone
        );
        // This process: alive, with memory.
        assert_eq!(unreadable_table(Path::new("/proc/self")), Table::Hidden);
        // A child that exited and is not reaped yet: a zombie.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let task = PathBuf::from(format!("/proc/{}", child.id()));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while unreadable_table(&task) != Table::Gone && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(unreadable_table(&task), Table::Gone);
        child.wait().unwrap();
    }

    #[test]
    fn a_tmpdir_on_a_host_tmpfs_counts_with_its_file_system() {
        let Ok(dir) = tempfile::Builder::new()
            .prefix("capsule-memwatch-unit.")
            .tempdir_in("/dev/shm")
        else {
            eprintln!("skipped: no writable /dev/shm");
            return;
        };
        let t = dir.path().join("tmpdir");
        std::fs::create_dir(&t).unwrap();
        let g = Grown::new(&crate::sandbox::TmpfsGroup {
            grants: Vec::new(),
            tmpdir: Some(t.clone()),
            tmpdir_alias: Some("/tmp".into()),
        });
        assert_eq!(g.on(), Some(t.as_path()));
        assert!(g.unlinked_in.contains(&t) && g.unlinked_in.contains(&PathBuf::from("/tmp")));
        std::fs::write(t.join("f"), vec![1u8; 1 << 20]).unwrap();
        // All of the TMPDIR's files are the run's; never more than the quick bound.
        assert!(g.refined(u64::MAX, &[]).expect("walked") >= 1 << 20);
        assert_eq!(g.refined(4096, &[]), Some(4096));
        // A TMPDIR that cannot be walked (here: no directory) is over the limit.
        std::fs::remove_file(t.join("f")).unwrap();
        std::fs::remove_dir(&t).unwrap();
        std::fs::write(&t, b"").unwrap();
        assert_eq!(g.refined(u64::MAX, &[]), None);
    }

    #[test]
    fn this_process_is_counted_and_a_tree_is_walked() {
        let me = std::fs::read_to_string("/proc/self/smaps_rollup").expect("rollup");
        assert!(rollup_bytes(&me) > 0);
        // The quick bound is never below the proportional share, read at
        // the same moment: the harness's other threads allocate and free
        // megabytes between two reads, so a few tries.
        let holds = (0..20).any(|_| {
            let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").expect("rollup");
            let quick = status_bytes(std::process::id() as libc::pid_t);
            quick >= rollup_bytes(&rollup) / 2
        });
        assert!(holds, "status below half the rollup in 20 reads");
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), vec![1u8; 1 << 20]).unwrap();
        assert!(tree_bytes(dir.path()).expect("walked") >= 1 << 20);
    }
}

//! Signal isolation by seccomp user notification: the supervisor's side.
//!
//! Where the run has no pid namespace and Landlock has no signal scope (ABI
//! below 6), the command stage installs the signal filter
//! (`sandbox::seccomp::signals`) and hands its listener over the channel
//! ([`LISTENER_TAG`]). A dedicated thread serves it ([`Guard`]): each
//! kill/tkill/tgkill/rt_sigqueueinfo/rt_tgsigqueueinfo and F_SETOWN of the
//! run waits until the thread has checked that the target is a process of
//! the run, then continues as made (CONTINUE) or fails with EPERM. The
//! thread never blocks the event loop, and the work per call is bounded: a
//! walk up the parent chain of at most [`MAX_HOPS`] `/proc/PID/stat`
//! reads, and for a process group whose leader has exited a scan of at most
//! [`MAX_SCAN`] `/proc` entries. If the thread or the listener fails, the
//! descriptor closes and the kernel fails every notified call with ENOSYS:
//! closed, never open.
//!
//! Who is "of the run": the command stage made a session of its own
//! (setsid) before it was filtered, so the run's processes are exactly the
//! descendants of the command — the members of the command's session, and of
//! sessions its descendants made. Since a process can only join a session by
//! being forked inside it, and a process group lives in one session:
//! * a process in the command's session is of the run (while the command's
//!   pid is still the command's: checked by its start time);
//! * a process in capsule's own session is not (tool processes, the
//!   terminal watchdog, whatever capsule's caller started);
//! * otherwise the parent chain decides: reaching the command means of the
//!   run; reaching pid 1 or another process outside means not. Without a pid
//!   namespace the keeper between capsule and the command
//!   (`sandbox::child::keeper_main`) is the run's child subreaper, so a
//!   daemon of the run whose parent exited is reparented to it: every child
//!   of the keeper is of the run (it makes none but the command), the keeper
//!   itself is not (while its pid is the keeper's: checked by its start
//!   time). Should the keeper be gone, capsule (a child subreaper too)
//!   inherits them: a child of capsule that is
//!   not the command, not one capsule had before the run, and in a session of
//!   its own counts as of the run when it carries the run's marks —
//!   no_new_privs and at least as many seccomp filters as the command
//!   (capsule's own plus the run's two). A host process meeting all of that
//!   (an orphan of a tool, in a session of its own, running under two more
//!   seccomp filters than capsule) is the one case this cannot tell apart.
//! * kill(-pgid) and F_SETOWN(-pgid): the group's leader, or when it has
//!   exited any member, decides for the whole group (one session).
//!
//! Residual race: between the check and the kernel acting on CONTINUE the
//! target can exit and its pid be reused by a new process of the host; the
//! signal then reaches that process. Reuse needs the pid counter to wrap
//! around to that exact number in between, and only a process started after
//! the check can be hit (capsule itself never: its pid is held). F_SETOWN
//! pins the owner's `struct pid` when it runs, so a later reuse cannot
//! redirect SIGIO.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::sandbox::seccomp::signals as filter;
use crate::sys::notify::{Listener, Notification, Reply};

pub use crate::sandbox::seccomp::signals::LISTENER_TAG;

/// The longest parent chain walked for one call.
pub const MAX_HOPS: usize = 1024;
/// The most `/proc` entries scanned for a member of a leaderless group.
pub const MAX_SCAN: usize = 100_000;

type Pid = libc::pid_t;

/// What the guard knows about the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub supervisor: Pid,
    pub supervisor_session: Pid,
    /// The command and its start time.
    pub child: Pid,
    pub child_start: u64,
    /// The keeper (no pid namespace: capsule's child, the command's parent)
    /// and its start time.
    pub keeper: Option<(Pid, u64)>,
    /// Children capsule had before the run: never of the run.
    pub inherited: Vec<Pid>,
    /// The fewest seccomp filters a process of the run can have.
    pub tree_filters: u32,
}

impl Tree {
    /// The run of `child` (the command, not yet reaped), under `keeper`
    /// when there is one. None when `/proc` does not show this process as
    /// itself (another pid namespace's /proc): then no decision could be sound.
    pub fn for_run(child: Pid, keeper: Option<Pid>, inherited: &[Pid]) -> Option<Tree> {
        let me = nix::unistd::getpid().as_raw();
        let own = std::fs::read_link("/proc/self").ok()?;
        if own.to_str()?.parse::<Pid>().ok()? != me {
            return None;
        }
        let procs = ProcFs;
        let child_start = procs.stat(child)?.start;
        let keeper = match keeper {
            Some(k) => Some((k, procs.stat(k)?.start)),
            None => None,
        };
        let filters = procs.status(me)?.seccomp_filters.unwrap_or(0);
        Some(Tree {
            supervisor: me,
            supervisor_session: nix::unistd::getsid(None).ok()?.as_raw(),
            child,
            child_start,
            keeper,
            inherited: inherited.to_vec(),
            tree_filters: filters + 2,
        })
    }
}

/// The fields of `/proc/PID/stat` the guard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ppid: Pid,
    pub pgrp: Pid,
    pub session: Pid,
    pub start: u64,
}

/// The fields of `/proc/PID/status` the guard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub no_new_privs: bool,
    /// `Seccomp_filters:` (Linux 5.9+).
    pub seccomp_filters: Option<u32>,
}

/// Where process facts come from: `/proc`, or a table in the tests.
pub trait Procs {
    fn stat(&self, pid: Pid) -> Option<Stat>;
    fn status(&self, pid: Pid) -> Option<Status>;
    /// Some process whose process group is `pgid` (at most [`MAX_SCAN`] looked at).
    fn group_member(&self, pgid: Pid) -> Option<Pid>;
}

/// The real `/proc`.
pub struct ProcFs;

/// Parse `/proc/PID/stat`: `pid (comm) state ppid pgrp session ... starttime`
/// (comm may hold spaces and parentheses: the fields follow the last ')').
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().take(20).collect();
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

/// Parse `/proc/PID/status` for NoNewPrivs and Seccomp_filters.
pub fn parse_status(text: &str) -> Status {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    Status {
        no_new_privs: field("NoNewPrivs:") == Some(1),
        seccomp_filters: field("Seccomp_filters:"),
    }
}

impl Procs for ProcFs {
    fn stat(&self, pid: Pid) -> Option<Stat> {
        parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }
    fn status(&self, pid: Pid) -> Option<Status> {
        Some(parse_status(
            &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        ))
    }
    fn group_member(&self, pgid: Pid) -> Option<Pid> {
        let dir = std::fs::read_dir("/proc").ok()?;
        for entry in dir.take(MAX_SCAN).flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<Pid>().ok())
            else {
                continue;
            };
            if self.stat(pid).is_some_and(|s| s.pgrp == pgid) {
                return Some(pid);
            }
        }
        None
    }
}

/// Decides notifications for one run.
pub struct Judge<'a, P: Procs> {
    pub tree: &'a Tree,
    pub procs: P,
}

/// AUDIT_ARCH of this build (the filter kills every other one).
const NATIVE_ARCH: u32 = if cfg!(target_arch = "aarch64") {
    183 | 0xc000_0000
} else {
    62 | 0xc000_0000
};

impl<P: Procs> Judge<'_, P> {
    /// Whether the command still holds its pid (alive or not yet reaped).
    fn child_is_ours(&self) -> bool {
        self.procs
            .stat(self.tree.child)
            .is_some_and(|s| s.start == self.tree.child_start)
    }

    /// Whether the process (or thread) `target` belongs to the run.
    pub fn in_tree(&self, target: Pid) -> bool {
        let t = self.tree;
        if target <= 0 || target == t.supervisor || t.keeper.is_some_and(|(k, _)| k == target) {
            return false;
        }
        let mut cur = target;
        let Some(mut st) = self.procs.stat(cur) else {
            return false;
        };
        for _ in 0..MAX_HOPS {
            if cur == t.child {
                return st.start == t.child_start;
            }
            if st.session == t.child {
                return self.child_is_ours();
            }
            if st.session == t.supervisor_session {
                return false;
            }
            if let Some((keeper, start)) = t.keeper {
                if st.ppid == keeper {
                    return self.procs.stat(keeper).is_some_and(|k| k.start == start);
                }
            }
            if st.ppid == t.supervisor {
                return self.orphan_of_run(cur);
            }
            if st.ppid <= 1 {
                return false;
            }
            match self.procs.stat(st.ppid) {
                Some(parent) => {
                    cur = st.ppid;
                    st = parent;
                }
                // The parent just exited: `cur` is being reparented; look again.
                None => match self.procs.stat(cur) {
                    Some(again) if again.ppid != st.ppid => st = again,
                    _ => return false,
                },
            }
        }
        false
    }

    /// A child of capsule that is not the command and not in the command's
    /// session: of the run only if it carries the run's marks.
    fn orphan_of_run(&self, pid: Pid) -> bool {
        if self.tree.inherited.contains(&pid) {
            return false;
        }
        self.procs.status(pid).is_some_and(|s| {
            s.no_new_privs
                && s.seccomp_filters
                    .is_some_and(|n| n >= self.tree.tree_filters)
        })
    }

    /// Whether process group `pgid` is the run's; None: no such group.
    pub fn group_in_tree(&self, pgid: Pid) -> Option<bool> {
        if pgid <= 0 {
            return Some(false);
        }
        // A group is named after the process that made it, and while the
        // group lives no other process can get that pid: a live process with
        // that pid is the maker, and the group lives in a session it was in.
        if self.procs.stat(pgid).is_some() {
            return Some(self.in_tree(pgid));
        }
        self.procs.group_member(pgid).map(|m| self.in_tree(m))
    }

    fn target(&self, pid: Pid) -> Reply {
        if self.in_tree(pid) {
            Reply::Continue
        } else {
            Reply::Fail(libc::EPERM)
        }
    }

    fn group(&self, pgid: Pid) -> Reply {
        match self.group_in_tree(pgid) {
            Some(true) => Reply::Continue,
            Some(false) => Reply::Fail(libc::EPERM),
            None => Reply::Fail(libc::ESRCH),
        }
    }

    /// The answer to one notification.
    pub fn decide(&self, n: &Notification) -> Reply {
        if n.arch != NATIVE_ARCH {
            return Reply::Fail(libc::EPERM);
        }
        // pid_t and int arguments: the kernel reads the low 32 bits.
        let arg = |i: usize| n.args[i] as u32 as i32;
        let nr = i64::from(n.nr);
        if nr == libc::SYS_kill {
            match arg(0) {
                0 => Reply::Continue,
                -1 => Reply::Fail(libc::EPERM),
                i32::MIN => Reply::Fail(libc::ESRCH),
                p if p > 0 => self.target(p),
                p => self.group(-p),
            }
        } else if nr == libc::SYS_tkill {
            match arg(0) {
                p if p > 0 => self.target(p),
                _ => Reply::Fail(libc::EINVAL),
            }
        } else if nr == libc::SYS_tgkill || nr == libc::SYS_rt_tgsigqueueinfo {
            match (arg(0), arg(1)) {
                (p, t) if p > 0 && t > 0 => self.target(p),
                _ => Reply::Fail(libc::EINVAL),
            }
        } else if nr == libc::SYS_rt_sigqueueinfo {
            match arg(0) {
                p if p > 0 => self.target(p),
                _ => Reply::Fail(libc::ESRCH),
            }
        } else if nr == libc::SYS_fcntl && arg(1) as u32 == filter::F_SETOWN {
            match arg(2) {
                0 => Reply::Continue,
                i32::MIN => Reply::Fail(libc::EINVAL),
                p if p > 0 => self.target(p),
                p => self.group(-p),
            }
        } else {
            Reply::Fail(libc::EPERM)
        }
    }
}

/// The CPU time the guards may spend serving one run's notified calls.
///
/// Every notified call costs capsule work (a parent-chain walk, a `/proc`
/// scan for a leaderless group, a census of the run's tasks per fork, a
/// connect thread), on capsule's CPU, outside every limit of the run; a run
/// that signals or forks in a loop would keep capsule busy on a core for as
/// long as it runs. So the guards count as one more process of the run: they
/// may use no more CPU time than one process of the run may (`cpu_seconds`,
/// RLIMIT_CPU), and no more than a tenth of a core over the wall-clock limit;
/// at least one second. Past it the run is killed (`kill_reason` names the
/// budget); calls that arrive meanwhile are refused without any work.
pub fn cpu_budget(timeout: Duration, cpu_seconds: Option<u64>) -> Duration {
    let mut b = timeout / 10;
    if let Some(c) = cpu_seconds {
        b = b.min(Duration::from_secs(c));
    }
    b.max(Duration::from_secs(1))
}

/// What the guard thread tells the event loop: its CPU budget is spent.
pub type Exhausted = std::sync::Arc<tokio::sync::Notify>;

/// The thread serving the run's listener: the signal checks, the network
/// guard, or both (one notify filter, one listener).
pub struct Guard {
    stop: OwnedFd,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

/// The parts one guard thread serves, and what bounds it.
pub struct Parts {
    pub tree: Option<Tree>,
    pub net: Option<super::netguard::NetGuard>,
    pub procs: Option<super::procguard::ProcGuard>,
    pub memfd: Option<super::memfdguard::MemfdGuard>,
    pub meta: Option<super::metaguard::MetaGuard>,
    /// `exec --explain`: the path observer (always CONTINUE).
    pub observe: Option<super::explain::Observer>,
    /// The thread's CPU budget ([`cpu_budget`]) and whom to tell when it is spent.
    pub budget: Duration,
    pub exhausted: Exhausted,
}

/// Serve `listener` on a thread of its own: signal calls are judged against
/// `tree`, connect/listen by `net`, clone/fork/vfork by `procs`,
/// memfd_create by the memfd guard with `memfd` (each refused without its judge).
pub fn start(listener: OwnedFd, parts: Parts) -> std::io::Result<Guard> {
    let listener = std::sync::Arc::new(Listener::new(listener)?);
    let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let thread = std::thread::Builder::new()
        .name("capsule-guard".into())
        .spawn(move || serve(&listener, &stop_r, parts))?;
    Ok(Guard {
        stop: stop_w,
        thread,
    })
}

impl Guard {
    pub fn stop(self) {
        drop(self.stop);
        match self.thread.join() {
            Ok((allowed, refused)) => {
                tracing::debug!("guard: {allowed} calls let through or made, {refused} refused")
            }
            Err(_) => tracing::warn!("guard: the thread panicked"),
        }
    }
}

fn serve(listener: &std::sync::Arc<Listener>, stop: &OwnedFd, parts: Parts) -> (u64, u64) {
    use super::netguard::{self, Action, NetGuard};
    use super::procguard::ProcGuard;
    let Parts {
        tree,
        net,
        mut procs,
        memfd,
        meta,
        observe,
        budget,
        exhausted,
    } = parts;
    // Signals for capsule go to the event loop's thread, never here.
    let _ = crate::sys::block_all_signals();
    let judge = tree.as_ref().map(|tree| Judge {
        tree,
        procs: ProcFs,
    });
    // Spent: every call is refused at once, until the event loop has killed the run.
    let mut spent = false;
    let threads = std::sync::Arc::new(netguard::Threads::default());
    let (mut allowed, mut refused) = (0u64, 0u64);
    // The path observer's CPU time (`exec --explain`), not counted in the budget.
    let mut observed_cpu = Duration::ZERO;
    loop {
        // With the observer: this iteration's CPU time, for when it serves an
        // observed call (poll, receive, read, answer).
        let iter_start = observe.as_ref().and_then(|_| crate::sys::thread_cpu_time());
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!("guard: poll: {e}");
                break;
            }
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            break;
        }
        let ev = fds[0].revents().unwrap_or(PollFlags::empty());
        if ev.contains(PollFlags::POLLIN) {
            let n = match listener.recv() {
                Ok(n) => n,
                // The caller went away before we could receive it.
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    tracing::warn!("guard: receiving a notification: {e}");
                    break;
                }
            };
            // This thread's time and the ended connect threads', less the
            // observer's (`--explain` never kills a run for being observed).
            let used = crate::sys::thread_cpu_time().map(|t| {
                (t + Duration::from_nanos(
                    threads.cpu_nanos.load(std::sync::atomic::Ordering::Relaxed),
                ))
                .saturating_sub(observed_cpu)
            });
            if !spent && used.is_none_or(|t| t > budget) {
                spent = true;
                tracing::warn!(
                    "guard: {:.1} s of capsule's CPU spent on the run's checked calls: budget spent, the run is killed",
                    budget.as_secs_f64()
                );
                exhausted.notify_one();
            }
            let action = if spent {
                let errno = if ProcGuard::handles(n.nr) {
                    libc::EAGAIN
                } else {
                    libc::EPERM
                };
                Action::Reply(Reply::Fail(errno))
            } else if super::metaguard::MetaGuard::handles(n.nr) {
                match &meta {
                    Some(g) => Action::Reply(g.serve(listener, &n)),
                    None => Action::Reply(Reply::Fail(libc::EPERM)),
                }
            } else if super::explain::Observer::handles(n.nr) {
                // Only explains: the kernel decides as usual.
                match &observe {
                    Some(o) => Action::Reply(o.serve(listener, &n)),
                    None => Action::Reply(Reply::Continue),
                }
            } else if super::memfdguard::handles(n.nr) {
                match &memfd {
                    Some(g) => super::memfdguard::serve(listener, &n, g),
                    None => Action::Reply(Reply::Fail(libc::EPERM)),
                }
            } else if NetGuard::handles(n.nr) {
                match &net {
                    Some(g) => g.decide(listener, &n),
                    None => Action::Reply(Reply::Fail(libc::EPERM)),
                }
            } else if ProcGuard::handles(n.nr) {
                match &mut procs {
                    Some(p) => Action::Reply(p.decide(&n)),
                    None => Action::Reply(Reply::Fail(libc::EAGAIN)),
                }
            } else {
                match (&judge, &observe) {
                    (Some(j), o) => {
                        let reply = j.decide(&n);
                        if let (Some(o), Reply::Fail(_)) = (o, &reply) {
                            o.refused_signal(&n);
                        }
                        Action::Reply(reply)
                    }
                    // No signal checks here (a pid namespace or Landlock's
                    // scope decides): the observer only records.
                    (None, Some(o)) => Action::Reply(o.serve_signal(listener, &n)),
                    (None, None) => Action::Reply(Reply::Fail(libc::EPERM)),
                }
            };
            let reply = match action {
                Action::Connect(conn) => {
                    allowed += 1;
                    netguard::serve_connect(listener, n.id, conn, &threads);
                    continue;
                }
                Action::Answered => {
                    allowed += 1;
                    continue;
                }
                Action::Reply(r) => r,
            };
            if matches!(reply, Reply::Continue | Reply::Value(_)) {
                allowed += 1;
            } else {
                refused += 1;
                tracing::debug!(
                    "guard: refused syscall {} of pid {} (args {:?}): {:?}",
                    n.nr,
                    n.pid,
                    &n.args[..3],
                    reply
                );
            }
            // The /proc reads are done: a caller that is gone meanwhile needs no answer.
            if listener.id_valid(n.id) {
                match listener.reply(n.id, reply) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(e) => {
                        // CONTINUE refused (a kernel before 5.5): refuse the call.
                        tracing::warn!("guard: answering: {e}");
                        let _ = listener.reply(n.id, Reply::Fail(libc::EPERM));
                    }
                }
            }
            if observe.is_some() && super::explain::Observer::handles(n.nr) {
                if let (Some(a), Some(b)) = (iter_start, crate::sys::thread_cpu_time()) {
                    observed_cpu += b.saturating_sub(a);
                }
            }
        } else if ev.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
            // No process uses the filter any more.
            break;
        }
    }
    (allowed, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A process table: pid -> (ppid, pgrp, session, start, nnp, filters).
    struct Table(BTreeMap<Pid, (Pid, Pid, Pid, u64, bool, u32)>);

    impl Procs for Table {
        fn stat(&self, pid: Pid) -> Option<Stat> {
            self.0
                .get(&pid)
                .map(|&(ppid, pgrp, session, start, _, _)| Stat {
                    ppid,
                    pgrp,
                    session,
                    start,
                })
        }
        fn status(&self, pid: Pid) -> Option<Status> {
            self.0.get(&pid).map(|&(_, _, _, _, nnp, n)| Status {
                no_new_privs: nnp,
                seccomp_filters: Some(n),
            })
        }
        fn group_member(&self, pgid: Pid) -> Option<Pid> {
            self.0
                .iter()
                .find(|(_, v)| v.1 == pgid)
                .map(|(pid, _)| *pid)
        }
    }

    const SUP: Pid = 100;
    const SUP_SID: Pid = 90;
    const CHILD: Pid = 200;

    fn tree() -> Tree {
        Tree {
            supervisor: SUP,
            supervisor_session: SUP_SID,
            child: CHILD,
            child_start: 5000,
            keeper: None,
            inherited: vec![150],
            tree_filters: 3,
        }
    }

    const KEEPER: Pid = 110;

    /// The no-namespace path: capsule (100) -> keeper (110) -> command (200);
    /// the run's orphans are the keeper's children.
    #[test]
    fn under_a_keeper_its_children_are_the_run_and_it_is_not() {
        let t = Tree {
            keeper: Some((KEEPER, 4000)),
            ..tree()
        };
        let mut h = host();
        h.0.insert(KEEPER, (SUP, SUP_SID, SUP_SID, 4000, false, 1));
        h.0.insert(CHILD, (KEEPER, CHILD, CHILD, 5000, true, 3));
        // A setsid'd orphan of the run, reparented to the keeper, and its child.
        h.0.insert(210, (KEEPER, 210, 210, 5010, true, 3));
        h.0.insert(211, (210, 210, 210, 5011, true, 3));
        // Even without the run's marks (the keeper makes no other child).
        h.0.insert(212, (KEEPER, 212, 212, 5012, false, 0));
        let j = judge(&t, h);
        for pid in [CHILD, 201, 202, 203, 210, 211, 212] {
            assert!(j.in_tree(pid), "{pid} is of the run");
        }
        for pid in [KEEPER, SUP, 90, 150, 300, 301, 400, 500] {
            assert!(!j.in_tree(pid), "{pid} is not of the run");
        }
        assert_eq!(j.group_in_tree(SUP_SID), Some(false));
        // The keeper's pid reused by another process: its children are not the run's.
        let mut h = host();
        h.0.insert(KEEPER, (1, KEEPER, KEEPER, 9999, false, 0));
        h.0.insert(210, (KEEPER, 210, 210, 5010, true, 3));
        let j = judge(&t, h);
        assert!(!j.in_tree(210));
    }

    /// A host with capsule (100) in the caller's session 90, the command 200
    /// in its own session, and processes around them.
    fn host() -> Table {
        let mut t = BTreeMap::new();
        t.insert(1, (0, 1, 1, 1, false, 0));
        t.insert(90, (1, 90, 90, 10, false, 1)); // the shell that ran capsule
        t.insert(SUP, (90, 90, SUP_SID, 20, false, 1));
        t.insert(150, (SUP, 150, 150, 30, false, 1)); // inherited, own session
        t.insert(CHILD, (SUP, CHILD, CHILD, 5000, true, 3));
        t.insert(201, (CHILD, CHILD, CHILD, 5001, true, 3)); // child of the command
        t.insert(202, (201, 202, 202, 5002, true, 3)); // setsid'd grandchild
        t.insert(203, (202, 202, 202, 5003, true, 4)); // in 202's session
        t.insert(204, (SUP, 204, 204, 5004, true, 3)); // daemon reparented to capsule
        t.insert(205, (204, 205, 205, 5005, true, 3)); // its child, own session
        t.insert(206, (SUP, CHILD, CHILD, 5006, true, 3)); // orphan in the command's session
        t.insert(300, (SUP, 300, SUP_SID, 6000, false, 1)); // a tool process
        t.insert(301, (SUP, 301, 301, 6001, false, 1)); // a tool's setsid'd orphan
        t.insert(302, (SUP, 302, 302, 6002, true, 2)); // same, NNP but fewer filters
        t.insert(400, (1, 400, 400, 7000, false, 0)); // a host daemon
        t.insert(401, (400, 400, 400, 7001, true, 5)); // its NNP child with filters
        t.insert(500, (1, 500, 500, 7500, true, 3)); // reparented to init, run-like marks
        Table(t)
    }

    fn judge(t: &Tree, p: Table) -> Judge<'_, Table> {
        Judge { tree: t, procs: p }
    }

    #[test]
    fn the_run_and_only_the_run_is_in_the_tree() {
        let t = tree();
        let j = judge(&t, host());
        for pid in [CHILD, 201, 202, 203, 204, 205, 206] {
            assert!(j.in_tree(pid), "{pid} is of the run");
        }
        for pid in [0, -1, 1, 90, SUP, 150, 300, 301, 302, 400, 401, 500, 999] {
            assert!(!j.in_tree(pid), "{pid} is not of the run");
        }
    }

    #[test]
    fn a_reused_command_pid_is_not_the_command() {
        let t = tree();
        let mut h = host();
        // The command exited and was reaped; its pid now names a host process.
        h.0.insert(CHILD, (1, CHILD, CHILD, 9999, false, 0));
        let j = judge(&t, h);
        assert!(!j.in_tree(CHILD));
        // Its old session is no longer trusted either.
        assert!(!j.in_tree(201));
        assert!(!j.in_tree(206));
    }

    #[test]
    fn groups() {
        let t = tree();
        let j = judge(&t, host());
        assert_eq!(j.group_in_tree(CHILD), Some(true));
        assert_eq!(j.group_in_tree(202), Some(true));
        assert_eq!(j.group_in_tree(SUP_SID), Some(false));
        assert_eq!(j.group_in_tree(400), Some(false));
        assert_eq!(j.group_in_tree(777), None);
        // A group whose leader exited: a member decides.
        let mut h = host();
        h.0.remove(&202);
        h.0.insert(203, (SUP, 202, 202, 5003, true, 4));
        let j = judge(&t, h);
        assert_eq!(j.group_in_tree(202), Some(true));
        let mut h = host();
        h.0.remove(&400);
        h.0.insert(401, (1, 400, 400, 7001, true, 5));
        let j = judge(&t, h);
        assert_eq!(j.group_in_tree(400), Some(false));
    }

    fn notif(name: i64, args: &[i64]) -> Notification {
        let mut a = [0u64; 6];
        for (i, v) in args.iter().enumerate() {
            a[i] = *v as u64;
        }
        Notification {
            id: 1,
            pid: 201,
            nr: name as i32,
            arch: NATIVE_ARCH,
            args: a,
        }
    }

    #[test]
    fn decisions() {
        let t = tree();
        let j = judge(&t, host());
        let go = |nr: i64, args: &[i64]| j.decide(&notif(nr, args));
        let (ok, eperm) = (Reply::Continue, Reply::Fail(libc::EPERM));
        assert_eq!(go(libc::SYS_kill, &[201, 9]), ok);
        assert_eq!(go(libc::SYS_kill, &[SUP as i64, 0]), eperm);
        assert_eq!(go(libc::SYS_kill, &[90, 19]), eperm);
        assert_eq!(go(libc::SYS_kill, &[0, 9]), ok);
        assert_eq!(go(libc::SYS_kill, &[-1, 9]), eperm);
        assert_eq!(go(libc::SYS_kill, &[0xffff_ffff, 9]), eperm);
        assert_eq!(go(libc::SYS_kill, &[-(CHILD as i64), 15]), ok);
        assert_eq!(go(libc::SYS_kill, &[-(SUP_SID as i64), 0]), eperm);
        assert_eq!(go(libc::SYS_kill, &[-777, 0]), Reply::Fail(libc::ESRCH));
        assert_eq!(
            go(libc::SYS_kill, &[i64::from(i32::MIN), 9]),
            Reply::Fail(libc::ESRCH)
        );
        // The high word of a pid_t is ignored, as by the kernel.
        assert_eq!(go(libc::SYS_kill, &[(1 << 32) | SUP as i64, 9]), eperm);
        assert_eq!(go(libc::SYS_kill, &[(1 << 32) | 201, 9]), ok);
        assert_eq!(go(libc::SYS_tkill, &[203, 9]), ok);
        assert_eq!(go(libc::SYS_tkill, &[SUP as i64, 19]), eperm);
        assert_eq!(go(libc::SYS_tkill, &[0, 9]), Reply::Fail(libc::EINVAL));
        assert_eq!(go(libc::SYS_tgkill, &[201, 201, 9]), ok);
        assert_eq!(go(libc::SYS_tgkill, &[SUP as i64, 201, 9]), eperm);
        assert_eq!(
            go(libc::SYS_tgkill, &[201, -1, 9]),
            Reply::Fail(libc::EINVAL)
        );
        assert_eq!(go(libc::SYS_rt_sigqueueinfo, &[204, 10, 0x1000]), ok);
        assert_eq!(go(libc::SYS_rt_sigqueueinfo, &[400, 10, 0x1000]), eperm);
        assert_eq!(go(libc::SYS_rt_tgsigqueueinfo, &[205, 205, 10, 0x1000]), ok);
        assert_eq!(
            go(libc::SYS_rt_tgsigqueueinfo, &[301, 301, 10, 0x1000]),
            eperm
        );
        let setown = i64::from(filter::F_SETOWN);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, 201]), ok);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, 0]), ok);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, SUP as i64]), eperm);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, -(CHILD as i64)]), ok);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, -(SUP_SID as i64)]), eperm);
        // Nothing else is expected from the filter.
        assert_eq!(go(libc::SYS_fcntl, &[3, 4, 201]), eperm);
        assert_eq!(go(libc::SYS_getpid, &[]), eperm);
        let mut foreign = notif(libc::SYS_kill, &[201, 9]);
        foreign.arch = 3 | 0x4000_0000;
        assert_eq!(j.decide(&foreign), eperm);
    }

    #[test]
    fn a_looping_or_vanishing_chain_is_refused() {
        let t = tree();
        let mut h = host();
        // A cycle (impossible in a kernel, possible across pid reuse reads).
        h.0.insert(600, (601, 600, 600, 1, false, 0));
        h.0.insert(601, (600, 601, 601, 1, false, 0));
        // A parent that vanished, the child not yet reparented.
        h.0.insert(602, (603, 602, 602, 1, true, 3));
        let j = judge(&t, h);
        assert!(!j.in_tree(600));
        assert!(!j.in_tree(602));
    }

    #[test]
    fn the_cpu_budget_is_a_tenth_of_the_timeout_at_most_cpu_seconds_at_least_a_second() {
        let s = Duration::from_secs;
        assert_eq!(cpu_budget(s(600), None), s(60));
        assert_eq!(cpu_budget(s(600), Some(30)), s(30));
        assert_eq!(cpu_budget(s(20), Some(300)), s(2));
        assert_eq!(cpu_budget(s(3), None), s(1));
        assert_eq!(cpu_budget(s(600), Some(0)), s(1));
    }

    #[test]
    fn proc_parsing() {
        let s = parse_stat(
            "1234 (a (weird) name) S 1 1234 1234 34816 1234 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 2 3",
        )
        .unwrap();
        assert_eq!(
            s,
            Stat {
                ppid: 1,
                pgrp: 1234,
                session: 1234,
                start: 98765
            }
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        let st = parse_status("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n");
        assert!(st.no_new_privs);
        assert_eq!(st.seccomp_filters, Some(3));
        let st = parse_status("NoNewPrivs:\t0\nSeccomp:\t0\n");
        assert!(!st.no_new_privs);
        assert_eq!(st.seccomp_filters, None);
        // This process, read for real.
        let me = nix::unistd::getpid().as_raw();
        let mine = ProcFs.stat(me).unwrap();
        assert_eq!(mine.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(mine.pgrp, nix::unistd::getpgrp().as_raw());
    }
}

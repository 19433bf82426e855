//! The notify loop: one thread serves the run's seccomp listener, hands
//! each notified call to the part that owns its system call (signals,
//! network, processes, memfd, metadata; the path observer of
//! `exec --explain`), answers it, and holds the guards to their CPU budget
//! ([`cpu_budget`]). If the thread or the listener fails, the descriptor
//! closes and the kernel fails every notified call with ENOSYS: closed,
//! never open.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::judge::{Judge, Tree};
use super::procfs::ProcFs;
use crate::sys::notify::{Listener, Notification, Reply};

pub use crate::sandbox::seccomp::signals::LISTENER_TAG;

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
    pub net: Option<super::network::NetGuard>,
    pub procs: Option<super::processes::ProcGuard>,
    pub memfd: Option<super::memfd::MemfdGuard>,
    pub meta: Option<super::metadata::MetaGuard>,
    /// `exec --explain`: the path observer (always CONTINUE).
    pub observe: Option<super::observer::Observer>,
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

/// The parts the guard thread hands calls to.
struct Served<'a> {
    judge: Option<Judge<'a, ProcFs>>,
    net: Option<super::network::NetGuard>,
    procs: Option<super::processes::ProcGuard>,
    memfd: Option<super::memfd::MemfdGuard>,
    meta: Option<super::metadata::MetaGuard>,
    observe: Option<super::observer::Observer>,
}

impl Served<'_> {
    /// Whether call `nr` is the observer's work alone (a path call, or a
    /// signal call no judge decides): its time never counts toward the kill.
    fn observer_only(&self, nr: i32) -> bool {
        use super::network::NetGuard;
        use super::processes::ProcGuard;
        self.observe.is_some()
            && !super::metadata::MetaGuard::handles(nr)
            && (super::observer::Observer::handles(nr)
                || (self.judge.is_none()
                    && !super::memfd::handles(nr)
                    && !NetGuard::handles(nr)
                    && !ProcGuard::handles(nr)))
    }

    /// Hand one notified call to the part that owns its system call (each
    /// refused without its part); once the budget is `spent`, refuse it
    /// without work; once the observer's share is spent (`!observing`),
    /// answer its calls without reading them.
    fn dispatch(
        &mut self,
        listener: &std::sync::Arc<Listener>,
        n: &Notification,
        spent: bool,
        observing: bool,
    ) -> super::network::Action {
        use super::network::{Action, NetGuard};
        use super::processes::ProcGuard;
        if spent {
            let errno = if ProcGuard::handles(n.nr) {
                libc::EAGAIN
            } else {
                libc::EPERM
            };
            Action::Reply(Reply::Fail(errno))
        } else if super::metadata::MetaGuard::handles(n.nr) {
            match &self.meta {
                Some(g) => Action::Reply(g.serve(listener, n)),
                None => Action::Reply(Reply::Fail(libc::EPERM)),
            }
        } else if super::observer::Observer::handles(n.nr) {
            // Only explains: the kernel decides as usual.
            match &self.observe {
                Some(o) if observing => Action::Reply(o.serve(listener, n)),
                Some(o) => Action::Reply(o.skip()),
                None => Action::Reply(Reply::Continue),
            }
        } else if super::memfd::handles(n.nr) {
            match &self.memfd {
                Some(g) => super::memfd::serve(listener, n, g),
                None => Action::Reply(Reply::Fail(libc::EPERM)),
            }
        } else if NetGuard::handles(n.nr) {
            match &self.net {
                Some(g) => g.decide(listener, n),
                None => Action::Reply(Reply::Fail(libc::EPERM)),
            }
        } else if ProcGuard::handles(n.nr) {
            match &mut self.procs {
                Some(p) => Action::Reply(p.decide(n)),
                None => Action::Reply(Reply::Fail(libc::EAGAIN)),
            }
        } else {
            match (&self.judge, &self.observe) {
                (Some(j), o) => {
                    let reply = j.decide(n);
                    if let (Some(o), Reply::Fail(_)) = (o, &reply) {
                        o.refused_signal(n);
                    }
                    Action::Reply(reply)
                }
                // No signal checks here (a pid namespace or Landlock's
                // scope decides): the observer only records.
                (None, Some(o)) if observing => Action::Reply(o.serve_signal(listener, n)),
                (None, Some(o)) => Action::Reply(o.skip()),
                (None, None) => Action::Reply(Reply::Fail(libc::EPERM)),
            }
        }
    }
}

/// Answer `n` with `reply`, unless its caller is gone.
fn answer(listener: &Listener, n: &Notification, reply: Reply) {
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
}

/// What woke the guard thread.
enum Woken {
    /// Nothing to do (EINTR): wait again.
    Again,
    /// Stop: asked to, or poll failed.
    Stop,
    /// The listener's events.
    Events(PollFlags),
}

/// Wait for a notification on `listener`, or for `stop`.
fn wait(listener: &Listener, stop: &OwnedFd) -> Woken {
    let mut fds = [
        PollFd::new(listener.as_fd(), PollFlags::POLLIN),
        PollFd::new(stop.as_fd(), PollFlags::POLLIN),
    ];
    match poll(&mut fds, PollTimeout::NONE) {
        Ok(_) => {}
        Err(Errno::EINTR) => return Woken::Again,
        Err(e) => {
            tracing::warn!("guard: poll: {e}");
            return Woken::Stop;
        }
    }
    if fds[1].revents().is_some_and(|r| !r.is_empty()) {
        return Woken::Stop;
    }
    Woken::Events(fds[0].revents().unwrap_or(PollFlags::empty()))
}

/// The guards' CPU time so far: this thread's, the ended connect
/// threads' and the metadata guard's credentialed thread's. Unknown counts
/// as spent.
fn guards_cpu(
    threads: &super::network::Threads,
    meta: Option<&super::metadata::MetaGuard>,
) -> Option<Duration> {
    crate::sys::thread_cpu_time().map(|t| {
        t.saturating_add(Duration::from_nanos(
            threads.cpu_nanos.load(std::sync::atomic::Ordering::Relaxed),
        ))
        .saturating_add(meta.map_or(Duration::ZERO, |m| m.cpu()))
    })
}

/// Whether the guards have spent their CPU budget (the run is killed):
/// their time less the observer's (`--explain` never kills a run for being
/// observed).
fn over_budget(used: Option<Duration>, observed_cpu: Duration, budget: Duration) -> bool {
    used.is_none_or(|t| t.saturating_sub(observed_cpu) > budget)
}

/// Whether the observer may still read paths: the guards' time, the
/// observer's included, is within the budget. Past it the observer answers
/// at once without reading (counted in `explain.not_observed`), so
/// `--explain` cannot make capsule work past the budget either.
fn observer_within_budget(used: Option<Duration>, budget: Duration) -> bool {
    used.is_some_and(|t| t <= budget)
}

/// Past the budget, capsule's thread spends at most one part in
/// `PACED_SHARE` of a core on observed calls.
const PACED_SHARE: u32 = 40;

/// Past the budget, even an observed call answered without reading costs
/// capsule its round trip (receive, answer, wake), and a run that names
/// paths in a loop from several processes would keep the thread busy on a
/// core: so after each such call the thread waits `PACED_SHARE - 1` times
/// what it spent since its previous wait (the run's observed calls wait
/// meanwhile: slowed, never refused). `spent` is all of the thread's time
/// in between: the call, the loop around it, the previous wait's own system
/// call and wake-up, and any other call served meanwhile. Counting only the
/// call's own segment let the loop's overhead through: in a release build,
/// where a call is cheap, that overhead was as large as the call, and the
/// thread used twice its share.
fn pace_wait(spent: Duration) -> Duration {
    (spent * (PACED_SHARE - 1)).min(Duration::from_millis(50))
}

/// What holds the guard thread to its budget.
struct Held {
    budget: Duration,
    exhausted: Exhausted,
    /// Every call is refused at once, until the event loop has killed the run.
    spent: bool,
    /// The path observer's CPU time (`exec --explain`), not counted toward the kill.
    observed_cpu: Duration,
    /// This thread's CPU time when it last began a paced wait.
    paced_at: Option<Duration>,
}

impl Held {
    /// Given the guards' CPU time so far (`used`): whether the budget is
    /// spent (telling the event loop once), and whether the observer may
    /// still read paths.
    fn check(&mut self, used: Option<Duration>) -> (bool, bool) {
        if !self.spent && over_budget(used, self.observed_cpu, self.budget) {
            self.spent = true;
            tracing::warn!(
                "guard: {:.1} s of capsule's CPU spent on the run's checked calls: budget spent, the run is killed",
                self.budget.as_secs_f64()
            );
            self.exhausted.notify_one();
        }
        (self.spent, observer_within_budget(used, self.budget))
    }

    /// An observed call was served, since `start` (this thread's CPU time):
    /// count its cost, and past the budget pace the next one (returns the wait).
    #[cfg(test)]
    fn observed(&mut self, start: Option<Duration>, observing: bool) -> Duration {
        self.served(start, true, observing)
    }

    /// A call was served under the observer (`exec --explain`), since
    /// `start`: count its cost as the observer's when it was the observer's
    /// alone (`observed`), and past the budget pace the next call, whatever
    /// it is. Pacing only the observer's calls let a run that had spent the
    /// budget on observed paths have capsule spend a second budget on other
    /// calls (signals) before the kill.
    fn served(&mut self, start: Option<Duration>, observed: bool, observing: bool) -> Duration {
        let (Some(a), Some(now)) = (start, crate::sys::thread_cpu_time()) else {
            return Duration::ZERO;
        };
        if observed {
            self.observed_cpu += now.saturating_sub(a);
        }
        if observing || self.spent {
            return Duration::ZERO;
        }
        let since = self.paced_at.unwrap_or(a);
        self.paced_at = Some(now);
        let wait = pace_wait(now.saturating_sub(since));
        std::thread::sleep(wait);
        wait
    }
}

/// Count one answered call as allowed or refused (a refusal is logged).
fn tally(reply: &Reply, n: &Notification, (allowed, refused): (&mut u64, &mut u64)) {
    if matches!(reply, Reply::Continue | Reply::Value(_)) {
        *allowed += 1;
    } else {
        *refused += 1;
        tracing::debug!(
            "guard: refused syscall {} of pid {} (args {:?}): {:?}",
            n.nr,
            n.pid,
            &n.args[..3],
            reply
        );
    }
}

fn serve(listener: &std::sync::Arc<Listener>, stop: &OwnedFd, parts: Parts) -> (u64, u64) {
    use super::network::{self, Action};
    let Parts {
        tree,
        net,
        procs,
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
    let mut served = Served {
        judge,
        net,
        procs,
        memfd,
        meta,
        observe,
    };
    let mut held = Held {
        budget,
        exhausted,
        spent: false,
        observed_cpu: Duration::ZERO,
        paced_at: None,
    };
    let threads = std::sync::Arc::new(network::Threads::default());
    let (mut allowed, mut refused) = (0u64, 0u64);
    loop {
        // With the observer: this iteration's CPU time, for when it serves an
        // observed call (poll, receive, read, answer).
        let iter_start = served
            .observe
            .as_ref()
            .and_then(|_| crate::sys::thread_cpu_time());
        let ev = match wait(listener, stop) {
            Woken::Again => continue,
            Woken::Stop => break,
            Woken::Events(ev) => ev,
        };
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
            let (spent, observing) = held.check(guards_cpu(&threads, served.meta.as_ref()));
            let observer_only = served.observer_only(n.nr);
            let action = served.dispatch(listener, &n, spent, observing);
            // Under the observer past the budget every call is paced, not
            // only the observed ones (see `Held::served`).
            let pace = |held: &mut Held| {
                if served.observe.is_some() {
                    let _ = held.served(iter_start, observer_only, observing);
                }
            };
            let reply = match action {
                Action::Connect(conn) => {
                    allowed += 1;
                    network::serve_connect(listener, n.id, conn, &threads);
                    pace(&mut held);
                    continue;
                }
                Action::Answered => {
                    allowed += 1;
                    pace(&mut held);
                    continue;
                }
                Action::Reply(r) => r,
            };
            tally(&reply, &n, (&mut allowed, &mut refused));
            answer(listener, &n, reply);
            pace(&mut held);
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
    fn past_the_budget_the_thread_waits_for_all_it_spent_since_its_last_wait() {
        let us = Duration::from_micros;
        assert_eq!(pace_wait(us(20)), us(20 * (PACED_SHARE as u64 - 1)));
        assert_eq!(pace_wait(Duration::from_secs(1)), Duration::from_millis(50));
        let mut held = Held {
            budget: Duration::from_secs(1),
            exhausted: Exhausted::default(),
            spent: false,
            observed_cpu: Duration::ZERO,
            paced_at: None,
        };
        let start = crate::sys::thread_cpu_time();
        let _ = held.observed(start, false);
        // Work between two observed calls that is not the call itself (the
        // loop, other guards' calls, the last wait's wake-up) counts toward
        // the next wait.
        let spin_from = crate::sys::thread_cpu_time().expect("thread CPU time");
        while crate::sys::thread_cpu_time().expect("thread CPU time") - spin_from
            < Duration::from_millis(2)
        {
            std::hint::black_box(0u64);
        }
        let late = crate::sys::thread_cpu_time();
        let wait = held.observed(late, false);
        assert_eq!(
            wait,
            Duration::from_millis(50),
            "the wait must cover the time spent since the last wait, not only the call"
        );
        // The observer's own CPU counts only the calls' segments.
        assert!(
            held.observed_cpu < Duration::from_millis(1),
            "{:?}",
            held.observed_cpu
        );
    }
}

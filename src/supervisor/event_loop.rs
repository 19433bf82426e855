//! Watching the child: its exit, its messages, signals to capsule, and the
//! wall-clock limit.
//!
//! At the limit the run gets SIGTERM (in a pid namespace, init passes it to
//! every process of the run), then after a short grace SIGKILL of the whole
//! tree. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to capsule end the run the
//! same way: the signal is forwarded, and after the same grace the whole tree
//! is SIGKILLed, so capsule always gets to remove its TMPDIR and cgroup and
//! write its result and audit record (exit 128+N, `termination_reason:
//! signaled`) before whoever signalled it loses patience.

use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::errno::Errno;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, SignalKind};

use super::spawn::{Spawned, TreeMode};
use crate::sys::{self, channel::Msg};

/// The signals that end a run when capsule receives them.
const STOP_SIGNALS: [nix::sys::signal::Signal; 4] = [
    nix::sys::signal::Signal::SIGINT,
    nix::sys::signal::Signal::SIGTERM,
    nix::sys::signal::Signal::SIGHUP,
    nix::sys::signal::Signal::SIGQUIT,
];

fn stop_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in STOP_SIGNALS {
        set.add(s);
    }
    set
}

/// Hold SIGINT/SIGTERM/SIGHUP/SIGQUIT pending from the moment the run starts
/// setting up (the private TMPDIR exists from then on) until [`watch`] has its
/// handlers: one arriving in between is then handled like any other instead
/// of killing capsule with the TMPDIR and cgroup left behind. The command
/// itself starts with an empty mask (`sandbox::child`).
pub fn hold_stop_signals() {
    use nix::sys::signal::{pthread_sigmask, SigmaskHow};
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stop_set()), None) {
        tracing::warn!("cannot hold termination signals during set-up: {e}");
    }
}

/// Undo [`hold_stop_signals`].
pub fn release_stop_signals() {
    use nix::sys::signal::{pthread_sigmask, SigmaskHow};
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stop_set()), None);
}

/// Send `sig` to every process of the run.
///
/// Without a pid namespace every process of the run is a descendant of the
/// keeper (a child subreaper), and each gets `sig` through a pidfd
/// (`treekill::signal_below`), as init passes a signal to every process of
/// its namespace. Never by a pid: the keeper reaps the command when it ends
/// and then kills what is left before it reports and exits, and a timeout,
/// the watchdog or a stop signal firing in that window used to signal the
/// command's pid and process group after they were freed (as root, possibly
/// an unrelated process that got the pid). The pidfd the command stage sent
/// with its pid (`Spawned::command_fd`) reaches the command alone should the
/// walk find nothing (no /proc to list children). Where pidfds are refused (an outer seccomp profile), a
/// signal other than the final SIGKILL ([`kill_run`]) does not reach the run
/// on this path.
pub fn signal_run(sp: &Spawned, sig: libc::c_int) {
    match sp.tree {
        // init is capsule's child, not reaped before the loop is over.
        TreeMode::PidNamespace => sys::signal(sp.pid, sig),
        TreeMode::Subreaper => {
            // Not reported yet: the command has not exec'd; kill_run's
            // SIGKILL of the keeper still takes it down (PR_SET_PDEATHSIG).
            // The keeper is capsule's child, not reaped before the loop is over.
            if super::treekill::signal_below(sp.pid, sig) == 0 {
                // No list of the keeper's children (no /proc): the command.
                if let Some(fd) = sp.command_fd.get() {
                    use std::os::fd::AsFd;
                    let _ = sys::pidfd_signal(fd.as_fd(), sig);
                }
            }
        }
    }
}

/// Kill every process of the run now. In a pid namespace the kernel takes
/// the whole namespace down with its init; without one, capsule kills the
/// keeper and every process below it at once (`treekill::kill_tree`: the
/// run's cgroup where it has `cgroup.kill`, then each process through its
/// pidfd), and the sweep after the loop (`treekill::sweep`) repeats that and
/// reaps until none is left.
pub fn kill_run(sp: &Spawned) {
    match sp.tree {
        TreeMode::PidNamespace => sys::signal(sp.pid, libc::SIGKILL),
        TreeMode::Subreaper => super::treekill::kill_tree(&sp.inherited, sp.cgroup_kill.as_deref()),
    }
}

fn try_wait(pid: libc::pid_t) -> Option<i32> {
    sys::try_wait(pid).map(|(_, status)| status)
}

/// What ended the run early, if anything.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The wall-clock limit was reached.
    pub timed_out: bool,
    /// The first of SIGINT/SIGTERM/SIGHUP/SIGQUIT capsule received.
    pub signal: Option<libc::c_int>,
    /// The guards spent their CPU budget on the run's calls: killed.
    pub guard_budget: bool,
    /// The memory watchdog found the run over memory_mb (the bytes it held;
    /// `u64::MAX`: its memory could not be read) and the run was killed.
    pub memory: Option<u64>,
}

/// Run until the child (init, or the keeper) has exited; returns its raw
/// wait status. Messages from the child go to `on_msg`; when the guard
/// thread says its CPU budget is spent (`exhausted`), the run is killed.
pub async fn watch(
    sp: &Spawned,
    limit: Duration,
    grace: Duration,
    ended: &mut Ended,
    exhausted: &tokio::sync::Notify,
    mut memory_over: Option<tokio::sync::oneshot::Receiver<u64>>,
    mut on_msg: impl FnMut(Msg, Option<OwnedFd>),
) -> Option<i32> {
    let (pidfd, chan) = child_fds(sp);
    let mut chan_open = chan.is_some();
    let mut stops = StopSignals::new();
    // Handlers are in place: a signal held since `hold_stop_signals` is
    // delivered now, to them.
    release_stop_signals();
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let kill_at = tokio::time::sleep_until(far);
    tokio::pin!(kill_at);
    let mut kill_armed = false;
    let mut poll_tick = tokio::time::interval(Duration::from_millis(20));

    // In a pid namespace, init's `Exited` report is the end of the run: it
    // comes after init has reaped the command and killed and reaped
    // everything else, so there is no need to wait for init's own exit here
    // (it exits right after; the supervisor reaps it once the loop is over).
    let reported = std::cell::Cell::new(false);

    let mut pending = None; // a stop signal held for `deliver`
    let status = loop {
        tokio::select! {
            // In this order: the child's exit and its messages before any
            // timer or signal, so that a signal is forwarded to the command
            // the keeper's command stage already reported (`Msg::Command`).
            biased;
            r = async { pidfd.as_ref().unwrap().readable().await }, if pidfd.is_some() => {
                if let Ok(mut guard) = r {
                    if let Some(st) = try_wait(sp.pid) { break Some(st); }
                    guard.clear_ready();
                }
            }
            _ = poll_tick.tick(), if pidfd.is_none() => {
                if let Some(st) = try_wait(sp.pid) { break Some(st); }
            }
            r = async { chan.as_ref().unwrap().readable().await }, if chan_open => {
                if let Ok(mut guard) = r {
                    chan_open = drain(sp, &reported, &mut on_msg);
                    guard.clear_ready();
                }
                deliver(sp, pending.take(), &mut pending);
                if reported.get() && sp.tree == TreeMode::PidNamespace {
                    break None;
                }
            }
            _ = exhausted.notified(), if !ended.guard_budget => {
                ended.guard_budget = true;
                tracing::warn!("the guards' CPU budget is spent; killing every process of the run");
                kill_run(sp);
            }
            _ = &mut deadline, if !ended.timed_out && ended.signal.is_none() && !ended.guard_budget => {
                ended.timed_out = true;
                tracing::info!("wall-clock limit reached; sending SIGTERM to the run");
                signal_run(sp, libc::SIGTERM);
                kill_at.as_mut().reset(tokio::time::Instant::now() + grace);
                kill_armed = true;
            }
            held = async { memory_over.as_mut().unwrap().await }, if memory_over.is_some() => {
                memory_over = None;
                if let Ok(held) = held {
                    ended.memory = Some(held);
                    tracing::info!("memory limit reached; killing every process of the run");
                    kill_run(sp);
                }
            }
            _ = &mut kill_at, if kill_armed => {
                kill_armed = false;
                tracing::info!("grace period over; killing every process of the run");
                kill_run(sp);
            }
            sig = stops.next() => {
                // The command's pid may be waiting on the channel still.
                if chan_open {
                    chan_open = drain(sp, &reported, &mut on_msg);
                }
                deliver(sp, Some(sig), &mut pending);
                // The first signal (unless the timeout already did) starts the grace.
                if ended.signal.is_none() && !ended.timed_out {
                    ended.signal = Some(sig);
                    kill_at.as_mut().reset(tokio::time::Instant::now() + grace);
                    kill_armed = true;
                }
            }
        }
    };
    if chan_open {
        drain(sp, &reported, &mut on_msg);
    }
    status
}

/// The child's exit (a pidfd) and its messages (the channel), as async
/// descriptors; None where one cannot be had (then its exit is polled).
fn child_fds(sp: &Spawned) -> (Option<AsyncFd<OwnedFd>>, Option<AsyncFd<OwnedFd>>) {
    let pidfd = sys::pidfd_open(sp.pid)
        .ok()
        .and_then(|fd| sys::async_fd(fd).ok());
    let _ = sys::set_nonblocking(sp.chan.raw());
    let chan = sp
        .chan
        .try_clone_fd()
        .ok()
        .and_then(|fd| sys::async_fd(fd).ok());
    (pidfd, chan)
}

/// Read every message waiting on the channel and hand it to `on_msg`;
/// false when the channel is closed. Init's `Exited` sets `reported`.
fn drain(
    sp: &Spawned,
    reported: &std::cell::Cell<bool>,
    on_msg: &mut dyn FnMut(Msg, Option<OwnedFd>),
) -> bool {
    loop {
        match sp.chan.recv() {
            Ok(Some((Some(m), fd))) => {
                if matches!(m, Msg::Exited { .. }) {
                    reported.set(true);
                }
                on_msg(m, fd)
            }
            Ok(Some((None, _))) => {}
            Ok(None) => return false,
            Err(Errno::EAGAIN) => return true,
            Err(_) => return false,
        }
    }
}

/// capsule's handlers of SIGINT, SIGTERM, SIGHUP and SIGQUIT (each None
/// where it could not be registered).
struct StopSignals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
    quit: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn new() -> StopSignals {
        StopSignals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
            hup: signal(SignalKind::hangup()).ok(),
            quit: signal(SignalKind::quit()).ok(),
        }
    }

    /// The next of them capsule receives.
    async fn next(&mut self) -> libc::c_int {
        tokio::select! {
            _ = recv(&mut self.int) => libc::SIGINT,
            _ = recv(&mut self.term) => libc::SIGTERM,
            _ = recv(&mut self.hup) => libc::SIGHUP,
            _ = recv(&mut self.quit) => libc::SIGQUIT,
        }
    }
}

/// The next delivery of a signal, or never when it could not be registered.
async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Forward `sig` to the run, or keep it in `pending` while the keeper's
/// command stage has not reported its pid: the command prints and runs
/// before capsule reads that report under load, and a signal dropped then
/// reached nobody until the grace period killed the run.
fn deliver(sp: &Spawned, sig: Option<libc::c_int>, pending: &mut Option<libc::c_int>) {
    let Some(sig) = sig else { return };
    if sp.tree == TreeMode::Subreaper && sp.command.get() <= 0 {
        *pending = Some(sig);
    } else {
        forward(sp, sig);
    }
}

fn forward(sp: &Spawned, sig: libc::c_int) {
    tracing::info!("forwarding signal {sig} to the run");
    signal_run(sp, sig);
}

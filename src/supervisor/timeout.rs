//! Watching the child: its exit, its messages, signals to capsule, and the
//! wall-clock limit.
//!
//! At the limit the run gets SIGTERM (in a pid namespace, init passes it to
//! every process of the run), then after a short grace SIGKILL of the whole
//! tree. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to capsule are forwarded
//! the same way, as GNU timeout does.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{signal, SignalKind};

use super::spawn::{Spawned, TreeMode};
use crate::sys::{self, channel::Msg};

/// A raw descriptor owned elsewhere, for `AsyncFd`.
struct Raw(RawFd);
impl AsRawFd for Raw {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Send `sig` to every process of the run.
pub fn signal_run(sp: &Spawned, sig: libc::c_int) {
    match sp.tree {
        TreeMode::PidNamespace => sys::signal(sp.pid, sig),
        TreeMode::Subreaper => {
            sys::signal(-sp.pid, sig);
            sys::signal(sp.pid, sig);
        }
    }
}

/// Kill every process of the run now.
pub fn kill_run(sp: &Spawned) {
    match sp.tree {
        // The kernel kills the whole namespace with its init.
        TreeMode::PidNamespace => sys::signal(sp.pid, libc::SIGKILL),
        TreeMode::Subreaper => {
            sys::signal(-sp.pid, libc::SIGKILL);
            sys::signal(sp.pid, libc::SIGKILL);
            for k in super::treekill::children_of(nix::unistd::getpid().as_raw()) {
                sys::signal(k, libc::SIGKILL);
            }
        }
    }
}

fn try_wait(pid: libc::pid_t) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waitpid writes into our local.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) };
    (r == pid).then_some(status)
}

/// Run until the child (init, or the command itself) has exited; returns its
/// raw wait status. Messages from the child go to `on_msg`.
pub async fn watch(
    sp: &Spawned,
    limit: Duration,
    grace: Duration,
    timed_out: &mut bool,
    mut on_msg: impl FnMut(Msg, Option<OwnedFd>),
) -> Option<i32> {
    let pidfd = sys::pidfd_open(sp.pid).ok().and_then(|fd| AsyncFd::new(fd).ok());
    let _ = sys::set_nonblocking(sp.chan.raw());
    let chan = AsyncFd::new(Raw(sp.chan.raw())).ok();
    let mut chan_open = chan.is_some();
    let mut sigs = Vec::new();
    for (kind, num) in [
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::hangup(), libc::SIGHUP),
        (SignalKind::quit(), libc::SIGQUIT),
    ] {
        if let Ok(s) = signal(kind) {
            sigs.push((s, num));
        }
    }
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let kill_at = tokio::time::sleep_until(far);
    tokio::pin!(kill_at);
    let mut kill_armed = false;
    let mut poll_tick = tokio::time::interval(Duration::from_millis(20));

    let drain = |on_msg: &mut dyn FnMut(Msg, Option<OwnedFd>)| -> bool {
        loop {
            match sp.chan.recv() {
                Ok(Some((Some(m), fd))) => on_msg(m, fd),
                Ok(Some((None, _))) => {}
                Ok(None) => return false,
                Err(Errno::EAGAIN) => return true,
                Err(_) => return false,
            }
        }
    };

    let status = loop {
        let sig_fut = async {
            if sigs.is_empty() {
                std::future::pending::<libc::c_int>().await
            } else {
                let futs = sigs.iter_mut().map(|(s, n)| {
                    let n = *n;
                    Box::pin(async move {
                        s.recv().await;
                        n
                    })
                });
                futures_select_all(futs.collect()).await
            }
        };
        tokio::select! {
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
                    chan_open = drain(&mut on_msg);
                    guard.clear_ready();
                }
            }
            _ = &mut deadline, if !*timed_out => {
                *timed_out = true;
                tracing::info!("wall-clock limit reached; sending SIGTERM to the run");
                signal_run(sp, libc::SIGTERM);
                kill_at.as_mut().reset(tokio::time::Instant::now() + grace);
                kill_armed = true;
            }
            _ = &mut kill_at, if kill_armed => {
                kill_armed = false;
                tracing::info!("grace period over; killing every process of the run");
                kill_run(sp);
            }
            n = sig_fut => {
                tracing::info!("forwarding signal {n} to the run");
                signal_run(sp, n);
            }
        }
    };
    if chan_open {
        drain(&mut on_msg);
    }
    status
}

/// Wait for the first of several futures (all yielding the signal number).
async fn futures_select_all(
    mut futs: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = libc::c_int> + '_>>>,
) -> libc::c_int {
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if let std::task::Poll::Ready(n) = f.as_mut().poll(cx) {
                return std::task::Poll::Ready(n);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

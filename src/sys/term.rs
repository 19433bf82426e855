//! Terminals: the run's pseudo-terminal, window sizes, and the watchdog that
//! puts the user's terminal back if capsule dies without doing it itself.
//!
//! termios itself goes through `nix::sys::termios` (safe); what nix does not
//! wrap, or wraps without `O_CLOEXEC`, is here.

use std::ffi::c_int;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

use super::raw;

/// A new pseudo-terminal pair (master, slave), both close-on-exec and the
/// slave opened without becoming anyone's controlling terminal.
///
/// The slave comes from `TIOCGPTPEER` (Linux 4.13+): the peer of this very
/// master, with no path lookup under /dev/pts (which a mount namespace could
/// replace). Older kernels fall back to `/dev/pts/N`.
pub fn open_pty() -> Result<(OwnedFd, OwnedFd), Errno> {
    let master = nix::fcntl::open(
        "/dev/ptmx",
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let unlock: c_int = 0;
    // SAFETY: TIOCSPTLCK reads one int from our local.
    Errno::result(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) })?;
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags as an integer and returns a new descriptor.
    let peer = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if peer >= 0 {
        // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
        return Ok((master, unsafe { OwnedFd::from_raw_fd(peer) }));
    }
    let mut n: c_int = -1;
    // SAFETY: TIOCGPTN writes one int into our local.
    Errno::result(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) })?;
    let slave = nix::fcntl::open(
        format!("/dev/pts/{n}").as_str(),
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok((master, slave))
}

/// `TIOCGWINSZ`: the window size of a terminal.
pub fn window_size(fd: BorrowedFd<'_>) -> Result<libc::winsize, Errno> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one struct winsize into our local.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) })?;
    Ok(ws)
}

/// `TIOCSWINSZ`: set a terminal's window size (on a pty master, the kernel
/// sends SIGWINCH to the slave's foreground process group when it changes).
pub fn set_window_size(fd: BorrowedFd<'_>, ws: &libc::winsize) -> Result<(), Errno> {
    // SAFETY: TIOCSWINSZ reads one struct winsize from our borrow.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, ws) }).map(drop)
}

/// Whether this process may change the terminal's modes without being
/// stopped: it is in the terminal's foreground process group, or the
/// terminal is not its controlling terminal (no job control applies).
pub fn in_foreground(fd: BorrowedFd<'_>) -> bool {
    match nix::unistd::tcgetpgrp(fd) {
        Ok(pgrp) => pgrp == nix::unistd::getpgrp(),
        Err(_) => true,
    }
}

/// Watch an owned descriptor for readiness (read and write) on the current
/// tokio runtime, made non-blocking first.
pub fn async_fd_rw(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    super::set_nonblocking(fd.as_raw_fd()).map_err(std::io::Error::from)?;
    // SAFETY: an OwnedFd stays open, and keeps referring to the same open file
    // description, for as long as the AsyncFd owns it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            fd,
            tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE,
        )
    }
    .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Watch the user's terminal for input without changing its file status
/// flags (shared with the user's shell): the caller has set VMIN=0 and
/// VTIME=0, so a read never blocks.
pub fn watch_tty(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open, and keeps referring to the same open file
    // description, for as long as the AsyncFd owns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Start the terminal watchdog: a small process that puts `saved` back on
/// the terminal `tty` if capsule dies (even by SIGKILL) before it did so
/// itself. It sleeps on a pipe whose only writer is capsule: a byte means
/// "restored, go away"; end-of-file means capsule is gone, so it restores
/// the settings and exits. It leads a session of its own (a kill of
/// capsule's process group does not reach it, and a terminal that is not
/// its controlling terminal has no job-control checks) and ignores the
/// usual terminating signals. Returns the pipe's write end.
///
/// Call it while capsule has no child it could confuse with the watchdog
/// (before the run's child exists: the run's sweeps spare children capsule
/// had before).
pub fn spawn_terminal_watchdog(
    tty: BorrowedFd<'_>,
    saved: libc::termios,
) -> Result<OwnedFd, Errno> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (r_fd, tty_fd) = (r.as_raw_fd(), tty.as_raw_fd());
    // SAFETY: the child runs `watchdog_main` only, which makes raw system
    // calls (no allocation, no lock, no libc errno) and never returns: safe
    // after fork in a multi-threaded process. The parent only learns the pid.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Errno::last());
    }
    if pid == 0 {
        watchdog_main(r_fd, tty_fd, &saved);
    }
    drop(r);
    Ok(w)
}

/// The watchdog's body (see [`spawn_terminal_watchdog`]).
fn watchdog_main(r: RawFd, tty: RawFd, saved: &libc::termios) -> ! {
    let (lo, hi) = if r < tty { (r, tty) } else { (tty, r) };
    // Keep only the pipe and the terminal: not capsule's other descriptors
    // (above all not the run's pty slave, whose last close ends the relay).
    if lo > 0 {
        let _ = raw::close_range(0, (lo - 1) as u32);
    }
    if hi > lo + 1 {
        let _ = raw::close_range(lo + 1, (hi - 1) as u32);
    }
    let _ = raw::close_range(hi + 1, u32::MAX);
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGHUP,
        libc::SIGTERM,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        let _ = raw::ignore_action(sig);
    }
    let _ = raw::sigprocmask(libc::SIG_SETMASK, raw::SigSet::EMPTY);
    let _ = raw::setsid();
    let mut b = [0u8; 1];
    if raw::read(r, &mut b) == Ok(0) {
        // SAFETY: TCSETS reads one struct termios from our borrow.
        let _ = unsafe {
            raw::ioctl(
                tty,
                libc::TCSETS as libc::c_ulong,
                saved as *const libc::termios as *mut std::ffi::c_void,
            )
        };
    }
    raw::exit_group(0)
}

/// Tell the watchdog that the terminal was restored: it exits without touching it.
pub fn dismiss_terminal_watchdog(w: OwnedFd) {
    let _ = nix::unistd::write(&w, b"d");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IsTerminal;
    use std::os::fd::AsFd;

    #[test]
    fn a_pty_pair_is_connected_and_close_on_exec() {
        let (master, slave) = open_pty().expect("open_pty");
        assert!(slave.as_fd().is_terminal());
        for fd in [&master, &slave] {
            let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
            assert_ne!(flags & libc::FD_CLOEXEC, 0, "not close-on-exec");
        }
        nix::unistd::write(&slave, b"x").unwrap();
        let mut b = [0u8; 8];
        assert_eq!(nix::unistd::read(&master, &mut b).unwrap(), 1);
        assert_eq!(b[0], b'x');
    }

    #[test]
    fn window_size_round_trips() {
        let (master, slave) = open_pty().expect("open_pty");
        let ws = libc::winsize {
            ws_row: 33,
            ws_col: 101,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        set_window_size(master.as_fd(), &ws).unwrap();
        let got = window_size(slave.as_fd()).unwrap();
        assert_eq!((got.ws_row, got.ws_col), (33, 101));
    }

    #[test]
    fn a_terminal_that_is_not_ours_has_no_job_control() {
        // Not this process's controlling terminal: changing its modes cannot stop us.
        let (_master, slave) = open_pty().expect("open_pty");
        assert!(in_foreground(slave.as_fd()));
    }
}

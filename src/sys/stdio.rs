//! capsule's own stdout and stderr, written so that a failure never stops
//! capsule (issue 37 item 6): `println!`/`eprintln!` panic when the write
//! fails (a reader that went away, a full non-blocking pipe), and a panic
//! after the run starts would skip the reaping, the result and the audit
//! record. Every message capsule prints once a run is under way goes
//! through [`err_line`] (the `say!` macro) or [`err_text`], which also give
//! up on a stderr that has no room for a while (a reader that stays but does
//! not read); the run's own output goes through [`write_all`], whose error
//! the caller acts on (from tokio's blocking pool, which capsule does not
//! wait for at its end).

use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// One of capsule's own output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    Stdout,
    Stderr,
}

impl Own {
    fn fd(self) -> BorrowedFd<'static> {
        let fd = match self {
            Own::Stdout => libc::STDOUT_FILENO,
            Own::Stderr => libc::STDERR_FILENO,
        };
        // SAFETY: fds 1 and 2 are open for the whole life of capsule
        // (`ensure_std_fds` at start, /dev/null where they were closed) and
        // nothing of capsule closes them.
        unsafe { BorrowedFd::borrow_raw(fd) }
    }
}

/// Write all of `data` to capsule's own stream, blocking. A non-blocking
/// description shared with capsule's caller (a socketpair from Node's
/// `child_process`, say) is waited on rather than given up at EAGAIN. The
/// error is the first other failure: EPIPE when the reader went away.
pub fn write_all(to: Own, mut data: &[u8]) -> io::Result<()> {
    let fd = to.fd();
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let mut p = [PollFd::new(fd, PollFlags::POLLOUT)];
                match poll(&mut p, PollTimeout::NONE) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// How long one of capsule's own messages may wait for room on its stream.
const OWN_WAIT: Duration = Duration::from_secs(2);

/// Set once a message of capsule's own found no room on stderr within
/// [`OWN_WAIT`]: the later ones are dropped at once.
static STDERR_STALLED: AtomicBool = AtomicBool::new(false);

/// Write `data`, one of capsule's own messages, to capsule's stderr, waiting
/// at most [`OWN_WAIT`] for room, then dropping the rest (and every later
/// message). A reader that stays but never reads (`2>&1 |` a stalled
/// consumer, a harness that reads stdout to its end first) filled by the run
/// otherwise held capsule, its run over and its audit record written, in a
/// blocking write for as long as that reader lived: past every bound. Each
/// write is at most PIPE_BUF bytes, after poll said there is room: a pipe
/// with room for one page takes that much without blocking.
fn write_soft(mut data: &[u8]) {
    if STDERR_STALLED.load(Ordering::Relaxed) {
        return;
    }
    let fd = Own::Stderr.fd();
    let deadline = Instant::now() + OWN_WAIT;
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = PollTimeout::try_from(left).unwrap_or(PollTimeout::ZERO);
        let mut p = [PollFd::new(fd, PollFlags::POLLOUT)];
        match poll(&mut p, wait) {
            Ok(0) => {
                STDERR_STALLED.store(true, Ordering::Relaxed);
                return;
            }
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
        let chunk = &data[..data.len().min(libc::PIPE_BUF)];
        match nix::unistd::write(fd, chunk) {
            Ok(0) => return,
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(_) => return,
        }
    }
}

/// One line on capsule's stderr; a failure, or no room within a bound, drops it.
pub fn err_line(args: std::fmt::Arguments<'_>) {
    let mut s = args.to_string();
    s.push('\n');
    write_soft(s.as_bytes());
}

/// Text on capsule's stderr as it is (no newline added); a failure, or no
/// room within a bound, drops it.
pub fn err_text(s: &str) {
    write_soft(s.as_bytes());
}

/// `eprintln!` that never panics: for every message of capsule's own.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::sys::stdio::err_line(format_args!($($arg)*))
    };
}

/// A `Write` onto capsule's stderr that never fails (the log's writer: a
/// log line lost to a closed stderr is no reason to stop).
#[derive(Debug, Clone, Copy, Default)]
pub struct SoftStderr;

impl Write for SoftStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_soft(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_writes_report_success() {
        assert_eq!(SoftStderr.write(b"").unwrap(), 0);
        assert!(write_all(Own::Stderr, b"").is_ok());
    }
}

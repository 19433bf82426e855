//! capsule's own stdout and stderr, written so that a failure never stops
//! capsule (issue 37 item 6): `println!`/`eprintln!` panic when the write
//! fails (a reader that went away, a full non-blocking pipe), and a panic
//! after the run starts would skip the reaping, the result and the audit
//! record. Every message capsule prints once a run is under way goes
//! through [`err_line`] (the `say!` macro) or [`err_text`]; the run's own
//! output goes through [`write_all`], whose error the caller acts on.

use std::io::{self, Write};
use std::os::fd::BorrowedFd;

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

/// One line on capsule's stderr; a failure is dropped.
pub fn err_line(args: std::fmt::Arguments<'_>) {
    let mut s = args.to_string();
    s.push('\n');
    let _ = write_all(Own::Stderr, s.as_bytes());
}

/// Text on capsule's stderr as it is (no newline added); a failure is dropped.
pub fn err_text(s: &str) {
    let _ = write_all(Own::Stderr, s.as_bytes());
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
        let _ = write_all(Own::Stderr, buf);
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

//! Draining the child's stdout and stderr.
//!
//! Each stream is read until end-of-file whatever the limit: past
//! `max_output_bytes` bytes are counted and dropped, so the child never
//! blocks on a full pipe and capsule's memory stays bounded (at most the
//! limit per stream, plus one read buffer). With `--json` the kept bytes go
//! into the result; otherwise they are written live to capsule's own
//! stdout/stderr, and a reader of those that goes away closes the run's
//! stream too (see [`pump`]).

use std::os::fd::OwnedFd;

use tokio::io::AsyncReadExt;

use crate::sys::stdio::{self, Own};

/// The exact marker that ends a truncated stream.
pub const TRUNCATION_MARKER: &str = "\n[...output truncated at byte limit]\n";

const CHUNK: usize = 256 * 1024;

/// Where a stream's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// Keep them for the JSON result.
    Capture,
    /// Write them to capsule's own stdout.
    Stdout,
    /// Write them to capsule's own stderr.
    Stderr,
}

/// What one stream produced (a part of the result).
pub use crate::result::Captured;

/// Read `fd` to end-of-file, keeping at most `limit` bytes.
///
/// Streaming (`Sink::Stdout`/`Sink::Stderr`): when the reader of capsule's
/// own stream goes away (EPIPE: `capsule exec -- yes | head -3`; EIO: a
/// terminal that hung up), capsule stops reading and closes its read end,
/// the pipe's last one. The run then
/// meets what it would meet without capsule: EPIPE, and SIGPIPE, on its next
/// write, and ends by itself with its own status; `closed` says so in the
/// result. (Draining on instead kept `yes` running to the wall-clock limit on
/// a full core.) Any other failure of capsule's stream (a full disk under
/// `> file`) only stops the copy: the run is drained, as before.
pub async fn pump(fd: OwnedFd, sink: Sink, limit: u64) -> Captured {
    let mut out = Captured::default();
    let mut rx = match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
        Ok(rx) => rx,
        Err(e) => {
            tracing::warn!("cannot watch an output pipe: {e}");
            return out;
        }
    };
    let mut writer = match sink {
        Sink::Capture => None,
        Sink::Stdout => Some(Own::Stdout),
        Sink::Stderr => Some(Own::Stderr),
    };
    // Not zeroed: a read touches only the pages it fills (most runs write
    // a few bytes, and zeroing 64 pages per stream was most of a step's
    // page faults in the supervisor).
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK);
    let mut kept: u64 = 0;
    loop {
        buf.clear();
        let n = match rx.read_buf(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!("output pipe read failed: {e}");
                break;
            }
        };
        out.total += n as u64;
        if out.truncated {
            // Past the limit nothing is kept: let the kernel drop the rest.
            out.total += discard(&rx).await;
            break;
        }
        let room = limit.saturating_sub(kept) as usize;
        let take = n.min(room);
        kept += take as u64;
        buf.truncate(take);
        if take < n {
            out.truncated = true;
        }
        match writer {
            None => {
                if out.data.capacity() == 0 && limit <= (16 << 20) {
                    // One allocation of exactly what can be kept, not a doubling series.
                    out.data
                        .reserve_exact(limit as usize + TRUNCATION_MARKER.len());
                }
                out.data.extend_from_slice(&buf);
                if out.truncated {
                    out.data.extend_from_slice(TRUNCATION_MARKER.as_bytes());
                }
            }
            Some(to) => {
                if out.truncated {
                    buf.extend_from_slice(TRUNCATION_MARKER.as_bytes());
                }
                let (back, written) = write_own(to, buf).await;
                buf = back;
                match written {
                    Ok(()) => {}
                    // The reader went away (EPIPE), or capsule's terminal
                    // hung up (EIO): so does the run's stream.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::EIO)) => {
                        out.closed = true;
                        drop(rx);
                        return out;
                    }
                    Err(e) => {
                        // Keep draining so the child is not blocked.
                        tracing::debug!(
                            "capsule's own {to:?} failed: {e}; the run's output is dropped"
                        );
                        writer = None;
                    }
                }
            }
        }
    }
    out
}

/// Write `buf` to capsule's own stream from tokio's blocking pool (a
/// terminal or a pipe to a slow reader blocks), handing the buffer back.
async fn write_own(to: Own, buf: Vec<u8>) -> (Vec<u8>, std::io::Result<()>) {
    let len = buf.capacity();
    match tokio::task::spawn_blocking(move || {
        let r = stdio::write_all(to, &buf);
        (buf, r)
    })
    .await
    {
        Ok(x) => x,
        Err(e) => (Vec::with_capacity(len), Err(std::io::Error::other(e))),
    }
}

/// Drain the pipe to end-of-file by splicing it into /dev/null (no copy
/// through capsule's memory); returns the bytes drained.
async fn discard(rx: &tokio::net::unix::pipe::Receiver) -> u64 {
    use std::os::fd::AsRawFd;
    let null = match std::fs::OpenOptions::new().write(true).open("/dev/null") {
        Ok(f) => f,
        Err(_) => return discard_by_reading(rx).await,
    };
    let mut total = 0u64;
    loop {
        if rx.readable().await.is_err() {
            return total;
        }
        loop {
            match rx.try_io(|| crate::sys::splice_out(rx.as_raw_fd(), null.as_raw_fd(), 1 << 20)) {
                Ok(0) => return total,
                Ok(n) => total += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    return total + discard_by_reading(rx).await
                }
                Err(_) => return total,
            }
        }
    }
}

/// The portable way: read and forget.
async fn discard_by_reading(rx: &tokio::net::unix::pipe::Receiver) -> u64 {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        if rx.readable().await.is_err() {
            return total;
        }
        match rx.try_read(&mut buf) {
            Ok(0) => return total,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return total,
        }
    }
}

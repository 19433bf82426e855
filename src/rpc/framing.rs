//! A bounded line reader: newline-delimited messages of at most `max` bytes.
//!
//! A longer line is not buffered: its bytes are discarded up to the next
//! newline and reported as [`Frame::TooLong`], so the connection stays usable
//! and memory stays bounded whatever the peer sends.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};

/// One unit read from the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its `\n` (and without a trailing `\r`).
    Line(Vec<u8>),
    /// A line longer than the limit; its bytes were thrown away.
    TooLong,
    /// End of stream.
    Eof,
}

pub struct LineReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    discarding: bool,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        LineReader {
            inner,
            max,
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// The next frame. Cancel-safe: partial state lives in `self`.
    pub async fn next_frame(&mut self) -> std::io::Result<Frame> {
        loop {
            let avail = self.inner.fill_buf().await?;
            if avail.is_empty() {
                if self.discarding {
                    self.discarding = false;
                    return Ok(Frame::TooLong);
                }
                if self.buf.is_empty() {
                    return Ok(Frame::Eof);
                }
                return Ok(self.take_line());
            }
            let (chunk_len, newline) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            if !self.discarding {
                if self.buf.len() + chunk_len > self.max {
                    self.discarding = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(&avail[..chunk_len]);
                }
            }
            self.inner.consume(chunk_len + usize::from(newline));
            if newline {
                if self.discarding {
                    self.discarding = false;
                    return Ok(Frame::TooLong);
                }
                return Ok(self.take_line());
            }
        }
    }

    fn take_line(&mut self) -> Frame {
        let mut line = std::mem::take(&mut self.buf);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        // Keep a modest buffer around; give back memory of big lines.
        if line.capacity() > 64 * 1024 {
            line.shrink_to_fit();
        }
        Frame::Line(line)
    }
}

impl<T: AsyncRead> LineReader<BufReader<T>> {
    /// Whether a complete line is already buffered (the next frame needs
    /// no read), so answers may wait to be written together.
    pub fn has_buffered_line(&self) -> bool {
        !self.discarding && self.inner.buffer().contains(&b'\n')
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn long_lines_are_skipped_and_reading_goes_on() {
        let mut data = b"short\r\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 100));
        data.extend(b"\nok\nexactly10\n0123456789A\ntail");
        // A tiny BufReader capacity forces lines to span many reads.
        let mut r = LineReader::new(BufReader::with_capacity(7, &data[..]), 10);
        assert_eq!(
            r.next_frame().await.unwrap(),
            Frame::Line(b"short".to_vec())
        );
        assert_eq!(r.next_frame().await.unwrap(), Frame::TooLong);
        assert_eq!(r.next_frame().await.unwrap(), Frame::Line(b"ok".to_vec()));
        assert_eq!(
            r.next_frame().await.unwrap(),
            Frame::Line(b"exactly10".to_vec())
        );
        assert_eq!(r.next_frame().await.unwrap(), Frame::TooLong);
        assert_eq!(r.next_frame().await.unwrap(), Frame::Line(b"tail".to_vec()));
        assert_eq!(r.next_frame().await.unwrap(), Frame::Eof);
    }

    #[tokio::test]
    async fn too_long_at_eof() {
        let data = [b'y'; 50];
        let mut r = LineReader::new(BufReader::with_capacity(8, &data[..]), 10);
        assert_eq!(r.next_frame().await.unwrap(), Frame::TooLong);
        assert_eq!(r.next_frame().await.unwrap(), Frame::Eof);
    }
}

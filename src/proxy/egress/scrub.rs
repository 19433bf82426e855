//! Bodies the engine relays: responses to bound requests with the credential's value
//! replaced by its placeholder (a server that echoes request headers must not hand
//! the value to the run), streamed with an overlap window of the longest value less
//! one byte, so memory stays bounded; and bodies that count their bytes (per host)
//! and stop an upload past its budget.
//!
//! Compressed bodies (`Content-Encoding: gzip`, ...) are scanned as they travel, that
//! is compressed: a value inside them is not found.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderValue};
use zeroize::Zeroizing;

use crate::proxy::refusal::{BoxError, ProxyBody};

/// Replaces each value by its placeholder in a stream of chunks. The values (and any
/// held-back piece of one) are wiped from memory when it is dropped.
pub struct Scrubber {
    /// (value, placeholder); empty values are left out.
    pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    carry: Zeroizing<Vec<u8>>,
    keep: usize,
}

impl Scrubber {
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Scrubber {
        let pairs: Vec<_> = pairs
            .into_iter()
            .map(|(v, p)| (Zeroizing::new(v), p))
            .filter(|(v, _)| !v.is_empty())
            .collect();
        let keep = pairs.iter().map(|(v, _)| v.len() - 1).max().unwrap_or(0);
        Scrubber {
            pairs,
            carry: Zeroizing::default(),
            keep,
        }
    }

    /// The scrubbed bytes that can go now; up to `keep` bytes wait for the next chunk.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        let (out, used) = self.replace(&buf, false);
        self.carry = Zeroizing::new(buf[used..].to_vec());
        out
    }

    /// What is left at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let buf = std::mem::take(&mut self.carry);
        self.replace(&buf, true).0
    }

    /// Replace what is complete in `buf`; returns the output and how much of `buf` it
    /// used. A match cannot start before `len - keep` without ending inside `buf`.
    fn replace(&self, buf: &[u8], last: bool) -> (Vec<u8>, usize) {
        let safe = if last {
            buf.len()
        } else {
            buf.len().saturating_sub(self.keep)
        };
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        while i < buf.len() {
            let found = self.pairs.iter().find(|(v, _)| buf[i..].starts_with(v));
            if let Some((v, p)) = found {
                out.extend_from_slice(p);
                i += v.len();
                continue;
            }
            if i >= safe {
                break;
            }
            out.push(buf[i]);
            i += 1;
        }
        (out, i)
    }

    /// Scrub header values (and trailers) in place.
    pub fn headers(&self, headers: &mut HeaderMap) {
        for v in headers.values_mut() {
            let bytes = self.replace(v.as_bytes(), true).0;
            if bytes != v.as_bytes() {
                // Placeholders are header-safe: the result is as valid as the input.
                if let Ok(new) = HeaderValue::from_bytes(&bytes) {
                    *v = new;
                }
            }
        }
    }
}

/// A body scrubbed by a [`Scrubber`].
pub struct ScrubBody {
    inner: ProxyBody,
    scrubber: Scrubber,
    /// Trailers waiting until the held-back bytes went out.
    pending: Option<Frame<Bytes>>,
    done: bool,
}

impl ScrubBody {
    pub fn new(inner: ProxyBody, scrubber: Scrubber) -> ScrubBody {
        ScrubBody {
            inner,
            scrubber,
            pending: None,
            done: false,
        }
    }
}

impl Body for ScrubBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(f) = this.pending.take() {
            return Poll::Ready(Some(Ok(f)));
        }
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(f))) => f,
                Poll::Ready(None) => {
                    this.done = true;
                    let rest = this.scrubber.finish();
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                }
            };
            match frame.into_data() {
                Ok(data) => {
                    let out = this.scrubber.push(&data);
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Err(mut frame) => {
                    if let Some(t) = frame.trailers_mut() {
                        this.scrubber.headers(t);
                    }
                    let rest = this.scrubber.finish();
                    if rest.is_empty() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    this.pending = Some(frame);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest)))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none()
    }
}

/// A body whose data bytes are added to counters; past `limit` (a shared counter and
/// its maximum) it ends with an error, which aborts the exchange.
pub struct Metered {
    inner: ProxyBody,
    counters: Vec<Arc<AtomicU64>>,
    limit: Option<(Arc<AtomicU64>, u64)>,
}

impl Metered {
    pub fn new(
        inner: ProxyBody,
        counters: Vec<Arc<AtomicU64>>,
        limit: Option<(Arc<AtomicU64>, u64)>,
    ) -> Metered {
        Metered {
            inner,
            counters,
            limit,
        }
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled {
            if let Some(data) = f.data_ref() {
                let n = data.len() as u64;
                for c in &this.counters {
                    c.fetch_add(n, Ordering::Relaxed);
                }
                if let Some((used, max)) = &this.limit {
                    if used.fetch_add(n, Ordering::Relaxed) + n > *max {
                        return Poll::Ready(Some(Err(Box::new(std::io::Error::other(
                            "capsule proxy: upload past network.allow_hosts max_upload_bytes",
                        )))));
                    }
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    const V: &[u8] = b"s3cr3t-value";
    const P: &[u8] = b"capsule-phantom-00";

    fn scrub_chunks(chunks: &[&[u8]]) -> Vec<u8> {
        let mut s = Scrubber::new(vec![(V.to_vec(), P.to_vec())]);
        let mut out = Vec::new();
        for c in chunks {
            let piece = s.push(c);
            assert!(s.carry.len() < V.len(), "bounded carry");
            out.extend(piece);
        }
        out.extend(s.finish());
        out
    }

    #[test]
    fn scrubs_across_every_chunk_boundary() {
        let text = [b"head ".as_slice(), V, b" mid ", V, V, b" tail s3cr3t"].concat();
        let want = [b"head ".as_slice(), P, b" mid ", P, P, b" tail s3cr3t"].concat();
        for a in 0..text.len() {
            for b in a..text.len() {
                let got = scrub_chunks(&[&text[..a], &text[a..b], &text[b..]]);
                assert_eq!(got, want, "split at {a},{b}");
            }
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(scrub_chunks(&bytes), want);
    }

    #[test]
    fn headers_are_scrubbed() {
        let s = Scrubber::new(vec![(V.to_vec(), P.to_vec())]);
        let mut h = HeaderMap::new();
        h.insert("x-echo", HeaderValue::from_static("Bearer s3cr3t-value"));
        h.insert("x-other", HeaderValue::from_static("fine"));
        s.headers(&mut h);
        assert_eq!(h["x-echo"], "Bearer capsule-phantom-00");
        assert_eq!(h["x-other"], "fine");
    }

    /// Frames handed out one by one.
    struct Frames(std::collections::VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(Ok))
        }
    }

    #[tokio::test]
    async fn scrub_body_streams_and_keeps_trailers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-t", HeaderValue::from_static("s3cr3t-value"));
        let frames = Frames(
            vec![
                Frame::data(Bytes::from_static(b"a s3cr3")),
                Frame::data(Bytes::from_static(b"t-value b s3c")),
                Frame::trailers(trailers),
            ]
            .into(),
        );
        let body = ScrubBody::new(
            frames.boxed(),
            Scrubber::new(vec![(V.to_vec(), P.to_vec())]),
        );
        let collected = body.collect().await.expect("collect");
        let t = collected.trailers().cloned().expect("trailers");
        assert_eq!(t["x-t"], "capsule-phantom-00");
        assert_eq!(&collected.to_bytes()[..], b"a capsule-phantom-00 b s3c");
    }

    #[tokio::test]
    async fn metered_counts_and_stops_past_the_limit() {
        let frames = Frames(
            (0..3)
                .map(|_| Frame::data(Bytes::from_static(b"12345")))
                .collect(),
        );
        let seen = Arc::new(AtomicU64::new(0));
        let used = Arc::new(AtomicU64::new(0));
        let body = Metered::new(frames.boxed(), vec![seen.clone()], Some((used, 12)));
        assert!(body.collect().await.is_err());
        assert_eq!(seen.load(Ordering::Relaxed), 15);
    }
}

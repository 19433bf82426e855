//! Bodies the engine relays: responses to bound requests with the credential's value
//! replaced by its placeholder (a server that echoes request headers must not hand
//! the value to the run), streamed with an overlap window of the longest needle less
//! one byte, so memory stays bounded; and bodies that count their bytes (per host)
//! and stop an upload past its budget.
//!
//! The needles of a value ([`needles`]): the value, its percent-encoded forms (how
//! `inject` puts it in a query), and its base64 "cores" (how `Basic` carries it,
//! whatever the username before it). Compressed bodies are never scanned: `gate`
//! asks the origin for `identity` and refuses a response encoded anyway.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderValue};
use zeroize::Zeroizing;

use super::inject::percent_encode;
use crate::proxy::refusal::{BoxError, ProxyBody};

/// Base64 cores shorter than this are not scrubbed (they would match too much);
/// values that short are not protected against re-encoded echoes (documented).
pub const MIN_CORE: usize = 8;

/// The base64 characters that depend on `value`'s bits only, at each of the three
/// alignments a prefix can give it (`prefix ++ value` encoded holds the core of
/// alignment `prefix.len() % 3`): for `k` in 0..3, `base64(k zero bytes ++ value)`
/// keeping the characters `i` with `6i >= 8k` and `6i + 6 <= 8k + 8n`. Cores shorter
/// than [`MIN_CORE`] are left out.
pub fn base64_cores(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    let n = value.len();
    (0..3usize)
        .filter_map(|k| {
            let first = (8 * k).div_ceil(6);
            let end = (8 * k + 8 * n) / 6;
            if end < first + MIN_CORE {
                return None;
            }
            let mut input = Zeroizing::new(Vec::with_capacity(k + n));
            input.resize(k, 0);
            input.extend_from_slice(value);
            let encoded = Zeroizing::new(STANDARD.encode(&*input).into_bytes());
            Some(Zeroizing::new(encoded[first..end].to_vec()))
        })
        .collect()
}

/// Every form of `value` a response is scrubbed of: the value; percent-encoded with
/// upper- and lower-case hex; its [`base64_cores`]. No duplicates, no empty one.
pub fn needles(value: &[u8]) -> Vec<Zeroizing<Vec<u8>>> {
    if value.is_empty() {
        return Vec::new();
    }
    let upper = Zeroizing::new(percent_encode(value).into_bytes());
    let lower = Zeroizing::new(lower_hex_escapes(&upper));
    let mut all = vec![Zeroizing::new(value.to_vec()), upper, lower];
    all.extend(base64_cores(value));
    let mut out: Vec<Zeroizing<Vec<u8>>> = Vec::with_capacity(all.len());
    for n in all {
        if !out.iter().any(|o| **o == *n) {
            out.push(n);
        }
    }
    out
}

/// `%2F` → `%2f`: the two characters after each `%` in lower case.
fn lower_hex_escapes(s: &[u8]) -> Vec<u8> {
    let mut out = s.to_vec();
    let mut i = 0;
    while i < out.len() {
        if out[i] == b'%' {
            for b in out.iter_mut().skip(i + 1).take(2) {
                b.make_ascii_lowercase();
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    out
}

/// Replaces each value by its placeholder in a stream of chunks. The values (and any
/// held-back piece of one) are wiped from memory when it is dropped.
pub struct Scrubber {
    /// (needle, placeholder), longest needle first; empty needles are left out.
    pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    carry: Zeroizing<Vec<u8>>,
    keep: usize,
}

impl Scrubber {
    /// A scrubber replacing each needle by its placeholder.
    pub fn new(pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>) -> Scrubber {
        let mut pairs: Vec<_> = pairs.into_iter().filter(|(v, _)| !v.is_empty()).collect();
        // Where two needles match at one place, the longer wins.
        pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
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
    /// used. Before `len - keep` every needle is decided within `buf` (so a short
    /// needle never pre-empts a longer one still arriving); the rest waits.
    fn replace(&self, buf: &[u8], last: bool) -> (Vec<u8>, usize) {
        let safe = if last {
            buf.len()
        } else {
            buf.len().saturating_sub(self.keep)
        };
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        while i < safe {
            let found = self.pairs.iter().find(|(v, _)| buf[i..].starts_with(v));
            if let Some((v, p)) = found {
                out.extend_from_slice(p);
                i += v.len();
                continue;
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

    /// A scrubber of `V` alone.
    fn one() -> Scrubber {
        Scrubber::new(vec![(Zeroizing::new(V.to_vec()), P.to_vec())])
    }

    /// A scrubber of every needle of `value`.
    fn all(value: &[u8]) -> Scrubber {
        let pairs = needles(value).into_iter().map(|n| (n, P.to_vec()));
        Scrubber::new(pairs.collect())
    }

    fn scrub_chunks(chunks: &[&[u8]]) -> Vec<u8> {
        let mut s = one();
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
    fn base64_cores_cover_every_prefix() {
        let value = b"s3cr3t/t0ken+value=";
        let cores = base64_cores(value);
        assert_eq!(cores.len(), 3);
        // One core per alignment: a prefix of length 0, 1 or 2 (mod 3) before it.
        for (prefix, k) in [("", 0), ("user:", 2), ("ab:", 0), ("x-access-token:", 0)] {
            let encoded = STANDARD.encode([prefix.as_bytes(), value].concat());
            let core = std::str::from_utf8(&cores[k]).expect("ascii");
            assert!(encoded.contains(core), "{prefix:?}: {encoded} lacks {core}");
        }
        for (prefix, k) in [
            ("u:", 2),
            ("me:", 0),
            ("a", 1),
            ("user:x", 0),
            ("__token__:", 1),
        ] {
            let encoded = STANDARD.encode([prefix.as_bytes(), value].concat());
            let core = std::str::from_utf8(&cores[k]).expect("ascii");
            assert!(encoded.contains(core), "{prefix:?}: {encoded} lacks {core}");
            // A suffix after the value does not change its core either.
            let more = STANDARD.encode([prefix.as_bytes(), value, b"@tail"].concat());
            assert!(more.contains(core), "{prefix:?} with a tail");
        }
        // Only the value's own bits: the core of alignment 0 is the value's
        // base64 without its last, partly padded, character.
        assert_eq!(&cores[0][..], &STANDARD.encode(value).as_bytes()[..25]);
        // Short values: cores under MIN_CORE characters are left out.
        assert!(base64_cores(b"abcde").is_empty());
        assert_eq!(base64_cores(b"abcdef").len(), 1);
        assert_eq!(base64_cores(b"abcdefg").len(), 3);
    }

    #[test]
    fn needles_hold_every_form_once() {
        let n = needles(b"a/b c");
        let forms: Vec<&[u8]> = n.iter().map(|v| &v[..]).collect();
        assert_eq!(forms, vec![&b"a/b c"[..], b"a%2Fb%20c", b"a%2fb%20c"]);
        assert_eq!(needles(b"plain").len(), 1);
        assert!(needles(b"").is_empty());
    }

    #[test]
    fn echoes_in_every_encoding_are_scrubbed_across_chunks() {
        let value = b"AKIAsecret/key+with=reserved";
        let pct = percent_encode(value);
        let basic = STANDARD.encode([b"someone:".as_slice(), value].concat());
        let text = format!(
            "raw {} pct {pct} low {} basic {basic} end",
            String::from_utf8_lossy(value),
            String::from_utf8_lossy(&lower_hex_escapes(pct.as_bytes()))
        );
        for size in [1, 2, 3, 7, 64] {
            let mut s = all(value);
            let mut out = Vec::new();
            for c in text.as_bytes().chunks(size) {
                out.extend(s.push(c));
                assert!(s.carry.len() < s.keep + 1, "bounded carry");
            }
            out.extend(s.finish());
            let out = String::from_utf8(out).expect("utf-8");
            assert!(!out.contains("secret"), "{size}: {out}");
            let decoded = out
                .split(' ')
                .filter_map(|w| STANDARD.decode(w).ok())
                .any(|d| d.windows(6).any(|w| w == b"secret"));
            assert!(!decoded, "{size}: {out}");
            assert!(
                out.starts_with(
                    "raw capsule-phantom-00 pct capsule-phantom-00 low capsule-phantom-00 basic "
                ),
                "{out}"
            );
        }
    }

    #[test]
    fn headers_are_scrubbed() {
        let s = one();
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
        let body = ScrubBody::new(frames.boxed(), one());
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

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

use aho_corasick::{AhoCorasick, Input, MatchKind};
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
/// held-back piece of one) are wiped from memory when it is dropped; the automaton's
/// own tables (a copy of the needles, see Cargo.toml) are not.
///
/// Semantics: scanning left to right, at the first position where some needle
/// starts the longest one there is replaced and the scan goes on after it; a match
/// is decided only once `keep` (longest needle less one) bytes follow its start, so
/// chunking never changes the output.
pub struct Scrubber {
    /// (needle, placeholder), longest needle first; no empty or repeated needle.
    pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// Leftmost-longest automaton over `pairs` (pattern `i` is `pairs[i]`); `None`
    /// when there is no needle or it could not be built (then a plain scan).
    matcher: Option<AhoCorasick>,
    /// Held back: at most `keep` bytes whose fate the next chunk decides.
    carry: Zeroizing<Vec<u8>>,
    /// Scratch for `carry` followed by the first `keep` bytes of a chunk.
    seam: Zeroizing<Vec<u8>>,
    keep: usize,
}

impl Scrubber {
    /// A scrubber replacing each needle by its placeholder.
    pub fn new(pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>) -> Scrubber {
        let mut kept: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = Vec::with_capacity(pairs.len());
        for (v, p) in pairs {
            // A repeated needle: its first placeholder wins (as the first listed did).
            if !v.is_empty() && !kept.iter().any(|(k, _)| **k == *v) {
                kept.push((v, p));
            }
        }
        // Where two needles match at one place, the longer wins.
        kept.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let keep = kept.iter().map(|(v, _)| v.len() - 1).max().unwrap_or(0);
        let matcher = if kept.is_empty() {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(kept.iter().map(|(v, _)| &v[..]))
                .ok()
        };
        Scrubber {
            pairs: kept,
            matcher,
            carry: Zeroizing::new(Vec::with_capacity(keep)),
            seam: Zeroizing::new(Vec::with_capacity(2 * keep)),
            keep,
        }
    }

    /// The scrubbed bytes that can go now; up to `keep` bytes wait for the next chunk.
    /// The held-back bytes are scanned again only with the chunk's first `keep`
    /// bytes (the seam); the rest of the chunk is scanned in place, once.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.carry.len() + chunk.len() + 64);
        let c = self.carry.len();
        // Positions (in carry ++ chunk) before `safe` are decided now.
        let safe = (c + chunk.len()).saturating_sub(self.keep);
        let mut at = 0; // position in the chunk where its own scan begins
        if c > 0 {
            let mut seam = std::mem::take(&mut self.seam);
            seam.clear();
            seam.extend_from_slice(&self.carry);
            seam.extend_from_slice(&chunk[..chunk.len().min(self.keep)]);
            // Every match starting in the carry ends within the seam.
            let stop = self.scan(&seam, 0, safe.min(c), &mut out);
            self.carry.clear();
            if stop < c {
                // The chunk is shorter than `keep`: the seam is all there is.
                self.carry.extend_from_slice(&seam[stop..]);
                self.seam = seam;
                return out;
            }
            at = stop - c;
            self.seam = seam;
        }
        let stop = self.scan(chunk, at, safe.saturating_sub(c), &mut out);
        self.carry.clear();
        self.carry.extend_from_slice(&chunk[stop..]);
        out
    }

    /// What is left at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let carry = std::mem::take(&mut self.carry);
        let mut out = Vec::with_capacity(carry.len());
        self.scan(&carry, 0, carry.len(), &mut out);
        out
    }

    /// Append `hay[from..]` to `out`, needles replaced, as far as matches starting
    /// before `safe` decide; returns where it stopped (`safe`, or the end of a match
    /// crossing it). Stretches between matches go in one copy each.
    fn scan(&self, hay: &[u8], from: usize, safe: usize, out: &mut Vec<u8>) -> usize {
        let mut at = from;
        while at < safe {
            match self.find(hay, at) {
                Some((start, end, i)) if start < safe => {
                    out.extend_from_slice(&hay[at..start]);
                    out.extend_from_slice(&self.pairs[i].1);
                    at = end;
                }
                _ => {
                    out.extend_from_slice(&hay[at..safe]);
                    at = safe;
                }
            }
        }
        at
    }

    /// The leftmost match in `hay[from..]`, longest there: (start, end, pair index).
    fn find(&self, hay: &[u8], from: usize) -> Option<(usize, usize, usize)> {
        if let Some(ac) = &self.matcher {
            let m = ac.find(Input::new(hay).range(from..))?;
            return Some((m.start(), m.end(), m.pattern().as_usize()));
        }
        (from..hay.len()).find_map(|at| {
            let i = self
                .pairs
                .iter()
                .position(|(v, _)| hay[at..].starts_with(v))?;
            Some((at, at + self.pairs[i].0.len(), i))
        })
    }

    /// Scrub header values (and trailers) in place.
    pub fn headers(&self, headers: &mut HeaderMap) {
        for v in headers.values_mut() {
            let mut bytes = Vec::with_capacity(v.len());
            self.scan(v.as_bytes(), 0, v.len(), &mut bytes);
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
    use proptest::prelude::Strategy;

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

    /// The scrubber as it was (byte by byte, longest needle first), on the whole input
    /// at once: the reference the streaming one must equal.
    fn reference(pairs: &[(Vec<u8>, Vec<u8>)], input: &[u8]) -> Vec<u8> {
        let mut sorted: Vec<_> = pairs.iter().filter(|(v, _)| !v.is_empty()).collect();
        sorted.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let mut out = Vec::new();
        let mut i = 0;
        while i < input.len() {
            match sorted.iter().find(|(v, _)| input[i..].starts_with(v)) {
                Some((v, p)) => {
                    out.extend_from_slice(p);
                    i += v.len();
                }
                None => {
                    out.push(input[i]);
                    i += 1;
                }
            }
        }
        out
    }

    /// Needles over a small alphabet (so matches, overlaps, prefixes of one another
    /// and repeats are frequent), some empty; placeholders that may look like needles.
    fn pairs_strategy() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
        let needle = proptest::collection::vec(proptest::sample::select(b"ab".to_vec()), 0..7);
        let placeholder =
            proptest::collection::vec(proptest::sample::select(b"abXY".to_vec()), 0..4);
        proptest::collection::vec((needle, placeholder), 0..6)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn streaming_equals_the_reference(
            pairs in pairs_strategy(),
            input in proptest::collection::vec(proptest::sample::select(b"abc".to_vec()), 0..300),
            cuts in proptest::collection::vec(0usize..40, 0..30),
        ) {
            let want = reference(&pairs, &input);
            let mut s = Scrubber::new(
                pairs.iter().map(|(v, p)| (Zeroizing::new(v.clone()), p.clone())).collect(),
            );
            let mut got = Vec::new();
            let mut rest = &input[..];
            for n in cuts {
                let (chunk, tail) = rest.split_at(n.min(rest.len()));
                got.extend(s.push(chunk));
                proptest::prop_assert!(s.carry.len() <= s.keep, "bounded carry");
                rest = tail;
            }
            got.extend(s.push(rest));
            got.extend(s.finish());
            proptest::prop_assert_eq!(&got, &want);
            let mut whole = Vec::new();
            s.scan(&input, 0, input.len(), &mut whole);
            proptest::prop_assert_eq!(&whole, &want);
            // The plain scan (no automaton) agrees as well.
            s.matcher = None;
            let mut plain = Vec::new();
            s.scan(&input, 0, input.len(), &mut plain);
            proptest::prop_assert_eq!(&plain, &want);
        }
    }

    /// Throughput of the hot path: 256 MiB in 64 KiB chunks, 6 needles of 40 bytes,
    /// one echo per chunk and one across every chunk boundary. Release:
    /// `cargo test --release --lib scrub -- --ignored --nocapture`.
    #[test]
    #[ignore = "benchmark; run in release with --ignored --nocapture"]
    fn bench_scrub_throughput() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut printable = || b' ' + (next() % 95) as u8;
        let needles: Vec<Vec<u8>> = (0..6)
            .map(|_| (0..40).map(|_| printable()).collect())
            .collect();
        let mut chunk: Vec<u8> = (0..64 * 1024).map(|_| printable()).collect();
        chunk[1000..1040].copy_from_slice(&needles[1]);
        let n = chunk.len();
        chunk[n - 20..].copy_from_slice(&needles[2][..20]);
        chunk[..20].copy_from_slice(&needles[2][20..]);
        let pairs = needles
            .iter()
            .map(|v| (Zeroizing::new(v.clone()), P.to_vec()));
        let mut s = Scrubber::new(pairs.collect());
        let total = 256usize << 20;
        let start = std::time::Instant::now();
        let mut out = 0usize;
        for _ in 0..total / chunk.len() {
            out += std::hint::black_box(s.push(&chunk)).len();
        }
        out += s.finish().len();
        let secs = start.elapsed().as_secs_f64();
        let per_chunk = n + 2 * P.len() - 80;
        assert_eq!(
            out,
            total / n * per_chunk + 40 - P.len(),
            "every echo replaced"
        );
        eprintln!("scrub: {:.0} MB/s", total as f64 / secs / 1e6);
    }
}

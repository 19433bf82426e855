//! The per-connection loop: read bounded lines, answer quick methods inline,
//! run the others as tasks (at most [`MAX_IN_FLIGHT`] at once), and write
//! every answer from this one loop.
//!
//! The hot path (`ping` and other quick methods) costs no task, channel or
//! allocation per request: the answer is serialized straight into the
//! output buffer, which is flushed only when no further request is already
//! buffered (so a pipelining peer gets its answers in large writes, and a
//! peer waiting for one answer gets it at once). Nothing the peer sends can
//! make this panic or grow without bound; a slow or silent peer only stalls
//! itself.
//!
//! Nor can it make capsule spend its CPU without bound: every request is
//! read, parsed and (for the quick methods) answered on capsule's CPU,
//! outside every limit of the run, and a pipelining peer costs itself a
//! fraction of that (11 M pings in 8 s cost capsule 4.4 s and the run 0.6 s;
//! 1 MiB lines of nested JSON 42 times the run's CPU). So the loop paces
//! the peer ([`Pace`]): each line costs its length, its quick answer's and
//! [`FRAME_COST`], from a burst of [`PACE_BURST`] refilled at
//! [`PACE_RATE`] a second; past it the loop stops reading (the peer waits,
//! as for a slow reader) until the pace allows the next line. Ordinary
//! clients never meet it: 16 MiB of burst is 160 000 pipelined pings, and
//! 4 MiB/s sustains 40 000 pings a second (performance.md asks 20 000).

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use super::broker::Broker;
use super::framing::{Frame, LineReader};
use super::protocol::{self, Incoming, Reason, RpcFault, MAX_LINE_BYTES};

/// Requests running at once; the reader waits (and so does the peer) beyond.
pub const MAX_IN_FLIGHT: usize = 64;
/// Answers of finished tasks waiting for the loop.
const ANSWER_QUEUE: usize = 256;
/// Flush even while more requests are buffered once this much is pending.
const FLUSH_AT: usize = 64 * 1024;
/// What every line costs the pace beyond its bytes (an empty line is work too).
pub const FRAME_COST: usize = 64;
/// The pace's burst, in bytes of work.
pub const PACE_BURST: usize = 16 << 20;
/// The pace's refill, in bytes of work a second.
pub const PACE_RATE: usize = 4 << 20;

/// A token bucket over the peer's work (see the module docs). The clock is
/// read only when the bucket runs dry, never per line.
struct Pace {
    tokens: f64,
    last: tokio::time::Instant,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            tokens: PACE_BURST as f64,
            last: tokio::time::Instant::now(),
        }
    }

    /// Charge `cost`; how long the loop must wait before it reads on.
    fn charge(&mut self, cost: usize) -> Option<std::time::Duration> {
        self.tokens -= cost as f64;
        if self.tokens >= 0.0 {
            return None;
        }
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * PACE_RATE as f64;
        self.last = now;
        self.tokens = (self.tokens + refill).min(PACE_BURST as f64);
        (self.tokens < 0.0)
            .then(|| std::time::Duration::from_secs_f64(-self.tokens / PACE_RATE as f64))
    }
}

/// Serve one connection until the peer closes it (or stops reading answers).
/// Requests in flight at end-of-file are finished and answered; dropping
/// this future aborts them (tool process groups are killed).
pub async fn serve(stream: UnixStream, broker: Arc<Broker>) {
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(ANSWER_QUEUE);
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut lines = LineReader::new(BufReader::with_capacity(64 * 1024, rd), MAX_LINE_BYTES);
    let mut out: Vec<u8> = Vec::with_capacity(FLUSH_AT);
    let mut eof = false;
    let mut pace = Pace::new();

    loop {
        while tasks.try_join_next().is_some() {}
        while let Ok(answer) = rx.try_recv() {
            out.extend_from_slice(&answer);
        }
        if !out.is_empty() && (eof || !lines.has_buffered_line() || out.len() >= FLUSH_AT) {
            if let Err(e) = wr.write_all(&out).await {
                tracing::debug!(error = %e, "rpc: peer stopped reading answers; closing");
                break;
            }
            out.clear();
            if out.capacity() > 4 * FLUSH_AT {
                out.shrink_to(FLUSH_AT);
            }
        }
        if eof {
            // Finish what is in flight, answering as results come.
            if tasks.is_empty() && rx.is_empty() {
                break;
            }
            tokio::select! {
                Some(answer) = rx.recv() => out.extend_from_slice(&answer),
                _ = tasks.join_next() => {}
            }
            continue;
        }
        let frame = tokio::select! {
            biased;
            Some(answer) = rx.recv() => {
                out.extend_from_slice(&answer);
                continue;
            }
            f = lines.next_frame() => f,
        };
        let mark = out.len();
        let line = match frame {
            Ok(Frame::Line(l)) => l,
            Ok(Frame::Eof) => {
                eof = true;
                continue;
            }
            Ok(Frame::TooLong) => {
                let fault = RpcFault::new(Reason::InputTooLarge, "message larger than 1 MiB");
                out.extend_from_slice(&protocol::error_line(&Value::Null, &fault));
                if let Some(wait) = pace.charge(FRAME_COST + MAX_LINE_BYTES) {
                    if flush_and_wait(&mut wr, &mut out, wait).await.is_err() {
                        break;
                    }
                }
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "rpc: read failed; closing");
                eof = true;
                continue;
            }
        };
        if !line.iter().all(u8::is_ascii_whitespace)
            && !handle(&line, &broker, &mut out, &mut rx, &permits, &tx, &mut tasks).await
        {
            break;
        }
        let cost = FRAME_COST + line.len() + out.len().saturating_sub(mark);
        if let Some(wait) = pace.charge(cost) {
            if flush_and_wait(&mut wr, &mut out, wait).await.is_err() {
                break;
            }
        }
    }
}

/// Write what is pending, then wait `wait` (the pace); Err when the peer
/// stopped reading answers.
async fn flush_and_wait(
    wr: &mut tokio::net::unix::OwnedWriteHalf,
    out: &mut Vec<u8>,
    wait: std::time::Duration,
) -> std::io::Result<()> {
    if !out.is_empty() {
        if let Err(e) = wr.write_all(out).await {
            tracing::debug!(error = %e, "rpc: peer stopped reading answers; closing");
            return Err(e);
        }
        out.clear();
    }
    tokio::time::sleep(wait).await;
    Ok(())
}

/// Answer one line (quick methods and errors into `out`, the others as
/// tasks); false when the connection must close.
async fn handle(
    line: &[u8],
    broker: &Arc<Broker>,
    out: &mut Vec<u8>,
    rx: &mut mpsc::Receiver<Vec<u8>>,
    permits: &Arc<Semaphore>,
    tx: &mpsc::Sender<Vec<u8>>,
    tasks: &mut JoinSet<()>,
) -> bool {
    match protocol::parse_line(line) {
        Incoming::Invalid { id, fault } => {
            out.extend_from_slice(&protocol::error_line(&id, &fault));
        }
        Incoming::Notification { method } => {
            tracing::trace!(%method, "rpc: notification ignored")
        }
        Incoming::Ignored => {}
        Incoming::Request { id, method, params } => {
            if broker.answer_quick(&id, &method, &params, out) {
                return true;
            }
            // Wait for a slot; answers keep flowing meanwhile.
            let permit = loop {
                tokio::select! {
                    biased;
                    Some(answer) = rx.recv() => out.extend_from_slice(&answer),
                    p = permits.clone().acquire_owned() => break p,
                }
            };
            let Ok(permit) = permit else { return false };
            let broker = broker.clone();
            let tx = tx.clone();
            tasks.spawn(async move {
                let answer = broker.answer(&id, &method, params).await;
                let _ = tx.send(answer).await;
                drop(permit);
            });
        }
    }
    true
}

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
        let line = match frame {
            Ok(Frame::Line(l)) => l,
            Ok(Frame::Eof) => {
                eof = true;
                continue;
            }
            Ok(Frame::TooLong) => {
                let fault = RpcFault::new(Reason::InputTooLarge, "message larger than 1 MiB");
                out.extend_from_slice(&protocol::error_line(&Value::Null, &fault));
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "rpc: read failed; closing");
                eof = true;
                continue;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match protocol::parse_line(&line) {
            Incoming::Invalid { id, fault } => {
                out.extend_from_slice(&protocol::error_line(&id, &fault));
            }
            Incoming::Notification { method } => {
                tracing::trace!(%method, "rpc: notification ignored")
            }
            Incoming::Ignored => {}
            Incoming::Request { id, method, params } => {
                if broker.answer_quick(&id, &method, &params, &mut out) {
                    continue;
                }
                // Wait for a slot; answers keep flowing meanwhile.
                let permit = loop {
                    tokio::select! {
                        biased;
                        Some(answer) = rx.recv() => out.extend_from_slice(&answer),
                        p = permits.clone().acquire_owned() => break p,
                    }
                };
                let Ok(permit) = permit else { break };
                let broker = broker.clone();
                let tx = tx.clone();
                tasks.spawn(async move {
                    let answer = broker.answer(&id, &method, params).await;
                    let _ = tx.send(answer).await;
                    drop(permit);
                });
            }
        }
    }
}

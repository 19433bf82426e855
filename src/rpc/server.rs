//! The per-connection loop: read bounded lines, answer quick methods inline,
//! run the others as tasks (at most [`MAX_IN_FLIGHT`] at once), and write
//! answers through one bounded queue. Nothing the peer sends can make this
//! panic or grow without bound; a slow or silent peer only stalls itself.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use super::broker::Broker;
use super::framing::{Frame, LineReader};
use super::protocol::{self, Incoming, Reason, RpcFault, MAX_LINE_BYTES};

/// Requests running at once; the reader waits (and so does the peer) beyond.
pub const MAX_IN_FLIGHT: usize = 64;
/// Answers queued for writing.
const WRITE_QUEUE: usize = 256;

/// Serve one connection until the peer closes it (or stops reading answers).
/// Requests in flight at EOF are finished and answered; dropping this future
/// aborts them (tool process groups are killed).
pub async fn serve(stream: UnixStream, broker: Arc<Broker>) {
    let (rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
    let mut writer = JoinSet::new();
    writer.spawn(write_loop(wr, rx));
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut lines = LineReader::new(BufReader::with_capacity(64 * 1024, rd), MAX_LINE_BYTES);

    loop {
        while tasks.try_join_next().is_some() {}
        if tx.is_closed() {
            break;
        }
        let frame = match lines.next_frame().await {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(error = %e, "rpc: read failed; closing");
                break;
            }
        };
        let line = match frame {
            Frame::Eof => break,
            Frame::TooLong => {
                let fault = RpcFault::new(Reason::InputTooLarge, "message larger than 1 MiB");
                if tx
                    .send(protocol::error_line(&Value::Null, &fault))
                    .await
                    .is_err()
                {
                    break;
                }
                continue;
            }
            Frame::Line(l) => l,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match protocol::parse_line(&line) {
            Incoming::Invalid { id, fault } => {
                if tx.send(protocol::error_line(&id, &fault)).await.is_err() {
                    break;
                }
            }
            Incoming::Notification { method } => {
                tracing::trace!(%method, "rpc: notification ignored")
            }
            Incoming::Ignored => {}
            Incoming::Request { id, method, params } => {
                drop(line);
                if Broker::is_quick(&method) {
                    let answer = broker.answer(&id, &method, params).await;
                    if tx.send(answer).await.is_err() {
                        break;
                    }
                    continue;
                }
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
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
    while tasks.join_next().await.is_some() {}
    drop(tx);
    while writer.join_next().await.is_some() {}
}

async fn write_loop(wr: OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut w = BufWriter::with_capacity(64 * 1024, wr);
    while let Some(line) = rx.recv().await {
        if w.write_all(&line).await.is_err() {
            return;
        }
        // Batch whatever else is ready before one flush.
        while let Ok(more) = rx.try_recv() {
            if w.write_all(&more).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}

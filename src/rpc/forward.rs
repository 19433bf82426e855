//! `forward: true` tools: relayed over `--tool-fd` to the program that
//! started capsule, with the same framing (one JSON-RPC message a line).
//!
//! capsule sends `{"jsonrpc":"2.0","id":N,"method":"tools/call","params":
//! {"name","arguments"}}` with its own ids (so calls from the child are
//! multiplexed safely) and expects one answer line per id: a `result`
//! (`content`, optional `structuredContent`, `isError`) or an `error`.
//! The allowlist, `max_calls` and the tool's timeout are applied by capsule
//! before and around the relay; a late answer is dropped.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, OnceCell};

use super::framing::{Frame, LineReader};
use super::protocol::{code, Reason, RpcFault, MAX_LINE_BYTES};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// Relays calls over the tool fd; the connection is set up on first use
/// (inside the runtime).
pub struct Forwarder {
    fd: Mutex<Option<OwnedFd>>,
    link: OnceCell<Option<Link>>,
}

struct Link {
    tx: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    next_id: AtomicU64,
    closed: Arc<AtomicBool>,
}

impl Forwarder {
    pub fn new(fd: Option<OwnedFd>) -> Forwarder {
        // The descriptor was inherited without close-on-exec; host tool
        // processes (and nested capsules) must not inherit it too.
        if let Some(fd) = &fd {
            use nix::fcntl::{fcntl, FcntlArg, FdFlag};
            if let Err(e) = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)) {
                tracing::warn!(error = %e, "--tool-fd: cannot set close-on-exec");
            }
        }
        Forwarder {
            fd: Mutex::new(fd),
            link: OnceCell::new(),
        }
    }

    async fn link(&self) -> Option<&Link> {
        self.link
            .get_or_init(|| async {
                let fd = self.fd.lock().ok()?.take()?;
                match connect(fd) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot use --tool-fd");
                        None
                    }
                }
            })
            .await
            .as_ref()
    }

    /// Relay one call and wait for its answer (at most `timeout`).
    pub async fn call(
        &self,
        name: &str,
        arguments: &Value,
        timeout: Duration,
    ) -> Result<Value, RpcFault> {
        let Some(link) = self.link().await else {
            return Err(RpcFault::new(
                Reason::ToolFailed,
                format!("tool '{name}' is answered over --tool-fd, and capsule was started without a usable one"),
            ));
        };
        if link.closed.load(Ordering::SeqCst) {
            return Err(closed(name));
        }
        let id = link.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = link.pending.lock() {
            p.insert(id, tx);
        }
        let _cleanup = RemoveOnDrop {
            pending: &link.pending,
            id,
        };
        let mut line = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }))
        .unwrap_or_default();
        line.push(b'\n');
        let exchange = async {
            link.tx.send(line).await.map_err(|_| closed(name))?;
            rx.await.map_err(|_| closed(name))
        };
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(RpcFault::new(
                    Reason::Timeout,
                    format!(
                        "tool '{name}' did not answer within {:.3} s",
                        timeout.as_secs_f64()
                    ),
                ))
            }
        };
        interpret(name, answer)
    }
}

struct RemoveOnDrop<'a> {
    pending: &'a Pending,
    id: u64,
}

impl Drop for RemoveOnDrop<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&self.id);
        }
    }
}

fn closed(name: &str) -> RpcFault {
    RpcFault::new(
        Reason::ToolFailed,
        format!("tool '{name}': the program serving --tool-fd closed it"),
    )
}

fn connect(fd: OwnedFd) -> std::io::Result<Link> {
    let std_stream = std::os::unix::net::UnixStream::from(fd);
    std_stream.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(std_stream)?;
    let (rd, wr) = stream.into_split();
    let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
    let closed = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(write_loop(wr, rx, closed.clone()));
    tokio::spawn(read_loop(rd, pending.clone(), closed.clone()));
    Ok(Link {
        tx,
        pending,
        next_id: AtomicU64::new(1),
        closed,
    })
}

async fn write_loop(wr: OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>, closed: Arc<AtomicBool>) {
    let mut w = BufWriter::new(wr);
    while let Some(line) = rx.recv().await {
        if w.write_all(&line).await.is_err() || w.flush().await.is_err() {
            closed.store(true, Ordering::SeqCst);
            return;
        }
    }
}

async fn read_loop(rd: OwnedReadHalf, pending: Pending, closed: Arc<AtomicBool>) {
    let mut lines = LineReader::new(BufReader::new(rd), MAX_LINE_BYTES);
    loop {
        match lines.next_frame().await {
            Ok(Frame::Line(l)) => {
                let Ok(v) = serde_json::from_slice::<Value>(&l) else {
                    tracing::warn!("--tool-fd: ignoring a line that is not JSON");
                    continue;
                };
                let Some(id) = v.get("id").and_then(Value::as_u64) else {
                    tracing::warn!("--tool-fd: ignoring a message without a numeric id");
                    continue;
                };
                let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
                match waiter {
                    Some(w) => {
                        let _ = w.send(v);
                    }
                    None => tracing::debug!(
                        id,
                        "--tool-fd: answer for no pending call (late or unknown)"
                    ),
                }
            }
            Ok(Frame::TooLong) => tracing::warn!("--tool-fd: ignoring a line over 1 MiB"),
            Ok(Frame::Eof) | Err(_) => break,
        }
    }
    closed.store(true, Ordering::SeqCst);
    // Wake every waiter: their senders are dropped.
    if let Ok(mut p) = pending.lock() {
        p.clear();
    }
}

/// Turn the caller's answer into our result (normalised) or error.
fn interpret(name: &str, answer: Value) -> Result<Value, RpcFault> {
    if let Some(err) = answer.get("error") {
        let msg: String = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the tool failed")
            .chars()
            .take(500)
            .collect();
        let reason = err
            .pointer("/data/reason")
            .and_then(Value::as_str)
            .and_then(Reason::parse);
        return Err(match reason {
            Some(r) => RpcFault::new(r, msg),
            None => RpcFault::with_code(code::UPSTREAM, Reason::ToolFailed, msg),
        });
    }
    let Some(Value::Object(result)) = answer.get("result") else {
        return Err(RpcFault::new(
            Reason::ToolFailed,
            format!("tool '{name}': the --tool-fd answer has no result"),
        ));
    };
    let content = match result.get("content") {
        Some(Value::Array(a)) => Value::Array(a.clone()),
        None => json!([]),
        Some(_) => {
            return Err(RpcFault::new(
                Reason::ToolFailed,
                format!("tool '{name}': the --tool-fd answer's content is not a list"),
            ))
        }
    };
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut out = json!({"content": content, "isError": is_error});
    if let Some(s) = result.get("structuredContent") {
        out["structuredContent"] = s.clone();
    }
    Ok(out)
}

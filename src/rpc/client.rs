//! The blocking client used inside the sandbox (`capsule rpc METHOD JSON`):
//! one request on `$CAPSULE_RPC_FD`, wait for the answer with the same id.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;

use serde_json::{json, Value};

/// Answers are at most 1 MiB a line; allow a little slack.
const MAX_ANSWER_BYTES: u64 = 2 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("CAPSULE_RPC_FD is not set: not running under capsule with an RPC pipe")]
    NoFd,
    #[error("CAPSULE_RPC_FD={0:?} is not a usable file descriptor")]
    BadFd(String),
    #[error("rpc i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("rpc: the parent closed the pipe without answering")]
    Closed,
    #[error("rpc: malformed answer: {0}")]
    Protocol(String),
    /// The parent answered with a JSON-RPC error.
    #[error("{message} ({reason}, code {code})")]
    Rpc {
        code: i64,
        reason: String,
        message: String,
    },
}

/// Call `method` with `params` over `$CAPSULE_RPC_FD` and return `result`.
pub fn call(method: &str, params: Value) -> Result<Value, ClientError> {
    let raw = std::env::var("CAPSULE_RPC_FD").map_err(|_| ClientError::NoFd)?;
    let fd: RawFd = raw
        .trim()
        .parse()
        .map_err(|_| ClientError::BadFd(raw.clone()))?;
    if fd < 0 {
        return Err(ClientError::BadFd(raw));
    }
    // Duplicate so the inherited fd stays open for the next call.
    let dup = crate::sys::dup_cloexec(fd, 3).map_err(|_| ClientError::BadFd(raw))?;
    call_on(UnixStream::from(dup), method, params)
}

/// Same, on a given stream (tests, or an fd obtained otherwise).
pub fn call_on(stream: UnixStream, method: &str, params: Value) -> Result<Value, ClientError> {
    let id = format!("capsule-rpc-{}-{}", std::process::id(), ulid::Ulid::new());
    let mut line = serde_json::to_vec(
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .map_err(|e| ClientError::Protocol(e.to_string()))?;
    line.push(b'\n');
    (&stream).write_all(&line)?;
    let mut reader = BufReader::new(&stream);
    loop {
        let mut buf = Vec::new();
        let n = (&mut reader)
            .take(MAX_ANSWER_BYTES)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Err(ClientError::Closed);
        }
        if !buf.ends_with(b"\n") && n as u64 >= MAX_ANSWER_BYTES {
            return Err(ClientError::Protocol("answer line too long".into()));
        }
        let v: Value =
            serde_json::from_slice(&buf).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if v.get("id").and_then(Value::as_str) != Some(id.as_str()) {
            continue; // someone else's answer on a shared fd
        }
        if let Some(err) = v.get("error") {
            return Err(ClientError::Rpc {
                code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                reason: err
                    .pointer("/data/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                message: err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            });
        }
        return v
            .get("result")
            .cloned()
            .ok_or_else(|| ClientError::Protocol("answer without result".into()));
    }
}

/// `capsule rpc METHOD [JSON]`: prints the result on stdout (exit 0) or the
/// error object on stderr (exit 1; 2 for usage/transport problems).
pub fn run_cli(method: &str, params: Option<&str>) -> i32 {
    let params = match params {
        None => json!({}),
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("capsule rpc: params are not valid JSON: {e}");
                return 2;
            }
        },
    };
    match call(method, params) {
        Ok(v) => {
            println!("{v}");
            0
        }
        Err(ClientError::Rpc {
            code,
            reason,
            message,
        }) => {
            eprintln!(
                "{}",
                json!({"code": code, "message": message, "data": {"reason": reason}})
            );
            1
        }
        Err(e) => {
            eprintln!("capsule rpc: {e}");
            2
        }
    }
}

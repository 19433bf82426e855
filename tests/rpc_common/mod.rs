//! Shared helpers for the RPC end-to-end tests: the real `capsule` binary,
//! a temp dir with its own XDG config/state (never the user's), a JSON-lines
//! driver that runs inside the sandbox, and a fake LLM provider on 127.0.0.1.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

pub const PYTHON: &str = "/usr/bin/python3";

/// The binary under test: `$CAPSULE_BIN`, else this crate's build.
pub fn bin() -> PathBuf {
    match std::env::var_os("CAPSULE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => assert_cmd::cargo::cargo_bin("capsule"),
    }
}

/// Sends each request of `argv[1]` (a JSON list; a string is sent as a raw
/// line), reads one answer line after each, prints the answers.
pub const DRIVER: &str = r#"
import json, os, socket, sys
s = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
f = s.makefile("rb")
out = []
for i, r in enumerate(json.loads(sys.argv[1])):
    if isinstance(r, str):
        s.sendall(r.encode() + b"\n")
    else:
        r.setdefault("jsonrpc", "2.0")
        r.setdefault("id", i + 1)
        s.sendall(json.dumps(r).encode() + b"\n")
    out.append(f.readline().decode())
sys.stdout.write("".join(out))
"#;

/// One test's world: a temp dir holding the host config, the audit log, the
/// policies, and extra environment for capsule.
pub struct World {
    pub dir: tempfile::TempDir,
    pub env: Vec<(String, String)>,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("capsule-rpc-test")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(dir.path().join("config/capsule")).unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        World { dir, env: vec![] }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, text).unwrap();
        p
    }
    /// The host's capsule config (`$XDG_CONFIG_HOME/capsule/config.yaml`).
    pub fn host_config(&self, yaml: &str) {
        self.write("config/capsule/config.yaml", yaml);
    }
    pub fn set_env(&mut self, k: &str, v: &str) {
        self.env.push((k.into(), v.into()));
    }
    pub fn audit_path(&self) -> PathBuf {
        self.path().join("audit.jsonl")
    }
    /// `capsule` with this world's environment (no CAPSULE_LLM_* from the
    /// caller's environment, XDG dirs inside the temp dir).
    pub fn capsule(&self) -> Command {
        let mut c = Command::new(bin());
        for k in [
            "CAPSULE_LLM_PROVIDER",
            "CAPSULE_LLM_BASE_URL",
            "CAPSULE_LLM_MODEL",
            "CAPSULE_LLM_API_KEY_ENV",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "RUST_LOG",
        ] {
            c.env_remove(k);
        }
        c.env("XDG_CONFIG_HOME", self.path().join("config"));
        c.env("XDG_STATE_HOME", self.path().join("state"));
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.stdin(Stdio::null());
        c
    }
    /// `capsule exec --json --audit-log A --timeout 60 ARGS -- CMD...`.
    pub fn exec(&self, args: &[&str], cmd: &[&str]) -> Command {
        let mut c = self.capsule();
        c.arg("exec")
            .arg("--json")
            .arg("--audit-log")
            .arg(self.audit_path());
        c.args(["--timeout", "60"]).args(args).arg("--").args(cmd);
        c
    }
    /// Run the JSON-lines driver inside the sandbox with `args` (e.g. `--policy P`).
    pub fn drive(&self, args: &[&str], reqs: &[Value]) -> (Value, Vec<Value>) {
        let reqs = serde_json::to_string(reqs).unwrap();
        let r = run(&mut self.exec(args, &[PYTHON, "-c", DRIVER, &reqs]));
        assert_eq!(r["exit_code"], 0, "driver failed: {r}");
        let answers = stdout_lines(&r);
        (r, answers)
    }
    /// The audit log's records.
    pub fn audit(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.audit_path()).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect()
    }
    pub fn audit_text(&self) -> String {
        std::fs::read_to_string(self.audit_path()).unwrap_or_default()
    }
}

/// Run capsule and parse its one JSON result object.
pub fn run(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("run capsule");
    parse_result(&out)
}

pub fn parse_result(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "capsule printed no JSON result ({e}); status {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The child's stdout, one JSON value a line.
pub fn stdout_lines(r: &Value) -> Vec<Value> {
    r["stdout"]
        .as_str()
        .unwrap_or("")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("answer {l:?} is not JSON: {e}"))
        })
        .collect()
}

/// Assert a JSON-RPC error answer's code and reason.
pub fn assert_error(v: &Value, code: i64, reason: &str) {
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["data"]["reason"], reason, "{v}");
    assert!(v.get("result").is_none(), "{v}");
}

pub fn call(name: &str, arguments: Value) -> Value {
    serde_json::json!({"method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

pub fn complete(prompt: &str) -> Value {
    serde_json::json!({"method": "llm/complete", "params": {"messages": [{"role": "user", "content": prompt}]}})
}

// ---------------------------------------------------------------- fake provider

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

/// An HTTP/1.1 server on 127.0.0.1 answering every request with `status`
/// and `body` after `delay`, recording every request.
pub struct FakeProvider {
    pub base: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeProvider {
    pub fn start(status: u16, body: String, delay: Duration) -> FakeProvider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let rec = requests.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut sock) = conn else { return };
                let rec = rec.clone();
                let body = body.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(sock.try_clone().unwrap());
                    let mut first = String::new();
                    if r.read_line(&mut first).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut headers = BTreeMap::new();
                    loop {
                        let mut l = String::new();
                        if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = l.split_once(':') {
                            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                        }
                    }
                    let len: usize = headers
                        .get("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let mut buf = vec![0u8; len];
                    let _ = r.read_exact(&mut buf);
                    let mut parts = first.split_whitespace();
                    rec.lock().unwrap().push(Recorded {
                        method: parts.next().unwrap_or("").into(),
                        path: parts.next().unwrap_or("").into(),
                        headers,
                        body: serde_json::from_slice(&buf).unwrap_or(Value::Null),
                    });
                    std::thread::sleep(delay);
                    let resp = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(resp.as_bytes());
                });
            }
        });
        FakeProvider { base, requests }
    }
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

pub fn openai_answer(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    })
    .to_string()
}

pub fn anthropic_answer(content: &str) -> String {
    serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": content}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 9, "output_tokens": 4}
    })
    .to_string()
}

/// Point the world's capsule at `fake` with `key` held in `TEST_LLM_KEY`.
pub fn bind_llm(w: &mut World, provider: &str, base: &str, model: &str, key: &str) {
    w.set_env("CAPSULE_LLM_PROVIDER", provider);
    w.set_env("CAPSULE_LLM_BASE_URL", base);
    w.set_env("CAPSULE_LLM_MODEL", model);
    w.set_env("CAPSULE_LLM_API_KEY_ENV", "TEST_LLM_KEY");
    w.set_env("TEST_LLM_KEY", key);
}

/// Whether `pid` is gone (no such process, or a zombie awaiting its reaper).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

pub fn wait_gone(pid: i32, within: Duration) -> bool {
    let end = std::time::Instant::now() + within;
    while std::time::Instant::now() < end {
        if process_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    process_gone(pid)
}

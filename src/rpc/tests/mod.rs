//! End-to-end tests of the broker: `serve` on one end of a real socketpair,
//! JSON lines on the other; fake providers on 127.0.0.1.

mod fake_provider;
mod llm;
mod protocol;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::task::JoinHandle;

use super::{serve, Broker, BrokerConfig, HostConfig};

pub(crate) fn config(dir: &std::path::Path) -> BrokerConfig {
    BrokerConfig {
        tools: None,
        llm: None,
        policy_dir: dir.to_path_buf(),
        tool_fd: None,
        host: HostConfig::default(),
        capsule_exe: PathBuf::from("/nonexistent/capsule"),
    }
}

/// The child's side of the pipe.
pub(crate) struct Peer {
    pub rd: BufReader<OwnedReadHalf>,
    pub wr: OwnedWriteHalf,
    pub broker: Arc<Broker>,
    pub server: JoinHandle<()>,
}

pub(crate) fn start(cfg: BrokerConfig) -> Peer {
    let broker = Arc::new(Broker::new(cfg).expect("broker"));
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let server = tokio::spawn(serve(theirs, broker.clone()));
    let (rd, wr) = ours.into_split();
    Peer {
        rd: BufReader::new(rd),
        wr,
        broker,
        server,
    }
}

impl Peer {
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.wr.write_all(bytes).await.expect("write");
    }
    pub async fn send(&mut self, v: &Value) {
        let mut l = serde_json::to_vec(v).unwrap();
        l.push(b'\n');
        self.send_raw(&l).await;
    }
    pub async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(20), self.rd.read_line(&mut line))
            .await
            .expect("an answer within 20 s")
            .expect("read");
        assert!(n > 0, "connection closed");
        serde_json::from_str(&line).expect("answer is JSON")
    }
    pub async fn recv_line(&mut self) -> String {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(20), self.rd.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        line
    }
    pub async fn call(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let v = self.recv().await;
        assert_eq!(v["id"], id, "answer for our id: {v}");
        assert_eq!(v["jsonrpc"], "2.0");
        v
    }
}

/// Assert an error answer's code and reason.
pub(crate) fn assert_error(v: &Value, code: i64, reason: &str) {
    assert_eq!(v["error"]["code"], code, "{v}");
    assert_eq!(v["error"]["data"]["reason"], reason, "{v}");
    assert!(v.get("result").is_none(), "{v}");
}

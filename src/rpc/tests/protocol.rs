//! Framing and protocol abuse.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::{assert_error, config, start};

#[tokio::test]
async fn ping_and_unknown_method() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(config(dir.path()));
    let v = p.call(1, "ping", json!({})).await;
    assert_eq!(v["result"], json!({}));
    // params may be omitted; string ids are echoed
    p.send(&json!({"jsonrpc": "2.0", "id": "a-1", "method": "ping"}))
        .await;
    assert_eq!(
        p.recv().await,
        json!({"jsonrpc": "2.0", "id": "a-1", "result": {}})
    );
    let v = p.call(2, "nope/nothing", json!({})).await;
    assert_error(&v, -32601, "bad_request");
    // an empty tool list without a tools section
    let v = p.call(3, "tools/list", json!({})).await;
    assert_eq!(v["result"], json!({"tools": []}));
}

#[tokio::test]
async fn invalid_json_and_invalid_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(config(dir.path()));
    p.send_raw(b"{not json\n").await;
    let v = p.recv().await;
    assert_error(&v, -32700, "bad_request");
    assert_eq!(v["id"], Value::Null);
    p.send_raw(b"[1,2]\n").await;
    assert_error(&p.recv().await, -32600, "bad_request");
    p.send_raw(b"{\"jsonrpc\":\"1.0\",\"id\":4,\"method\":\"ping\"}\n")
        .await;
    let v = p.recv().await;
    assert_error(&v, -32600, "bad_request");
    assert_eq!(v["id"], 4);
    p.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":7}\n")
        .await;
    assert_error(&p.recv().await, -32600, "bad_request");
    // invalid UTF-8 is a parse error, not a crash
    p.send_raw(b"\xff\xfe\n").await;
    assert_error(&p.recv().await, -32700, "bad_request");
    // blank lines and notifications get no answer; responses are ignored
    p.send_raw(b"\n  \n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await;
    p.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"x\"}}\n")
        .await;
    p.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}\n")
        .await;
    let v = p.call(6, "ping", json!({})).await;
    assert_eq!(v["result"], json!({}));
    assert_eq!(
        p.broker.counters().tool_refusals,
        0,
        "a notification runs nothing"
    );
}

#[tokio::test]
async fn two_mib_line_is_refused_and_the_connection_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let p = start(config(dir.path()));
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}\n",
        "x".repeat(2 * 1024 * 1024)
    );
    // Write in a task: the socket buffer is smaller than 2 MiB.
    let (mut rd, mut wr) = (p.rd, p.wr);
    let writer = tokio::spawn(async move {
        wr.write_all(big.as_bytes()).await.unwrap();
        wr.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        wr
    });
    let mut line = String::new();
    rd.read_line(&mut line).await.unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_error(&v, -32004, "input_too_large");
    assert_eq!(v["id"], Value::Null);
    line.clear();
    rd.read_line(&mut line).await.unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 2);
    assert_eq!(v["result"], json!({}));
    let mut wr = writer.await.unwrap();
    // A line of exactly 1 MiB (without its newline) is still accepted.
    let head = "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"pad\":\"";
    let tail = "\"}}";
    let pad = 1024 * 1024 - head.len() - tail.len();
    let exact = format!("{head}{}{tail}\n", "y".repeat(pad));
    assert_eq!(exact.len(), 1024 * 1024 + 1);
    let writer = tokio::spawn(async move {
        wr.write_all(exact.as_bytes()).await.unwrap();
        wr
    });
    line.clear();
    rd.read_line(&mut line).await.unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 3, "{line}");
    let _wr = writer.await.unwrap();
}

#[tokio::test]
async fn flood_of_10k_requests_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.tools = Some(crate::policy::Tools {
        max_calls: 5,
        allow: vec![],
    });
    let p = start(cfg);
    let (mut rd, mut wr) = (p.rd, p.wr);
    const N: i64 = 10_000;
    let writer = tokio::spawn(async move {
        let mut buf = Vec::new();
        for i in 0..N {
            let method = match i % 4 {
                0 => "ping",
                1 => "tools/list",
                2 => "tools/call",
                _ => "no/such",
            };
            buf.extend_from_slice(
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"{method}\",\"params\":{{\"name\":\"t\"}}}}\n")
                    .as_bytes(),
            );
        }
        wr.write_all(&buf).await.unwrap();
        wr.shutdown().await.unwrap(); // EOF after the flood: answers still come
        wr
    });
    let mut seen = vec![false; N as usize];
    let mut line = String::new();
    for _ in 0..N {
        line.clear();
        let n = tokio::time::timeout(Duration::from_secs(30), rd.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        let v: Value = serde_json::from_str(&line).unwrap();
        let id = v["id"].as_i64().unwrap();
        assert!(!seen[id as usize], "answered twice: {id}");
        seen[id as usize] = true;
        match id % 4 {
            0 => assert_eq!(v["result"], json!({})),
            1 => assert_eq!(v["result"]["tools"], json!([])),
            2 => assert_error(&v, -32602, "not_allowed"),
            _ => assert_error(&v, -32601, "bad_request"),
        }
    }
    assert!(seen.iter().all(|s| *s));
    let _wr = writer.await.unwrap();
    // The server ends at EOF once everything is answered.
    tokio::time::timeout(Duration::from_secs(10), p.server)
        .await
        .unwrap()
        .unwrap();
    let c = p.broker.counters();
    assert_eq!(c.tool_refusals, (N / 4) as u64);
    assert_eq!(
        c.tool_refusals_by_reason.get("not_allowed"),
        Some(&((N / 4) as u64))
    );
}

#[tokio::test]
async fn server_ends_when_the_child_closes_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(config(dir.path()));
    p.send_raw(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n",
    )
    .await;
    drop(p.wr);
    drop(p.rd); // fully closed: answers cannot be delivered, and that is fine
    tokio::time::timeout(Duration::from_secs(5), p.server)
        .await
        .expect("serve returns")
        .unwrap();
}

#[tokio::test]
async fn initialize_for_mcp_clients() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(config(dir.path()));
    let v = p
        .call(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
        )
        .await;
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(v["result"]["serverInfo"]["name"], "capsule");
}

#[tokio::test]
async fn blocking_client_round_trip() {
    use crate::rpc::client::{call_on, ClientError};
    let dir = tempfile::tempdir().unwrap();
    let broker = std::sync::Arc::new(crate::rpc::Broker::new(config(dir.path())).unwrap());
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    let server = tokio::spawn(crate::rpc::serve(
        tokio::net::UnixStream::from_std(theirs).unwrap(),
        broker,
    ));
    let results = tokio::task::spawn_blocking(move || {
        let a = call_on(ours.try_clone().unwrap(), "ping", json!({}));
        let b = call_on(
            ours.try_clone().unwrap(),
            "tools/call",
            json!({"name": "x"}),
        );
        drop(ours);
        (a, b)
    })
    .await
    .unwrap();
    assert_eq!(results.0.unwrap(), json!({}));
    match results.1 {
        Err(ClientError::Rpc { code, reason, .. }) => {
            assert_eq!((code, reason.as_str()), (-32602, "not_allowed"))
        }
        other => panic!("{other:?}"),
    }
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
}

/// Sequential ping round trips per second (run with `--ignored --nocapture`,
/// ideally in release); the contract's target is 20k/s from Python.
#[tokio::test(flavor = "current_thread")]
#[ignore]
async fn ping_round_trips_per_second() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let broker = std::sync::Arc::new(crate::rpc::Broker::new(config(dir.path())).unwrap());
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    let server = tokio::spawn(crate::rpc::serve(
        tokio::net::UnixStream::from_std(theirs).unwrap(),
        broker,
    ));
    let n = 50_000;
    let rate = tokio::task::spawn_blocking(move || {
        let mut r = std::io::BufReader::new(ours.try_clone().unwrap());
        let mut w = ours;
        let t0 = std::time::Instant::now();
        let mut line = String::new();
        for i in 0..n {
            writeln!(w, "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}").unwrap();
            line.clear();
            r.read_line(&mut line).unwrap();
        }
        n as f64 / t0.elapsed().as_secs_f64()
    })
    .await
    .unwrap();
    eprintln!("ping: {rate:.0} round trips/s");
    server.abort();
}

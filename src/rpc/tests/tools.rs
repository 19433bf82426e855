//! Tools: host commands, the allowlist, the budget, timeouts, forwarding.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{assert_error, config, start};
use crate::policy::{Tool, Tools};

fn cmd(name: &str, argv: &[&str]) -> Tool {
    Tool {
        name: name.into(),
        description: Some(format!("the {name} tool")),
        command: Some(argv.iter().map(|s| s.to_string()).collect()),
        timeout_seconds: 10.0,
        ..Default::default()
    }
}

fn with_tools(dir: &std::path::Path, max_calls: u32, allow: Vec<Tool>) -> crate::rpc::BrokerConfig {
    let mut c = config(dir);
    c.tools = Some(Tools { max_calls, allow });
    c
}

const ECHO_PY: &str = "import json,sys; a=json.load(sys.stdin); print(json.dumps({'echo': a}))";

#[tokio::test]
async fn list_and_call_allowed_tools() {
    let dir = tempfile::tempdir().unwrap();
    let mut echo = cmd("echo", &["python3", "-c", ECHO_PY]);
    echo.input_schema = Some(json!({"type": "object", "properties": {"q": {"type": "string"}}}));
    let allow = vec![
        echo,
        cmd("hello", &["/bin/sh", "-c", "echo hello; pwd >&2"]),
    ];
    let mut p = start(with_tools(dir.path(), 40, allow));

    let v = p.call(1, "tools/list", json!({})).await;
    let tools = v["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["name"], "echo");
    assert_eq!(tools[0]["description"], "the echo tool");
    assert_eq!(tools[0]["inputSchema"]["properties"]["q"]["type"], "string");
    assert_eq!(tools[1]["inputSchema"], json!({"type": "object"}));

    let v = p
        .call(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"q": "hi", "n": [1, 2]}}),
        )
        .await;
    let r = &v["result"];
    assert_eq!(r["isError"], false);
    assert_eq!(
        r["structuredContent"],
        json!({"echo": {"q": "hi", "n": [1, 2]}})
    );
    assert_eq!(r["content"][0]["type"], "text");
    let text: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, r["structuredContent"]);

    let v = p.call(3, "tools/call", json!({"name": "hello"})).await;
    assert_eq!(
        v["result"],
        json!({"content": [{"type": "text", "text": "hello\n"}], "isError": false})
    );

    let c = p.broker.counters();
    assert_eq!((c.tool_calls, c.tool_refusals, c.tool_errors), (2, 0, 0));
}

#[tokio::test]
async fn tool_environment_is_scrubbed() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("CAPSULE_TEST_SECRET_ENV_7731", "do-not-leak");
    let mut p = start(with_tools(
        dir.path(),
        40,
        vec![cmd("env", &["/usr/bin/env"])],
    ));
    let v = p.call(1, "tools/call", json!({"name": "env"})).await;
    let text = v["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("PATH="), "{text}");
    assert!(!text.contains("do-not-leak"), "{text}");
}

#[tokio::test]
async fn unknown_tool_bad_params_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(with_tools(dir.path(), 2, vec![cmd("t", &["/bin/true"])]));
    assert_error(
        &p.call(1, "tools/call", json!({"name": "rm -rf"})).await,
        -32602,
        "not_allowed",
    );
    assert_error(
        &p.call(2, "tools/call", json!({"name": "t", "arguments": 5}))
            .await,
        -32602,
        "bad_request",
    );
    assert_error(
        &p.call(3, "tools/call", json!({"arguments": {}})).await,
        -32602,
        "bad_request",
    );
    assert_error(
        &p.call(4, "tools/call", json!([1])).await,
        -32602,
        "bad_request",
    );
    for id in 5..7 {
        let v = p.call(id, "tools/call", json!({"name": "t"})).await;
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
    let v = p.call(7, "tools/call", json!({"name": "t"})).await;
    assert_error(&v, -32002, "limit_reached");
    let c = p.broker.counters();
    assert_eq!(c.tool_calls, 2);
    assert_eq!(c.tool_refusals, 5);
    assert_eq!(c.tool_refusals_by_reason.get("not_allowed"), Some(&1));
    assert_eq!(c.tool_refusals_by_reason.get("bad_request"), Some(&3));
    assert_eq!(c.tool_refusals_by_reason.get("limit_reached"), Some(&1));
}

#[tokio::test]
async fn failing_tool_is_an_error_result() {
    let dir = tempfile::tempdir().unwrap();
    let allow = vec![
        cmd("fail", &["/bin/sh", "-c", "echo broken >&2; exit 3"]),
        cmd(
            "failjson",
            &["/bin/sh", "-c", "echo '{\"error\": \"x\"}'; exit 1"],
        ),
        cmd("missing", &["/nonexistent/tool"]),
    ];
    let mut p = start(with_tools(dir.path(), 40, allow));
    let v = p.call(1, "tools/call", json!({"name": "fail"})).await;
    assert_eq!(v["result"]["isError"], true);
    assert_eq!(v["result"]["content"][0]["text"], "broken\n");
    let v = p.call(2, "tools/call", json!({"name": "failjson"})).await;
    assert_eq!(v["result"]["isError"], true);
    assert_eq!(v["result"]["structuredContent"], json!({"error": "x"}));
    let v = p.call(3, "tools/call", json!({"name": "missing"})).await;
    assert_error(&v, -32003, "tool_failed");
    assert!(
        !v.to_string().contains("/nonexistent"),
        "host paths stay out: {v}"
    );
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        // state is the field after the ")" of the command name
        Ok(s) => !matches!(
            s.rsplit(')')
                .next()
                .map(str::trim_start)
                .and_then(|r| r.chars().next()),
            Some('Z' | 'X')
        ),
    }
}

#[tokio::test]
async fn hanging_tool_and_its_grandchild_are_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild.pid");
    let mut t = cmd(
        "hang",
        &[
            "/bin/sh",
            "-c",
            "sleep 300 & echo $! > \"$0\"; wait",
            pidfile.to_str().unwrap(),
        ],
    );
    t.timeout_seconds = 0.5;
    let mut p = start(with_tools(dir.path(), 40, vec![t]));
    let t0 = Instant::now();
    let v = p.call(1, "tools/call", json!({"name": "hang"})).await;
    let took = t0.elapsed();
    assert_error(&v, -32003, "timeout");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(5),
        "{took:?}"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "grandchild {pid} survived the tool's timeout");
    assert_eq!(p.broker.counters().tool_errors, 1);
}

#[tokio::test]
async fn background_grandchild_is_killed_after_a_normal_exit() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let t = cmd(
        "bg",
        &[
            "/bin/sh",
            "-c",
            "sleep 300 >/dev/null 2>&1 & echo $! > \"$0\"; echo done",
            pidfile.to_str().unwrap(),
        ],
    );
    let mut p = start(with_tools(dir.path(), 40, vec![t]));
    let v = p.call(1, "tools/call", json!({"name": "bg"})).await;
    assert_eq!(v["result"]["content"][0]["text"], "done\n");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !alive(pid),
        "background process {pid} outlived its tool call"
    );
}

#[tokio::test]
async fn oversized_tool_output_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = cmd(
        "big",
        &["/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a"],
    );
    let mut p = start(with_tools(dir.path(), 40, vec![t]));
    let v = p.call(1, "tools/call", json!({"name": "big"})).await;
    assert_error(&v, -32004, "output_too_large");
    // and an answer that would exceed 1 MiB once escaped is refused too
    let t = cmd("esc", &["/bin/sh", "-c", "head -c 600000 /dev/zero"]);
    let mut p = start(with_tools(dir.path(), 40, vec![t]));
    let v = p.call(1, "tools/call", json!({"name": "esc"})).await;
    assert_error(&v, -32004, "output_too_large");
}

#[tokio::test]
async fn relative_commands_resolve_against_the_policy_dir() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    let script = dir.path().join("tools/hi.sh");
    std::fs::write(&script, "#!/bin/sh\ncat\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let allow = vec![
        cmd("a", &["./tools/hi.sh"]),
        cmd("b", &["/bin/sh", "tools/hi.sh"]),
    ];
    let mut p = start(with_tools(dir.path(), 40, allow));
    for (id, name) in [(1, "a"), (2, "b")] {
        let v = p
            .call(
                id,
                "tools/call",
                json!({"name": name, "arguments": {"k": 1}}),
            )
            .await;
        assert_eq!(v["result"]["structuredContent"], json!({"k": 1}), "{v}");
    }
}

/// The program that started capsule, serving `forward: true` tools.
fn tool_host() -> (OwnedFd, tokio::net::UnixStream) {
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    b.set_nonblocking(true).unwrap();
    (
        OwnedFd::from(a),
        tokio::net::UnixStream::from_std(b).unwrap(),
    )
}

fn fwd(name: &str, timeout: f64) -> Tool {
    Tool {
        name: name.into(),
        forward: true,
        timeout_seconds: timeout,
        ..Default::default()
    }
}

#[tokio::test]
async fn forwarded_tools_are_answered_over_the_tool_fd() {
    let dir = tempfile::tempdir().unwrap();
    let (fd, host) = tool_host();
    let mut cfg = with_tools(dir.path(), 40, vec![fwd("lookup", 5.0), fwd("broken", 5.0)]);
    cfg.tool_fd = Some(fd);
    let p = start(cfg);
    // The host answers the two lookups in reverse order: ids are multiplexed.
    let host_task = tokio::spawn(async move {
        let (rd, mut wr) = host.into_split();
        let mut rd = BufReader::new(rd);
        let mut reqs = Vec::new();
        for _ in 0..3 {
            let mut line = String::new();
            rd.read_line(&mut line).await.unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["jsonrpc"], "2.0");
            assert_eq!(v["method"], "tools/call");
            reqs.push(v);
        }
        reqs.sort_by_key(|r| r["params"]["arguments"]["k"].as_i64().unwrap_or(-1));
        for r in reqs.iter().rev() {
            let answer = if r["params"]["name"] == "broken" {
                json!({"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32000, "message": "no such key"}})
            } else {
                let k = r["params"]["arguments"]["k"].clone();
                json!({"jsonrpc": "2.0", "id": r["id"], "result": {
                    "content": [{"type": "text", "text": format!("k={k}")}],
                    "structuredContent": {"k": k}, "isError": false}})
            };
            let mut l = serde_json::to_vec(&answer).unwrap();
            l.push(b'\n');
            wr.write_all(&l).await.unwrap();
        }
        (rd, wr)
    });
    let (mut rd, mut wr) = (p.rd, p.wr);
    wr.write_all(
        concat!(
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"lookup\",\"arguments\":{\"k\":1}}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"lookup\",\"arguments\":{\"k\":2}}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"broken\",\"arguments\":{}}}\n",
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..3 {
        let mut line = String::new();
        tokio::time::timeout(Duration::from_secs(10), rd.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        answers.insert(v["id"].as_i64().unwrap(), v);
    }
    assert_eq!(answers[&1]["result"]["structuredContent"], json!({"k": 1}));
    assert_eq!(answers[&2]["result"]["content"][0]["text"], "k=2");
    assert_error(&answers[&3], -32003, "tool_failed");
    assert_eq!(answers[&3]["error"]["message"], "no such key");
    let _host = host_task.await.unwrap();
    assert_eq!(p.broker.counters().tool_calls, 3);
}

#[tokio::test]
async fn forwarded_tool_timeout_and_closed_host() {
    let dir = tempfile::tempdir().unwrap();
    let (fd, host) = tool_host();
    let mut cfg = with_tools(dir.path(), 40, vec![fwd("slow", 0.3)]);
    cfg.tool_fd = Some(fd);
    let mut p = start(cfg);
    let t0 = Instant::now();
    let v = p.call(1, "tools/call", json!({"name": "slow"})).await;
    assert_error(&v, -32003, "timeout");
    assert!(t0.elapsed() < Duration::from_secs(3));
    drop(host);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let v = p.call(2, "tools/call", json!({"name": "slow"})).await;
    assert_error(&v, -32003, "tool_failed");
}

#[tokio::test]
async fn forwarded_tool_without_a_tool_fd_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = start(with_tools(dir.path(), 40, vec![fwd("f", 1.0)]));
    let v = p.call(1, "tools/call", json!({"name": "f"})).await;
    assert_error(&v, -32003, "tool_failed");
}

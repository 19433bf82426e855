//! `tools/list` and `tools/call` end to end: the real binary, a sandboxed
//! Python driver on `$CAPSULE_RPC_FD`, host command tools, a tool under its
//! own policy, and `forward: true` tools answered by this test over `--tool-fd`.

mod rpc_common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use rpc_common::*;
use serde_json::{json, Value};

fn tools_policy(w: &World, max_calls: u32, tools: &str) -> String {
    let p = w.write(
        "policy.yaml",
        &format!("version: 1\ntools:\n  max_calls: {max_calls}\n  allow:\n{tools}"),
    );
    p.to_string_lossy().into_owned()
}

#[test]
fn command_tools_allowed_unknown_failing_and_limit() {
    let w = World::new();
    let p = tools_policy(
        &w,
        3,
        r#"    - name: echo
      description: echoes its arguments
      command: [/bin/cat]
    - name: words
      command: [/bin/sh, -c, "cat >/dev/null; echo plain words"]
    - name: fails
      command: [/bin/sh, -c, "cat >/dev/null; echo oops >&2; exit 3"]
"#,
    );
    let (r, a) = w.drive(
        &["--policy", &p],
        &[
            json!({"method": "tools/list"}),
            call("echo", json!({"q": "hello", "n": [1, 2]})),
            call("nope", json!({})),
            call("words", json!({})),
            call("fails", json!({})),
            call("echo", json!({})),
        ],
    );
    assert_eq!(a.len(), 6, "{r}");
    let names: Vec<&str> = a[0]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "words", "fails"]);
    assert_eq!(
        a[0]["result"]["tools"][0]["description"],
        "echoes its arguments"
    );
    assert_eq!(
        a[0]["result"]["tools"][0]["inputSchema"],
        json!({"type": "object"})
    );

    // JSON on stdout → structuredContent, and the text.
    assert_eq!(a[1]["id"], 2);
    assert_eq!(a[1]["result"]["isError"], false);
    assert_eq!(
        a[1]["result"]["structuredContent"],
        json!({"q": "hello", "n": [1, 2]})
    );
    assert_eq!(a[1]["result"]["content"][0]["type"], "text");
    // Unknown tool: -32602 not_allowed, not counted as a call.
    assert_error(&a[2], -32602, "not_allowed");
    // Plain text: no structuredContent.
    assert_eq!(a[3]["result"]["content"][0]["text"], "plain words\n");
    assert!(a[3]["result"].get("structuredContent").is_none());
    // A tool that runs but fails is a result with isError.
    assert_eq!(a[4]["result"]["isError"], true, "{}", a[4]);
    assert_eq!(a[4]["result"]["content"][0]["text"], "oops\n");
    // Fourth run: max_calls 3 reached.
    assert_error(&a[5], -32002, "limit_reached");

    assert_eq!(r["tool_calls"], 3);
    assert_eq!(r["tool_refusals"], 2);
    assert_eq!(
        r["usage"]["tool_refusals_by_reason"],
        json!({"not_allowed": 1, "limit_reached": 1})
    );
    assert_eq!(r["success"], true);
}

#[test]
fn no_tools_section_refuses_every_call() {
    let w = World::new();
    let (r, a) = w.drive(
        &[],
        &[json!({"method": "tools/list"}), call("echo", json!({}))],
    );
    assert_eq!(a[0]["result"], json!({"tools": []}));
    assert_error(&a[1], -32602, "not_allowed");
    assert_eq!(r["tool_calls"], 0);
    assert_eq!(r["tool_refusals"], 1);
}

#[test]
fn hanging_tool_is_killed_at_its_timeout_with_its_tree() {
    let w = World::new();
    let d = w.path().display().to_string();
    let p = tools_policy(
        &w,
        5,
        &format!(
            r#"    - name: hang
      timeout_seconds: 0.5
      command: [/bin/sh, -c, "sleep 1000 & echo $! > {d}/grandchild.pid; echo $$ > {d}/tool.pid; sleep 1000"]
"#
        ),
    );
    let t0 = std::time::Instant::now();
    let (r, a) = w.drive(
        &["--policy", &p],
        &[call("hang", json!({})), json!({"method": "ping"})],
    );
    let took = t0.elapsed();
    assert_error(&a[0], -32003, "timeout");
    assert_eq!(
        a[1]["result"],
        json!({}),
        "the pipe stays usable after a timeout"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(r["duration_seconds"].as_f64().unwrap() >= 0.45, "{r}");
    assert_eq!(r["tool_calls"], 1);
    assert_eq!(r["usage"]["tool_errors"], 1);
    for f in ["tool.pid", "grandchild.pid"] {
        let pid: i32 = std::fs::read_to_string(w.path().join(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_gone(pid, Duration::from_secs(3)),
            "{f} {pid} survived the tool timeout"
        );
    }
}

#[test]
fn setsid_tool_descendant_does_not_outlive_the_run() {
    // A tool that leaves a SIGTERM-ignoring process behind in a session of
    // its own: killing the tool's process group does not reach it, but it is
    // reparented to capsule (a child subreaper when tools run host
    // processes) and killed when the run ends.
    let w = World::new();
    let d = w.path().display().to_string();
    w.write(
        "detach.sh",
        &format!(
            "cat >/dev/null\n\
             setsid /bin/sh -c 'trap \"\" TERM HUP; echo $$ > {d}/detached.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -s {d}/detached.pid ]; do sleep 0.02; done\n\
             echo started\n"
        ),
    );
    let p = tools_policy(
        &w,
        5,
        &format!("    - name: detach\n      command: [/bin/sh, {d}/detach.sh]\n"),
    );
    let (r, a) = w.drive(&["--policy", &p], &[call("detach", json!({}))]);
    assert_eq!(a.len(), 1, "{r}");
    assert!(a[0]["result"].to_string().contains("started"), "{}", a[0]);
    let pid: i32 = std::fs::read_to_string(w.path().join("detached.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = wait_gone(pid, Duration::from_secs(3));
    if !gone {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        gone,
        "ESCAPE: the tool's setsid'd descendant {pid} outlived the run"
    );
}

#[test]
fn command_tools_get_no_secret_and_no_extra_fds() {
    let mut w = World::new();
    w.set_env("TEST_LLM_KEY", "sk-tool-env-SECRET-55");
    let p = tools_policy(
        &w,
        5,
        r#"    - name: env
      command: [/bin/sh, -c, "cat >/dev/null; env; ls /proc/self/fd"]
"#,
    );
    let (_, a) = w.drive(&["--policy", &p], &[call("env", json!({}))]);
    let text = a[0]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(!text.contains("SECRET"), "{text}");
    assert!(!text.contains("TEST_LLM_KEY"), "{text}");
    assert!(text.contains("PATH="), "{text}");
}

#[test]
fn tool_under_its_own_policy_runs_nested_with_stdin() {
    let w = World::new();
    let secret = w.write("private/data.txt", "private-data");
    std::fs::write(w.path().join("tool.yaml"), "version: 1\n").unwrap();
    let script = format!(
        "import json,sys\na=json.load(sys.stdin)\ntry:\n    open({:?}).read(); r='read'\nexcept OSError as e:\n    r='denied'\nprint(json.dumps({{'got': a, 'private': r}}))",
        secret.display().to_string()
    );
    let tool = |name: &str, policy: &str| {
        format!("    - name: {name}\n      timeout_seconds: 20\n{policy}      command: [{PYTHON}, -c, {}]\n", serde_json::to_string(&script).unwrap())
    };
    let p = tools_policy(
        &w,
        5,
        &(tool("confined", "      policy: tool.yaml\n") + &tool("host", "")),
    );
    let (r, a) = w.drive(
        &["--policy", &p],
        &[
            call("confined", json!({"x": "from-sandbox"})),
            call("host", json!({"x": 1})),
        ],
    );
    // The nested capsule (--json) hands its child the tool's stdin: the arguments arrive.
    assert_eq!(a[0]["result"]["isError"], false, "{}", a[0]);
    assert_eq!(
        a[0]["result"]["structuredContent"],
        json!({"got": {"x": "from-sandbox"}, "private": "denied"}),
        "{}",
        a[0]
    );
    // The same program on the host, unconfined, can read the file.
    assert_eq!(
        a[1]["result"]["structuredContent"],
        json!({"got": {"x": 1}, "private": "read"}),
        "{}",
        a[1]
    );
    assert_eq!(r["tool_calls"], 2);
}

#[test]
fn nested_capsule_reads_the_same_host_config() {
    // The parent reads its host config from $XDG_CONFIG_HOME; the nested
    // capsule of a `policy:` tool must read the same file, not one under
    // $HOME (here a broken one, which would refuse the nested run).
    let mut w = World::new();
    w.host_config("llm:\n  provider: openai\n  model: m\n  api_key_env: NO_SUCH_KEY_VAR\n");
    w.write(
        "home/.config/capsule/config.yaml",
        "llm: [this is not a config\n",
    );
    let home = w.path().join("home").display().to_string();
    w.set_env("HOME", &home);
    std::fs::write(w.path().join("tool.yaml"), "version: 1\n").unwrap();
    let p = tools_policy(
        &w,
        5,
        "    - name: nested\n      policy: tool.yaml\n      command: [/bin/sh, -c, \"cat >/dev/null; echo ok\"]\n",
    );
    let (r, a) = w.drive(&["--policy", &p], &[call("nested", json!({}))]);
    assert_eq!(a[0]["result"]["isError"], false, "{}\n{r}", a[0]);
    assert!(
        a[0]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("ok"),
        "{}",
        a[0]
    );
}

#[test]
fn tool_under_an_invalid_policy_fails_closed() {
    let w = World::new();
    std::fs::write(w.path().join("bad.yaml"), "version: 1\nbogus_key: 1\n").unwrap();
    let p = tools_policy(
        &w,
        5,
        "    - name: t\n      policy: bad.yaml\n      command: [/bin/cat]\n",
    );
    let (_, a) = w.drive(&["--policy", &p], &[call("t", json!({}))]);
    assert_error(&a[0], -32003, "tool_failed");
    // Why the nested capsule refused (host paths, policy and config lines)
    // is for the operator's log, not for the sandbox.
    let msg = a[0]["error"]["message"].as_str().unwrap_or("");
    assert!(
        !msg.contains("bogus_key") && !msg.contains(&w.path().display().to_string()),
        "{msg}"
    );
}

/// Serve `forward: true` tools on our end of the socketpair.
fn serve_forwarded(sock: UnixStream) -> std::thread::JoinHandle<Vec<Value>> {
    std::thread::spawn(move || {
        let mut seen = vec![];
        let mut w = sock.try_clone().unwrap();
        for line in BufReader::new(sock).lines() {
            let Ok(line) = line else { break };
            let req: Value = serde_json::from_str(&line).expect("capsule sends JSON");
            let id = req["id"].clone();
            let name = req["params"]["name"].as_str().unwrap_or("").to_string();
            let args = req["params"]["arguments"].clone();
            seen.push(req);
            let answer = match name.as_str() {
                "lookup" => {
                    let q = args["q"].as_str().unwrap_or("").to_uppercase();
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": q}], "structuredContent": {"upper": q}, "isError": false}})
                }
                "broken" => {
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "it broke"}], "isError": true}})
                }
                "silent" => continue,
                _ => {
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "no such tool here"}})
                }
            };
            let mut l = serde_json::to_vec(&answer).unwrap();
            l.push(b'\n');
            if w.write_all(&l).is_err() {
                break;
            }
        }
        seen
    })
}

#[test]
fn forwarded_tools_are_answered_over_tool_fd() {
    let w = World::new();
    let p = tools_policy(
        &w,
        10,
        r#"    - name: lookup
      forward: true
    - name: broken
      forward: true
    - name: silent
      forward: true
      timeout_seconds: 0.5
    - name: fdcheck
      command: [/bin/sh, -c, "cat >/dev/null; ls /proc/self/fd | tr '\n' ' '"]
"#,
    );
    let (ours, theirs) = UnixStream::pair().unwrap();
    let server = serve_forwarded(ours);
    let reqs = serde_json::to_string(&[
        call("lookup", json!({"q": "abc"})),
        call("broken", json!({})),
        call("silent", json!({})),
        call("lookup", json!({"q": "again"})),
        call("fdcheck", json!({})),
    ])
    .unwrap();
    let mut cmd = w.exec(
        &["--policy", &p, "--tool-fd", "7"],
        &[PYTHON, "-c", DRIVER, &reqs],
    );
    let raw = theirs.as_raw_fd();
    // SAFETY: dup2 is async-signal-safe; it only touches the child's fd table.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = run(&mut cmd);
    drop(theirs);
    let a = stdout_lines(&r);
    assert_eq!(a.len(), 5, "{r}");
    assert_eq!(
        a[0]["result"]["structuredContent"],
        json!({"upper": "ABC"}),
        "{}",
        a[0]
    );
    assert_eq!(a[0]["result"]["content"][0]["text"], "ABC");
    assert_eq!(a[1]["result"]["isError"], true);
    assert_error(&a[2], -32003, "timeout");
    assert_eq!(
        a[3]["result"]["structuredContent"],
        json!({"upper": "AGAIN"}),
        "a late/missing answer does not wedge the link"
    );
    // The tool fd does not leak into host command tools.
    let fds = a[4]["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        !fds.split_whitespace().any(|f| f == "7"),
        "tool fd leaked into a command tool: {fds}"
    );
    assert_eq!(r["tool_calls"], 5);
    let seen = server.join().unwrap();
    assert_eq!(seen.len(), 4, "capsule relayed only the forward tools");
    assert_eq!(seen[0]["method"], "tools/call");
    assert_eq!(
        seen[0]["params"],
        json!({"name": "lookup", "arguments": {"q": "abc"}})
    );
}

#[test]
fn forward_tool_without_tool_fd_is_a_tool_failure() {
    let w = World::new();
    let p = tools_policy(&w, 2, "    - name: lookup\n      forward: true\n");
    let (_, a) = w.drive(&["--policy", &p], &[call("lookup", json!({}))]);
    assert_error(&a[0], -32003, "tool_failed");
}

#[test]
fn capsule_rpc_subcommand_inside_the_sandbox() {
    let w = World::new();
    let p = tools_policy(&w, 2, "    - name: echo\n      command: [/bin/cat]\n");
    let b = bin().display().to_string();
    let script = format!(
        "{b} rpc ping && {b} rpc tools/call '{{\"name\":\"echo\",\"arguments\":{{\"k\":7}}}}' && {b} rpc tools/call '{{\"name\":\"zzz\"}}'; echo rc=$?"
    );
    let r = run(&mut w.exec(
        &["--policy", &p, "--allow-exec", &b],
        &["/bin/sh", "-c", &script],
    ));
    let out = r["stdout"].as_str().unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "{}", "{r}");
    let v: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(v["structuredContent"], json!({"k": 7}));
    assert_eq!(lines[2], "rc=1");
    let err: Value = serde_json::from_str(r["stderr"].as_str().unwrap().trim()).unwrap();
    assert_eq!(err["code"], -32602);
    assert_eq!(err["data"]["reason"], "not_allowed");
}

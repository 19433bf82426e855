//! `capsule serve` (docs/serve.md): one warm parent, a fresh forked
//! `capsule exec` per request line. The escape, workload and exit-code tests
//! run through it too (CAPSULE_TEST_VIA_SERVE=1, see scripts/test); these
//! tests cover what only the server has: several steps and concurrent steps
//! in one server, bad request lines, cancel, and the server's death.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

impl Server {
    fn start(sb: &Sandbox) -> Server {
        Server::start_with(sb, &[])
    }

    fn start_with(sb: &Sandbox, args: &[&str]) -> Server {
        Server::start_env(sb, args, &[])
    }

    fn start_env(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut c = sb.std_command(["serve"].iter().chain(args));
        c.envs(env.iter().copied());
        c.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = c.spawn().expect("spawn capsule serve");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Server { child, stdin, out }
    }

    fn send_raw(&mut self, line: &[u8]) {
        let w = self.stdin.as_mut().expect("stdin open");
        w.write_all(line).expect("write request");
        w.flush().expect("flush");
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// The next response line (None at EOF).
    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.out.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("response is not JSON ({e}): {line}")),
            ),
            Err(e) => panic!("reading responses: {e}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn exec_req(sb: &Sandbox, id: &str, args: &[&str]) -> Value {
    json!({"id": id, "args": args, "cwd": sb.root})
}

#[test]
fn many_steps_in_one_server_each_a_fresh_run_with_its_audit_record() {
    let sb = Sandbox::new();
    let log = sb.p("audit.jsonl");
    let mut s = Server::start(&sb);
    let mut run_ids = vec![];
    for i in 0..5 {
        let id = format!("s{i}");
        s.send(&exec_req(
            &sb,
            &id,
            &[
                "--json",
                "--audit-log",
                &log,
                "--agent-id",
                "a1",
                "--",
                "/bin/sh",
                "-c",
                &format!("echo step{i}; exit {i}"),
            ],
        ));
        let r = s.recv().expect("a response");
        assert_eq!(r["id"], json!(id), "{r}");
        assert_eq!(r["exit_code"], json!(i), "{r}");
        let res = &r["result"];
        assert_eq!(res["exit_code"], json!(i), "{r}");
        assert_eq!(res["stdout"], json!(format!("step{i}\n")), "{r}");
        assert_eq!(res["schema"], json!("capsule.result/1"), "{r}");
        run_ids.push(res["run_id"].as_str().unwrap().to_string());
    }
    run_ids.dedup();
    assert_eq!(run_ids.len(), 5, "every step is its own run: {run_ids:?}");
    // One audit record per step, as `capsule exec` writes it.
    let text = sb.read("audit.jsonl");
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 5, "{text}");
    for (rec, id) in recs.iter().zip(&run_ids) {
        assert_eq!(rec["run_id"], json!(id), "{rec}");
        assert_eq!(rec["agent_id"], json!("a1"), "{rec}");
    }
    // Closing stdin ends the server once nothing runs.
    drop(s.stdin.take());
    assert!(s.recv().is_none());
    assert!(s.child.wait().unwrap().success());
}

#[test]
fn each_step_is_planned_afresh() {
    // A grant whose path does not exist is refused; the same request after
    // the directory was made runs: nothing about grants is kept across steps.
    let sb = Sandbox::new();
    let dir = sb.p("later");
    let mut s = Server::start(&sb);
    let args = [
        "--json",
        "--no-audit",
        "--allow-read",
        &dir,
        "--",
        "/bin/ls",
        &dir,
    ];
    s.send(&exec_req(&sb, "a", &args));
    let first = s.recv().unwrap();
    sb.write("later/file-made-between-steps", "x");
    s.send(&exec_req(&sb, "b", &args));
    let second = s.recv().unwrap();
    assert_eq!(second["exit_code"], json!(0), "{second}");
    assert_eq!(
        second["result"]["stdout"],
        json!("file-made-between-steps\n"),
        "{second}"
    );
    assert_ne!(
        first["exit_code"],
        json!(0),
        "a grant of a missing path ran: {first}"
    );
}

#[test]
fn steps_run_concurrently_and_answer_in_completion_order() {
    let sb = Sandbox::new();
    let mut s = Server::start(&sb);
    let t0 = Instant::now();
    s.send(&exec_req(
        &sb,
        "slow",
        &["--no-audit", "--", "/bin/sleep", "1.5"],
    ));
    s.send(&exec_req(
        &sb,
        "fast",
        &["--no-audit", "--", "/bin/echo", "quick"],
    ));
    let a = s.recv().unwrap();
    assert_eq!(a["id"], json!("fast"), "{a}");
    assert_eq!(a["stdout"], json!("quick\n"), "{a}");
    let b = s.recv().unwrap();
    assert_eq!(b["id"], json!("slow"), "{b}");
    assert_eq!(b["exit_code"], json!(0), "{b}");
    assert!(t0.elapsed() < Duration::from_secs(20));
}

#[test]
fn bad_lines_get_an_error_and_the_server_goes_on() {
    let sb = Sandbox::new();
    let mut s = Server::start(&sb);
    s.send_raw(b"not json\n");
    let r = s.recv().unwrap();
    assert!(r["error"].as_str().unwrap().contains("not JSON"), "{r}");
    assert_eq!(r["id"], Value::Null);
    s.send(&json!({"id": 7, "args": ["--json"], "nonsense": 1}));
    let r = s.recv().unwrap();
    assert_eq!(r["id"], json!(7), "{r}");
    assert!(r["error"].as_str().unwrap().contains("nonsense"), "{r}");
    s.send(&json!({"args": ["--", "/bin/true"]}));
    let r = s.recv().unwrap();
    assert!(r["error"].as_str().unwrap().contains("`id`"), "{r}");
    // A line over 1 MiB: one error, skipped to its newline, memory bounded.
    let mut long = vec![b'x'; 3 << 20];
    long.push(b'\n');
    s.send_raw(&long);
    let r = s.recv().unwrap();
    assert!(r["error"].as_str().unwrap().contains("longer than"), "{r}");
    // exec's own usage refusal, through the step: exit 125 and its result.
    s.send(&exec_req(
        &sb,
        "u",
        &["--json", "--no-audit", "--timeout", "x", "--", "/bin/true"],
    ));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(125), "{r}");
    assert_eq!(r["result"]["termination_reason"], json!("refused"), "{r}");
    // And a good request still runs.
    s.send(&exec_req(
        &sb,
        "ok",
        &["--no-audit", "--", "/bin/echo", "alive"],
    ));
    let r = s.recv().unwrap();
    assert_eq!(r["id"], json!("ok"), "{r}");
    assert_eq!(r["stdout"], json!("alive\n"), "{r}");
    let rss = std::fs::read_to_string(format!("/proc/{}/status", s.child.id()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap();
    assert!(
        rss < 32 * 1024,
        "server peak RSS {rss} KiB after a 3 MiB line"
    );
}

#[test]
fn inline_policy_env_cwd_and_stdin() {
    let sb = Sandbox::new();
    sb.write("work/data.txt", "from-cwd\n");
    let mut s = Server::start(&sb);
    s.send(&json!({
        "id": 1,
        "policy": "version: 1\nfilesystem:\n  read: [\"./work\"]\nenv:\n  pass: [\"SERVE_T\"]\n",
        "args": ["--json", "--no-audit", "--cwd", sb.p("work"), "--", "/bin/sh", "-c", "cat data.txt; echo $SERVE_T; cat"],
        "env": {"SERVE_T": "set-by-request"},
        "cwd": sb.root,
        "stdin_base64": "ZmVkCg==",
    }));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(0), "{r}");
    assert_eq!(
        r["result"]["stdout"],
        json!("from-cwd\nset-by-request\nfed\n"),
        "{r}"
    );
    // Output that is not UTF-8 comes back as base64, byte for byte.
    s.send(&exec_req(
        &sb,
        "bin",
        &["--no-audit", "--", "/usr/bin/printf", "\\377\\000ok"],
    ));
    let r = s.recv().unwrap();
    assert_eq!(r["stdout_base64"], json!("/wBvaw=="), "{r}");
    assert!(r.get("stdout").is_none(), "{r}");
    // A policy both inline and as a file: refused.
    let pol = sb.policy("version: 1\n");
    s.send(&json!({"id": 2, "policy": "version: 1\n", "args": ["--json", "--no-audit", "--policy", pol, "--", "/bin/true"]}));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(125), "{r}");
}

/// A `--json` step's result is kept whole, past `--max-output`: it is
/// capsule's own line, bounded by the policy's `limits.max_output_bytes`,
/// and the run's output in it takes up to six times its size once escaped
/// (a NUL is `\u0000`). Cut at `--max-output`, it was no JSON any more: the
/// response came with a truncated `stdout` and no `result`. What a step
/// writes otherwise is still cut there, and the step itself says whether it
/// runs with `--json`: one that is the command's argument counts for
/// nothing (before, the server's own look at `args` took it for the step's,
/// kept the run's output whole and took what the run printed for a result).
#[test]
fn a_json_steps_result_is_kept_whole_past_max_output() {
    let sb = Sandbox::new();
    let mut s = Server::start_with(&sb, &["--max-output", "4096"]);
    let short = |r: &Value| r.to_string().chars().take(300).collect::<String>();
    let policy = "version: 1\nlimits:\n  max_output_bytes: 65536\n";
    let nuls = ["/bin/sh", "-c", "head -c 8192 /dev/zero"];
    let args: Vec<&str> = ["--json", "--no-audit", "--"]
        .iter()
        .chain(&nuls)
        .copied()
        .collect();
    s.send(&json!({"id": 1, "policy": policy, "args": args, "cwd": sb.root}));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(0), "{}", short(&r));
    assert!(r.get("stdout_truncated").is_none(), "{}", short(&r));
    let out = r["result"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("no result: {}", short(&r)));
    assert_eq!(out, "\0".repeat(8192));
    // Without --json the step's stdout is the run's: cut at --max-output.
    let args: Vec<&str> = ["--no-audit", "--"].iter().chain(&nuls).copied().collect();
    s.send(&json!({"id": 2, "policy": policy, "args": args, "cwd": sb.root}));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(0), "{}", short(&r));
    assert_eq!(r["stdout_truncated"], json!(true), "{}", short(&r));
    assert_eq!(r["stdout_bytes"], json!(8192), "{}", short(&r));
    assert_eq!(
        r["stdout"].as_str().map(str::len),
        Some(4096),
        "{}",
        short(&r)
    );
    // A `--json` after the command is the command's ($0 of the script here):
    // the run streams, its output is cut at --max-output, and nothing it
    // prints is taken for capsule's result.
    let args = [
        "--no-audit",
        "/bin/sh",
        "-c",
        "head -c 8192 /dev/zero",
        "--json",
    ];
    s.send(&json!({"id": 3, "policy": policy, "args": args, "cwd": sb.root}));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(0), "{}", short(&r));
    assert_eq!(r["stdout_truncated"], json!(true), "{}", short(&r));
    assert!(r.get("result").is_none(), "{}", short(&r));
    let forged = r#"printf '{"schema":"capsule.result/1","success":true,"forged":true}'"#;
    let args = ["--no-audit", "/bin/sh", "-c", forged, "--json"];
    s.send(&json!({"id": 4, "policy": policy, "args": args, "cwd": sb.root}));
    let r = s.recv().unwrap();
    assert_eq!(r["exit_code"], json!(0), "{}", short(&r));
    assert!(
        r.get("result").is_none(),
        "the run's output taken for a result: {r}"
    );
    assert!(
        r["stdout"].as_str().is_some_and(|o| o.contains("forged")),
        "{r}"
    );
}

/// A step's private TMPDIR is gone when the server answers. One that holds
/// only the view's mount points (here for a grant beneath /tmp), of a run
/// whose pid namespace is gone, is moved aside before the report and removed
/// right after it, by the step's process (supervisor::tmpdir_aside); one the
/// run left data in, or of a run without namespaces, is removed before the
/// report, as `capsule exec` does. Either way nothing stays, and the result
/// says nothing was left behind.
#[test]
fn a_steps_tmpdir_is_gone_when_it_answers_and_what_was_moved_aside_soon_after() {
    let sb = Sandbox::new();
    let host = tempfile::Builder::new()
        .prefix("capsule-aside-")
        .tempdir_in("/tmp")
        .expect("a directory beneath /tmp");
    let sub = host.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let sub = sub.to_str().unwrap();
    let log = [("RUST_LOG", "capsule::supervisor::tmpdir_aside=debug")];
    let mut s = Server::start_env(&sb, &[], &log);
    for (id, cmd, moved) in [
        ("mount points only", "true", true),
        ("data", "echo x > \"$TMPDIR/f\"", false),
    ] {
        let args = [
            "--json",
            "--no-audit",
            "--allow-read",
            sub,
            "--",
            "/bin/sh",
            "-c",
            cmd,
        ];
        s.send(&json!({"id": id, "args": args, "cwd": sb.root}));
        let r = s.recv().expect("a response");
        let short = r.to_string().chars().take(600).collect::<String>();
        assert_eq!(r["exit_code"], json!(0), "{short}");
        assert!(r["result"].get("left_behind").is_none(), "{short}");
        let run_id = r["result"]["run_id"].as_str().expect("run_id");
        // The host side of the run's TMPDIR (the server runs with a cleared
        // environment: no TMPDIR, so /tmp).
        let tmpdir = std::path::Path::new("/tmp").join(format!("capsule-{run_id}"));
        let aside = tmpdir.with_file_name(format!(".capsule-{run_id}.removing"));
        assert!(
            !tmpdir.exists(),
            "{}: still there at the answer",
            tmpdir.display()
        );
        let said = r["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("moved aside");
        // Only a run whose pid namespace is gone with init is moved aside
        // (without namespaces nothing says no process of the run is left).
        let pidns = r["result"]["enforcement"]["tree_kill"] == json!("pid-namespace");
        assert_eq!(said, moved && pidns, "{id}: moved aside? {short}");
        let end = Instant::now() + Duration::from_secs(10);
        while aside.exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !aside.exists(),
            "{}: not removed after the report",
            aside.display()
        );
    }
    drop(s.stdin.take());
    assert!(s.recv().is_none());
    assert!(s.child.wait().unwrap().success());
}

/// Pids of every process whose command line contains `tok`.
fn with_token(tok: &str) -> Vec<i32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
            if pid != std::process::id() as i32 && pid_alive(pid, Some(tok)) {
                out.push(pid);
            }
        }
    }
    out
}

fn wait_for_token(tok: &str) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let p = with_token(tok);
        if !p.is_empty() || Instant::now() > deadline {
            return p;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_servers_death_ends_every_running_step() {
    let sb = Sandbox::new();
    // A grant beneath /tmp: each run's TMPDIR holds its mount point, named
    // after this directory, and is moved aside when the run ends.
    let host = tempfile::Builder::new()
        .prefix("capsule-crash-")
        .tempdir_in("/tmp")
        .expect("a directory beneath /tmp");
    let sub = host.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let sub = sub.to_str().unwrap();
    let mark = host.path().file_name().unwrap().to_owned();
    let mut s = Server::start(&sb);
    let toks: Vec<String> = (0..2).map(|i| token(&format!("serve-crash-{i}"))).collect();
    for (i, tok) in toks.iter().enumerate() {
        let py = "import time; time.sleep(120)";
        s.send(&exec_req(
            &sb,
            &format!("c{i}"),
            &[
                "--no-audit",
                "--timeout",
                "120",
                "--allow-read",
                sub,
                "--",
                &python(),
                "-c",
                py,
                tok,
            ],
        ));
    }
    let pids: Vec<Vec<i32>> = toks.iter().map(|t| wait_for_token(t)).collect();
    for (p, t) in pids.iter().zip(&toks) {
        assert!(!p.is_empty(), "the step's command {t} never started");
    }
    // SIGKILL: the server cannot clean anything up itself.
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    for (p, t) in pids.iter().zip(&toks) {
        for &pid in p {
            assert!(
                wait_gone(pid, Some(t), Duration::from_secs(10)),
                "pid {pid} ({t}) still runs after its server was killed"
            );
        }
    }
    // The caller sees the end of the stream, no response for the steps.
    assert!(s.recv().is_none());
    // Nor is anything of theirs left in /tmp: no TMPDIR (capsule-RUNID) and
    // no copy moved aside (.capsule-RUNID.removing) holding their mount
    // point, once the steps' processes are gone (they write to a dead
    // server's pipes first).
    let ours = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/tmp")
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| {
                        let n = p.file_name().unwrap_or_default().to_string_lossy();
                        (n.starts_with("capsule-") || n.starts_with(".capsule-"))
                            && p.join(&mark).exists()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let end = Instant::now() + Duration::from_secs(10);
    while !ours().is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ours(),
        Vec::<std::path::PathBuf>::new(),
        "left behind by the killed server's steps"
    );
}

#[test]
fn cancel_ends_a_running_step_and_it_still_answers() {
    let sb = Sandbox::new();
    let mut s = Server::start(&sb);
    let tok = token("serve-cancel");
    s.send(&exec_req(
        &sb,
        "long",
        &[
            "--json",
            "--no-audit",
            "--",
            &python(),
            "-c",
            "import time; time.sleep(120)",
            &tok,
        ],
    ));
    assert!(!wait_for_token(&tok).is_empty(), "the step never started");
    let t0 = Instant::now();
    s.send(&json!({"id": "long", "op": "cancel"}));
    let r = s.recv().unwrap();
    assert_eq!(r["id"], json!("long"), "{r}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        t0.elapsed()
    );
    assert_eq!(r["result"]["killed"], json!(true), "{r}");
    assert!(with_token(&tok).is_empty());
}

/// The step's process reports its exit status to the server on a socket of
/// its own (docs/serve.md): that socket, like everything else of the
/// server's (the network namespaces of earlier steps it holds), never
/// reaches the run, whose descriptors above stderr are its
/// own and capsule's RPC socket only.
#[test]
fn no_descriptor_of_the_server_or_the_step_reaches_the_run() {
    let sb = Sandbox::new();
    let mut s = Server::start(&sb);
    for id in ["a", "b"] {
        // Without --json the run's stdout and stderr are the step's own.
        s.send(&exec_req(
            &sb,
            id,
            &["--no-audit", "--", "/bin/sh", "-c", "ls -l /proc/$$/fd"],
        ));
        let r = s.recv().unwrap();
        assert_eq!(r["exit_code"], json!(0), "{r}");
        let listing = r["stdout"].as_str().unwrap();
        for line in listing.lines().filter(|l| l.contains(" -> ")) {
            let fd: u32 = line
                .split(" -> ")
                .next()
                .and_then(|l| l.split_whitespace().last())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unparsed line {line:?} in {listing}"));
            if fd > 2 {
                assert!(
                    !line.contains("pipe:")
                        && !line.contains("pidfd")
                        && !line.contains("net:[")
                        && !line.contains("/dev/null"),
                    "descriptor {fd} of the server or the step reached the run: {line}\n{listing}"
                );
            }
        }
        // The run's stdout is the step's pipe to the server; its stdin /dev/null.
        assert!(
            listing.lines().any(|l| l.contains(" 1 -> pipe:")),
            "{listing}"
        );
    }
}

/// The network namespaces a server holds (`net:[...]` among its descriptors).
fn held_namespaces(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the server's /proc/PID/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("net:["))
        .count()
}

/// A step hands its run's network namespace to the server, which lets them
/// go sixteen at a time or a second after the oldest, so that the kernel
/// tears them down in batches (supervisor::ns_hold, docs/serve.md): never
/// more than sixteen held, none left once the server has been idle.
#[test]
fn the_server_holds_finished_runs_network_namespaces_briefly_then_lets_them_go() {
    let sb = Sandbox::new();
    let mut s = Server::start(&sb);
    let pid = s.child.id();
    let mut netns_steps = 0;
    let mut most = 0;
    for i in 0..20 {
        s.send(&exec_req(
            &sb,
            &format!("n{i}"),
            &["--json", "--no-audit", "--", "/bin/true"],
        ));
        let r = s.recv().unwrap();
        assert_eq!(r["exit_code"], json!(0), "{r}");
        if r["result"]["enforcement"]["netns"] == json!(true) {
            netns_steps += 1;
        }
        let held = held_namespaces(pid);
        most = most.max(held);
        assert!(
            held <= 16,
            "the server holds {held} network namespaces after step {i}"
        );
    }
    if netns_steps == 0 {
        eprintln!(
            "skipped: no run got a network namespace of its own here (no namespaces on this host)"
        );
        return;
    }
    let limits_room = ["max_net_namespaces", "max_user_namespaces"]
        .iter()
        .all(|f| {
            std::fs::read_to_string(format!("/proc/sys/user/{f}"))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .is_some_and(|n| n >= 1024)
        });
    if limits_room {
        assert!(
            most >= 2,
            "the server held at most {most} of {netns_steps} runs' network namespaces"
        );
    } else {
        assert_eq!(most, 0, "namespace limits below 1024: nothing may be held");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while held_namespaces(pid) > 0 {
        assert!(
            Instant::now() < deadline,
            "an idle server still holds {} network namespaces after 5 s",
            held_namespaces(pid)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

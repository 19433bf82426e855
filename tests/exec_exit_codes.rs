//! Exit statuses (section 1) and the shape of the JSON result (section 4).

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;

const RESULT_KEYS: &[&str] = &[
    "schema",
    "run_id",
    "termination_reason",
    "success",
    "exit_code",
    "signal",
    "stdout",
    "stderr",
    "stdout_bytes",
    "stderr_bytes",
    "stdout_truncated",
    "stderr_truncated",
    "duration_seconds",
    "killed",
    "kill_reason",
    "enforcement",
    "policy_sha256",
    "tool_calls",
    "tool_refusals",
    "llm_calls",
    "denied_hosts",
];

fn assert_result_shape(j: &Value, run: &Run) {
    let keys: BTreeSet<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let want: BTreeSet<&str> = RESULT_KEYS.iter().copied().collect();
    let missing: Vec<_> = want.difference(&keys).collect();
    assert!(missing.is_empty(), "result lacks {missing:?}{}", run.ctx());
    // Beyond section 4: `error` (refusals, exec failures) and `usage` (the
    // broker's and proxy's counters by reason, which issue 4 puts in the result).
    let extra: Vec<_> = keys
        .difference(&want)
        .filter(|k| !matches!(**k, "error" | "usage"))
        .collect();
    assert!(
        extra.is_empty(),
        "result has keys outside section 4: {extra:?}{}",
        run.ctx()
    );
    assert_eq!(j["schema"], "capsule.result/1");
    let run_id = j["run_id"].as_str().unwrap_or_default();
    assert_eq!(run_id.len(), 26, "run_id is a ULID: {run_id}");
    let sha = j["policy_sha256"].as_str().unwrap_or_default();
    assert!(
        sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()),
        "policy_sha256: {sha}"
    );
    assert!(j["duration_seconds"]
        .as_f64()
        .map(|d| d >= 0.0)
        .unwrap_or(false));
    assert!(j["stdout_bytes"].is_u64() && j["stderr_bytes"].is_u64());
    assert!(j["denied_hosts"].is_array());
    for k in ["tool_calls", "tool_refusals", "llm_calls"] {
        assert_eq!(j[k], 0, "{k}");
    }
    let e = &j["enforcement"];
    for k in ["landlock_abi", "seccomp", "network", "netns"] {
        assert!(e.get(k).is_some(), "enforcement.{k} missing{}", run.ctx());
    }
}

#[test]
fn result_has_exactly_the_section_4_fields() {
    let sb = Sandbox::new();
    for cmd in [
        ["/bin/sh", "-c", "exit 0"],
        ["/bin/sh", "-c", "exit 3"],
        ["/bin/sh", "-c", "kill -TERM $$"],
    ] {
        let run = sb.exec_json(&[], &cmd);
        assert_result_shape(&run.json(), &run);
    }
    let run = sb.exec_json(&["--timeout", "0.3"], &["/bin/sleep", "10"]);
    assert_result_shape(&run.json(), &run);
}

#[test]
fn exit_0_success() {
    let sb = Sandbox::new();
    let run = sb.exec_json(&[], &["/bin/sh", "-c", "printf hello; printf oops >&2"]);
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["termination_reason"], "exited");
    assert_eq!(j["success"], true);
    assert_eq!(j["exit_code"], 0);
    assert_eq!(j["signal"], Value::Null);
    assert_eq!(j["killed"], false);
    assert_eq!(j["kill_reason"], Value::Null);
    assert_eq!(j["stdout"], "hello");
    assert_eq!(j["stderr"], "oops");
    assert_eq!(j["stdout_bytes"], 5);
    assert_eq!(j["stderr_bytes"], 4);
    assert_eq!(j["stdout_truncated"], false);
    assert_eq!(j["enforcement"]["network"], "none");
    assert_eq!(j["enforcement"]["seccomp"], true);
    assert_eq!(
        j["enforcement"]["landlock_abi"],
        landlock_abi(),
        "the highest ABI the kernel has"
    );
    // Only ONE JSON object on stdout.
    assert_eq!(run.stdout.trim().lines().count(), 1, "{}", run.ctx());
}

#[test]
fn exit_3_is_passed_through() {
    let sb = Sandbox::new();
    let run = sb.exec_json(&[], &["/bin/sh", "-c", "exit 3"]);
    run.assert_code(3);
    let j = run.json();
    assert_eq!(j["exit_code"], 3);
    assert_eq!(j["success"], false);
    assert_eq!(j["termination_reason"], "exited");
    // Without --json too.
    sb.run(&["exec", "--", "/bin/sh", "-c", "exit 3"])
        .assert_code(3);
}

#[test]
fn exit_124_on_timeout() {
    let sb = Sandbox::new();
    let started = std::time::Instant::now();
    let run = sb.exec_json(&["--timeout", "0.5"], &["/bin/sleep", "30"]);
    run.assert_code(124);
    assert!(
        started.elapsed().as_secs_f64() < 10.0,
        "timeout took {:?}",
        started.elapsed()
    );
    let j = run.json();
    assert_eq!(j["termination_reason"], "timeout");
    assert_eq!(j["killed"], true);
    assert_eq!(j["exit_code"], 124);
    assert_eq!(j["success"], false);
    assert!(
        j["kill_reason"]
            .as_str()
            .map(|r| r.contains("timeout"))
            .unwrap_or(false),
        "kill_reason names the limit{}",
        run.ctx()
    );
    // The policy's limit works the same way.
    let pol = sb.policy("version: 1\nlimits:\n  timeout_seconds: 0.5\n");
    sb.exec_json(&["--policy", &pol], &["/bin/sleep", "30"])
        .assert_code(124);
    sb.run(&["exec", "--timeout", "0.5", "--", "/bin/sleep", "30"])
        .assert_code(124);
}

#[test]
fn exit_125_on_refusal_with_json_object() {
    let sb = Sandbox::new();
    sb.mkdir("out");
    let pol = sb.policy("version: 1\nfilesystem:\n  write: [./out]\n  bogus: true\n");
    let marker = sb.p("out/ran");
    let run = sb.exec_json(&["--policy", &pol], &["/usr/bin/touch", &marker]);
    run.assert_code(125);
    let j = run.json();
    assert_eq!(j["termination_reason"], "refused", "{}", run.ctx());
    assert!(
        j["error"].as_str().map(|e| !e.is_empty()).unwrap_or(false),
        "refusal has an error string{}",
        run.ctx()
    );
    assert_eq!(j["success"], false);
    assert!(!sb.path("out/ran").exists(), "the command ran{}", run.ctx());
    // Invalid agent id.
    for bad in [
        "",
        "-leading-dash",
        "has space",
        &"a".repeat(129),
        "semi;colon",
        "ünï",
    ] {
        let flag = format!("--agent-id={bad}");
        let run = sb.exec_json(&[&flag], &["/bin/true"]);
        run.assert_code(125);
        assert_eq!(
            run.json()["termination_reason"],
            "refused",
            "agent id {bad:?}{}",
            run.ctx()
        );
    }
    sb.exec_json(&["--agent-id", "agent-7.a_b"], &["/bin/true"])
        .assert_code(0);
    // A missing policy file.
    sb.exec_json(&["--policy", &sb.p("nope.yaml")], &["/bin/true"])
        .assert_code(125);
    // Without --json: exit 125 and a message on stderr.
    let run = sb.run(&["exec", "--policy", &pol, "--", "/bin/true"]);
    run.assert_code(125);
    assert!(!run.stderr.trim().is_empty());
}

#[test]
fn exit_126_when_the_command_cannot_be_executed() {
    let sb = Sandbox::new();
    sb.write("bin/noexec.sh", "#!/bin/sh\nexit 0\n"); // mode 0644
    sb.write_exec("bin/ok.sh", "#!/bin/sh\nexit 0\n");
    sb.mkdir("bin/adir");
    let bin = sb.p("bin");
    // Positive control: an executable script in an exec grant runs.
    sb.exec_json(&["--allow-exec", &bin], &[&sb.p("bin/ok.sh")])
        .assert_code(0);
    // No execute permission bit.
    sb.exec_json(&["--allow-exec", &bin], &[&sb.p("bin/noexec.sh")])
        .assert_code(126);
    // A directory.
    sb.exec_json(&["--allow-exec", &bin], &[&sb.p("bin/adir")])
        .assert_code(126);
}

#[test]
fn exit_126_for_a_command_in_a_write_only_grant() {
    // Section 3 grants the command's own file read+exec, so capsule itself
    // can start it; but a program the sandboxed process writes into a
    // writable (not exec) dir and then runs is denied by the sandbox -> 126.
    let sb = Sandbox::new();
    sb.write_exec("rw/script.sh", "#!/bin/sh\nexit 0\n");
    sb.exec_json(&["--allow-write", &sb.p("rw")], &[&sb.p("rw/script.sh")])
        .assert_code(0);
    let inner = sb.p("rw/script.sh");
    let run = sb.exec_json(&["--allow-write", &sb.p("rw")], &["/bin/sh", "-c", &inner]);
    run.assert_code(126);
    // capsule's own exec of a file that is not executable at all.
    sb.write("rw/plain.sh", "#!/bin/sh\nexit 0\n");
    sb.run(&[
        "exec",
        "--allow-write",
        &sb.p("rw"),
        "--",
        &sb.p("rw/plain.sh"),
    ])
    .assert_code(126);
}

#[test]
fn exit_127_when_the_command_is_not_found() {
    let sb = Sandbox::new();
    let run = sb.exec_json(&[], &["capsule-no-such-command-xyz"]);
    run.assert_code(127);
    assert_eq!(run.json()["exit_code"], 127, "{}", run.ctx());
    sb.exec_json(&[], &["/nonexistent/capsule/cmd"])
        .assert_code(127);
    sb.run(&["exec", "--", "capsule-no-such-command-xyz"])
        .assert_code(127);
}

#[test]
fn exit_128_plus_signal() {
    let sb = Sandbox::new();
    let run = sb.exec_json(&[], &["/bin/sh", "-c", "kill -TERM $$"]);
    run.assert_code(128 + 15);
    let j = run.json();
    assert_eq!(j["termination_reason"], "signaled", "{}", run.ctx());
    assert_eq!(j["signal"], 15);
    assert_eq!(j["killed"], false);
    let run = sb.exec_json(&[], &["/bin/sh", "-c", "kill -KILL $$"]);
    run.assert_code(128 + 9);
    assert_eq!(run.json()["signal"], 9);
    sb.run(&["exec", "--", "/bin/sh", "-c", "kill -USR1 $$"])
        .assert_code(128 + 10);
}

#[test]
fn streams_live_without_json_and_forwards_stdin() {
    let sb = Sandbox::new();
    let run = sb.run(&[
        "exec",
        "--",
        "/bin/sh",
        "-c",
        "echo to-out; echo to-err >&2",
    ]);
    run.assert_code(0);
    assert_eq!(run.stdout, "to-out\n", "{}", run.ctx());
    assert!(run.stderr.contains("to-err"), "{}", run.ctx());
    let run = sb.run_in(
        &["exec", "--", "/bin/cat"],
        &sb.root.clone(),
        b"from-stdin\n",
    );
    run.assert_code(0);
    assert_eq!(run.stdout, "from-stdin\n", "{}", run.ctx());
}

#[test]
fn output_is_decoded_with_replacement() {
    let sb = Sandbox::new();
    let run = sb.exec_json(&[], &["/usr/bin/printf", "a\\377b"]);
    run.assert_code(0);
    let j = run.json();
    assert_eq!(j["stdout"], "a\u{fffd}b", "{}", run.ctx());
    assert_eq!(j["stdout_bytes"], 3);
}

#[test]
fn own_session_and_no_inherited_fds() {
    let sb = Sandbox::new();
    // An fd capsule inherits without CLOEXEC must not reach the child.
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) writes two fds into the array we own.
    let r = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(r, 0);
    let run = sb.probe(&[], &[&["fds"], &["read", "/proc/self/stat"], &["env"]]);
    // SAFETY: closing the two fds we just created.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    run.assert_ran();
    let open: Vec<i64> = run.probe(0)["value"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_i64())
        .collect();
    let rpc: Option<i64> = run.probe(2)["value"]["CAPSULE_RPC_FD"]
        .as_str()
        .and_then(|s| s.parse().ok());
    for fd in &open {
        assert!(
            *fd <= 2 || Some(*fd) == rpc,
            "fd {fd} leaked into the child (open: {open:?}){}",
            run.ctx()
        );
    }
    // Own session: the session id differs from the test's (= capsule's).
    let stat = run.probe(1)["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let child_sid: i64 = fields.get(3).and_then(|s| s.parse().ok()).unwrap_or(-1);
    // SAFETY: getsid(0) has no preconditions.
    let my_sid = unsafe { libc::getsid(0) } as i64;
    assert_ne!(
        child_sid,
        my_sid,
        "the child shares capsule's session{}",
        run.ctx()
    );
}

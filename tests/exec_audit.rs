//! Audit (section 6): one sanitized JSON line per run, refusals included,
//! file mode 0600, appended; `--audit-log FILE`, `--no-audit`, the default
//! location under $XDG_STATE_HOME.

mod common;

use common::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}"))
        })
        .collect()
}

#[test]
fn audit_log_gets_one_line_per_run_mode_0600() {
    let sb = Sandbox::new();
    let log = sb.path("audit/log.jsonl");
    let logs = log.to_string_lossy().into_owned();
    let a = sb.exec_json(
        &["--audit-log", &logs, "--agent-id", "agent-1"],
        &["/bin/true"],
    );
    a.assert_code(0);
    let b = sb.exec_json(&["--audit-log", &logs], &["/bin/sh", "-c", "exit 3"]);
    b.assert_code(3);
    let recs = lines(&log);
    assert_eq!(recs.len(), 2, "one line per run");
    let mode = std::fs::metadata(&log).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "audit log mode {mode:o}");
    assert_eq!(recs[0]["run_id"], a.json()["run_id"]);
    assert_eq!(recs[1]["run_id"], b.json()["run_id"]);
    assert_eq!(recs[0]["agent_id"], "agent-1");
    assert_eq!(recs[0]["outcome"], "completed");
    for r in &recs {
        let o = r["outcome"].as_str().unwrap_or_default();
        assert!(
            ["completed", "failed", "timeout", "refused"].contains(&o),
            "outcome {o}"
        );
        assert!(
            r.get("time").is_some() && r.get("policy_sha256").is_some(),
            "record {r}"
        );
    }
    assert_eq!(recs[0]["policy_sha256"], a.json()["policy_sha256"]);
}

#[test]
fn refusals_and_timeouts_are_audited() {
    let sb = Sandbox::new();
    let log = sb.p("audit.jsonl");
    let pol = sb.policy("version: 1\nenv:\n  set: {LD_PRELOAD: /tmp/evil.so}\n");
    sb.exec_json(&["--audit-log", &log, "--policy", &pol], &["/bin/true"])
        .assert_code(125);
    sb.exec_json(
        &["--audit-log", &log, "--timeout", "0.3"],
        &["/bin/sleep", "10"],
    )
    .assert_code(124);
    let recs = lines(std::path::Path::new(&log));
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(recs[0]["outcome"], "refused");
    assert_eq!(recs[1]["outcome"], "timeout");
}

#[test]
fn audit_never_holds_output_or_environment_values() {
    let mut sb = Sandbox::new();
    let secret = token("audit-env");
    let printed = token("audit-out");
    sb.set_env("CAPSULE_TEST_SECRET", &secret);
    let log = sb.p("audit.jsonl");
    let pol = sb.policy("version: 1\nenv:\n  pass: [CAPSULE_TEST_SECRET]\n");
    let run = sb.exec_json(
        &["--audit-log", &log, "--policy", &pol],
        &[
            "/bin/sh",
            "-c",
            &format!("echo {printed}; echo \"$CAPSULE_TEST_SECRET\" >&2"),
        ],
    );
    run.assert_code(0);
    assert!(
        run.child_stderr().contains(&secret),
        "control: the child saw the passed variable{}",
        run.ctx()
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(text.lines().count(), 1);
    assert!(
        !text.contains(&secret),
        "an environment value reached the audit log: {text}"
    );
    assert!(
        !text.contains(&printed),
        "the child's output reached the audit log: {text}"
    );
}

#[test]
fn audit_appends_to_existing_content() {
    let sb = Sandbox::new();
    let log = sb.write("audit.jsonl", "{\"earlier\": true}\n");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
    let logs = log.to_string_lossy().into_owned();
    sb.exec_json(&["--audit-log", &logs], &["/bin/true"])
        .assert_code(0);
    let recs = lines(&log);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["earlier"], true);
}

#[test]
fn default_location_and_no_audit() {
    let sb = Sandbox::new();
    let default = sb.state.join("capsule/audit.jsonl");
    sb.exec_json(&["--no-audit"], &["/bin/true"]).assert_code(0);
    assert!(
        !default.exists(),
        "--no-audit still wrote {}",
        default.display()
    );
    sb.exec_json(&[], &["/bin/true"]).assert_code(0);
    assert_eq!(
        lines(&default).len(),
        1,
        "default audit log under $XDG_STATE_HOME/capsule"
    );
    let mode = std::fs::metadata(&default).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn unusable_arguments_are_a_refusal_with_a_result_and_an_audit_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let out = std::process::Command::new(common::capsule_bin())
        .args(["exec", "--json", "--net", "bogus", "--audit-log"])
        .arg(&log)
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim().lines().count(), 1, "{stdout}");
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(r["termination_reason"], "refused");
    assert!(
        r["error"].as_str().unwrap_or_default().contains("--net"),
        "{r}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let a: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(a["outcome"], "refused");
    assert_eq!(a["reason"], "usage_error");
}

/// The child swaps the log for a symlink to a file of the user's: with the
/// log inside a write grant, the run is refused before anything runs, and
/// the file the link would point at is never appended to.
#[test]
fn audit_log_inside_a_write_grant_is_refused_and_never_followed() {
    let sb = Sandbox::new();
    sb.mkdir("out");
    sb.write("precious.txt", "PRECIOUS");
    let log = sb.p("out/audit.jsonl");
    let swap = format!("rm -f '{log}'; ln -s '{}' '{log}'", sb.p("precious.txt"));
    let r = sb.exec_json(
        &["--audit-log", &log, "--allow-write", &sb.p("out")],
        &["/bin/sh", "-c", &swap],
    );
    assert_eq!(
        sb.read("precious.txt"),
        "PRECIOUS",
        "ESCAPE: capsule appended its record through the child's symlink{}",
        r.ctx()
    );
    r.assert_code(125);
    let j = r.json();
    assert_eq!(j["termination_reason"], "refused");
    let err = j["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("audit log") && err.contains("write grant"),
        "unclear message: {err}"
    );
    assert!(
        !sb.path("out/audit.jsonl").exists(),
        "the refused log was left behind"
    );
}

#[test]
fn audit_log_inside_the_workspace_output_is_refused() {
    let sb = Sandbox::new();
    let ws = sb.mkdir("ws");
    let log = ws.join("output/audit.jsonl");
    let r = sb.exec_json(
        &[
            "--workspace",
            &ws.to_string_lossy(),
            "--audit-log",
            &log.to_string_lossy(),
        ],
        &["/bin/true"],
    );
    r.assert_code(125);
    assert!(r.json()["error"]
        .as_str()
        .unwrap_or_default()
        .contains("audit log"));
}

/// A log that is a symlink (planted by an earlier run or anyone else), not
/// 0600, or not the caller's, is refused and never written.
#[test]
fn audit_log_symlink_or_wrong_mode_is_refused() {
    let sb = Sandbox::new();
    sb.write("precious.txt", "PRECIOUS");
    std::fs::set_permissions(
        sb.path("precious.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    std::os::unix::fs::symlink(sb.path("precious.txt"), sb.path("link.jsonl")).expect("symlink");
    let r = sb.exec_json(&["--audit-log", &sb.p("link.jsonl")], &["/bin/true"]);
    assert_eq!(
        sb.read("precious.txt"),
        "PRECIOUS",
        "ESCAPE: symlink followed"
    );
    r.assert_code(125);
    assert!(r.stderr.contains("symbolic link"), "{}", r.ctx());

    sb.write("wide.jsonl", "");
    std::fs::set_permissions(
        sb.path("wide.jsonl"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let r = sb.exec_json(&["--audit-log", &sb.p("wide.jsonl")], &["/bin/true"]);
    r.assert_code(125);
    assert!(r.stderr.contains("0600"), "{}", r.ctx());
    assert_eq!(sb.read("wide.jsonl"), "");

    if is_root() {
        sb.write("theirs.jsonl", "");
        let p = sb.path("theirs.jsonl");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).expect("chown");
        let r = sb.exec_json(&["--audit-log", &sb.p("theirs.jsonl")], &["/bin/true"]);
        r.assert_code(125);
        assert!(r.stderr.contains("owned by"), "{}", r.ctx());
    }
}

/// The default log under capsule's state directory stays usable under a
/// write grant of the whole home: the state directory is carved out.
#[test]
fn default_audit_log_under_a_home_write_grant_is_carved_out() {
    let mut sb = Sandbox::new();
    let st = sb.home.join(".local/state");
    sb.set_env("XDG_STATE_HOME", &st.to_string_lossy());
    let log = st.join("capsule/audit.jsonl");
    let r = sb.exec_json(
        &["--allow-write", &sb.home.to_string_lossy()],
        &[
            "/bin/sh",
            "-c",
            &format!("cat '{}' || exit 9", log.display()),
        ],
    );
    r.assert_code(9);
    assert_eq!(lines(&log).len(), 1);
}

/// An unreadable HOME (config and default audit log beneath it) warns about
/// the audit log but does not fail a run that uses no LLM.
#[test]
fn unreadable_home_does_not_fail_a_run() {
    if is_root() {
        skip("root reads a mode-000 HOME anyway (rpc_llm covers an unreadable config as root)");
        return;
    }
    let mut sb = Sandbox::new();
    let h = sb.home.clone();
    sb.set_env("XDG_CONFIG_HOME", &h.join(".config").to_string_lossy());
    sb.set_env("XDG_STATE_HOME", &h.join(".local/state").to_string_lossy());
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let r = sb.run(&["exec", "--", "/bin/echo", "ran-ok"]);
    std::fs::set_permissions(&h, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    r.assert_code(0);
    assert!(r.stdout.contains("ran-ok"), "{}", r.ctx());
    assert!(r.stderr.contains("audit log"), "{}", r.ctx());
}

/// The audit records among capsule's stderr lines (one JSON object a line).
fn stderr_records(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// A pod: a read-only root and no writable home, so the default state
/// directory cannot be made. The run goes on and its record is one JSON line
/// on stderr (the pod's log), after one notice line; nothing is created.
/// HOME and XDG_STATE_HOME beneath a regular file fail for root too
/// (ENOTDIR); an unprivileged user also meets a read-only directory.
#[test]
fn default_audit_without_a_writable_state_dir_goes_to_stderr() {
    let base = Sandbox::new();
    let file = base.write("a-file", "");
    let ro = base.mkdir("read-only");
    let mut cases = vec![
        ("HOME under a file", file.join("home"), None),
        (
            "XDG_STATE_HOME under a file",
            base.home.clone(),
            Some(file.join("state")),
        ),
    ];
    if !is_root() {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        cases.push(("a read-only HOME", ro.clone(), None));
    }
    for (what, home, state) in cases {
        let mut sb = Sandbox::new();
        sb.set_env("HOME", &home.to_string_lossy());
        match &state {
            Some(s) => sb.set_env("XDG_STATE_HOME", &s.to_string_lossy()),
            None => sb.set_env("XDG_STATE_HOME", ""),
        }
        // --json: the child's output is in the result, stderr is capsule's.
        let r = sb.exec_json(&["--agent-id", "pod-1"], &["/bin/echo", "ran"]);
        r.assert_code(0);
        assert_eq!(r.child_stdout().trim(), "ran", "{what}: {}", r.ctx());
        let recs = stderr_records(&r.stderr);
        assert_eq!(recs.len(), 1, "{what}: one record on stderr: {}", r.ctx());
        assert_eq!(recs[0]["run_id"], r.json()["run_id"], "{what}");
        assert_eq!(recs[0]["outcome"], "completed", "{what}");
        assert_eq!(recs[0]["agent_id"], "pod-1", "{what}");
        assert!(
            r.stderr.contains("the default audit log cannot be written"),
            "{what}: the notice names why: {}",
            r.ctx()
        );
        // Streaming: the child's output on stdout, the record last on stderr.
        let r = sb.run(&["exec", "--", "/bin/sh", "-c", "echo out; echo err >&2"]);
        r.assert_code(0);
        assert_eq!(r.stdout, "out\n", "{what}: {}", r.ctx());
        let last = r.stderr.lines().last().unwrap_or_default();
        let rec: Value = serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "{what}: the last stderr line is the record ({e}): {}",
                r.ctx()
            )
        });
        assert_eq!(rec["outcome"], "completed");
        // The notice comes first (before the run), then the child's stderr.
        assert!(
            r.stderr
                .starts_with("capsule: the default audit log cannot be written")
                && r.stderr.contains("\nerr\n"),
            "{what}: {}",
            r.ctx()
        );
        // A refusal is recorded the same way.
        let pol = sb.policy("version: 1\nbogus_key: 1\n");
        let r = sb.exec_json(&["--policy", &pol], &["/bin/true"]);
        r.assert_code(125);
        let recs = stderr_records(&r.stderr);
        assert_eq!(recs.len(), 1, "{what}: {}", r.ctx());
        assert_eq!(recs[0]["outcome"], "refused");
    }
    assert!(!file.join("home").exists() && !file.join("state").exists());
    assert_eq!(
        std::fs::read_dir(&ro).unwrap().count(),
        0,
        "nothing created"
    );
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `--audit-log -`: the record is one JSON line on stderr, no notice, and no
/// file (neither `-` nor the default log) is written.
#[test]
fn audit_log_dash_writes_the_record_to_stderr() {
    let sb = Sandbox::new();
    let r = sb.exec_json(&["--audit-log", "-"], &["/bin/sh", "-c", "exit 3"]);
    r.assert_code(3);
    let recs = stderr_records(&r.stderr);
    assert_eq!(recs.len(), 1, "{}", r.ctx());
    assert_eq!(recs[0]["run_id"], r.json()["run_id"]);
    assert_eq!(recs[0]["outcome"], "failed");
    assert_eq!(recs[0]["exit_code"], 3);
    assert!(!r.stderr.contains("audit log"), "no notice: {}", r.ctx());
    assert!(!sb.path("-").exists(), "a file named - was written");
    assert!(!sb.state.join("capsule/audit.jsonl").exists());
    // Unusable arguments are a refusal audited there too.
    let r = sb.run(&[
        "exec",
        "--json",
        "--net",
        "bogus",
        "--audit-log",
        "-",
        "--",
        "/bin/true",
    ]);
    r.assert_code(125);
    let recs = stderr_records(&r.stderr);
    assert_eq!(recs.len(), 1, "{}", r.ctx());
    assert_eq!(recs[0]["reason"], "usage_error");
}

/// An explicit `--audit-log FILE` that cannot be written is an error naming
/// it, never redirected to stderr: the run has no record.
#[test]
fn an_explicit_audit_log_that_cannot_be_written_is_an_error() {
    let sb = Sandbox::new();
    let file = sb.write("a-file", "");
    let log = file.join("audit.jsonl");
    let r = sb.exec_json(&["--audit-log", &log.to_string_lossy()], &["/bin/true"]);
    assert!(
        r.stderr
            .contains(&format!("cannot write the audit log {}", log.display())),
        "{}",
        r.ctx()
    );
    assert!(stderr_records(&r.stderr).is_empty(), "{}", r.ctx());
    assert!(!sb.state.join("capsule/audit.jsonl").exists());
}

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

//! `doctor` and `check` run the same planning as `exec` and predict its
//! verdict exactly: a policy they accept is never refused by `exec` for a
//! kernel reason, and one they refuse, `exec` refuses too.

mod common;

use common::*;

fn verdicts(sb: &Sandbox) {
    let doctor = sb.run(&["doctor", "--json"]);
    let d: serde_json::Value = serde_json::from_str(doctor.stdout.trim()).expect("doctor --json");
    let runs = d["default_policy"]["runs"] == true;
    let exec = sb.exec_json(&[], &["/bin/true"]);
    assert_eq!(
        runs,
        exec.code == Some(0),
        "doctor says runs={runs}: {d}{}",
        exec.ctx()
    );
    assert_eq!(d["ok"] == true, runs, "{d}");
    if runs {
        let missing = &exec.json()["enforcement"]["missing"];
        assert_eq!(
            &d["default_policy"]["missing"], missing,
            "doctor and exec disagree on what is missing"
        );
    }
    for policy in [
        "python-agent.yaml",
        "ci-build.yaml",
        "read-only-review.yaml",
    ] {
        let path = repo_root().join("policy").join(policy);
        let check = sb.run(&["check", "-p", &path.to_string_lossy()]);
        let exec = sb.exec_json(&["--policy", &path.to_string_lossy()], &["/bin/true"]);
        assert_eq!(
            check.code == Some(0),
            exec.code == Some(0),
            "check and exec disagree on {policy}:{}{}",
            check.ctx(),
            exec.ctx()
        );
    }
}

#[test]
fn doctor_and_check_predict_exec() {
    verdicts(&Sandbox::new());
}

#[test]
fn doctor_and_check_predict_exec_without_namespaces() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    verdicts(&sb);
}

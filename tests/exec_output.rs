//! Output capture: per-stream truncation at the byte limit with the exact
//! marker, while every byte the child wrote is still counted.

mod common;

use common::*;

const FLOOD: u64 = 64 * 1024 * 1024;

fn flood_cmd(to_stderr: bool) -> Vec<String> {
    let redirect = if to_stderr { " >&2" } else { "" };
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("head -c {FLOOD} /dev/zero | tr '\\0' A{redirect}"),
    ]
}

#[test]
fn a_64_mib_flood_is_truncated_with_the_exact_marker() {
    let sb = Sandbox::new();
    let cmd = flood_cmd(false);
    let refs: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
    let run = sb.exec_json(&["--max-output", "1000"], &refs);
    run.assert_code(0);
    let j = run.json();
    let out = j["stdout"].as_str().unwrap_or_default();
    let want = format!("{}{MARKER}", "A".repeat(1000));
    assert!(
        out == want,
        "stdout is not 1000 bytes + marker: len {} tail {:?}",
        out.len(),
        &out[out.len().saturating_sub(60)..]
    );
    assert_eq!(j["stdout_bytes"], FLOOD, "every byte is counted");
    assert_eq!(j["stdout_truncated"], true);
    assert_eq!(j["stderr_truncated"], false);
    assert_eq!(j["stderr"], "");
    assert_eq!(j["success"], true);
}

#[test]
fn a_64_mib_stderr_flood_is_truncated_too() {
    let sb = Sandbox::new();
    let cmd = flood_cmd(true);
    let refs: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
    let run = sb.exec_json(&["--max-output", "4096"], &refs);
    run.assert_code(0);
    let j = run.json();
    assert_eq!(
        j["stderr"].as_str().unwrap_or_default(),
        format!("{}{MARKER}", "A".repeat(4096))
    );
    assert_eq!(j["stderr_bytes"], FLOOD);
    assert_eq!(j["stderr_truncated"], true);
    assert_eq!(j["stdout_truncated"], false);
}

#[test]
fn default_limit_is_one_mib_per_stream() {
    let sb = Sandbox::new();
    let run = sb.exec_json(
        &[],
        &["/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' B"],
    );
    run.assert_code(0);
    let j = run.json();
    let out = j["stdout"].as_str().unwrap_or_default();
    assert_eq!(
        out.len(),
        1048576 + MARKER.len(),
        "{}",
        &out[out.len().saturating_sub(60)..]
    );
    assert!(out.ends_with(MARKER));
    assert_eq!(j["stdout_bytes"], 3000000);
    // The policy key sets it as well.
    let pol = sb.policy("version: 1\nlimits:\n  max_output_bytes: 10\n");
    let run = sb.exec_json(
        &["--policy", &pol],
        &["/bin/sh", "-c", "printf 0123456789abcdef"],
    );
    let j = run.json();
    assert_eq!(j["stdout"], format!("0123456789{MARKER}"), "{}", run.ctx());
    assert_eq!(j["stdout_bytes"], 16);
}

#[test]
fn exactly_at_the_limit_is_not_truncated() {
    let sb = Sandbox::new();
    let run = sb.exec_json(
        &["--max-output", "10"],
        &["/bin/sh", "-c", "printf 0123456789"],
    );
    let j = run.json();
    assert_eq!(j["stdout"], "0123456789", "{}", run.ctx());
    assert_eq!(j["stdout_truncated"], false);
}

#[test]
fn streaming_mode_is_subject_to_the_limit() {
    let sb = Sandbox::new();
    let cmd = flood_cmd(false);
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--max-output".into(),
        "1000".into(),
        "--".into(),
    ];
    args.extend(cmd);
    let run = sb.run(&args);
    run.assert_code(0);
    let a = run.stdout.bytes().filter(|b| *b == b'A').count();
    assert_eq!(
        a, 1000,
        "live stdout passed {a} bytes past a 1000-byte limit"
    );
    assert!(run.stdout.len() <= 1000 + MARKER.len());
}

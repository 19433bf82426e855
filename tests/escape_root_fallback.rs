//! Root without namespaces: uid 0 owns the host's system files, and an
//! owner needs no capability to change a file's mode: without a mount
//! namespace (no read-only view) Landlock has no hook for it. The metadata
//! guard (issue 20, finding 7; `supervisor::metaguard`) now makes every
//! chmod/chown/utime/setxattr of the run itself, only where a write grant
//! covers the target, so a run as root can no longer chmod a root-owned file
//! outside its grants; only where no seccomp listener can be had is the gap
//! said, in words that name the whole host.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{capsule_bin, is_root, skip};

#[test]
fn root_without_namespaces_cannot_chmod_root_files_outside_grants() {
    if !is_root() {
        skip("needs root: the gap is root's");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("capsule-rootgap-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let file = dir.path().join("root-owned");
    std::fs::write(&file, "x").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = assert_cmd::Command::new(capsule_bin())
        .env("CAPSULE_NO_NAMESPACES", "1")
        .current_dir("/tmp")
        .args(["exec", "--json", "--", "/bin/chmod", "0666"])
        .arg(&file)
        .output()
        .expect("capsule");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json result");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let missing = result["enforcement"]["missing"].to_string();
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o644,
        "ESCAPE: a run as root chmod'ed a root-owned file outside its grants: {result}"
    );
    assert_ne!(result["exit_code"], 0, "chmod reported success: {result}");
    assert!(
        result["enforcement"]["limitations"]
            .to_string()
            .contains("metadata guard"),
        "{result}"
    );
    assert!(!missing.contains("EVERY root-owned file"), "{missing}");
    assert!(
        !stderr.contains("EVERY root-owned file"),
        "stderr: {stderr}"
    );
    // The keeper takes a setsid'd daemon down with a SIGKILLed capsule
    // (exec_kill tests it on this path): no gap there any more.
    assert!(
        !missing.contains("setsid'd descendant can outlive capsule"),
        "{missing}"
    );
}

#[test]
fn an_unprivileged_run_without_namespaces_has_the_metadata_guard() {
    if is_root() {
        skip("runs as the invoking unprivileged user only");
        return;
    }
    let out = assert_cmd::Command::new(capsule_bin())
        .env("CAPSULE_NO_NAMESPACES", "1")
        .current_dir("/tmp")
        .args(["exec", "--json", "--", "/bin/true"])
        .output()
        .expect("capsule");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json result");
    let missing = result["enforcement"]["missing"].to_string();
    assert!(!missing.contains("caller's own files"), "{missing}");
    assert!(!missing.contains("EVERY root-owned file"), "{missing}");
    assert!(
        result["enforcement"]["limitations"]
            .to_string()
            .contains("metadata guard"),
        "{result}"
    );
    assert!(
        !missing.contains("setsid'd descendant can outlive capsule"),
        "{missing}"
    );
}

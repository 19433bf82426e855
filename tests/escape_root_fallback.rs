//! Root without namespaces: the gap no layer there closes is said, loudly.
//!
//! uid 0 owns the host's system files, and an owner needs no capability to
//! change a file's mode: without a mount namespace (no read-only view) a run
//! as root can chmod any root-owned file outside its grants, and Landlock has
//! no hook for it. capsule cannot stop that there; it must say so in the
//! result (`enforcement.missing`) and on stderr, in words that name the whole
//! host, not "the caller's own files".

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{capsule_bin, is_root, skip};

#[test]
fn root_without_namespaces_is_told_every_root_file_is_reachable() {
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
    // The gap is real on this path (this is what the words must match) ...
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o666, "the chmod ran: {result}");
    // ... and said as what it is, in the result and on stderr.
    assert!(missing.contains("EVERY root-owned file"), "{missing}");
    assert!(!missing.contains("caller's own files"), "{missing}");
    // The keeper takes a setsid'd daemon down with a SIGKILLed capsule
    // (exec_kill tests it on this path): no gap there any more.
    assert!(
        !missing.contains("setsid'd descendant can outlive capsule"),
        "{missing}"
    );
    assert!(
        stderr.contains("capsule: warning: not enforced on this host")
            && stderr.contains("EVERY root-owned file"),
        "stderr: {stderr}"
    );
}

#[test]
fn an_unprivileged_run_without_namespaces_keeps_the_narrower_words() {
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
    assert!(missing.contains("caller's own files"), "{missing}");
    assert!(!missing.contains("EVERY root-owned file"), "{missing}");
    assert!(
        !missing.contains("setsid'd descendant can outlive capsule"),
        "{missing}"
    );
}

//! `capsule volume create|inspect|rm|ls`: the real binary, with HOME and
//! XDG_DATA_HOME inside a temp dir. The output and exit statuses are the
//! ones callers written for `docker volume` parse (agentnode does).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use common::Sandbox;
use serde_json::Value;

/// A sandbox whose data directory is `ROOT/data`; returns it and the volumes dir.
fn with_data_home() -> (Sandbox, PathBuf) {
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    (sb, data.join("capsule/volumes"))
}

#[test]
fn create_is_private_idempotent_and_prints_the_name() {
    let (sb, vols) = with_data_home();
    let run = sb.run(&["volume", "create", "pack-1"]);
    run.assert_code(0);
    assert_eq!(run.stdout, "pack-1\n", "{}", run.ctx());
    let dir = vols.join("pack-1");
    let md = fs::symlink_metadata(&dir).expect("volume dir exists");
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o777, 0o700, "volume dir mode");
    assert_eq!(
        fs::metadata(&vols).unwrap().mode() & 0o777,
        0o700,
        "volumes dir mode"
    );
    fs::write(dir.join("kept"), "x").unwrap();
    let created = sb.run(&["volume", "inspect", "-f", "{{.CreatedAt}}", "pack-1"]);
    // Again: success, same name, contents and creation time kept.
    let again = sb.run(&["volume", "create", "pack-1"]);
    again.assert_code(0);
    assert_eq!(again.stdout, "pack-1\n");
    assert!(
        dir.join("kept").exists(),
        "create emptied an existing volume"
    );
    let created2 = sb.run(&["volume", "inspect", "-f", "{{.CreatedAt}}", "pack-1"]);
    assert_eq!(created.stdout, created2.stdout);
    // Without a name, a generated valid one.
    let anon = sb.run(&["volume", "create"]);
    anon.assert_code(0);
    let name = anon.stdout.trim();
    assert!(
        !name.is_empty() && vols.join(name).is_dir(),
        "{}",
        anon.ctx()
    );
}

#[test]
fn default_location_is_under_home_local_share() {
    let sb = Sandbox::new(); // no XDG_DATA_HOME
    sb.run(&["volume", "create", "v"]).assert_code(0);
    let dir = sb.home.join(".local/share/capsule/volumes/v");
    assert!(dir.is_dir(), "{} missing", dir.display());
    let run = sb.run(&["volume", "inspect", "v"]);
    run.assert_code(0);
    let v: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v[0]["Mountpoint"], dir.to_string_lossy().as_ref());
}

#[test]
fn inspect_prints_docker_shaped_json_and_fails_for_a_missing_volume() {
    let (sb, vols) = with_data_home();
    sb.run(&["volume", "create", "--label", "owner=agentnode", "a"])
        .assert_code(0);
    sb.run(&["volume", "create", "b"]).assert_code(0);
    let run = sb.run(&["volume", "inspect", "a", "b"]);
    run.assert_code(0);
    let v: Value = serde_json::from_str(&run.stdout).expect("inspect prints JSON");
    let list = v.as_array().expect("a JSON list, as docker prints");
    assert_eq!(list.len(), 2);
    let a = &list[0];
    assert_eq!(a["Name"], "a");
    assert_eq!(a["Driver"], "local");
    assert_eq!(a["Scope"], "local");
    assert_eq!(a["Mountpoint"], vols.join("a").to_string_lossy().as_ref());
    assert_eq!(a["Labels"]["owner"], "agentnode");
    let created = a["CreatedAt"].as_str().unwrap_or_default();
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "CreatedAt {created:?} is not RFC 3339"
    );
    assert!(list[1]["Labels"].is_object());

    // Missing: exit 1, the JSON list still printed (docker prints `[]`).
    let miss = sb.run(&["volume", "inspect", "nope"]);
    assert_eq!(miss.code, Some(1), "{}", miss.ctx());
    let v: Value = serde_json::from_str(&miss.stdout).expect("still JSON");
    assert_eq!(v, serde_json::json!([]));
    assert!(
        miss.stderr.contains("no such volume: nope"),
        "{}",
        miss.ctx()
    );
    let mixed = sb.run(&["volume", "inspect", "a", "nope"]);
    assert_eq!(mixed.code, Some(1), "{}", mixed.ctx());
    let v: Value = serde_json::from_str(&mixed.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(1));

    // A template, as `docker volume inspect -f '{{.Mountpoint}}'`.
    let f = sb.run(&["volume", "inspect", "-f", "{{.Mountpoint}}", "b"]);
    f.assert_code(0);
    assert_eq!(f.stdout.trim(), vols.join("b").to_string_lossy());
}

#[test]
fn rm_of_a_missing_volume_fails_and_rm_f_is_idempotent() {
    let (sb, vols) = with_data_home();
    sb.run(&["volume", "create", "gone"]).assert_code(0);
    fs::create_dir_all(vols.join("gone/deep/er")).unwrap();
    fs::write(vols.join("gone/deep/er/f"), "x").unwrap();
    let rm = sb.run(&["volume", "rm", "gone"]);
    rm.assert_code(0);
    assert_eq!(rm.stdout, "gone\n");
    assert!(!vols.join("gone").exists());
    assert!(!vols.join(".gone.json").exists(), "metadata left behind");
    let again = sb.run(&["volume", "rm", "gone"]);
    assert_eq!(again.code, Some(1), "{}", again.ctx());
    assert!(again.stderr.contains("no such volume"), "{}", again.ctx());
    let forced = sb.run(&["volume", "rm", "-f", "gone"]);
    forced.assert_code(0);
    let forced = sb.run(&["volume", "rm", "--force", "gone", "never-was"]);
    forced.assert_code(0);
    let insp = sb.run(&["volume", "inspect", "gone"]);
    assert_eq!(insp.code, Some(1));
}

#[test]
fn rm_never_follows_a_symlink_out_of_the_volume() {
    let (sb, vols) = with_data_home();
    let outside = sb.mkdir("outside");
    fs::write(outside.join("precious"), "keep me").unwrap();
    fs::create_dir(outside.join("sub")).unwrap();
    fs::write(outside.join("sub/also"), "keep me").unwrap();
    sb.run(&["volume", "create", "v"]).assert_code(0);
    let v = vols.join("v");
    // Links a sandboxed program could plant in a volume it writes.
    std::os::unix::fs::symlink(&outside, v.join("dirlink")).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), v.join("filelink")).unwrap();
    fs::create_dir(v.join("nested")).unwrap();
    std::os::unix::fs::symlink(&outside, v.join("nested/up")).unwrap();
    // A directory it made read-only: its non-root owner must still remove it.
    fs::create_dir(v.join("ro")).unwrap();
    fs::write(v.join("ro/f"), "x").unwrap();
    fs::set_permissions(v.join("ro"), fs::Permissions::from_mode(0o500)).unwrap();
    sb.run(&["volume", "rm", "v"]).assert_code(0);
    assert!(!v.exists(), "volume not removed");
    assert_eq!(
        fs::read_to_string(outside.join("precious")).unwrap(),
        "keep me"
    );
    assert_eq!(
        fs::read_to_string(outside.join("sub/also")).unwrap(),
        "keep me"
    );

    // A link planted where a volume would be is no volume: inspect refuses
    // it, rm unlinks the link and never touches its target.
    fs::create_dir_all(&vols).unwrap();
    std::os::unix::fs::symlink(&outside, vols.join("evil")).unwrap();
    let insp = sb.run(&["volume", "inspect", "evil"]);
    assert_eq!(insp.code, Some(1), "{}", insp.ctx());
    assert!(insp.stderr.contains("symbolic link"), "{}", insp.ctx());
    let create = sb.run(&["volume", "create", "evil"]);
    assert_eq!(
        create.code,
        Some(1),
        "create adopted a symlink{}",
        create.ctx()
    );
    sb.run(&["volume", "rm", "evil"]).assert_code(0);
    assert!(fs::symlink_metadata(vols.join("evil")).is_err());
    assert_eq!(
        fs::read_to_string(outside.join("precious")).unwrap(),
        "keep me"
    );
    let ls = sb.run(&["volume", "ls", "-q"]);
    assert_eq!(ls.stdout, "", "{}", ls.ctx());
}

#[test]
fn names_follow_dockers_rule_and_never_leave_the_volumes_dir() {
    let (sb, vols) = with_data_home();
    for bad in ["../escape", ".hidden", "-x", "a/b", "a b", "", ".."] {
        let run = sb.run(&["volume", "create", "--", bad]);
        assert_eq!(run.code, Some(1), "{bad:?} accepted{}", run.ctx());
        assert!(run.stderr.contains("invalid volume name"), "{}", run.ctx());
        let run = sb.run(&["volume", "rm", "-f", "--", bad]);
        assert_ne!(run.code, Some(0), "rm -f {bad:?} accepted{}", run.ctx());
    }
    assert!(!sb.path("data/capsule/escape").exists());
    assert!(!vols.join(".hidden").exists());
}

#[test]
fn ls_lists_names_quiet_and_json() {
    let (sb, vols) = with_data_home();
    let empty = sb.run(&["volume", "ls", "-q"]);
    empty.assert_code(0);
    assert_eq!(empty.stdout, "");
    for n in ["b", "a"] {
        sb.run(&["volume", "create", n]).assert_code(0);
    }
    // Not volumes: a file and a dot-entry.
    fs::write(vols.join("stray-file"), "").unwrap();
    let q = sb.run(&["volume", "ls", "-q"]);
    q.assert_code(0);
    assert_eq!(q.stdout, "a\nb\n", "{}", q.ctx());
    let table = sb.run(&["volume", "ls"]);
    assert!(table.stdout.starts_with("DRIVER"), "{}", table.ctx());
    assert!(table.stdout.contains("local") && table.stdout.contains(" a\n"));
    let json = sb.run(&["volume", "ls", "--format", "json"]);
    let names: Vec<String> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("one object a line")["Name"].to_string())
        .collect();
    assert_eq!(names, ["\"a\"", "\"b\""]);
}

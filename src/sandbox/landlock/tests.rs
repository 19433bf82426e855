//! Tests that really restrict a process.
//!
//! Each case spawns a fresh `/bin/sh -c` (or python3) whose `pre_exec` hook
//! applies a `Prepared` built before the spawn the way the command stage does:
//! no_new_privs, then `ChildRules::restrict`. `pre_exec` runs after fork in the
//! multi-threaded test harness, so the hook makes only raw system calls.
//! The shell prints `name=$?` lines that the test reads back.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::*;
use crate::plan::{Access, FsDeny, FsGrant, FsPlan, Opened, Origin};

/// Skip (with a reason) when the kernel has no Landlock or lacks `min` ABI.
fn landlock_at_least(min: u32) -> bool {
    let abi = crate::kernel::probe().landlock_abi;
    if abi < min {
        eprintln!("skipped: needs Landlock ABI {min}, kernel has {abi}");
        return false;
    }
    true
}

fn origin(key: &str) -> Origin {
    Origin::Policy {
        key: key.to_string(),
        line: Some(7),
    }
}

fn grant(path: &Path, access: Access) -> FsGrant {
    FsGrant {
        opened: Opened::NONE,
        path: path.to_path_buf(),
        access,
        origin: origin("filesystem.test"),
    }
}

fn deny(path: &Path) -> FsDeny {
    FsDeny {
        path: path.to_path_buf(),
        origin: Origin::Credential("test"),
    }
}

/// What /bin/sh, coreutils and python3 need: /usr (rx), /etc (r), /dev/null (rw).
fn system_grants() -> Vec<FsGrant> {
    let mut out: Vec<FsGrant> = Vec::new();
    for (p, a) in [
        ("/usr", Access::EXEC),
        ("/bin", Access::EXEC),
        ("/lib", Access::EXEC),
        ("/lib64", Access::EXEC),
        ("/etc", Access::READ),
        ("/dev/null", Access::WRITE),
    ] {
        if let Ok(c) = std::fs::canonicalize(p) {
            if !out.iter().any(|g| g.path == c) {
                out.push(grant(&c, a));
            }
        }
    }
    out
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().expect("tempdir");
    let p = std::fs::canonicalize(t.path()).expect("canonical tempdir");
    (t, p)
}

fn write(path: &Path, content: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, content).expect("write");
}

fn sandboxed(prepared: Prepared, mut cmd: Command) -> Output {
    // What the command stage does (`sandbox::child`): no_new_privs, then the
    // ruleset's own restrict, both raw system calls on data made before fork.
    let rules = prepared.into_child();
    // The hook runs in the forked child before exec and makes only raw
    // system calls on `rules`, built before the spawn.
    crate::sys::pre_exec_for_tests(&mut cmd, move || {
        crate::sys::raw::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)
            .map_err(io::Error::from_raw_os_error)?;
        rules.restrict().map_err(io::Error::from_raw_os_error)
    });
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("spawn sandboxed child")
}

fn sh(prepared: Prepared, script: &str) -> HashMap<String, String> {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script);
    results(sandboxed(prepared, cmd))
}

fn results(out: Output) -> HashMap<String, String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

#[track_caller]
fn ok(r: &HashMap<String, String>, key: &str) {
    assert_eq!(
        r.get(key).map(String::as_str),
        Some("0"),
        "{key} should succeed; all: {r:?}"
    );
}

#[track_caller]
fn denied(r: &HashMap<String, String>, key: &str) {
    let v = r
        .get(key)
        .unwrap_or_else(|| panic!("{key} missing from {r:?}"));
    assert_ne!(v, "0", "{key} should be denied; all: {r:?}");
}

fn fs_plan(extra: Vec<FsGrant>, deny: Vec<FsDeny>) -> FsPlan {
    let mut grants = system_grants();
    grants.extend(extra);
    FsPlan {
        grants,
        deny,
        proc_self: true,
        mounts: vec![],
        ca_bundle: None,
    }
}

fn prepare_fs(plan: &FsPlan) -> Prepared {
    prepare(plan, &NetRules::default(), &Scopes::default(), false).expect("prepare")
}

#[test]
fn read_write_exec_are_enforced() {
    if !landlock_at_least(1) {
        return;
    }
    let (_t, t) = tmp();
    let (ro, rw, x, out) = (t.join("ro"), t.join("rw"), t.join("x"), t.join("out"));
    write(&ro.join("file"), "hello");
    write(&ro.join("other"), "keep");
    write(&out.join("secret"), "s3cret");
    std::fs::create_dir_all(&rw).expect("mkdir");
    write(&rw.join("old"), "old");
    std::fs::create_dir_all(&x).expect("mkdir");
    std::fs::copy("/usr/bin/true", rw.join("true")).expect("copy true");
    std::fs::copy("/usr/bin/true", x.join("true")).expect("copy true");
    let solo = t.join("solo");
    std::fs::create_dir_all(&solo).expect("mkdir");
    std::fs::copy("/usr/bin/true", solo.join("true")).expect("copy true");
    write(&solo.join("other"), "other");
    let plan = fs_plan(
        vec![
            grant(&ro, Access::READ),
            grant(&rw, Access::WRITE),
            grant(&x, Access::EXEC),
            grant(&solo.join("true"), Access::EXEC),
        ],
        vec![],
    );
    let (ro, rw, x, out, solo) = (
        ro.display(),
        rw.display(),
        x.display(),
        out.display(),
        solo.display(),
    );
    let r = sh(
        prepare_fs(&plan),
        &format!(
            r#"
        cat {ro}/file >/dev/null 2>&1; echo read_ro=$?
        ls {ro} >/dev/null 2>&1; echo list_ro=$?
        (echo x >> {ro}/file) 2>/dev/null; echo write_ro=$?
        (echo x > {ro}/new) 2>/dev/null; echo create_ro=$?
        truncate -s 0 {ro}/file 2>/dev/null; echo truncate_ro=$?
        rm -f {ro}/other 2>/dev/null; echo unlink_ro=$?
        mv {ro}/other {ro}/renamed 2>/dev/null; echo rename_ro=$?
        mv {ro}/other {rw}/moved 2>/dev/null; echo move_ro_to_rw=$?
        mkdir {ro}/d 2>/dev/null; echo mkdir_ro=$?
        {ro}/../x/true; echo exec_x=$?
        {rw}/true 2>/dev/null; echo exec_rw=$?
        {solo}/true; echo exec_file_grant=$?
        cat {solo}/other >/dev/null 2>&1; echo read_beside_file_grant=$?
        echo x > /dev/null; echo write_dev_null=$?
        (echo x > {x}/new) 2>/dev/null; echo write_x=$?
        (echo data > {rw}/new) 2>/dev/null; echo create_rw=$?
        (echo more >> {rw}/old) 2>/dev/null; echo write_rw=$?
        truncate -s 1 {rw}/old 2>/dev/null; echo truncate_rw=$?
        mkdir {rw}/d 2>/dev/null; echo mkdir_rw=$?
        mv {rw}/new {rw}/d/new 2>/dev/null; echo rename_rw=$?
        rm {rw}/d/new 2>/dev/null; echo unlink_rw=$?
        cat {out}/secret >/dev/null 2>&1; echo read_outside=$?
        ls {out} >/dev/null 2>&1; echo list_outside=$?
        read l < /proc/self/status; echo proc_self=$?
        cat /proc/$$/status >/dev/null 2>&1; echo proc_shell=$?
        cat /proc/self/status >/dev/null 2>&1; echo proc_self_of_grandchild=$?
        cat /proc/1/status >/dev/null 2>&1; echo proc_1=$?
        "#
        ),
    );
    for k in [
        "read_ro",
        "list_ro",
        "exec_x",
        "create_rw",
        "write_rw",
        "truncate_rw",
        "mkdir_rw",
        "rename_rw",
        "unlink_rw",
        "proc_self",
        "proc_shell",
    ] {
        ok(&r, k);
    }
    for k in [
        "write_ro",
        "create_ro",
        "truncate_ro",
        "unlink_ro",
        "rename_ro",
        "move_ro_to_rw",
        "mkdir_ro",
        "exec_rw",
        "write_x",
        "read_outside",
        "list_outside",
        "proc_1",
    ] {
        denied(&r, k);
    }
    // Known limit: only the sandboxed process's own /proc/<pid> is granted; a process it
    // starts later (cat here) has a new /proc/<pid> that no rule covers.
    denied(&r, "proc_self_of_grandchild");
    let ro = t.join("ro");
    assert_eq!(
        std::fs::read_to_string(ro.join("file")).expect("read"),
        "hello"
    );
    assert!(ro.join("other").exists());
}

#[test]
fn links_do_not_escape() {
    if !landlock_at_least(2) {
        return;
    }
    let (_t, t) = tmp();
    let (rw, out) = (t.join("rw"), t.join("out"));
    std::fs::create_dir_all(&rw).expect("mkdir");
    write(&out.join("secret"), "s3cret");
    let plan = fs_plan(vec![grant(&rw, Access::WRITE)], vec![]);
    let (rw, out) = (rw.display(), out.display());
    let r = sh(
        prepare_fs(&plan),
        &format!(
            r#"
        ln {out}/secret {rw}/hard 2>/dev/null; echo hardlink=$?
        cat {rw}/hard >/dev/null 2>&1; echo read_hard=$?
        ln -s {out}/secret {rw}/soft 2>/dev/null; echo symlink=$?
        cat {rw}/soft >/dev/null 2>&1; echo read_soft=$?
        mv {out}/secret {rw}/stolen 2>/dev/null; echo move_in=$?
        "#
        ),
    );
    ok(&r, "symlink"); // creating a link is fine, following it is checked at the target
    for k in ["hardlink", "read_hard", "read_soft", "move_in"] {
        denied(&r, k);
    }
    assert!(t.join("out/secret").exists());
}

#[test]
fn carve_out_hides_denied_paths_two_levels_down() {
    if !landlock_at_least(1) {
        return;
    }
    let (_t, t) = tmp();
    let g = t.join("g");
    write(&g.join("x"), "x");
    write(&g.join("a/y"), "y");
    write(&g.join("a/b/z"), "z");
    write(&g.join("a/b/secret/k"), "k");
    write(&g.join("top.key"), "key");
    write(&g.join("sub/deep/file"), "deep");
    write(&g.join("d/cred.json"), "cred");
    write(&g.join("d/other"), "other");
    write(&t.join("out/secret"), "s3cret");
    std::os::unix::fs::symlink(t.join("out/secret"), g.join("a/link_out")).expect("symlink");
    std::os::unix::fs::symlink(g.join("x"), g.join("a/link_in")).expect("symlink");
    std::os::unix::fs::symlink(g.join("a/b/secret/k"), g.join("a/link_denied")).expect("symlink");
    let plan = fs_plan(
        vec![grant(&g, Access::READ)],
        vec![
            deny(&g.join("a/b/secret")),
            deny(&g.join("top.key")),
            deny(&g.join("d/cred.json")),
            deny(&t.join("nonexistent")),
        ],
    );
    let prepared = prepare_fs(&plan);
    let rep = prepared.report();
    assert!(
        rep.denied
            .iter()
            .any(|d| d.path == g.join("a/b/secret") && d.grant == g),
        "{:?}",
        rep.denied
    );
    assert!(
        !rep.rules
            .iter()
            .any(|l| l.path == g || l.path.starts_with(g.join("a/b/secret"))),
        "{:?}",
        rep.rules
    );
    let g = g.display();
    let r = sh(
        prepared,
        &format!(
            r#"
        cat {g}/x >/dev/null 2>&1; echo x=$?
        cat {g}/a/y >/dev/null 2>&1; echo a_y=$?
        cat {g}/a/b/z >/dev/null 2>&1; echo a_b_z=$?
        cat {g}/sub/deep/file >/dev/null 2>&1; echo deep=$?
        cat {g}/d/other >/dev/null 2>&1; echo d_other=$?
        ls {g}/d >/dev/null 2>&1; echo list_d=$?
        ls {g}/sub >/dev/null 2>&1; echo list_sub=$?
        cat {g}/a/link_in >/dev/null 2>&1; echo link_in=$?
        cat {g}/a/b/secret/k >/dev/null 2>&1; echo secret_k=$?
        ls {g}/a/b/secret >/dev/null 2>&1; echo list_secret=$?
        cat {g}/top.key >/dev/null 2>&1; echo top_key=$?
        cat {g}/d/cred.json >/dev/null 2>&1; echo cred=$?
        cat {g}/a/link_out >/dev/null 2>&1; echo link_out=$?
        cat {g}/a/link_denied >/dev/null 2>&1; echo link_denied=$?
        ls {g}/a/b >/dev/null 2>&1; echo list_a_b=$?
        "#
        ),
    );
    for k in [
        "x", "a_y", "a_b_z", "deep", "d_other", "list_d", "list_sub", "link_in",
    ] {
        ok(&r, k);
    }
    for k in [
        "secret_k",
        "list_secret",
        "top_key",
        "cred",
        "link_out",
        "link_denied",
        "list_a_b",
    ] {
        denied(&r, k);
    }
}

#[test]
fn carve_out_in_a_write_grant() {
    if !landlock_at_least(1) {
        return;
    }
    let (_t, t) = tmp();
    let g = t.join("w");
    write(&g.join("s/key"), "key");
    write(&g.join("sub/f"), "f");
    let plan = fs_plan(vec![grant(&g, Access::WRITE)], vec![deny(&g.join("s"))]);
    let g = g.display();
    let r = sh(
        prepare_fs(&plan),
        &format!(
            r#"
        (echo x > {g}/sub/new) 2>/dev/null; echo create_in_sub=$?
        (echo x >> {g}/sub/f) 2>/dev/null; echo write_sub_f=$?
        (echo x > {g}/new) 2>/dev/null; echo create_in_expanded=$?
        (echo x >> {g}/s/key) 2>/dev/null; echo write_denied=$?
        rm -rf {g}/s 2>/dev/null; echo remove_denied=$?
        mv {g}/sub/f {g}/s/f 2>/dev/null; echo move_into_denied=$?
        "#
        ),
    );
    ok(&r, "create_in_sub");
    ok(&r, "write_sub_f");
    // Documented: the expanded directory itself has no rule.
    denied(&r, "create_in_expanded");
    denied(&r, "write_denied");
    denied(&r, "remove_denied");
    denied(&r, "move_into_denied");
    assert_eq!(
        std::fs::read_to_string(t.join("w/s/key")).expect("key kept"),
        "key"
    );
}

#[test]
fn exact_grant_wins_over_deny_and_nested_grant_is_dropped() {
    if !landlock_at_least(1) {
        return;
    }
    let (_t, t) = tmp();
    let home = t.join("home");
    write(&home.join(".ssh/config"), "cfg");
    write(&home.join(".aws/credentials"), "aws");
    write(&home.join("proj/f"), "f");
    let plan = fs_plan(
        vec![
            grant(&home, Access::WRITE),
            grant(&home.join(".ssh"), Access::READ), // names the deny exactly: wins
            grant(&home.join(".aws/credentials"), Access::READ), // inside a deny: dropped
        ],
        vec![deny(&home.join(".ssh")), deny(&home.join(".aws"))],
    );
    let prepared = prepare_fs(&plan);
    let dropped = &prepared.report().dropped;
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0].path, home.join(".aws/credentials"));
    assert_eq!(dropped[0].deny, home.join(".aws"));
    let h = home.display();
    let r = sh(
        prepared,
        &format!(
            r#"
        cat {h}/.ssh/config >/dev/null 2>&1; echo ssh_read=$?
        (echo x >> {h}/.ssh/config) 2>/dev/null; echo ssh_write=$?
        cat {h}/.aws/credentials >/dev/null 2>&1; echo aws_read=$?
        (echo x >> {h}/proj/f) 2>/dev/null; echo proj_write=$?
        "#
        ),
    );
    ok(&r, "ssh_read");
    denied(&r, "ssh_write"); // the exact grant's rights, not the broader grant's
    denied(&r, "aws_read");
    ok(&r, "proj_write");
}

#[test]
fn tcp_connect_only_to_listed_ports() {
    if !landlock_at_least(4) {
        return;
    }
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let (pa, po) = (
        allowed.local_addr().expect("addr").port(),
        other.local_addr().expect("addr").port(),
    );
    let plan = fs_plan(vec![], vec![]);
    let net = NetRules {
        tcp_required: true,
        handle_tcp: true,
        connect_ports: vec![pa],
    };
    let prepared = prepare(&plan, &net, &Scopes::default(), false).expect("prepare");
    assert!(prepared.report().tcp);
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg("-S").arg("-c").arg(format!(
        r#"
import socket
def connect(p):
    try:
        socket.create_connection(("127.0.0.1", p), timeout=5).close(); return 0
    except OSError as e:
        return e.errno
print("allowed=%d" % connect({pa}))
print("other=%d" % connect({po}))
try:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print("bind=0")
except OSError as e:
    print("bind=%d" % e.errno)
"#
    ));
    let r = results(sandboxed(prepared, cmd));
    ok(&r, "allowed");
    assert_eq!(
        r.get("other").map(String::as_str),
        Some("13"),
        "EACCES expected: {r:?}"
    );
    assert_eq!(
        r.get("bind").map(String::as_str),
        Some("13"),
        "EACCES expected: {r:?}"
    );
}

#[test]
fn scopes_confine_signals_and_abstract_sockets() {
    if !landlock_at_least(6) {
        return;
    }
    let name = format!("capsule-landlock-test-{}", std::process::id());
    use std::os::linux::net::SocketAddrExt;
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract addr");
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind abstract");
    let mut sleeper = Command::new("/usr/bin/sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let plan = fs_plan(vec![], vec![]);
    let scopes = Scopes {
        signal: true,
        abstract_unix: true,
    };
    let prepared = prepare(&plan, &NetRules::default(), &scopes, false).expect("prepare");
    assert!(prepared.report().scopes);
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg("-S").arg("-c").arg(format!(
        r#"
import os, socket
try:
    os.kill({pid}, 0); print("kill=0")
except OSError as e:
    print("kill=%d" % e.errno)
try:
    os.kill(os.getpid(), 0); print("kill_self=0")
except OSError as e:
    print("kill_self=%d" % e.errno)
try:
    s = socket.socket(socket.AF_UNIX); s.connect("\0{name}"); print("abstract=0")
except OSError as e:
    print("abstract=%d" % e.errno)
"#,
        pid = sleeper.id()
    ));
    let r = results(sandboxed(prepared, cmd));
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(
        r.get("kill").map(String::as_str),
        Some("1"),
        "EPERM expected: {r:?}"
    );
    ok(&r, "kill_self");
    assert_eq!(
        r.get("abstract").map(String::as_str),
        Some("1"),
        "EPERM expected: {r:?}"
    );
}

#[test]
fn report_lines_name_rights_origin_and_abi() {
    if !landlock_at_least(1) {
        return;
    }
    let (_t, t) = tmp();
    let plan = FsPlan {
        grants: vec![FsGrant {
            opened: Opened::NONE,
            path: t.clone(),
            access: Access::WRITE,
            origin: Origin::Policy {
                key: "filesystem.write[0]".into(),
                line: Some(7),
            },
        }],
        deny: vec![],
        proc_self: false,
        mounts: vec![],
        ca_bundle: None,
    };
    let prepared =
        prepare(&plan, &NetRules::default(), &Scopes::default(), false).expect("prepare");
    let lines = prepared.report().lines();
    let want = format!(
        "rw {} — policy filesystem.write[0] (line 7) — Landlock ABI {}",
        t.display(),
        prepared.report().abi
    );
    assert_eq!(lines, vec![want]);
    assert!(prepared.report().fs && prepared.report().missing.is_empty());
}

#[test]
fn missing_features_fail_closed_unless_best_effort() {
    let abi = crate::kernel::probe().landlock_abi;
    // Ask for everything; on a kernel below ABI 6 the request must be refused.
    let net = NetRules {
        tcp_required: true,
        handle_tcp: true,
        connect_ports: vec![],
    };
    let scopes = Scopes {
        signal: true,
        abstract_unix: false,
    };
    let plan = FsPlan::default();
    match prepare(&plan, &net, &scopes, false) {
        Ok(p) => assert!(abi >= 6 && p.report().missing.is_empty()),
        Err(LandlockError::Unsupported { missing, .. }) => assert!(abi < 6 && !missing.is_empty()),
        Err(e) => panic!("unexpected error: {e}"),
    }
    let p = prepare(&plan, &net, &scopes, true).expect("best effort never refuses");
    assert_eq!(p.report().missing.is_empty(), abi >= 6);
}

#[test]
#[ignore = "timing probe, run by hand with --nocapture"]
fn prepare_timing_probe() {
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()));
    let mut plan = fs_plan(
        vec![grant(&home, Access::READ)],
        vec![
            deny(&home.join(".ssh")),
            deny(&home.join(".cargo/credentials.toml")),
        ],
    );
    plan.proc_self = true;
    let n = 200;
    for (label, plan) in [
        ("system only", fs_plan(vec![], vec![])),
        ("system + carved home", plan),
    ] {
        let start = std::time::Instant::now();
        for _ in 0..n {
            let p = prepare(
                &plan,
                &NetRules {
                    tcp_required: true,
                    handle_tcp: true,
                    connect_ports: vec![8080],
                },
                &Scopes {
                    signal: true,
                    abstract_unix: true,
                },
                false,
            )
            .expect("prepare");
            std::hint::black_box(&p);
        }
        let p = prepare(&plan, &NetRules::default(), &Scopes::default(), false).expect("prepare");
        eprintln!(
            "{label}: {:?} per prepare, {} rules",
            start.elapsed() / n,
            p.report().rules.len()
        );
    }
}

//! The decisions of `cgroup`, fed with /proc/self/cgroup text and cgroup
//! directories made of plain files in a tempdir (nothing here touches a
//! real cgroup).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use super::*;

const SESSION: &str = "0::/user.slice/user-0.slice/session-3.scope\n";
const HYBRID: &str = "12:pids:/user.slice/user-0.slice/session-3.scope\n\
                      11:memory:/user.slice/user-0.slice/session-3.scope\n\
                      10:cpu,cpuacct:/user.slice\n\
                      0::/user.slice/user-0.slice/session-3.scope\n";

#[test]
fn proc_self_cgroup_pure_v2_and_hybrid() {
    let (v2, v1) = parse_proc_cgroup(SESSION);
    assert_eq!(
        v2.as_deref(),
        Some("/user.slice/user-0.slice/session-3.scope")
    );
    assert!(v1.is_empty());
    let (v2, v1) = parse_proc_cgroup(HYBRID);
    assert_eq!(
        v2.as_deref(),
        Some("/user.slice/user-0.slice/session-3.scope")
    );
    let names: Vec<&str> = v1.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(names, ["pids", "memory", "cpu", "cpuacct"]);
    assert_eq!(v1[3].1, "/user.slice");
}

#[test]
fn systemd_slice_and_unit_of_a_cgroup() {
    let p = |rel: &str| systemd_placement(rel).map(|p| (p.slice_path, p.slice, p.unit));
    let s = |a: &str, b: &str, c: &str| Some((a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(
        p("/user.slice/user-0.slice/session-3.scope"),
        s(
            "/user.slice/user-0.slice",
            "user-0.slice",
            "session-3.scope"
        )
    );
    assert_eq!(
        p("/system.slice/gitlab-runner.service"),
        s("/system.slice", "system.slice", "gitlab-runner.service")
    );
    // Below a unit the slices are another manager's (user@0.service's app.slice).
    assert_eq!(
        p("/user.slice/user-0.slice/user@0.service/app.slice/x.scope"),
        s("/user.slice/user-0.slice", "user-0.slice", "user@0.service")
    );
    assert_eq!(
        p("/system.slice/docker-abc.scope/sub"),
        s("/system.slice", "system.slice", "docker-abc.scope")
    );
    // Not systemd's layout, or no slice to put a scope in.
    for rel in [
        "/",
        "",
        "/init.scope",
        "/user.slice",
        "/kubepods/pod1/abc",
        "/system.slice/x.mount",
    ] {
        assert_eq!(p(rel), None, "{rel}");
    }
}

/// A fake cgroup directory: `procs` in cgroup.procs, `controllers` in
/// cgroup.controllers, an empty cgroup.subtree_control, type `ty`.
fn fake_cgroup(root: &Path, name: &str, procs: &[u32], controllers: &str, ty: &str) -> PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let procs: String = procs.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(d.join("cgroup.procs"), procs).unwrap();
    std::fs::write(d.join("cgroup.controllers"), format!("{controllers}\n")).unwrap();
    std::fs::write(d.join("cgroup.subtree_control"), "\n").unwrap();
    std::fs::write(d.join("cgroup.type"), format!("{ty}\n")).unwrap();
    d
}

#[test]
fn a_delegated_cgroup_is_taken_only_when_marked_owned_and_capsule_is_alone_in_it() {
    let t = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let uid = std::fs::metadata(t.path()).unwrap().uid();
    let all = ["memory", "pids"];
    let ok = fake_cgroup(t.path(), "ok", &[me], "cpu io memory pids", "domain");
    assert_eq!(
        delegation(&ok, true, me, uid, &all),
        Ok(vec!["memory".to_string(), "pids".to_string()])
    );
    // Only what is wanted, and only what the parent offers.
    assert_eq!(
        delegation(&ok, true, me, uid, &["pids"]),
        Ok(vec!["pids".to_string()])
    );
    let pids_only = fake_cgroup(t.path(), "pids-only", &[me], "pids", "domain");
    assert_eq!(
        delegation(&pids_only, true, me, uid, &all),
        Ok(vec!["pids".to_string()])
    );

    // Not marked delegated: a session scope root happens to own.
    let e = delegation(&ok, false, me, uid, &all).unwrap_err();
    assert!(e.contains("not delegated"), "{e}");
    // Delegated to another user.
    let e = delegation(&ok, true, me, uid + 1, &all).unwrap_err();
    assert!(e.contains("uid"), "{e}");
    // Other processes in it: enabling controllers would need moving them.
    let shared = fake_cgroup(t.path(), "shared", &[1, me], "memory pids", "domain");
    let e = delegation(&shared, true, me, uid, &all).unwrap_err();
    assert!(e.contains("other processes"), "{e}");
    // capsule is not in it at all.
    let other = fake_cgroup(t.path(), "other", &[1], "memory pids", "domain");
    assert!(delegation(&other, true, me, uid, &all).is_err());
    // Threaded: no domain controllers there, and never switched by capsule.
    let threaded = fake_cgroup(
        t.path(),
        "threaded",
        &[me],
        "memory pids",
        "domain threaded",
    );
    let e = delegation(&threaded, true, me, uid, &all).unwrap_err();
    assert!(e.contains("threaded"), "{e}");
    // No memory or pids controller offered (a hybrid host's unified hierarchy).
    let bare = fake_cgroup(t.path(), "bare", &[me], "", "domain");
    let e = delegation(&bare, true, me, uid, &all).unwrap_err();
    assert!(e.contains("controller"), "{e}");
    // The root cgroup has no cgroup.type: never delegated.
    let root = fake_cgroup(t.path(), "root", &[me], "memory pids", "domain");
    std::fs::remove_file(root.join("cgroup.type")).unwrap();
    assert!(delegation(&root, true, me, uid, &all).is_err());
}

#[test]
fn the_delegation_mark_is_systemds_xattr() {
    // A tempdir has neither trusted.delegate nor user.delegate.
    let t = tempfile::tempdir().unwrap();
    assert!(!delegate_marked(t.path()));
    // user.* xattrs work on most file systems a tempdir lives on; where they
    // do not, the mark cannot be read there either.
    let set = |v: &str| {
        // Written with python3's os.setxattr when there is one; skipped otherwise.
        std::process::Command::new("python3")
            .args([
                "-c",
                "import os, sys; os.setxattr(sys.argv[1], 'user.delegate', sys.argv[2].encode())",
            ])
            .arg(t.path())
            .arg(v)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if set("1") {
        assert!(delegate_marked(t.path()));
        assert!(set("0"));
        assert!(!delegate_marked(t.path()));
    }
}

fn host(booted: bool) -> SystemdHost {
    SystemdHost {
        booted,
        systemd_run: Some(PathBuf::from("/usr/bin/systemd-run")),
        cat: Some(PathBuf::from("/usr/bin/cat")),
        disabled: false,
        v2_pids: true,
    }
}

#[test]
fn a_scope_is_asked_for_only_on_a_systemd_host_that_can_give_one() {
    let rel = "/user.slice/user-0.slice/session-3.scope";
    let req = scope_request(rel, &host(true), "01JRUNID", 2).expect("a scope request");
    assert_eq!(req.unit, "capsule-01jrunid-2.scope");
    assert_eq!(
        req.expected,
        "/user.slice/user-0.slice/capsule-01jrunid-2.scope"
    );
    assert_eq!(
        req.argv,
        [
            "/usr/bin/systemd-run",
            "--scope",
            "--quiet",
            "--collect",
            "--no-ask-password",
            "--property=Delegate=yes",
            "--slice=user-0.slice",
            "--unit=capsule-01jrunid-2.scope",
            "--description=capsule run 01JRUNID",
            "--",
            "/usr/bin/cat",
            "/proc/self/cgroup",
            "-",
        ]
    );
    // Every argument is fixed: nothing of the user's command passes through
    // systemd-run (which expands ${VAR} in its command line since systemd 254).
    assert!(!req.argv.iter().any(|a| a.contains('$')));

    // Not systemd: no request, and nothing to say about it.
    assert_eq!(scope_request(rel, &host(false), "X", 1).unwrap_err(), None);
    let why = |h: SystemdHost, rel: &str| scope_request(rel, &h, "X", 1).unwrap_err().unwrap();
    assert!(why(
        SystemdHost {
            disabled: true,
            ..host(true)
        },
        rel
    )
    .contains("CAPSULE_NO_SYSTEMD_SCOPE"));
    assert!(why(
        SystemdHost {
            systemd_run: None,
            ..host(true)
        },
        rel
    )
    .contains("systemd-run"));
    assert!(why(
        SystemdHost {
            cat: None,
            ..host(true)
        },
        rel
    )
    .contains("cat"));
    assert!(why(
        SystemdHost {
            v2_pids: false,
            ..host(true)
        },
        rel
    )
    .contains("pids"));
    assert!(why(host(true), "/init.scope").contains("slice"));
}

#[test]
fn the_scopes_cgroup_is_read_from_the_helpers_output() {
    let exp = "/user.slice/user-0.slice/capsule-x-1.scope";
    assert_eq!(
        scope_from_output(&format!("0::{exp}\n"), exp),
        Some(Ok(exp.to_string()))
    );
    assert_eq!(
        scope_from_output(&format!("1:name=systemd:{exp}\n0::{exp}\n"), exp),
        Some(Ok(exp.to_string()))
    );
    // Not complete yet.
    assert_eq!(scope_from_output("0::/user.slice/us", exp), None);
    assert_eq!(scope_from_output("", exp), None);
    // Anywhere else: refused (never a cgroup capsule did not ask for).
    let e = scope_from_output("0::/user.slice/user-0.slice/session-3.scope\n", exp);
    assert!(
        matches!(e, Some(Err(ref m)) if m.contains("session-3.scope")),
        "{e:?}"
    );
}

/// A stand-in for systemd-run: a shell script in a tempdir.
fn fake_systemd_run(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("systemd-run");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn request_with(fake: PathBuf, expected: &str) -> ScopeRequest {
    ScopeRequest {
        argv: vec![fake.to_string_lossy().into_owned()],
        unit: "capsule-x-1.scope".into(),
        expected: expected.into(),
    }
}

#[test]
fn asking_systemd_reads_the_scope_and_keeps_the_helper_until_capsule_moved() {
    let t = tempfile::tempdir().unwrap();
    let exp = "/system.slice/capsule-x-1.scope";
    // As systemd-run does after registering the scope: exec the helper, which
    // prints its cgroup and waits for stdin to close.
    let fake = fake_systemd_run(t.path(), &format!("echo '0::{exp}'; exec cat > /dev/null"));
    let (rel, helper) =
        ask_systemd(&request_with(fake, exp), Duration::from_secs(20)).expect("a scope");
    assert_eq!(rel, exp);
    let status = helper.finish();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
}

#[test]
fn asking_systemd_fails_cleanly_when_systemd_run_does() {
    let t = tempfile::tempdir().unwrap();
    let exp = "/system.slice/capsule-x-1.scope";
    let fake = fake_systemd_run(
        t.path(),
        "echo 'Failed to connect to bus: No such file or directory' >&2; exit 1",
    );
    let e = ask_systemd(&request_with(fake, exp), Duration::from_secs(20)).unwrap_err();
    assert!(e.contains("Failed to connect to bus"), "{e}");
    // Some other cgroup: refused, the helper ended.
    let fake = fake_systemd_run(
        t.path(),
        "echo '0::/system.slice/ssh.service'; exec cat > /dev/null",
    );
    let e = ask_systemd(&request_with(fake, exp), Duration::from_secs(20)).unwrap_err();
    assert!(e.contains("ssh.service"), "{e}");
    // Hanging (D-Bus stuck): given up after the timeout, the helper killed.
    let fake = fake_systemd_run(t.path(), "exec sleep 30");
    let t0 = std::time::Instant::now();
    let e = ask_systemd(&request_with(fake, exp), Duration::from_millis(300)).unwrap_err();
    assert!(e.contains("no answer"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_cgroup_chowned_to_a_user_is_delegated_to_that_user_but_never_by_ownership_to_root() {
    // cgroup-v2.rst, "Delegation": write access to the directory and to its
    // cgroup.procs, cgroup.threads and cgroup.subtree_control is the delegation.
    let t = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let d = fake_cgroup(t.path(), "d", &[me], "memory pids", "domain");
    std::fs::write(d.join("cgroup.threads"), format!("{me}\n")).unwrap();
    let mut uid = std::fs::metadata(&d).unwrap().uid();
    if uid == 0 {
        // As root: hand the fake cgroup to another user, as a delegation does.
        assert!(!chowned_to(&d, 0));
        uid = 65534;
        for f in [
            "",
            "cgroup.procs",
            "cgroup.threads",
            "cgroup.subtree_control",
        ] {
            std::os::unix::fs::chown(d.join(f), Some(uid), None).unwrap();
        }
    }
    assert!(chowned_to(&d, uid));
    assert!(!chowned_to(&d, uid + 1));
    // Every file must be the user's.
    std::fs::remove_file(d.join("cgroup.threads")).unwrap();
    assert!(!chowned_to(&d, uid));
    // Root owns every cgroup: ownership says nothing there.
    assert!(!chowned_to(&d, 0));
}

/// The run's first stage joins the v1 cgroups itself (a `tasks` file open
/// for it); capsule moves the child only into the rest, and waits for "go"
/// only when there is a rest.
#[test]
fn v1_cgroups_are_joined_by_the_stage_and_the_rest_by_capsule() {
    let t = tempfile::tempdir().unwrap();
    let v1 = t.path().join("memory");
    let v2 = t.path().join("v2");
    for d in [&v1, &v2] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("tasks"), "").unwrap();
        std::fs::write(d.join("cgroup.procs"), "").unwrap();
    }
    let mut cg = RunCgroup::default();
    cg.dirs = vec![v1.clone(), v2.clone()];
    cg.v1_dirs = vec![v1.clone()];
    assert!(cg.parent_joins());
    let fds = cg.self_join_files();
    assert_eq!(fds.len(), 1);
    // Asked again (the run's next path): the same descriptors.
    assert_eq!(cg.self_join_files(), fds);
    assert!(
        cg.parent_joins(),
        "the v2 cgroup is still capsule's to join"
    );
    cg.join(4242, false).unwrap();
    assert_eq!(
        std::fs::read_to_string(v2.join("cgroup.procs")).unwrap(),
        "4242"
    );
    assert_eq!(
        std::fs::read_to_string(v1.join("cgroup.procs")).unwrap(),
        ""
    );
    cg.dirs.retain(|d| d != &v2);
    assert!(
        !cg.parent_joins(),
        "nothing left for capsule: no go to wait for"
    );
    // Nothing of the fake layout is a cgroup: remove() must not rmdir a
    // directory holding files, and the descriptors go with it.
    cg.dirs.clear();
    cg.remove();
    assert!(cg.self_join.is_empty());
}

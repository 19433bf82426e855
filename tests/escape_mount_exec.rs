//! A read-only mount carries read+exec on its source; a write grant inside
//! that source must not become a place to write a program and then execute
//! it (issue 20, finding 3): "no execve from a writable place that is not an
//! exec grant". Landlock rules attach to inodes, so the program is tried
//! through the mount's path and through its own.

mod common;

use common::*;

/// `proj` mounted read-only at `dst`, `proj/out` writable; the run writes a
/// copy of `id` into `out` and executes it through both paths.
fn attack(sb: &Sandbox, dst: &str) {
    sb.mkdir("proj/out");
    sb.write("proj/build.sh", "#!/bin/sh\necho built\n");
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [./proj/out]\nmounts:\n  - {{src: ./proj, dst: {dst}}}\n"
    ));
    let out = sb.p("proj/out");
    let script = "cp /usr/bin/id \"$0/prog\" && chmod +x \"$0/prog\" || exit 9; \
                  \"$1/out/prog\" && echo EXEC-VIA-MOUNT; \"$0/prog\" && echo EXEC-VIA-SOURCE; exit 0";
    let run = sb.exec_json(&["--policy", &pol], &["/bin/sh", "-c", script, &out, dst]);
    run.assert_code(0);
    assert!(
        !run.stdout.contains("EXEC-VIA-MOUNT") && !run.stdout.contains("EXEC-VIA-SOURCE"),
        "ESCAPE: a program the run wrote ran from a read-only mount over its write grant{}",
        run.ctx()
    );
    assert!(
        run.json()["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("ermission denied"),
        "the exec was not denied by permission{}",
        run.ctx()
    );
    // check shows the exec right withheld, and where the writable place is.
    let check = sb.run(&["check", "--policy", &pol]);
    check.assert_code(0);
    let proj = sb.p("proj");
    assert!(
        check
            .stdout
            .contains(&format!("r    {proj}  — policy mounts[0]"))
            && check.stdout.contains("exec withheld")
            && check.stdout.contains(&out),
        "check does not show the exec right withheld and why{}",
        check.ctx()
    );
}

#[test]
fn a_read_only_mount_gives_no_exec_over_a_write_grant_inside_it() {
    if !view_expected() {
        return skip("a mount elsewhere than its source needs the view (no namespaces here)");
    }
    let sb = Sandbox::new();
    attack(&sb, "/src");
}

/// Without the view a mount is granted in place (dst == src): the same rule.
#[test]
fn a_read_only_mount_in_place_gives_no_exec_over_a_write_grant_inside_it() {
    let sb = Sandbox::new();
    let dst = sb.p("proj");
    attack(&sb, &dst);
}

/// Without a writable place inside, a read-only mount still executes.
#[test]
fn a_read_only_mount_without_a_writable_place_inside_still_executes() {
    let sb = Sandbox::new();
    sb.write_exec("proj/build.sh", "#!/bin/sh\necho built\n");
    let proj = sb.p("proj");
    let pol = sb.policy(&format!(
        "version: 1\nmounts:\n  - {{src: ./proj, dst: {proj}}}\n"
    ));
    let run = sb.exec_json(&["--policy", &pol], &[&format!("{proj}/build.sh")]);
    run.assert_code(0);
    assert_eq!(run.child_stdout(), "built\n", "{}", run.ctx());
}

/// The same hole through `filesystem.system`: its read+exec of /usr covers a
/// write grant beneath /usr (root can have one), so a program the run writes
/// there would execute. Refused at planning, naming both.
#[test]
fn a_write_grant_beneath_the_systems_exec_dirs_is_refused() {
    if !is_root() {
        return skip("only root has a writable directory beneath /usr to grant");
    }
    let dir = tempfile::Builder::new()
        .prefix("capsule-test-usr-")
        .tempdir_in("/usr/local/share")
        .expect("a directory beneath /usr/local/share");
    let d = dir.path().to_string_lossy().into_owned();
    let sb = Sandbox::new();
    let script = "cp /usr/bin/id \"$0/prog\" && chmod +x \"$0/prog\" || exit 9; \"$0/prog\" && echo EXEC-RAN; exit 0";
    let run = sb.exec_json(&["--allow-write", &d], &["/bin/sh", "-c", script, &d]);
    assert!(
        !run.stdout.contains("EXEC-RAN"),
        "ESCAPE: a program the run wrote beneath /usr ran through filesystem.system's exec right{}",
        run.ctx()
    );
    run.assert_code(125);
    let pol = sb.policy(&format!("version: 1\nfilesystem:\n  write: [{d}]\n"));
    let check = sb.run(&["check", "--policy", &pol]);
    assert!(
        check.code != Some(0) && check.stderr.contains(&d) && check.stderr.contains("/usr"),
        "check does not refuse it{}",
        check.ctx()
    );
}

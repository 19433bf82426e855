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

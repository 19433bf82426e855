//! What the child gets (section 3): working directory, HOME, the private
//! TMPDIR (removed afterwards), `--cwd` and `--workspace`.

mod common;

use common::*;
use std::path::Path;

#[test]
fn default_cwd_is_private_tmpdir_when_cwd_not_granted() {
    let sb = Sandbox::new();
    let run = sb.probe(&[], &[&["cwd"], &["env"]]);
    run.assert_ran();
    let env = run.probe(1)["value"].clone();
    let tmp = env["TMPDIR"].as_str().expect("TMPDIR").to_string();
    assert_eq!(run.probe(0)["value"], tmp.as_str(), "cwd{}", run.ctx());
    assert_eq!(env["HOME"], tmp.as_str(), "HOME{}", run.ctx());
}

#[test]
fn default_cwd_is_capsules_cwd_beneath_a_read_grant() {
    let sb = Sandbox::new();
    let proj = sb.mkdir("proj");
    sb.write("proj/file.txt", "relative read");
    let mut args = vec![
        "exec".to_string(),
        "--json".into(),
        "--allow-read".into(),
        sb.p("proj"),
        "--".into(),
    ];
    args.extend(probe_argv(&[&["cwd"], &["read", "file.txt"]]));
    let run = sb.run_in(&args, &proj, b"");
    run.assert_ran();
    assert_eq!(run.probe(0)["value"], sb.p("proj"), "{}", run.ctx());
    assert_eq!(run.probe(1)["value"], "relative read", "{}", run.ctx());
}

#[test]
fn cwd_flag_must_be_readable() {
    let sb = Sandbox::new();
    sb.mkdir("proj");
    sb.mkdir("other");
    let run = sb.probe(
        &["--allow-read", &sb.p("proj"), "--cwd", &sb.p("proj")],
        &[&["cwd"]],
    );
    run.assert_ran();
    assert_eq!(run.probe(0)["value"], sb.p("proj"), "{}", run.ctx());
    // A cwd outside every grant is refused before anything runs.
    let run = sb.probe(
        &["--allow-read", &sb.p("proj"), "--cwd", &sb.p("other")],
        &[&["cwd"]],
    );
    run.assert_code(125);
    assert_eq!(run.json()["termination_reason"], "refused", "{}", run.ctx());
}

#[test]
fn private_tmpdir_is_writable_unique_and_removed_afterwards() {
    let sb = Sandbox::new();
    let ops: &[&[&str]] = &[&["env"]];
    let a = sb.probe(&[], ops);
    let b = sb.probe(&[], ops);
    a.assert_ran();
    b.assert_ran();
    let ta = a.probe(0)["value"]["TMPDIR"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let tb = b.probe(0)["value"]["TMPDIR"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if ta == "/tmp" {
        // The run's view: its private TMPDIR is mounted at /tmp. Private per
        // run: what one run leaves there, the next does not see.
        let w = sb.exec_json(
            &[],
            &["/bin/sh", "-c", "echo x > /tmp/left-by-a && ls /tmp"],
        );
        w.assert_code(0);
        let r = sb.exec_json(&[], &["/bin/sh", "-c", "ls -A /tmp"]);
        r.assert_code(0);
        assert_eq!(
            r.child_stdout(),
            "",
            "TMPDIR not private per run{}",
            r.ctx()
        );
        assert!(
            !Path::new("/tmp/left-by-a").exists(),
            "the run wrote into the host's /tmp"
        );
    } else {
        assert!(
            !ta.is_empty() && ta != tb,
            "TMPDIR not private per run: {ta} {tb}"
        );
        assert!(!Path::new(&ta).exists(), "TMPDIR {ta} left behind");
    }
    // Writable inside, and gone after the run.
    let run = sb.exec_json(
        &[],
        &[
            "/bin/sh",
            "-c",
            "echo data > \"$TMPDIR/f\" && mkdir \"$TMPDIR/d\" && cat \"$TMPDIR/f\" && echo \"$TMPDIR\"",
        ],
    );
    run.assert_code(0);
    let out = run.child_stdout();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("data"), "{}", run.ctx());
    let tmp = lines.next().unwrap_or_default();
    assert!(
        !tmp.is_empty() && (tmp == "/tmp" || !Path::new(tmp).exists()),
        "TMPDIR {tmp} not removed"
    );
    // The host side of the private TMPDIR (capsule-RUNID under the host's TMPDIR) is gone.
    let run_id = run.json()["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // (The test runs capsule with a cleared environment: no TMPDIR, so /tmp.)
    let host_side = Path::new("/tmp").join(format!("capsule-{run_id}"));
    assert!(!host_side.exists(), "{} left behind", host_side.display());
    // tmp: false gives none.
    let pol = sb.policy("version: 1\nfilesystem:\n  tmp: false\n");
    let run = sb.probe(&["--policy", &pol], &[&["env"]]);
    run.assert_ran();
    assert!(
        run.probe(0)["value"].get("TMPDIR").is_none(),
        "tmp: false still set TMPDIR{}",
        run.ctx()
    );
}

#[test]
fn workspace_scripts_read_only_output_read_write_and_cwd() {
    let sb = Sandbox::new();
    sb.write("ws/scripts/hello.py", "print('hello from script')\n");
    sb.mkdir("ws/output");
    let ws = sb.p("ws");
    let run = sb.probe(
        &["--workspace", &ws],
        &[
            &["cwd"],
            &["env"],
            &["read", &sb.p("ws/scripts/hello.py")],
            &["write", &sb.p("ws/scripts/evil.py"), "evil"],
            &["write", &sb.p("ws/scripts/hello.py"), "evil"],
            &["write", &sb.p("ws/output/result.txt"), "kept"],
            &["write", "relative.txt", "rel"],
        ],
    );
    run.assert_ran();
    assert_eq!(
        run.probe(0)["value"],
        sb.p("ws/output"),
        "cwd is DIR/output{}",
        run.ctx()
    );
    assert_eq!(
        run.probe(1)["value"]["HOME"],
        sb.p("ws/output"),
        "HOME is DIR/output{}",
        run.ctx()
    );
    assert_ok(&run.probe(2), &run);
    assert_errno(&run.probe(3), &["EACCES"], &run);
    assert_errno(&run.probe(4), &["EACCES"], &run);
    assert_ok(&run.probe(5), &run);
    assert_ok(&run.probe(6), &run);
    // Output persists across runs; scripts are untouched.
    assert_eq!(sb.read("ws/output/result.txt"), "kept");
    assert_eq!(sb.read("ws/output/relative.txt"), "rel");
    assert_eq!(
        sb.read("ws/scripts/hello.py"),
        "print('hello from script')\n"
    );
    // A script from scripts/ runs through the interpreter.
    let run = sb.exec_json(
        &["--workspace", &ws],
        &[&python(), &sb.p("ws/scripts/hello.py")],
    );
    run.assert_code(0);
    assert_eq!(run.child_stdout(), "hello from script\n");
}

/// The program is found on the PATH the child gets, as `env`, bubblewrap
/// and Docker find it: a policy's `env.set.PATH` wins over capsule's own.
/// (Resolving on capsule's PATH while the child's PATH named another
/// program ran one interpreter under another's name: a pyenv python found
/// the system's standard library through the child's PATH and failed to
/// import `_socket`, seen in CI.)
#[test]
fn the_command_is_found_on_the_childs_path_not_capsules() {
    let mut sb = Sandbox::new();
    sb.write_exec("host-bin/which-one", "#!/bin/sh\necho host\n");
    sb.write_exec("child-bin/which-one", "#!/bin/sh\necho child\n");
    sb.write_exec("child-bin/only-child", "#!/bin/sh\necho only-child\n");
    let host = sb.p("host-bin");
    let child = sb.p("child-bin");
    sb.set_env("PATH", &format!("{host}:{TEST_PATH}"));
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  read: [{host}, {child}]\nenv:\n  set: {{PATH: \"{child}:/usr/bin:/bin\"}}\n"
    ));
    let run = sb.run(&["exec", "--policy", &pol, "--", "which-one"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "child", "{}", run.ctx());
    let run = sb.run(&["exec", "--policy", &pol, "--", "only-child"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "only-child", "{}", run.ctx());
    // Without env.set.PATH the child gets capsule's PATH, and the program is found there.
    let pol = sb.policy_named(
        "plain.yaml",
        &format!("version: 1\nfilesystem:\n  read: [{host}, {child}]\n"),
    );
    let run = sb.run(&["exec", "--policy", &pol, "--", "which-one"]);
    run.assert_code(0);
    assert_eq!(run.stdout.trim(), "host", "{}", run.ctx());
}

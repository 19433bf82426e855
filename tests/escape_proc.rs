//! Process escapes: /proc of the parent and of pid 1, signals to processes
//! outside the sandbox, ptrace, and leaks of the host environment.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

/// Start `sleep 60` on the host (outside any sandbox), killed on drop.

#[test]
fn proc_self_readable_pid1_and_other_pids_not() {
    let sb = Sandbox::new();
    let (sleeper, _guard) = host_sleeper();
    let spid = sleeper.id().to_string();
    let run = sb.probe(
        &[],
        &[
            &["read", "/proc/self/status"],
            &["read", "/proc/self/cmdline"],
            &["read", "/proc/1/cmdline"],
            &["read", "/proc/1/status"],
            &["read", "/proc/1/environ"],
            &["read", &format!("/proc/{spid}/cmdline")],
            &["read", &format!("/proc/{spid}/environ")],
            &["listdir", "/proc/1/fd"],
            &["readlink", "/proc/1/fd/0"],
            &["readlink", "/proc/1/cwd"],
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    assert_ok(&run.probe(1), &run);
    // A container's /proc bound into the view lists the processes beside
    // the run with their cmdline, status and descriptor numbers (gaps
    // capsule names): their environ, descriptors' targets and cwd stay
    // unreadable (Landlock's ptrace rule).
    let readable_when_bound = [2, 3, 5, 7];
    if proc_is_bound() {
        assert!(
            view_gaps().contains("numbers (not the targets)"),
            "{}",
            exec_enforcement()
        );
    }
    for i in 2..10 {
        if proc_is_bound() && readable_when_bound.contains(&i) {
            continue;
        }
        // Landlock denies the host's /proc (EACCES); the view's private
        // /proc does not list capsule's init or host processes (ENOENT).
        assert_errno(&run.probe(i), &["EACCES", "ENOENT"], &run);
    }
    // Positive control: on the host those files are readable to this user.
    let host = sb.host_probe(&[
        &["read", "/proc/1/cmdline"],
        &["read", &format!("/proc/{spid}/cmdline")],
    ]);
    assert_eq!(host[0]["ok"], true, "host control {:?}", host);
    assert_eq!(host[1]["ok"], true, "host control {:?}", host);
}

/// A read grant of `/` holds /proc too: without namespaces (a container's
/// fallback) that was the host's /proc, where every host process's command
/// line and status could be read (a token in a process's arguments). The
/// contract refuses a read grant of /proc; one of `/` now has the host's
/// /proc carved out of it (the view's /proc is private already).
#[test]
fn a_read_grant_of_root_does_not_show_host_processes() {
    let sb = Sandbox::new();
    let (sleeper, _guard) = host_sleeper();
    let spid = sleeper.id().to_string();
    let run = sb.probe(
        &["--allow-read", "/"],
        &[
            &["read", "/proc/self/status"],
            &["read", "/etc/hostname"],
            &["read", &format!("/proc/{spid}/cmdline")],
            &["read", &format!("/proc/{spid}/status")],
            &["read", "/proc/1/cmdline"],
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    assert_ok(&run.probe(1), &run);
    for i in 2..5 {
        if proc_is_bound() {
            // A container's /proc bound into the view: the listed gap.
            continue;
        }
        assert_errno(&run.probe(i), &["EACCES", "ENOENT"], &run);
    }
}

/// Spawn capsule without --json, with a probe that reads a pid from stdin;
/// feed it capsule's own pid. Returns the probe lines and capsule's status.
fn probe_with_capsule_pid(
    sb: &Sandbox,
    opts: &[&str],
    ops: &[&[&str]],
) -> (Vec<serde_json::Value>, Option<i32>, String) {
    let mut args: Vec<String> = vec!["exec".into()];
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(probe_argv(ops));
    let mut child = sb
        .std_command(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn capsule");
    let pid = child.id();
    {
        let mut stdin = child.stdin.take().expect("stdin");
        // One line per op that reads a pid.
        let _ = write!(stdin, "{pid}\n{pid}\n{pid}\n{pid}\n");
    }
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut lines = vec![];
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            lines.push(l);
        }
        lines.join("\n")
    });
    let deadline = std::time::Instant::now() + RUN_BOUND;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = reader.join().unwrap_or_default();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (
        parse_probe_lines(&out),
        status.code(),
        format!("stdout: {out}\nstderr: {err}"),
    )
}

#[test]
fn capsule_parent_proc_and_signals_unreachable() {
    let mut sb = Sandbox::new();
    let secret = token("parent-secret");
    sb.set_env("CAPSULE_TEST_SECRET", &secret);
    let (lines, code, ctx) = probe_with_capsule_pid(
        &sb,
        &[],
        &[
            &["read_stdin_proc", "environ"],
            &["read_stdin_proc", "cmdline"],
            &["kill_stdin", "0"],
            &["read_stdin_proc", "status"],
            &["kill_own_child"],
        ],
    );
    assert_eq!(code, Some(0), "capsule failed: {ctx}");
    assert_eq!(lines.len(), 5, "probe lines missing: {ctx}");
    // A container's bound /proc: the parent's cmdline and status are
    // readable (a gap capsule names), its environ is not.
    let checked = if proc_is_bound() { 0..1 } else { 0..2 };
    for l in &lines[checked] {
        assert_eq!(l["ok"], false, "read the parent's /proc: {l} {ctx}");
        // Landlock denies the host's /proc (EACCES); the view's private
        // /proc has no such pid at all (ENOENT).
        assert!(
            l["errno"] == "EACCES" || l["errno"] == "ENOENT",
            "{l} {ctx}"
        );
    }
    // Signal scope (Landlock ABI 6) says EPERM; a pid namespace hides the
    // parent entirely (ESRCH). Either way the signal must not land.
    assert_eq!(
        lines[2]["ok"], false,
        "signalled capsule itself: {} {ctx}",
        lines[2]
    );
    let e = lines[2]["errno"].as_str().unwrap_or_default();
    assert!(e == "EPERM" || e == "ESRCH", "kill(capsule, 0): {e} {ctx}");
    if !proc_is_bound() {
        assert_eq!(lines[3]["ok"], false, "{ctx}");
    }
    // Positive control: signals inside the sandbox work.
    assert_eq!(lines[4]["ok"], true, "{} {ctx}", lines[4]);
    assert_eq!(lines[4]["value"], 9);
    assert!(
        !ctx.contains(&secret),
        "host secret visible in the child: {ctx}"
    );
}

#[test]
fn signals_to_outside_processes_fail() {
    let sb = Sandbox::new();
    let (mut sleeper, _guard) = host_sleeper();
    let spid = sleeper.id().to_string();
    let run = sb.probe(
        &[],
        &[
            &["kill", &spid, "0"],
            &["kill", &spid, "15"],
            &["kill", &spid, "9"],
            &["kill", &spid, "19"],
            &["kill_own_child"],
        ],
    );
    std::thread::sleep(Duration::from_millis(200));
    let alive = sleeper.try_wait().expect("try_wait").is_none();
    assert!(
        alive,
        "ESCAPE: the sandbox killed a host process{}",
        run.ctx()
    );
    let state = std::fs::read_to_string(format!("/proc/{spid}/stat")).unwrap_or_default();
    assert!(
        !state.contains(") T "),
        "ESCAPE: the sandbox stopped a host process: {state}"
    );
    run.assert_ran();
    for i in 0..4 {
        assert_errno(&run.probe(i), &["EPERM", "ESRCH"], &run);
    }
    assert_ok(&run.probe(4), &run);
    // Positive control: the same signal 0 from the host works.
    let host = sb.host_probe(&[&["kill", &spid, "0"]]);
    assert_eq!(host[0]["ok"], true, "host control: {:?}", host);
}

#[test]
fn ptrace_and_process_vm_are_denied() {
    let sb = Sandbox::new();
    let (sleeper, _guard) = host_sleeper();
    let spid = sleeper.id().to_string();
    let ops: &[&[&str]] = &[
        &["ptrace_attach_child"],
        &["ptrace_peekuser_self"],
        &["ptrace_attach", &spid],
        &["process_vm_readv_child"],
    ];
    let run = sb.probe(&[], ops);
    run.assert_ran();
    for i in 0..4 {
        assert_errno(&run.probe(i), &["EPERM"], &run);
    }
    // Positive control: outside capsule the kernel allows tracing our own
    // child and answers ESRCH (not EPERM) for the untraced PEEKUSER.
    let host = sb.host_probe(&ops[0..2]);
    assert_eq!(host[0]["ok"], true, "host control: {:?}", host);
    assert_host_not(&host[1], "EPERM");
}

#[test]
fn host_environment_does_not_leak() {
    let mut sb = Sandbox::new();
    let secret = token("env-secret");
    let key = token("aws-key");
    sb.set_env("CAPSULE_TEST_SECRET", &secret);
    sb.set_env("AWS_SECRET_ACCESS_KEY", &key);
    sb.set_env("OPENAI_API_KEY", &key);
    let run = sb.probe(
        &[],
        &[&["env"], &["environ_file"], &["read", "/proc/self/cmdline"]],
    );
    run.assert_ran();
    assert!(
        !run.stdout.contains(&secret),
        "CAPSULE_TEST_SECRET leaked{}",
        run.ctx()
    );
    assert!(!run.stdout.contains(&key), "a host key leaked{}", run.ctx());
    let env = run.probe(0)["value"].clone();
    let names: Vec<&str> = env
        .as_object()
        .map(|o| o.keys().map(|k| k.as_str()).collect())
        .unwrap_or_default();
    for n in &names {
        assert!(
            !matches!(
                *n,
                "CAPSULE_TEST_SECRET"
                    | "AWS_SECRET_ACCESS_KEY"
                    | "OPENAI_API_KEY"
                    | "XDG_CONFIG_HOME"
                    | "XDG_STATE_HOME"
            ),
            "host variable {n} reached the child: {names:?}"
        );
    }
    // The environment the contract promises.
    assert_eq!(env["PATH"], TEST_PATH, "PATH is the host's{}", run.ctx());
    assert_eq!(env["LANG"], "C.UTF-8", "LANG set by capsule{}", run.ctx());
    let tmp = env["TMPDIR"].as_str().expect("TMPDIR set");
    assert_eq!(env["HOME"], tmp, "HOME is the private TMPDIR{}", run.ctx());
    assert_ne!(
        env["HOME"].as_str(),
        Some(sb.home.to_string_lossy().as_ref())
    );
    let environ = run.probe(1);
    assert_ok(&environ, &run);
    assert!(environ["value"]
        .as_str()
        .unwrap_or_default()
        .contains("TMPDIR="));

    // Positive control: a variable named in env.pass does arrive.
    let pol = sb.policy(
        "version: 1\nenv:\n  pass: [CAPSULE_TEST_SECRET]\n  set: {CAPSULE_FIXED: \"fixed-1\"}\n",
    );
    let run = sb.probe(&["--policy", &pol], &[&["env"], &["environ_file"]]);
    run.assert_ran();
    let env = run.probe(0)["value"].clone();
    assert_eq!(
        env["CAPSULE_TEST_SECRET"],
        secret.as_str(),
        "env.pass{}",
        run.ctx()
    );
    assert_eq!(env["CAPSULE_FIXED"], "fixed-1", "env.set{}", run.ctx());
    assert!(env.get("AWS_SECRET_ACCESS_KEY").is_none());
    assert!(run.probe(1)["value"]
        .as_str()
        .unwrap_or_default()
        .contains(&secret));
}

const REFUSED_VARS: &[&str] = &[
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "NODE_OPTIONS",
    "BASH_ENV",
    "ENV",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "DOTNET_STARTUP_HOOKS",
];

#[test]
fn refused_variables_in_env_set_exit_125_and_run_nothing() {
    let sb = Sandbox::new();
    sb.mkdir("out");
    for var in REFUSED_VARS {
        let pol = sb.policy(&format!(
            "version: 1\nfilesystem:\n  write: [./out]\nenv:\n  set: {{{var}: \"/tmp/x\"}}\n"
        ));
        let marker = sb.p("out/ran");
        let run = sb.exec_json(&["--policy", &pol], &["/usr/bin/touch", &marker]);
        run.assert_code(125);
        let j = run.json();
        assert_eq!(j["termination_reason"], "refused", "{var}{}", run.ctx());
        assert!(
            j["error"]
                .as_str()
                .map(|e| e.contains(var))
                .unwrap_or(false),
            "error names {var}{}",
            run.ctx()
        );
        assert!(
            !sb.path("out/ran").exists(),
            "the command ran despite {var}{}",
            run.ctx()
        );
    }
}

#[test]
fn refused_variables_in_env_pass_exit_125() {
    let mut sb = Sandbox::new();
    sb.set_env("LD_PRELOAD", "");
    sb.set_env("PYTHONPATH", "/nonexistent");
    for var in ["LD_PRELOAD", "PYTHONPATH", "NODE_OPTIONS"] {
        let pol = sb.policy(&format!("version: 1\nenv:\n  pass: [{var}]\n"));
        let run = sb.exec_json(&["--policy", &pol], &["/bin/true"]);
        run.assert_code(125);
        assert_eq!(
            run.json()["termination_reason"],
            "refused",
            "{var}{}",
            run.ctx()
        );
    }
    // Control: an ordinary variable in env.pass is fine.
    let pol = sb.policy("version: 1\nenv:\n  pass: [TERM]\n");
    sb.exec_json(&["--policy", &pol], &["/bin/true"])
        .assert_code(0);
}

//! The whole process tree dies: a setsid'd, SIGTERM-ignoring, double-forked
//! grandchild is gone after the timeout, and after capsule itself is
//! SIGKILLed. Signals to capsule are forwarded to the child.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

fn read_pid(path: &std::path::Path, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(p) = s.trim().parse() {
                return Some(p);
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Start `capsule ARGS` with stdout and stderr piped, and a guard that
/// SIGKILLs it if the test ends early. A SIGKILLed capsule cannot remove its
/// private TMPDIR, so that goes under the test's own directory rather than
/// the host's /tmp.
fn spawn_capsule<S: AsRef<std::ffi::OsStr>>(
    sb: &Sandbox,
    args: &[S],
) -> (std::process::Child, KillOnDrop) {
    sb.mkdir("hosttmp");
    let capsule = sb
        .std_command(args)
        .env("TMPDIR", sb.path("hosttmp"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn capsule");
    let guard = KillOnDrop {
        pid: capsule.id() as i32,
        token: None,
    };
    (capsule, guard)
}

#[test]
fn setsid_grandchild_is_gone_after_timeout() {
    let sb = Sandbox::new();
    sb.mkdir("pids");
    let pidfile = sb.path("pids/gc.pid");
    let tok = token("gc-timeout");
    let run = sb.probe(
        &["--allow-write", &sb.p("pids"), "--timeout", "2"],
        &[
            &["grandchild", &pidfile.to_string_lossy(), &tok, "1"],
            &["sleep", "60"],
        ],
    );
    // A private /proc reports the grandchild's pid in the run's namespace:
    // `host_pid` finds it (or any survivor) by its token.
    let pid = read_pid(&pidfile, Duration::from_secs(1)).map(|p| host_pid(p, &tok));
    let _guard = KillOnDrop {
        pid: pid.unwrap_or(0),
        token: Some(tok.clone()),
    };
    run.assert_code(124);
    let j = run.json();
    assert_eq!(j["killed"], true, "{}", run.ctx());
    assert_eq!(j["termination_reason"], "timeout");
    let pid = pid.unwrap_or_else(|| panic!("the grandchild never wrote its pid{}", run.ctx()));
    assert!(
        wait_gone(pid, Some(&tok), Duration::from_secs(2)),
        "ESCAPE: setsid'd grandchild {pid} survived the timeout{}",
        run.ctx()
    );
}

/// SIGKILL capsule while its run has a setsid'd, SIGTERM-ignoring,
/// double-forked grandchild: the grandchild must be gone within 2 s. With a
/// pid namespace its init dies with capsule (PR_SET_PDEATHSIG); without one
/// (`no_namespaces`) the keeper between capsule and the command, a child
/// subreaper the run's orphans are reparented to, kills the whole tree when
/// capsule dies. `no_cgroups` takes the cgroup away too (as root).
fn grandchild_dies_with_a_sigkilled_capsule(no_namespaces: bool, no_cgroups: bool) {
    let mut sb = Sandbox::new();
    if no_namespaces {
        sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    }
    if no_cgroups {
        sb.set_env("CAPSULE_NO_CGROUPS", "1");
    }
    sb.mkdir("pids");
    let pidfile = sb.path("pids/gc.pid");
    let tok = token("gc-sigkill");
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--best-effort".into(),
        "--allow-write".into(),
        sb.p("pids"),
        "--timeout".into(),
        "60".into(),
        "--".into(),
    ];
    args.extend(probe_argv(&[
        &["grandchild", &pidfile.to_string_lossy(), &tok, "1"],
        &["sleep", "60"],
    ]));
    let (mut capsule, _capsule_guard) = spawn_capsule(&sb, &args);
    let pid = read_pid(&pidfile, Duration::from_secs(20)).map(|p| host_pid(p, &tok));
    let _guard = KillOnDrop {
        pid: pid.unwrap_or(0),
        token: Some(tok.clone()),
    };
    let pid = match pid {
        Some(p) => p,
        None => {
            let _ = capsule.kill();
            let out = capsule.wait_with_output().expect("wait");
            panic!(
                "the grandchild never wrote its pid; capsule {:?}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    assert!(
        pid_alive(pid, Some(&tok)),
        "grandchild not running before the kill"
    );
    capsule.kill().expect("SIGKILL capsule");
    let _ = capsule.wait();
    assert!(
        wait_gone(pid, Some(&tok), Duration::from_secs(2)),
        "ESCAPE: setsid'd grandchild {pid} outlived capsule (SIGKILL; no_namespaces={no_namespaces}, \
         no_cgroups={no_cgroups})"
    );
}

#[test]
fn setsid_grandchild_is_gone_after_capsule_is_sigkilled() {
    grandchild_dies_with_a_sigkilled_capsule(!view_expected(), false);
}

/// The same without a pid namespace (and, as root, without a cgroup): issue 20,
/// finding 7. Nothing but the keeper is left to take the tree down.
#[test]
fn without_namespaces_setsid_grandchild_is_gone_after_capsule_is_sigkilled() {
    grandchild_dies_with_a_sigkilled_capsule(true, is_root());
}

/// Start capsule streaming a probe that traps SIG; return once it is ready.
fn forwarded(sig: i32, signame: &str) {
    let sb = Sandbox::new();
    sb.mkdir("out");
    let got = sb.path("out/got");
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--allow-write".into(),
        sb.p("out"),
        "--".into(),
    ];
    args.extend(probe_argv(&[&[
        "trap",
        &sig.to_string(),
        &got.to_string_lossy(),
        "7",
    ]]));
    let (mut capsule, _guard) = spawn_capsule(&sb, &args);
    let cpid = capsule.id() as i32;
    let stdout = capsule.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
    assert!(ready.contains("trap_ready"), "probe not ready: {ready:?}");
    // SAFETY: kill(2) on the capsule process this test started.
    unsafe {
        libc::kill(cpid, sig);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = capsule.try_wait().expect("wait") {
            break Some(st);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = status.unwrap_or_else(|| panic!("capsule did not end after {signame}"));
    assert_eq!(
        sb.read("out/got"),
        sig.to_string(),
        "the child did not receive {signame}"
    );
    // capsule was signalled: it ends the run and exits 128+N, as timeout(1) does.
    assert_eq!(
        status.code(),
        Some(128 + sig),
        "capsule's status after {signame}"
    );
}

#[test]
fn sigterm_to_capsule_is_forwarded() {
    forwarded(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sigint_to_capsule_is_forwarded() {
    forwarded(libc::SIGINT, "SIGINT");
}

/// The children of `pid` (every thread's), from /proc.
fn children(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// What `pid` holds open above stdio: "fd -> target" per descriptor.
fn open_fds(pid: i32) -> Vec<String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("cannot list /proc/{pid}/fd: {e}"));
    let mut out: Vec<String> = dir
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
                .is_some_and(|n| n > 2)
        })
        .map(|e| {
            format!(
                "{} -> {}",
                e.file_name().to_string_lossy(),
                std::fs::read_link(e.path())
                    .map(|t| t.display().to_string())
                    .unwrap_or_default()
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn init_keeps_only_its_channel() {
    // Pid 1 of the run lives as long as the run: it must not keep the
    // command's pipes or RPC end (end-of-file on them means the run is over),
    // the ruleset or the plan's O_PATH descriptors. Only its channel to
    // capsule stays.
    let sb = Sandbox::new();
    // Ended with SIGKILL below.
    let (mut capsule, _capsule_guard) =
        spawn_capsule(&sb, &["exec", "--timeout", "30", "--", "/bin/sleep", "30"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = (0, vec![]);
    let ok = loop {
        if let Some(&init) = children(capsule.id() as i32).first() {
            // Pid 1 of a pid namespace: two NSpid entries, the last one 1.
            let status =
                std::fs::read_to_string(format!("/proc/{init}/status")).unwrap_or_default();
            let nspid: Vec<&str> = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .unwrap_or("")
                .split_whitespace()
                .collect();
            if nspid.len() < 2 || nspid.last() != Some(&"1") {
                let _ = capsule.kill();
                let _ = capsule.wait();
                return skip(
                    "capsule's child is not pid 1 of a pid namespace (no pid namespace here)",
                );
            }
            // Init closes them right after the command stage has exec'd `sleep`.
            let sleeping = children(init)
                .first()
                .and_then(|c| std::fs::read_to_string(format!("/proc/{c}/comm")).ok())
                .is_some_and(|c| c.trim() == "sleep");
            if !is_root() && std::fs::read_dir(format!("/proc/{init}/fd")).is_err() {
                // Init shares capsule's memory and is non-dumpable inside the
                // run's view: only root can look at its descriptors.
                let _ = capsule.kill();
                let _ = capsule.wait();
                return skip(
                    "init is non-dumpable (the run's view): its fds are readable by root only",
                );
            }
            last = (init, open_fds(init));
            if sleeping && last.1.len() == 1 && last.1[0].contains("socket:") {
                break true;
            }
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = capsule.kill();
    let _ = capsule.wait();
    assert!(
        ok,
        "init {} should hold only its channel socket above stdio: {:#?}",
        last.0, last.1
    );
}

#[test]
fn capsule_reaps_its_init_before_exiting() {
    // Run capsule under a child subreaper: an init that capsule left
    // unreaped is reparented to it. Whether init has exited before capsule
    // looks is a race, hence 20 runs (the bug showed in about a third).
    let sb = Sandbox::new();
    let script = r#"
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
left, codes = 0, set()
for _ in range(20):
    codes.add(subprocess.run(sys.argv[1:]).returncode)
    time.sleep(0.02)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if not pid:
            break
        left += 1
print("clean" if left == 0 else f"{left} left", *sorted(codes))
"#;
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .arg(capsule_bin())
        .args(["exec", "--no-audit", "--", "/bin/true"])
        .current_dir(sb.path(""))
        .output()
        .expect("run python");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        "clean 0",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn children_capsule_inherited_survive_the_run() {
    // `sleep & exec capsule ...`: the background sleep becomes capsule's
    // child. The end-of-run sweeps (tool processes; subreaper mode) must
    // leave it alone.
    for (tag, extra_env, policy) in [
        (
            "tools",
            None,
            "version: 1\ntools:\n  allow:\n    - name: t\n      command: [/bin/true]\n",
        ),
        (
            "subreaper",
            Some(("CAPSULE_NO_NAMESPACES", "1")),
            "version: 1\n",
        ),
    ] {
        let sb = Sandbox::new();
        let pol = sb.policy(policy);
        let pidfile = sb.path("bg.pid");
        let tok = token("inherited");
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(format!(
                "\"$1\" -c 'import time; time.sleep(60)' {tok} & echo $! > {}; exec \"$0\" exec --no-audit --policy {pol} -- /bin/true",
                pidfile.display()
            ))
            .arg(capsule_bin())
            .arg(python());
        if let Some((k, v)) = extra_env {
            cmd.env(k, v);
        }
        let st = cmd.status().expect("run sh");
        let pid = read_pid(&pidfile, Duration::from_secs(5)).expect("background pid");
        let _guard = KillOnDrop {
            pid,
            token: Some(tok.clone()),
        };
        assert!(st.success(), "{tag}: capsule failed: {st:?}");
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            pid_alive(pid, Some(&tok)),
            "{tag}: capsule killed a child it had inherited ({pid})"
        );
    }
}

/// A child that ignores SIGTERM (and everything it starts, since SIG_IGN is
/// inherited across exec): SIGTERM to capsule still ends the whole run
/// within the grace, and capsule removes its TMPDIR and reports.
fn escalates(sig: i32, signame: &str) {
    let sb = Sandbox::new();
    sb.mkdir("pids");
    let pidfile = sb.path("pids/gc.pid");
    let tok = token("gc-escalate");
    let mut args: Vec<String> = vec![
        "exec".into(),
        "--json".into(),
        "--allow-write".into(),
        sb.p("pids"),
        "--timeout".into(),
        "120".into(),
        "--".into(),
        "/bin/sh".into(),
        "-c".into(),
        "trap '' TERM INT HUP QUIT; \"$@\"; while :; do sleep 1; done".into(),
        "sh".into(),
    ];
    args.extend(probe_argv(&[&[
        "grandchild",
        &pidfile.to_string_lossy(),
        &tok,
        "1",
    ]]));
    let (mut capsule, _capsule_guard) = spawn_capsule(&sb, &args);
    let cpid = capsule.id() as i32;
    let pid = read_pid(&pidfile, Duration::from_secs(20));
    let _guard = KillOnDrop {
        pid: pid.unwrap_or(0),
        token: Some(tok.clone()),
    };
    let pid = pid.expect("the grandchild never wrote its pid");
    let before: Vec<_> = children(cpid);
    assert!(!before.is_empty(), "capsule has no child");
    let sent = Instant::now();
    // SAFETY: kill(2) on the capsule process this test started.
    unsafe {
        libc::kill(cpid, sig);
    }
    let status = loop {
        if let Some(st) = capsule.try_wait().expect("wait") {
            break Some(st);
        }
        if sent.elapsed() > Duration::from_secs(6) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = sent.elapsed();
    let status = status.unwrap_or_else(|| {
        panic!("capsule did not end within 6 s of {signame} to a child that ignores it")
    });
    assert!(
        took < Duration::from_millis(2500),
        "capsule took {took:?} to end the run after {signame}"
    );
    assert_eq!(
        status.code(),
        Some(128 + sig),
        "exit status after {signame}"
    );
    assert!(
        wait_gone(pid, Some(&tok), Duration::from_secs(1)),
        "ESCAPE: the run's process {pid} survived {signame} to capsule"
    );
    for c in before {
        assert!(!pid_alive(c, None), "capsule's child {c} survived");
    }
    let left: Vec<_> = std::fs::read_dir(sb.path("hosttmp"))
        .expect("hosttmp")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "capsule left its TMPDIR behind: {left:?}");
    let out = capsule.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("no JSON result ({e}): {stdout}"));
    assert_eq!(j["termination_reason"], "signaled", "{j}");
    assert_eq!(j["signal"], sig, "{j}");
    assert_eq!(j["killed"], true, "{j}");
    assert!(
        j["kill_reason"]
            .as_str()
            .unwrap_or_default()
            .contains(signame),
        "{j}"
    );
    let audit = std::fs::read_to_string(sb.state.join("capsule/audit.jsonl")).unwrap_or_default();
    assert!(
        audit.contains(j["run_id"].as_str().unwrap_or("?")),
        "no audit record of the signalled run"
    );
}

#[test]
fn sigterm_to_capsule_escalates_to_the_whole_run() {
    escalates(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sighup_to_capsule_escalates_to_the_whole_run() {
    escalates(libc::SIGHUP, "SIGHUP");
}

/// Pids of every process whose command line contains `tok`.
fn with_token(tok: &str) -> Vec<i32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
            if pid_alive(pid, Some(tok)) {
                out.push(pid);
            }
        }
    }
    out
}

/// SIGTERM at any moment of capsule's start-up (before, during and after
/// the private TMPDIR is made and the child spawned): capsule never leaves
/// its TMPDIR or a process of the run behind.
#[test]
fn sigterm_during_start_up_leaves_nothing_behind() {
    for delay_ms in [0u64, 2, 5, 10, 15, 20, 30, 45, 60, 80, 120] {
        let sb = Sandbox::new();
        let tok = token(&format!("startup-{delay_ms}"));
        let args: Vec<String> = vec![
            "exec".into(),
            "--timeout".into(),
            "60".into(),
            "--".into(),
            "/bin/sh".into(),
            "-c".into(),
            "trap '' TERM INT HUP; while :; do sleep 1; done".into(),
            tok.clone(),
        ];
        let (mut capsule, _guard) = spawn_capsule(&sb, &args);
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill(2) on the capsule process this test started.
        unsafe {
            libc::kill(capsule.id() as i32, libc::SIGTERM);
        }
        let sent = Instant::now();
        let status = loop {
            if let Some(st) = capsule.try_wait().expect("wait") {
                break Some(st);
            }
            if sent.elapsed() > Duration::from_secs(5) {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(
            status.is_some(),
            "capsule ignored SIGTERM sent {delay_ms} ms after start"
        );
        let left: Vec<_> = std::fs::read_dir(sb.path("hosttmp"))
            .expect("hosttmp")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            left.is_empty(),
            "SIGTERM {delay_ms} ms after start: capsule left its TMPDIR behind: {left:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        while !with_token(&tok).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let alive = with_token(&tok);
        for p in &alive {
            // SAFETY: kill(2) on a process of this test's run.
            unsafe {
                libc::kill(*p, libc::SIGKILL);
            }
        }
        assert!(
            alive.is_empty(),
            "ESCAPE: SIGTERM {delay_ms} ms after start left processes of the run: {alive:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Issue 37, item 1: a deep chain of processes outlives the kill.
//
// Without a pid namespace, capsule's sweep after a kill took one level of
// the tree a round, for 64 rounds: a chain of more than 64 processes, each
// the child of the one before, one of them in a session of its own and all
// ignoring SIGTERM, kept running the run's code after capsule returned 124.
// With a pid namespace the kernel takes the whole namespace down; the same
// attack must fail on both paths.

/// The chain: each level writes its pid, ignores SIGTERM and starts the next
/// as its child (not by exec: every level stays); level SETSID moves the rest
/// to a session of their own; the deepest appends to `grow` for ever.
const CHAIN: &str = r#"trap '' TERM
n=$1 dir=$2
echo $$ >> "$dir/pids"
if [ "$n" -le 0 ]; then
  while :; do echo x >> "$dir/grow"; sleep 0.05; done
elif [ "$n" -eq "$4" ]; then
  setsid /bin/sh -c "$0" "$0" $((n - 1)) "$dir" "$3" "$4"; n=0
else
  /bin/sh -c "$0" "$0" $((n - 1)) "$dir" "$3" "$4"; n=0
fi
"#;

/// How deep the chain is (the old sweep gave up after 64 levels).
const CHAIN_DEPTH: usize = 130;

/// `capsule exec --json --allow-write DIR EXTRA -- sh -c CHAIN ...`: the
/// arguments, with the chain writing to `sb`'s `chain/`.
fn chain_args(sb: &Sandbox, tok: &str, extra: &[&str]) -> Vec<String> {
    sb.mkdir("chain");
    let mut args: Vec<String> = vec!["exec".into(), "--json".into(), "--allow-write".into()];
    args.push(sb.p("chain"));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(
        [
            "/bin/sh",
            "-c",
            CHAIN,
            CHAIN,
            &CHAIN_DEPTH.to_string(),
            &sb.p("chain"),
            tok,
            &(CHAIN_DEPTH - 3).to_string(),
        ]
        .map(String::from),
    );
    args
}

/// Kills every process carrying `tok` when dropped (a failed test leaves
/// nothing running).
struct KillToken(String);

impl Drop for KillToken {
    fn drop(&mut self) {
        // Rounds: a process that forks and exits moves on to a new pid.
        for _ in 0..50 {
            let left = with_token(&self.0);
            if left.is_empty() {
                return;
            }
            for p in left {
                // SAFETY: kill(2) on a process of this test's run (its token).
                unsafe {
                    libc::kill(p, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Wait until the deepest level of the chain appends (the chain is whole).
fn wait_chain_built(sb: &Sandbox, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if std::fs::metadata(sb.path("chain/grow")).is_ok_and(|m| m.len() > 0) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// After capsule returned: the chain was whole, no process of it is left
/// (none carries the token), the file it appended to stops growing, and the
/// result does not say the tree is gone while it is not.
fn assert_chain_gone(sb: &Sandbox, tok: &str, what: &str, result: &serde_json::Value) {
    let alive = with_token(tok);
    let levels = sb.read("chain/pids").lines().count();
    assert!(
        levels > CHAIN_DEPTH,
        "{what}: the chain was not built ({levels} of {} levels)",
        CHAIN_DEPTH + 1
    );
    let grown = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let before = grown(&sb.path("chain/grow"));
    std::thread::sleep(Duration::from_millis(600));
    let after = grown(&sb.path("chain/grow"));
    let later = with_token(tok);
    if !alive.is_empty() || !later.is_empty() {
        // The result must say so at least (never claim a gone tree).
        eprintln!("left_behind: {}", result["left_behind"]);
    }
    assert!(
        alive.is_empty() && later.is_empty(),
        "ESCAPE ({what}): {} of the chain's {} processes still ran after capsule returned \
         ({} 0.6 s later); the file in the write grant grew {before} -> {after} bytes",
        alive.len(),
        CHAIN_DEPTH + 1,
        later.len()
    );
    assert_eq!(
        before, after,
        "ESCAPE ({what}): the chain's file still grows"
    );
}

fn chain_survives_timeout(no_namespaces: bool) {
    let mut sb = Sandbox::new();
    if no_namespaces {
        sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    }
    let tok = token("chain-timeout");
    let _kill = KillToken(tok.clone());
    let args = chain_args(&sb, &tok, &["--timeout", "4"]);
    let run = sb.run(&args);
    run.assert_code(124);
    let j = run.json();
    assert_eq!(j["termination_reason"], "timeout", "{}", run.ctx());
    let what = format!("timeout, tree_kill {}", j["enforcement"]["tree_kill"]);
    assert_chain_gone(&sb, &tok, &what, &j);
    assert!(
        j.get("left_behind").is_none(),
        "left_behind although the tree is gone: {}",
        j["left_behind"]
    );
}

#[test]
fn deep_chain_is_gone_after_timeout() {
    chain_survives_timeout(no_namespaces_env());
}

#[test]
fn without_namespaces_deep_chain_is_gone_after_timeout() {
    chain_survives_timeout(true);
}

fn chain_survives_sigterm_to_capsule(no_namespaces: bool) {
    let mut sb = Sandbox::new();
    if no_namespaces {
        sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    }
    let tok = token("chain-sigterm");
    let _kill = KillToken(tok.clone());
    let args = chain_args(&sb, &tok, &["--timeout", "120"]);
    let (mut capsule, _guard) = spawn_capsule(&sb, &args);
    let built = wait_chain_built(&sb, Duration::from_secs(30));
    // SAFETY: kill(2) on the capsule process this test started.
    unsafe {
        libc::kill(capsule.id() as i32, libc::SIGTERM);
    }
    let sent = Instant::now();
    let status = loop {
        if let Some(st) = capsule.try_wait().expect("wait") {
            break Some(st);
        }
        if sent.elapsed() > Duration::from_secs(20) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = status.expect("capsule did not end within 20 s of SIGTERM");
    assert!(built, "the chain was never built");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let out = capsule.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let j: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("no JSON result ({e}): {stdout}"));
    let what = format!("SIGTERM, tree_kill {}", j["enforcement"]["tree_kill"]);
    assert_chain_gone(&sb, &tok, &what, &j);
}

#[test]
fn deep_chain_is_gone_after_sigterm_to_capsule() {
    chain_survives_sigterm_to_capsule(no_namespaces_env());
}

#[test]
fn without_namespaces_deep_chain_is_gone_after_sigterm_to_capsule() {
    chain_survives_sigterm_to_capsule(true);
}

/// The memory watchdog (memory_mb with no cgroup to hold it) kills the run
/// the same way: the deepest level allocates past the limit.
#[test]
fn without_namespaces_deep_chain_is_gone_after_the_memory_watchdog() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    sb.set_env("CAPSULE_NO_CGROUPS", "1");
    let tok = token("chain-memory");
    let _kill = KillToken(tok.clone());
    let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 400\n");
    let mut args = chain_args(
        &sb,
        &tok,
        &["--best-effort", "--policy", &pol, "--timeout", "60"],
    );
    // The deepest level: append in the background, then three processes
    // hold 250 MiB each (RLIMIT_DATA bounds each one, not their sum).
    let deepest = CHAIN.replace(
        "while :; do echo x >> \"$dir/grow\"; sleep 0.05; done",
        "(while :; do echo x >> \"$dir/grow\"; sleep 0.05; done) & sleep 1; \
         for i in 1 2 3; do python3 -c 'import time; b = b\"x\" * (250 << 20); time.sleep(60)' \"$3\" & done; wait",
    );
    assert_ne!(deepest, CHAIN);
    let at = args.iter().position(|a| a == CHAIN).expect("chain script");
    args[at] = deepest.clone();
    args[at + 1] = deepest;
    let run = sb.run(&args);
    let j = run.json();
    assert!(
        j["kill_reason"]
            .as_str()
            .is_some_and(|r| r.contains("memory watchdog")),
        "{}",
        run.ctx()
    );
    let what = format!(
        "memory watchdog, tree_kill {}",
        j["enforcement"]["tree_kill"]
    );
    assert_chain_gone(&sb, &tok, &what, &j);
}

/// Issue 37, item 1, the suspicion: without a pid namespace the keeper
/// reaps the command first and then kills what it left, and capsule used to
/// signal the command's pid and process group by number afterwards (after
/// every run; and at a timeout, the watchdog or a stop signal firing in that
/// window). Once reaped, that pid may be anyone's. Here the command exits
/// leaving a deep chain in a session of its own (so the keeper's kill takes
/// a while), and the test, as root, takes the freed pid for a process of its
/// own (clone3 with set_tid) that leads a process group: capsule must not
/// signal it.
const TAKE_FREED_PID: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
class CloneArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack",
        "stack_size", "tls", "set_tid", "set_tid_size", "cgroup")]
path, = sys.argv[1:]
deadline = time.time() + 60
pid = None
while pid is None and time.time() < deadline:
    try:
        pid = int(open(path).read().strip())
    except (OSError, ValueError):
        time.sleep(0.01)
if pid is None:
    print("no command pid"); sys.exit(0)
while time.time() < deadline:
    if os.path.exists(f"/proc/{pid}"):
        continue
    tid = (ctypes.c_int32 * 1)(pid)
    args = CloneArgs(exit_signal=17, set_tid=ctypes.addressof(tid), set_tid_size=1)
    r = libc.syscall(435, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
    if r == 0:
        os.setsid()
        time.sleep(4)
        os._exit(0)
    if r < 0:
        if ctypes.get_errno() == 17:  # EEXIST: still someone's pid or group
            continue
        print(f"clone3 errno {ctypes.get_errno()}"); sys.exit(0)
    _, st = os.waitpid(r, 0)
    if os.WIFSIGNALED(st):
        print(f"victim {r}: signal {os.WTERMSIG(st)}")
    else:
        print(f"victim {r}: exit {os.WEXITSTATUS(st)}")
    sys.exit(0)
print("the command's pid was never freed")
"#;

/// Whether this process holds CAP_SYS_ADMIN (a container's root does not).
fn has_sys_admin() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        // Bit 21: CAP_SYS_ADMIN.
        .is_some_and(|caps| caps & (1 << 21) != 0)
}

#[test]
fn without_namespaces_a_reaped_commands_pid_is_never_signalled() {
    if !is_root() || !has_sys_admin() {
        return skip(
            "taking a given pid (clone3 set_tid) needs CAP_SYS_ADMIN in the host's pid namespace",
        );
    }
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    sb.mkdir("chain");
    let tok = token("freed-pid");
    let _kill = KillToken(tok.clone());
    let cmdfile = sb.path("chain/cmd");
    let helper = std::process::Command::new(python())
        .args(["-c", TAKE_FREED_PID])
        .arg(&cmdfile)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let script = "echo $$ > \"$1/cmd\"; setsid /bin/sh -c \"$2\" \"$2\" 400 \"$1\" \"$3\" 9999 & \
                  sleep 1.5; exit 0";
    let run = sb.run(&[
        "exec",
        "--json",
        "--allow-write",
        &sb.p("chain"),
        "--timeout",
        "60",
        "--",
        "/bin/sh",
        "-c",
        script,
        "sh",
        &sb.p("chain"),
        CHAIN,
        &tok,
    ]);
    let out = helper.wait_with_output().expect("helper");
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    run.assert_code(0);
    assert!(
        said.starts_with("victim"),
        "the test could not take the command's freed pid: {said}"
    );
    assert!(
        said.ends_with("exit 0"),
        "capsule signalled a pid it had no claim on any more (the command's, reaped by the \
         keeper and taken by another process): {said}"
    );
}

/// A process that forks and exits at once, for ever (for at most 15 s): each
/// generation lives a fork's time, and a kill that lists processes and then
/// signals them can lose the race to it.
const WORM_C: &str = r#"
#include <signal.h>
#include <time.h>
#include <unistd.h>
int main(void) {
    time_t end = time(NULL) + 15;
    signal(SIGTERM, SIG_IGN);
    while (time(NULL) < end) {
        pid_t p = fork();
        if (p > 0) _exit(0);
        if (p < 0) usleep(1000);
    }
    return 0;
}
"#;

/// Issue 37, item 1: whatever the tree kill cannot end within its bound, the
/// result must say so. A fork-and-exit worm races the kill; either it is
/// gone when capsule returns (and `left_behind` names no process), or
/// `left_behind` names what is left. Never a result that says the tree is
/// gone while a process of the run still runs.
fn worm_is_reported_if_left(no_namespaces: bool) {
    let mut sb = Sandbox::new();
    if no_namespaces {
        sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    }
    let Some(worm) = sb.compile_c("bin", "worm", WORM_C) else {
        return;
    };
    let tok = token("worm");
    let _kill = KillToken(tok.clone());
    let run = sb.run(&[
        "exec",
        "--json",
        "--allow-exec",
        &sb.p("bin"),
        "--timeout",
        "1",
        "--",
        "/bin/sh",
        "-c",
        "\"$1\" \"$2\"; sleep 60",
        "sh",
        &worm.to_string_lossy(),
        &tok,
    ]);
    let alive = with_token(&tok);
    // The worm's last generations, reaped by their parents: a second look.
    let still = if alive.is_empty() {
        std::thread::sleep(Duration::from_millis(200));
        with_token(&tok)
    } else {
        alive
    };
    run.assert_code(124);
    let j = run.json();
    let named = j["left_behind"].as_array().is_some_and(|l| {
        l.iter()
            .any(|x| x.as_str().is_some_and(|s| s.starts_with("process ")))
    });
    eprintln!(
        "tree_kill {}: {} left, left_behind {}",
        j["enforcement"]["tree_kill"],
        still.len(),
        j["left_behind"]
    );
    if still.is_empty() {
        assert!(
            !named,
            "left_behind names a process although none is left: {}",
            j["left_behind"]
        );
    } else {
        assert!(
            named,
            "ESCAPE: the worm still runs ({still:?}) and the result does not say so: {}",
            run.ctx()
        );
    }
}

#[test]
fn a_worm_racing_the_kill_is_reported_if_left() {
    worm_is_reported_if_left(no_namespaces_env());
}

#[test]
fn without_namespaces_a_worm_racing_the_kill_is_reported_if_left() {
    worm_is_reported_if_left(true);
}

/// Issue 37, item 1: a process of the run that SIGKILL cannot end within the
/// tree kill's bound is named in the result's `left_behind`, never passed
/// over. As root the test holds one in a cgroup v1 freezer of its own (a
/// frozen task there does not die of SIGKILL until thawed), then thaws it.
#[test]
fn without_namespaces_a_process_the_kill_cannot_end_is_left_behind() {
    let freezer = std::path::Path::new("/sys/fs/cgroup/freezer");
    if !is_root() || !freezer.join("cgroup.procs").exists() {
        return skip("needs root and a cgroup v1 freezer hierarchy to hold a process unkillable");
    }
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    sb.mkdir("out");
    let tok = token("frozen");
    let cg = freezer.join(&tok);
    if let Err(e) = std::fs::create_dir(&cg) {
        // A container's cgroupfs is read-only.
        return skip(&format!("cannot make a freezer cgroup here: {e}"));
    }
    struct Thaw(std::path::PathBuf);
    impl Drop for Thaw {
        fn drop(&mut self) {
            let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
            for _ in 0..100 {
                if std::fs::remove_dir(&self.0).is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let thaw = Thaw(cg.clone());
    let _kill = KillToken(tok.clone());
    let pidfile = sb.path("out/frozen");
    let freeze = {
        let (cg, pidfile) = (cg.clone(), pidfile.clone());
        std::thread::spawn(move || {
            let pid = read_pid(&pidfile, Duration::from_secs(20))?;
            std::fs::write(cg.join("cgroup.procs"), pid.to_string()).ok()?;
            std::fs::write(cg.join("freezer.state"), "FROZEN").ok()?;
            Some(pid)
        })
    };
    let run = sb.run(&[
        "exec",
        "--json",
        "--allow-write",
        &sb.p("out"),
        "--timeout",
        "2",
        "--",
        "/bin/sh",
        "-c",
        "/bin/sh -c 'sleep 60; :' \"$2\" & echo $! > \"$1/frozen\"; wait",
        "sh",
        &sb.p("out"),
        &tok,
    ]);
    let pid = freeze.join().expect("freezer thread");
    let pid = pid.expect("the test could not freeze the run's process");
    let frozen_then = pid_alive(pid, Some(&tok));
    run.assert_code(124);
    let j = run.json();
    let left = j["left_behind"].to_string();
    drop(thaw);
    assert!(
        frozen_then,
        "the frozen process {pid} did not outlive the kill"
    );
    assert!(
        left.contains(&format!("process {pid} ")),
        "ESCAPE: process {pid} of the run outlived the tree kill and the result does not \
         name it: left_behind {left}\n{}",
        run.ctx()
    );
    assert!(
        wait_gone(pid, Some(&tok), Duration::from_secs(5)),
        "thawed, the killed process {pid} should end"
    );
}

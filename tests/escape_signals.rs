//! Signals where neither a pid namespace nor Landlock's signal scope exists:
//! no user namespaces (`CAPSULE_NO_NAMESPACES=1`) and a Landlock ABI below 6
//! (`CAPSULE_LANDLOCK_ABI_MAX`, which lowers the ABI capsule uses: Ubuntu
//! 24.04's 6.8 has ABI 4, Debian 12's 6.1 ABI 2). There the seccomp
//! user-notification filter is the layer: the sandboxed command must not
//! signal capsule's supervisor, nor any host process of the same user, by any
//! of the syscalls that send a signal by pid (kill, tkill, tgkill,
//! rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_send_signal) or make a process
//! the owner of a descriptor's SIGIO/SIGURG (F_SETOWN, F_SETOWN_EX,
//! FIOSETOWN, SIOCSPGRP) — and it must still signal its own processes
//! (subprocess terminate, multiprocessing, `kill $!`, `timeout`, daemons it
//! started that were reparented to capsule).
//!
//! The default path is attacked too (`the_default_path_cannot_signal_a_host_process`:
//! each route must get the answer of the layer the run reports, ESRCH from the
//! pid namespace), and Landlock's signal scope by itself without namespaces at
//! the kernel's ABI (`the_signal_scope_holds_without_namespaces`), so that
//! removing either layer fails a test (scripts/mutation).
//!
//! Probes aimed at capsule itself use signal 0 or SIGCONT, and kill(-1) only
//! signal 0: were the protection missing, the test fails without harming the
//! machine. Deadly signals go only to a `sleep` this test started.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const SIGNALS_PY: &str = include_str!("probes/signals.py");

/// The Landlock ABIs below 6 emulated here (ABI 1 and 2 also lack truncate
/// protection without a mount namespace; their planning is tested elsewhere).
const OLD_ABIS: &[&str] = &["3", "4", "5"];

/// A sandbox whose runs take the no-namespace path with Landlock ABI `abi`.
fn fallback(abi: &str) -> Sandbox {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    sb.set_env("CAPSULE_LANDLOCK_ABI_MAX", abi);
    sb
}

/// Whether this kernel has a Landlock ABI to lower from (6+), so the
/// fallback is the one under test.
fn kernel_has_scopes(sb: &Sandbox) -> bool {
    let r = sb.run(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap_or_default();
    v["landlock_abi"].as_u64().unwrap_or(0) >= 6
}

/// Run the signal probes inside capsule; returns the run and its result lines.
fn signal_probes(sb: &Sandbox, opts: &[&str], host: u32, ops: &[&str]) -> (Run, Vec<Value>) {
    let mut cmd: Vec<String> = vec![python(), "-c".into(), SIGNALS_PY.into(), host.to_string()];
    cmd.extend(ops.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let run = sb.exec_json(opts, &refs);
    let lines = if run.code == Some(0) {
        run.json()["stdout"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    } else {
        Vec::new()
    };
    (run, lines)
}

/// Every way to signal capsule's supervisor: harmless signals only.
const AT_SUPERVISOR: &[&str] = &[
    "kill:ppid:0",
    "kill:ppid:18",
    "tkill:ppid:0",
    "tgkill:ppid:18",
    "rt_sigqueueinfo:ppid:18",
    "rt_tgsigqueueinfo:ppid:0",
    "pidfd_send_signal:ppid:0",
    "f_setown:ppid:0",
    "f_setown_ex:ppid:0",
    "fiosetown:ppid:0",
    "siocspgrp:ppid:0",
    "kill:-ppid-group:0",
    "kill:-1:0",
    "procfd:ppid:0",
];

/// Every way to signal a host process: SIGKILL and SIGSTOP to a `sleep` of ours.
const AT_HOST: &[&str] = &[
    "kill:host:9",
    "kill:host:19",
    "tkill:host:9",
    "tgkill:host:19",
    "rt_sigqueueinfo:host:9",
    "rt_tgsigqueueinfo:host:19",
    "pidfd_send_signal:host:9",
    "f_setown:host:0",
    "sigio:host:19",
    "kill:-host-group:0",
];

fn assert_denied(lines: &[Value], ops: &[&str], run: &Run) {
    assert_eq!(lines.len(), ops.len(), "probe lines missing:{}", run.ctx());
    for l in lines {
        let res = l["result"].as_str().unwrap_or_default();
        // pidfd_send_signal is answered ENOSYS (as on a kernel before 5.1:
        // programs fall back to kill, which is checked).
        let op = l["op"].as_str().unwrap_or_default();
        let ok = if op.starts_with("pidfd_send_signal") {
            res == "ENOSYS" || res == "EPERM"
        } else if op.starts_with("procfd") {
            // Landlock denies the host's /proc.
            res == "EACCES" || res == "EPERM"
        } else {
            res == "EPERM"
        };
        assert!(ok, "ESCAPE or wrong errno: {l}{}", run.ctx());
    }
}

fn assert_alive_and_running(sleeper: &mut std::process::Child, run: &Run) {
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        sleeper.try_wait().expect("try_wait").is_none(),
        "ESCAPE: the sandbox killed a host process{}",
        run.ctx()
    );
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", sleeper.id())).unwrap_or_default();
    assert!(
        !stat.contains(") T ") && !stat.contains(") t "),
        "ESCAPE: the sandbox stopped a host process: {stat}{}",
        run.ctx()
    );
}

fn enforcement(run: &Run) -> Value {
    run.json()["enforcement"].clone()
}

#[test]
fn the_supervisor_cannot_be_signalled() {
    for abi in OLD_ABIS {
        let sb = fallback(abi);
        let (mut sleeper, _guard) = host_sleeper();
        let (run, lines) = signal_probes(&sb, &[], sleeper.id(), AT_SUPERVISOR);
        // The default policy runs confined here, without --best-effort.
        run.assert_ran();
        assert_denied(&lines, AT_SUPERVISOR, &run);
        assert_alive_and_running(&mut sleeper, &run);
        let e = enforcement(&run);
        assert_eq!(e["signals"], "seccomp-notify", "{e}{}", run.ctx());
        assert_eq!(e["tree_kill"], "subreaper", "{e}");
        assert!(
            !e["missing"].to_string().contains("signal isolation"),
            "reported missing: {e}"
        );
        assert!(
            e["limitations"].to_string().contains("pid reuse"),
            "the residual race is not named in limitations: {e}"
        );
    }
}

#[test]
fn host_processes_cannot_be_signalled() {
    for abi in OLD_ABIS {
        let sb = fallback(abi);
        let (mut sleeper, _guard) = host_sleeper();
        let (run, lines) = signal_probes(&sb, &[], sleeper.id(), AT_HOST);
        run.assert_ran();
        assert_denied(&lines, AT_HOST, &run);
        assert_alive_and_running(&mut sleeper, &run);
    }
    // Positive control: outside capsule the same user may signal it.
    let (sleeper, _guard) = host_sleeper();
    let r = host_kill(sleeper.id() as i32, 0);
    assert!(r, "host control: kill(sleep, 0) fails outside capsule");
}

/// kill(pid, sig) from the test process itself (the host control).
fn host_kill(pid: i32, sig: i32) -> bool {
    std::process::Command::new("/bin/kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// What a real workload does with signals, all aimed at its own processes.
const WORKLOAD_PY: &str = r#"
import json, multiprocessing, os, signal, subprocess, sys, threading, time
out = {}
p = subprocess.Popen(["/bin/sleep", "10"])
p.terminate()
out["popen_terminate"] = p.wait()
p = subprocess.Popen(["/bin/sleep", "10"], start_new_session=True)
os.killpg(p.pid, signal.SIGKILL)
out["killpg_new_session"] = p.wait()
m = multiprocessing.get_context("fork").Process(target=time.sleep, args=(10,))
m.start()
m.terminate()
m.join()
out["multiprocessing_terminate"] = m.exitcode
signal.pthread_kill(threading.get_ident(), 0)
os.kill(os.getpid(), 0)
os.kill(0, 0)
out["self"] = "ok"
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
os.kill(os.getpid(), signal.SIGUSR1)
signal.raise_signal(signal.SIGUSR1)
out["handled"] = len(got)

def orphan(new_session):
    # A daemon: its parent exits, so it is reparented to capsule (the subreaper).
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if new_session:
            os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(30)
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    os.close(w)
    gpid = int(os.read(r, 32))
    time.sleep(0.05)
    os.kill(gpid, signal.SIGTERM)
    return "ok"

out["orphan_same_session"] = orphan(False)
out["orphan_own_session"] = orphan(True)
c = subprocess.Popen(["/bin/sleep", "10"])
try:
    fd = os.pidfd_open(c.pid)
    try:
        signal.pidfd_send_signal(fd, signal.SIGTERM)
        out["pidfd"] = "ok"
    except OSError as e:
        out["pidfd"] = e.errno
        c.terminate()
except OSError as e:
    out["pidfd"] = "open:%d" % e.errno
    c.terminate()
out["pidfd_child"] = c.wait()
print(json.dumps(out))
"#;

#[test]
fn the_run_still_signals_its_own_processes() {
    for abi in OLD_ABIS {
        let sb = fallback(abi);
        let py = python();
        let run = sb.exec_json(&[], &[&py, "-c", WORKLOAD_PY]);
        run.assert_ran();
        let out: Value = serde_json::from_str(run.child_stdout().trim())
            .unwrap_or_else(|e| panic!("workload output ({e}):{}", run.ctx()));
        assert_eq!(out["popen_terminate"], -15, "{out}{}", run.ctx());
        assert_eq!(out["killpg_new_session"], -9, "{out}");
        assert_eq!(out["multiprocessing_terminate"], -15, "{out}");
        assert_eq!(out["self"], "ok", "{out}");
        assert_eq!(out["handled"], 2, "{out}");
        assert_eq!(out["orphan_same_session"], "ok", "{out}");
        assert_eq!(out["orphan_own_session"], "ok", "{out}");
        // pidfd_send_signal: ENOSYS (38), the program falls back to kill.
        assert!(
            out["pidfd"] == "ok" || out["pidfd"] == libc::ENOSYS,
            "{out}"
        );
        assert_eq!(out["pidfd_child"], -15, "{out}");
        assert_eq!(enforcement(&run)["signals"], "seccomp-notify");

        let script = "sleep 10 & p=$!; kill $p; wait $p; echo bg:$?; \
                      timeout 1 sleep 5; echo timeout:$?";
        let run = sb.exec_json(&[], &["/bin/sh", "-c", script]);
        let out = run.child_stdout();
        assert!(out.contains("bg:143"), "{}", run.ctx());
        assert!(out.contains("timeout:124"), "{}", run.ctx());
    }
}

#[test]
fn check_and_doctor_name_the_layer() {
    let sb = fallback("4");
    let pol = sb.policy("version: 1\n");
    let r = sb.run(&["check", "-p", &pol]);
    r.assert_code(0);
    assert!(
        r.stdout.contains("seccomp user notification"),
        "check does not name the signal layer:{}",
        r.ctx()
    );
    let r = sb.run(&["check", "--json", "-p", &pol]);
    r.assert_code(0);
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("check --json");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["signals"], "seccomp-notify", "{v}");
    let r = sb.run(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(r.stdout.trim()).expect("doctor --json");
    assert_eq!(v["default_policy"]["runs"], true, "{v}");
    assert_eq!(v["default_policy"]["signals"], "seccomp-notify", "{v}");
}

/// Deadly signals at a host `sleep`, every route that names a process by
/// pid (no process-group route: the group of a process the run cannot see
/// cannot be asked for).
const AT_HOST_BY_PID: &[&str] = &[
    "kill:host:9",
    "kill:host:19",
    "tkill:host:9",
    "tgkill:host:19",
    "rt_sigqueueinfo:host:9",
    "rt_tgsigqueueinfo:host:19",
    "pidfd_send_signal:host:9",
    "sigio:host:19",
];

/// Assert each route was refused the way the layer the run reports refuses
/// it: the pid namespace cannot name the target (ESRCH), Landlock's scope
/// refuses (EPERM; `sigio` sets its owner and the kernel drops the signal at
/// delivery, seen by the sleeper staying alive), the seccomp-notify layer
/// refuses (EPERM; ENOSYS for pidfd_send_signal). A run that lost its layer
/// gets another answer, or kills the sleeper.
fn assert_refused_by(layer: &str, lines: &[Value], ops: &[&str], run: &Run) {
    assert_eq!(lines.len(), ops.len(), "probe lines missing:{}", run.ctx());
    for l in lines {
        let res = l["result"].as_str().unwrap_or_default();
        let op = l["op"].as_str().unwrap_or_default();
        let ok = match (layer, op.split(':').next().unwrap_or_default()) {
            ("pid-namespace", "pidfd_send_signal") => res == "pidfd_open:ESRCH",
            ("pid-namespace", _) => res == "ESRCH",
            ("landlock-scope", "sigio") => res == "ok",
            ("landlock-scope", _) => res == "EPERM",
            ("seccomp-notify", "pidfd_send_signal") => res == "ENOSYS",
            ("seccomp-notify", _) => res == "EPERM",
            _ => false,
        };
        assert!(
            ok,
            "ESCAPE or another layer's answer (the run reports `{layer}`): {l}{}",
            run.ctx()
        );
    }
}

/// The default path, at the kernel's own Landlock ABI: whatever layer the
/// run reports (the pid namespace here as root or with user namespaces;
/// Landlock's scope or the seccomp layer in the suite's no-namespace pass)
/// refuses every route to a host process with its own answer, and the
/// process lives on.
#[test]
fn the_default_path_cannot_signal_a_host_process() {
    let sb = Sandbox::new();
    let (mut sleeper, _guard) = host_sleeper();
    let (run, lines) = signal_probes(&sb, &[], sleeper.id(), AT_HOST_BY_PID);
    run.assert_ran();
    let layer = enforcement(&run)["signals"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if view_expected() {
        assert_eq!(layer, "pid-namespace", "{}", run.ctx());
    }
    assert_refused_by(&layer, &lines, AT_HOST_BY_PID, &run);
    assert_alive_and_running(&mut sleeper, &run);
}

/// Without namespaces at the kernel's own ABI (6+), Landlock's signal scope
/// is the only layer: every route to a host process, and to the keeper
/// between capsule and the command (outside the run's Landlock domain), is
/// refused with EPERM.
#[test]
fn the_signal_scope_holds_without_namespaces() {
    let probe = Sandbox::new();
    if !kernel_has_scopes(&probe) {
        skip("Landlock ABI < 6 on this kernel: no signal scope to attack");
        return;
    }
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let (mut sleeper, _guard) = host_sleeper();
    let mut ops = AT_HOST_BY_PID.to_vec();
    ops.extend(["kill:ppid:0", "kill:ppid:18", "tgkill:ppid:0"]);
    let (run, lines) = signal_probes(&sb, &[], sleeper.id(), &ops);
    run.assert_ran();
    let layer = enforcement(&run)["signals"].clone();
    if std::env::var_os("CAPSULE_LANDLOCK_ABI_MAX").is_none() {
        assert_eq!(layer, "landlock-scope", "{}", run.ctx());
    }
    assert_refused_by(layer.as_str().unwrap_or_default(), &lines, &ops, &run);
    assert_alive_and_running(&mut sleeper, &run);
}

#[test]
fn other_layers_keep_enforcing_where_they_exist() {
    let probe = Sandbox::new();
    if !kernel_has_scopes(&probe) {
        skip("Landlock ABI < 6 on this kernel: no scope layer to compare with");
        return;
    }
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let run = sb.exec_json(&[], &["/bin/true"]);
    run.assert_ran();
    assert_eq!(
        enforcement(&run)["signals"],
        "landlock-scope",
        "{}",
        run.ctx()
    );
    if view_expected() {
        let sb = Sandbox::new();
        let run = sb.exec_json(&[], &["/bin/true"]);
        run.assert_ran();
        assert_eq!(
            enforcement(&run)["signals"],
            "pid-namespace",
            "{}",
            run.ctx()
        );
    }
}

#[test]
fn nested_capsule_without_a_listener_fails_closed() {
    // capsule inside capsule on this path: the outer filter already has a
    // listener, so the inner one cannot get its own (EBUSY): refused, or
    // with --best-effort run with signal isolation listed missing.
    let sb = fallback("4");
    // The inner capsule takes the same path.
    let pol =
        sb.policy("version: 1\nenv:\n  pass: [CAPSULE_NO_NAMESPACES, CAPSULE_LANDLOCK_ABI_MAX]\n");
    let bin = capsule_bin();
    let bin = bin.to_string_lossy();
    let inner = |extra: &[&str]| {
        let mut cmd: Vec<&str> = vec![&bin, "exec", "--json"];
        cmd.extend_from_slice(extra);
        cmd.extend_from_slice(&["--", "/bin/true"]);
        sb.exec_json(&["-p", &pol], &cmd)
    };
    let run = inner(&[]);
    let v: Value = serde_json::from_str(run.child_stdout().trim())
        .unwrap_or_else(|e| panic!("inner result ({e}):{}", run.ctx()));
    assert_eq!(v["exit_code"], 125, "{v}{}", run.ctx());
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("signal isolation"),
        "{v}"
    );
    let run = inner(&["--best-effort"]);
    let v: Value = serde_json::from_str(run.child_stdout().trim())
        .unwrap_or_else(|e| panic!("inner result ({e}):{}", run.ctx()));
    assert_eq!(v["exit_code"], 0, "{v}{}", run.ctx());
    assert!(
        v["enforcement"]["missing"]
            .to_string()
            .contains("signal isolation"),
        "{v}"
    );
}

#[test]
fn a_small_max_open_files_does_not_break_the_layer() {
    // The listener is a descriptor the command stage opens: the limits come
    // after it, so they bind the command and not its confinement.
    let sb = fallback("4");
    let pol = sb.policy("version: 1\nlimits:\n  max_open_files: 8\n");
    let (sleeper, _guard) = host_sleeper();
    let ops = ["kill:ppid:0", "kill:host:0"];
    let (run, lines) = signal_probes(&sb, &["-p", &pol], sleeper.id(), &ops);
    run.assert_ran();
    assert_denied(&lines, &ops, &run);
    assert_eq!(enforcement(&run)["signals"], "seccomp-notify");
}

#[test]
fn without_landlock_the_layer_is_not_claimed() {
    // Nothing but Landlock keeps capsule's /proc/PID/fd (the listener) out of
    // the run's reach: with no Landlock, signal isolation is missing.
    let sb = fallback("0");
    let run = sb.exec_json(&[], &["/bin/true"]);
    run.assert_code(125);
    let run = sb.exec_json(&["--best-effort"], &["/bin/true"]);
    run.assert_ran();
    let e = enforcement(&run);
    assert_eq!(e["signals"], "none", "{e}");
    assert!(e["missing"].to_string().contains("signal isolation"), "{e}");
}

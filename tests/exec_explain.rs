//! `capsule exec --explain`: after the run, every access the sandbox refused,
//! each with `why`'s answer, on stderr and as `denials` in the JSON result
//! and the audit record. Each layer explains its own refusals: Landlock/the
//! view (the path observer), the proxy, the broker, the signal layer.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! lowered Landlock ABIs).

mod common;

use common::*;
use serde_json::Value;

/// The denials of a `--json --explain` run.
fn denials(r: &Run) -> Vec<Value> {
    r.json()["denials"]
        .as_array()
        .unwrap_or_else(|| panic!("no denials list: {}", r.ctx()))
        .clone()
}

fn find<'a>(d: &'a [Value], question: &str) -> Option<&'a Value> {
    d.iter().find(|x| x["question"] == question)
}

/// Whether the observer saw file accesses here (a seccomp listener).
fn files_observed(r: &Run) -> bool {
    let seen = r.json()["explain"]["files"].as_bool().unwrap_or(false);
    if !seen {
        skip(&format!(
            "--explain could not observe file accesses here: {}",
            r.json()["explain"]["why_not"]
        ));
    }
    seen
}

/// A file outside every grant: named with its access, layer and the key to add.
#[test]
fn a_file_outside_the_grants_is_named_with_the_key_to_add() {
    let sb = Sandbox::new();
    let secret = sb.write("outside/secret.txt", "s3cret\n");
    let work = sb.mkdir("work");
    let policy = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [\"{}\"]\n",
        work.display()
    ));
    let created = sb.path("outside/new.txt");
    let script = format!(
        "cat {} ; echo x > {} ; echo x > {}/ok.txt; echo done",
        secret.display(),
        created.display(),
        work.display()
    );
    let r = sb.exec_json(
        &["--explain", "-p", &policy, "--cwd", &work.to_string_lossy()],
        &["/bin/sh", "-c", &script],
    );
    r.assert_ran();
    assert!(r.child_stdout().contains("done"), "{}", r.ctx());
    if !files_observed(&r) {
        return;
    }
    let d = denials(&r);
    let q = format!("read {}", secret.display());
    let read = find(&d, &q).unwrap_or_else(|| panic!("{q} not explained: {d:#?}"));
    assert_eq!(read["verdict"], "refused");
    assert!(
        ["landlock", "view"].contains(&read["layer"].as_str().unwrap()),
        "{read}"
    );
    let change = read["change"].as_str().unwrap_or_default();
    assert!(
        change.contains(&format!("\"{}\" to filesystem.read", secret.display())),
        "{read}"
    );
    let q = format!("write {}", created.display());
    let write = find(&d, &q).unwrap_or_else(|| panic!("{q} not explained: {d:#?}"));
    assert!(
        write["change"]
            .as_str()
            .unwrap_or_default()
            .contains("filesystem.write"),
        "{write}"
    );
    // What the run was allowed is not a denial.
    assert!(
        find(&d, &format!("write {}/ok.txt", work.display())).is_none(),
        "{d:#?}"
    );
    assert!(
        d.iter().all(|x| x["verdict"] == "refused"),
        "only refusals: {d:#?}"
    );
}

/// The human text on stderr, after the command's own output; and the audit
/// record carries the same list.
#[test]
fn stderr_and_the_audit_record_carry_the_denials() {
    let sb = Sandbox::new();
    let secret = sb.write("outside/secret.txt", "s3cret\n");
    let audit = sb.path("audit.jsonl");
    let r = sb.run(&[
        "exec",
        "--explain",
        "--audit-log",
        &audit.to_string_lossy(),
        "--",
        "/bin/sh",
        "-c",
        &format!("echo own-output >&2; cat {}", secret.display()),
    ]);
    let err = r.stderr.clone();
    let own = err.find("own-output").expect("the command's own stderr");
    let rec: Value = serde_json::from_str(
        std::fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    )
    .unwrap();
    if err.contains("file accesses were not observed") {
        skip("no seccomp listener here: only the proxy's refusals are explained");
        return;
    }
    let q = format!("read {}: refused by", secret.display());
    let at = err
        .find(&q)
        .unwrap_or_else(|| panic!("{q} not on stderr:\n{err}"));
    assert!(
        at > own,
        "the explanation comes after the command's output:\n{err}"
    );
    assert!(err.contains("to allow add"), "{err}");
    let d = rec["denials"]
        .as_array()
        .expect("denials in the audit record");
    assert!(
        find(d, &format!("read {}", secret.display())).is_some(),
        "{rec}"
    );
}

/// Without --explain: no denials field, no observer (the run is unchanged).
#[test]
fn without_explain_there_is_no_denials_field() {
    let sb = Sandbox::new();
    let r = sb.exec_json(&[], &["/bin/sh", "-c", "cat /nonexistent-dir/x; true"]);
    r.assert_ran();
    assert!(r.json().get("denials").is_none(), "{}", r.ctx());
    assert!(r.json().get("explain").is_none(), "{}", r.ctx());
}

/// A host not on the allowlist: the proxy refuses it by name, before any
/// connection, and `--explain` says so with the key to add.
#[test]
fn a_host_not_on_the_allowlist_is_explained_by_the_proxy() {
    let sb = Sandbox::new();
    let py = r#"
import os, socket, urllib.parse
u = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
s = socket.create_connection((u.hostname, u.port), timeout=20)
s.sendall(b"CONNECT not-listed.invalid:443 HTTP/1.1\r\nHost: not-listed.invalid:443\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode())
"#;
    let r = sb.exec_json(
        &["--explain", "--net", "proxy", "--allow-host", "127.0.0.1"],
        &[&python(), "-c", py],
    );
    r.assert_ran();
    assert!(r.child_stdout().contains("403"), "{}", r.ctx());
    let d = denials(&r);
    let c = find(&d, "connect not-listed.invalid")
        .unwrap_or_else(|| panic!("the host is not explained: {d:#?}"));
    assert_eq!(c["layer"], "proxy", "{c}");
    assert!(
        c["change"]
            .as_str()
            .unwrap_or_default()
            .contains("allow_hosts"),
        "{c}"
    );
}

/// A tool the policy does not allow: the broker refused it, by name.
#[test]
fn a_refused_tool_is_explained_by_the_broker() {
    let sb = Sandbox::new();
    let policy = sb.policy(
        "version: 1\ntools:\n  max_calls: 3\n  allow:\n    - name: echo\n      command: [/bin/cat]\n",
    );
    let py = r#"
import json, os, socket
s = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "rm-rf", "arguments": {}}}).encode() + b"\n")
print(s.makefile("rb").readline().decode())
"#;
    let r = sb.exec_json(&["--explain", "-p", &policy], &[&python(), "-c", py]);
    r.assert_ran();
    let d = denials(&r);
    let t = find(&d, "tool rm-rf").unwrap_or_else(|| panic!("not explained: {d:#?}"));
    assert_eq!(t["layer"], "broker", "{t}");
    assert_eq!(t["key"], "tools.allow", "{t}");
}

/// A signal to a process outside the run: explained by the layer that
/// refuses it here (pid namespace, Landlock's scope, or capsule's guard).
#[test]
fn a_signal_outside_the_run_is_explained_by_its_layer() {
    let sb = Sandbox::new();
    let (child, _guard) = host_sleeper();
    let pid = child.id();
    let r = sb.exec_json(
        &["--explain"],
        &["/bin/sh", "-c", &format!("kill {pid}; echo rc=$?")],
    );
    r.assert_ran();
    assert!(pid_alive(pid as i32, Some("sleep")), "ESCAPE: {}", r.ctx());
    if !files_observed(&r) {
        return;
    }
    let d = denials(&r);
    let s = find(&d, &format!("signal {pid}"))
        .unwrap_or_else(|| panic!("the signal is not explained: {d:#?}"));
    assert!(
        ["pid-namespace", "landlock-scope", "seccomp-notify"]
            .contains(&s["layer"].as_str().unwrap()),
        "{s}"
    );
    assert!(s["no_change"].is_string(), "{s}");
}

/// The observer's own work is not counted against the guards' CPU budget: a
/// run that opens many files is never killed for being observed (budget
/// here: three seconds, a tenth of the 30 s limit). Past its budget the
/// observer answers without reading and paces, so the opens turn slow: the
/// run stops after 100,000 opens or 20 s, whichever comes first, so that its
/// length does not depend on how fast this machine observes (100,000 opens
/// paced at a loaded CI's speed took longer than the limit).
#[test]
fn a_file_heavy_run_is_not_killed_for_being_observed() {
    let sb = Sandbox::new();
    let py = "import os, time\nt0 = time.monotonic()\nfor i in range(100000):\n    \
              os.close(os.open('/bin/sh', os.O_RDONLY))\n    if time.monotonic() - t0 > 20:\n        \
              break\nprint('opened', i + 1)\n";
    let t = std::time::Instant::now();
    let r = sb.exec_json(&["--explain", "--timeout", "30"], &[&python(), "-c", py]);
    r.assert_ran();
    assert!(r.child_stdout().contains("opened"), "{}", r.ctx());
    assert_eq!(r.json()["killed"], false, "{}", r.ctx());
    eprintln!("{} in {:?}", r.child_stdout().trim(), t.elapsed());
    // Whether the budget was spent (calls past it answered without reading):
    // else nothing was tested beyond a run that was not killed.
    if r.json()["explain"]["not_observed"].as_u64().unwrap_or(0) == 0 {
        skip_part("the observer did not spend its CPU budget within 20 s on this machine");
    }
}

/// Successful writes in the run's private places are not refusals (issue
/// 39): `tempfile.mkdtemp()` and a file in it, a nested directory under
/// HOME (the TMPDIR: /tmp inside the view, the run's own TMPDIR without
/// namespaces) and under /dev/shm, read back, listed, removed. `--explain`
/// listed each path two levels below the private /tmp as refused (and a
/// pytest run's `tmp_path` as "add \"/\" to filesystem.write"). On the
/// default path and without namespaces; no denial may propose `/`.
#[test]
fn writes_in_the_runs_private_places_are_not_refusals() {
    let code = r#"
import os, tempfile, shutil
d = tempfile.mkdtemp()
open(d + "/f", "w").write("x")
assert open(d + "/f").read() == "x"
os.makedirs(d + "/a/b/c")
open(d + "/a/b/c/g", "w").write("y")
os.listdir(d + "/a/b")
h = os.path.join(os.environ["HOME"], ".cache", "tool", "deep")
os.makedirs(h)
open(h + "/cfg", "w").write("z")
assert open(h + "/cfg").read() == "z"
t = os.environ.get("TMPDIR", "/tmp")
os.makedirs(t + "/pytest-of-x/pytest-0/test_a0")
open(t + "/pytest-of-x/pytest-0/test_a0/f", "w").write("w")
os.symlink(t + "/pytest-of-x/pytest-0", t + "/pytest-of-x/pytest-current")
if os.environ.get("SHM") == "1":
    s = "/dev/shm/capsule-explain-%d" % os.getpid()
    os.makedirs(s + "/x/y")
    open(s + "/x/y/z", "w").write("s")
    shutil.rmtree(s)
shutil.rmtree(d)
print("done")
"#;
    for no_ns in [false, true] {
        let mut sb = Sandbox::new();
        if no_ns {
            sb.env.push(("CAPSULE_NO_NAMESPACES".into(), "1".into()));
        }
        let work = sb.mkdir("work");
        let policy = sb.policy(&format!(
            "version: 1\nfilesystem:\n  write: [\"{}\"]\n",
            work.display()
        ));
        // The run's own /dev/shm is the view's (without namespaces the
        // host's, not granted).
        let shm = if !no_ns && view_expected() { "1" } else { "0" };
        let policy = sb.policy_named(
            "shm.yaml",
            &format!(
                "{}env:\n  set: {{SHM: \"{shm}\"}}\n",
                std::fs::read_to_string(&policy).unwrap()
            ),
        );
        let r = sb.exec_json(
            &[
                "--explain",
                "--no-audit",
                "-p",
                &policy,
                "--cwd",
                &work.to_string_lossy(),
            ],
            &[&python(), "-c", code],
        );
        r.assert_ran();
        assert!(r.child_stdout().contains("done"), "{}", r.ctx());
        if !files_observed(&r) {
            return;
        }
        let d = denials(&r);
        for x in &d {
            let change = x["change"].as_str().unwrap_or_default();
            assert!(
                !change.contains("\"/\" to"),
                "no_ns={no_ns}: proposes the whole host: {x:#}"
            );
        }
        assert!(
            d.is_empty(),
            "no_ns={no_ns}: successful writes in the run's own places listed as refused: {d:#?}"
        );
    }
}

/// The end-of-run summary's "run again with `capsule exec --explain`" hint
/// is for a run without it (issue 39): with `--explain` the refusals are
/// listed right below, and the hint told the user to do what they did.
#[test]
fn the_explain_hint_is_not_given_to_a_run_with_explain() {
    let sb = Sandbox::new();
    let py = r#"
import os, socket, urllib.parse
u = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
s = socket.create_connection((u.hostname, u.port), timeout=20)
s.sendall(b"CONNECT not-listed.invalid:443 HTTP/1.1\r\nHost: not-listed.invalid:443\r\n\r\n")
print(s.recv(100).split(b"\r\n")[0].decode())
"#;
    let hint = "run again with `capsule exec --explain`";
    for explain in [false, true] {
        let mut args = vec![
            "exec",
            "--no-audit",
            "--net",
            "proxy",
            "--allow-host",
            "127.0.0.1",
        ];
        if explain {
            args.push("--explain");
        }
        let p = python();
        args.extend(["--", p.as_str(), "-c", py]);
        let r = sb.run(&args);
        assert_eq!(r.code, Some(0), "{}", r.ctx());
        assert!(r.stdout.contains("403"), "{}", r.ctx());
        assert!(
            r.stderr
                .contains("proxy connection(s) to hosts not in allow_hosts"),
            "explain={explain}: no summary line{}",
            r.ctx()
        );
        assert_eq!(
            r.stderr.contains(hint),
            !explain,
            "explain={explain}: the hint{}",
            r.ctx()
        );
        if explain {
            assert!(
                r.stderr.contains("connect not-listed.invalid"),
                "{}",
                r.ctx()
            );
        }
    }
}

/// The end-of-run line for a run in `network.mode: none` that tried to
/// reach the network (issue 39): the program saw only "Connection refused"
/// or a DNS failure. With its own network namespace the run's failed
/// attempts are counted (the namespace's own counters: no route, a refused
/// connection, a datagram to a closed port); `--explain` lists it as a
/// refusal. A run that tried nothing gets no line. Only the run's own
/// loopback is tried here (127.0.0.1:9, nothing listening).
#[test]
fn a_refused_network_in_mode_none_is_said_at_the_end() {
    let sb = Sandbox::new();
    let netns = exec_enforcement()["netns"] == true;
    let line = "the network is off (network.mode: none)";
    let connect = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9), timeout=5)\nexcept OSError as e:\n    print('failed', e)\n";
    for explain in [false, true] {
        let mut args = vec!["exec", "--no-audit"];
        if explain {
            args.push("--explain");
        }
        let p = python();
        let mut quiet = args.clone();
        quiet.extend(["--", p.as_str(), "-c", "print('quiet')"]);
        let r = sb.run(&quiet);
        assert_eq!(r.code, Some(0), "{}", r.ctx());
        assert!(
            !r.stderr.contains(line),
            "a run that tried nothing{}",
            r.ctx()
        );
        args.extend(["--", p.as_str(), "-c", connect]);
        let r = sb.run(&args);
        assert_eq!(r.code, Some(0), "{}", r.ctx());
        assert!(r.stdout.contains("failed"), "{}", r.ctx());
        if !netns {
            // No namespace: seccomp refuses the IP socket in the kernel,
            // telling capsule nothing (docs/guards.md).
            assert!(!r.stderr.contains(line), "{}", r.ctx());
            continue;
        }
        assert!(
            r.stderr.contains(line) && r.stderr.contains("--net proxy --allow-host HOST"),
            "explain={explain}: no line{}",
            r.ctx()
        );
        if explain {
            assert!(
                r.stderr.contains("connect (the network): refused by"),
                "--explain does not list it{}",
                r.ctx()
            );
        }
    }
    let r = sb.exec_json(&["--no-audit"], &[&python(), "-c", connect]);
    if netns {
        assert!(
            r.json()["usage"]["network"]["failed_attempts"].as_u64() > Some(0),
            "{}",
            r.ctx()
        );
    }
}

/// A name lookup in mode none is said at the end too (the resolver's query
/// has no route out of the run's namespace, or, without one, --explain saw
/// it read /etc/resolv.conf). Run inside a network namespace this test
/// makes (`unshare --net`, root only): even a broken sandbox could send
/// nothing off this machine.
#[test]
fn a_name_lookup_in_mode_none_is_said_at_the_end() {
    if !is_root() || !std::path::Path::new("/usr/bin/unshare").exists() {
        skip("needs root and unshare(1) to make a private network namespace");
        return;
    }
    let lookup = "import socket\ntry:\n    socket.getaddrinfo('capsule-test.invalid', 80)\nexcept OSError as e:\n    print('failed', e)\n";
    for no_ns in [false, true] {
        let mut cmd = std::process::Command::new("/usr/bin/unshare");
        cmd.args(["--net", "--"]).arg(capsule_bin()).args([
            "exec",
            "--no-audit",
            "--explain",
            "--",
            &python(),
            "-c",
            lookup,
        ]);
        cmd.env_remove("CAPSULE_NO_NAMESPACES");
        if no_ns {
            cmd.env("CAPSULE_NO_NAMESPACES", "1");
        }
        let out = cmd.output().expect("unshare");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("failed"),
            "no_ns={no_ns}: {stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("the network is off (network.mode: none)"),
            "no_ns={no_ns}: no line: {stderr}"
        );
        assert!(
            stderr.contains("connect (the network): refused by"),
            "no_ns={no_ns}: --explain does not list it: {stderr}"
        );
    }
}

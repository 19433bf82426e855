//! Red team 9: what the unsandboxed parent does with what a run left
//! behind, and the no-namespace path, written as the attack and run
//! against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips. Each case takes a few seconds at most.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// Run capsule with ARGS and no stdin, but give up after `bound`: the
/// process is killed (by its pid) and None returned. Some(exit code,
/// stdout, stderr) when it ended by itself.
fn run_bounded(sb: &Sandbox, args: &[&str], bound: Duration) -> Option<(Option<i32>, String)> {
    let mut c = sb.std_command(args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn capsule");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            let text = format!(
                "stdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return Some((out.status.code(), text));
        }
        if start.elapsed() > bound {
            // Ours, by pid: the capsule (or via_serve wrapper) we spawned.
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Planning reads the `#!` line of the command (and of each `command`
/// tool's program) on the host, before the run and its timeout start. The
/// file only had to exist and carry an execute bit, so a run with a write
/// grant left `ws/build.sh` as a FIFO of mode 0755, and the next
/// `capsule exec -- ws/build.sh` (the user's, a CI job's, an agent's next
/// step) opened it to read the `#!` line and blocked there for good: no
/// writer ever comes, and `--timeout` does not bound planning. The parent
/// must end by itself (the kernel refuses to execute a FIFO: 126).
#[test]
fn a_fifo_left_as_the_command_does_not_hang_the_next_run() {
    let sb = Sandbox::new();
    let ws = sb.mkdir("ws");
    let fifo = ws.join("build.sh");
    let fifo_s = fifo.to_string_lossy().into_owned();
    let ws_s = ws.to_string_lossy().into_owned();
    // The earlier run plants it, inside its own write grant.
    let plant = format!(
        "import os; os.mkfifo({fifo_s:?}, 0o755); os.chmod({fifo_s:?}, 0o755); print('PLANTED')"
    );
    let r = sb.exec_json(&["--allow-write", &ws_s], &[&python(), "-c", &plant]);
    assert!(
        r.child_stdout().contains("PLANTED"),
        "the run could not make a FIFO in its write grant:{}",
        r.ctx()
    );
    for args in [
        vec![
            "exec",
            "--json",
            "--timeout",
            "3",
            "--allow-write",
            &ws_s,
            "--",
            &fifo_s,
        ],
        vec!["exec", "--dry-run", "--allow-write", &ws_s, "--", &fifo_s],
    ] {
        let ended = run_bounded(&sb, &args, Duration::from_secs(30));
        assert!(
            ended.is_some(),
            "capsule {} hung on the FIFO the earlier run left as the command",
            args.join(" ")
        );
    }
}

/// The same through a `command` tool: an earlier run (under a policy that
/// could write there) left the tool's program as an executable FIFO in a
/// place this policy only reads. `capsule check` and `exec` read its `#!`
/// line while planning and hung.
#[test]
fn a_fifo_left_as_a_tools_program_does_not_hang_check() {
    let sb = Sandbox::new();
    let bin = sb.mkdir("tools/bin");
    let prog = bin.join("lint");
    let prog_s = prog.to_string_lossy().into_owned();
    let plant = format!(
        "import os; os.mkfifo({prog_s:?}, 0o755); os.chmod({prog_s:?}, 0o755); print('PLANTED')"
    );
    let r = sb.exec_json(
        &["--allow-write", &bin.to_string_lossy()],
        &[&python(), "-c", &plant],
    );
    assert!(
        r.child_stdout().contains("PLANTED"),
        "the run could not make a FIFO in its write grant:{}",
        r.ctx()
    );
    let policy = sb.policy_named(
        "pol/policy.yaml",
        &format!("version: 1\ntools:\n  allow:\n    - name: lint\n      command: [{prog_s:?}]\n"),
    );
    let ended = run_bounded(
        &sb,
        &["check", "--policy", &policy],
        Duration::from_secs(30),
    );
    assert!(
        ended.is_some(),
        "capsule check hung on the FIFO an earlier run left as a tool's program"
    );
}

/// Without namespaces (path 3: no unprivileged user namespaces, a
/// RuntimeDefault pod, Ubuntu 24.04) the command's own `/proc/self` is
/// granted, and its `net/` directory (also `task/TID/net/`) is the
/// network namespace the process is in: the host's. So the run read every
/// TCP and UDP connection and listener of the host (`net/tcp`: addresses,
/// ports, uids), every Unix socket's name (`net/unix`), the interfaces and
/// routes, none of which any grant names. The attack: a host listener on
/// 127.0.0.1 the run must not find there.
#[test]
fn without_namespaces_the_run_cannot_read_the_hosts_sockets_through_its_own_proc() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().unwrap().port();
    let needle = format!(":{port:04X} ");
    let script = r#"
import os
pid = os.getpid()
for p in ["/proc/self/net/tcp", "/proc/%d/net/tcp" % pid, "/proc/thread-self/net/tcp",
          "/proc/self/task/%d/net/tcp" % pid, "/proc/self/net/unix"]:
    try:
        data = open(p).read()
        print("READ", p, data.replace("\n", "|"))
    except OSError as e:
        print("REFUSED", p, e.errno)
print("STATUS", open("/proc/self/status").read().splitlines()[0])
print("FDS", len(os.listdir("/proc/self/fd")) > 0)
"#;
    let r = sb.exec_json(&[], &[&python(), "-c", script]);
    let out = r.child_stdout();
    assert!(
        out.contains("STATUS Name:") && out.contains("FDS True"),
        "the command no longer reads its own /proc/self:{}",
        r.ctx()
    );
    for line in out.lines().filter(|l| l.starts_with("READ")) {
        assert!(
            !line.contains(&needle),
            "the run read the host's loopback listener (port {port}) in {}:{}",
            line.split_whitespace().nth(1).unwrap_or("?"),
            r.ctx()
        );
        assert!(
            !line.contains("/net/"),
            "the run read the host's network state: {}:{}",
            line.split_whitespace().nth(1).unwrap_or("?"),
            r.ctx()
        );
    }
    drop(listener);
}

//! The proxy under a flood from the sandboxed command (issue 11, item 3): a cap on
//! concurrent connections (`network.max_connections`), a deadline for request heads,
//! and the supervisor's memory bounded while the command holds thousands of
//! connections with unfinished heads. Every case spawns the real binary and floods
//! from inside the sandbox, on both paths (own network namespace; the Landlock TCP
//! fallback forced with CAPSULE_NO_NAMESPACES=1).
//!
//! Loopback only: the command talks to the proxy's loopback endpoint and nothing else.

mod proxy_support;

use std::io::Read;
use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use proxy_support::{
    capsule_bin, exec, runnable, shared_tempdir, NetPath, Variant, Who, PYTHON, TEST_PATH,
};
use serde_json::Value;

/// Both paths, as the invoking user and as `nobody` (which needs root to become).
const EVERY: [Variant; 4] = [
    Variant {
        who: Who::Invoker,
        path: NetPath::Netns,
    },
    Variant {
        who: Who::Invoker,
        path: NetPath::Fallback,
    },
    Variant {
        who: Who::Nobody,
        path: NetPath::Netns,
    },
    Variant {
        who: Who::Nobody,
        path: NetPath::Fallback,
    },
];

const PATHS: [Variant; 2] = [
    Variant {
        who: Who::Invoker,
        path: NetPath::Netns,
    },
    Variant {
        who: Who::Invoker,
        path: NetPath::Fallback,
    },
];

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p.display().to_string()
}

/// Opens `n` connections to the proxy, each sending the start of a request head that
/// never ends, then sorts them: answered with a 503 naming the key, closed otherwise,
/// or still held open once `expect_answers` were answered (or 8 s passed). Prints one
/// JSON line.
const HOLD_PY: &str = r#"
import json, os, select, socket, sys, time
from urllib.parse import urlsplit
n, expect_answers = int(sys.argv[1]), int(sys.argv[2])
p = urlsplit(os.environ["HTTP_PROXY"])
socks = []
for i in range(n):
    s = socket.create_connection((p.hostname, p.port))
    s.sendall(b"GET http://localhost/ HTTP/1.1\r\nX-Unfinished: ")
    socks.append(s)
res = {"refused_503": 0, "held": 0, "closed": 0, "key_named": 0}
waiting, end = list(socks), time.monotonic() + 8
while waiting and n - len(waiting) < expect_answers and time.monotonic() < end:
    ready, _, _ = select.select(waiting, [], [], 0.2)
    for s in ready:
        waiting.remove(s)
        try:
            b = s.recv(4096)
        except OSError:
            b = b""
        if b.startswith(b"HTTP/1.1 503"):
            res["refused_503"] += 1
            res["key_named"] += b"network.max_connections" in b
        else:
            res["closed"] += 1
time.sleep(0.3)
for s in waiting:
    s.setblocking(False)
    try:
        b = s.recv(4096)
        res["closed" if not b.startswith(b"HTTP/1.1 503") else "refused_503"] += 1
    except BlockingIOError:
        res["held"] += 1
    except OSError:
        res["closed"] += 1
print(json.dumps(res))
"#;

/// Past `network.max_connections` a new connection is refused with a 503 and
/// counted in the result and the audit record; the ones within the cap stay open.
#[test]
fn connections_past_the_cap_are_refused_and_counted() {
    for v in EVERY {
        if !runnable(v) {
            continue;
        }
        let dir = shared_tempdir("capsule-proxy-limits-");
        let policy = write(
            dir.path(),
            "p.yaml",
            "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts: [localhost]\n  max_connections: 8\n",
        );
        let script = write(dir.path(), "hold.py", HOLD_PY);
        let log = dir.path().join("audit.jsonl");
        let r = exec(
            v,
            &[
                "--policy",
                &policy,
                "--allow-read",
                &dir.path().display().to_string(),
                "--audit-log",
                &log.display().to_string(),
            ],
            &[PYTHON, &script, "20", "12"],
        );
        r.on_path(v);
        assert_eq!(r.status, 0, "{}", r.describe());
        let child: Value = serde_json::from_str(r.stdout().trim()).unwrap_or_else(|_| {
            panic!("{}", r.describe());
        });
        assert_eq!(child["held"], 8, "{child} {}", r.describe());
        assert_eq!(child["refused_503"], 12, "{child} {}", r.describe());
        assert_eq!(child["key_named"], 12, "{child}");
        assert_eq!(
            r.proxy_counter("refused_at_capacity"),
            12,
            "{}",
            r.describe()
        );
        assert_eq!(r.proxy_counter("peak_connections"), 8, "{}", r.describe());
        let text = std::fs::read_to_string(&log).expect("audit log");
        let rec: Value = serde_json::from_str(text.lines().last().expect("a record")).unwrap();
        assert_eq!(rec["proxy"]["refused_at_capacity"], 12, "{rec}");
    }
}

/// Opens one connection, sends an unfinished head, and reports how long the proxy
/// kept it open (or that it was still open after 25 s).
const DEADLINE_PY: &str = r#"
import os, socket, time
from urllib.parse import urlsplit
p = urlsplit(os.environ["HTTP_PROXY"])
s = socket.create_connection((p.hostname, p.port))
t = time.monotonic()
s.sendall(b"CONNECT localhost:443 HTTP/1.1\r\nX-Slow: ")
s.settimeout(25)
try:
    while s.recv(4096):
        pass
    print("closed after %.1f s" % (time.monotonic() - t))
except socket.timeout:
    print("still open after 25 s")
except OSError as e:
    print("closed after %.1f s (%s)" % (time.monotonic() - t, e))
"#;

/// A connection whose request head never completes is closed at the head deadline
/// (10 s, documented), and counted.
#[test]
fn unfinished_head_is_closed_at_the_deadline() {
    for v in EVERY {
        if !runnable(v) {
            continue;
        }
        let dir = shared_tempdir("capsule-proxy-deadline-");
        let script = write(dir.path(), "slow.py", DEADLINE_PY);
        let r = exec(
            v,
            &[
                "--net",
                "proxy",
                "--allow-host",
                "localhost",
                "--allow-read",
                &dir.path().display().to_string(),
            ],
            &[PYTHON, &script],
        );
        r.on_path(v);
        let out = r.stdout().trim().to_string();
        let secs: f64 = out
            .strip_prefix("closed after ")
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{out:?}: {}", r.describe()));
        assert!((9.5..14.0).contains(&secs), "{out}");
        assert_eq!(r.proxy_counter("head_timeouts"), 1, "{}", r.describe());
    }
}

/// Opens N connections, each writing a 60 KB request head that never ends, holds
/// them for a while, then exits. Refused connections are expected (and reported).
pub const FLOOD_PY: &str = r#"
import json, os, resource, socket, sys, time
from urllib.parse import urlsplit
n, size, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
p = urlsplit(os.environ["HTTP_PROXY"])
head = b"GET http://localhost/ HTTP/1.1\r\nX-Flood: " + b"a" * (size - 40)
socks, errors = [], 0
for i in range(n):
    try:
        s = socket.create_connection((p.hostname, p.port))
        s.setblocking(False)
        try:
            s.send(head)
        except OSError:
            pass
        socks.append(s)
    except OSError:
        errors += 1
time.sleep(hold)
print(json.dumps({"opened": len(socks), "errors": errors}))
"#;

/// The supervisor's peak RSS (VmHWM) while `pid` runs, read until it exits.
fn peak_rss_kib(mut child: std::process::Child) -> (u64, std::process::Output) {
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_path) {
            for line in text.lines() {
                if let Some(v) = line.strip_prefix("VmHWM:") {
                    let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                    peak = peak.max(kib);
                }
            }
        }
        if child.try_wait().expect("wait").is_some() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().expect("wait");
    let mut stdout = vec![];
    let mut stderr = vec![];
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_end(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_end(&mut stderr);
    }
    (
        peak,
        std::process::Output {
            status,
            stdout,
            stderr,
        },
    )
}

/// 2,000 connections each holding a 60 KB unfinished head: the supervisor's peak RSS
/// stays under 64 MiB (without a cap it grew by the full 120 MB and more). The 8,000
/// connection case is `scripts/bench-proxy flood`.
#[test]
fn flood_of_unfinished_heads_keeps_supervisor_memory_bounded() {
    const CONNS: &str = "2000";
    const LIMIT_KIB: u64 = 64 * 1024;
    for v in PATHS {
        if !runnable(v) {
            continue;
        }
        let dir = shared_tempdir("capsule-proxy-flood-");
        let script = write(dir.path(), "flood.py", FLOOD_PY);
        let mut cmd = StdCommand::new(capsule_bin());
        cmd.env_clear()
            .env("PATH", TEST_PATH)
            .env("HOME", dir.path())
            .env("XDG_STATE_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path());
        if v.path == NetPath::Fallback {
            cmd.env("CAPSULE_NO_NAMESPACES", "1");
        }
        let child = cmd
            .args(["exec", "--json", "--no-audit", "--net", "proxy"])
            .args(["--allow-host", "localhost", "--allow-read"])
            .arg(dir.path())
            .args(["--", PYTHON, &script, CONNS, "60000", "3"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn capsule");
        let (peak, out) = peak_rss_kib(child);
        let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
        assert_eq!(r["exit_code"], 0, "{r}");
        let flood: Value =
            serde_json::from_str(r["stdout"].as_str().unwrap_or("").trim()).expect("flood line");
        assert_eq!(flood["opened"], 2000, "{flood} {r}");
        let p = &r["usage"]["proxy"];
        eprintln!("{v:?}: supervisor peak RSS {peak} KiB under the flood ({p})");
        assert!(
            peak > 0 && peak < LIMIT_KIB,
            "{v:?}: supervisor peak RSS {peak} KiB >= {LIMIT_KIB} KiB"
        );
        assert_eq!(p["peak_connections"], 256, "{r}");
        assert!(
            p["refused_at_capacity"].as_u64().unwrap_or(0) >= 1700,
            "{r}"
        );
    }
}

//! The run's own loopback (`network.loopback`; issue 19 item 4): where the
//! run has a network namespace of its own (modes `none` and `proxy`), a test
//! server on 127.0.0.1 or ::1 inside the run works and is fetched by the run
//! itself, and nothing outside the run is reachable through it: not the
//! host's loopback listeners, and no interface or route but `lo`. Without a
//! network namespace (`CAPSULE_NO_NAMESPACES=1`, hosts without user
//! namespaces) there is no IP socket at all in `none` mode (EPERM), and a
//! policy that asks for the loopback (`loopback: true`) is refused with the
//! reason. Real workloads: Python's `ThreadingHTTPServer` with urllib, and
//! node's `http` server with `http.get`.
//!
//! In proxy mode the run's environment names the proxy (HTTP_PROXY and
//! kin, `NO_PROXY` empty), so a client that honours it would send even
//! 127.0.0.1 to the proxy: the clients here bypass it explicitly, as a
//! test suite that talks to its own live server does (README, Network).
//! Traffic goes to loopback only.

mod common;

use common::*;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::process::Command;
use std::time::Duration;

const REFUSED: &str = "network.loopback: true needs the run's own network namespace";

/// A Python ThreadingHTTPServer on 127.0.0.1 and on ::1, each fetched by the
/// run itself with urllib (no proxy).
const PY_SERVER: &str = r#"
import http.server, socket, threading, urllib.request
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("hello " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
class V6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for host, cls in (("127.0.0.1", http.server.ThreadingHTTPServer), ("::1", V6)):
    try:
        srv = cls((host, 0), H)
    except OSError as e:
        print(host, "server failed", e.errno)
        continue
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    url = "http://%s:%d/py" % (host if ":" not in host else "[" + host + "]", port)
    print(host, opener.open(url, timeout=10).read().decode())
    srv.shutdown()
"#;

/// node's http server on 127.0.0.1, fetched with http.get (a plain agent:
/// never an environment proxy).
const NODE_SERVER: &str = r#"
const http = require('http');
let srv;
try {
  srv = http.createServer((req, res) => res.end('hello ' + req.url));
} catch (e) { console.log('server failed', e.code); process.exit(0); }
srv.on('error', (e) => { console.log('server failed', e.code); process.exit(0); });
srv.listen(0, '127.0.0.1', () => {
  const port = srv.address().port;
  http.get({ host: '127.0.0.1', port, path: '/node', agent: new http.Agent() }, (res) => {
    let body = '';
    res.on('data', (d) => (body += d));
    res.on('end', () => { console.log('127.0.0.1', body); srv.close(); });
  }).on('error', (e) => { console.log('fetch failed', e.code); srv.close(); });
});
"#;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The options of each network mode the loopback applies to.
fn modes() -> [(&'static str, Vec<&'static str>); 2] {
    [
        ("none", vec![]),
        (
            "proxy",
            vec!["--net", "proxy", "--allow-host", "example.invalid"],
        ),
    ]
}

/// Runs `cmd` in `none` and `proxy` mode; with the run's own loopback the
/// output must hold every line of `want`; without it (no network namespace),
/// the server must fail as documented (one of `server_failed`: EPERM from
/// seccomp in `none` mode; in proxy mode on the host's network EACCES or
/// EPERM from the network guard or Landlock's TCP bind rule), and a policy
/// that asks for the loopback must be refused with the reason.
fn workload(cmd: &[&str], want: &[&str], server_failed: &[&str]) {
    let sb = Sandbox::new();
    for (mode, opts) in modes() {
        let mut o: Vec<&str> = opts.clone();
        o.extend(["--timeout", "60"]);
        let run = sb.exec_json(&o, cmd);
        run.assert_code(0);
        let j = run.json();
        let out = run.child_stdout();
        if j["enforcement"]["loopback"] == true {
            assert_eq!(j["enforcement"]["netns"], true, "{}", run.ctx());
            for w in want {
                assert!(out.contains(w), "{mode}: want {w:?}{}", run.ctx());
            }
        } else {
            // The documented refusal: no network namespace, no IP socket.
            assert_eq!(j["enforcement"]["netns"], false, "{}", run.ctx());
            let allowed: &[&str] = if mode == "none" {
                &server_failed[..1]
            } else {
                server_failed
            };
            assert!(
                allowed.iter().any(|f| out.contains(f)),
                "{mode}: want one of {allowed:?} (no network namespace){}",
                run.ctx()
            );
            let pol = sb.policy(&format!(
                "version: 1\nnetwork:\n  mode: {mode}\n  loopback: true\n{}",
                if mode == "proxy" {
                    "  allow_hosts: [example.invalid]\n"
                } else {
                    ""
                }
            ));
            let refused = sb.exec_json(&["--policy", &pol], cmd);
            refused.assert_code(125);
            assert!(
                refused.stderr.contains(REFUSED) || refused.stdout.contains(REFUSED),
                "{}",
                refused.ctx()
            );
            let check = sb.run(&["check", "--policy", &pol]);
            check.assert_code(125);
            assert!(check.stdout.contains(REFUSED), "{}", check.ctx());
        }
    }
}

#[test]
fn a_python_http_server_on_the_runs_own_loopback() {
    let py = python();
    workload(
        &[&py, "-c", PY_SERVER],
        &["127.0.0.1 hello /py", "::1 hello /py"],
        &["127.0.0.1 server failed 1", "127.0.0.1 server failed 13"],
    );
}

#[test]
fn a_node_http_server_on_the_runs_own_loopback() {
    if !have("node") {
        skip("node is not installed");
        return;
    }
    workload(
        &["node", "-e", NODE_SERVER],
        &["127.0.0.1 hello /node"],
        &["server failed EPERM", "server failed EACCES"],
    );
}

/// Listeners on the host's loopback (TCP on 127.0.0.1 and ::1, UDP on
/// 127.0.0.1).
struct Host {
    tcp4: TcpListener,
    tcp6: Option<TcpListener>,
    udp: UdpSocket,
}

impl Host {
    fn new() -> Host {
        let tcp4 = TcpListener::bind("127.0.0.1:0").expect("bind tcp");
        tcp4.set_nonblocking(true).unwrap();
        let tcp6 = TcpListener::bind("[::1]:0").ok();
        if let Some(t) = &tcp6 {
            t.set_nonblocking(true).unwrap();
        }
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        udp.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        Host { tcp4, tcp6, udp }
    }
    fn reached(&self) -> Option<String> {
        let accept = |l: &TcpListener| {
            l.accept().ok().map(|(mut s, _)| {
                s.set_nonblocking(false).ok();
                s.set_read_timeout(Some(Duration::from_secs(2))).ok();
                let mut b = String::new();
                let _ = s.read_to_string(&mut b);
                format!("tcp: {b}")
            })
        };
        if let Some(r) = accept(&self.tcp4) {
            return Some(r);
        }
        if let Some(r) = self.tcp6.as_ref().and_then(accept) {
            return Some(r);
        }
        let mut buf = [0u8; 64];
        self.udp
            .recv_from(&mut buf)
            .ok()
            .map(|(n, _)| format!("udp: {}", String::from_utf8_lossy(&buf[..n])))
    }
}

/// What the run's network namespace holds, seen from inside: its interfaces
/// and every route (the main table and IPv6's, which lists all tables).
const INSIDE: &str = r#"
import json, socket
names = [n for _, n in socket.if_nameindex()]
routes = []
for f in ("/proc/net/route", "/proc/net/ipv6_route"):
    try:
        with open(f) as fh:
            lines = fh.read().splitlines()
    except OSError as e:
        routes.append("unreadable %s %s" % (f, e.errno))
        continue
    if f.endswith("/route"):
        lines = lines[1:]
    for l in lines:
        if l.strip():
            routes.append(l.split()[0] if f.endswith("/route") else l.split()[-1])
print(json.dumps({"interfaces": names, "route_devices": routes}))
"#;

/// From inside the run, with its own loopback: the host's loopback listeners
/// (TCP 127.0.0.1 and ::1, UDP) are not reachable — the ports are free in the
/// run's namespace (ECONNREFUSED, a server binds them there) — and the
/// namespace holds `lo` alone, with no route through anything else.
#[test]
fn nothing_outside_the_run_is_reachable_through_its_loopback() {
    let sb = Sandbox::new();
    let host = Host::new();
    let p4 = host.tcp4.local_addr().unwrap().port().to_string();
    let p6 = host
        .tcp6
        .as_ref()
        .map(|t| t.local_addr().unwrap().port().to_string());
    let pu = host.udp.local_addr().unwrap().port().to_string();
    for (mode, opts) in modes() {
        let mut ops: Vec<Vec<String>> = vec![
            vec![
                "tcp_connect".into(),
                "127.0.0.1".into(),
                p4.clone(),
                "escaped".into(),
            ],
            vec![
                "udp_send".into(),
                "127.0.0.1".into(),
                pu.clone(),
                "escaped".into(),
            ],
            vec!["tcp_listen".into(), "127.0.0.1".into()],
        ];
        if let Some(p6) = &p6 {
            ops.push(vec![
                "tcp_connect".into(),
                "::1".into(),
                p6.clone(),
                "escaped".into(),
            ]);
        }
        let refs: Vec<Vec<&str>> = ops
            .iter()
            .map(|o| o.iter().map(String::as_str).collect())
            .collect();
        let ops_ref: Vec<&[&str]> = refs.iter().map(|v| v.as_slice()).collect();
        let run = sb.probe(&opts, &ops_ref);
        run.assert_ran();
        let loopback = run.json()["enforcement"]["loopback"] == true;
        if loopback {
            assert_errno(&run.probe(0), &["ECONNREFUSED"], &run);
            assert_ok(&run.probe(1), &run); // into the run's own 127.0.0.1
            assert_ok(&run.probe(2), &run);
            if p6.is_some() {
                assert_errno(&run.probe(3), &["ECONNREFUSED"], &run);
            }
        } else {
            for i in 0..ops.len() {
                let v = run.probe(i);
                if mode == "proxy" && i != 1 {
                    // TCP on the host's network: the guard or Landlock refuses
                    // the connect and the listen.
                    assert_errno(&v, &["EACCES", "EPERM"], &run);
                } else {
                    // `none`: no IP socket; UDP in proxy mode: none either.
                    assert_errno(&v, &["EPERM"], &run);
                }
            }
        }
        assert_eq!(
            host.reached(),
            None,
            "ESCAPE ({mode}): the host's loopback was reached from the run{}",
            run.ctx()
        );

        if !loopback {
            continue;
        }
        // A server bound in the run on the host listener's very port: the
        // run's 127.0.0.1 is another namespace's.
        let same_port = format!(
            "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', {p4}))\ns.listen(1)\nprint('bound', {p4})"
        );
        let py = python();
        let run = sb.exec_json(&opts, &[&py, "-c", &same_port]);
        run.assert_code(0);
        assert!(
            run.child_stdout().contains(&format!("bound {p4}")),
            "{}",
            run.ctx()
        );
        // The namespace holds `lo` alone; every route goes through it.
        let run = sb.exec_json(&opts, &[&py, "-c", INSIDE]);
        run.assert_code(0);
        let v: serde_json::Value = serde_json::from_str(run.child_stdout().trim())
            .unwrap_or_else(|_| panic!("inside output{}", run.ctx()));
        assert_eq!(v["interfaces"], serde_json::json!(["lo"]), "{}", run.ctx());
        for d in v["route_devices"].as_array().cloned().unwrap_or_default() {
            assert!(
                d == "lo" || d == "00000000",
                "{mode}: a route not through lo: {d}{}",
                run.ctx()
            );
        }
    }
}

/// `loopback: false`: no IP socket even where the run has its own network
/// namespace (the strict mode of before), and `check` says so.
#[test]
fn loopback_false_keeps_every_ip_socket_refused() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nnetwork:\n  loopback: false\n");
    let run = sb.probe(
        &["--policy", &pol],
        &[&["socket", "2", "1"], &["socket", "10", "2"]],
    );
    run.assert_ran();
    assert_eq!(
        run.json()["enforcement"]["loopback"],
        false,
        "{}",
        run.ctx()
    );
    assert_errno(&run.probe(0), &["EPERM"], &run);
    assert_errno(&run.probe(1), &["EPERM"], &run);
    let check = sb.run(&["check", "--policy", &pol]);
    check.assert_code(0);
    assert!(
        !check.stdout.contains("TCP and UDP"),
        "loopback: false must not promise a loopback: {}",
        check.ctx()
    );
}

/// `check` and `exec --dry-run` say what the run's network will be: its own
/// loopback where it has a namespace, no IP socket where it has none.
#[test]
fn check_and_dry_run_predict_the_loopback() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\n");
    let check = sb.run(&["check", "--policy", &pol, "--json"]);
    check.assert_code(0);
    let j: serde_json::Value = serde_json::from_str(check.stdout.trim()).expect("json");
    let dry = sb.run(&["exec", "--dry-run", "--json", "--", "/bin/true"]);
    let d: serde_json::Value = serde_json::from_str(dry.stdout.trim()).expect("json");
    let run = sb.exec_json(&[], &["/bin/true"]);
    run.assert_code(0);
    let actual = run.json()["enforcement"]["loopback"].clone();
    assert_eq!(j["network"]["loopback"], actual, "check: {}", check.stdout);
    assert_eq!(d["network"]["loopback"], actual, "dry-run: {}", dry.stdout);
    let text = sb.run(&["check", "--policy", &pol]);
    if actual == true {
        assert!(
            text.stdout.contains("holding only its loopback"),
            "{}",
            text.stdout
        );
    } else {
        assert!(text.stdout.contains("no IP sockets"), "{}", text.stdout);
    }
}

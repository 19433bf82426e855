//! The host's own addresses through a listed name (issue 37, item 3). Linux delivers a
//! connection to any address the host owns — a public IPv4 or global IPv6 address on
//! eth0 as much as 127.0.0.1 — through `lo`, to whatever listens on `0.0.0.0`/`::`.
//! A listed name resolving to 127.0.0.1 got a 403; one resolving to the host's own
//! public address got the service, by GET and by CONNECT, on both proxy paths.
//!
//! Never on this machine's real addresses: the test makes a private network namespace
//! (and mount namespace, for /etc/hosts) holding only `lo`, adds documentation
//! addresses to it (203.0.113.5/32, 2001:db8::5/128), serves on `[::]` (dual stack)
//! there, and runs capsule inside with `*.capsule.test` listed and /etc/hosts mapping
//! test names to those addresses in every spelling (mapped, NAT64, 6to4). Each must be
//! a 403 naming the class, while the literal addresses, listed, still reach the
//! service (so the server is reachable and the 403s are the proxy's decision).
//!
//! As root: `unshare --mount --net`, capsule as root and as `nobody`. Unprivileged:
//! `unshare --user --map-root-user --mount --net` (skipped, with the reason, where the
//! kernel refuses user namespaces). Both proxy paths each time.

mod proxy_support;

use std::path::Path;

use proxy_support::{capsule_bin, nobody_available, nobody_bin, shared_tempdir, CURL, PYTHON};
use serde_json::Value;

const TEST_PATH: &str = proxy_support::TEST_PATH;

/// name in /etc/hosts and the address it maps to.
const NAMES: &[(&str, &str)] = &[
    ("self4.capsule.test", "203.0.113.5"),
    ("self6.capsule.test", "2001:db8::5"),
    ("mapped.capsule.test", "::ffff:203.0.113.5"),
    ("nat64.capsule.test", "64:ff9b::203.0.113.5"),
    ("nat64local.capsule.test", "64:ff9b:1::203.0.113.5"),
    ("sixtofour.capsule.test", "2002:cb00:7105::1"),
];

/// Literals listed in allow_hosts: the service, reached on purpose.
const LITERALS: &[&str] = &["203.0.113.5", "[2001:db8::5]"];

/// Inside the namespaces: check that only `lo` exists, add the addresses, bind-mount
/// the hosts file, serve on [::] (dual stack: 0.0.0.0 too) and run capsule with a
/// GET and a CONNECT (curl -p) per name. Prints capsule's JSON result.
const ORCHESTRATE_PY: &str = r#"
import http.server, os, socket, subprocess, sys, threading
capsule, hosts, curl = sys.argv[1], sys.argv[2], sys.argv[3]
names = sys.argv[4:]
def run(*cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("SKIP: %s failed: %s" % (" ".join(cmd), r.stderr.strip()))
        sys.exit(0)
    return r.stdout
run("ip", "link", "set", "lo", "up")
links = run("ip", "-o", "link", "show").splitlines()
if any(": lo:" not in l for l in links):
    sys.exit("not a private network namespace: %r" % links)
run("ip", "addr", "add", "203.0.113.5/32", "dev", "lo")
run("ip", "-6", "addr", "add", "2001:db8::5/128", "dev", "lo", "nodad")
run("mount", "--bind", hosts, "/etc/hosts")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"the host's own service\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class DualStack(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
srv = DualStack(("::", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
port = srv.server_address[1]
# The service answers on the host's own addresses from outside the sandbox.
for a in ("203.0.113.5", "2001:db8::5"):
    socket.create_connection((a, port), timeout=5).close()
# For CONNECT (curl -p), the code shown is the proxy's answer to the CONNECT.
script = "; ".join(
    "echo '== %s %s'; %s -s %s --max-time 10 -w '\\n[%%{%s}]\\n' http://%s:%d/"
    % (n, m, curl, "-p" if m == "connect" else "", "http_connect" if m == "connect" else "http_code", n, port)
    for n in names for m in ("get", "connect"))
who = os.environ.get("CAPSULE_AS")
prefix = ["runuser", "-u", who, "--", "env", "HOME=/tmp"] if who else []
r = subprocess.run(prefix + [capsule, "exec", "--json", "--no-audit", "--net", "proxy",
                    "--allow-host", "*.capsule.test", "--allow-host", "203.0.113.5",
                    "--allow-host", "[2001:db8::5]", "--", "/bin/sh", "-c", script],
                   capture_output=True, text=True, timeout=120)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
"#;

/// The child's output for one name and method: (body, status code).
fn section<'a>(out: &'a str, key: &str) -> (&'a str, &'a str) {
    let head = format!("== {key}\n");
    let start = out
        .find(&head)
        .unwrap_or_else(|| panic!("no section for {key} in {out}"));
    let rest = &out[start + head.len()..];
    let end = rest.find("\n== ").map(|i| i + 1).unwrap_or(rest.len());
    let sec = &rest[..end];
    let code_at = sec.rfind("\n[").unwrap_or_else(|| panic!("{key}: {sec:?}"));
    (
        &sec[..code_at],
        sec[code_at + 2..].trim_end().trim_end_matches(']'),
    )
}

#[test]
fn listed_names_resolving_to_the_hosts_own_addresses_are_refused() {
    for tool in ["/usr/bin/unshare", "/usr/bin/mount", "/usr/sbin/ip"] {
        if !Path::new(tool).exists() && !Path::new(&tool.replace("/usr", "")).exists() {
            proxy_support::skip(&format!("{tool} is missing"));
            return;
        }
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let dir = shared_tempdir("capsule-proxy-own-");
    let hosts_file = dir.path().join("hosts");
    let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost\n");
    for (name, addr) in NAMES {
        hosts.push_str(&format!("{addr} {name}\n"));
    }
    std::fs::write(&hosts_file, hosts).expect("hosts");
    let mut names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    names.extend(LITERALS);

    // As root: capsule as root and, in the same namespaces, as `nobody`. Otherwise
    // in a user namespace of our own (capsule as that namespace's root).
    let as_nobody: &[bool] = if root && nobody_available() {
        &[false, true]
    } else {
        if root {
            proxy_support::skip_part("the `nobody` variant needs a `nobody` user");
        }
        &[false]
    };
    for (fallback, nobody) in [false, true]
        .into_iter()
        .flat_map(|f| as_nobody.iter().map(move |&n| (f, n)))
    {
        let mut cmd = assert_cmd::Command::new("unshare");
        cmd.env_clear().env("PATH", TEST_PATH);
        if !root {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--mount", "--net", "--", PYTHON, "-c", ORCHESTRATE_PY]);
        let bin = if nobody {
            cmd.env("CAPSULE_AS", "nobody");
            nobody_bin().to_path_buf()
        } else {
            capsule_bin()
        };
        cmd.arg(bin).arg(&hosts_file).arg(CURL).args(&names);
        if fallback {
            cmd.env("CAPSULE_NO_NAMESPACES", "1");
        }
        let out = cmd
            .timeout(std::time::Duration::from_secs(150))
            .output()
            .expect("run unshare");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() && !root && stdout.is_empty() {
            proxy_support::skip(&format!(
                "unshare --user --map-root-user --mount --net failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return;
        }
        if let Some(why) = stdout.strip_prefix("SKIP: ") {
            proxy_support::skip(why.trim());
            return;
        }
        let r: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|_| panic!("fallback={fallback} nobody={nobody}: {out:?}"));
        let path = if fallback {
            "landlock-tcp-fallback"
        } else {
            "netns"
        };
        assert_eq!(r["enforcement"]["network_path"], path, "{r}");
        let child = r["stdout"].as_str().unwrap_or("");
        for (name, addr) in NAMES {
            for method in ["get", "connect"] {
                let (body, code) = section(child, &format!("{name} {method}"));
                assert_eq!(
                    code, "403",
                    "{name} -> {addr} by {method} ({path}, nobody={nobody}): {body:?}"
                );
                // (curl shows no body for a refused CONNECT.)
                assert!(
                    method == "connect"
                        || body.contains(name) && body.contains("an address of this host"),
                    "{name} -> {addr} by {method}: the refusal must name the host and the class: {body:?}"
                );
            }
        }
        // Listed literally, the host's own addresses reach the service: it was there.
        for lit in LITERALS {
            for method in ["get", "connect"] {
                let (body, code) = section(child, &format!("{lit} {method}"));
                assert_eq!(
                    (code, body),
                    ("200", "the host's own service\n"),
                    "{lit} by {method} ({path}): {child}"
                );
            }
        }
        let denied: Vec<&str> = r["denied_hosts"]
            .as_array()
            .expect("denied_hosts")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        for (name, _) in NAMES {
            assert!(denied.contains(name), "{name} not in {denied:?}");
        }
        assert_eq!(r["usage"]["proxy"]["denied"], 2 * NAMES.len() as u64, "{r}");
        assert_eq!(
            r["usage"]["proxy"]["allowed"],
            2 * LITERALS.len() as u64,
            "{r}"
        );
    }
}

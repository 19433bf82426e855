//! DNS rebinding through the proxy (issue 11, item 4), end to end through a resolver
//! the test controls: capsule runs in a private mount namespace where /etc/hosts maps
//! test names under an allow-listed wildcard to loopback, private (RFC 1918), CGNAT,
//! unique-local, IPv4-mapped, link-local, multicast and unspecified addresses. Each
//! must be refused with a 403 naming the host and the address class, while the
//! literal `127.0.0.1` entry still reaches the origin.
//!
//! It also runs in a private network namespace holding only a loopback interface, so
//! even if the proxy wrongly connected to one of these addresses, no packet could leave
//! this machine (the connect fails with "network unreachable" inside the namespace).
//! As root and, in the same namespaces, as `nobody`, each with and without capsule's own
//! namespaces. Needs root, unshare(1), mount(8) and ip(8); skipped with a printed reason otherwise.

mod proxy_support;

use std::path::Path;

use proxy_support::{
    capsule_bin, nobody_available, nobody_bin, shared_tempdir, CURL, PYTHON, TEST_PATH,
};
use serde_json::Value;

/// name in /etc/hosts, its address, and the words the 403 must contain.
const REBOUND: &[(&str, &str, &str)] = &[
    ("loop.capsule.test", "127.0.0.1", "a loopback address"),
    ("loop2.capsule.test", "127.0.0.2", "a loopback address"),
    (
        "ten.capsule.test",
        "10.255.0.1",
        "a private (RFC 1918) address",
    ),
    (
        "one72.capsule.test",
        "172.16.9.9",
        "a private (RFC 1918) address",
    ),
    (
        "one92.capsule.test",
        "192.168.77.1",
        "a private (RFC 1918) address",
    ),
    (
        "cgnat.capsule.test",
        "100.64.3.3",
        "a carrier-grade NAT (100.64.0.0/10) address",
    ),
    (
        "ula.capsule.test",
        "fd00:abcd::1",
        "a unique-local (fc00::/7)",
    ),
    (
        "mapped.capsule.test",
        "::ffff:10.255.0.2",
        "a private (RFC 1918) address",
    ),
    ("ll.capsule.test", "169.254.7.7", "a link-local address"),
    ("mcast.capsule.test", "224.0.0.7", "a multicast address"),
    ("zero.capsule.test", "0.0.0.0", "an unspecified address"),
];

/// Inside `unshare --mount --net`: bring up loopback (and check nothing else exists),
/// bind-mount the test's hosts file over /etc/hosts, serve an origin on 127.0.0.1 and
/// run capsule with one curl per name. Prints capsule's JSON result.
const ORCHESTRATE_PY: &str = r#"
import http.server, os, subprocess, sys, threading
capsule, hosts, curl, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
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
run("mount", "--bind", hosts, "/etc/hosts")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"hello from origin\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
port = srv.server_address[1]
script = "; ".join(
    "echo '== %s'; %s -s --max-time 10 -w '\\n[%%{http_code}]\\n' http://%s:%d/" % (n, curl, n, port)
    for n in names)
who = os.environ.get("CAPSULE_AS")
prefix = ["runuser", "-u", who, "--", "env", "HOME=/tmp"] if who else []
r = subprocess.run(prefix + [capsule, "exec", "--json", "--no-audit", "--net", "proxy",
                    "--allow-host", "*.capsule.test", "--allow-host", "127.0.0.1",
                    "--allow-host", "10.255.0.1", "--", "/bin/sh", "-c", script],
                   capture_output=True, text=True, timeout=120)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
"#;

/// The section of the child's output for one name: (body, status code).
fn section<'a>(out: &'a str, name: &str) -> (&'a str, &'a str) {
    let start = out
        .find(&format!("== {name}\n"))
        .unwrap_or_else(|| panic!("no section for {name} in {out}"));
    let rest = &out[start + name.len() + 4..];
    let end = rest.find("\n== ").map(|i| i + 1).unwrap_or(rest.len());
    let sec = &rest[..end];
    let code_at = sec
        .rfind("\n[")
        .unwrap_or_else(|| panic!("{name}: {sec:?}"));
    (
        &sec[..code_at],
        sec[code_at + 2..].trim_end().trim_end_matches(']'),
    )
}

#[test]
fn allowlisted_names_resolving_to_internal_addresses_are_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        proxy_support::skip("needs root to make a private mount and network namespace");
        return;
    }
    for tool in ["/usr/bin/unshare", "/usr/bin/mount", "/usr/sbin/ip"] {
        if !Path::new(tool).exists() && !Path::new(&tool.replace("/usr", "")).exists() {
            proxy_support::skip(&format!("{tool} is missing"));
            return;
        }
    }
    let dir = shared_tempdir("capsule-proxy-rebind-");
    let hosts_file = dir.path().join("hosts");
    let mut hosts = String::from("127.0.0.1 localhost\n::1 localhost\n");
    for (name, addr, _) in REBOUND {
        hosts.push_str(&format!("{addr} {name}\n"));
    }
    std::fs::write(&hosts_file, hosts).expect("hosts");
    let mut names: Vec<&str> = REBOUND.iter().map(|(n, _, _)| *n).collect();
    names.extend(["127.0.0.1", "10.255.0.1"]);

    // As root and, inside the same namespaces, as `nobody` (the unprivileged
    // user's path: its own user namespace, or the guard without one).
    let as_nobody: &[bool] = if nobody_available() {
        &[false, true]
    } else {
        proxy_support::skip_part("the `nobody` variant needs root and a `nobody` user");
        &[false]
    };
    for (fallback, nobody) in [false, true]
        .into_iter()
        .flat_map(|f| as_nobody.iter().map(move |&n| (f, n)))
    {
        let mut cmd = assert_cmd::Command::new("unshare");
        cmd.env_clear().env("PATH", TEST_PATH);
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
        for (name, addr, class) in REBOUND {
            let (body, code) = section(child, name);
            assert_eq!(code, "403", "{name} -> {addr}: {body:?} ({path})");
            assert!(
                body.contains(name) && body.contains(class),
                "{name} -> {addr}: the refusal must name the host and {class:?}: {body:?}"
            );
        }
        // The literal entry still reaches the origin on loopback.
        let (body, code) = section(child, "127.0.0.1");
        assert_eq!((code, body), ("200", "hello from origin\n"), "{child}");
        // An internal address listed literally is allowed by the policy; inside this
        // namespace nothing routes to it, so the connect fails locally: 502, not 403.
        let (body, code) = section(child, "10.255.0.1");
        assert_eq!(code, "502", "{body:?}");
        let denied: Vec<&str> = r["denied_hosts"]
            .as_array()
            .expect("denied_hosts")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        for (name, _, _) in REBOUND {
            assert!(denied.contains(name), "{name} not in {denied:?}");
        }
        assert_eq!(r["usage"]["proxy"]["allowed"], 2, "{r}");
        assert_eq!(r["usage"]["proxy"]["denied"], REBOUND.len() as u64, "{r}");
    }
}

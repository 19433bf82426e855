//! `capsule exec --net proxy` end to end with real clients (curl, Python urllib) and
//! origin servers on the host's loopback, on both paths (own network namespace, and the
//! Landlock TCP fallback forced with CAPSULE_NO_NAMESPACES=1, and the same below Landlock
//! ABI 4, where the seccomp network guard holds), as the invoking user and as `nobody`.
//! Every case runs in all six variants.
//!
//! Loopback only. No case names a host that would need DNS: refusals of names happen
//! before any resolution, and allowed targets are `localhost` or `127.0.0.1`.

mod proxy_support;

use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use proxy_support::{cert, exec, runnable_or_skip, NetPath, Origin, Variant, Who, CURL, PYTHON};

/// One `#[test]` per variant for each case.
macro_rules! matrix {
    ($case:ident) => {
        mod $case {
            use super::*;
            #[test]
            fn invoker_netns() {
                run(Variant {
                    who: Who::Invoker,
                    path: NetPath::Netns,
                })
            }
            #[test]
            fn invoker_fallback() {
                run(Variant {
                    who: Who::Invoker,
                    path: NetPath::Fallback,
                })
            }
            #[test]
            fn nobody_netns() {
                run(Variant {
                    who: Who::Nobody,
                    path: NetPath::Netns,
                })
            }
            #[test]
            fn nobody_fallback() {
                run(Variant {
                    who: Who::Nobody,
                    path: NetPath::Fallback,
                })
            }
            #[test]
            fn invoker_guard() {
                run(Variant {
                    who: Who::Invoker,
                    path: NetPath::GuardFallback,
                })
            }
            #[test]
            fn nobody_guard() {
                run(Variant {
                    who: Who::Nobody,
                    path: NetPath::GuardFallback,
                })
            }
            fn run(v: Variant) {
                if runnable_or_skip(v) {
                    super::$case(v)
                }
            }
        }
    };
}

fn curl_code(url: &str) -> Vec<String> {
    [
        CURL,
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\\n",
        "--max-time",
        "20",
        url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A command line for `sh -c`, every word quoted.
fn sh(v: &[String]) -> String {
    v.iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Plain HTTP through the proxy to an allowed host: 200, counted as allowed.
fn curl_http_allowed(v: Variant) {
    let o = Origin::http();
    let url = format!("http://127.0.0.1:{}/plain", o.port);
    let r = exec(
        v,
        &["--net", "proxy", "--allow-host", "127.0.0.1"],
        &[CURL, "-sS", "--max-time", "20", &url],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(r.stdout(), "hello from origin /plain\n", "{}", r.describe());
    assert!(r.proxy_counter("allowed") >= 1, "{}", r.describe());
    assert_eq!(r.denied_hosts(), Vec::<String>::new());
}
matrix!(curl_http_allowed);

/// TLS through CONNECT, verified end to end against the self-signed certificate
/// (the proxy never intercepts): `localhost` listed explicitly.
fn curl_https_connect_allowed(v: Variant) {
    let o = Origin::https();
    let c = cert();
    let url = format!("https://localhost:{}/tls", o.port);
    let ca = c.cert.display().to_string();
    let dir = c.dir.display().to_string();
    let r = exec(
        v,
        &[
            "--net",
            "proxy",
            "--allow-host",
            "localhost",
            "--allow-read",
            &dir,
        ],
        &[CURL, "-sS", "--max-time", "20", "--cacert", &ca, &url],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(r.stdout(), "hello from origin /tls\n", "{}", r.describe());
    assert!(r.proxy_counter("allowed") >= 1, "{}", r.describe());
}
matrix!(curl_https_connect_allowed);

const URLLIB_PY: &str = r#"
import os, ssl, sys, urllib.request, urllib.error
plain, tls, ca, denied = sys.argv[1:5]
print(urllib.request.urlopen(plain, timeout=20).read().decode().strip())
ctx = ssl.create_default_context(cafile=ca)
print(urllib.request.urlopen(tls, timeout=20, context=ctx).read().decode().strip())
try:
    urllib.request.urlopen(denied, timeout=20)
    print("denied host reached")
except urllib.error.HTTPError as e:
    print("refused", e.code, e.read().decode(errors="replace").strip()[:200])
"#;

/// Python's urllib picks the proxy up from the environment: plain HTTP and HTTPS
/// (CONNECT) work, an unlisted host gets a 403 whose body names it.
fn python_urllib(v: Variant) {
    let plain = Origin::http();
    let tls = Origin::https();
    let c = cert();
    let dir = c.dir.display().to_string();
    let plain_url = format!("http://127.0.0.1:{}/py-plain", plain.port);
    let tls_url = format!("https://localhost:{}/py-tls", tls.port);
    // Listed by literal only: "localhost" with the plain origin's port is not.
    let denied_url = format!("http://not-listed.invalid:{}/", plain.port);
    let ca = c.cert.display().to_string();
    let r = exec(
        v,
        &[
            "--net",
            "proxy",
            "--allow-host",
            "127.0.0.1",
            "--allow-host",
            "localhost",
            "--allow-read",
            &dir,
        ],
        &[
            PYTHON,
            "-c",
            URLLIB_PY,
            &plain_url,
            &tls_url,
            &ca,
            &denied_url,
        ],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    let lines: Vec<&str> = r.stdout().lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"hello from origin /py-plain"),
        "{}",
        r.describe()
    );
    assert_eq!(
        lines.get(1),
        Some(&"hello from origin /py-tls"),
        "{}",
        r.describe()
    );
    let refused = lines.get(2).copied().unwrap_or("");
    assert!(refused.starts_with("refused 403"), "{}", r.describe());
    assert!(refused.contains("not-listed.invalid"), "{}", r.describe());
    assert_eq!(r.denied_hosts(), vec!["not-listed.invalid".to_string()]);
    assert_eq!(r.proxy_counter("denied"), 1, "{}", r.describe());
    assert!(r.proxy_counter("allowed") >= 2, "{}", r.describe());
}
matrix!(python_urllib);

/// Unlisted hosts: plain HTTP gets a 403 from the proxy, CONNECT gets a 403 (curl
/// reports the failed tunnel); both land in `denied_hosts`. `localhost` is not
/// `127.0.0.1`: literals match only themselves.
fn unlisted_hosts_are_refused(v: Variant) {
    let o = Origin::http();
    let plain = format!("http://localhost:{}/", o.port);
    let script =
        format!(
        "{} ; {} ; {} -sS --max-time 20 -o /dev/null https://blocked.invalid/ ; echo connect=$?",
        sh(&curl_code(&plain)),
        sh(&curl_code("http://metadata.google.internal/computeMetadata/v1/")),
        CURL
    );
    let r = exec(
        v,
        &["--net", "proxy", "--allow-host", "127.0.0.1"],
        &["/bin/sh", "-c", &script],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    let lines: Vec<&str> = r.stdout().lines().collect();
    assert_eq!(lines, vec!["403", "403", "connect=56"], "{}", r.describe());
    assert!(r.child_stderr().contains("403"), "{}", r.describe());
    let denied = r.denied_hosts();
    for h in ["localhost", "metadata.google.internal", "blocked.invalid"] {
        assert!(
            denied.iter().any(|d| d == h),
            "{h} not in {denied:?}: {}",
            r.describe()
        );
    }
    assert_eq!(r.proxy_counter("denied"), 3, "{}", r.describe());
    assert_eq!(r.proxy_counter("allowed"), 0, "{}", r.describe());
}
matrix!(unlisted_hosts_are_refused);

/// Bypassing the proxy does not work: `curl --noproxy '*'` to the same (allowed)
/// origin, a raw TCP connect to it from Python, and a connect to another local port
/// the test listens on all fail, and the other listener sees no connection.
fn direct_connections_fail(v: Variant) {
    let o = Origin::http();
    let other = TcpListener::bind("127.0.0.1:0").expect("bind other");
    other.set_nonblocking(true).expect("nonblocking");
    let other_port = other.local_addr().expect("addr").port();
    let url = format!("http://127.0.0.1:{}/", o.port);
    let py = format!(
        "import socket\n\
         for port in ({}, {}):\n\
         \x20   try:\n\
         \x20       socket.create_connection(('127.0.0.1', port), timeout=5); print('connected', port)\n\
         \x20   except OSError as e:\n\
         \x20       print('failed', port, type(e).__name__)\n",
        o.port, other_port
    );
    let script = format!(
        "{} --noproxy '*' ; echo curl=$? ; {PYTHON} -c {}",
        sh(&curl_code(&url)),
        shell_quote(&py)
    );
    let r = exec(
        v,
        &["--net", "proxy", "--allow-host", "127.0.0.1"],
        &["/bin/sh", "-c", &script],
    );
    r.on_path(v);
    let out = r.stdout();
    assert!(out.contains("000\ncurl=7\n"), "{}", r.describe());
    assert!(
        out.contains(&format!("failed {} ", o.port)),
        "{}",
        r.describe()
    );
    assert!(
        out.contains(&format!("failed {other_port} ")),
        "{}",
        r.describe()
    );
    assert!(!out.contains("connected"), "{}", r.describe());
    assert!(
        other.accept().is_err(),
        "the other local port saw a connection: {}",
        r.describe()
    );
    assert_eq!(r.proxy_counter("allowed"), 0, "{}", r.describe());
}
matrix!(direct_connections_fail);

const SIDE_DOORS_PY: &str = r#"
import socket, sys, threading, errno
other = int(sys.argv[1])
def attempt(what, fn):
    try:
        r = fn()
        print(what, "succeeded", r)
    except OSError as e:
        print(what, "failed", errno.errorcode.get(e.errno, e.errno))
def fastopen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    return s.sendto(b"tfo", socket.MSG_FASTOPEN, ("127.0.0.1", other))
def fastopen_msg():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    return s.sendmsg([b"tfo"], [], socket.MSG_FASTOPEN, ("127.0.0.1", other))
def autobind_listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.listen(1)
    return s.getsockname()
def mapped_v6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(("::ffff:127.0.0.1", other))
def nonblocking():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    return s.connect_ex(("127.0.0.1", other))
attempt("fastopen", fastopen)
attempt("fastopen_msg", fastopen_msg)
attempt("listen", autobind_listen)
attempt("mapped_v6", mapped_v6)
print("nonblocking", errno.errorcode.get(nonblocking(), "0"))
t = threading.Thread(target=lambda: attempt("thread", lambda: socket.create_connection(("127.0.0.1", other), timeout=5)))
t.start(); t.join()
import os, select, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
def to_proxy():
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.close()
    return "proxy"
t = threading.Thread(target=lambda: attempt("proxy_thread", to_proxy))
t.start(); t.join()
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
rc = s.connect_ex((proxy.hostname, proxy.port))
select.select([], [s], [], 5)
print("proxy_nonblocking", errno.errorcode.get(rc, "0"), s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
"#;

/// The doors beside `connect` on the host's loopback stay shut: TCP Fast Open
/// (`sendto`/`sendmsg` with MSG_FASTOPEN connects without a connect() call, which
/// Landlock's TCP rule does not see), `listen()` on an unbound socket (which binds
/// an ephemeral port on every address, without a bind() call), a v4-mapped IPv6
/// connect, a non-blocking connect and a connect from another thread. The other
/// listener sees no connection. On the netns path there is nothing beside the proxy
/// to reach (and a listener there is in the run's own namespace).
fn side_doors_stay_shut(v: Variant) {
    let other = TcpListener::bind("127.0.0.1:0").expect("bind other");
    other.set_nonblocking(true).expect("nonblocking");
    let port = other.local_addr().expect("addr").port().to_string();
    let r = exec(
        v,
        &["--net", "proxy", "--allow-host", "127.0.0.1"],
        &[PYTHON, "-c", SIDE_DOORS_PY, &port],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    let out = r.stdout();
    assert!(
        other.accept().is_err(),
        "the other local port saw a connection: {}",
        r.describe()
    );
    if v.path.on_host() {
        for line in [
            "fastopen failed EPERM",
            "fastopen_msg failed EPERM",
            "listen failed EACCES",
            "mapped_v6 failed EACCES",
            "nonblocking EACCES",
            "thread failed EACCES",
        ] {
            assert!(out.contains(line), "no {line:?}: {}", r.describe());
        }
    }
    assert!(
        out.contains("proxy_thread succeeded proxy"),
        "{}",
        r.describe()
    );
    assert!(
        out.contains("proxy_nonblocking EINPROGRESS 0\n")
            || out.contains("proxy_nonblocking 0 0\n"),
        "{}",
        r.describe()
    );
    // In its own network namespace, a listener is the run's own business.
    let own_listener = usize::from(!v.path.on_host() && out.contains("listen succeeded"));
    assert_eq!(
        out.matches("succeeded").count(),
        1 + own_listener,
        "only the proxy is reached: {}",
        r.describe()
    );
}
matrix!(side_doors_stay_shut);

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

const UDP_PY: &str = r#"
import socket, sys
port = int(sys.argv[1])
for what, fam, typ in (("udp4", socket.AF_INET, socket.SOCK_DGRAM), ("udp6", socket.AF_INET6, socket.SOCK_DGRAM)):
    try:
        s = socket.socket(fam, typ)
        s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01",
                 ("127.0.0.1", port) if fam == socket.AF_INET else ("::1", port))
        print(what, "sent")
    except OSError as e:
        print(what, "failed", e.errno)
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    print("raw opened")
except OSError as e:
    print("raw failed", e.errno)
"#;

/// UDP (and so DNS, here a DNS query to a UDP server the test runs on the host's
/// loopback) and raw sockets fail; the UDP server receives nothing. In the run's
/// own network namespace UDP sockets exist (its own loopback), and the query
/// goes to the run's 127.0.0.1, where nothing listens: the host's server still
/// receives nothing.
fn udp_and_dns_fail(v: Variant) {
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let port = udp.local_addr().expect("addr").port().to_string();
    let r = exec(
        v,
        &["--net", "proxy", "--allow-host", "127.0.0.1"],
        &[PYTHON, "-c", UDP_PY, &port],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    let out = r.stdout();
    if v.path.on_host() {
        assert!(out.contains("udp4 failed 1\n"), "{}", r.describe());
        assert!(out.contains("udp6 failed 1\n"), "{}", r.describe());
    } else {
        // The run's own loopback: sent, into the run's namespace.
        assert!(out.contains("udp4 sent\n"), "{}", r.describe());
    }
    assert!(out.contains("raw failed 1\n"), "{}", r.describe());
    let mut buf = [0u8; 512];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "the UDP server received a datagram"
    );
}
matrix!(udp_and_dns_fail);

/// Wildcards never match the apex; a port-restricted entry allows that port only.
/// (A wildcard's positive match is unit-tested: it would need DNS here.)
fn wildcard_and_port_rules(v: Variant) {
    let a = Origin::http();
    let b = Origin::http();
    let entry = format!("127.0.0.1:{}", a.port);
    let script = format!(
        "{} ; {} ; {}",
        sh(&curl_code(&format!("http://127.0.0.1:{}/", a.port))),
        sh(&curl_code(&format!("http://127.0.0.1:{}/", b.port))),
        sh(&curl_code("http://example.com/")),
    );
    let r = exec(
        v,
        &[
            "--net",
            "proxy",
            "--allow-host",
            &entry,
            "--allow-host",
            "*.example.com",
        ],
        &["/bin/sh", "-c", &script],
    );
    r.on_path(v);
    let lines: Vec<&str> = r.stdout().lines().collect();
    assert_eq!(lines, vec!["200", "403", "403"], "{}", r.describe());
    let denied = r.denied_hosts();
    assert!(
        denied.contains(&"127.0.0.1".to_string()),
        "{}",
        r.describe()
    );
    assert!(
        denied.contains(&"example.com".to_string()),
        "{}",
        r.describe()
    );
}
matrix!(wildcard_and_port_rules);

/// The child's environment names the proxy (upper- and lower-case), NO_PROXY is
/// empty.
fn proxy_environment(v: Variant) {
    let r = exec(
        v,
        &["--net", "proxy", "--allow-host", "127.0.0.1"],
        &["/usr/bin/env"],
    );
    r.on_path(v);
    assert_eq!(r.status, 0, "{}", r.describe());
    let env: Vec<(String, String)> = r
        .stdout()
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let get = |k: &str| {
        env.iter()
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    let url = get("HTTP_PROXY");
    assert_eq!(url.len(), 1, "{}", r.describe());
    assert!(url[0].starts_with("http://127.0.0.1:"), "{}", r.describe());
    for k in [
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        assert_eq!(get(k), url, "{k}: {}", r.describe());
    }
    assert_eq!(get("NO_PROXY"), vec![String::new()]);
    assert_eq!(get("no_proxy"), vec![String::new()]);
    assert_eq!(get("NODE_USE_ENV_PROXY"), vec!["1".to_string()]);
}
matrix!(proxy_environment);

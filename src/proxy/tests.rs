//! In-process tests of the running proxy with real clients (curl, Python urllib) and
//! local servers. Loopback only: every socket here is on 127.0.0.1 or ::1.

use std::convert::Infallible;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::bounds::{Limits, HEAD_TIMEOUT, MAX_HEAD};
use super::{serve, Allowlist, ProxyStats};

const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

struct Proxy {
    port: u16,
    stats: Arc<ProxyStats>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start_proxy(entries: &[&str]) -> Proxy {
    start_proxy_with(entries, 256).await
}

async fn start_proxy_with(entries: &[&str], max_connections: usize) -> Proxy {
    let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
    let allow = Arc::new(Allowlist::parse(&entries).expect("test allowlist"));
    let stats = Arc::new(ProxyStats::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let port = listener.local_addr().expect("proxy addr").port();
    let limits = Limits { max_connections };
    let task = tokio::spawn(serve(listener, allow, stats.clone(), limits));
    Proxy { port, stats, task }
}

/// What the origin saw.
#[derive(Default)]
struct OriginState {
    accepts: AtomicUsize,
    first_body_byte: Notify,
    last_headers: Mutex<Vec<(String, String)>>,
}

struct Origin {
    port: u16,
    state: Arc<OriginState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A local HTTP/1.1 origin: `/hello` answers a greeting, `/count` streams the request
/// body and answers its length.
async fn start_origin() -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
    let port = listener.local_addr().expect("origin addr").port();
    let state = Arc::new(OriginState::default());
    let st = state.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            st.accepts.fetch_add(1, Ordering::SeqCst);
            let st = st.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| origin_handle(req, st.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Origin { port, state, task }
}

async fn origin_handle(
    req: Request<Incoming>,
    st: Arc<OriginState>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    *st.last_headers.lock().expect("lock") = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_string()))
        .collect();
    let path = req.uri().to_string();
    let body = if path.starts_with("/count") {
        let mut body = req.into_body();
        let mut n: u64 = 0;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Some(d) = frame.data_ref() {
                if n == 0 && !d.is_empty() {
                    st.first_body_byte.notify_one();
                }
                n += d.len() as u64;
            }
        }
        format!("received {n}")
    } else {
        format!("hello from origin, target {path}")
    };
    Ok(Response::new(Full::new(Bytes::from(body))))
}

fn origin_saw(o: &Origin, name: &str) -> Option<String> {
    o.state
        .last_headers
        .lock()
        .expect("lock")
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// A raw TCP echo server (stands in for a TLS server: the proxy must not care).
async fn start_echo() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
    let port = listener.local_addr().expect("echo addr").port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (port, task)
}

/// A port on loopback with nothing listening.
async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    l.local_addr().expect("addr").port()
}

async fn run(cmd: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = tokio::process::Command::new(cmd);
    c.args(args).kill_on_drop(true);
    for v in PROXY_VARS {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    tokio::time::timeout(Duration::from_secs(60), c.output())
        .await
        .expect("client finished in time")
        .expect("client ran")
}

async fn curl(args: &[&str]) -> Output {
    let mut all = vec!["-sS", "--max-time", "30"];
    all.extend_from_slice(args);
    run("curl", &all, &[]).await
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn curl_plain_http_to_allowed_host() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["localhost"]).await;
    let url = format!("http://localhost:{}/hello?x=1", origin.port);
    let out = curl(&["-x", &proxy.url(), "-w", "\n%{http_code}", &url]).await;
    let text = stdout(&out);
    assert!(
        text.contains("hello from origin, target /hello?x=1"),
        "{text}"
    );
    assert!(text.ends_with("\n200"), "{text}");
    // Origin-form upstream, Host from the URI, hop-by-hop removed, Via added.
    assert_eq!(
        origin_saw(&origin, "host"),
        Some(format!("localhost:{}", origin.port))
    );
    assert_eq!(origin_saw(&origin, "proxy-connection"), None);
    assert_eq!(origin_saw(&origin, "via"), Some("1.1 capsule".into()));
    let r = proxy.stats.snapshot();
    assert_eq!((r.allowed, r.denied), (1, 0));
}

#[tokio::test]
async fn unlisted_host_gets_403_naming_host_and_key() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["pypi.example.invalid"]).await;
    let url = format!("http://localhost:{}/hello", origin.port);
    let out = curl(&["-x", &proxy.url(), "-w", "\n%{http_code}", &url]).await;
    let text = stdout(&out);
    assert!(text.ends_with("\n403"), "{text}");
    assert!(
        text.contains("localhost") && text.contains("network.allow_hosts"),
        "{text}"
    );
    assert_eq!(origin.state.accepts.load(Ordering::SeqCst), 0);
    // The same through a CONNECT tunnel.
    let out = curl(&["-p", "-x", &proxy.url(), &url]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("403"),
        "{out:?}"
    );
    let r = proxy.stats.snapshot();
    assert_eq!((r.allowed, r.denied), (0, 2));
    assert_eq!(r.denied_hosts, vec!["localhost".to_string()]);
}

#[tokio::test]
async fn another_local_port_is_refused() {
    let origin = start_origin().await;
    let (echo_port, _echo) = start_echo().await;
    let proxy = start_proxy(&[&format!("localhost:{}", origin.port)]).await;
    let ok = curl(&[
        "-x",
        &proxy.url(),
        &format!("http://localhost:{}/hello", origin.port),
    ])
    .await;
    assert!(stdout(&ok).contains("hello from origin"), "{ok:?}");
    let out = curl(&[
        "-x",
        &proxy.url(),
        "-w",
        "\n%{http_code}",
        &format!("http://localhost:{echo_port}/"),
    ])
    .await;
    assert!(stdout(&out).ends_with("\n403"), "{out:?}");
}

#[tokio::test]
async fn loopback_literal_only_when_listed_literally() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["127.0.0.1"]).await;
    let lit = curl(&[
        "-x",
        &proxy.url(),
        &format!("http://127.0.0.1:{}/hello", origin.port),
    ])
    .await;
    assert!(stdout(&lit).contains("hello from origin"), "{lit:?}");
    let name = curl(&[
        "-x",
        &proxy.url(),
        "-w",
        "\n%{http_code}",
        &format!("http://localhost:{}/hello", origin.port),
    ])
    .await;
    assert!(stdout(&name).ends_with("\n403"), "{name:?}");
}

#[tokio::test]
async fn curl_connect_tunnel_to_allowed_host() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["localhost"]).await;
    let url = format!("http://localhost:{}/hello", origin.port);
    let out = curl(&["-p", "-x", &proxy.url(), &url]).await;
    let text = stdout(&out);
    assert!(text.contains("hello from origin, target /hello"), "{out:?}");
    // Through a tunnel the proxy does not touch the request: no Via header.
    assert_eq!(origin_saw(&origin, "via"), None);
    assert_eq!(proxy.stats.snapshot().allowed, 1);
}

/// Open a CONNECT tunnel by hand and return the stream after the 200.
async fn raw_connect(proxy: &Proxy, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .expect("connect proxy");
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(head.as_bytes()).await.expect("write head");
    let mut resp = Vec::new();
    let mut byte = [0u8; 1];
    while !resp.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).await.expect("read head");
        if n == 0 {
            break;
        }
        resp.push(byte[0]);
    }
    (s, String::from_utf8_lossy(&resp).into_owned())
}

#[tokio::test]
async fn connect_tunnel_relays_opaque_bytes_both_ways() {
    let (echo_port, _echo) = start_echo().await;
    let proxy = start_proxy(&["localhost"]).await;
    let (s, head) = raw_connect(&proxy, &format!("localhost:{echo_port}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (mut r, mut w) = s.into_split();
    // A TLS ClientHello-like prefix, then 4 MiB of patterned binary data.
    let mut data = vec![0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc];
    data.extend((0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8));
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.expect("write");
        w.shutdown().await.expect("shutdown");
    });
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), r.read_to_end(&mut got))
        .await
        .expect("echo in time")
        .expect("read");
    writer.await.expect("writer");
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "tunnelled bytes differ");
}

#[tokio::test]
async fn connect_to_dead_port_of_allowed_host_is_502_sanitized() {
    let port = closed_port().await;
    let proxy = start_proxy(&["localhost"]).await;
    let (mut s, head) = raw_connect(&proxy, &format!("localhost:{port}")).await;
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    let mut body = vec![0u8; 512];
    let n = s.read(&mut body).await.expect("read body");
    let body = String::from_utf8_lossy(&body[..n]);
    assert!(body.contains(&format!("localhost:{port}")), "{body}");
    assert!(!body.to_lowercase().contains("os error"), "{body}");
    assert!(
        !body.contains("127.0.0.1"),
        "leaks the resolved address: {body}"
    );
    // Plain HTTP too.
    let out = curl(&[
        "-x",
        &proxy.url(),
        "-w",
        "\n%{http_code}",
        &format!("http://localhost:{port}/"),
    ])
    .await;
    assert!(stdout(&out).ends_with("\n502"), "{out:?}");
}

#[tokio::test]
async fn python_urllib_with_proxy_env() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["localhost"]).await;
    let script = "import os, urllib.request, sys\n\
        print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())\n\
        try:\n    urllib.request.urlopen(sys.argv[2], timeout=30)\n\
        except urllib.error.HTTPError as e:\n    print('refused', e.code, e.read().decode())\n";
    let ok = format!("http://localhost:{}/hello", origin.port);
    let denied = format!("http://127.0.0.1:{}/hello", origin.port);
    let purl = proxy.url();
    let out = run(
        "python3",
        &["-c", script, &ok, &denied],
        &[
            ("HTTP_PROXY", &purl),
            ("http_proxy", &purl),
            ("NO_PROXY", ""),
        ],
    )
    .await;
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("hello from origin"), "{text}");
    assert!(
        text.contains("refused 403") && text.contains("network.allow_hosts"),
        "{text}"
    );
}

#[tokio::test]
async fn chunked_upload_of_several_mib() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["localhost"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("upload.bin");
    std::fs::write(&file, vec![7u8; 8 * 1024 * 1024]).expect("write upload");
    let data = format!("@{}", file.display());
    let url = format!("http://localhost:{}/count", origin.port);
    let out = curl(&[
        "-x",
        &proxy.url(),
        "-H",
        "Transfer-Encoding: chunked",
        "--data-binary",
        &data,
        &url,
    ])
    .await;
    assert_eq!(
        stdout(&out),
        format!("received {}", 8 * 1024 * 1024),
        "{out:?}"
    );
}

/// The body reaches the origin before the client has finished sending it: the
/// proxy streams, it does not buffer the whole upload.
#[tokio::test]
async fn upload_is_streamed_not_buffered() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["localhost"]).await;
    let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .expect("connect");
    let head = format!(
        "POST http://localhost:{0}/count HTTP/1.1\r\nHost: localhost:{0}\r\nTransfer-Encoding: chunked\r\n\r\n",
        origin.port
    );
    s.write_all(head.as_bytes()).await.expect("head");
    let chunk = vec![b'a'; 64 * 1024];
    s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
        .await
        .expect("size");
    s.write_all(&chunk).await.expect("chunk");
    s.write_all(b"\r\n").await.expect("crlf");
    tokio::time::timeout(
        Duration::from_secs(10),
        origin.state.first_body_byte.notified(),
    )
    .await
    .expect("origin received the first chunk while the upload was still open");
    s.write_all(b"0\r\n\r\n").await.expect("last chunk");
    let mut resp = vec![0u8; 4096];
    let mut got = String::new();
    while !got.contains("received 65536") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut resp))
            .await
            .expect("response in time")
            .expect("read");
        assert!(n > 0, "connection closed early: {got}");
        got.push_str(&String::from_utf8_lossy(&resp[..n]));
    }
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test]
async fn keep_alive_two_requests_one_connection() {
    let origin = start_origin().await;
    let proxy = start_proxy(&["localhost"]).await;
    let a = format!("http://localhost:{}/hello/a", origin.port);
    let b = format!("http://localhost:{}/hello/b", origin.port);
    let out = curl(&[
        "-x",
        &proxy.url(),
        "-w",
        "\nconnects=%{num_connects}\n",
        &a,
        &b,
    ])
    .await;
    let text = stdout(&out);
    assert!(
        text.contains("target /hello/a") && text.contains("target /hello/b"),
        "{text}"
    );
    assert!(
        text.contains("connects=1") && text.contains("connects=0"),
        "{text}"
    );
    // The proxy reused its upstream connection too.
    assert_eq!(origin.state.accepts.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.stats.snapshot().allowed, 2);
}

#[tokio::test]
async fn origin_form_request_is_400() {
    let proxy = start_proxy(&["localhost"]).await;
    let out = curl(&["-w", "\n%{http_code}", &format!("{}/hello", proxy.url())]).await;
    assert!(stdout(&out).ends_with("\n400"), "{out:?}");
    let out = curl(&[
        "-x",
        &proxy.url(),
        "-w",
        "\n%{http_code}",
        "-H",
        &format!("X-Big: {}", "a".repeat(70_000)),
        "http://localhost:1/",
    ])
    .await;
    assert!(
        stdout(&out).ends_with("\n431"),
        "oversized head must be refused: {out:?}"
    );
}

#[tokio::test]
async fn https_through_connect_with_real_tls() {
    if std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_err()
    {
        eprintln!("skipping: openssl not installed (needed to make a self-signed cert)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("key.pem");
    let cert = dir.path().join("cert.pem");
    let (key_s, cert_s) = (key.to_string_lossy(), cert.to_string_lossy());
    let gen = run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            &key_s,
            "-out",
            &cert_s,
        ],
        &[],
    )
    .await;
    assert!(gen.status.success(), "{gen:?}");
    // A Python HTTPS server on loopback; it prints its port.
    let server = "import http.server, ssl, sys\n\
        class H(http.server.BaseHTTPRequestHandler):\n\
        \x20   def do_GET(self):\n\
        \x20       b = b'hello over tls'\n\
        \x20       self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)\n\
        \x20   def log_message(self, *a): pass\n\
        s = http.server.HTTPServer(('127.0.0.1', 0), H)\n\
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])\n\
        s.socket = ctx.wrap_socket(s.socket, server_side=True)\n\
        print(s.server_address[1], flush=True)\n\
        s.serve_forever()\n";
    let mut child = tokio::process::Command::new("python3")
        .args(["-c", server, &cert_s, &key_s])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start python tls server");
    let mut out = child.stdout.take().expect("stdout");
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), out.read(&mut b))
            .await
            .expect("server port in time")
            .expect("read port");
        assert!(n > 0, "tls server exited");
        line.push(b[0]);
    }
    let port = String::from_utf8_lossy(&line).trim().to_string();
    let proxy = start_proxy(&["localhost"]).await;
    let url = format!("https://localhost:{port}/");
    let c = curl(&["--cacert", &cert_s, "-x", &proxy.url(), &url]).await;
    assert_eq!(stdout(&c), "hello over tls", "{c:?}");
    let script = "import ssl, sys, urllib.request\n\
        ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
        print(urllib.request.urlopen(sys.argv[1], context=ctx, timeout=30).read().decode())\n";
    let purl = proxy.url();
    let py = run(
        "python3",
        &["-c", script, &url, &cert_s],
        &[
            ("HTTPS_PROXY", &purl),
            ("https_proxy", &purl),
            ("NO_PROXY", ""),
        ],
    )
    .await;
    assert!(stdout(&py).contains("hello over tls"), "{py:?}");
    assert_eq!(proxy.stats.snapshot().allowed, 2);
    let _ = child.kill().await;
}

/// Many tunnels at once on the current-thread runtime, each moving 1 MiB, no errors.
/// (scripts/bench-proxy runs the full 500 against a release build.)
#[tokio::test]
async fn concurrent_tunnels_all_complete() {
    const TUNNELS: usize = 100;
    const BYTES: usize = 1024 * 1024;
    let (echo_port, _echo) = start_echo().await;
    let proxy = Arc::new(start_proxy(&["localhost"]).await);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..TUNNELS {
        let proxy = proxy.clone();
        set.spawn(async move {
            let (s, head) = raw_connect(&proxy, &format!("localhost:{echo_port}")).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let (mut r, mut w) = s.into_split();
            let data: Vec<u8> = (0..BYTES).map(|j| ((i + j) % 256) as u8).collect();
            let expect = data.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&data).await.expect("write");
                w.shutdown().await.expect("shutdown");
            });
            let mut got = Vec::with_capacity(BYTES);
            r.read_to_end(&mut got).await.expect("read");
            writer.await.expect("writer");
            assert!(got == expect, "tunnel {i} corrupted");
        });
    }
    let all = async {
        while let Some(r) = set.join_next().await {
            r.expect("tunnel task");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("all tunnels in time");
    assert_eq!(proxy.stats.snapshot().allowed, TUNNELS as u64);
}

/// Read until end-of-file (or a reset), at most `limit`; what arrived first.
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Result<Vec<u8>, &'static str> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    match tokio::time::timeout(limit, read).await {
        Ok(()) => Ok(got),
        Err(_) => Err("still open"),
    }
}

/// Past `max_connections` a new connection gets a 503 naming the key and is closed,
/// counted; a freed slot is usable again.
#[tokio::test]
async fn connections_past_the_cap_get_503_and_are_counted() {
    const MAX: usize = 4;
    let proxy = start_proxy_with(&["localhost"], MAX).await;
    let mut held = Vec::new();
    for _ in 0..MAX {
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
            .await
            .expect("connect");
        s.write_all(b"GET http://localhost/ HTTP/1.1\r\nX-Unfinished: ")
            .await
            .expect("write");
        held.push(s);
    }
    // Let the proxy accept them all before the next one.
    for _ in 0..100 {
        if proxy.stats.snapshot().peak_connections == MAX as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(proxy.stats.snapshot().peak_connections, MAX as u64);
    for _ in 0..3 {
        let mut extra = TcpStream::connect(("127.0.0.1", proxy.port))
            .await
            .expect("connect");
        let got = read_until_closed(&mut extra, Duration::from_secs(5))
            .await
            .expect("refused and closed at once");
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(text.contains("network.max_connections"), "{text}");
    }
    let r = proxy.stats.snapshot();
    assert_eq!(r.refused_at_capacity, 3);
    assert_eq!(r.peak_connections, MAX as u64);
    // The held connections were not disturbed, and a freed slot serves again.
    drop(held.pop());
    let mut served = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (_s, head) = raw_connect(&proxy, "blocked.example:443").await;
        if head.starts_with("HTTP/1.1 403") {
            served = true;
            break;
        }
        assert!(
            head.starts_with("HTTP/1.1 503") || head.is_empty(),
            "{head}"
        );
    }
    assert!(served, "a freed slot was never reused");
    assert_eq!(proxy.stats.snapshot().peak_connections, MAX as u64);
}

/// A request head that never completes is closed at the head deadline (slowloris:
/// trickling bytes does not extend it), and counted.
#[tokio::test]
async fn unfinished_head_is_closed_at_the_deadline() {
    let proxy = start_proxy(&["localhost"]).await;
    let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .expect("connect");
    let start = std::time::Instant::now();
    s.write_all(b"GET http://localhost/ HTTP/1.1\r\n")
        .await
        .expect("write");
    // Trickle a header byte every 500 ms, as a slowloris client does.
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if s.write_all(b"X").await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(HEAD_TIMEOUT + Duration::from_secs(5), trickle).await;
    let waited = start.elapsed();
    assert!(
        waited >= HEAD_TIMEOUT - Duration::from_millis(100)
            && waited < HEAD_TIMEOUT + Duration::from_secs(4),
        "closed after {waited:?}"
    );
    assert_eq!(proxy.stats.snapshot().head_timeouts, 1);
}

/// A head larger than the bound is refused and the connection closed at once.
#[tokio::test]
async fn oversized_head_is_closed() {
    let proxy = start_proxy(&["localhost"]).await;
    let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .expect("connect");
    let mut head = b"GET http://localhost/ HTTP/1.1\r\nX-Big: ".to_vec();
    head.resize(MAX_HEAD + 8192, b'a');
    // The proxy may close before reading everything: a write error is fine.
    let _ = s.write_all(&head).await;
    let got = read_until_closed(&mut s, Duration::from_secs(5))
        .await
        .expect("closed at once");
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 431"),
        "{text}"
    );
    assert_eq!(proxy.stats.snapshot().heads_too_large, 1);
}

//! The engine in process, with real TLS both ways: a local HTTPS origin (a test CA
//! made here, given as `upstream_ca`), the proxy serving with an `Egress`, and a
//! client that CONNECTs and trusts the run's CA. Loopback only.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{placeholder, BoundCredential, Egress, Engine, HostRule, Inject, RunCa, Secret};
use crate::proxy::bounds::Limits;
use crate::proxy::stats::RefusalKind;
use crate::proxy::{serve_with_egress, Allowlist, ProxyStats};

const VALUE: &str = "s3cr3t-token-value-123";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What the origin saw last: the request target and headers.
type Seen = Arc<Mutex<Vec<String>>>;

struct Origin {
    port: u16,
    ca_pem: String,
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTPS origin on 127.0.0.1 for `localhost` and `127.0.0.1`, with a certificate
/// from a test CA; it answers with the Authorization it got, in a header and the body
/// (an echoing server: what the scrubber is for).
async fn start_origin() -> Origin {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("leaf key");
    let params =
        CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).expect("leaf params");
    let leaf = params.signed_by(&key, &issuer).expect("leaf");
    let chain = vec![leaf.der().clone(), ca_cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
    let port = listener.local_addr().expect("addr").port();
    let seen: Seen = Arc::default();
    let st = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, st) = (acceptor.clone(), st.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |req| echo(req, st.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Origin {
        port,
        ca_pem: ca_cert.pem(),
        seen,
        task,
    }
}

async fn echo(req: Request<Incoming>, seen: Seen) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut lines = vec![req.uri().to_string()];
    for (k, v) in req.headers() {
        lines.push(format!("{k}: {}", String::from_utf8_lossy(v.as_bytes())));
    }
    *seen.lock().expect("lock") = lines;
    let auth = req
        .headers()
        .get("authorization")
        .cloned()
        .unwrap_or(hyper::header::HeaderValue::from_static("none"));
    let body = format!("you sent: {}", String::from_utf8_lossy(auth.as_bytes()));
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut().insert("x-echo-auth", auth);
    Ok(resp)
}

struct Proxy {
    port: u16,
    stats: Arc<ProxyStats>,
    run_ca: CertificateDer<'static>,
    placeholder: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `localhost` (a map entry: GET/POST under /api/, at most 5 requests) carries the
/// credential `github`; `127.0.0.1` is a map entry with no rules.
async fn start_proxy(upstream_ca: Option<&str>) -> Proxy {
    let ph = placeholder();
    let rule = |index, host: &str| HostRule {
        index,
        host: host.into(),
        methods: None,
        paths: None,
        max_requests: None,
        max_upload_bytes: None,
        git: None,
    };
    let mut local = rule(0, "localhost");
    local.methods = Some(vec!["GET".into(), "POST".into()]);
    local.paths = Some(vec!["/api/**".into()]);
    local.max_requests = Some(5);
    let egress = Egress {
        rules: vec![local, rule(1, "127.0.0.1")],
        credentials: vec![BoundCredential {
            name: "github".into(),
            value: Secret::new(VALUE),
            placeholder: ph.clone(),
            hosts: vec!["localhost".into()],
            methods: None,
            paths: None,
            inject: Inject::Header {
                name: "Authorization".into(),
                format: "Bearer {}".into(),
            },
            allow_plaintext: false,
        }],
        upstream_extra_ca_pem: upstream_ca.map(|p| p.as_bytes().to_vec()),
        ca: RunCa::new().expect("run ca"),
    };
    let run_ca = egress.ca.cert_der().clone();
    let engine = Arc::new(Engine::new(Arc::new(egress)).expect("engine"));
    let allow = Arc::new(
        Allowlist::parse(&["localhost".to_string(), "127.0.0.1".to_string()]).expect("allow"),
    );
    let stats = Arc::new(ProxyStats::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
    let port = listener.local_addr().expect("addr").port();
    let limits = Limits {
        max_connections: 64,
    };
    let task = tokio::spawn(serve_with_egress(
        listener,
        allow,
        stats.clone(),
        limits,
        Some(engine),
    ));
    Proxy {
        port,
        stats,
        run_ca,
        placeholder: ph,
        task,
    }
}

/// CONNECT through the proxy; returns the tunnel after a 200.
async fn connect(proxy: &Proxy, target: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .expect("connect proxy");
    let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.expect("read head");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

/// TLS over the tunnel, trusting only the run's CA.
async fn tls(
    proxy: &Proxy,
    tunnel: TcpStream,
    name: &str,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(proxy.run_ca.clone()).expect("add run ca");
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let name = ServerName::try_from(name.to_string()).expect("server name");
    TlsConnector::from(Arc::new(config))
        .connect(name, tunnel)
        .await
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// An HTTP/1.1 client over a CONNECT to `target`, TLS with SNI `target`'s host.
async fn client(proxy: &Proxy, target: &str) -> Sender {
    let tunnel = connect(proxy, target).await;
    let host = target.rsplit_once(':').expect("host:port").0;
    let stream = tls(proxy, tunnel, host, &[b"http/1.1"]).await.expect("tls");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("http handshake");
    tokio::spawn(conn);
    sender
}

async fn send(
    s: &mut Sender,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, hyper::HeaderMap, String) {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = s
        .send_request(b.body(Empty::new()).expect("request"))
        .await
        .expect("response");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn credential_reaches_its_host_and_is_scrubbed_from_the_response() {
    let origin = start_origin().await;
    let proxy = start_proxy(Some(&origin.ca_pem)).await;
    let host = format!("localhost:{}", origin.port);
    let mut c = client(&proxy, &host).await;
    let bearer = format!("Bearer {}", proxy.placeholder);
    let (status, headers, body) = send(
        &mut c,
        "GET",
        &host,
        "/api/%7Erepo?x=1",
        &[("authorization", &bearer), ("connection", "authorization")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seen = origin.seen.lock().expect("lock").join("\n");
    assert!(
        seen.contains(&format!("authorization: Bearer {VALUE}")),
        "{seen}"
    );
    assert!(!seen.contains(&proxy.placeholder), "{seen}");
    // The echo comes back with the placeholder, never the value.
    assert_eq!(headers["x-echo-auth"], bearer.as_str());
    assert_eq!(body, format!("you sent: {bearer}"));
    assert!(!body.contains(VALUE));
    // Injected even when the client sent nothing, on the same connection.
    let (status, _, body) = send(&mut c, "POST", &host, "/api/x", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, format!("you sent: {bearer}"));
    let report = proxy.stats.snapshot();
    assert_eq!(report.credentials_used.len(), 1);
    assert_eq!(report.credentials_used[0].requests, 2);
    assert_eq!(report.hosts[0].host, "localhost");
    assert_eq!(report.hosts[0].requests, 2);
    assert!(report.hosts[0].bytes_down > 0);
    let json = serde_json::to_string(&report).expect("json");
    assert!(!json.contains(VALUE));
}

#[tokio::test]
async fn placeholder_to_another_host_is_refused_as_misuse() {
    let origin = start_origin().await;
    let proxy = start_proxy(Some(&origin.ca_pem)).await;
    let host = format!("127.0.0.1:{}", origin.port);
    let tunnel = connect(&proxy, &host).await;
    // An IP literal: no SNI, the leaf names the IP.
    let stream = tls(&proxy, tunnel, "127.0.0.1", &[b"http/1.1"])
        .await
        .expect("tls");
    let (mut c, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let q = format!("/steal?t={}", proxy.placeholder);
    let (status, headers, body) = send(&mut c, "GET", &host, &q, &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(headers["x-capsule-refused"], "credentials[github]");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json body");
    assert_eq!(v["capsule"], "refused");
    assert_eq!(v["rule"], "credentials[github]");
    assert_eq!(v["host"], "127.0.0.1");
    assert!(v["hint"]
        .as_str()
        .expect("hint")
        .contains("credentials[github].hosts"));
    assert!(
        origin.seen.lock().expect("lock").is_empty(),
        "never forwarded"
    );
    // Without the placeholder the same host is fine (a map entry with no rules).
    let (status, _, body) = send(&mut c, "GET", &host, "/fine", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "you sent: none");
    let r = proxy.stats.snapshot();
    assert_eq!(r.refusals.len(), 1);
    assert_eq!(r.refusals[0].kind, RefusalKind::CredentialMisuse);
    assert_eq!(r.refusals[0].rule, "credentials[github]");
}

#[tokio::test]
async fn method_path_and_ambiguous_paths_are_refused_with_json() {
    let origin = start_origin().await;
    let proxy = start_proxy(Some(&origin.ca_pem)).await;
    let host = format!("localhost:{}", origin.port);
    let mut c = client(&proxy, &host).await;
    let cases = [
        (
            "DELETE",
            "/api/x",
            "add DELETE to network.allow_hosts[0].methods",
        ),
        ("GET", "/other", "network.allow_hosts[0].paths"),
        ("GET", "/api/%2e%2e/other", "'..'"),
        ("GET", "/api//x", "empty segment"),
        ("GET", "/api/a%2Fb", "encoded '/'"),
        ("GET", "/api/x;a=b", "parameters"),
    ];
    for (method, path, hint) in cases {
        let (status, headers, body) = send(&mut c, method, &host, path, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert_eq!(headers["x-capsule-refused"], "network.allow_hosts[0]");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json body");
        assert_eq!(v["method"], method);
        assert_eq!(v["host"], "localhost");
        let got = v["hint"].as_str().expect("hint");
        assert!(got.contains(hint), "{method} {path}: {got}");
    }
    assert!(origin.seen.lock().expect("lock").is_empty());
    // A Host other than the CONNECT target.
    let (status, _, _) = send(&mut c, "GET", "example.com", "/api/x", &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The budget: 5 requests; every refusal above did not count.
    for _ in 0..5 {
        assert_eq!(
            send(&mut c, "GET", &host, "/api/x", &[]).await.0,
            StatusCode::OK
        );
    }
    let (status, headers, _) = send(&mut c, "GET", &host, "/api/x", &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["x-capsule-refused"], "network.allow_hosts[0]");
    let r = proxy.stats.snapshot();
    assert_eq!(
        r.refusals.last().expect("refusal").kind,
        RefusalKind::Budget
    );
}

#[tokio::test]
async fn sni_mismatch_and_h2_only_fail_the_handshake() {
    let origin = start_origin().await;
    let proxy = start_proxy(Some(&origin.ca_pem)).await;
    let host = format!("localhost:{}", origin.port);
    let tunnel = connect(&proxy, &host).await;
    let e = tls(&proxy, tunnel, "evil.example", &[b"http/1.1"]).await;
    assert!(e.is_err(), "SNI naming another host must fail");
    let tunnel = connect(&proxy, &host).await;
    let e = tls(&proxy, tunnel, "localhost", &[b"h2"]).await;
    let msg = format!("{:?}", e.expect_err("h2-only must fail"));
    assert!(msg.contains("NoApplicationProtocol"), "{msg}");
    // No ALPN at all is fine (HTTP/1.1 by default).
    let tunnel = connect(&proxy, &host).await;
    assert!(tls(&proxy, tunnel, "localhost", &[]).await.is_ok());
}

#[tokio::test]
async fn untrusted_upstream_is_a_502_naming_the_reason() {
    let origin = start_origin().await;
    let proxy = start_proxy(None).await;
    let host = format!("localhost:{}", origin.port);
    let mut c = client(&proxy, &host).await;
    let (status, _, body) = send(&mut c, "GET", &host, "/api/x", &[]).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(body.contains("localhost"), "{body}");
    assert!(body.contains("certificate not trusted"), "{body}");
    assert!(origin.seen.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn plain_http_credential_needs_allow_plaintext() {
    let proxy = start_proxy(None).await;
    let mut s = TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .expect("connect");
    let req = format!(
        "GET http://localhost:9/api/x HTTP/1.1\r\nHost: localhost:9\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
        proxy.placeholder
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.expect("read");
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("allow_plaintext"), "{resp}");
    assert!(resp
        .to_ascii_lowercase()
        .contains("x-capsule-refused: credentials[github]"));
    assert_eq!(
        proxy.stats.snapshot().refusals[0].kind,
        RefusalKind::CredentialMisuse
    );
}

#[test]
fn secret_never_prints() {
    let s = Secret::new("hunter2");
    assert_eq!(format!("{s:?}"), "[secret]");
    let p = placeholder();
    assert!(
        p.starts_with("capsule-phantom-") && p.len() == 16 + 32,
        "{p}"
    );
    assert_ne!(p, placeholder());
    let ca = RunCa::new().expect("ca");
    assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    assert_eq!(format!("{ca:?}"), "RunCa { .. }");
}

/// Raw bytes over TLS to the terminated host: what hyper would pass but an origin
/// might read differently is a 400, and never reaches the origin.
#[tokio::test]
async fn smuggling_shapes_are_refused() {
    let origin = start_origin().await;
    let proxy = start_proxy(Some(&origin.ca_pem)).await;
    let host = format!("localhost:{}", origin.port);
    // (Two equal Content-Lengths hyper folds into one: the origin sees one, which is
    // unambiguous.)
    let heads = [
        "POST /api/x HTTP/1.1\r\nHost: HOST\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "GET /api/x HTTP/1.1\r\nHost: HOST\r\nHost: evil.example\r\n\r\n",
    ];
    for head in heads {
        let tunnel = connect(&proxy, &host).await;
        let mut s = tls(&proxy, tunnel, "localhost", &[b"http/1.1"])
            .await
            .expect("tls");
        s.write_all(head.replace("HOST", &host).as_bytes())
            .await
            .expect("write");
        let mut buf = vec![0u8; 12];
        s.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"HTTP/1.1 400", "{head:?}");
    }
    assert!(origin.seen.lock().expect("lock").is_empty());
    // Content-Length with Transfer-Encoding: hyper drops the Content-Length as RFC
    // 9112 6.3 says (before the engine sees the head) and the proxy re-frames the
    // body, so the origin gets one framing only.
    let tunnel = connect(&proxy, &host).await;
    let mut s = tls(&proxy, tunnel, "localhost", &[b"http/1.1"])
        .await
        .expect("tls");
    let head = format!("POST /api/x HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    s.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 12];
    s.read_exact(&mut buf).await.expect("read");
    assert_eq!(&buf, b"HTTP/1.1 200");
    let seen = origin.seen.lock().expect("lock").join("\n");
    let framings = ["content-length:", "transfer-encoding:"].map(|h| seen.contains(h));
    assert_ne!(framings, [true, true], "{seen}");
}

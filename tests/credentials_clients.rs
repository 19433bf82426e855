//! Issue 38 end to end: real clients inside `capsule exec --net proxy` reach
//! real servers (tests/egress_support: an HTTPS echo, git http-backend,
//! pypiserver, verdaccio; each behind TLS from a test CA, each requiring the
//! token) with the credential injected by capsule's proxy. capsule's own
//! environment holds the real token; the run sees only the placeholder
//! (`capsule-phantom-...`) and trusts capsule's CA through the variables
//! capsule sets (no test configures the clients' TLS, none disables it).
//! Every run: the token in no byte capsule wrote (stdout with the --json
//! result, stderr, the --audit-log record). Each case runs on capsule's
//! default path and with CAPSULE_NO_NAMESPACES=1; scripts/test runs the
//! suite as root and as an unprivileged user. tests/credentials_servers.rs
//! checks the same clients against the same servers without capsule.
//! Loopback only.

mod egress_support;

use std::path::Path;

use egress_support::clients;
use egress_support::run::{
    credential, exec, inject_basic, policy, q, CapsuleRun, NetPath, INJECT_BEARER,
};
use egress_support::{
    fresh_token, tempdir, undici_dir, Echo, GitServer, NpmRegistry, PypiServer, TEST_PATH,
};

/// One `#[test]` per network path for each case.
macro_rules! both_paths {
    ($case:ident) => {
        mod $case {
            #[test]
            fn default_path() {
                super::$case(super::NetPath::Default)
            }
            #[test]
            fn no_namespaces() {
                super::$case(super::NetPath::NoNamespaces)
            }
        }
    };
}

/// The run's environment: HOME and caches in WORK, a plain PATH.
fn run_env(work: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("PATH", TEST_PATH.to_string()),
        ("HOME", work.join("home").display().to_string()),
        (
            "npm_config_cache",
            work.join("npm-cache").display().to_string(),
        ),
        ("npm_config_update_notifier", "false".to_string()),
    ]
}

/// The map entry that terminates `localhost:PORT` (rules: any).
fn map_host(port: u16) -> String {
    format!("    - host: {}\n", q(&format!("localhost:{port}")))
}

/// `printf 'VAR=%s\n' "$VAR"`: the run shows what it holds.
fn show(var: &str) -> String {
    format!("printf '{var}=%s\\n' \"${var}\"\n")
}

/// The echo's JSON answers in the run's output, in order.
fn answers(r: &CapsuleRun) -> Vec<serde_json::Value> {
    r.child_stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("auth").is_some())
        .collect()
}

/// curl with nothing (injected) and with the placeholder (replaced) to the
/// credential's host; with the placeholder to a SPLICED host (a plain
/// allow_hosts string, its own CA given to curl): it arrives as the
/// placeholder, never as the value.
fn curl_to_echo(net: NetPath) {
    let token = fresh_token("ghp_");
    let Some(echo) = Echo::start(&token) else {
        return;
    };
    let Some(spliced) = Echo::start(&token) else {
        return;
    };
    let work = tempdir("capsule-cred-work-");
    let w = work.path();
    let host = format!("localhost:{}", echo.port);
    let hosts = format!(
        "{}    - {}\n",
        map_host(echo.port),
        q(&format!("localhost:{}", spliced.port))
    );
    let cred = credential(
        "echo",
        "CAPSULE_TEST_ECHO_TOKEN",
        &[host],
        INJECT_BEARER,
        "ECHO_TOKEN",
    );
    let pol = policy(
        w,
        &[spliced.dir.path()],
        &echo.tls.ca,
        &hosts,
        &cred,
        &run_env(w),
    );
    let script = format!(
        "set -e\n{}{}\n{}\ncurl -sS --fail-with-body --max-time 30 --cacert '{}' -H \"Authorization: Bearer $ECHO_TOKEN\" '{}'\n",
        show("ECHO_TOKEN"),
        clients::curl(&echo.url("/inject"), None),
        clients::curl(&echo.url("/placeholder"), Some("ECHO_TOKEN")),
        spliced.tls.ca.display(),
        spliced.url("/spliced"),
    );
    let r = exec(
        &pol,
        &script,
        &[("CAPSULE_TEST_ECHO_TOKEN", &token)],
        net,
        w,
    );
    r.assert_ok()
        .assert_no_secret(&token)
        .assert_placeholder("ECHO_TOKEN")
        .assert_used("echo");
    let bearer = format!("Bearer {token}");
    assert_eq!(
        echo.authorizations("/inject"),
        vec![Some(bearer.clone())],
        "{}",
        r.describe()
    );
    assert_eq!(
        echo.authorizations("/placeholder"),
        vec![Some(bearer)],
        "{}",
        r.describe()
    );
    let a = answers(&r);
    assert_eq!(a.len(), 3, "{}", r.describe());
    assert_eq!(
        (a[0]["auth"].as_str(), a[1]["auth"].as_str()),
        (Some("token"), Some("token"))
    );
    // Through the splice: the placeholder, untouched; the value never.
    assert_eq!(a[2]["auth"], "placeholder", "{}", r.describe());
    let raw = spliced.authorizations("/spliced");
    assert_eq!(raw.len(), 1);
    assert!(
        raw[0]
            .as_deref()
            .is_some_and(|v| v.starts_with("Bearer capsule-phantom-")),
        "{raw:?}"
    );
}
both_paths!(curl_to_echo);

/// Python requests (Bearer placeholder) and urllib (Basic with the
/// placeholder as password): the credential injected as Basic.
fn python_to_echo(net: NetPath) {
    let token = fresh_token("ghp_");
    let Some(echo) = Echo::start(&token) else {
        return;
    };
    let work = tempdir("capsule-cred-work-");
    let w = work.path();
    let host = format!("localhost:{}", echo.port);
    let cred = credential(
        "echo",
        "CAPSULE_TEST_ECHO_TOKEN",
        &[host],
        &inject_basic("x-access-token"),
        "ECHO_TOKEN",
    );
    let pol = policy(
        w,
        &[],
        &echo.tls.ca,
        &map_host(echo.port),
        &cred,
        &run_env(w),
    );
    let script = format!(
        "set -e\n{}{}\n{}\n",
        show("ECHO_TOKEN"),
        clients::python_requests(&echo.url("/requests"), "ECHO_TOKEN"),
        clients::python_urllib(&echo.url("/urllib"), "ECHO_TOKEN"),
    );
    let r = exec(
        &pol,
        &script,
        &[("CAPSULE_TEST_ECHO_TOKEN", &token)],
        net,
        w,
    );
    r.assert_ok()
        .assert_no_secret(&token)
        .assert_placeholder("ECHO_TOKEN")
        .assert_used("echo");
    let basic = format!(
        "Basic {}",
        egress_support::base64(format!("x-access-token:{token}").as_bytes())
    );
    for path in ["/requests", "/urllib"] {
        assert_eq!(
            echo.authorizations(path),
            vec![Some(basic.clone())],
            "{path}: {}",
            r.describe()
        );
    }
    let a = answers(&r);
    assert_eq!(a.len(), 2, "{}", r.describe());
    assert!(a.iter().all(|v| v["auth"] == "token"), "{}", r.describe());
}
both_paths!(python_to_echo);

/// node: the https module through a CONNECT tunnel made by hand, and fetch
/// through undici's ProxyAgent (node 18/20's global fetch ignores
/// HTTPS_PROXY); both trust capsule's CA through NODE_EXTRA_CA_CERTS.
fn node_to_echo(net: NetPath) {
    let token = fresh_token("ghp_");
    let Some(echo) = Echo::start(&token) else {
        return;
    };
    let work = tempdir("capsule-cred-work-");
    let w = work.path();
    let undici = undici_dir();
    let host = format!("localhost:{}", echo.port);
    let cred = credential(
        "echo",
        "CAPSULE_TEST_ECHO_TOKEN",
        &[host],
        INJECT_BEARER,
        "ECHO_TOKEN",
    );
    let mut env = run_env(w);
    let mut reads: Vec<&Path> = vec![];
    let mut script = format!(
        "set -e\n{}{}\n",
        show("ECHO_TOKEN"),
        clients::node_https(&echo.url("/node-https"), "ECHO_TOKEN", w)
    );
    if let Some(u) = &undici {
        env.push(("NODE_PATH", u.display().to_string()));
        reads.push(u.parent().expect("undici prefix"));
        script.push_str(&clients::node_fetch(
            &echo.url("/node-fetch"),
            "ECHO_TOKEN",
            w,
        ));
        script.push('\n');
    }
    let pol = policy(w, &reads, &echo.tls.ca, &map_host(echo.port), &cred, &env);
    let r = exec(
        &pol,
        &script,
        &[("CAPSULE_TEST_ECHO_TOKEN", &token)],
        net,
        w,
    );
    r.assert_ok()
        .assert_no_secret(&token)
        .assert_placeholder("ECHO_TOKEN")
        .assert_used("echo");
    let bearer = Some(format!("Bearer {token}"));
    assert_eq!(
        echo.authorizations("/node-https"),
        vec![bearer.clone()],
        "{}",
        r.describe()
    );
    if undici.is_some() {
        assert_eq!(
            echo.authorizations("/node-fetch"),
            vec![bearer],
            "{}",
            r.describe()
        );
    }
    assert!(
        answers(&r).iter().all(|v| v["auth"] == "token"),
        "{}",
        r.describe()
    );
}
both_paths!(node_to_echo);

/// `git clone`, commit, `git push` over smart HTTP: the push lands.
fn git_clone_and_push(net: NetPath) {
    let token = fresh_token("ghp_");
    let Some(git) = GitServer::start(&token) else {
        return;
    };
    let work = tempdir("capsule-cred-work-");
    let w = work.path();
    let host = format!("localhost:{}", git.port);
    let cred = credential(
        "git",
        "CAPSULE_TEST_GIT_TOKEN",
        &[host],
        &inject_basic("x-access-token"),
        "GIT_TOKEN",
    );
    let pol = policy(w, &[], &git.tls.ca, &map_host(git.port), &cred, &run_env(w));
    let subject = format!("pushed through capsule ({net:?})");
    let script = format!(
        "{}{}",
        show("GIT_TOKEN"),
        clients::git_roundtrip(&git.url(), "GIT_TOKEN", w, &subject)
    );
    let r = exec(&pol, &script, &[("CAPSULE_TEST_GIT_TOKEN", &token)], net, w);
    r.assert_ok()
        .assert_no_secret(&token)
        .assert_placeholder("GIT_TOKEN")
        .assert_used("git");
    assert!(r.child_stdout().contains("PUSHED"), "{}", r.describe());
    assert_eq!(git.head_subject(), subject);
    // The clone's config keeps what the run had: no value written there.
    let config = std::fs::read_to_string(w.join("clone/.git/config")).unwrap_or_default();
    assert!(!config.contains(&token));
}
both_paths!(git_clone_and_push);

/// `pip install --index-url https://localhost:PORT/simple/ PKG` (pip finds
/// the proxy in HTTPS_PROXY, capsule's CA in PIP_CERT).
fn pip_install(net: NetPath) {
    let token = fresh_token("pypi-");
    let Some(pypi) = PypiServer::start(&token) else {
        return;
    };
    let work = tempdir("capsule-cred-work-");
    let w = work.path();
    let host = format!("localhost:{}", pypi.port);
    let cred = credential(
        "pypi",
        "CAPSULE_TEST_PIP_TOKEN",
        &[host],
        &inject_basic("__token__"),
        "PIP_TOKEN",
    );
    let pol = policy(
        w,
        &[],
        &pypi.tls.ca,
        &map_host(pypi.port),
        &cred,
        &run_env(w),
    );
    let script = format!(
        "{}{}",
        show("PIP_TOKEN"),
        clients::pip_install(pypi.port, "PIP_TOKEN", w)
    );
    let r = exec(&pol, &script, &[("CAPSULE_TEST_PIP_TOKEN", &token)], net, w);
    r.assert_ok()
        .assert_no_secret(&token)
        .assert_placeholder("PIP_TOKEN")
        .assert_used("pypi");
    assert!(
        r.child_stdout().contains("hello from the private index"),
        "{}",
        r.describe()
    );
}
both_paths!(pip_install);

/// `npm install` and `npm publish` against verdaccio, `${NPM_TOKEN}` (the
/// placeholder) in the run's .npmrc; the token verdaccio's login gave is in
/// capsule's environment only.
fn npm_install_and_publish(net: NetPath) {
    let Some(npm) = NpmRegistry::start() else {
        return;
    };
    let token = npm.token.clone();
    let work = tempdir("capsule-cred-work-");
    let w = work.path();
    let host = format!("localhost:{}", npm.port);
    let cred = credential(
        "npm",
        "CAPSULE_TEST_NPM_TOKEN",
        &[host],
        INJECT_BEARER,
        "NPM_TOKEN",
    );
    let pol = policy(w, &[], &npm.tls.ca, &map_host(npm.port), &cred, &run_env(w));
    let name = format!("capsule-run-{}", &fresh_token("")[..8]);
    let script = format!(
        "{}{}",
        show("NPM_TOKEN"),
        clients::npm_roundtrip(npm.port, "NPM_TOKEN", w, &name)
    );
    let r = exec(&pol, &script, &[("CAPSULE_TEST_NPM_TOKEN", &token)], net, w);
    r.assert_ok()
        .assert_no_secret(&token)
        .assert_placeholder("NPM_TOKEN")
        .assert_used("npm");
    let out = r.child_stdout();
    assert!(
        out.contains("seed says seeded") && out.contains("PUBLISHED"),
        "{}",
        r.describe()
    );
    assert!(
        npm.has_package(&name),
        "{name} did not reach the registry: {}",
        r.describe()
    );
}
both_paths!(npm_install_and_publish);

//! The control for tests/credentials_clients.rs: the same real clients,
//! inside `capsule exec` with `network.mode: proxy`, reach the same real
//! servers through today's CONNECT splice (plain `allow_hosts` strings, no
//! credentials), the run given the token and the test CA itself, the
//! pre-issue-38 way. When a credentials test fails and this passes, the
//! fault is in the injection, not in the servers, the grants or the proxy
//! plumbing. Both network paths. Loopback only.

mod egress_support;

use egress_support::clients;
use egress_support::run::{exec, q, splice_policy, NetPath};
use egress_support::{
    fresh_token, tempdir, undici_dir, Echo, GitServer, NpmRegistry, PypiServer, TEST_PATH,
};

fn every_client_through_the_splice(net: NetPath) {
    let token = fresh_token("ghp_");
    let Some(echo) = Echo::start(&token) else {
        return;
    };
    let Some(git) = GitServer::start(&token) else {
        return;
    };
    let Some(pypi) = PypiServer::start(&token) else {
        return;
    };
    let Some(npm) = NpmRegistry::start() else {
        return;
    };
    let Some(undici) = undici_dir() else { return };
    let work = tempdir("capsule-splice-");
    let w = work.path();
    // The four servers' CAs, one bundle, named by the variables capsule
    // would set (here the run's own choice).
    let mut bundle = String::new();
    for ca in [&echo.tls.ca, &git.tls.ca, &pypi.tls.ca, &npm.tls.ca] {
        bundle.push_str(&std::fs::read_to_string(ca).expect("read CA"));
    }
    let b = w.join("bundle.pem");
    std::fs::write(&b, bundle).expect("write bundle");
    let mut env: Vec<(&str, String)> = vec![
        ("PATH", TEST_PATH.into()),
        ("HOME", w.join("home").display().to_string()),
        (
            "npm_config_cache",
            w.join("npm-cache").display().to_string(),
        ),
        ("TOKEN", token.clone()),
        ("NPM_TOKEN", npm.token.clone()),
        ("NODE_PATH", undici.display().to_string()),
    ];
    let cas = clients::ca_env(&b);
    env.extend(cas.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let hosts: String = [echo.port, git.port, pypi.port, npm.port]
        .iter()
        .map(|p| format!("    - {}\n", q(&format!("localhost:{p}"))))
        .collect();
    let pol = splice_policy(w, &[undici.parent().expect("prefix")], &hosts, &env);
    let pkg = format!("capsule-splice-{}", &fresh_token("")[..8]);
    let script = [
        "set -e".to_string(),
        clients::curl(&echo.url("/curl"), Some("TOKEN")),
        clients::python_requests(&echo.url("/requests"), "TOKEN"),
        clients::python_urllib(&echo.url("/urllib"), "TOKEN"),
        clients::node_https(&echo.url("/node-https"), "TOKEN", w),
        clients::node_fetch(&echo.url("/node-fetch"), "TOKEN", w),
        clients::git_roundtrip(&git.url(), "TOKEN", w, "through the splice"),
        clients::pip_install(pypi.port, "TOKEN", w),
        clients::npm_roundtrip(npm.port, "NPM_TOKEN", w, &pkg),
    ]
    .join("\n");
    let r = exec(&pol, &script, &[], net, w);
    r.assert_ok();
    let out = r.child_stdout();
    for path in [
        "/curl",
        "/requests",
        "/urllib",
        "/node-https",
        "/node-fetch",
    ] {
        assert_eq!(
            echo.authorizations(path).len(),
            1,
            "{path}: {}",
            r.describe()
        );
    }
    assert_eq!(
        out.matches("\"auth\": \"token\"").count(),
        5,
        "{}",
        r.describe()
    );
    assert_eq!(git.head_subject(), "through the splice");
    assert!(
        out.contains("hello from the private index"),
        "{}",
        r.describe()
    );
    assert!(
        out.contains("PUBLISHED") && npm.has_package(&pkg),
        "{}",
        r.describe()
    );
    assert!(
        r.json["usage"]["proxy"]["allowed"].as_u64().unwrap_or(0) >= 8,
        "{}",
        r.describe()
    );
}

#[test]
fn every_client_through_the_splice_default_path() {
    every_client_through_the_splice(NetPath::Default)
}

#[test]
fn every_client_through_the_splice_no_namespaces() {
    every_client_through_the_splice(NetPath::NoNamespaces)
}

//! Issue 40 end to end: a real `git` inside `capsule exec --net proxy`
//! against git http-backend behind nginx over TLS (tests/egress_support),
//! the token injected by capsule's proxy, the host's entry carrying `git:`
//! rules (fetch and push `demo`, branches `agent/*`, no tags, no delete).
//! Clone and a push to `agent/x` work; a push to `main`, of a tag, of a
//! delete, of two refs one of which is refused, and a clone of a second
//! repository fail with git's own message naming capsule; the server's refs
//! are read on the host afterwards. Loopback only.

mod egress_support;

use std::path::Path;
use std::process::Command;

use egress_support::run::{credential, exec, inject_basic, policy, q, NetPath};
use egress_support::{fresh_token, tempdir, GitServer, TEST_PATH};

/// `git for-each-ref` of a bare repository on the host: `ref sha` lines.
fn refs(bare: &Path) -> String {
    let out = Command::new("git")
        .env_clear()
        .env("PATH", TEST_PATH)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .arg("--git-dir")
        .arg(bare)
        .args(["for-each-ref", "--format=%(refname) %(objectname)"])
        .output()
        .expect("git for-each-ref");
    assert!(out.status.success(), "git for-each-ref failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The second repository: a bare copy of the first, beside it.
fn second_repo(git: &GitServer) -> std::path::PathBuf {
    let other = git.dir.path().join("repos/other.git");
    let ok = Command::new("git")
        .env_clear()
        .env("PATH", TEST_PATH)
        .env("HOME", git.dir.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["clone", "-q", "--bare"])
        .arg(&git.bare)
        .arg(&other)
        .status()
        .expect("git clone --bare");
    assert!(ok.success());
    other
}

/// The run's script: each step prints its marker and git's output; no step stops the rest.
fn script(url: &str, other: &str, w: &Path) -> String {
    let w = w.display();
    let g = "git -c http.extraHeader=\"Authorization: Bearer $GIT_TOKEN\" \
             -c user.name=run -c user.email=run@capsule.invalid";
    format!(
        "cd '{w}'\n\
         {g} clone -q '{url}' clone && echo CLONED\n\
         cd clone\necho one > f.txt && git add f.txt && {g} commit -qm one\n\
         {g} push origin HEAD:refs/heads/agent/x 2>&1 && echo PUSH_AGENT_OK\n\
         echo two > f.txt && {g} commit -qam two\n\
         {g} push origin HEAD:main 2>&1 || echo PUSH_MAIN_FAILED\n\
         {g} tag v1 && ({g} push origin v1 2>&1 || echo PUSH_TAG_FAILED)\n\
         {g} push origin :agent/x 2>&1 || echo DELETE_FAILED\n\
         {g} push origin HEAD:refs/heads/agent/y HEAD:main 2>&1 || echo PUSH_TWO_FAILED\n\
         cd '{w}'\n{g} clone -q '{other}' other 2>&1 || echo OTHER_FAILED\n"
    )
}

fn push_rules(net: NetPath) {
    let token = fresh_token("ghp_");
    let Some(git) = GitServer::start(&token) else {
        return;
    };
    let other = second_repo(&git);
    let work = tempdir("capsule-git-work-");
    let w = work.path();
    let host = format!("localhost:{}", git.port);
    let entry = format!(
        "    - host: {}\n      git:\n        fetch: [demo]\n        push: {{repos: [demo], branches: [\"agent/*\"]}}\n",
        q(&host)
    );
    let cred = credential(
        "git",
        "CAPSULE_TEST_GIT_TOKEN",
        &[host],
        &inject_basic("x-access-token"),
        "GIT_TOKEN",
    );
    let env = vec![
        ("PATH", TEST_PATH.to_string()),
        ("HOME", w.join("home").display().to_string()),
    ];
    let pol = policy(w, &[], &git.tls.ca, &entry, &cred, &env);
    let before = refs(&git.bare);
    let before_other = refs(&other);
    let other_url = git.url().replace("/demo.git", "/other.git");
    let s = script(&git.url(), &other_url, w);
    let r = exec(&pol, &s, &[("CAPSULE_TEST_GIT_TOKEN", &token)], net, w);
    r.assert_ok().assert_no_secret(&token).assert_used("git");
    let out = r.child_stdout();
    let d = r.describe();
    for marker in [
        "CLONED",
        "PUSH_AGENT_OK",
        "PUSH_MAIN_FAILED",
        "PUSH_TAG_FAILED",
        "DELETE_FAILED",
        "PUSH_TWO_FAILED",
        "OTHER_FAILED",
    ] {
        assert!(out.contains(marker), "no {marker}:\n{out}\n{d}");
    }
    for says in [
        "[remote rejected] HEAD -> main (capsule: refs/heads/main is not in network.allow_hosts[0].git.push.branches [agent/*])",
        "[remote rejected] v1 -> v1 (capsule: refs/tags/v1 is not in network.allow_hosts[0].git.push.tags [])",
        "[remote rejected] agent/x (capsule: deleting refs/heads/agent/x needs network.allow_hosts[0].git.push.delete: true)",
        "[remote rejected] HEAD -> agent/y (capsule: the push is refused whole",
    ] {
        assert!(out.contains(says), "git did not say {says:?}:\n{out}");
    }
    assert!(
        out.contains("403"),
        "the second repository was not refused by capsule:\n{out}"
    );
    let after = refs(&git.bare);
    let main = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("refs/heads/main "))
            .map(String::from)
    };
    assert_eq!(main(&after), main(&before), "main moved:\n{after}");
    assert!(
        after.contains("refs/heads/agent/x "),
        "agent/x not pushed:\n{after}"
    );
    assert!(
        !after.contains("refs/tags/v1") && !after.contains("agent/y"),
        "{after}"
    );
    assert_eq!(refs(&other), before_other);
}

#[test]
fn push_rules_default_path() {
    push_rules(NetPath::Default)
}

#[test]
fn push_rules_no_namespaces() {
    push_rules(NetPath::NoNamespaces)
}

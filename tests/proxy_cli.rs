//! Proxy mode at the edges: fail-closed refusals (exit 125), the policy file's
//! `network` section, what the audit record says, and `unrestricted`.
//! Loopback only.

mod proxy_support;

use std::fs;
use std::path::Path;

use serde_json::Value;

use proxy_support::{
    capsule_bin, exec, runnable, runnable_or_skip, shared_tempdir, NetPath, Origin, Variant, Who,
    CURL,
};

const INVOKER_NETNS: Variant = Variant {
    who: Who::Invoker,
    path: NetPath::Netns,
};
const INVOKER_FALLBACK: Variant = Variant {
    who: Who::Invoker,
    path: NetPath::Fallback,
};

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    fs::write(&p, text).expect("write policy");
    p.display().to_string()
}

/// `--net proxy` without any host, and `mode: proxy` in a policy without
/// `allow_hosts`, are refused before anything runs, on both paths.
#[test]
fn proxy_without_hosts_is_125() {
    let dir = shared_tempdir("capsule-proxy-policy-");
    let policy = write(
        dir.path(),
        "p.yaml",
        "version: 1\nnetwork:\n  mode: proxy\n",
    );
    let empty = write(
        dir.path(),
        "e.yaml",
        "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts: []\n",
    );
    let marker = dir.path().join("ran");
    let touch = format!("/usr/bin/touch {}", marker.display());
    for v in [INVOKER_NETNS, INVOKER_FALLBACK] {
        for args in [
            vec!["--net", "proxy"],
            vec!["--policy", &policy],
            vec!["--policy", &empty],
        ] {
            let r = exec(v, &args, &["/bin/sh", "-c", &touch]);
            assert_eq!(r.status, 125, "{args:?}: {}", r.describe());
            assert_eq!(r.json["termination_reason"], "refused", "{}", r.describe());
            let err = r.json["error"].as_str().unwrap_or("");
            assert!(err.contains("allow_hosts"), "{}", r.describe());
        }
    }
    assert!(!marker.exists(), "the command ran");
}

/// Hosts from the policy file and from `--allow-host` both count.
#[test]
fn policy_hosts_and_flag_hosts_combine() {
    let v = INVOKER_NETNS;
    if !runnable_or_skip(v) {
        return;
    }
    let dir = shared_tempdir("capsule-proxy-policy-");
    let policy = write(
        dir.path(),
        "p.yaml",
        "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts: [\"127.0.0.1\"]\n",
    );
    let o = Origin::http();
    let script = format!(
        "{CURL} -sS -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:{p}/ ; \
         {CURL} -sS -o /dev/null -w '%{{http_code}}\\n' http://localhost:{p}/",
        p = o.port
    );
    let only_policy = exec(v, &["--policy", &policy], &["/bin/sh", "-c", &script]);
    only_policy.on_path(v);
    assert_eq!(
        only_policy.stdout(),
        "200\n403\n",
        "{}",
        only_policy.describe()
    );
    let both = exec(
        v,
        &["--policy", &policy, "--allow-host", "localhost"],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(both.stdout(), "200\n200\n", "{}", both.describe());
}

fn audit_records(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .expect("audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

/// The audit record carries the network mode, the path, and the proxy's counters
/// with the denied host names; an `unrestricted` run says so.
#[test]
fn audit_record_counts_proxy_decisions() {
    let o = Origin::http();
    let dir = shared_tempdir("capsule-proxy-audit-");
    let log = dir.path().join("audit.jsonl");
    let log_s = log.display().to_string();
    let script = format!(
        "{CURL} -sS -o /dev/null http://127.0.0.1:{p}/ ; {CURL} -sS -o /dev/null http://127.0.0.1:{p}/ ; \
         {CURL} -sS -o /dev/null http://denied.invalid/",
        p = o.port
    );
    for v in [INVOKER_NETNS, INVOKER_FALLBACK] {
        if !runnable(v) {
            continue;
        }
        let mut cmd = assert_cmd::Command::new(capsule_bin());
        match v.path {
            NetPath::Fallback | NetPath::GuardFallback => cmd.env("CAPSULE_NO_NAMESPACES", "1"),
            NetPath::Netns => cmd.env_remove("CAPSULE_NO_NAMESPACES"),
        };
        let out = cmd
            .args([
                "exec",
                "--audit-log",
                &log_s,
                "--net",
                "proxy",
                "--allow-host",
                "127.0.0.1",
                "--",
            ])
            .args(["/bin/sh", "-c", &script])
            .timeout(std::time::Duration::from_secs(90))
            .output()
            .expect("run capsule");
        assert!(out.status.success(), "{out:?}");
        let recs = audit_records(&log);
        let rec = recs.last().expect("a record");
        assert_eq!(rec["enforcement"]["network"], "proxy", "{rec}");
        assert_eq!(rec["enforcement"]["network_path"], v.path.name(), "{rec}");
        assert_eq!(rec["proxy"]["allowed"], 2, "{rec}");
        assert_eq!(rec["proxy"]["denied"], 1, "{rec}");
        assert_eq!(
            rec["proxy"]["denied_hosts"],
            serde_json::json!(["denied.invalid"]),
            "{rec}"
        );
    }

    let out = assert_cmd::Command::new(capsule_bin())
        .args([
            "exec",
            "--audit-log",
            &log_s,
            "--net",
            "unrestricted",
            "--",
            "/bin/true",
        ])
        .timeout(std::time::Duration::from_secs(90))
        .output()
        .expect("run capsule");
    assert!(out.status.success(), "{out:?}");
    let recs = audit_records(&log);
    let rec = recs.last().expect("a record");
    assert_eq!(rec["enforcement"]["network"], "unrestricted", "{rec}");
    assert_eq!(rec["enforcement"]["netns"], false, "{rec}");
    assert_eq!(rec["enforcement"]["network_path"], Value::Null, "{rec}");
    assert_eq!(rec["proxy"]["allowed"], 0, "{rec}");
}

/// `unrestricted` uses the host's network: the child reaches the loopback origin
/// directly and gets no proxy variables.
#[test]
fn unrestricted_is_the_host_network() {
    let o = Origin::http();
    let url = format!("http://127.0.0.1:{}/direct", o.port);
    let script = format!("{CURL} -sS --max-time 20 {url}; env | grep -ci _proxy");
    let r = exec(
        INVOKER_FALLBACK,
        &["--net", "unrestricted"],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(
        r.json["enforcement"]["network"],
        "unrestricted",
        "{}",
        r.describe()
    );
    assert_eq!(
        r.stdout(),
        "hello from origin /direct\n0\n",
        "{}",
        r.describe()
    );
}

/// Metadata and link-local destinations stay refused even when listed. End to end
/// only inside a network namespace this test creates (`unshare --net`, root only):
/// there, nothing but a loopback interface exists, so even a broken proxy could not
/// send a packet to this machine's real link-local or metadata addresses.
#[test]
fn metadata_and_link_local_refused_even_when_listed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/unshare").exists() {
        proxy_support::skip("needs root and unshare(1) to make a private network namespace");
        return;
    }
    let curls = [
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/",
        "http://[fe80::1]/",
    ]
    .map(|u| format!("{CURL} -sS -o /dev/null -w '%{{http_code}}\\n' '{u}'"))
    .join("; ");
    for fallback in [false, true] {
        let mut cmd = assert_cmd::Command::new("/usr/bin/unshare");
        cmd.args(["--net", "--", "/bin/sh", "-c"]);
        cmd.arg(
            "ip link set lo up && test \"$(ip -o link show | grep -vc ': lo:')\" = 0 && exec \"$0\" exec --json --no-audit --net proxy \
             --allow-host 169.254.169.254 --allow-host metadata.google.internal --allow-host '[fe80::1]' \
             -- /bin/sh -c \"$1\"",
        );
        cmd.arg(capsule_bin()).arg(&curls);
        if fallback {
            cmd.env("CAPSULE_NO_NAMESPACES", "1");
        } else {
            cmd.env_remove("CAPSULE_NO_NAMESPACES");
        }
        let out = cmd
            .timeout(std::time::Duration::from_secs(90))
            .output()
            .expect("run capsule");
        let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{out:?}"));
        assert_eq!(r["stdout"], "403\n403\n403\n", "{r}");
        assert_eq!(
            r["denied_hosts"],
            serde_json::json!(["169.254.169.254", "metadata.google.internal", "[fe80::1]"]),
            "{r}"
        );
        assert_eq!(r["usage"]["proxy"]["allowed"], 0, "{r}");
    }
}

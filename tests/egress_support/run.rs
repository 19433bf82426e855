//! The real `capsule` binary (env `CAPSULE_BIN` overrides it) running a
//! client script under a policy with `network.mode: proxy`, credentials
//! from capsule's OWN environment, and `--audit-log FILE`; and the checks
//! every such run gets (the token in no byte capsule wrote).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::TEST_PATH;

/// Where the run's network goes: capsule's default path here (its own
/// network namespace where the kernel allows), or the host's network with
/// `CAPSULE_NO_NAMESPACES=1` (Landlock TCP rules / the network guard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetPath {
    Default,
    NoNamespaces,
}

pub fn capsule_bin() -> PathBuf {
    match std::env::var_os("CAPSULE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_capsule")),
    }
}

/// A YAML string (JSON strings are YAML).
pub fn q(s: &str) -> String {
    serde_json::to_string(s).expect("quote")
}

/// One `credentials:` entry: from capsule's env var FROM, for HOSTS,
/// injected as INJECT (a YAML flow map), placeholder in PLACEHOLDER.
pub fn credential(
    name: &str,
    from: &str,
    hosts: &[String],
    inject: &str,
    placeholder: &str,
) -> String {
    let hosts: Vec<String> = hosts.iter().map(|h| q(h)).collect();
    format!(
        "  - name: {name}\n    from: {{env: {from}}}\n    hosts: [{}]\n    inject: {inject}\n    placeholder_env: [{placeholder}]\n",
        hosts.join(", ")
    )
}

pub const INJECT_BEARER: &str = "{header: Authorization, format: \"Bearer {}\"}";

pub fn inject_basic(user: &str) -> String {
    format!("{{basic: {{username: {}}}}}", q(user))
}

/// The policy: WORK writable (and the cwd), READS readable, the proxy
/// allowing HOSTS (YAML list items, each a line `    - ...`), upstream
/// roots from UPSTREAM_CA, CREDENTIALS (from [`credential`]), ENV set.
pub fn policy(
    work: &Path,
    reads: &[&Path],
    upstream_ca: &Path,
    hosts: &str,
    credentials: &str,
    env: &[(&str, String)],
) -> String {
    let reads: Vec<String> = reads.iter().map(|p| q(&p.display().to_string())).collect();
    let mut set = String::new();
    for (k, v) in env {
        set.push_str(&format!("    {k}: {}\n", q(v)));
    }
    format!(
        "version: 1\nfilesystem:\n  read: [{reads}]\n  write: [{work}]\n  system: true\n  tmp: true\n\
         network:\n  mode: proxy\n  upstream_ca: {ca}\n  allow_hosts:\n{hosts}\
         credentials:\n{credentials}\
         env:\n  set:\n{set}\
         limits:\n  timeout_seconds: 180\n  max_processes: 256\n  memory_mb: 2048\n",
        reads = reads.join(", "),
        work = q(&work.display().to_string()),
        ca = q(&upstream_ca.display().to_string()),
    )
}

/// The same policy as [`policy`] before issue 38: every host spliced (plain
/// `allow_hosts` strings), no upstream roots, no credentials.
pub fn splice_policy(work: &Path, reads: &[&Path], hosts: &str, env: &[(&str, String)]) -> String {
    let full = policy(work, reads, Path::new("/"), hosts, "", env);
    full.lines()
        .filter(|l| !l.starts_with("  upstream_ca:") && *l != "credentials:")
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A finished `capsule exec --json`.
pub struct CapsuleRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub json: Value,
    pub audit: String,
}

impl CapsuleRun {
    pub fn child_stdout(&self) -> String {
        self.json["stdout"].as_str().unwrap_or_default().to_string()
    }

    pub fn describe(&self) -> String {
        format!(
            "capsule exit {:?}\ncapsule stdout: {}\ncapsule stderr: {}",
            self.code, self.stdout, self.stderr
        )
    }

    /// The run succeeded: capsule exit 0 (the script's own status).
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "{}", self.describe());
        self
    }

    /// TOKEN appears in no byte capsule wrote: stdout (the result, with the
    /// child's captured output), stderr, the audit record.
    pub fn assert_no_secret(&self, token: &str) -> &Self {
        assert!(!token.is_empty());
        for (what, text) in [
            ("stdout (the --json result)", &self.stdout),
            ("stderr", &self.stderr),
            ("the audit record", &self.audit),
        ] {
            assert!(
                !text.contains(token),
                "the credential's value is in capsule's {what}:\n{}",
                self.describe()
            );
        }
        assert!(!self.audit.trim().is_empty(), "no audit record written");
        self
    }

    /// The child printed `VAR=capsule-phantom-...` (its placeholder).
    pub fn assert_placeholder(&self, var: &str) -> &Self {
        let out = self.child_stdout();
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{var}=")))
            .unwrap_or_else(|| panic!("the run printed no {var}=...:\n{}", self.describe()));
        assert!(
            line.starts_with(&format!("{var}=capsule-phantom-")),
            "the run's {var} is not a placeholder: {line}"
        );
        self
    }

    /// `credentials_used` names NAME with at least one request.
    pub fn assert_used(&self, name: &str) -> &Self {
        let used = self.json["credentials_used"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let n = used
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["requests"].as_u64())
            .unwrap_or(0);
        assert!(
            n >= 1,
            "credentials_used has no requests for {name}:\n{}",
            self.describe()
        );
        self
    }
}

/// `capsule exec --json --policy POLICY --audit-log AUDIT -- /bin/sh -c
/// SCRIPT` from WORK, capsule's own environment clean but for ENV (where
/// the real tokens live) and the suite's knobs.
pub fn exec(
    policy_yaml: &str,
    script: &str,
    env: &[(&str, &str)],
    net: NetPath,
    work: &Path,
) -> CapsuleRun {
    let home = super::tempdir("capsule-cred-home-");
    let policy = home.path().join("policy.yaml");
    fs::write(&policy, policy_yaml).expect("write policy");
    let audit = home.path().join("audit.jsonl");
    // CAPSULE_TEST_VIA_SERVE=1: the same run through the warm parent
    // (`capsule serve`, tests/probes/via_serve.py), as tests/common does.
    let via_serve = std::env::var("CAPSULE_TEST_VIA_SERVE").is_ok_and(|v| v == "1");
    let mut c = if via_serve {
        let root = std::env::var_os("CAPSULE_TEST_ROOT")
            .filter(|p| !p.is_empty())
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let mut c = assert_cmd::Command::new("/usr/bin/python3");
        c.arg(root.join("tests/probes/via_serve.py"))
            .arg(capsule_bin());
        c
    } else {
        assert_cmd::Command::new(capsule_bin())
    };
    c.args(["exec", "--json", "--policy"])
        .arg(&policy)
        .arg("--audit-log")
        .arg(&audit)
        .args(["--", "/bin/sh", "-c", script])
        .env_clear()
        .env("PATH", TEST_PATH)
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("LANG", "C.UTF-8")
        .current_dir(work)
        .timeout(Duration::from_secs(240));
    for k in [
        "CAPSULE_LANDLOCK_ABI_MAX",
        "CAPSULE_MUTATE",
        "RUST_LOG",
        "RUST_BACKTRACE",
    ] {
        if let Ok(v) = std::env::var(k) {
            c.env(k, v);
        }
    }
    let nons = net == NetPath::NoNamespaces
        || std::env::var("CAPSULE_NO_NAMESPACES").is_ok_and(|v| !v.is_empty() && v != "0");
    if nons {
        c.env("CAPSULE_NO_NAMESPACES", "1");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run capsule");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    CapsuleRun {
        code: out.status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        json,
        audit: fs::read_to_string(&audit).unwrap_or_default(),
    }
}

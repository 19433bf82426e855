//! Support for tests/escape_credentials.rs: a test CA and an HTTPS origin on
//! 127.0.0.1 that logs every request it receives (tests/cred_support/origin.py),
//! and `capsule exec` runs holding a known credential value, so that every byte
//! capsule writes can be searched for it. Loopback only.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../common/skip.rs"]
mod skip;
#[allow(unused_imports)]
pub use skip::{skip, skip_part};

pub const PYTHON: &str = "/usr/bin/python3";
pub const CURL: &str = "/usr/bin/curl";
pub const TEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
pub const ORIGIN_PY: &str = include_str!("origin.py");
pub const ATTACK_PY: &str = include_str!("attack.py");

pub fn capsule_bin() -> PathBuf {
    match std::env::var_os("CAPSULE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_capsule")),
    }
}

/// A name other than `localhost` that /etc/hosts maps to 127.0.0.1, if any.
pub fn loopback_alias() -> Option<String> {
    let hosts = fs::read_to_string("/etc/hosts").ok()?;
    hosts
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("127.0.0.1")).then(|| w.map(str::to_string).collect::<Vec<_>>())
        })
        .flatten()
        .find(|n| {
            n != "localhost"
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        })
}

/// The test CA and a leaf for localhost, 127.0.0.1 and the loopback alias, made
/// once per process with openssl, in a world-readable directory.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let d = tempfile::Builder::new()
            .prefix("capsule-cred-pki-")
            .tempdir()
            .expect("tempdir");
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let dir = fs::canonicalize(d.path()).expect("canonicalize");
        let p = |n: &str| dir.join(n);
        let mut san = "subjectAltName=DNS:localhost,IP:127.0.0.1".to_string();
        if let Some(a) = loopback_alias() {
            san.push_str(&format!(",DNS:{a}"));
        }
        fs::write(
            p("ext"),
            format!("{san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )
        .expect("ext");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &dir,
            &[
                &["req", "-x509"],
                &ec[..],
                &[
                    "-days",
                    "2",
                    "-subj",
                    "/CN=capsule-cred-test-ca",
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                ],
            ]
            .concat(),
        );
        openssl(
            &dir,
            &[
                &["req"],
                &ec[..],
                &[
                    "-subj",
                    "/CN=localhost",
                    "-keyout",
                    "srv.key",
                    "-out",
                    "srv.csr",
                ],
            ]
            .concat(),
        );
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "srv.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext",
                "-out",
                "srv.pem",
            ],
        );
        for f in ["ca.pem", "srv.pem"] {
            fs::set_permissions(p(f), fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        Pki {
            ca: p("ca.pem"),
            cert: p("srv.pem"),
            key: p("srv.key"),
            dir,
            _dir: d,
        }
    })
}

fn openssl(dir: &Path, args: &[&str]) {
    let st = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl {args:?} failed");
}

/// The HTTPS origin (origin.py), killed on drop; its log: one JSON line per request.
pub struct Origin {
    child: Child,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Origin {
    pub fn start() -> Origin {
        let pki = pki();
        let dir = tempfile::Builder::new()
            .prefix("capsule-cred-origin-")
            .tempdir()
            .expect("tempdir");
        let port_file = dir.path().join("port");
        let log = dir.path().join("log");
        let child = Command::new(PYTHON)
            .arg("-c")
            .arg(ORIGIN_PY)
            .arg(&port_file)
            .arg(&log)
            .arg(&pki.cert)
            .arg(&pki.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start origin");
        let start = Instant::now();
        let port = loop {
            if let Ok(s) = fs::read_to_string(&port_file) {
                break s.trim().parse().expect("port");
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "origin did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Origin {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("origin log line"))
            .collect()
    }

    /// The raw log text (to search for a value or placeholder).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The requests whose path (query left out) is `path`.
    pub fn requests_to(&self, path: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["path"].as_str().unwrap_or("").split('?').next() == Some(path))
            .collect()
    }

    /// A request's header values named `name` (any case).
    pub fn header(r: &Value, name: &str) -> Vec<String> {
        r["headers"]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .filter(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
                    .map(|h| h[1].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One value per test, distinctive enough to search for.
pub fn secret_value(tag: &str) -> String {
    let mut raw = [0u8; 12];
    getrandom_fill(&mut raw);
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    format!("rtV4L{tag}{hex}")
}

fn getrandom_fill(buf: &mut [u8]) {
    use std::io::Read;
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .expect("urandom");
}

/// A scratch directory for a test's policy, audit log and files.
pub struct Scratch {
    _dir: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new() -> Scratch {
        let d = tempfile::Builder::new()
            .prefix("capsule-cred-")
            .tempdir()
            .expect("tempdir");
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let dir = fs::canonicalize(d.path()).expect("canonicalize");
        Scratch { _dir: d, dir }
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(&p, text).expect("write");
        p.display().to_string()
    }

    /// A policy file: `{PORT}` and `{CA}` replaced.
    pub fn policy(&self, port: u16, yaml: &str) -> String {
        let text = yaml
            .replace("{PORT}", &port.to_string())
            .replace("{CA}", &pki().ca.display().to_string());
        self.write("policy.yaml", &text)
    }
}

/// What one capsule invocation wrote.
pub struct Out {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("no JSON result ({e}): {}", self.describe()))
    }

    pub fn child_stdout(&self) -> String {
        self.json()["stdout"].as_str().unwrap_or("").to_string()
    }

    /// The proxy's refusals in `denials`, as (kind, key).
    pub fn denials(&self) -> Vec<(String, String)> {
        self.json()["denials"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|d| d["layer"] == "proxy")
                    .map(|d| {
                        (
                            d["kind"].as_str().unwrap_or("").to_string(),
                            d["key"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn count_denials(&self, kind: &str) -> usize {
        self.denials().iter().filter(|(k, _)| k == kind).count()
    }

    /// The result's `stdout` as the probe lines (JSON per line) attack.py prints.
    pub fn cases(&self) -> Vec<Value> {
        self.child_stdout()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).expect("case line"))
            .collect()
    }

    pub fn case(&self, name: &str) -> Value {
        self.cases()
            .into_iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no case {name}: {}", self.describe()))
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// Neither stream capsule wrote holds `value`.
    pub fn assert_clean(&self, value: &str) {
        assert!(
            !self.stdout.contains(value) && !self.stderr.contains(value),
            "the credential value is in capsule's output: {}",
            self.describe()
        );
    }
}

/// `capsule ARGS` with a clean environment plus `env` (the credential's source).
pub fn capsule(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = Command::new("/usr/bin/env");
    cmd.arg("-i")
        .arg(format!("PATH={TEST_PATH}"))
        .arg(format!("HOME={}", cwd.display()))
        .arg(format!("XDG_STATE_HOME={}", cwd.display()))
        .arg(format!("XDG_CONFIG_HOME={}", cwd.display()));
    for k in ["CAPSULE_NO_NAMESPACES", "CAPSULE_MUTATE", "TMPDIR"] {
        if let Ok(v) = std::env::var(k) {
            cmd.arg(format!("{k}={v}"));
        }
    }
    for (k, v) in env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(capsule_bin()).args(args).current_dir(cwd);
    let out = assert_cmd::Command::from_std(cmd)
        .timeout(Duration::from_secs(90))
        .output()
        .expect("run capsule");
    Out {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `capsule exec --json --no-audit --policy POLICY EXTRA -- CMD` holding MY_TOKEN=value.
pub fn exec(s: &Scratch, value: &str, policy: &str, extra: &[&str], cmd: &[&str]) -> Out {
    exec_env(s, &[("MY_TOKEN", value)], policy, extra, cmd)
}

/// [`exec`] with capsule's extra environment given whole.
pub fn exec_env(
    s: &Scratch,
    env: &[(&str, &str)],
    policy: &str,
    extra: &[&str],
    cmd: &[&str],
) -> Out {
    let mut args = vec!["exec", "--json", "--policy", policy];
    if !extra.iter().any(|a| a.starts_with("--audit-log")) {
        args.push("--no-audit");
    }
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    capsule(&s.dir, env, &args)
}

/// attack.py's case list: (name, connect, sni, payload).
pub fn cases_json(cases: &[(&str, &str, Option<&str>, &str)]) -> String {
    let v: Vec<Value> = cases
        .iter()
        .map(|(n, c, s, p)| serde_json::json!({"name": n, "connect": c, "sni": s, "payload": p}))
        .collect();
    Value::Array(v).to_string()
}

//! Helpers for the proxy integration tests: the real `capsule` binary (env
//! `CAPSULE_BIN` overrides it), run as the invoking user or as `nobody`, on the
//! network-namespace path or the forced fallback (`CAPSULE_NO_NAMESPACES=1`), and
//! origin servers on the host's loopback (plain HTTP and TLS with a self-signed
//! certificate). Loopback only: nothing here talks to any other address.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

#[path = "../common/skip.rs"]
mod skip;
#[allow(unused_imports)]
pub use skip::{skip, skip_part};

/// A PATH without per-user shims.
pub const TEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
/// The interpreter used inside and outside the sandbox (never a per-user shim).
pub const PYTHON: &str = "/usr/bin/python3";
pub const CURL: &str = "/usr/bin/curl";

/// Who runs capsule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The user running the tests (root in CI).
    Invoker,
    /// `nobody`, through `runuser` (needs root), with the binary copied to a world-readable dir.
    Nobody,
}

/// How the child reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetPath {
    /// Its own network namespace.
    Netns,
    /// `CAPSULE_NO_NAMESPACES=1`: host loopback, Landlock TCP port rule + seccomp.
    Fallback,
    /// The same below Landlock ABI 4 (`CAPSULE_LANDLOCK_ABI_MAX=3`, as on Debian 12's
    /// 6.1 or Ubuntu 22.04's 5.15 without user namespaces): no Landlock TCP rules, so
    /// the seccomp network guard (user notification) is what holds.
    GuardFallback,
}

impl NetPath {
    pub fn name(self) -> &'static str {
        match self {
            NetPath::Netns => "netns",
            NetPath::Fallback => "landlock-tcp-fallback",
            NetPath::GuardFallback => "seccomp-notify-fallback",
        }
    }

    /// The child shares the host's network namespace.
    pub fn on_host(self) -> bool {
        self != NetPath::Netns
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub who: Who,
    pub path: NetPath,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The binary under test.
pub fn capsule_bin() -> PathBuf {
    match std::env::var_os("CAPSULE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_capsule")),
    }
}

/// A world-readable, world-writable temp dir (sticky) that `nobody` can use.
pub fn shared_tempdir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir");
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o1777)).expect("chmod");
    d
}

/// A directory kept for the whole test process (in a `static`, which is never
/// dropped): removed when the process exits, not left in the host's /tmp.
fn process_tempdir(prefix: &str, mode: u32) -> PathBuf {
    static DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    extern "C" fn remove_all() {
        if let Ok(dirs) = DIRS.lock() {
            for d in dirs.iter() {
                let _ = fs::remove_dir_all(d);
            }
        }
    }
    static REGISTER: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain function with no captured state; libtest's
    // harness ends with exit(), which runs it on the main thread.
    REGISTER.call_once(|| unsafe {
        libc::atexit(remove_all);
    });
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir")
        .keep();
    fs::set_permissions(&d, fs::Permissions::from_mode(mode)).expect("chmod");
    DIRS.lock().unwrap().push(d.clone());
    d
}

/// The binary copied where `nobody` can execute it (once per test process).
pub fn nobody_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = process_tempdir("capsule-bin-", 0o755).join("capsule");
        fs::copy(capsule_bin(), &bin).expect("copy capsule");
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).expect("chmod");
        bin
    })
}

/// Whether the kernel gives this process namespaces (doctor says so).
pub fn namespaces_available() -> bool {
    static NS: OnceLock<bool> = OnceLock::new();
    *NS.get_or_init(|| {
        let out = StdCommand::new(capsule_bin())
            .args(["doctor", "--json"])
            .output()
            .expect("doctor");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        v["user_namespaces"].as_bool().unwrap_or(false)
    })
}

/// Whether capsule's network guard can run here (doctor, on the host's network): a
/// container's seccomp profile may refuse what it needs (Docker's and containerd's
/// RuntimeDefault refuse pidfd_getfd without CAP_SYS_PTRACE). Checked against the
/// reason doctor gives, so that a guard lost for another reason fails the tests.
pub fn net_guard_available() -> bool {
    static GUARD: OnceLock<bool> = OnceLock::new();
    *GUARD.get_or_init(|| {
        let out = StdCommand::new(capsule_bin())
            .args(["doctor", "--json"])
            .env("CAPSULE_NO_NAMESPACES", "1")
            .output()
            .expect("doctor");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let guard = v["proxy"]["guard"].as_bool().unwrap_or(false);
        if !guard {
            let mode = v["proxy"]["mode"].as_str().unwrap_or_default();
            assert!(
                mode.contains("pidfd_getfd") && std::env::var_os("CAPSULE_TEST_IN_CONTAINER").is_some(),
                "the network guard is unavailable outside a container, or for another reason than a \
                 refused pidfd_getfd: {v}"
            );
            eprintln!("CONTAINER: the network guard cannot run here: {mode}");
        }
        guard
    })
}

/// Whether `nobody` exists and we may become it.
pub fn nobody_available() -> bool {
    is_root()
        && StdCommand::new("id")
            .arg("nobody")
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
}

/// Why this variant cannot run here (None: it can).
fn not_runnable(v: Variant) -> Option<&'static str> {
    if v.who == Who::Nobody && !nobody_available() {
        return Some("the `nobody` variant needs root and a `nobody` user");
    }
    if v.path == NetPath::Netns && !namespaces_available() {
        return Some("the netns variant: this kernel refuses (user) namespaces");
    }
    None
}

/// Whether this variant, one of several a test runs, can run here; prints
/// why not as a skipped part of the test.
pub fn runnable(v: Variant) -> bool {
    not_runnable(v).map(skip_part).is_none()
}

/// Whether the one variant a test runs can run here; prints why not as the
/// test's skip (the caller returns).
pub fn runnable_or_skip(v: Variant) -> bool {
    not_runnable(v).map(skip).is_none()
}

/// What a capsule run gave.
pub struct Run {
    pub status: i32,
    pub json: Value,
    pub stderr: String,
}

impl Run {
    pub fn stdout(&self) -> &str {
        self.json["stdout"].as_str().unwrap_or("")
    }
    pub fn child_stderr(&self) -> &str {
        self.json["stderr"].as_str().unwrap_or("")
    }
    pub fn denied_hosts(&self) -> Vec<String> {
        self.json["denied_hosts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|h| h.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }
    pub fn proxy_counter(&self, name: &str) -> u64 {
        self.json["usage"]["proxy"][name].as_u64().unwrap_or(0)
    }
    /// Assert the run used the expected path and return self.
    pub fn on_path(&self, v: Variant) -> &Self {
        let e = &self.json["enforcement"];
        assert_eq!(e["network"], "proxy", "{}", self.describe());
        assert_eq!(e["network_path"], v.path.name(), "{}", self.describe());
        assert_eq!(e["netns"], v.path == NetPath::Netns, "{}", self.describe());
        // The run's own loopback comes with its own network namespace only.
        assert_eq!(
            e["loopback"],
            v.path == NetPath::Netns,
            "{}",
            self.describe()
        );
        self
    }
    pub fn describe(&self) -> String {
        format!(
            "capsule exit {}; result {}; capsule stderr {}",
            self.status, self.json, self.stderr
        )
    }
}

/// `capsule exec --json --no-audit <args> -- <command>` as `v` says.
pub fn exec(v: Variant, args: &[&str], command: &[&str]) -> Run {
    exec_in(v, args, command, &[])
}

/// Like [`exec`], with extra environment for capsule itself.
pub fn exec_in(v: Variant, args: &[&str], command: &[&str], env: &[(&str, &str)]) -> Run {
    let home = shared_tempdir("capsule-proxy-home-");
    let bin = match v.who {
        Who::Invoker => capsule_bin(),
        Who::Nobody => nobody_bin().to_path_buf(),
    };
    let mut full: Vec<String> = vec![];
    if v.who == Who::Nobody {
        full.extend(["runuser", "-u", "nobody", "--"].map(String::from));
    }
    full.extend(["/usr/bin/env", "-i"].map(String::from));
    full.push(format!("PATH={TEST_PATH}"));
    full.push(format!("HOME={}", home.path().display()));
    full.push(format!("XDG_STATE_HOME={}", home.path().display()));
    full.push(format!("XDG_CONFIG_HOME={}", home.path().display()));
    if v.path.on_host() {
        full.push("CAPSULE_NO_NAMESPACES=1".into());
    }
    if v.path == NetPath::GuardFallback {
        full.push("CAPSULE_LANDLOCK_ABI_MAX=3".into());
    }
    // The mutation check's layer switch (scripts/mutation) passes through.
    if let Ok(m) = std::env::var("CAPSULE_MUTATE") {
        full.push(format!("CAPSULE_MUTATE={m}"));
    }
    for (k, val) in env {
        full.push(format!("{k}={val}"));
    }
    full.push(bin.display().to_string());
    full.extend(["exec", "--json"].map(String::from));
    full.extend(args.iter().map(|s| s.to_string()));
    full.push("--".into());
    full.extend(command.iter().map(|s| s.to_string()));

    let out = assert_cmd::Command::new(&full[0])
        .args(&full[1..])
        .current_dir(home.path())
        .timeout(Duration::from_secs(90))
        .output()
        .expect("run capsule");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "capsule printed no JSON result ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Run {
        status: out.status.code().unwrap_or(-1),
        json,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A self-signed certificate for `localhost` / 127.0.0.1, readable by everyone.
pub struct Cert {
    pub dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn cert() -> &'static Cert {
    static CERT: OnceLock<Cert> = OnceLock::new();
    CERT.get_or_init(|| {
        let d = process_tempdir("capsule-proxy-tls-", 0o755);
        let dir = fs::canonicalize(&d).expect("canonicalize");
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        let st = StdCommand::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
            ])
            .args([
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(st.success(), "openssl req failed");
        for f in [&cert, &key] {
            fs::set_permissions(f, fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        Cert { dir, cert, key }
    })
}

const ORIGIN_PY: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"hello from origin " + self.path.encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        sys.stderr.write("GET %s\n" % self.path); sys.stderr.flush()
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// An origin server on the host's loopback (killed on drop).
pub struct Origin {
    child: Child,
    pub port: u16,
}

impl Origin {
    pub fn http() -> Origin {
        Origin::start(&[])
    }
    pub fn https() -> Origin {
        let c = cert();
        Origin::start(&[c.cert.display().to_string(), c.key.display().to_string()])
    }
    fn start(extra: &[String]) -> Origin {
        let mut child = StdCommand::new(PYTHON)
            .arg("-c")
            .arg(ORIGIN_PY)
            .arg("origin")
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start origin");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("origin port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("origin printed {line:?}"));
        Origin { child, port }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

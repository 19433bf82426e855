//! Real servers for the credential tests (issue 38), all on 127.0.0.1 with
//! ephemeral ports, each in its own temp dir, each behind TLS with a
//! certificate from a test CA made here with the `openssl` CLI:
//!
//! - [`Echo`]: an HTTPS echo (python3 http.server + ssl) answering with the
//!   request's method, path and headers as JSON (the real token redacted, so a
//!   run can print the answer) and logging every raw request to a file the
//!   test reads on the host;
//! - [`GitServer`]: nginx fronting `git http-backend` through fcgiwrap, a bare
//!   repo with receive-pack enabled, 401 without the token;
//! - [`PypiServer`]: nginx (TLS, the same auth) fronting pypiserver (pinned,
//!   from PyPI, in a cached venv) holding one tiny wheel built here;
//! - [`NpmRegistry`]: verdaccio (pinned, from npm, in a cached dir) over
//!   HTTPS, htpasswd auth for access and publish, its token from the login API.
//!
//! Each server kills ITS OWN processes, by pid, on drop. A tool this machine
//! lacks skips the test with a printed reason ([`missing`]), except under
//! `CI=true` or `CAPSULE_CREDENTIALS_REQUIRED=1`, where it fails. Loopback
//! only: nothing here talks to any other address (the caches are built from
//! the package registries, once, outside any test traffic).
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[path = "../common/skip.rs"]
mod skip;
#[allow(unused_imports)]
pub use skip::{skip, skip_part};

mod caches;
pub mod clients;
pub mod run;
mod servers;
#[allow(unused_imports)]
pub use caches::{pypiserver_python, undici_dir, verdaccio_main, PYPISERVER, UNDICI, VERDACCIO};
#[allow(unused_imports)]
pub use servers::{Echo, GitServer, NpmRegistry, PypiServer, PYPI_PACKAGE, PYPI_VERSION};

/// A PATH without per-user shims.
pub const TEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
/// The interpreter of the echo server, the wheel builder and the clients.
pub const PYTHON: &str = "/usr/bin/python3";

/// Whether a missing tool fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("CAPSULE_CREDENTIALS_REQUIRED").is_ok_and(|v| v == "1")
}

/// A tool or package this machine lacks: the test skips, saying why, or
/// fails when [`required`]. Returns None so callers can `?` out.
pub fn missing<T>(reason: &str) -> Option<T> {
    if required() {
        panic!("CI=true / CAPSULE_CREDENTIALS_REQUIRED=1, and: {reason}");
    }
    skip(reason);
    None
}

/// The absolute path of PROG on [`TEST_PATH`], if any.
pub fn which(prog: &str) -> Option<PathBuf> {
    TEST_PATH
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
}

/// PROG's path, or the skip/failure naming the Debian package that has it.
pub fn need(prog: &str, package: &str) -> Option<PathBuf> {
    match which(prog) {
        Some(p) => Some(p),
        None => missing(&format!("no `{prog}` on PATH (apt-get install {package})")),
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A fresh token that cannot be confused with anything else in the output.
pub fn fresh_token(prefix: &str) -> String {
    let mut b = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .expect("read /dev/urandom");
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{prefix}{hex}")
}

/// Standard base64 (the `Basic` credentials the servers accept).
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A temp dir, world-readable (the unprivileged pass and the run read it).
pub fn tempdir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("tempdir");
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// Run a setup command on the host; panics with its output when it fails.
pub fn host(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The test CA and one server certificate (SAN localhost, 127.0.0.1) it signed.
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    /// Made with the `openssl` CLI in DIR (None: no openssl, skipped).
    pub fn new(dir: &Path) -> Option<Tls> {
        let openssl = need("openssl", "openssl")?;
        let p = |f: &str| dir.join(f);
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        host(
            Command::new(&openssl)
                .args(["req", "-x509", "-nodes", "-days", "2"])
                .args(ec)
                .args(["-subj", "/CN=capsule test CA"])
                .args(["-addext", "basicConstraints=critical,CA:TRUE"])
                .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
                .arg("-keyout")
                .arg(p("ca.key"))
                .arg("-out")
                .arg(p("ca.pem")),
            "openssl: the test CA",
        );
        host(
            Command::new(&openssl)
                .args(["req", "-nodes", "-subj", "/CN=localhost"])
                .args(ec)
                .arg("-keyout")
                .arg(p("server.key"))
                .arg("-out")
                .arg(p("server.csr")),
            "openssl: the server key",
        );
        fs::write(
            p("server.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        host(
            Command::new(&openssl)
                .args(["x509", "-req", "-days", "2", "-in"])
                .arg(p("server.csr"))
                .arg("-CA")
                .arg(p("ca.pem"))
                .arg("-CAkey")
                .arg(p("ca.key"))
                .args(["-CAcreateserial", "-extfile"])
                .arg(p("server.ext"))
                .arg("-out")
                .arg(p("server.pem")),
            "openssl: the server certificate",
        );
        for f in ["ca.pem", "server.pem", "server.key"] {
            fs::set_permissions(p(f), fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        Some(Tls {
            ca: p("ca.pem"),
            cert: p("server.pem"),
            key: p("server.key"),
        })
    }
}

/// One process a server started, killed (by its pid) and reaped on drop.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Start CMD with stdout+stderr to LOG.
    pub fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Proc {
        let f = fs::File::create(log).expect("create log");
        // Its own process group, so that Drop ends what it started too
        // (nginx's workers, fcgiwrap's children), and nothing else.
        std::os::unix::process::CommandExt::process_group(cmd, 0);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup log"))
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Proc {
            name,
            child,
            log: log.to_path_buf(),
        }
    }

    /// Panics (with its log) when the process has already exited.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!(
                "{} exited ({st}) during set-up; its log:\n{}",
                self.name,
                fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }

    /// Wait until PORT on 127.0.0.1 accepts connections (60 s at most).
    pub fn wait_port(&mut self, port: u16) {
        let start = Instant::now();
        loop {
            self.assert_alive();
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{} did not listen on 127.0.0.1:{port} within 60 s; its log:\n{}",
                self.name,
                fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until PATH exists (a unix socket).
    pub fn wait_path(&mut self, path: &Path) {
        let start = Instant::now();
        while !path.exists() {
            self.assert_alive();
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} made no {} within 30 s",
                self.name,
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Our own child and the group it leads (created for it in spawn), by
        // number: never by name.
        let pgid = self.child.id() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on 127.0.0.1 for a server that wants it in its config (the
/// listener is closed right before the server binds it; the set-up retries
/// once if another process took it meanwhile).
pub fn free_port() -> u16 {
    static SEEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let l = TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains(&port) {
            seen.push(port);
            return port;
        }
    }
}

/// The `Authorization` values the nginx-fronted servers accept: `Bearer
/// TOKEN`, or Basic with password TOKEN for the usual token user names
/// (nginx cannot decode Basic itself: each is listed, precomputed).
pub const BASIC_USERS: &[&str] = &[
    "x-access-token",
    "git",
    "__token__",
    "token",
    "ci",
    "oauth2",
];

pub fn accepted_authorizations(token: &str) -> Vec<String> {
    let mut v = vec![format!("Bearer {token}")];
    for u in BASIC_USERS {
        v.push(format!(
            "Basic {}",
            base64(format!("{u}:{token}").as_bytes())
        ));
    }
    v
}

/// An nginx config: TLS on 127.0.0.1:PORT, every request without an
/// accepted `Authorization` answered 401 with `WWW-Authenticate: Basic`,
/// the rest given to LOCATION (the body of `location /`).
pub fn nginx_conf(dir: &Path, tls: &Tls, port: u16, token: &str, location: &str) -> String {
    let d = dir.display();
    let user = if is_root() { "user root;\n" } else { "" };
    let mut map = String::new();
    for a in accepted_authorizations(token) {
        map.push_str(&format!("        \"{a}\" 1;\n"));
    }
    format!(
        r#"{user}worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {d}/nginx-access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    client_max_body_size 0;
    map_hash_bucket_size 256;
    map $http_authorization $capsule_auth_ok {{
        default 0;
{map}    }}
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name localhost;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        location / {{
            if ($capsule_auth_ok = 0) {{
                add_header WWW-Authenticate 'Basic realm="capsule-test"' always;
                return 401;
            }}
{location}
        }}
    }}
}}
"#,
        cert = tls.cert.display(),
        key = tls.key.display(),
    )
}

/// Start nginx with CONF (written to DIR/nginx.conf) in the foreground.
pub fn start_nginx(dir: &Path, conf: &str, port: u16) -> Option<Proc> {
    let nginx = match which("nginx") {
        Some(p) => p,
        None => return missing("no `nginx` on PATH (apt-get install nginx-light)"),
    };
    let path = dir.join("nginx.conf");
    fs::write(&path, conf).expect("write nginx.conf");
    let mut p = Proc::spawn(
        "nginx",
        Command::new(nginx)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(dir.join("nginx-startup.log"))
            .arg("-c")
            .arg(&path)
            .args(["-g", "daemon off;"]),
        &dir.join("nginx.log"),
    );
    p.wait_port(port);
    Some(p)
}

/// Read one line (a port number) a server prints when it listens.
pub fn read_port(child: &mut Child, name: &str) -> u16 {
    let out = child.stdout.take().expect("stdout piped");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{name}: read its port: {e}"));
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} printed no port: {line:?}"))
}

/// Write FILE with CONTENTS and mode 0644.
pub fn write_file(path: &Path, contents: &str) {
    let mut f = fs::File::create(path).expect("create file");
    f.write_all(contents.as_bytes()).expect("write file");
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

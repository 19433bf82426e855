//! The four servers. Each owns a temp dir (its config, logs, data, the test
//! CA) and its processes, which it kills by pid when dropped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{
    free_port, host, missing, need, nginx_conf, pypiserver_python, read_port, start_nginx, tempdir,
    verdaccio_main, which, write_file, Proc, Tls, PYTHON, TEST_PATH,
};

const ECHO_PY: &str = include_str!("echo.py");

/// The distribution the private index holds, and its version.
pub const PYPI_PACKAGE: &str = "capsule-egress-demo";
pub const PYPI_VERSION: &str = "0.1.0";

/// Writes a minimal pure-Python wheel: python3 -c WHEEL_PY OUTDIR.
const WHEEL_PY: &str = r#"
import base64, hashlib, sys, zipfile
name, ver, mod = "capsule_egress_demo", "0.1.0", "capsule_egress_demo"
info = f"{name}-{ver}.dist-info"
files = {
    f"{mod}/__init__.py": b'VALUE = "hello from the private index"\n',
    f"{info}/METADATA": b"Metadata-Version: 2.1\nName: capsule-egress-demo\nVersion: 0.1.0\n",
    f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: capsule-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(data)}")
record.append(f"{info}/RECORD,,")
files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
with zipfile.ZipFile(f"{sys.argv[1]}/{name}-{ver}-py3-none-any.whl", "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
"#;

/// The HTTPS echo: every request answered with its method, path and headers.
pub struct Echo {
    _proc: Proc,
    pub dir: tempfile::TempDir,
    pub tls: Tls,
    pub port: u16,
    /// One JSON line per request, raw (the real token unredacted): host only.
    pub log: PathBuf,
}

impl Echo {
    pub fn start(token: &str) -> Option<Echo> {
        let dir = tempdir("capsule-echo-");
        let tls = Tls::new(dir.path())?;
        let script = dir.path().join("echo.py");
        write_file(&script, ECHO_PY);
        let log = dir.path().join("requests.jsonl");
        write_file(&log, "");
        let mut cmd = Command::new(PYTHON);
        cmd.arg(&script)
            .arg(&tls.cert)
            .arg(&tls.key)
            .arg(token)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start the echo server");
        let port = read_port(&mut child, "the echo server");
        let proc = Proc {
            name: "echo",
            child,
            log: dir.path().join("echo.log"),
        };
        Some(Echo {
            _proc: proc,
            dir,
            tls,
            port,
            log,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    /// The raw requests the echo received so far.
    pub fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The raw Authorization header of each request to PATH.
    pub fn authorizations(&self, path: &str) -> Vec<Option<String>> {
        self.requests()
            .iter()
            .filter(|r| r["path"] == path)
            .map(|r| {
                r["headers"].as_array().and_then(|h| {
                    h.iter()
                        .find(|kv| {
                            kv[0]
                                .as_str()
                                .is_some_and(|k| k.eq_ignore_ascii_case("authorization"))
                        })
                        .and_then(|kv| kv[1].as_str().map(String::from))
                })
            })
            .collect()
    }
}

/// nginx + fcgiwrap + `git http-backend`: one bare repo, `demo.git`, with
/// receive-pack enabled and one commit (README) on `main`.
pub struct GitServer {
    _nginx: Proc,
    _fcgiwrap: Proc,
    pub dir: tempfile::TempDir,
    pub tls: Tls,
    pub port: u16,
    pub bare: PathBuf,
}

/// A git command for set-up on the host, with no user or system config.
pub fn git(home: &Path) -> Command {
    let mut c = Command::new("git");
    c.env_clear()
        .env("PATH", TEST_PATH)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "user.name=capsule test",
            "-c",
            "user.email=test@capsule.invalid",
        ])
        .args(["-c", "init.defaultBranch=main"]);
    c
}

impl GitServer {
    pub fn start(token: &str) -> Option<GitServer> {
        need("git", "git")?;
        let fcgiwrap = need("fcgiwrap", "fcgiwrap")?;
        which("nginx").or_else(|| missing("no `nginx` on PATH (apt-get install nginx-light)"))?;
        let exec_path = host(git(Path::new("/")).arg("--exec-path"), "git --exec-path");
        let backend = Path::new(exec_path.trim()).join("git-http-backend");
        if !backend.exists() {
            return missing(&format!("no {} (the git package)", backend.display()));
        }
        let dir = tempdir("capsule-git-");
        let d = dir.path();
        let tls = Tls::new(d)?;
        let bare = d.join("repos/demo.git");
        let seed = d.join("seed");
        fs::create_dir_all(&seed).expect("mkdir seed");
        host(
            git(d).args(["init", "-q", "--bare"]).arg(&bare),
            "git init --bare",
        );
        host(
            git(d)
                .arg("-C")
                .arg(&bare)
                .args(["config", "http.receivepack", "true"]),
            "git config",
        );
        host(git(d).args(["init", "-q"]).arg(&seed), "git init seed");
        fs::write(seed.join("README"), "seeded by the test\n").expect("write README");
        host(
            git(d).arg("-C").arg(&seed).args(["add", "README"]),
            "git add",
        );
        host(
            git(d).arg("-C").arg(&seed).args(["commit", "-qm", "seed"]),
            "git commit",
        );
        host(
            git(d)
                .arg("-C")
                .arg(&seed)
                .args(["push", "-q"])
                .arg(&bare)
                .arg("main"),
            "git push seed",
        );
        let sock = d.join("fcgiwrap.sock");
        let mut fcgi = Proc::spawn(
            "fcgiwrap",
            Command::new(fcgiwrap)
                .args(["-c", "2", "-s"])
                .arg(format!("unix:{}", sock.display())),
            &d.join("fcgiwrap.log"),
        );
        fcgi.wait_path(&sock);
        let location = format!(
            "            fastcgi_pass unix:{sock};\n\
             fastcgi_param SCRIPT_FILENAME {backend};\n\
             fastcgi_param GIT_PROJECT_ROOT {root};\n\
             fastcgi_param GIT_HTTP_EXPORT_ALL \"\";\n\
             fastcgi_param GIT_CONFIG_NOSYSTEM 1;\n\
             fastcgi_param HOME {home};\n\
             fastcgi_param PATH_INFO $uri;\n\
             fastcgi_param REMOTE_USER ci;\n\
             fastcgi_param QUERY_STRING $query_string;\n\
             fastcgi_param REQUEST_METHOD $request_method;\n\
             fastcgi_param CONTENT_TYPE $content_type;\n\
             fastcgi_param CONTENT_LENGTH $content_length;\n",
            sock = sock.display(),
            backend = backend.display(),
            root = d.join("repos").display(),
            home = d.display(),
        );
        let port = free_port();
        let nginx = start_nginx(d, &nginx_conf(d, &tls, port, token, &location), port)?;
        Some(GitServer {
            _nginx: nginx,
            _fcgiwrap: fcgi,
            dir,
            tls,
            port,
            bare,
        })
    }

    pub fn url(&self) -> String {
        format!("https://localhost:{}/demo.git", self.port)
    }

    /// The subject of `main`'s head commit in the bare repo.
    pub fn head_subject(&self) -> String {
        host(
            git(self.dir.path()).arg("-C").arg(&self.bare).args([
                "log",
                "-1",
                "--format=%s",
                "main",
            ]),
            "git log",
        )
        .trim()
        .to_string()
    }
}

/// nginx (TLS, token auth) fronting pypiserver, which holds one wheel.
pub struct PypiServer {
    _nginx: Proc,
    _pypiserver: Proc,
    pub dir: tempfile::TempDir,
    pub tls: Tls,
    pub port: u16,
}

impl PypiServer {
    pub fn start(token: &str) -> Option<PypiServer> {
        which("nginx").or_else(|| missing("no `nginx` on PATH (apt-get install nginx-light)"))?;
        let py = pypiserver_python()?;
        let dir = tempdir("capsule-pypi-");
        let d = dir.path();
        let tls = Tls::new(d)?;
        let packages = d.join("packages");
        fs::create_dir_all(&packages).expect("mkdir packages");
        host(
            Command::new(PYTHON).args(["-c", WHEEL_PY]).arg(&packages),
            "build the test wheel",
        );
        let inner = free_port();
        let mut server = Proc::spawn(
            "pypiserver",
            Command::new(py)
                .args(["-m", "pypiserver", "run", "-i", "127.0.0.1", "-p"])
                .arg(inner.to_string())
                .args(["-a", ".", "-P", ".", "--server", "wsgiref"])
                .arg(&packages)
                .env_clear()
                .env("PATH", TEST_PATH)
                .env("HOME", d),
            &d.join("pypiserver.log"),
        );
        server.wait_port(inner);
        let location = format!(
            "            proxy_pass http://127.0.0.1:{inner};\n\
             proxy_set_header Host $http_host;\n\
             proxy_set_header X-Forwarded-Proto https;\n"
        );
        let port = free_port();
        let nginx = start_nginx(d, &nginx_conf(d, &tls, port, token, &location), port)?;
        Some(PypiServer {
            _nginx: nginx,
            _pypiserver: server,
            dir,
            tls,
            port,
        })
    }

    pub fn index_url(&self) -> String {
        format!("https://localhost:{}/simple/", self.port)
    }
}

/// verdaccio over HTTPS: access and publish need a user's token; the user
/// `ci` is preseeded in its htpasswd (registration disabled) and the token
/// comes from the login API (`PUT /-/user/org.couchdb.user:ci`, the user
/// authenticated by Basic, as `npm login` does).
/// One package, `capsule-egress-seed@1.0.0`, is published at set-up.
pub struct NpmRegistry {
    _verdaccio: Proc,
    pub dir: tempfile::TempDir,
    pub tls: Tls,
    pub port: u16,
    /// The token the login API gave (what the credential injects).
    pub token: String,
}

pub const NPM_SEED: &str = "capsule-egress-seed";

impl NpmRegistry {
    pub fn start() -> Option<NpmRegistry> {
        let node = need("node", "nodejs")?;
        let npm = need("npm", "npm")?;
        let curl = need("curl", "curl")?;
        let main = verdaccio_main()?;
        let dir = tempdir("capsule-npm-");
        let d = dir.path();
        let tls = Tls::new(d)?;
        let password = super::fresh_token("pw");
        let hash = host(
            Command::new("openssl").args(["passwd", "-apr1", &password]),
            "openssl passwd",
        );
        write_file(&d.join("htpasswd"), &format!("ci:{}\n", hash.trim()));
        let port = free_port();
        let conf = d.join("config.yaml");
        write_file(&conf, &verdaccio_conf(d, &tls, port));
        let mut proc = Proc::spawn(
            "verdaccio",
            Command::new(node)
                .arg(main)
                .arg("--config")
                .arg(&conf)
                .env_clear()
                .env("PATH", TEST_PATH)
                .env("HOME", d),
            &d.join("verdaccio.log"),
        );
        proc.wait_port(port);
        let body = format!(r#"{{"name":"ci","password":"{password}"}}"#);
        let out = host(
            Command::new(curl)
                .args(["-sS", "--fail-with-body", "--max-time", "60", "--cacert"])
                .arg(&tls.ca)
                .args(["-u", &format!("ci:{password}")])
                .args([
                    "-X",
                    "PUT",
                    "-H",
                    "Content-Type: application/json",
                    "-d",
                    &body,
                ])
                .arg(format!(
                    "https://localhost:{port}/-/user/org.couchdb.user:ci"
                )),
            "verdaccio login",
        );
        let v: Value = serde_json::from_str(&out).expect("verdaccio login: JSON");
        let token = v["token"]
            .as_str()
            .expect("verdaccio login: a token")
            .to_string();
        let reg = NpmRegistry {
            _verdaccio: proc,
            dir,
            tls,
            port,
            token,
        };
        reg.publish_seed(&npm);
        Some(reg)
    }

    pub fn url(&self) -> String {
        format!("https://localhost:{}/", self.port)
    }

    /// The `.npmrc` line giving TOKEN for this registry.
    pub fn auth_line(&self, token: &str) -> String {
        format!("//localhost:{}/:_authToken={token}\n", self.port)
    }

    /// Whether the registry holds NAME (asked with the registry's token).
    pub fn has_package(&self, name: &str) -> bool {
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "30",
                "--cacert",
            ])
            .arg(&self.tls.ca)
            .arg("-H")
            .arg(format!("Authorization: Bearer {}", self.token))
            .arg(format!("{}{name}", self.url()))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout) == "200"
    }

    fn publish_seed(&self, npm: &Path) {
        let d = self.dir.path();
        let pkg = d.join("seed");
        fs::create_dir_all(&pkg).expect("mkdir seed");
        write_file(
            &pkg.join("package.json"),
            &format!(r#"{{"name":"{NPM_SEED}","version":"1.0.0","main":"index.js"}}"#),
        );
        write_file(&pkg.join("index.js"), "module.exports = 'seeded';\n");
        let rc = d.join("npmrc");
        write_file(
            &rc,
            &format!("registry={}\n{}", self.url(), self.auth_line(&self.token)),
        );
        host(
            Command::new(npm)
                .args(["publish", "--userconfig"])
                .arg(&rc)
                .arg("--cafile")
                .arg(&self.tls.ca)
                .current_dir(&pkg)
                .env_clear()
                .env("PATH", TEST_PATH)
                .env("HOME", d)
                .env("npm_config_cache", d.join("npm-cache")),
            "npm publish (the seed package)",
        );
    }
}

fn verdaccio_conf(d: &Path, tls: &Tls, port: u16) -> String {
    format!(
        "storage: {storage}\n\
         auth:\n  htpasswd:\n    file: {htpasswd}\n    max_users: -1\n\
         uplinks: {{}}\n\
         packages:\n  '**':\n    access: $authenticated\n    publish: $authenticated\n    unpublish: $authenticated\n\
         listen: https://127.0.0.1:{port}\n\
         https:\n  key: {key}\n  cert: {cert}\n  ca: {ca}\n\
         web:\n  enable: false\n\
         publish:\n  allow_offline: true\n\
         log: {{type: stdout, format: pretty, level: warn}}\n",
        storage = d.join("storage").display(),
        htpasswd = d.join("htpasswd").display(),
        key = tls.key.display(),
        cert = tls.cert.display(),
        ca = tls.ca.display(),
    )
}

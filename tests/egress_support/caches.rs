//! The pinned server packages, each installed once per user into a cached
//! directory under /tmp (like the conformance venvs of integration/python):
//! built in a private directory, then renamed into place, so a half-built
//! cache is never used. `CAPSULE_SERVERS_CACHE` moves them elsewhere.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::{missing, which, PYTHON, TEST_PATH};

/// pypiserver from PyPI (the private Python index).
pub const PYPISERVER: &str = "pypiserver==2.4.2";
/// verdaccio from npm (the private npm registry): 6.5.2 is the last release
/// that runs on Debian 12's node 18 (6.6 wants node 20, 6.9 node 22).
pub const VERDACCIO: &str = "verdaccio@6.5.2";
/// undici from npm: node's fetch through a proxy (node 18/20's global fetch
/// ignores HTTPS_PROXY); 6.x runs on Debian 12's node 18.
pub const UNDICI: &str = "undici@6.29.1";

fn base() -> PathBuf {
    std::env::var_os("CAPSULE_SERVERS_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The cache directory NAME (per user), built by BUILD into a fresh private
/// directory when absent. BUILD returns Err(reason) when it cannot.
fn cached(name: &str, build: impl FnOnce(&Path) -> Result<(), String>) -> Result<PathBuf, String> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let key = name.replace(['@', '=', '/'], "-");
    let dir = base().join(format!("capsule-servers-{key}-{}", uid()));
    if dir.join(".capsule-ok").exists() {
        return Ok(dir);
    }
    let tmp = base().join(format!(
        "capsule-servers-{key}-{}.build-{}",
        uid(),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| format!("mkdir {}: {e}", tmp.display()))?;
    if let Err(e) = build(&tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    fs::write(tmp.join(".capsule-ok"), format!("{name}\n")).map_err(|e| e.to_string())?;
    let _ = fs::remove_dir_all(&dir);
    if let Err(e) = fs::rename(&tmp, &dir) {
        let _ = fs::remove_dir_all(&tmp);
        if !dir.join(".capsule-ok").exists() {
            return Err(format!("rename into {}: {e}", dir.display()));
        }
    }
    Ok(dir)
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .env("PATH", TEST_PATH)
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: String = err
        .chars()
        .rev()
        .take(600)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Err(format!("{what} failed: {}", tail.trim()))
}

/// The python of the pypiserver venv (None: cannot be built, skipped).
pub fn pypiserver_python() -> Option<PathBuf> {
    let got = cached(PYPISERVER, |d| {
        run(
            Command::new(PYTHON).args(["-m", "venv"]).arg(d),
            "python3 -m venv (apt-get install python3-venv)",
        )?;
        run(
            Command::new(d.join("bin/python")).args([
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                PYPISERVER,
            ]),
            &format!("pip install {PYPISERVER}"),
        )
    });
    match got {
        Ok(d) => Some(d.join("bin/python")),
        Err(e) => missing(&format!("cannot build the {PYPISERVER} venv: {e}")),
    }
}

/// `npm install SPEC` into a cached prefix; the prefix.
fn npm_cached(spec: &str) -> Result<PathBuf, String> {
    let npm = which("npm").ok_or("no `npm` on PATH (apt-get install npm)")?;
    cached(spec, |d| {
        run(
            Command::new(npm)
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--omit=dev",
                    "--prefix",
                ])
                .arg(d)
                .arg(spec)
                .env("npm_config_cache", d.join(".npm-cache"))
                .env("HOME", d)
                .envs(system_roots()),
            &format!("npm install {spec}"),
        )?;
        let _ = fs::remove_dir_all(d.join(".npm-cache"));
        Ok(())
    })
}

/// node trusts its own copy of Mozilla's roots: the host's bundle too, when
/// the environment names none (scripts/test's unprivileged pass starts from
/// `env -i`; a machine whose registry traffic passes a TLS-inspecting proxy
/// has that proxy's CA only there).
fn system_roots() -> Vec<(&'static str, PathBuf)> {
    let system = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if std::env::var_os("NODE_EXTRA_CA_CERTS").is_none() && system.exists() {
        vec![("NODE_EXTRA_CA_CERTS", system.to_path_buf())]
    } else {
        vec![]
    }
}

/// verdaccio's entry script (None: cannot be installed, skipped).
pub fn verdaccio_main() -> Option<PathBuf> {
    match npm_cached(VERDACCIO) {
        Ok(d) => Some(d.join("node_modules/verdaccio/bin/verdaccio")),
        Err(e) => missing(&format!("cannot install {VERDACCIO}: {e}")),
    }
}

/// The node_modules holding undici (None: cannot be installed, skipped).
pub fn undici_dir() -> Option<PathBuf> {
    match npm_cached(UNDICI) {
        Ok(d) => Some(d.join("node_modules")),
        Err(e) => missing(&format!("cannot install {UNDICI}: {e}")),
    }
}

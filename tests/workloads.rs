//! Everyday workloads under a plain policy: the real tools, not probes.
//!
//! Each test runs one real program inside `capsule exec` with a write grant
//! on a scratch directory, and checks its output: Python multiprocessing and
//! shared memory, a venv with pip installing a local wheel, a real project's
//! own pytest suite, node worker threads and child processes, git between
//! local repositories, `make -j2` of a small C project, sqlite in WAL mode.
//! A tool the machine lacks is skipped with the reason.

mod common;

use common::*;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `capsule exec --json --allow-write DIR --cwd DIR -- sh -c SCRIPT`.
fn sh_in(sb: &Sandbox, dir: &Path, script: &str) -> Run {
    let d = dir.to_string_lossy().to_string();
    sb.exec_json(
        &[
            "--allow-write",
            &d,
            "--cwd",
            &d,
            "--timeout",
            "240",
            "--max-output",
            "4000000",
        ],
        &["/bin/sh", "-c", script],
    )
}

fn view(run: &Run) -> bool {
    !run.json()["enforcement"]["view"].is_null()
}

#[test]
fn python_multiprocessing_pool_executor_and_shared_memory() {
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    let code = r#"
import concurrent.futures, multiprocessing as mp
from multiprocessing import shared_memory
def sq(x): return x * x
if __name__ == "__main__":
    with mp.Pool(2) as p:
        print("pool", sum(p.map(sq, range(10))))
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        print("executor", sum(ex.map(sq, range(10))))
    sm = shared_memory.SharedMemory(create=True, size=16)
    sm.buf[:3] = b"abc"
    other = shared_memory.SharedMemory(name=sm.name)
    print("shm", bytes(other.buf[:3]).decode())
    other.close(); sm.close(); sm.unlink()
"#;
    fs::write(dir.join("mp.py"), code).unwrap();
    let run = sh_in(&sb, &dir, &format!("{} mp.py", python()));
    if !view(&run) {
        // No namespaces: /dev/shm is not granted (a gap enforcement.missing lists).
        let missing = run.json()["enforcement"]["missing"].to_string();
        assert!(missing.contains("/dev/shm"), "{}", run.ctx());
        skip("no namespaces here: POSIX semaphores need the view's private /dev/shm");
        return;
    }
    run.assert_code(0);
    let out = run.child_stdout();
    assert!(out.contains("pool 285"), "{}", run.ctx());
    assert!(out.contains("executor 285"), "{}", run.ctx());
    assert!(out.contains("shm abc"), "{}", run.ctx());
}

/// A minimal pure-Python wheel, written by hand (no build backend needed).
fn write_wheel(dir: &Path) -> String {
    let name = "capsuletoy-1.0-py3-none-any.whl";
    let files: [(&str, &str); 3] = [
        ("capsuletoy/__init__.py", "VALUE = 'toy-42'\n"),
        (
            "capsuletoy-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: capsuletoy\nVersion: 1.0\n",
        ),
        (
            "capsuletoy-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: capsule-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ];
    // A zip with stored (uncompressed) entries, built with Python's zipfile
    // so the test needs no zip crate.
    let script = format!(
        "import zipfile,sys\nz=zipfile.ZipFile(sys.argv[1],'w')\nfiles={files:?}\nrec=[]\nfor n,c in files:\n    z.writestr(n,c); rec.append(n+',,')\nrec.append('capsuletoy-1.0.dist-info/RECORD,,')\nz.writestr('capsuletoy-1.0.dist-info/RECORD','\\n'.join(rec)+'\\n')\nz.close()\n",
        files = files.iter().map(|(n, c)| (n.to_string(), c.to_string())).collect::<Vec<_>>()
    );
    let path = dir.join(name);
    let st = Command::new(python())
        .args(["-c", &script])
        .arg(&path)
        .status()
        .expect("python");
    assert!(st.success(), "building the test wheel failed");
    name.to_string()
}

#[test]
fn venv_and_pip_install_from_a_local_wheel() {
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    let wheels = sb.mkdir("work/wheels");
    write_wheel(&wheels);
    let py = python();
    let script = format!(
        "{py} -m venv v && v/bin/python -m pip install -q --no-index --find-links wheels capsuletoy \
         && v/bin/python -c 'import capsuletoy; print(capsuletoy.VALUE)'"
    );
    let run = sh_in(&sb, &dir, &script);
    if run.child_stderr().contains("ensurepip is not") {
        skip("this Python has no ensurepip (Debian: apt-get install python3-venv)");
        return;
    }
    run.assert_code(0);
    assert!(run.child_stdout().contains("toy-42"), "{}", run.ctx());
}

#[test]
fn a_real_projects_own_pytest_suite_runs() {
    // six's own test suite, from its sdist (PyPI), under the system pytest.
    let py = python();
    if Command::new(&py)
        .args(["-c", "import pytest"])
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        skip("the system Python has no pytest (apt-get install python3-pytest)");
        return;
    }
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    let cache = std::env::var("CAPSULE_TEST_SDIST_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join(format!("capsule-sdists-{}", nix_uid())));
    let _ = fs::create_dir_all(&cache);
    let sdist = cache.join("six-1.16.0.tar.gz");
    if !sdist.exists() {
        let out = Command::new(&py)
            .args([
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
            ])
            .arg(&cache)
            .arg("six==1.16.0")
            .output();
        if !sdist.exists() {
            skip(&format!(
                "cannot download the six sdist from PyPI: {:?}",
                out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            ));
            return;
        }
    }
    let st = Command::new("tar")
        .arg("xzf")
        .arg(&sdist)
        .arg("-C")
        .arg(&dir)
        .status()
        .expect("tar");
    assert!(st.success());
    let src = dir.join("six-1.16.0");
    let run = sh_in(
        &sb,
        &src,
        &format!("{py} -m pytest -q -p no:cacheprovider test_six.py 2>&1 | tail -3"),
    );
    run.assert_code(0);
    let out = run.child_stdout();
    assert!(
        out.contains("passed") && !out.contains("failed"),
        "{}",
        run.ctx()
    );
}

fn nix_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

#[test]
fn node_worker_threads_and_child_processes() {
    if !have("node") {
        skip("node is not installed");
        return;
    }
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    let js = r#"
const { Worker } = require('worker_threads');
const cp = require('child_process');
const w = new Worker("require('worker_threads').parentPort.postMessage(6*7)", { eval: true });
w.on('message', (m) => {
  console.log('worker', m);
  console.log('child', cp.execFileSync('/bin/echo', ['hi']).toString().trim());
  const c = cp.spawnSync(process.execPath, ['-e', 'console.log(process.pid > 0)']);
  console.log('node-child', c.stdout.toString().trim());
});
"#;
    fs::write(dir.join("w.js"), js).unwrap();
    let run = sh_in(&sb, &dir, "node w.js");
    run.assert_code(0);
    let out = run.child_stdout();
    assert!(out.contains("worker 42"), "{}", run.ctx());
    assert!(out.contains("child hi"), "{}", run.ctx());
    assert!(out.contains("node-child true"), "{}", run.ctx());
}

#[test]
fn git_clone_commit_push_between_local_repositories() {
    if !have("git") {
        skip("git is not installed");
        return;
    }
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    let script = "set -e
git init -q --bare remote.git
git clone -q remote.git w 2>/dev/null
cd w
echo hello > f.txt
git add f.txt
git -c user.name=t -c user.email=t@example.invalid commit -q -m first
git push -q origin HEAD:main
cd ..
git clone -q -b main remote.git w2
cat w2/f.txt";
    let run = sh_in(&sb, &dir, script);
    run.assert_code(0);
    assert!(run.child_stdout().contains("hello"), "{}", run.ctx());
}

#[test]
fn make_j2_builds_a_small_c_project() {
    if !have("make") || !have("gcc") {
        skip("make or gcc is not installed");
        return;
    }
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    fs::write(dir.join("a.c"), "int a(void) { return 40; }\n").unwrap();
    fs::write(dir.join("b.c"), "int b(void) { return 2; }\n").unwrap();
    fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\nint a(void); int b(void);\nint main(void) { printf(\"%d\\n\", a() + b()); return 0; }\n",
    )
    .unwrap();
    let mut mk = fs::File::create(dir.join("Makefile")).unwrap();
    mk.write_all(
        b"prog: main.o a.o b.o\n\tgcc -o prog main.o a.o b.o\n%.o: %.c\n\tgcc -c -o $@ $<\n",
    )
    .unwrap();
    drop(mk);
    // The built program is in a writable place: executing it needs an exec
    // grant there too (capsule's rule: nothing written runs unless granted).
    let d = dir.to_string_lossy().to_string();
    let run = sb.exec_json(
        &[
            "--allow-write",
            &d,
            "--allow-exec",
            &d,
            "--cwd",
            &d,
            "--timeout",
            "120",
        ],
        &["/bin/sh", "-c", "make -s -j2 && ./prog"],
    );
    run.assert_code(0);
    assert!(run.child_stdout().trim().ends_with("42"), "{}", run.ctx());
}

#[test]
fn sqlite_in_wal_mode() {
    let sb = Sandbox::new();
    let dir = sb.mkdir("work");
    let code = "import sqlite3\nc=sqlite3.connect('db.sqlite')\nprint(c.execute('pragma journal_mode=wal').fetchone()[0])\nc.execute('create table t(x)')\nc.executemany('insert into t values (?)', [(i,) for i in range(100)])\nc.commit()\nd=sqlite3.connect('db.sqlite')\nprint(d.execute('select sum(x) from t').fetchone()[0])\n";
    fs::write(dir.join("db.py"), code).unwrap();
    let run = sh_in(&sb, &dir, &format!("{} db.py", python()));
    run.assert_code(0);
    let out = run.child_stdout();
    assert!(out.contains("wal") && out.contains("4950"), "{}", run.ctx());
}

/// Serve DIR over HTTP on 127.0.0.1 (python's http.server); the port and the
/// server process (killed on drop).
struct Origin {
    port: u16,
    child: std::process::Child,
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Option<Origin> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new(python())
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--directory",
        ])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let origin = Origin { port, child };
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(origin);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

#[test]
fn pip_installs_through_capsules_proxy_from_a_loopback_index() {
    // A PEP 503 index on loopback; pip inside the sandbox reaches it only
    // through capsule's egress proxy (HTTP_PROXY), in proxy mode.
    let sb = Sandbox::new();
    let index = sb.mkdir("index");
    let wheel = write_wheel(&index);
    fs::create_dir_all(index.join("simple/capsuletoy")).unwrap();
    fs::write(
        index.join("simple/capsuletoy/index.html"),
        format!("<html><body><a href=\"../../{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
    let Some(origin) = serve(&index) else {
        skip("cannot start python's http.server on loopback");
        return;
    };
    let dir = sb.mkdir("work");
    let d = dir.to_string_lossy().to_string();
    let url = format!("http://127.0.0.1:{}/simple", origin.port);
    let script = format!(
        "{py} -m venv v && v/bin/python -m pip install -q --no-cache-dir --index-url {url} \
         --trusted-host 127.0.0.1 capsuletoy && v/bin/python -c 'import capsuletoy; print(capsuletoy.VALUE)'",
        py = python()
    );
    let run = sb.exec_json(
        &[
            "--net",
            "proxy",
            "--allow-host",
            "127.0.0.1",
            "--allow-write",
            &d,
            "--cwd",
            &d,
            "--timeout",
            "240",
        ],
        &["/bin/sh", "-c", &script],
    );
    run.assert_code(0);
    assert!(run.child_stdout().contains("toy-42"), "{}", run.ctx());
    let allowed = run.json()["usage"]["proxy"].to_string();
    assert!(!allowed.is_empty(), "{}", run.ctx());
    // And without the proxy the same install cannot reach the index.
    let run = sb.exec_json(
        &["--allow-write", &d, "--cwd", &d, "--timeout", "120"],
        &[
            "/bin/sh",
            "-c",
            &format!("v/bin/python -m pip download -q --no-cache-dir -d dl --index-url {url} --trusted-host 127.0.0.1 capsuletoy"),
        ],
    );
    assert_ne!(
        run.json()["exit_code"],
        0,
        "pip reached the index without the proxy{}",
        run.ctx()
    );
}

#[test]
fn npm_installs_through_capsules_proxy_from_a_loopback_registry() {
    // A minimal npm registry on loopback (the package document and its
    // tarball as static files); npm inside the sandbox reaches it only
    // through capsule's egress proxy.
    if !have("npm") || !have("tar") {
        skip("npm or tar is not installed");
        return;
    }
    let sb = Sandbox::new();
    let reg = sb.mkdir("registry");
    let pkg = sb.mkdir("pkgsrc/package");
    fs::write(
        pkg.join("package.json"),
        r#"{"name":"capsuletoy","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    fs::write(pkg.join("index.js"), "module.exports = 'toy-npm-42';\n").unwrap();
    let tgz = reg.join("capsuletoy-1.0.0.tgz");
    let st = Command::new("tar")
        .arg("czf")
        .arg(&tgz)
        .arg("-C")
        .arg(sb.path("pkgsrc"))
        .arg("package")
        .status()
        .expect("tar");
    assert!(st.success());
    let sha1 = Command::new("sha1sum").arg(&tgz).output().expect("sha1sum");
    let sha1 = String::from_utf8_lossy(&sha1.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let Some(origin) = serve(&reg) else {
        skip("cannot start python's http.server on loopback");
        return;
    };
    let base = format!("http://127.0.0.1:{}", origin.port);
    fs::write(
        reg.join("capsuletoy"),
        format!(
            r#"{{"name":"capsuletoy","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"capsuletoy","version":"1.0.0","main":"index.js","dist":{{"tarball":"{base}/capsuletoy-1.0.0.tgz","shasum":"{sha1}"}}}}}}}}"#
        ),
    )
    .unwrap();
    let dir = sb.mkdir("work");
    let d = dir.to_string_lossy().to_string();
    let script = format!(
        "npm install --no-audit --no-fund --loglevel=error --registry {base}/ capsuletoy >/dev/null && \
         node -e \"console.log(require('capsuletoy'))\""
    );
    let run = sb.exec_json(
        &[
            "--net",
            "proxy",
            "--allow-host",
            "127.0.0.1",
            "--allow-write",
            &d,
            "--cwd",
            &d,
            "--timeout",
            "240",
        ],
        &["/bin/sh", "-c", &script],
    );
    run.assert_code(0);
    assert!(run.child_stdout().contains("toy-npm-42"), "{}", run.ctx());
}

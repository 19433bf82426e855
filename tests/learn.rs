//! `capsule learn`: run a command confined, watch what the sandbox refused,
//! write a draft policy that lets the same command run. Three real workloads
//! (pytest of a small project, `pip install` from a local wheel into a venv,
//! `make` of a small C project), each then run with `capsule exec --policy
//! DRAFT`; the draft never grants `/`, `$HOME`, `~/.ssh` or `/etc/shadow`,
//! and the key every workload tries to read is refused as a credential store.
//! Hosts are learnt only with `--learn-hosts` (a loopback origin), and
//! learning again with the draft as the base adds nothing.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! lowered Landlock ABIs).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A sandbox whose fake HOME holds an SSH key the workloads try to read.
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    sb.write("home/.ssh/id_rsa", "-----BEGIN KEY-----\nsecret\n");
    sb
}

/// Whether `prog ARGS` runs and succeeds on the host.
fn has(prog: &str, args: &[&str]) -> bool {
    std::process::Command::new(prog)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The key's absolute path (the child's HOME is its own, not this one).
fn key(sb: &Sandbox) -> String {
    sb.home.join(".ssh/id_rsa").display().to_string()
}

/// `capsule learn ARGS` from CWD.
fn learn(sb: &Sandbox, cwd: &Path, args: &[&str]) -> Run {
    let mut v: Vec<String> = vec!["learn".into()];
    v.extend(args.iter().map(|s| s.to_string()));
    sb.run_in(&v, cwd, b"")
}

/// `capsule exec --policy DRAFT -- CMD` from CWD.
fn exec_draft(sb: &Sandbox, cwd: &Path, draft: &Path, cmd: &[&str]) -> Run {
    let mut v: Vec<String> = vec![
        "exec".into(),
        "--policy".into(),
        draft.display().to_string(),
        "--".into(),
    ];
    v.extend(cmd.iter().map(|s| s.to_string()));
    sb.run_in(&v, cwd, b"")
}

/// The draft, parsed.
fn parse(draft: &Path) -> Value {
    let text = std::fs::read_to_string(draft)
        .unwrap_or_else(|e| panic!("no draft at {}: {e}", draft.display()));
    serde_saphyr::from_str::<Value>(&text)
        .unwrap_or_else(|e| panic!("the draft does not parse: {e}\n{text}"))
}

/// Every path the draft grants (read, write, exec), `~` expanded.
fn grants(d: &Value, home: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for kind in ["read", "write", "exec"] {
        for e in d["filesystem"][kind]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let raw = e
                .as_str()
                .map(str::to_string)
                .or_else(|| e["path"].as_str().map(str::to_string))
                .unwrap_or_default();
            let raw = raw.trim_end_matches('?');
            let p = match raw.strip_prefix('~') {
                Some(rest) => PathBuf::from(format!("{}{rest}", home.display())),
                None => PathBuf::from(raw),
            };
            out.push((kind.to_string(), p));
        }
    }
    out
}

/// The draft never grants `/`, $HOME, anything of ~/.ssh, or /etc/shadow.
fn assert_safe(d: &Value, sb: &Sandbox) {
    for (kind, p) in grants(d, &sb.home) {
        assert!(p != Path::new("/"), "{kind} grant of /: {d:#}");
        assert!(p != sb.home, "{kind} grant of $HOME: {d:#}");
        assert!(
            !p.starts_with(sb.home.join(".ssh")),
            "{kind} grant of ~/.ssh: {d:#}"
        );
        assert!(
            !sb.home.starts_with(&p),
            "{kind} grant of {} holds $HOME: {d:#}",
            p.display()
        );
        assert!(p != Path::new("/etc/shadow"), "{kind} grant of /etc/shadow");
        assert!(p != Path::new("/etc"), "{kind} grant of /etc wholesale");
    }
}

/// Whether the observer watched file accesses on this host; else skip.
fn observed(r: &Run) -> bool {
    if r.stderr.contains("file accesses were not observed") {
        skip(&format!(
            "learn could not observe file accesses here: {}",
            r.stderr
        ));
        return false;
    }
    true
}

/// learn said it refused to grant the key, as a credential store.
fn assert_key_refused(r: &Run, sb: &Sandbox) {
    let key = sb.home.join(".ssh/id_rsa");
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("not granted") && l.contains(&*key.to_string_lossy()))
        .unwrap_or_else(|| panic!("the key's refusal is not listed{}", r.ctx()));
    assert!(line.contains("credential store"), "{line}");
}

fn assert_learnt(r: &Run) {
    assert_eq!(r.code, Some(0), "learn failed{}", r.ctx());
    assert!(
        r.stderr.contains("capsule learn: draft"),
        "no summary{}",
        r.ctx()
    );
}

/// (1) pytest of a project that reads a data file outside every grant.
#[test]
fn pytest_of_a_project_reading_data_outside_the_grants() {
    let sb = sandbox();
    let data = sb.write("data/table.csv", "a,b\n1,2\n");
    let proj = sb.mkdir("proj");
    sb.write(
        "proj/test_data.py",
        &format!(
            "import os\n\
             def test_reads_the_table():\n\
             \x20   try:\n\
             \x20       open({:?}).read()\n\
             \x20   except OSError:\n\
             \x20       pass\n\
             \x20   with open({:?}) as f:\n\
             \x20       assert f.read().startswith('a,b')\n",
            key(&sb),
            data.display().to_string()
        ),
    );
    let draft = sb.path("draft.yaml");
    let py = python();
    if !has(&py, &["-m", "pytest", "--version"]) {
        skip(&format!("no pytest for {py} here"));
        return;
    }
    let cmd = [py.as_str(), "-m", "pytest", "-q", "-p", "no:cacheprovider"];
    let mut args = vec!["-o", draft.to_str().unwrap(), "--"];
    args.extend(cmd);
    let r = learn(&sb, &proj, &args);
    if !observed(&r) {
        return;
    }
    assert_learnt(&r);
    let d = parse(&draft);
    assert_safe(&d, &sb);
    assert!(
        grants(&d, &sb.home)
            .iter()
            .any(|(k, p)| k == "read" && data.starts_with(p)),
        "the data file is not granted: {d:#}"
    );
    assert_key_refused(&r, &sb);
    let text = std::fs::read_to_string(&draft).unwrap();
    let commented = text.lines().any(|l| {
        l.contains(&format!("\"{}\"", data.display()))
            && l.contains("# read by: python")
            && l.contains(&format!("(openat {})", data.display()))
    });
    assert!(commented, "no comment naming the access: {text}");
    let e = exec_draft(&sb, &proj, &draft, &cmd);
    assert_eq!(e.code, Some(0), "pytest under the draft{}\n{text}", e.ctx());
    assert!(e.stdout.contains("1 passed"), "{}", e.ctx());
}

/// (2) `pip install` of a locally built wheel into a venv, no network.
#[test]
fn pip_install_from_a_local_wheel_into_a_venv() {
    let sb = sandbox();
    let py = python();
    sb.write(
        "src/tinypkg/pyproject.toml",
        "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\
         [project]\nname = \"tinypkg\"\nversion = \"0.1\"\n",
    );
    sb.write("src/tinypkg/tinypkg/__init__.py", "X = 1\n");
    let wheels = sb.mkdir("wheels");
    let host = |args: &[&str]| {
        std::process::Command::new(&py)
            .args(args)
            .env("HOME", &sb.home)
            .env("PIP_NO_CACHE_DIR", "1")
            .current_dir(&sb.root)
            .output()
            .expect("spawn python")
    };
    let out = host(&[
        "-m",
        "pip",
        "wheel",
        "--no-index",
        "--no-build-isolation",
        "--no-deps",
        "-w",
        wheels.to_str().unwrap(),
        sb.path("src/tinypkg").to_str().unwrap(),
    ]);
    if !out.status.success() {
        skip(&format!(
            "cannot build a wheel with {py} here: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return;
    }
    let venv = sb.path("venv");
    let out = host(&["-m", "venv", venv.to_str().unwrap()]);
    if !out.status.success() {
        skip(&format!(
            "cannot make a venv with pip with {py} here: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return;
    }
    let work = sb.mkdir("work");
    let script = format!(
        "cat {} >/dev/null 2>&1; exec {}/bin/python -m pip install --no-index --no-cache-dir \
         --disable-pip-version-check --find-links {} tinypkg",
        key(&sb),
        venv.display(),
        wheels.display()
    );
    let cmd = ["/bin/sh", "-c", script.as_str()];
    let draft = sb.path("draft.yaml");
    let mut args = vec!["--iterations", "6", "-o", draft.to_str().unwrap(), "--"];
    args.extend(cmd);
    let r = learn(&sb, &work, &args);
    if !observed(&r) {
        return;
    }
    assert_learnt(&r);
    let d = parse(&draft);
    assert_safe(&d, &sb);
    assert_key_refused(&r, &sb);
    // Writes only inside the venv (and the workspace).
    for (k, p) in grants(&d, &sb.home) {
        if k == "write" {
            assert!(
                p.starts_with(&venv) || p == work,
                "write grant of {} beyond the venv: {d:#}",
                p.display()
            );
        }
    }
    // Uninstalled, then installed again under the draft.
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path()
        .join("site-packages");
    for e in std::fs::read_dir(&site).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("tinypkg") {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
    let e = exec_draft(&sb, &work, &draft, &cmd);
    assert_eq!(
        e.code,
        Some(0),
        "pip under the draft{}\n{}",
        e.ctx(),
        std::fs::read_to_string(&draft).unwrap()
    );
    let init = site.join("tinypkg/__init__.py");
    assert!(init.exists(), "not installed: {}", init.display());
}

/// (3) `make` of a small C project that includes a header from elsewhere
/// (`-include FILE`: cc opens it; a `-I DIR` that the run's view hides is
/// dropped by cc after a stat(), which the observer does not see).
#[test]
fn make_of_a_c_project_with_a_header_outside_the_grants() {
    let sb = sandbox();
    let inc = sb.mkdir("include");
    sb.write("include/greet.h", "#define GREETING \"hello\"\n");
    let proj = sb.mkdir("cproj");
    sb.write(
        "cproj/main.c",
        "#include <stdio.h>\nint main(void){puts(GREETING);return 0;}\n",
    );
    sb.write(
        "cproj/Makefile",
        &format!(
            "hello: main.c\n\t-cat {} >/dev/null 2>&1\n\tcc -include {}/greet.h -o hello main.c\n",
            key(&sb),
            inc.display()
        ),
    );
    if !has("cc", &["--version"]) || !has("make", &["--version"]) {
        skip("no C compiler (cc) or make here");
        return;
    }
    let cmd = ["make", "-B"];
    let draft = sb.path("draft.yaml");
    let r = learn(
        &sb,
        &proj,
        &["-o", draft.to_str().unwrap(), "--", "make", "-B"],
    );
    if !observed(&r) {
        return;
    }
    assert_learnt(&r);
    let d = parse(&draft);
    assert_safe(&d, &sb);
    assert_key_refused(&r, &sb);
    assert!(
        grants(&d, &sb.home)
            .iter()
            .any(|(k, p)| k == "read" && inc.join("greet.h").starts_with(p)),
        "the header is not granted: {d:#}"
    );
    let _ = std::fs::remove_file(proj.join("hello"));
    let e = exec_draft(&sb, &proj, &draft, &cmd);
    assert_eq!(e.code, Some(0), "make under the draft{}", e.ctx());
    let out = std::process::Command::new(proj.join("hello"))
        .output()
        .expect("run hello");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
}

/// Learning again with the draft as the base adds nothing.
#[test]
fn learning_again_with_the_draft_converges() {
    let sb = sandbox();
    let data = sb.write("data/a/one.txt", "1\n");
    sb.write("data/a/two.txt", "2\n");
    let proj = sb.mkdir("proj");
    let script = format!(
        "echo pid=$$; cat {0}/a/one.txt {0}/a/two.txt; cat {1}; echo made > {0}/../proj/out.txt; true",
        data.parent().unwrap().parent().unwrap().display(),
        key(&sb)
    );
    let cmd = ["/bin/sh", "-c", script.as_str()];
    let draft = sb.path("draft.yaml");
    let mut args = vec!["-o", draft.to_str().unwrap(), "--"];
    args.extend(cmd);
    let r = learn(&sb, &proj, &args);
    if !observed(&r) {
        return;
    }
    assert_learnt(&r);
    // Every round on the same path: in a pid namespace the shell is pid 2
    // or so in each, else in none (a round left for the next must not take
    // the run's namespaces away: the id maps of an unprivileged run).
    let in_ns: Vec<bool> = r
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("pid="))
        .map(|p| p.trim().parse::<u32>().unwrap_or(u32::MAX) <= 3)
        .collect();
    assert!(in_ns.len() >= 2, "fewer than two rounds{}", r.ctx());
    assert!(
        in_ns.iter().all(|x| *x == in_ns[0]),
        "the rounds ran on different paths: {in_ns:?}{}",
        r.ctx()
    );
    // Confined, never unconfined: the key was not read while learning.
    assert!(
        !r.stderr.contains("BEGIN KEY") && !r.stdout.contains("BEGIN KEY"),
        "the key was read while learning{}",
        r.ctx()
    );
    let first = parse(&draft);
    assert_safe(&first, &sb);
    assert_key_refused(&r, &sb);
    // Two files of one directory: that directory, read-only.
    let dir = sb.path("data/a");
    assert!(
        grants(&first, &sb.home)
            .iter()
            .any(|(k, p)| k == "read" && p == &dir),
        "not collapsed to {}: {first:#}",
        dir.display()
    );
    let again = sb.path("again.yaml");
    let r2 = learn(
        &sb,
        &proj,
        &[
            "--policy",
            draft.to_str().unwrap(),
            "-o",
            again.to_str().unwrap(),
            "--",
            cmd[0],
            cmd[1],
            cmd[2],
        ],
    );
    assert_learnt(&r2);
    assert!(
        r2.stderr.contains(" 0 new grant"),
        "the second round learnt more{}",
        r2.ctx()
    );
    let second = parse(&again);
    let (mut a, mut b) = (grants(&first, &sb.home), grants(&second, &sb.home));
    a.sort();
    b.sort();
    assert_eq!(a, b, "the grants changed");
}

/// Without --learn-hosts a refused host is reported, not learnt; with it,
/// the draft lists it and lets the command reach it (a loopback origin).
#[test]
fn hosts_are_learnt_only_with_learn_hosts() {
    let sb = sandbox();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for s in listener.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\norigin",
            );
        }
    });
    let proj = sb.mkdir("proj");
    let py = python();
    let code = format!(
        "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/x', timeout=20).read().decode())\n"
    );
    let cmd = [py.as_str(), "-c", code.as_str()];
    let draft = sb.path("draft.yaml");
    let mut args = vec!["-o", draft.to_str().unwrap(), "--"];
    args.extend(cmd);
    let r = learn(&sb, &proj, &args);
    assert_learnt(&r);
    assert!(
        r.stderr.contains("127.0.0.1") && r.stderr.contains("not learnt (pass --learn-hosts)"),
        "{}",
        r.ctx()
    );
    let d = parse(&draft);
    assert!(
        d["network"]["allow_hosts"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "hosts learnt without --learn-hosts: {d:#}"
    );
    // With --learn-hosts: a loopback literal is never proposed (issue 37),
    // it is listed with the reason; a user who means it names it, and the
    // draft with it runs.
    let mut args = vec!["--learn-hosts", "-o", draft.to_str().unwrap(), "--"];
    args.extend(cmd);
    let r = learn(&sb, &proj, &args);
    assert_learnt(&r);
    let d = parse(&draft);
    assert!(
        d["network"]["allow_hosts"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "a loopback literal learnt: {d:#}"
    );
    assert!(
        r.stderr
            .contains("not granted: connect 127.0.0.1: 127.0.0.1 is a loopback address"),
        "{}",
        r.ctx()
    );
    let base = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [\"{}\"]\nnetwork:\n  mode: proxy\n  allow_hosts: [\"127.0.0.1\"]\n",
        proj.display()
    ));
    let mut args = vec![
        "--learn-hosts",
        "--policy",
        base.as_str(),
        "-o",
        draft.to_str().unwrap(),
        "--",
    ];
    args.extend(cmd);
    let r = learn(&sb, &proj, &args);
    assert_learnt(&r);
    let d = parse(&draft);
    let hosts: Vec<&str> = d["network"]["allow_hosts"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(hosts, vec!["127.0.0.1"], "{d:#}");
    let e = exec_draft(&sb, &proj, &draft, &cmd);
    assert_eq!(e.code, Some(0), "{}", e.ctx());
    assert!(e.stdout.contains("origin"), "{}", e.ctx());
}

/// `learn --help` names its options; a bad base policy is 125.
#[test]
fn help_and_a_bad_base() {
    let sb = sandbox();
    let h = sb.run(&["learn", "--help"]);
    assert_eq!(h.code, Some(0), "{}", h.ctx());
    for f in ["--policy", "--learn-hosts", "--output", "--iterations"] {
        assert!(h.stdout.contains(f), "--help lacks {f}{}", h.ctx());
    }
    let bad = sb.policy("version: 1\nfilesystem:\n  write: [\"/\"]\n");
    let r = learn(&sb, &sb.root, &["--policy", &bad, "--", "/bin/true"]);
    assert_eq!(r.code, Some(125), "{}", r.ctx());
}

/// The command is untrusted: a write it asks for goes into the draft for
/// the user to review, never into a run learn makes by itself. A command
/// that reads a file outside its grants (learnt and let through in the next
/// round) and appends to another (learnt, not let through) leaves the
/// second untouched however many rounds learn runs.
#[test]
fn learn_never_lets_the_command_write_what_it_asked_for() {
    let sb = sandbox();
    let seen = sb.write("data/notes.txt", "hello\n");
    let target = sb.write("other/rc", "original\n");
    let proj = sb.mkdir("proj");
    let script = format!(
        "cat {seen} >/dev/null; echo 'planted' >> {target}; exit 0",
        seen = seen.display(),
        target = target.display()
    );
    let draft = sb.path("draft.yaml");
    let r = learn(
        &sb,
        &proj,
        &[
            "-o",
            draft.to_str().unwrap(),
            "--iterations",
            "5",
            "--",
            "/bin/sh",
            "-c",
            &script,
        ],
    );
    if !observed(&r) {
        return;
    }
    assert_learnt(&r);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "original\n",
        "a run learn made by itself wrote where the command asked{}",
        r.ctx()
    );
    let d = parse(&draft);
    assert_safe(&d, &sb);
    let g = grants(&d, &sb.home);
    assert!(
        g.iter().any(|(k, p)| k == "write" && target.starts_with(p)),
        "the write is not in the draft for review: {d:#}"
    );
    assert!(
        g.iter().any(|(k, p)| k == "read" && seen.starts_with(p)),
        "the read is not in the draft: {d:#}"
    );
}

/// Without namespaces a program that writes POSIX shared memory (as Python's
/// multiprocessing does) touches the host's /dev/shm: the draft does not
/// grant it (it would hand the run every shared-memory object and semaphore
/// of this user), and learn says why.
#[test]
fn without_namespaces_the_hosts_dev_shm_is_not_learnt() {
    let mut sb = sandbox();
    sb.env.push(("CAPSULE_NO_NAMESPACES".into(), "1".into()));
    let proj = sb.mkdir("proj");
    let py = python();
    let name = format!("/dev/shm/capsule-learn-{}", std::process::id());
    let code = format!("open({name:?}, 'w').write('x')\n");
    let draft = sb.path("draft.yaml");
    let r = learn(
        &sb,
        &proj,
        &[
            "-o",
            draft.to_str().unwrap(),
            "--",
            py.as_str(),
            "-c",
            &code,
        ],
    );
    let _ = std::fs::remove_file(&name);
    if !observed(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "learn failed{}", r.ctx());
    let d = parse(&draft);
    let granted: Vec<PathBuf> = grants(&d, &sb.home).into_iter().map(|(_, p)| p).collect();
    assert!(
        !granted.iter().any(|p| p.starts_with("/dev/shm")),
        "the host's /dev/shm learnt: {d:#}"
    );
    assert!(
        r.stderr.contains("/dev/shm is the host's"),
        "learn does not say why{}",
        r.ctx()
    );
}

/// What a command makes in its private places (a nested directory under
/// /tmp and under HOME, a `tempfile.mkdtemp()`, as `make test` or pytest's
/// `tmp_path` do) is its own: learn neither grants it nor lists it as
/// refused. It printed `not granted: write /tmp: is / (the whole host)`
/// and refusals for every nested path (issue 39). On the default path and
/// without namespaces.
#[test]
fn learn_grants_nothing_for_the_runs_own_private_places() {
    let code = r#"
import os, tempfile
d = tempfile.mkdtemp()
os.makedirs(d + "/a/b")
open(d + "/a/b/f", "w").write("x")
assert open(d + "/a/b/f").read() == "x"
os.makedirs("/tmp/capsule-learn-nest/x/y", exist_ok=True) if os.environ.get("TMPDIR") == "/tmp" else None
h = os.path.join(os.environ["HOME"], ".cache", "q", "r")
os.makedirs(h)
open(h + "/s", "w").write("y")
try:
    os.makedirs("/tmp")
except OSError:
    pass
print("done")
"#;
    for no_ns in [false, true] {
        let mut sb = sandbox();
        if no_ns {
            sb.env.push(("CAPSULE_NO_NAMESPACES".into(), "1".into()));
        }
        let proj = sb.mkdir("proj");
        let py = python();
        let draft = sb.path("draft.yaml");
        let r = learn(
            &sb,
            &proj,
            &["-o", draft.to_str().unwrap(), "--", py.as_str(), "-c", code],
        );
        if !observed(&r) {
            return;
        }
        assert_learnt(&r);
        assert!(r.stderr.contains("done"), "no_ns={no_ns}{}", r.ctx());
        // Without namespaces /tmp is the host's: `mkdir /tmp` is refused
        // there (and said so); the paths the run made are its TMPDIR's.
        let no_ns = no_ns || !view_expected();
        let not_granted: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains("not granted"))
            .filter(|l| {
                !no_ns || l.contains("the whole host") || l.contains("/a/b") || l.contains(".cache")
            })
            .collect();
        assert!(
            not_granted.is_empty(),
            "no_ns={no_ns}: the run's own places listed as refused: {not_granted:#?}{}",
            r.ctx()
        );
        let d = parse(&draft);
        assert_safe(&d, &sb);
        let g = grants(&d, &sb.home);
        assert!(
            !g.iter()
                .any(|(_, p)| p.starts_with("/tmp") && !p.starts_with(&sb.root)),
            "no_ns={no_ns}: a grant in /tmp: {d:#}"
        );
    }
}

/// `learn --learn-hosts` never proposes an internal address (issue 37): the
/// proxy reaches loopback, private, CGNAT and unique-local addresses only
/// when a person names the literal, so learn lists them as refusals with
/// the reason and proposes only the public name, with the ports the run
/// used (`host:port`, never every port). Each target is asked of
/// the proxy by CONNECT and refused by the allowlist before any
/// connection: nothing leaves this machine.
#[test]
fn learn_hosts_never_proposes_an_internal_address() {
    let sb = sandbox();
    let proj = sb.mkdir("proj");
    let targets = [
        "pkg.example:443",
        "pkg.example:8443",
        "127.0.0.1:8080",
        "localhost:8080",
        "10.1.2.3:80",
        "192.168.7.7:5432",
        "100.64.1.1:80",
        "[fd00::1]:80",
        "[::1]:80",
    ];
    let code = format!(
        r#"
import os, socket, urllib.parse
u = urllib.parse.urlparse(os.environ["HTTP_PROXY"])
for t in {targets:?}:
    s = socket.create_connection((u.hostname, u.port), timeout=20)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t)).encode())
    print(t, s.recv(100).split(b"\r\n")[0].decode())
    s.close()
"#
    );
    let draft = sb.path("draft.yaml");
    let py = python();
    let r = learn(
        &sb,
        &proj,
        &[
            "--learn-hosts",
            "--iterations",
            "1",
            "-o",
            draft.to_str().unwrap(),
            "--",
            py.as_str(),
            "-c",
            &code,
        ],
    );
    assert_learnt(&r);
    let d = parse(&draft);
    let hosts: Vec<&str> = d["network"]["allow_hosts"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The ports the run used, each as `host:port` (issue 37): not every port.
    assert_eq!(
        hosts,
        vec!["pkg.example:443", "pkg.example:8443"],
        "{d:#}{}",
        r.ctx()
    );
    let text = std::fs::read_to_string(&draft).unwrap();
    assert!(
        text.contains("\"pkg.example:443\"  # reached by"),
        "no comment on the host: {text}"
    );
    for (host, why) in [
        ("127.0.0.1", "loopback"),
        ("localhost", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.7.7", "private"),
        ("100.64.1.1", "carrier-grade NAT"),
        ("[fd00::1]", "unique-local"),
        ("[::1]", "loopback"),
    ] {
        let line = r
            .stderr
            .lines()
            .find(|l| l.contains("not granted: connect") && l.contains(&format!(" {host}:")))
            .unwrap_or_else(|| panic!("{host} is not listed as refused{}", r.ctx()));
        assert!(line.contains(why), "{host}: {line}");
    }
}

/// A throwaway account (useradd) whose home holds an SSH key root can read
/// without capabilities (mode 644: the run holds none, as root too);
/// removed (userdel) when dropped.
struct OtherAccount {
    name: String,
    home: PathBuf,
}

impl OtherAccount {
    fn new(sb: &Sandbox) -> Option<OtherAccount> {
        let name = format!("capsule-t{}", std::process::id() % 100_000);
        let home = sb.root.join("homes").join(&name);
        let ok = std::process::Command::new("useradd")
            .args(["-M", "-d"])
            .arg(&home)
            .args(["-s", "/usr/sbin/nologin", &name])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
        let acct = OtherAccount { name, home };
        std::fs::create_dir_all(acct.home.join(".ssh")).unwrap();
        std::fs::write(acct.home.join(".ssh/id_ed25519"), "OTHER-ACCOUNT-KEY\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            acct.home.join(".ssh/id_ed25519"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        Some(acct)
    }

    fn key(&self) -> PathBuf {
        self.home.join(".ssh/id_ed25519")
    }
}

impl Drop for OtherAccount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("userdel")
            .arg(&self.name)
            .status();
    }
}

/// `learn` run as root: another account's credential store is a credential
/// store too (issue 37, item 6). The carve-outs were built for the invoking
/// user's home only, so a key of another account root can read (without
/// capabilities: mode 644) was learnt as a read grant and read by the next
/// round, and `exec` with a grant above that home read it as well. Every
/// home of the password database is covered when capsule runs as root.
#[test]
fn as_root_another_accounts_keys_are_carved_out_and_never_learnt() {
    if !is_root() {
        skip("needs root: useradd, and root's reach into every home");
        return;
    }
    let sb = Sandbox::visible();
    let Some(other) = OtherAccount::new(&sb) else {
        skip("useradd is not available here");
        return;
    };
    let key = other.key();
    let homes = sb.root.join("homes");
    // exec: a grant above the other home does not reach its key.
    let r = sb.run(&[
        "exec",
        "--no-audit",
        "--allow-read",
        &homes.to_string_lossy(),
        "--",
        "/bin/cat",
        &key.to_string_lossy(),
    ]);
    assert!(
        !r.stdout.contains("OTHER-ACCOUNT-KEY"),
        "exec read another account's key through a grant of its parent{}",
        r.ctx()
    );
    // learn: the key is refused as a credential store, never granted, never
    // read by a later round.
    let proj = sb.mkdir("proj");
    let draft = sb.path("draft.yaml");
    let r = learn(
        &sb,
        &proj,
        &[
            "--iterations",
            "3",
            "-o",
            draft.to_str().unwrap(),
            "--",
            "/bin/cat",
            &key.to_string_lossy(),
        ],
    );
    if !observed(&r) {
        return;
    }
    assert_learnt(&r);
    assert!(
        !r.stderr.contains("OTHER-ACCOUNT-KEY"),
        "a round of learn read another account's key{}",
        r.ctx()
    );
    let d = parse(&draft);
    assert!(
        !grants(&d, &sb.home)
            .iter()
            .any(|(_, p)| key.starts_with(p) && p.starts_with(&other.home)),
        "another account's key granted: {d:#}"
    );
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("not granted") && l.contains(&*key.to_string_lossy()))
        .unwrap_or_else(|| panic!("the key's refusal is not listed{}", r.ctx()));
    assert!(line.contains("credential store"), "{line}");
}

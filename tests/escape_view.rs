//! Escapes that Landlock cannot see, closed by the run's private view of the
//! host (mount, IPC, pid and network namespaces; `src/sandbox/view.rs`):
//! metadata changes (chmod, setuid bits, utimes, xattrs, truncate) outside
//! write grants, the host's SysV IPC, the host's /tmp, /proc of capsule's
//! init, /etc secrets. Without namespaces (`CAPSULE_NO_NAMESPACES=1`) the
//! same runs must report what they lack in `enforcement.missing`.
//!
//! Each attack runs in a fresh `capsule exec` as the test's user (root, or
//! the unprivileged user of `scripts/test`), and checks the errno.

mod common;

use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// Run a Python snippet in capsule with OPTS; the result object.
fn py(sb: &Sandbox, opts: &[&str], code: &str) -> Run {
    let py = python();
    sb.exec_json(opts, &[&py, "-c", code])
}

/// A metadata attack on FILE: one line "name=errno-or-ok" per attempt.
const METADATA: &str = r#"
import os, sys
p = sys.argv[1]
def t(name, f):
    try:
        f(); print(name + "=ok")
    except OSError as e:
        print(name + "=" + (os.strerror(e.errno) if e.errno else str(e)))
t("chmod", lambda: os.chmod(p, 0o777))
t("setuid", lambda: os.chmod(p, 0o4777))
t("utime", lambda: os.utime(p, (0, 0)))
t("xattr", lambda: os.setxattr(p, "user.capsule", b"x"))
t("chown", lambda: os.chown(p, os.getuid(), os.getgid()))
t("truncate", lambda: os.truncate(p, 0))
t("open_trunc", lambda: os.close(os.open(p, os.O_RDONLY | os.O_TRUNC)))
"#;

fn metadata_run(sb: &Sandbox, opts: &[&str], file: &str) -> (Run, Vec<(String, String)>) {
    let py = python();
    let run = sb.exec_json(opts, &[&py, "-c", METADATA, file]);
    let lines = run
        .child_stdout()
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
        })
        .collect();
    (run, lines)
}

#[test]
fn metadata_outside_write_grants_cannot_change() {
    let sb = Sandbox::new();
    let outside = sb.write("outside/victim", "data");
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o600)).unwrap();
    let ro = sb.write("ro/victim", "data");
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o600)).unwrap();
    // One victim outside the host's /tmp too: the view hides the host's /tmp
    // (ENOENT), so only a file elsewhere shows the read-only host (EROFS).
    let var_tmp = tempfile::Builder::new()
        .prefix("capsule-victim-")
        .tempdir_in("/var/tmp")
        .expect("a scratch directory in /var/tmp");
    let elsewhere = var_tmp.path().join("victim");
    fs::write(&elsewhere, "data").unwrap();
    fs::set_permissions(&elsewhere, fs::Permissions::from_mode(0o600)).unwrap();
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [./ro]\n");
    for file in [&outside, &ro, &elsewhere] {
        let before = fs::metadata(file).unwrap();
        let (run, lines) = metadata_run(&sb, &["--policy", &pol], &file.to_string_lossy());
        run.assert_ran();
        assert_eq!(
            fs::read_to_string(file).unwrap(),
            "data",
            "ESCAPE: truncated{}",
            run.ctx()
        );
        if !view_expected() {
            // No view: the metadata guard (issue 20, finding 7) holds, or,
            // where no listener can be had, the gap is reported.
            let e = run.json()["enforcement"].clone();
            if e["missing"]
                .to_string()
                .contains("read-only view of the host")
            {
                continue;
            }
            assert!(
                e["limitations"].to_string().contains("metadata guard"),
                "{}",
                run.ctx()
            );
            let after = fs::metadata(file).unwrap();
            assert_eq!(
                (before.permissions().mode(), before.modified().unwrap()),
                (after.permissions().mode(), after.modified().unwrap()),
                "ESCAPE: the mode or mtime of {} changed{}",
                file.display(),
                run.ctx()
            );
            for (name, res) in &lines {
                assert_ne!(
                    res,
                    "ok",
                    "{name} succeeded on {}{}",
                    file.display(),
                    run.ctx()
                );
            }
            for op in ["chmod", "utime", "xattr", "chown"] {
                let e = lines.iter().find(|(k, _)| k == op).map(|(_, v)| v.as_str());
                assert_eq!(e, Some("Permission denied"), "{op}{}", run.ctx());
            }
            continue;
        }
        let after = fs::metadata(file).unwrap();
        assert_eq!(
            before.permissions().mode(),
            after.permissions().mode(),
            "ESCAPE: the mode of {} changed{}",
            file.display(),
            run.ctx()
        );
        assert_eq!(
            before.modified().unwrap(),
            after.modified().unwrap(),
            "ESCAPE: the mtime of {} changed{}",
            file.display(),
            run.ctx()
        );
        {
            for (name, res) in &lines {
                assert_ne!(
                    res,
                    "ok",
                    "{name} succeeded on {}{}",
                    file.display(),
                    run.ctx()
                );
            }
            let v = run.json();
            assert!(
                v["enforcement"]["view"]["read_only_host"] == true,
                "{}",
                run.ctx()
            );
            let errno = |n: &str| {
                lines
                    .iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            // EROFS: the host is read-only in the view; ENOENT: the file lies
            // under the host's /tmp and the view's /tmp is the run's own.
            for op in ["chmod", "utime"] {
                let e = errno(op);
                if file == &elsewhere {
                    assert_eq!(e, "Read-only file system", "{op}{}", run.ctx());
                } else {
                    assert!(
                        e == "Read-only file system" || e == "No such file or directory",
                        "{op}: {e}{}",
                        run.ctx()
                    );
                }
            }
        }
    }
}

#[test]
fn metadata_inside_write_grants_still_works_but_never_setuid() {
    let sb = Sandbox::new();
    let f = sb.write("rw/mine", "data");
    let pol = sb.policy("version: 1\nfilesystem:\n  write: [./rw]\n");
    let (run, lines) = metadata_run(&sb, &["--policy", &pol], &f.to_string_lossy());
    run.assert_ran();
    let get = |n: &str| {
        lines
            .iter()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(get("chmod"), "ok", "{}", run.ctx());
    assert_eq!(get("utime"), "ok", "{}", run.ctx());
    assert_eq!(get("truncate"), "ok", "{}", run.ctx());
    // (chown, which comes after it, would clear the bit again: check the attempt itself.)
    assert_ne!(
        get("setuid"),
        "ok",
        "ESCAPE: chmod 4777 succeeded{}",
        run.ctx()
    );
    let mode = fs::metadata(&f).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o6000,
        0,
        "ESCAPE: a setuid/setgid bit was set: {mode:o}{}",
        run.ctx()
    );
}

#[test]
fn host_sysv_shared_memory_is_invisible() {
    if !view_expected() {
        skip("no namespaces here: SysV IPC is refused by seccomp instead (tested in escape_syscalls)");
        return;
    }
    let out = Command::new("ipcmk").args(["-M", "4096"]).output();
    let Ok(out) = out else {
        skip("ipcmk (util-linux) is not installed");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let Some(id) = text
        .split_whitespace()
        .last()
        .and_then(|s| s.parse::<i64>().ok())
    else {
        skip(&format!("ipcmk did not create a segment: {text}"));
        return;
    };
    let sb = Sandbox::new();
    let code = format!(
        r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
r = libc.shmat({id}, None, 0)
print("attach=" + ("ok" if r not in (None, ctypes.c_void_p(-1).value) else os.strerror(ctypes.get_errno())))
print("listed=" + str(" {id} " in open("/proc/sysvipc/shm").read()))
"#
    );
    let run = py(&sb, &[], &code);
    let _ = Command::new("ipcrm").args(["-m", &id.to_string()]).status();
    run.assert_ran();
    let so = run.child_stdout();
    assert!(
        !so.contains("attach=ok"),
        "ESCAPE: attached the host's segment{}",
        run.ctx()
    );
    assert!(
        so.contains("listed=False"),
        "the host's segment is listed{}",
        run.ctx()
    );
    assert_eq!(
        run.json()["enforcement"]["view"]["ipc_namespace"],
        Value::Bool(true)
    );
}

#[test]
fn private_proc_shows_only_the_run_and_hides_init() {
    if !view_expected() {
        skip("no namespaces here");
        return;
    }
    let mut sb = Sandbox::new();
    // A secret in capsule's own environment: init shares capsule's memory.
    sb.set_env("CAPSULE_TEST_SECRET", "s3cr3t-in-the-supervisor");
    let code = r#"
import os, subprocess
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids=" + ",".join(map(str, pids)))
for pid in pids:
    try:
        if b"s3cr3t" in open("/proc/%d/environ" % pid, "rb").read():
            print("leak=%d" % pid)
    except OSError:
        pass
for leaf in ("environ", "maps", "mem"):
    try:
        data = open("/proc/1/" + leaf, "rb").read(4096)
        print(leaf + "=READ:" + ("secret" if b"s3cr3t" in data else "nosecret"))
    except OSError as e:
        print(leaf + "=" + os.strerror(e.errno))
child = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True)
print("descendant_status=" + str(child.returncode))
fds = subprocess.run(["ls", "/proc/self/fd"], capture_output=True, text=True)
print("descendant_fds=" + str(fds.returncode))
"#;
    let run = py(&sb, &[], code);
    run.assert_ran();
    let so = run.child_stdout();
    assert!(
        !so.contains("secret\n") || !so.contains("=READ:secret"),
        "ESCAPE: read the supervisor's secret{}",
        run.ctx()
    );
    assert!(
        !so.contains("leak="),
        "ESCAPE: a process's environ holding the supervisor's secret is readable{}",
        run.ctx()
    );
    assert!(so.contains("descendant_status=0"), "{}", run.ctx());
    assert!(so.contains("descendant_fds=0"), "{}", run.ctx());
    if !view_gives("private_proc") {
        // A container's masked /proc: capsule binds the container's /proc
        // and says what that lacks (the processes beside the run are listed,
        // their environ and memory stay unreadable: checked above).
        assert!(view_gaps().contains("/proc"), "{}", exec_enforcement());
        return;
    }
    assert!(
        !so.contains("=READ:"),
        "ESCAPE: /proc/1 (capsule's init) is readable{}",
        run.ctx()
    );
    let pids = so
        .lines()
        .find_map(|l| l.strip_prefix("pids="))
        .unwrap_or_default();
    let n = pids.split(',').filter(|s| !s.is_empty()).count();
    assert!(
        (1..=5).contains(&n),
        "the private /proc shows {n} processes: {pids}{}",
        run.ctx()
    );
    // Capsule's init (pid 1) is hidden: it shares the supervisor's memory.
    assert!(
        !pids.split(',').any(|p| p == "1"),
        "pid 1 is listed: {pids}{}",
        run.ctx()
    );
}

#[test]
fn ps_sees_only_the_run() {
    if !view_expected() {
        skip("no namespaces here");
        return;
    }
    if !view_gives("private_proc") {
        // The container's /proc (its runtime masks paths, so no fresh procfs):
        // ps lists the container's processes, a gap capsule names.
        assert!(view_gaps().contains("/proc"), "{}", exec_enforcement());
        return;
    }
    if Command::new("ps").arg("--version").output().is_err() {
        skip("ps (procps) is not installed");
        return;
    }
    let sb = Sandbox::new();
    let run = sb.exec_json(&[], &["ps", "-e", "-o", "pid=,comm="]);
    run.assert_code(0);
    let lines: Vec<String> = run
        .child_stdout()
        .lines()
        .map(|s| s.trim().to_string())
        .collect();
    assert!(
        lines.len() <= 4,
        "ps sees more than the run: {lines:?}{}",
        run.ctx()
    );
    assert!(lines.iter().any(|l| l.ends_with(" ps")), "{lines:?}");
}

#[test]
fn tmp_is_private_and_host_tmp_is_invisible() {
    let sb = Sandbox::new();
    let token = format!("capsule-view-{}", std::process::id());
    let host_file = std::path::Path::new("/tmp").join(&token);
    let _ = fs::write(&host_file, "host");
    let code = format!(
        r#"
import os
print("tmpdir=" + os.environ.get("TMPDIR", ""))
print("host_visible=" + str(os.path.exists("/tmp/{token}")))
open(os.path.join(os.environ["TMPDIR"], "mine"), "w").write("x")
try:
    open("/tmp/written-by-run", "w").write("x"); print("tmp_write=ok")
except OSError as e:
    print("tmp_write=" + os.strerror(e.errno))
"#
    );
    let run = py(&sb, &[], &code);
    let leaked = std::path::Path::new("/tmp/written-by-run").exists();
    let _ = fs::remove_file("/tmp/written-by-run");
    let _ = fs::remove_file(&host_file);
    run.assert_code(0);
    assert!(
        !leaked,
        "ESCAPE: the run wrote into the host's /tmp{}",
        run.ctx()
    );
    let so = run.child_stdout();
    if view_expected() {
        assert!(so.contains("tmpdir=/tmp\n"), "{}", run.ctx());
        assert!(
            so.contains("host_visible=False"),
            "ESCAPE: host /tmp visible{}",
            run.ctx()
        );
        assert!(so.contains("tmp_write=ok"), "{}", run.ctx());
    }
}

#[test]
fn grants_under_host_tmp_stay_reachable_at_their_paths() {
    // Policies commonly grant places under the host's /tmp: the private /tmp
    // must not hide them.
    let dir = tempfile::Builder::new()
        .prefix("capsule-view-grant-")
        .tempdir_in("/tmp");
    let Ok(dir) = dir else {
        skip("cannot create a directory in /tmp");
        return;
    };
    let d = fs::canonicalize(dir.path()).unwrap();
    fs::write(d.join("in.txt"), "granted").unwrap();
    let sb = Sandbox::new();
    let ds = d.to_string_lossy().to_string();
    let code = format!(
        "import os\nprint(open('{ds}/in.txt').read())\nopen('{ds}/out.txt','w').write('back')\n\
         open(os.path.join(os.environ['TMPDIR'], 'scratch'), 'w').write('tmp')\nprint('tmpdir writable')\n"
    );
    let run = py(&sb, &["--allow-write", &ds], &code);
    run.assert_code(0);
    assert!(run.child_stdout().contains("granted"), "{}", run.ctx());
    assert_eq!(
        fs::read_to_string(d.join("out.txt")).unwrap_or_default(),
        "back",
        "{}",
        run.ctx()
    );
}

#[test]
fn etc_is_readable_except_its_secrets() {
    let sb = Sandbox::new();
    let code = r#"
import os
for p in ("/etc/passwd", "/etc/shadow", "/etc/gshadow", "/etc/sudoers"):
    try:
        data = open(p, "rb").read()
        print(p + "=" + ("empty" if not data else "DATA"))
    except OSError as e:
        print(p + "=" + os.strerror(e.errno))
"#;
    let run = py(&sb, &[], code);
    run.assert_code(0);
    let so = run.child_stdout();
    assert!(so.contains("/etc/passwd=DATA"), "{}", run.ctx());
    for s in ["/etc/shadow", "/etc/gshadow", "/etc/sudoers"] {
        if std::path::Path::new(s).exists() {
            assert!(
                !so.contains(&format!("{s}=DATA")),
                "ESCAPE: {s} readable{}",
                run.ctx()
            );
        }
    }
    if view_expected() && std::path::Path::new("/etc/debian_version").exists() {
        let run = sb.exec_json(&[], &["cat", "/etc/debian_version"]);
        run.assert_code(0);
    }
}

#[test]
fn pseudo_terminals_and_shm_work_in_the_view() {
    if !view_expected() {
        skip("no namespaces here: no private devpts or /dev/shm");
        return;
    }
    let sb = Sandbox::new();
    let code = r#"
import os, pty
m, s = pty.openpty()
os.write(m, b"hello\n")
print("pty=" + os.ttyname(s) + ":" + os.read(s, 100).decode().strip())
from multiprocessing import shared_memory
sm = shared_memory.SharedMemory(create=True, size=64)
sm.buf[0] = 7
print("shm=" + str(sm.buf[0]))
sm.close(); sm.unlink()
"#;
    let run = py(&sb, &[], code);
    run.assert_code(0);
    let so = run.child_stdout();
    assert!(so.contains("pty=/dev/pts/0:hello"), "{}", run.ctx());
    assert!(so.contains("shm=7"), "{}", run.ctx());
}

#[test]
fn without_namespaces_the_gaps_are_reported() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let run = sb.exec_json(&[], &["/bin/true"]);
    run.assert_code(0);
    let v = run.json();
    assert!(v["enforcement"]["view"].is_null(), "{}", run.ctx());
    let missing = v["enforcement"]["missing"].to_string();
    // The metadata outside write grants is held by the metadata guard
    // (issue 20, finding 7) where a seccomp listener can be had, as here.
    assert!(
        !missing.contains("read-only view of the host"),
        "{}",
        run.ctx()
    );
    assert!(
        v["enforcement"]["limitations"]
            .to_string()
            .contains("metadata guard"),
        "{}",
        run.ctx()
    );
    assert!(missing.contains("private /proc"), "{}", run.ctx());
}

#[test]
fn clone_refusal_falls_back_to_the_no_namespace_path_safely() {
    // The sysctls promise namespaces but clone() refuses them (an outer
    // seccomp profile, a container without CAP_SYS_ADMIN). Emulated with a
    // user namespace whose mount-namespace quota is 0: capsule is "root"
    // there, asks for its namespaces, gets ENOSPC, and must re-plan without
    // the view — /etc granted file by file again, never whole. capsule is
    // root there, and the metadata guard holds every root-owned file's
    // metadata without the view, so the run goes on.
    let sb = Sandbox::new();
    let capsule = capsule_bin();
    let script = format!(
        "echo 0 > /proc/sys/user/max_mnt_namespaces || {{ echo emulation-refused; exit 0; }}; \
         {c} exec --json -- /bin/true; echo refused=$?; \
         exec {c} exec --json --best-effort -- /bin/sh -c 'cat /etc/shadow; echo rc=$?'",
        c = capsule.display()
    );
    let out = Command::new("unshare")
        .args(["-Ur", "sh", "-c", &script])
        .current_dir(&sb.root)
        .env_clear()
        .env("PATH", TEST_PATH)
        .env("HOME", &sb.home)
        .env("XDG_STATE_HOME", &sb.state)
        .env("XDG_CONFIG_HOME", &sb.config)
        .output();
    let Ok(out) = out else {
        skip("unshare (util-linux) is not installed");
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.contains("emulation-refused") {
        // A container's /proc/sys is read-only: the real refusal is the
        // container's own (scripts/test-containers' pod-runtimedefault).
        skip("cannot lower max_mnt_namespaces for the emulation here (a read-only /proc/sys)");
        return;
    }
    let Some((refusal, stdout)) = stdout.split_once("refused=") else {
        skip("no user namespace for the emulation here");
        return;
    };
    let Some((code, stdout)) = stdout.split_once('\n') else {
        panic!("no exit code of the first run: {stdout}");
    };
    // Root without its view is refused only where no metadata guard closes
    // the gap (every root-owned file's mode, times, xattrs); here the guard
    // runs, so the first run goes on (exec_fallbacks has the refusal).
    assert_eq!(
        code, "0",
        "root without its view, with the metadata guard: {refusal}"
    );
    let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) else {
        skip(&format!(
            "no user namespace for the emulation here: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return;
    };
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(v["enforcement"]["view"].is_null(), "{v}");
    assert_eq!(v["enforcement"]["tree_kill"], "subreaper", "{v}");
    let so = v["stdout"].as_str().unwrap_or_default();
    assert!(
        so.contains("rc=1"),
        "ESCAPE: /etc/shadow readable on the fallback path: {v}"
    );
    // The fallback path's gaps are reported; the metadata outside write
    // grants is held by the metadata guard (issue 20, finding 7).
    assert!(
        v["enforcement"]["missing"]
            .to_string()
            .contains("private /proc"),
        "{v}"
    );
    assert!(
        v["enforcement"]["limitations"]
            .to_string()
            .contains("metadata guard"),
        "{v}"
    );
}

/// Read each path given; one line "path=DATA|empty|strerror" per path.
const READ_EACH: &str = r#"
import os, sys
for p in sys.argv[1:]:
    try:
        data = open(p, "rb").read()
        print(p + "=" + ("empty" if not data else "DATA"))
    except OSError as e:
        print(p + "=" + os.strerror(e.errno))
"#;

/// /etc/shadow, /etc/gshadow and one file under /etc/ssl/private, those this
/// test's user can read on the host (the positive control: as an
/// unprivileged user none is readable anyway, and the test proves nothing).
fn readable_etc_secrets() -> Vec<String> {
    let mut v: Vec<String> = ["/etc/shadow", "/etc/gshadow"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Ok(rd) = fs::read_dir("/etc/ssl/private") {
        let mut files: Vec<String> = rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path().to_string_lossy().into_owned())
            .collect();
        files.sort();
        v.extend(files.into_iter().take(1));
    }
    v.retain(|p| fs::read(p).is_ok_and(|d| !d.is_empty()));
    v
}

#[test]
fn etc_secrets_stay_unreadable_beneath_a_grant_of_etc_or_root() {
    let secrets = readable_etc_secrets();
    if secrets.is_empty() {
        skip("no /etc secret is readable by this user on the host: nothing to leak");
        return;
    }
    let py = python();
    for no_ns in [true, false] {
        let mut sb = Sandbox::new();
        if no_ns {
            sb.set_env("CAPSULE_NO_NAMESPACES", "1");
        } else if !view_expected() {
            continue;
        }
        // No grant: `system: true` alone grants /etc/ssl (and /etc/pki).
        for grant in ["", "/etc", "/"] {
            let mut cmd = vec![py.as_str(), "-c", READ_EACH, "/etc/passwd"];
            cmd.extend(secrets.iter().map(String::as_str));
            let opts: &[&str] = if grant.is_empty() {
                &[]
            } else {
                &["--allow-read", grant]
            };
            let run = sb.exec_json(opts, &cmd);
            run.assert_code(0);
            let so = run.child_stdout();
            assert!(
                so.contains("/etc/passwd=DATA"),
                "the grant of {grant} does not read /etc/passwd (no_namespaces={no_ns}){}",
                run.ctx()
            );
            for s in &secrets {
                assert!(
                    so.contains(&format!("{s}=")) && !so.contains(&format!("{s}=DATA")),
                    "ESCAPE: {s} readable under --allow-read {grant} (no_namespaces={no_ns}){}",
                    run.ctx()
                );
            }
        }
    }
}

#[test]
fn etc_secrets_stay_covered_where_a_mount_shows_them() {
    if !view_expected() {
        skip("no namespaces here: a mount at another path is refused");
        return;
    }
    let secrets = readable_etc_secrets();
    if secrets.is_empty() {
        skip("no /etc secret is readable by this user on the host: nothing to leak");
        return;
    }
    let sb = Sandbox::new();
    let py = python();
    let shown: Vec<String> = secrets
        .iter()
        .map(|s| s.replacen("/etc/", "/hostetc/", 1))
        .collect();
    let mut cmd = vec![py.as_str(), "-c", READ_EACH, "/hostetc/passwd"];
    cmd.extend(shown.iter().map(String::as_str));
    let run = sb.exec_json(&["--mount", "/etc:/hostetc"], &cmd);
    run.assert_code(0);
    let so = run.child_stdout();
    assert!(so.contains("/hostetc/passwd=DATA"), "{}", run.ctx());
    for s in &shown {
        assert!(
            so.contains(&format!("{s}=")) && !so.contains(&format!("{s}=DATA")),
            "ESCAPE: {s} readable through --mount /etc:/hostetc{}",
            run.ctx()
        );
    }
}

/// Secrets of the extended list, made (with a public control file) in an
/// overlay over /etc inside a private mount namespace: the host's /etc is
/// never touched.
const PLANTED: &[&str] = &[
    "/etc/mysql/debian.cnf",
    "/etc/ldap.secret",
    "/etc/libnss-ldap.secret",
    "/etc/pam_ldap.secret",
    "/etc/sssd/sssd.conf",
    "/etc/chrony/chrony.keys",
    "/etc/bind/rndc.key",
    "/etc/ceph/ceph.client.admin.keyring",
    "/etc/postfix/sasl_passwd",
    "/etc/exim4/passwd.client",
    "/etc/ipsec.d/private/host.pem",
    "/etc/swanctl/private/host.pem",
    "/etc/openvpn/server.key",
    "/etc/openvpn/client/home.conf",
    "/etc/iscsi/iscsid.conf",
    "/etc/davfs2/secrets",
    "/etc/wireguard/wg0.conf",
    "/etc/NetworkManager/system-connections/home.nmconnection",
    "/etc/krb5.keytab",
];

#[test]
fn the_extended_etc_secret_list_is_carved_out() {
    if !is_root() {
        skip("needs root to lay an overlay over /etc in a private mount namespace");
        return;
    }
    let sb = Sandbox::new();
    let scratch = sb.mkdir("overlay");
    let control = "/etc/capsule-test-public.conf";
    let mut plant = String::new();
    for f in PLANTED.iter().chain([&control]) {
        let dir = std::path::Path::new(f)
            .parent()
            .unwrap()
            .display()
            .to_string();
        plant.push_str(&format!("mkdir -p {dir} && echo SECRET > {f} && "));
    }
    let py = python();
    for no_ns in [true, false] {
        if !no_ns && !view_expected() {
            continue;
        }
        for grant in ["/etc", "/"] {
            let script = format!(
                "mount -t tmpfs tmpfs {s} && mkdir {s}/u {s}/w && \
                 mount -t overlay overlay -o lowerdir=/etc,upperdir={s}/u,workdir={s}/w /etc && \
                 {plant} exec \"$@\"",
                s = scratch.display()
            );
            let mut cmd = Command::new("unshare");
            cmd.args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"]);
            cmd.arg(capsule_bin());
            cmd.args(["exec", "--json", "--allow-read", grant, "--"]);
            cmd.args([&py, "-c", READ_EACH, control]);
            cmd.args(PLANTED);
            cmd.current_dir(&sb.root)
                .env_clear()
                .env("PATH", TEST_PATH)
                .env("HOME", &sb.home)
                .env("XDG_STATE_HOME", &sb.state)
                .env("XDG_CONFIG_HOME", &sb.config);
            if no_ns {
                cmd.env("CAPSULE_NO_NAMESPACES", "1");
            }
            let Ok(out) = cmd.output() else {
                skip("unshare (util-linux) is not installed");
                return;
            };
            let stdout = String::from_utf8_lossy(&out.stdout);
            let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) else {
                skip(&format!(
                    "no overlay over /etc here: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
                return;
            };
            let so = v["stdout"].as_str().unwrap_or_default();
            assert_eq!(v["exit_code"], 0, "{v}");
            assert!(
                so.contains(&format!("{control}=DATA")),
                "the control file is not readable (no_namespaces={no_ns}): {v}"
            );
            for f in PLANTED {
                assert!(
                    so.contains(&format!("{f}=")) && !so.contains(&format!("{f}=DATA")),
                    "ESCAPE: {f} readable under --allow-read {grant} (no_namespaces={no_ns}): {v}"
                );
            }
        }
    }
}

/// Open each path for writing and close it again, writing nothing (so a
/// failure of the test harms no host setting): "path=ok|strerror|absent".
const OPEN_FOR_WRITE: &str = r#"
import os, sys
for p in sys.argv[1:]:
    if not os.path.exists(p):
        print(p + "=absent"); continue
    try:
        os.close(os.open(p, os.O_WRONLY)); print(p + "=ok")
    except OSError as e:
        print(p + "=" + os.strerror(e.errno))
"#;

#[test]
fn proc_sys_and_the_kernel_knobs_are_read_only_without_landlock() {
    if !view_expected() {
        skip("no namespaces here: no private /proc");
        return;
    }
    // Without Landlock, only the view's mounts stand between the run and
    // the host kernel's sysctls (/proc/sys/vm is not namespaced).
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_LANDLOCK_ABI_MAX", "0");
    let py = python();
    let knobs = [
        "/proc/sys/vm/swappiness",
        "/proc/sys/kernel/core_pattern",
        "/proc/sysrq-trigger",
        "/proc/irq/default_smp_affinity",
    ];
    let mut cmd = vec![py.as_str(), "-c", OPEN_FOR_WRITE, "/proc/self/comm"];
    cmd.extend(knobs);
    let run = sb.exec_json(&["--best-effort"], &cmd);
    run.assert_code(0);
    let so = run.child_stdout();
    // The run's own process files stay writable in its private /proc; a
    // container's /proc bound into the view is read-only as a whole.
    if proc_is_bound() {
        assert!(
            so.contains("/proc/self/comm=Read-only file system"),
            "{}",
            run.ctx()
        );
    } else {
        assert!(so.contains("/proc/self/comm=ok"), "{}", run.ctx());
    }
    for k in knobs {
        let line = so
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no line for {k}{}", run.ctx()));
        if line == "absent" {
            continue;
        }
        // Root on a bare host passes every permission check, so only the
        // read-only mount stands in the way. Root of a rootless container
        // is not the owner of the kernel's knobs: EACCES comes first there.
        if is_root() && !in_container() {
            assert_eq!(
                line,
                "Read-only file system",
                "ESCAPE: {k} is writable in the view without Landlock{}",
                run.ctx()
            );
        } else {
            assert_ne!(line, "ok", "ESCAPE: {k} is writable{}", run.ctx());
        }
    }
}

/// Read FILE and try to create NEW: "read=DATA|err" and "write=ok|err".
const READ_THEN_WRITE: &str = r#"
import os, sys
try:
    print("read=" + open(sys.argv[1]).read().strip())
except OSError as e:
    print("read=" + os.strerror(e.errno))
try:
    open(sys.argv[2], "w").write("new")
    print("write=ok")
except OSError as e:
    print("write=" + os.strerror(e.errno))
"#;

fn read_then_write(sb: &Sandbox, opts: &[&str], file: &str, new: &str) -> (Run, String, String) {
    let py = python();
    let run = sb.exec_json(opts, &[&py, "-c", READ_THEN_WRITE, file, new]);
    let so = run.child_stdout();
    let get = |k: &str| {
        so.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or("(no line)")
            .to_string()
    };
    let (r, w) = (get("read"), get("write"));
    (run, r, w)
}

#[test]
fn mount_shows_a_host_path_at_a_new_destination_read_only_or_read_write() {
    if !view_expected() {
        skip("no namespaces here: a mount at another path is refused (tested below)");
        return;
    }
    let sb = Sandbox::new();
    sb.write("src/a", "from-host");
    let src = sb.p("src");
    // Read-only by default: readable at /pack, not writable (EROFS).
    let (run, r, w) = read_then_write(
        &sb,
        &["--mount", &format!("{src}:/pack")],
        "/pack/a",
        "/pack/b",
    );
    run.assert_code(0);
    assert_eq!(r, "from-host", "{}", run.ctx());
    assert_eq!(
        w,
        "Read-only file system",
        "ESCAPE: a read-only mount is writable{}",
        run.ctx()
    );
    assert!(
        !sb.path("src/b").exists(),
        "ESCAPE: a read-only mount was written"
    );
    assert!(
        !std::path::Path::new("/pack").exists(),
        "/pack leaked to the host"
    );
    // :ro said explicitly, the same.
    let (run, _, w) = read_then_write(
        &sb,
        &["--mount", &format!("{src}:/pack:ro")],
        "/pack/a",
        "/pack/b",
    );
    assert_eq!(w, "Read-only file system", "{}", run.ctx());
    // :rw writes through to the source.
    let (run, r, w) = read_then_write(
        &sb,
        &["--mount", &format!("{src}:/pack:rw")],
        "/pack/a",
        "/pack/b",
    );
    run.assert_code(0);
    assert_eq!(
        (r.as_str(), w.as_str()),
        ("from-host", "ok"),
        "{}",
        run.ctx()
    );
    assert_eq!(
        sb.read("src/b"),
        "new",
        "the write did not reach the source"
    );
    assert!(
        !std::path::Path::new("/pack").exists(),
        "/pack leaked to the host"
    );
}

#[test]
fn a_volume_mounts_at_a_new_destination() {
    if !view_expected() {
        skip("no namespaces here: a volume at another path is refused");
        return;
    }
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    sb.run(&["volume", "create", "vw-pack"]).assert_code(0);
    let vol = data.join("capsule/volumes/vw-pack");
    let (run, _, w) = read_then_write(
        &sb,
        &["--mount", "volume:vw-pack:/pack:rw"],
        "/pack/none",
        "/pack/made",
    );
    run.assert_code(0);
    assert_eq!(w, "ok", "{}", run.ctx());
    assert_eq!(
        fs::read_to_string(vol.join("made")).unwrap_or_default(),
        "new",
        "{}",
        run.ctx()
    );
    // Another run sees it, read-only by default.
    let (run, r, w) = read_then_write(
        &sb,
        &["--mount", "volume:vw-pack:/pack"],
        "/pack/made",
        "/pack/more",
    );
    run.assert_code(0);
    assert_eq!(r, "new", "{}", run.ctx());
    assert_eq!(w, "Read-only file system", "{}", run.ctx());
}

/// A read grant above the data directory carves out capsule's volumes
/// (other runs' data) beneath it; the volume this run mounts is named
/// exactly by its mount and stays usable, at its destination (the view) or
/// in place (without namespaces), while the other volumes stay unreadable.
/// Before: the broader grant dropped the mount's own grant, and the run got
/// EACCES on its volume.
#[test]
fn a_volume_stays_usable_under_a_read_grant_above_it_and_the_others_stay_carved_out() {
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    sb.run(&["volume", "create", "vw-mine"]).assert_code(0);
    sb.run(&["volume", "create", "vw-other"]).assert_code(0);
    let vols = data.join("capsule/volumes");
    fs::write(vols.join("vw-mine/seed"), "mine").unwrap();
    fs::write(vols.join("vw-other/secret"), "theirs").unwrap();
    let data_s = data.to_string_lossy().into_owned();
    let mine = vols.join("vw-mine").to_string_lossy().into_owned();
    let dst = if view_expected() {
        "/pack".to_string()
    } else {
        mine.clone()
    };
    let mount = format!("volume:vw-mine:{dst}:rw");
    let opts = ["--allow-read", data_s.as_str(), "--mount", mount.as_str()];
    let (run, r, w) = read_then_write(&sb, &opts, &format!("{dst}/seed"), &format!("{dst}/made"));
    run.assert_code(0);
    assert_eq!((r.as_str(), w.as_str()), ("mine", "ok"), "{}", run.ctx());
    assert_eq!(
        fs::read_to_string(vols.join("vw-mine/made")).unwrap_or_default(),
        "new"
    );
    // The carve-out still holds for every other volume, by its host path.
    let other = vols.join("vw-other/secret").to_string_lossy().into_owned();
    let (run, r, _) = read_then_write(&sb, &opts, &other, &format!("{dst}/more"));
    run.assert_code(0);
    assert_eq!(
        r,
        "Permission denied",
        "another run's volume is readable{}",
        run.ctx()
    );
}

#[test]
fn without_namespaces_a_mount_elsewhere_is_refused_and_in_place_is_a_grant() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    sb.write("src/a", "from-host");
    let src = sb.p("src");
    let run = sb.exec_json(&["--mount", &format!("{src}:/pack")], &["/bin/true"]);
    run.assert_code(125);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("mount namespace"),
        "the refusal does not say why{}",
        run.ctx()
    );
    // --best-effort does not turn it into a different run either.
    let run = sb.exec_json(
        &["--best-effort", "--mount", &format!("{src}:/pack")],
        &["/bin/true"],
    );
    run.assert_code(125);
    // DST == SRC: an ordinary grant, read-only unless :rw.
    let a = sb.p("src/a");
    let b = sb.p("src/b");
    let (run, r, w) = read_then_write(&sb, &["--mount", &format!("{src}:{src}")], &a, &b);
    run.assert_code(0);
    assert_eq!(r, "from-host", "{}", run.ctx());
    assert_ne!(
        w,
        "ok",
        "ESCAPE: a read-only mount in place is writable{}",
        run.ctx()
    );
    let (run, _, w) = read_then_write(&sb, &["--mount", &format!("{src}:{src}:rw")], &a, &b);
    run.assert_code(0);
    assert_eq!(w, "ok", "{}", run.ctx());
    assert_eq!(sb.read("src/b"), "new");
}

#[test]
fn tmp_size_gives_a_private_tmp_of_that_size() {
    if !view_expected() {
        skip("no namespaces here: no private /tmp");
        return;
    }
    let sb = Sandbox::new();
    let code = "import os; s = os.statvfs('/tmp'); print('size=%d' % (s.f_blocks * s.f_frsize // (1024 * 1024)))";
    let pol = sb.policy("version: 1\nlimits:\n  tmp_size_mb: 8\n");
    let run = py(&sb, &["--policy", &pol], code);
    run.assert_code(0);
    assert!(run.child_stdout().contains("size=8\n"), "{}", run.ctx());
    // --tmp-size overrides the policy.
    let run = py(&sb, &["--policy", &pol, "--tmp-size", "16m"], code);
    run.assert_code(0);
    assert!(run.child_stdout().contains("size=16\n"), "{}", run.ctx());
    // Full is full: ENOSPC, not the host's disk.
    let fill = "import os\ntry:\n  open('/tmp/big','wb').write(b'x' * (20 * 1024 * 1024)); print('fill=ok')\nexcept OSError as e:\n  print('fill=' + os.strerror(e.errno))";
    let run = py(&sb, &["--policy", &pol], fill);
    run.assert_code(0);
    assert!(
        run.child_stdout().contains("fill=No space left on device"),
        "{}",
        run.ctx()
    );
}

#[test]
fn etc_is_granted_whole_in_the_view_and_file_by_file_without() {
    // A harmless /etc file that the no-view list does not name.
    let Some(file) = [
        "/etc/adduser.conf",
        "/etc/login.defs",
        "/etc/shells",
        "/etc/issue",
    ]
    .into_iter()
    .find(|f| fs::read(f).is_ok_and(|d| !d.is_empty())) else {
        skip("no ordinary readable /etc file found");
        return;
    };
    let py_ = python();
    if view_expected() {
        let sb = Sandbox::new();
        let run = sb.exec_json(&[], &[&py_, "-c", READ_EACH, file]);
        run.assert_code(0);
        assert!(
            run.child_stdout().contains(&format!("{file}=DATA")),
            "{}",
            run.ctx()
        );
    }
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let run = sb.exec_json(&[], &[&py_, "-c", READ_EACH, file]);
    run.assert_code(0);
    assert!(
        run.child_stdout()
            .contains(&format!("{file}=Permission denied")),
        "{file} readable without the view, where /etc is granted file by file{}",
        run.ctx()
    );
}

/// A grant beneath /dev/shm was hidden by the run's private /dev/shm (the
/// run saw ENOENT where it was granted). Now it is bound again inside the
/// private one, as grants beneath /tmp are: a write grant reaches the
/// host's files, a read grant stays read-only although the private
/// /dev/shm is writable around it, and what the run writes elsewhere in
/// /dev/shm stays private. A carve-out beneath such a grant cannot be kept
/// there (the private /dev/shm's Landlock rights would reach it): refused.
#[test]
fn a_grant_beneath_dev_shm_is_bound_inside_the_private_one() {
    if !view_expected() {
        skip("no view here (no private /dev/shm to hide a grant)");
        return;
    }
    let Ok(dir) = tempfile::Builder::new()
        .prefix("capsule-shm-view.")
        .tempdir_in("/dev/shm")
    else {
        skip("no writable /dev/shm here");
        return;
    };
    let base = dir.path();
    fs::create_dir_all(base.join("rw")).unwrap();
    fs::create_dir_all(base.join("ro")).unwrap();
    fs::write(base.join("ro/file"), "host data\n").unwrap();
    let sb = Sandbox::new();
    let (rw, ro) = (base.join("rw"), base.join("ro"));
    let private = format!(
        "/dev/shm/{}-private",
        base.file_name().unwrap().to_string_lossy()
    );
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [{}]\n  read: [{}]\n",
        rw.display(),
        ro.display()
    ));
    let script = format!(
        "echo run > {rw}/x && cat {ro}/file && \
         (echo no > {ro}/y 2>/dev/null && echo RO-WRITTEN || echo ro-refused) && \
         echo p > {private} && echo private-ok",
        rw = rw.display(),
        ro = ro.display(),
    );
    let run = sb.run(&["exec", "--policy", &pol, "--", "/bin/sh", "-c", &script]);
    assert_eq!(run.code, Some(0), "{}", run.ctx());
    assert!(
        run.stdout.contains("host data"),
        "the read grant: {}",
        run.ctx()
    );
    assert!(
        run.stdout.contains("ro-refused"),
        "ESCAPE: wrote in a read grant{}",
        run.ctx()
    );
    assert!(run.stdout.contains("private-ok"), "{}", run.ctx());
    assert_eq!(
        fs::read_to_string(rw.join("x")).unwrap_or_default(),
        "run\n",
        "{}",
        run.ctx()
    );
    assert!(
        !ro.join("y").exists(),
        "ESCAPE: wrote in a read grant{}",
        run.ctx()
    );
    assert!(
        !std::path::Path::new(&private).exists(),
        "ESCAPE: the private /dev/shm reached the host's{}",
        run.ctx()
    );
    // A carve-out beneath the grant: refused with the reason, not dropped.
    fs::write(rw.join("secret"), "s\n").unwrap();
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [{}]\n  deny: [{}/secret]\n",
        rw.display(),
        rw.display()
    ));
    let run = sb.run(&["exec", "--policy", &pol, "--", "/bin/true"]);
    assert_eq!(run.code, Some(125), "{}", run.ctx());
    assert!(run.stderr.contains("private /dev/shm"), "{}", run.ctx());
    // check refuses it alike, and says so rather than "no namespaces here".
    let check = sb.run(&["check", "--policy", &pol]);
    assert_eq!(check.code, Some(125), "{}", check.ctx());
    assert!(
        check.stdout.contains("private /dev/shm") && !check.stdout.contains("no namespaces here"),
        "{}",
        check.ctx()
    );
}

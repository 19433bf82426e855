//! Red team 3: attacks on where capsule runs now — the no-namespace path,
//! `exec --explain`, `capsule serve`, the keeper — each written as the
//! attack, run against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips.

mod common;

use common::*;

/// Control characters (ESC, BEL, CR, LF inside a field...) in a line capsule
/// itself printed: the run chose them.
fn has_terminal_control(s: &str) -> bool {
    s.chars().any(|c| c != '\n' && c.is_control())
}

/// `--explain` prints, on capsule's own stderr, the paths the run named and
/// the tool names it asked for. Both are the run's bytes: a name holding an
/// escape sequence reached the user's terminal as capsule's output (a title
/// change, a cleared screen), and a newline in it forged whole `capsule:`
/// lines (a false "refused nothing", a "to allow ... --allow-write /").
#[test]
fn explain_output_does_not_carry_the_runs_control_characters() {
    let sb = Sandbox::new();
    let outside = sb.mkdir("outside");
    let work = sb.mkdir("work");
    let policy = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [\"{}\"]\n",
        work.display()
    ));
    // A write outside every grant (a denial the observer reports) whose
    // name carries a screen clear, a title change and a forged line; and a
    // tools/call of a tool named the same way (a broker refusal).
    let code = format!(
        r#"import os, json
bad = "a\x1b[2J\x1b]0;PWNED\x07\ncapsule: --explain: FORGED to allow --allow-write /"
try:
    open({outside:?} + "/" + bad, "w")
except OSError as e:
    print("write refused", e.errno)
fd = int(os.environ["CAPSULE_RPC_FD"])
req = {{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": bad, "arguments": {{}}}}}}
os.write(fd, json.dumps(req).encode() + b"\n")
print("rpc", os.read(fd, 65536)[:80])
print("done")
"#,
        outside = outside.display().to_string()
    );
    let r = sb.run(&[
        "exec",
        "--explain",
        "--no-tty",
        "-p",
        &policy,
        "--cwd",
        &work.to_string_lossy(),
        "--",
        &python(),
        "-c",
        &code,
    ]);
    assert!(r.stdout.contains("done"), "{}", r.ctx());
    assert!(r.stdout.contains("write refused"), "{}", r.ctx());
    // Everything capsule said after the command's own output.
    let Some(at) = r.stderr.find("capsule: --explain:") else {
        panic!("no --explain report:{}", r.ctx());
    };
    let report = &r.stderr[at..];
    if report.contains("file accesses were not observed") {
        skip("--explain could not observe file accesses here");
    }
    assert!(
        !has_terminal_control(report),
        "ESCAPE: the run's control characters reached capsule's own --explain lines: {report:?}"
    );
    assert!(
        !report
            .lines()
            .any(|l| l.starts_with("capsule: --explain: FORGED")),
        "ESCAPE: the run forged a capsule line in the --explain report: {report:?}"
    );
    // The refusals are still reported, with the names shown escaped.
    assert!(report.contains("\\u{1b}"), "{report:?}");
    assert!(report.contains("tool "), "the tool refusal: {report:?}");
}

/// Without a network namespace the run shares the host's abstract Unix
/// socket namespace. Landlock's scope (ABI 6) keeps the run from connecting
/// to the host's abstract sockets, and below ABI 6 `allow_unix_sockets` is
/// refused; but no layer keeps the run from *binding* an abstract name the
/// host uses (`@/tmp/.X11-unix/X1`, a D-Bus or a service's address) and
/// answering the host's clients there: an X11 client hands its
/// MIT-MAGIC-COOKIE to whoever listens at the display's name.
#[test]
fn without_a_netns_the_run_cannot_serve_the_hosts_abstract_socket_names() {
    use std::io::Read;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let name = token("red3-squat");
    let policy = sb.policy("version: 1\nnetwork:\n  mode: none\n  allow_unix_sockets: true\n");
    let code = format!(
        r#"import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.bind(b"\0" + {name:?}.encode())
    s.listen(1)
except OSError as e:
    print("bind refused", e.errno, flush=True)
    sys.exit(0)
print("listening", flush=True)
s.settimeout(20)
try:
    c, _ = s.accept()
    c.sendall(b"from-the-run")
    print("served a host client", flush=True)
except OSError as e:
    print("no client", e)
"#
    );
    let mut c = sb.std_command([
        "exec",
        "--json",
        "-p",
        &policy,
        "--",
        &python(),
        "-c",
        &code,
    ]);
    c.stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn capsule");
    // The host's client: connect to the name, as a host program would.
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut got = String::new();
    while std::time::Instant::now() < deadline {
        if let Ok(mut s) = UnixStream::connect_addr(&addr) {
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let _ = s.read_to_string(&mut got);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("wait capsule");
    let ctx = format!(
        "stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        got != "from-the-run",
        "ESCAPE: a host client connecting to the abstract name @{name} reached the run: {ctx}"
    );
}

/// capsule's own CPU seconds (utime + stime, without its reaped children).
fn own_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// Four processes (two forks, each forking once more) that name paths outside every grant in a loop: each call
/// is a round trip to capsule's observer, which reads the path from the
/// caller's memory, its working directory, and stats the path twice (in
/// the run's view and on the host) — work outside every limit of the run.
const OPEN_LOOP_PY: &str = r#"
import os, time
def loop():
    end = time.time() + 26
    i = 0
    while time.time() < end:
        i += 1
        try:
            os.open("/nonexistent-red3/%d" % (i % 64), os.O_RDONLY)
        except OSError:
            pass
    return i
pids = [os.fork() for _ in range(2)]
n = loop()
if 0 in pids:
    os._exit(0)
for p in pids:
    os.waitpid(p, 0)
t = os.times()
print("opens", n, "cpu of the run", t.user + t.system + t.children_user + t.children_system)
"#;

/// The guards' CPU budget (docs/guards.md) holds capsule to what one more
/// process of the run may spend; `--explain`'s observer is exempt ("a run is
/// never killed for being observed"), so under `--explain` a run keeps
/// capsule's observer thread busy for its whole timeout, outside every limit
/// (cpu_seconds, a cgroup's cpu) of the run: here 3 s of budget for a 30 s
/// timeout, and capsule spent more than the run itself.
#[test]
fn explain_cannot_make_capsule_burn_cpu_past_the_guards_budget() {
    let Some((cpu, out)) = capsule_cpu_under_explain(OPEN_LOOP_PY) else {
        return;
    };
    // The budget is min(cpu_seconds, timeout / 10) = 3 s; the signal and
    // process guards are held to it plus start-up slack (escape_guards.rs).
    assert!(
        cpu < 4.5,
        "ESCAPE: under --explain the run made capsule spend {cpu:.2} s of CPU (budget 3 s): {out}"
    );
}

/// `capsule exec --explain` of `python -c SCRIPT` under a 3 s guards budget
/// (`cpu_seconds: 3`, 30 s timeout): the most CPU time capsule's process
/// was seen to have spent, and the result. None (skipped) where `--explain`
/// cannot observe file accesses.
fn capsule_cpu_under_explain(script: &str) -> Option<(f64, String)> {
    let sb = Sandbox::new();
    let policy = sb.policy("version: 1\nlimits:\n  timeout_seconds: 30\n  cpu_seconds: 3\n");
    let mut c = sb.std_command([
        "exec",
        "--json",
        "--no-audit",
        "--explain",
        "-p",
        &policy,
        "--",
        &python(),
        "-c",
        script,
    ]);
    c.stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::null());
    c.stdin(std::process::Stdio::null());
    let mut child = c.spawn().expect("spawn capsule");
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let mut cpu = 0.0f64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(t) = own_cpu_seconds(pid) {
            cpu = cpu.max(t);
        }
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let out = reader.join().unwrap();
    eprintln!("capsule spent {cpu:.2} s of CPU under --explain: {out}");
    if !via_serve() {
        let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        if j["explain"]["files"] != true {
            skip("--explain could not observe file accesses here");
            return None;
        }
    }
    Some((cpu, out))
}

/// [`OPEN_LOOP_PY`] for 8 s (the observer takes the whole budget, which
/// never kills a run), then the same four processes signal themselves in a
/// loop (an ignored signal): calls the observer records (pid namespace) or
/// the signal guard judges (no pid namespace), whose time counted toward the
/// kill from zero, so capsule spent a second budget before the run was
/// killed.
const OPEN_THEN_KILL_PY: &str = r#"
import os, signal, time
signal.signal(signal.SIGWINCH, signal.SIG_IGN)
def loop():
    end = time.time() + 8
    i = 0
    while time.time() < end:
        i += 1
        try:
            os.open("/nonexistent-red3/%d" % (i % 64), os.O_RDONLY)
        except OSError:
            pass
    end = time.time() + 18
    me = os.getpid()
    while time.time() < end:
        os.kill(me, signal.SIGWINCH)
    return i
pids = [os.fork() for _ in range(2)]
n = loop()
if 0 in pids:
    os._exit(0)
for p in pids:
    os.waitpid(p, 0)
print("opens", n)
"#;

/// Past the budget the observer is paced, and it never makes the run be
/// killed; but the other calls of the notify loop (a signal the observer
/// records or the signal guard judges) counted toward the kill only beyond
/// the observer's time, from zero: a run that first spent the budget on
/// observed paths then signalled itself in a loop had capsule spend 5.9 s
/// of CPU (release build) on a 3 s budget before it was killed.
#[test]
fn explain_then_signals_cannot_make_capsule_burn_twice_the_guards_budget() {
    let Some((cpu, out)) = capsule_cpu_under_explain(OPEN_THEN_KILL_PY) else {
        return;
    };
    assert!(
        cpu < 4.5,
        "ESCAPE: observed paths then signals made capsule spend {cpu:.2} s of CPU (budget 3 s): {out}"
    );
}

/// A file's inode generation, as `FS_IOC_GETVERSION` reports it (None where
/// the file system has none, e.g. tmpfs).
fn generation(path: &std::path::Path) -> Option<i64> {
    let out = std::process::Command::new(python())
        .args([
            "-c",
            "import array, fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nb = array.array('l', [0])\nfcntl.ioctl(fd, 0x80087601, b)\nprint(b[0])",
        ])
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Without a mount namespace nothing makes the host read-only, so the
/// metadata guard holds what Landlock cannot see; its ioctl list covered the
/// chattr flags, not the other ioctls an owner (as root: of every file) may
/// make on a descriptor opened only for reading: `FS_IOC_SETVERSION`
/// rewrites the inode's generation (NFS handles of the file go stale), and
/// `EXT4_IOC_MIGRATE`, `FS_IOC_SET_ENCRYPTION_POLICY` and
/// `FS_IOC_ENABLE_VERITY` (a verity file can never be written again) change
/// a file or directory the run may only read.
#[test]
fn without_namespaces_a_read_grant_cannot_change_a_files_generation() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let ro = sb.mkdir("ro");
    let file = sb.write("ro/file", "data\n");
    let Some(before) = generation(&file) else {
        skip("this file system has no inode generation (FS_IOC_GETVERSION)");
        return;
    };
    let code = r#"import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for name, req, arg in [("FS_IOC_SETVERSION", 0x40087602, struct.pack("l", 424242)),
                       ("FS_IOC32_SETVERSION", 0x40047602, struct.pack("i", 434343)),
                       ("EXT4_IOC_MIGRATE", 0x6609, 0)]:
    try:
        fcntl.ioctl(fd, req, arg)
        print(name, "ok")
    except OSError as e:
        print(name, "refused", e.errno)
"#;
    let r = sb.exec_json(
        &["--allow-read", &ro.to_string_lossy()],
        &[&python(), "-c", code, &file.to_string_lossy()],
    );
    r.assert_ran();
    let out = r.child_stdout();
    if r.json()["enforcement"]["view"] != serde_json::Value::Null {
        skip("capsule took the view here (a read-only host)");
        return;
    }
    let after = generation(&file);
    assert_eq!(
        after,
        Some(before),
        "ESCAPE: a read grant changed the file's generation on the no-namespace path: {out}{}",
        r.ctx()
    );
    assert!(!out.contains(" ok"), "ESCAPE: {out}{}", r.ctx());
}

/// A read lease (`fcntl(F_SETLEASE, F_RDLCK)`) needs only a descriptor
/// opened for reading and ownership of the file (as root: any file), and no
/// Landlock ABI, mount flag or namespace sees it: the run held every host
/// process that opened a file it may only read for writing (or truncated
/// it) blocked for `fs.lease-break-time` (45 s) per open — `/etc/passwd`
/// for `useradd`, a project's files for the user's editor.
#[test]
fn a_read_grant_cannot_block_the_hosts_writers_with_a_lease() {
    let sb = Sandbox::new();
    let ro = sb.mkdir("ro");
    let file = sb.write("ro/file", "data\n");
    let out = sb.mkdir("out");
    let marker = out.join("leased");
    let code = r#"import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease break's notice
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.fcntl(fd, 1024, fcntl.F_RDLCK)  # F_SETLEASE
    what = "leased"
except OSError as e:
    what = "refused %d" % e.errno
open(sys.argv[2], "w").write(what)
time.sleep(8)
"#;
    let mut c = sb.std_command([
        "exec",
        "--json",
        "--no-audit",
        "--allow-read",
        &ro.to_string_lossy(),
        "--allow-write",
        &out.to_string_lossy(),
        "--",
        &python(),
        "-c",
        code,
        &file.to_string_lossy(),
        &marker.to_string_lossy(),
    ]);
    c.stdout(std::process::Stdio::piped());
    c.stderr(std::process::Stdio::piped());
    c.stdin(std::process::Stdio::null());
    let child = c.spawn().expect("spawn capsule");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !marker.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let what = std::fs::read_to_string(&marker).unwrap_or_default();
    // The host's writer: open for writing, timed.
    let started = std::time::Instant::now();
    let opened = std::fs::OpenOptions::new().write(true).open(&file);
    let waited = started.elapsed();
    let out = child.wait_with_output().expect("wait capsule");
    let ctx = format!(
        "the run: {what:?}; the host's open: {opened:?} after {waited:?}; capsule: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!what.is_empty(), "the run never got going: {ctx}");
    assert!(
        waited < std::time::Duration::from_secs(3),
        "ESCAPE: the run's lease held a host writer for {waited:?}: {ctx}"
    );
    assert!(what.starts_with("refused"), "ESCAPE: {ctx}");
}

/// After the run `--explain` answers every observed (path, access) with
/// `why`'s Survey, on the host, as capsule. A run that builds a deep
/// directory chain in its write grant and then names paths beneath it made
/// each answer walk the chain once per missing component (canonicalize of
/// every ancestor): 20 such paths at depth 400 kept capsule busy 167 s
/// after a 1.4 s run — past the run's timeout, before the result, the audit
/// record or the exit status.
#[test]
fn explain_answers_in_bounded_time_after_the_run() {
    let sb = Sandbox::new();
    let out = sb.mkdir("out");
    let code = r#"import os, sys
os.chdir(sys.argv[1])
for i in range(300):
    os.mkdir("d")
    os.chdir("d")
tail = "n/" * 300
for i in range(20):
    try:
        os.open(tail + "f%d" % i, os.O_WRONLY | os.O_CREAT)
    except OSError:
        pass
print("done")
"#;
    let started = std::time::Instant::now();
    let r = sb.exec_json(
        &[
            "--explain",
            "--no-audit",
            "--allow-write",
            &out.to_string_lossy(),
        ],
        &[&python(), "-c", code, &out.to_string_lossy()],
    );
    let took = started.elapsed().as_secs_f64();
    r.assert_ran();
    let j = r.json();
    let ran = j["duration_seconds"].as_f64().unwrap_or(0.0);
    eprintln!("the run took {ran:.1} s, capsule {took:.1} s");
    assert!(
        took - ran < 15.0,
        "ESCAPE: --explain kept capsule busy {:.1} s after a {ran:.1} s run: {}",
        took - ran,
        j["explain"]
    );
}

/// Path 2 (a container's masked /proc, bound read-only into the view):
/// emulated as tests/exec_fallbacks.rs does, `unshare -Urm` with /dev/null
/// bound over /proc/timer_list, then capsule without CAP_SYS_ADMIN. The
/// run has a network namespace of its own, but `/proc/<pid>/net/` of any
/// process outside the run is that process's namespace: the container's
/// TCP connections and listeners (`net/tcp`: the agent host's peers and
/// ports), its Unix sockets by name (`net/unix`), its interfaces' traffic
/// counters (`net/dev`). `enforcement.limitations` names only the process
/// list, cmdline, status, stat and descriptor numbers.
#[test]
fn on_path_2_the_run_cannot_read_the_containers_sockets() {
    let sb = Sandbox::new();
    let capsh = ["/usr/sbin/capsh", "/sbin/capsh", "/usr/bin/capsh"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let (Some(capsh), true) = (capsh, std::path::Path::new("/usr/bin/unshare").exists()) else {
        skip("no unshare or capsh to emulate a container's masked /proc");
        return;
    };
    // A listener of the host's (the container's) network namespace.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let (sleeper, _guard) = host_sleeper();
    let pid = sleeper.id();
    let code = format!(
        "import sys\ntry:\n    t = open('/proc/{pid}/net/tcp').read()\n    print('tcp', ':%04X ' % {port} in t)\nexcept OSError as e:\n    print('refused', e.errno)\n"
    );
    let args = ["exec", "--json", "--no-audit", "--", &python(), "-c", &code];
    let c = sb.std_command(args);
    let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
        .collect();
    let out = std::process::Command::new("/usr/bin/unshare")
        .args(["-Urm", "--propagation", "private", "/bin/sh", "-c"])
        .arg("mount --bind /dev/null /proc/timer_list && exec \"$0\" \"$@\"")
        .args([
            capsh,
            "--drop=cap_sys_admin",
            "--",
            "-c",
            "exec \"$0\" \"$@\"",
        ])
        .arg(capsule_bin())
        .args(args)
        .env_clear()
        .envs(envs)
        .current_dir(&sb.root)
        .output()
        .expect("run capsule behind the wrapper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Ok(j) = serde_json::from_str::<serde_json::Value>(stdout.trim()) else {
        skip(&format!(
            "the emulation did not run capsule: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return;
    };
    let proc_part = j["enforcement"]["view"]["proc"].clone();
    let said = j["enforcement"]["limitations"].to_string();
    if !said.contains("bound read-only") {
        skip(&format!("capsule did not take path 2 here: {proc_part}"));
        return;
    }
    let run_out = j["stdout"].as_str().unwrap_or_default();
    assert!(
        !run_out.contains("tcp True") || said.contains("/net"),
        "ESCAPE: on path 2 the run read the container's listener on port {port} in /proc/{pid}/net/tcp, and enforcement.limitations does not say so: {run_out}"
    );
    drop(listener);
}

/// Run `capsule exec OPTS -- CMD` with the file at `stdin` as capsule's own
/// stdin (as `capsule exec ... < FILE`, and as `capsule serve` gives every
/// step without `stdin`: /dev/null).
fn exec_with_stdin(sb: &Sandbox, stdin: &std::path::Path, cmd: &[&str]) -> Run {
    let mut args: Vec<String> = vec!["exec".into(), "--json".into(), "--no-audit".into()];
    args.push("--".into());
    args.extend(cmd.iter().map(|s| s.to_string()));
    let mut c = sb.std_command(&args);
    c.stdin(std::fs::File::open(stdin).expect("open stdin file"));
    let out = c.output().expect("run capsule");
    Run {
        args,
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stdout_raw: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const FCHMOD_STDIN_PY: &str = r#"import os
for what, call in [("fchmod", lambda: os.fchmod(0, 0o600)), ("futimens", lambda: os.utime(0, (0, 0)))]:
    try:
        call()
        print(what, "ok")
    except OSError as e:
        print(what, "refused", e.errno)
print("read", len(os.read(0, 100)))
"#;

/// capsule's stdin reaches the run as the very file description capsule was
/// given: one opened on the host's writable mount, outside the view's
/// read-only clone of it, where Landlock has no hook for metadata. So with
/// the view (the default path) the run changed the mode and times of the
/// file it was fed (`capsule exec -- cmd < notes.txt`), and as root of the
/// host's `/dev/null` itself (`capsule serve` gives every step /dev/null as
/// stdin; a CI job's stdin is /dev/null): `fchmod(0, 0600)` broke /dev/null
/// for every other user of the host.
#[test]
fn the_run_cannot_change_the_file_it_was_given_as_stdin() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let sb = Sandbox::new();
    let file = sb.write("stdin.txt", "hello\n");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mtime = std::fs::metadata(&file).unwrap().mtime();
    let r = exec_with_stdin(&sb, &file, &[&python(), "-c", FCHMOD_STDIN_PY]);
    r.assert_ran();
    let out = r.child_stdout();
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.mtime()),
        (0o644, mtime),
        "ESCAPE: the run changed the mode or times of its stdin file: {out}{}",
        r.ctx()
    );
    assert!(
        out.contains("read 6"),
        "the run still reads its stdin: {out}"
    );
    // A device as stdin (a node of /dev/null's numbers made for the test,
    // never the host's own): as root the run owns it.
    if !is_root() {
        return;
    }
    let dev = sb.path("null-like");
    let made = std::process::Command::new("mknod")
        .args(["-m", "666"])
        .arg(&dev)
        .args(["c", "1", "3"])
        .status();
    if !matches!(made, Ok(s) if s.success()) {
        skip("mknod refused here (a container without CAP_MKNOD)");
        return;
    }
    let r = exec_with_stdin(&sb, &dev, &[&python(), "-c", FCHMOD_STDIN_PY]);
    r.assert_ran();
    let out = r.child_stdout();
    let mode = std::fs::metadata(&dev).unwrap().mode() & 0o7777;
    assert_eq!(
        mode,
        0o666,
        "ESCAPE: the run changed the mode of the device it was given as stdin (as /dev/null): {out}{}",
        r.ctx()
    );
    assert!(out.contains("read 0"), "stdin still reads as empty: {out}");
}

/// The same through a named FIFO (`capsule exec -- cmd < /run/fifo`): its
/// inode lies on the host's file system, unlike an anonymous pipe's.
#[test]
fn the_run_cannot_change_the_named_fifo_it_was_given_as_stdin() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let sb = Sandbox::new();
    let fifo = sb.path("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o644)).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            let _ = w.write_all(b"hello\n");
        })
    };
    let r = exec_with_stdin(&sb, &fifo, &[&python(), "-c", FCHMOD_STDIN_PY]);
    writer.join().unwrap();
    r.assert_ran();
    let out = r.child_stdout();
    let mode = std::fs::metadata(&fifo).unwrap().mode() & 0o7777;
    assert_eq!(
        mode,
        0o644,
        "ESCAPE: the run changed the mode of the named FIFO it was given as stdin: {out}{}",
        r.ctx()
    );
    assert!(
        out.contains("read 6"),
        "the run still reads its stdin: {out}"
    );
}

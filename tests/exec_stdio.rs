//! What reaches the run's fds 0-2, and what capsule does when its own stdio
//! goes away.
//!
//! - Issue 37 item 2: a socket on capsule's stdin lives in the host's network
//!   namespace. Handed on as it is, the run could write to the socket's peer
//!   (past capture and the `--json` framing), `accept` the host's
//!   connections on a listening socket, or `sendto` any address on a UDP
//!   socket, in `network.mode: none`. Every stdin that is not an anonymous
//!   pipe reaches the run through a pipe capsule fills: bytes only. The run's
//!   stdout and stderr are capsule's own pipes even when capsule's are sockets.
//! - Issue 39 item 2: when the reader of capsule's stdout (or stderr) goes
//!   away in streaming mode, the run sees it as it would without capsule:
//!   EPIPE/SIGPIPE on its next write, and capsule ends with the run's own
//!   status (`yes | head -3` is 141 at once, not 124 after the timeout).
//! - Issue 37 item 6: a closed stderr (and stdout) never makes capsule panic
//!   (101): the run is reaped, the audit record written, the run's status
//!   returned.
//!
//! The sockets are the test's own, bound on 127.0.0.1; nothing else is
//! aimed at.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The run's side of the socket attacks: what fd 0 is, a write to it, and
/// (per mode) an accept or a sendto on it; one JSON line on stdout.
const STDIN_ATTACK: &str = r#"
import errno, json, os, socket, stat, sys
r = {}
def err(e):
    n = getattr(e, "errno", None)
    return errno.errorcode.get(n, str(n)) if n else type(e).__name__
m = os.fstat(0).st_mode
r["kind"] = "sock" if stat.S_ISSOCK(m) else "fifo" if stat.S_ISFIFO(m) else oct(m)
try:
    os.write(0, b"FORGED-WRITE\n")
    r["write"] = "ok"
except OSError as e:
    r["write"] = err(e)
mode = sys.argv[1]
if mode == "accept":
    try:
        s = socket.socket(fileno=os.dup(0))
        s.settimeout(3)
        c, _ = s.accept()
        c.sendall(b"FORGED-ACCEPT\n")
        r["accept"] = "ok"
    except Exception as e:
        r["accept"] = err(e)
elif mode == "udp":
    try:
        s = socket.socket(fileno=os.dup(0))
        s.sendto(b"FORGED-SENDTO", ("127.0.0.1", int(sys.argv[2])))
        r["sendto"] = "ok"
    except Exception as e:
        r["sendto"] = err(e)
elif mode == "stream":
    try:
        s = socket.socket(fileno=os.dup(0))
        s.send(b"FORGED-SEND\n")
        r["send"] = "ok"
    except Exception as e:
        r["send"] = err(e)
    r["read"] = sys.stdin.buffer.read().decode()
print(json.dumps(r), flush=True)
"#;

fn skip_via_serve() -> bool {
    // A serve step's stdin is the server's pipe (or /dev/null), never the
    // caller's socket; this file drives capsule's own descriptors.
    if via_serve() {
        eprintln!("CAPSULE-SKIP exec_stdio drives capsule's own stdio; serve steps get pipes");
        return true;
    }
    false
}

/// Wait for `child`, at most `bound`; kill it (by its pid) past that.
fn wait_bounded(child: &mut Child, bound: Duration) -> (Option<i32>, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return (st.code(), t0.elapsed());
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let st = child.wait().expect("wait");
            return (st.code().or(Some(-1)), t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `capsule exec --json -- python3 -c STDIN_ATTACK ARGS` with `stdin`; the
/// run's report and capsule's exit status.
fn attack_with_stdin(sb: &Sandbox, stdin: OwnedFd, args: &[&str]) -> (Value, Option<i32>, String) {
    let py = python();
    let mut argv: Vec<&str> = vec![
        "exec",
        "--json",
        "--timeout",
        "20",
        "--",
        &py,
        "-c",
        STDIN_ATTACK,
    ];
    argv.extend_from_slice(args);
    let mut c = sb.std_command(&argv);
    c.stdin(Stdio::from(stdin))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().expect("spawn capsule");
    let out = {
        let mut child = child;
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        let mut o = String::new();
        let _ = so.read_to_string(&mut o);
        let (code, _) = wait_bounded(&mut child, RUN_BOUND);
        (o, code, t.join().unwrap_or_default())
    };
    let (stdout, code, stderr) = out;
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("no JSON result ({e}): {stdout:?} {stderr}"));
    let line = v["stdout"].as_str().unwrap_or_default().trim().to_string();
    let report: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the run printed no report ({e}): {v}\n{stderr}"));
    (report, code, stderr)
}

#[test]
fn a_connected_socket_on_stdin_reaches_the_run_as_bytes_only() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    (&ours).write_all(b"hello from the peer\n").unwrap();
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    let (report, code, stderr) = attack_with_stdin(&sb, theirs.into(), &["stream"]);
    assert_eq!(code, Some(0), "{report} {stderr}");
    // The bytes arrive; the socket does not.
    assert_eq!(report["read"], "hello from the peer\n", "{report}");
    assert_eq!(report["kind"], "fifo", "stdin is capsule's pipe: {report}");
    assert_ne!(report["write"], "ok", "{report}");
    assert_ne!(report["send"], "ok", "{report}");
    // Nothing the run wrote reached the peer.
    ours.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    match (&ours).read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!(
            "the run wrote to capsule's caller past the result: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
    }
}

#[test]
fn a_listening_socket_on_stdin_cannot_accept_the_hosts_connections() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().unwrap();
    // A client of the host's service waits in the backlog.
    let mut client = TcpStream::connect(addr).expect("connect");
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let fd: OwnedFd = listener.try_clone().unwrap().into();
    let (report, code, stderr) = attack_with_stdin(&sb, fd, &["accept"]);
    assert_eq!(code, Some(0), "{report} {stderr}");
    assert_ne!(
        report["accept"], "ok",
        "the run accepted the host's connection: {report}"
    );
    assert_eq!(report["kind"], "fifo", "{report}");
    // The client got nothing from the run, and the connection is still the host's.
    let mut buf = [0u8; 64];
    match client.read(&mut buf) {
        Ok(n) => assert_eq!(
            n,
            0,
            "the client read {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_ok(),
        "the pending connection is gone from the host's listener"
    );
}

#[test]
fn a_udp_socket_on_stdin_cannot_send_anywhere() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let on_stdin = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let target = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = target.local_addr().unwrap().port().to_string();
    let (report, code, stderr) = attack_with_stdin(&sb, on_stdin.into(), &["udp", &port]);
    assert_eq!(code, Some(0), "{report} {stderr}");
    assert_ne!(report["sendto"], "ok", "{report}");
    assert_eq!(report["kind"], "fifo", "{report}");
    target.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    match target.recv(&mut buf) {
        Ok(n) => panic!(
            "the run sent a datagram on the host's network: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
    }
}

/// Node's child_process and others give a child socketpairs as stdio, some
/// non-blocking: the relay still delivers every byte, and end-of-file.
#[test]
fn a_nonblocking_socket_stdin_is_relayed_whole() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    theirs.set_nonblocking(true).unwrap();
    let writer = std::thread::spawn(move || {
        let mut ours = ours;
        // Late and in pieces: the relay meets EAGAIN first.
        for i in 0..5 {
            std::thread::sleep(Duration::from_millis(150));
            let _ = ours.write_all(format!("piece {i}\n").as_bytes());
        }
        let _ = ours.shutdown(std::net::Shutdown::Write);
        ours
    });
    let (report, code, stderr) = attack_with_stdin(&sb, theirs.into(), &["stream"]);
    let _ = writer.join();
    assert_eq!(code, Some(0), "{report} {stderr}");
    assert_eq!(
        report["read"], "piece 0\npiece 1\npiece 2\npiece 3\npiece 4\n",
        "{report}"
    );
}

/// capsule's stdout and stderr being sockets: the run still holds only
/// capsule's pipes (streaming mode).
#[test]
fn the_run_never_holds_capsules_stdout_or_stderr_socket() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (out_ours, out_theirs) = UnixStream::pair().unwrap();
    let (err_ours, err_theirs) = UnixStream::pair().unwrap();
    let py = python();
    let script = "import os, stat\n\
        k = lambda fd: 'sock' if stat.S_ISSOCK(os.fstat(fd).st_mode) else 'fifo' if stat.S_ISFIFO(os.fstat(fd).st_mode) else 'other'\n\
        print('KINDS', k(1), k(2), flush=True)\n";
    let mut c = sb.std_command(["exec", "--timeout", "20", "--", &py, "-c", script]);
    c.stdin(Stdio::null())
        .stdout(Stdio::from(OwnedFd::from(out_theirs)))
        .stderr(Stdio::from(OwnedFd::from(err_theirs)));
    let mut child = c.spawn().expect("spawn");
    drop(c);
    let (code, _) = wait_bounded(&mut child, RUN_BOUND);
    out_ours.shutdown(std::net::Shutdown::Write).ok();
    let mut out = String::new();
    let mut err = String::new();
    out_ours
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    err_ours
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = (&out_ours).read_to_string(&mut out);
    let _ = (&err_ours).read_to_string(&mut err);
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(
        out.contains("KINDS fifo fifo"),
        "stdout {out:?} stderr {err:?}"
    );
}

/// Streaming `capsule exec ARGS -- CMD` whose stdout (or stderr) reader
/// reads `keep` bytes and closes; capsule's exit status, how long it took
/// after the close, and the audit record.
fn reader_goes_away(
    sb: &Sandbox,
    cmd: &[&str],
    keep: usize,
    on_stderr: bool,
) -> (Option<i32>, Duration, Value) {
    let log = sb.path("audit.jsonl");
    let log_s = log.to_string_lossy().into_owned();
    let mut argv: Vec<&str> = vec!["exec", "--audit-log", &log_s, "--timeout", "60", "--"];
    argv.extend_from_slice(cmd);
    let mut c = sb.std_command(&argv);
    c.stdin(Stdio::null());
    if on_stderr {
        c.stdout(Stdio::null()).stderr(Stdio::piped());
    } else {
        c.stdout(Stdio::piped()).stderr(Stdio::null());
    }
    let mut child = c.spawn().expect("spawn");
    let mut reader: Box<dyn Read> = if on_stderr {
        Box::new(child.stderr.take().unwrap())
    } else {
        Box::new(child.stdout.take().unwrap())
    };
    let mut got = vec![0u8; keep];
    reader.read_exact(&mut got).expect("the run's first bytes");
    drop(reader);
    let (code, took) = wait_bounded(&mut child, Duration::from_secs(75));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let rec: Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    (code, took, rec)
}

/// The same command outside capsule, its stdout read for `keep` bytes then
/// closed: the status it gets on its own (128+N for a signal, as capsule
/// reports a signalled run).
fn host_status_when_reader_goes_away(cmd: &[&str], keep: usize) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn on the host");
    let mut so = child.stdout.take().unwrap();
    let mut got = vec![0u8; keep];
    so.read_exact(&mut got).unwrap();
    drop(so);
    let (_, _) = wait_bounded(&mut child, Duration::from_secs(30));
    let st = child.wait().unwrap();
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

fn assert_ended_by_the_close(
    code: Option<i32>,
    took: Duration,
    rec: &Value,
    want: i32,
    what: &str,
) {
    assert_ne!(code, Some(124), "{what}: ran to the timeout: {rec}");
    assert!(
        took < Duration::from_secs(15),
        "{what}: took {took:?} after the reader left: {rec}"
    );
    assert_eq!(code, Some(want), "{what}: {rec}");
    assert_eq!(rec["exit_code"], want, "{what}: the audit record {rec}");
}

#[test]
fn yes_into_a_closed_pipe_ends_with_sigpipe() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (code, took, rec) = reader_goes_away(&sb, &["yes"], 6, false);
    assert_ended_by_the_close(code, took, &rec, 128 + libc::SIGPIPE, "yes | head");
    assert_eq!(rec["stdout_closed_by_reader"], true, "{rec}");
    assert_eq!(host_status_when_reader_goes_away(&["yes"], 6), 141);
}

#[test]
fn find_into_a_closed_pipe_ends_with_sigpipe() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    // `find` writes names much faster than anyone reads them; a reader that
    // takes a few lines and quits, as `head` or `less` quit early. (`/`
    // itself is not readable under the default policy: /usr is.)
    let (code, took, rec) = reader_goes_away(&sb, &["find", "/usr"], 64, false);
    assert_ended_by_the_close(code, took, &rec, 128 + libc::SIGPIPE, "find / | head");
}

#[test]
fn a_python_loop_into_a_closed_pipe_ends_as_on_the_host() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let py = python();
    let cmd = [py.as_str(), "-c", "while True: print('line')"];
    let host = host_status_when_reader_goes_away(&cmd, 5);
    let (code, took, rec) = reader_goes_away(&sb, &cmd, 5, false);
    assert_ended_by_the_close(code, took, &rec, host, "python print loop");
}

#[test]
fn a_closed_stderr_reader_ends_the_run_too() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (code, took, rec) = reader_goes_away(&sb, &["/bin/sh", "-c", "yes >&2"], 6, true);
    assert_ended_by_the_close(code, took, &rec, 128 + libc::SIGPIPE, "yes >&2");
    assert_eq!(rec["stderr_closed_by_reader"], true, "{rec}");
}

/// A run that ignores the close (stops writing) is not killed: it ends on
/// its own, with its own status.
#[test]
fn a_run_that_stops_writing_is_left_to_finish() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (code, _, rec) = reader_goes_away(
        &sb,
        &["/bin/sh", "-c", "echo first; sleep 1; exit 7"],
        6,
        false,
    );
    assert_eq!(code, Some(7), "{rec}");
    assert_eq!(rec["exit_code"], 7, "{rec}");
}

/// Issue 37 item 6: capsule's stderr and stdout are pipes nobody reads any
/// more; the run prints nothing itself, capsule has notes, a refusal
/// summary and --explain to say. The run's status comes back, the audit
/// record is written.
#[test]
fn a_closed_stderr_does_not_panic_capsule() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let log = sb.path("audit.jsonl");
    let log_s = log.to_string_lossy().into_owned();
    let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    drop(out_r);
    drop(err_r);
    let mut c = sb.std_command([
        "exec",
        "--explain",
        "--audit-log",
        &log_s,
        "--timeout",
        "20",
        "--",
        "/bin/sh",
        "-c",
        "touch ./capsule-refused 2>/dev/null; exit 3",
    ]);
    c.stdin(Stdio::null())
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w));
    let mut child = c.spawn().expect("spawn");
    drop(c);
    let (code, _) = wait_bounded(&mut child, RUN_BOUND);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        code,
        Some(3),
        "capsule's status (101 is a panic); audit log: {text}"
    );
    let rec: Value = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap();
    assert_eq!(rec["exit_code"], 3, "{rec}");
    assert_eq!(rec["outcome"], "failed", "{rec}");
}

/// The same with `--json`: the result cannot be printed, the record still is.
#[test]
fn a_closed_stdout_and_stderr_with_json_still_write_the_record() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let log = sb.path("audit.jsonl");
    let log_s = log.to_string_lossy().into_owned();
    let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    drop(out_r);
    drop(err_r);
    let mut c = sb.std_command([
        "exec",
        "--json",
        "--explain",
        "--audit-log",
        &log_s,
        "--",
        "/bin/sh",
        "-c",
        "echo out; echo err >&2; touch ./capsule-refused 2>/dev/null; exit 4",
    ]);
    c.stdin(Stdio::null())
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w));
    let mut child = c.spawn().expect("spawn");
    drop(c);
    let (code, _) = wait_bounded(&mut child, RUN_BOUND);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(4), "audit log: {text}");
    let rec: Value = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap();
    assert_eq!(rec["exit_code"], 4, "{rec}");
}

/// capsule's stdout is a terminal (the run writes to its own pty, relayed)
/// and that terminal goes away (its emulator closed: EIO on every write).
/// The run's pty is hung up in turn, as a closed terminal does to its
/// session: the run gets SIGHUP at once, rather than writing into nothing on
/// a full core until the wall-clock limit.
#[test]
fn a_terminal_that_goes_away_hangs_up_the_runs_pty() {
    terminal_goes_away(true);
}

/// The terminal is gone before capsule starts (it cannot even tell it was
/// one: EIO): the run gets capsule's pipe, and the first write that fails
/// closes it, SIGPIPE.
#[test]
fn a_terminal_gone_before_the_start_closes_the_runs_pipe() {
    terminal_goes_away(false);
}

fn terminal_goes_away(while_relaying: bool) {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    // Opened close-on-exec, so that neither capsule nor the other tests'
    // children inherit the master: its last close must be the test's.
    use nix::fcntl::OFlag;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .expect("posix_openpt");
    nix::pty::grantpt(&master).unwrap();
    nix::pty::unlockpt(&master).unwrap();
    let name = nix::pty::ptsname_r(&master).unwrap();
    let slave: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&name)
        .expect("open the slave")
        .into();
    let master: OwnedFd = master.into();
    let log = sb.path("audit.jsonl");
    let log_s = log.to_string_lossy().into_owned();
    let mut c = sb.std_command([
        "exec",
        "--audit-log",
        &log_s,
        "--timeout",
        "60",
        "--",
        "yes",
    ]);
    c.stdin(Stdio::null())
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut master = std::fs::File::from(master);
    if !while_relaying {
        drop(master);
        let mut child = c.spawn().expect("spawn");
        drop(c);
        let (code, took) = wait_bounded(&mut child, Duration::from_secs(75));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let rec: Value = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap();
        assert_ended_by_the_close(
            code,
            took,
            &rec,
            128 + libc::SIGPIPE,
            "yes on a gone terminal",
        );
        assert_eq!(rec["stdout_closed_by_reader"], true, "{rec}");
        return;
    }
    let mut child = c.spawn().expect("spawn");
    drop(c);
    // The run's own output, relayed (capsule's notes may come first).
    let mut seen = Vec::new();
    let mut got = [0u8; 4096];
    while seen.windows(9).all(|w| w != b"y\r\ny\r\ny\r\n".as_slice())
        && seen
            .windows(12)
            .all(|w| w != b"y\r\r\ny\r\r\ny\r\r\n".as_slice())
    {
        let n = master.read(&mut got).expect("the run's first bytes");
        assert!(n > 0, "{:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&got[..n]);
    }
    drop(master);
    let (code, took) = wait_bounded(&mut child, Duration::from_secs(75));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let rec: Value = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap();
    assert_ended_by_the_close(
        code,
        took,
        &rec,
        128 + libc::SIGHUP,
        "yes on a closed terminal",
    );
    assert_eq!(rec["stdout_closed_by_reader"], true, "{rec}");
}

/// A reader that stays but never reads (`| sleep 1000`): the run is killed
/// at its wall-clock limit, and capsule ends soon after with 124 and its
/// audit record, not when the reader ends.
#[test]
fn a_reader_that_never_reads_does_not_hold_capsule_past_the_timeout() {
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let log = sb.path("audit.jsonl");
    let log_s = log.to_string_lossy().into_owned();
    let mut c = sb.std_command(["exec", "--audit-log", &log_s, "--timeout", "2", "--", "yes"]);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("spawn");
    // Held open, never read.
    let held = child.stdout.take();
    let (code, took) = wait_bounded(&mut child, Duration::from_secs(40));
    drop(held);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(took < Duration::from_secs(20), "capsule took {took:?}");
    assert_eq!(code, Some(124), "{text}");
    let rec: Value = serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap();
    assert_eq!(rec["exit_code"], 124, "{rec}");
}

/// The run's whole descriptor table: its stdio (capsule's pipes, even with a
/// socket on capsule's stdin) and the RPC end, nothing else — not
/// `--tool-fd`, not another descriptor capsule inherited (a listening
/// socket here).
#[test]
fn the_run_holds_only_its_stdio_and_the_rpc_end() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    if skip_via_serve() {
        return;
    }
    let sb = Sandbox::new();
    let (_tool_ours, tool_theirs) = UnixStream::pair().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let (_in_ours, in_theirs) = UnixStream::pair().unwrap();
    let script = r#"
import json, os, stat
out = {}
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        m = os.fstat(fd).st_mode
    except OSError:
        continue  # listdir's own, closed by now
    out[name] = "sock" if stat.S_ISSOCK(m) else "fifo" if stat.S_ISFIFO(m) else "chr" if stat.S_ISCHR(m) else oct(m)
print(json.dumps({"fds": out, "rpc": os.environ.get("CAPSULE_RPC_FD")}))
"#;
    let py = python();
    let mut c = sb.std_command([
        "exec",
        "--json",
        "--tool-fd",
        "7",
        "--timeout",
        "20",
        "--",
        &py,
        "-c",
        script,
    ]);
    c.stdin(Stdio::from(OwnedFd::from(in_theirs)));
    let (tool, extra) = (tool_theirs.as_raw_fd(), listener.as_raw_fd());
    // SAFETY: dup2 is async-signal-safe; it only touches the child's fd table.
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(tool, 7) < 0 || libc::dup2(extra, 8) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = c.output().expect("run capsule");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no result ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let report: Value = serde_json::from_str(v["stdout"].as_str().unwrap_or("").trim())
        .unwrap_or_else(|e| panic!("no report ({e}): {v}"));
    let rpc = report["rpc"].as_str().expect("CAPSULE_RPC_FD").to_string();
    let fds = report["fds"].as_object().unwrap();
    let mut want = serde_json::Map::new();
    for fd in ["0", "1", "2"] {
        want.insert(fd.into(), "fifo".into());
    }
    want.insert(rpc, "sock".into());
    assert_eq!(fds, &want, "{report}");
}

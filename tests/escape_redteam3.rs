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
#[ignore = "red3 finding 2: without a netns, allow_unix_sockets lets the run bind and serve host abstract socket names (no layer sees bind)"]
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
        "exec", "--json", "-p", &policy, "--", &python(), "-c", &code,
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

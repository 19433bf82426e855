//! capsule's guards and view where a container's seccomp profile refuses what they
//! rely on (issue 19), emulated on the bare host:
//!
//! * Docker's and containerd's RuntimeDefault allow `pidfd_getfd` (and `kcmp`,
//!   `process_madvise`) only with CAP_SYS_PTRACE, which a pod does not have:
//!   tests/probes/outer_deny.c answers them EPERM around capsule. The network guard
//!   (proxy mode on the host's network) needs pidfd_getfd: capsule must find that
//!   out before the run (doctor, check and exec try it on a child of their own) and
//!   take Landlock's TCP rule, or refuse with the reason, never serve a guard that
//!   answers every connect EACCES.
//! * podman's default profile refuses `chroot` without CAP_SYS_CHROOT: the view's
//!   new root (a `--mount` at a destination the host lacks) must still be made.
//! * a container's masked /proc, below root's own user namespace (as
//!   tests/exec_fallbacks.rs emulates it): the container's /proc is bound into the
//!   view, and the process guard (max_processes as root without a cgroup) must count
//!   the run's processes, not the container's.

mod common;

use std::ffi::OsString;
use std::path::PathBuf;

use common::*;
use serde_json::Value;

const OUTER_DENY_C: &str = include_str!("probes/outer_deny.c");

/// tests/probes/outer_deny.c, built in the sandbox (None, said, without a C compiler).
fn outer_deny(sb: &Sandbox) -> Option<PathBuf> {
    sb.compile_c("probe", "outer_deny", OUTER_DENY_C)
}

fn json_of(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("no JSON ({e}):{}", r.ctx()))
}

/// The Landlock ABI capsule uses here (the kernel's, or lower where the
/// suite emulates it).
fn effective_abi() -> i64 {
    let max = std::env::var("CAPSULE_LANDLOCK_ABI_MAX")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(i64::MAX);
    landlock_abi().min(max)
}

/// Connects to the proxy capsule names in HTTP_PROXY and says so.
const CONNECT_PY: &str = r#"
import os, socket
u = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
h, p = u.rsplit(":", 1)
try:
    socket.create_connection((h, int(p)), timeout=10).close(); print("connected")
except OSError as e:
    print("errno", e.errno)
"#;

/// A pathname Unix socket the run serves and connects to itself.
const UNIX_PY: &str = r#"
import os, socket, sys, threading
os.chdir(sys.argv[1])
s = socket.socket(socket.AF_UNIX); s.bind("u.sock"); s.listen(1)
threading.Thread(target=lambda: s.accept()[0].sendall(b"hi"), daemon=True).start()
c = socket.socket(socket.AF_UNIX)
try:
    c.connect("u.sock"); print("unix", c.recv(2).decode())
except OSError as e:
    print("unix errno", e.errno)
"#;

/// RuntimeDefault without CAP_SYS_PTRACE (pidfd_getfd EPERM) on the host's
/// network: doctor says the network guard cannot run and why; proxy mode
/// reaches capsule's proxy through Landlock's TCP rule (with its limitation
/// named), where the guard used to answer every connect EACCES; a policy
/// with allow_unix_sockets (only the guard refuses listen() there) is refused
/// with the reason, check predicting it, and runs with --best-effort.
#[test]
fn without_pidfd_getfd_proxy_mode_takes_landlock_or_refuses_with_the_reason() {
    let mut sb = Sandbox::new();
    let Some(deny) = outer_deny(&sb) else {
        return;
    };
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let prefix: Vec<OsString> = vec![deny.into(), "pidfd_getfd,kcmp,process_madvise".into()];

    let doc = json_of(&wrapped(&sb, &prefix, &["doctor", "--json"]));
    assert_eq!(doc["proxy"]["guard"], false, "{doc}");
    let mode = doc["proxy"]["mode"].as_str().unwrap_or_default();
    assert!(mode.contains("pidfd_getfd"), "{doc}");
    assert!(
        doc["advice"]
            .to_string()
            .contains("network guard cannot run here"),
        "{doc}"
    );
    // Positive control: without the outer filter the guard runs here.
    let bare = json_of(&sb.run(&["doctor", "--json"]));
    assert_eq!(bare["proxy"]["guard"], true, "{bare}");

    let py = python();
    let r = wrapped(
        &sb,
        &prefix,
        &[
            "exec",
            "--json",
            "--no-audit",
            "--net",
            "proxy",
            "--allow-host",
            "127.0.0.1",
            "--",
            &py,
            "-c",
            CONNECT_PY,
        ],
    );
    if effective_abi() < 4 {
        // Nothing holds connect: refused, never served by a guard that cannot act.
        r.assert_code(125);
        return;
    }
    r.assert_code(0);
    let v = r.json();
    assert_eq!(v["stdout"], "connected\n", "{}", r.ctx());
    let e = &v["enforcement"];
    assert_eq!(e["network_path"], "landlock-tcp-fallback", "{v}");
    assert!(
        e["limitations"]
            .to_string()
            .contains("without capsule's network guard"),
        "{v}"
    );

    // allow_unix_sockets: only the guard refuses listen() on IP sockets there.
    let work = sb.mkdir("work");
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [{}]\nnetwork:\n  mode: proxy\n  allow_hosts: [127.0.0.1]\n  \
         allow_unix_sockets: true\n",
        work.display()
    ));
    let w = work.display().to_string();
    let r = wrapped(
        &sb,
        &prefix,
        &[
            "exec",
            "--no-audit",
            "-p",
            &pol,
            "--",
            &py,
            "-c",
            UNIX_PY,
            &w,
        ],
    );
    r.assert_code(125);
    assert!(
        r.stderr.contains("listen() on IP sockets") && r.stderr.contains("pidfd_getfd"),
        "{}",
        r.ctx()
    );
    let chk = wrapped(&sb, &prefix, &["check", "-p", &pol]);
    chk.assert_code(125);
    assert!(
        chk.stdout.contains("pidfd_getfd") || chk.stderr.contains("pidfd_getfd"),
        "{}",
        chk.ctx()
    );
    let r = wrapped(
        &sb,
        &prefix,
        &[
            "exec",
            "--json",
            "--no-audit",
            "--best-effort",
            "-p",
            &pol,
            "--",
            &py,
            "-c",
            UNIX_PY,
            &w,
        ],
    );
    r.assert_code(0);
    let v = r.json();
    assert_eq!(v["stdout"], "unix hi\n", "{}", r.ctx());
    assert!(
        v["enforcement"]["missing"]
            .to_string()
            .contains("listen() on IP sockets"),
        "{v}"
    );
    // Without a network namespace the run shares the host's abstract Unix
    // socket names, and only the guard refuses binding them: --best-effort
    // says that it is missing too.
    assert!(
        v["enforcement"]["missing"]
            .to_string()
            .contains("bind() of abstract Unix socket names"),
        "{v}"
    );
}

/// podman's default profile without CAP_SYS_CHROOT (chroot EPERM): a --mount at a
/// destination the host lacks needs the view's new root, made by entering the
/// run's own mount namespace again instead of chroot. Where setns is refused
/// too, capsule refuses with the reason.
#[test]
fn a_mount_at_a_new_destination_without_chroot() {
    let sb = Sandbox::new();
    let Some(deny) = outer_deny(&sb) else {
        return;
    };
    sb.write("src/file", "mounted\n");
    let dst = format!("/capsule-ct-{}", std::process::id());
    let spec = format!("{}:{dst}", sb.p("src"));
    let cat = format!("{dst}/file");
    let args = [
        "exec",
        "--json",
        "--no-audit",
        "--mount",
        &spec,
        "--",
        "/bin/cat",
        &cat,
    ];
    let prefix: Vec<OsString> = vec![deny.clone().into(), "chroot".into()];
    let r = wrapped(&sb, &prefix, &args);
    if no_namespaces_env() {
        // No view: the new destination cannot be made; said so.
        r.assert_code(125);
        return;
    }
    r.assert_code(0);
    let v = r.json();
    assert_eq!(v["stdout"], "mounted\n", "{}", r.ctx());
    assert_eq!(v["enforcement"]["view"]["read_only_host"], true, "{v}");
    assert!(
        std::fs::symlink_metadata(&dst).is_err(),
        "{dst} appeared on the host"
    );

    // chroot and setns both refused: no new root can be made. Refused with
    // the step the container refused, and --dry-run says the same.
    let prefix: Vec<OsString> = vec![deny.into(), "chroot,setns".into()];
    let r = wrapped(&sb, &prefix, &args);
    r.assert_code(125);
    let why = "needs the run's own mount namespace, and the run has none here";
    assert!(
        r.stderr.contains(why) && r.stderr.contains("refused mounting"),
        "{}",
        r.ctx()
    );
    let mut dry = args.to_vec();
    dry[1] = "--dry-run";
    let d = wrapped(&sb, &prefix, &dry);
    assert!(
        d.stdout.contains("capsule exec refuses this here") && d.stdout.contains(why),
        "{}",
        d.ctx()
    );
}

/// Root below a container's masked /proc, with no cgroup (the process guard
/// holds max_processes): the view binds the container's /proc, which lists
/// every process of the container; the guard counts only the run's, so the
/// run forks up to its limit (it used to count the host's and refuse the
/// first fork).
#[test]
fn below_a_bound_proc_the_process_guard_counts_only_the_run() {
    if !is_root() {
        skip("needs root: RLIMIT_NPROC binds every other uid, and unshare -Urm with a bind mount");
        return;
    }
    let Some(prefix) = masked_proc_root("cap_sys_admin,cap_sys_ptrace") else {
        return;
    };
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_CGROUPS", "1");
    let pol = sb.policy("version: 1\nlimits:\n  max_processes: 16\n  timeout_seconds: 60\n");
    let mut args: Vec<String> = ["exec", "--json", "--no-audit", "--policy", &pol, "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(probe_argv(&[&["fork_bomb", "200"]]));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = wrapped(&sb, &prefix, &refs);
    r.assert_ran();
    let v = r.json();
    assert_eq!(
        v["enforcement"]["limits"]["max_processes"],
        "seccomp-notify",
        "{}",
        r.ctx()
    );
    if !no_namespaces_env() {
        assert_eq!(v["enforcement"]["view"]["private_proc"], false, "{v}");
        assert!(
            v["enforcement"]["limitations"]
                .to_string()
                .contains("bound read-only"),
            "the emulation binds the container's /proc: {v}"
        );
    }
    let p = r.probe(0);
    assert_ok(&p, &r);
    let forked = p["value"]["forked"].as_i64().unwrap_or(-1);
    assert!(
        (8..16).contains(&forked),
        "max_processes 16 let {forked} more start{}",
        r.ctx()
    );
    assert_eq!(p["value"]["errno"], "EAGAIN", "{}", r.ctx());
}

//! Attacks on the guards that serve the run's seccomp listener (docs/guards.md), from a
//! red-team review: a hostile program races the network guard with a descriptor swap,
//! and stalls it with connects that never complete. Proxy mode on the host's network
//! (no namespaces), at Landlock ABI 7 and emulated ABI 3, as the invoker and as nobody.
//! Loopback only: the swap aims at 127.0.0.2 on the proxy's port, where nothing listens,
//! so a connect that got through fails ECONNREFUSED locally (the probe says "escaped").

mod proxy_support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use proxy_support::{
    exec_in, net_guard_available, runnable, shared_tempdir, NetPath, Run, Variant, Who,
};

/// tests/probes/guard_attacks.c, built where `nobody` can run it.
fn probe() -> Option<PathBuf> {
    static BUILT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = shared_tempdir("capsule-guard-probe-").keep();
            let out = dir.join("guard_attacks");
            let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/probes/guard_attacks.c");
            let ok = ["gcc", "cc", "clang"].iter().any(|cc| {
                Command::new(cc)
                    .args(["-O2", "-pthread", "-o"])
                    .arg(&out)
                    .arg(src)
                    .status()
                    .is_ok_and(|s| s.success())
            });
            ok.then_some(out)
        })
        .clone()
        .or_else(|| {
            eprintln!("SKIP: no C compiler to build tests/probes/guard_attacks.c");
            None
        })
}

fn host_variants() -> Vec<Variant> {
    let mut v = Vec::new();
    for who in [Who::Invoker, Who::Nobody] {
        for path in [NetPath::Fallback, NetPath::GuardFallback] {
            let var = Variant { who, path };
            if runnable(var) {
                v.push(var);
            }
        }
    }
    v
}

/// Where the network guard cannot run (a container's seccomp profile refuses
/// pidfd_getfd), its absence is the named, expected result: below Landlock ABI 4
/// nothing holds connect and the run is refused; at ABI 4+ Landlock's TCP port rule
/// holds it, and the result names the address it cannot pin.
fn without_the_guard(v: Variant, r: &Run) {
    if v.path == NetPath::GuardFallback {
        assert_eq!(r.status, 125, "{v:?}: {}", r.describe());
        assert!(
            r.json["error"]
                .as_str()
                .is_some_and(|e| e.contains("Landlock ABI 4")),
            "{v:?}: {}",
            r.describe()
        );
    } else {
        r.on_path(v);
        assert!(
            r.json["enforcement"]["limitations"]
                .to_string()
                .contains("without capsule's network guard"),
            "{v:?}: {}",
            r.describe()
        );
    }
}

/// Swapping a socketpair end and a TCP socket at one descriptor while another thread
/// connects it: the guard must never let the connect through to an address it did not
/// check (Landlock's TCP rule pins only the port). Fails on the first version of the
/// guard, which let a connect on a non-IP socket continue.
#[test]
fn a_descriptor_swap_never_gets_a_connect_past_the_network_guard() {
    let Some(probe) = probe() else { return };
    let dir = probe.parent().unwrap().display().to_string();
    for v in host_variants() {
        let r = exec_in(
            v,
            &[
                "--net",
                "proxy",
                "--allow-host",
                "127.0.0.1",
                "--allow-exec",
                &dir,
            ],
            &[
                &probe.display().to_string(),
                "swap",
                "127.0.0.2",
                "0",
                "300",
            ],
            &[],
        );
        if !net_guard_available() {
            // Landlock pins the port only: the documented gap, named in the result.
            without_the_guard(v, &r);
            continue;
        }
        r.on_path(v);
        assert_eq!(r.status, 0, "{v:?}: {}", r.describe());
        assert!(
            r.stdout().starts_with("held "),
            "{v:?}: ESCAPE: a swapped-in TCP socket connected past the guard: {}",
            r.describe()
        );
    }
}

/// Connects to the proxy that never complete (TCP_MD5SIG makes the proxy drop the SYN),
/// with O_NONBLOCK toggled by another thread meanwhile: the guard must not run a connect
/// on its own thread, and capsule must still end the run at its timeout (124) and
/// report, instead of hanging on a connect that outlives the run.
#[test]
fn connects_that_never_complete_do_not_hold_capsule_past_its_timeout() {
    let Some(probe) = probe() else { return };
    let dir = probe.parent().unwrap().display().to_string();
    for v in host_variants() {
        let started = Instant::now();
        let r = exec_in(
            v,
            &[
                "--net",
                "proxy",
                "--allow-host",
                "127.0.0.1",
                "--allow-exec",
                &dir,
                "--timeout",
                "4",
            ],
            &[&probe.display().to_string(), "stall", "100"],
            &[],
        );
        let took = started.elapsed();
        if !net_guard_available() && v.path == NetPath::GuardFallback {
            without_the_guard(v, &r);
            continue;
        }
        assert_eq!(r.status, 124, "{v:?}: {}", r.describe());
        assert_eq!(r.json["termination_reason"], "timeout", "{}", r.describe());
        assert!(
            took < Duration::from_secs(30),
            "{v:?}: capsule took {took:?} to end a 4 s run: {}",
            r.describe()
        );
    }
}

const UNIX_PY: &str = r#"
import os, socket, sys, threading
os.chdir(sys.argv[1])
def serve(path, reply):
    s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(1)
    threading.Thread(target=lambda: s.accept()[0].sendall(reply), daemon=True).start()
serve("rel.sock", b"rel")
serve(os.path.join(sys.argv[1], "abs.sock"), b"abs")
for what, addr in (("relative", "rel.sock"), ("absolute", os.path.join(sys.argv[1], "abs.sock")),
                   ("abstract", "\0capsule-guard-test")):
    c = socket.socket(socket.AF_UNIX)
    try:
        c.connect(addr); print(what, c.recv(3).decode())
    except OSError as e:
        print(what, "errno", e.errno)
"#;

/// With `allow_unix_sockets`, the guard makes Unix connects itself too: a pathname
/// socket (relative to the caller's working directory, or absolute) connects as usual,
/// an abstract one is refused (EACCES: only Landlock's scope tells the run's own
/// abstract sockets from the host's, and it does not bind capsule).
#[test]
fn unix_sockets_connect_through_the_guard_by_path_never_by_abstract_name() {
    for v in host_variants() {
        let dir = shared_tempdir("capsule-guard-unix-");
        let d = dir.path().display().to_string();
        let policy = dir.path().join("p.yaml");
        std::fs::write(
            &policy,
            format!(
                "version: 1\nfilesystem:\n  write: [{d}]\nnetwork:\n  mode: proxy\n  \
                 allow_hosts: [127.0.0.1]\n  allow_unix_sockets: true\n"
            ),
        )
        .unwrap();
        if !net_guard_available() {
            // Nothing else refuses listen() on an IP socket with Unix sockets
            // allowed: refused, with the reason.
            let r = exec_in(
                v,
                &["--policy", &policy.display().to_string()],
                &[proxy_support::PYTHON, "-c", UNIX_PY, &d],
                &[],
            );
            assert_eq!(r.status, 125, "{v:?}: {}", r.describe());
            let error = r.json["error"].as_str().unwrap_or_default();
            // Below ABI 4 (and 6) other parts are refused first.
            let why = if v.path == NetPath::GuardFallback {
                "cannot be enforced here"
            } else {
                "pidfd_getfd"
            };
            assert!(error.contains(why), "{v:?}: {}", r.describe());
            continue;
        }
        let r = exec_in(
            v,
            &["--policy", &policy.display().to_string(), "--best-effort"],
            &[proxy_support::PYTHON, "-c", UNIX_PY, &d],
            &[],
        );
        assert_eq!(r.status, 0, "{v:?}: {}", r.describe());
        assert_eq!(
            r.stdout(),
            format!(
                "relative rel\nabsolute abs\nabstract errno {}\n",
                libc::EACCES
            ),
            "{v:?}: {}",
            r.describe()
        );
    }
}

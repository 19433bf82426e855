//! Red team 5: attacks on the last round's fixes and the no-namespace
//! path, each written as the attack and run against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips.

mod common;

use common::*;

/// A scratch directory on the host's /dev/shm (a tmpfs) with at least
/// `mib` MiB free; None (the test skipped, saying why) where there is none.
fn shm_scratch(prefix: &str, mib: u64) -> Option<tempfile::TempDir> {
    let Ok(dir) = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/dev/shm")
    else {
        skip("no writable /dev/shm tmpfs here");
        return None;
    };
    let room = nix::sys::statvfs::statvfs(dir.path())
        .map(|v| v.blocks_available() * v.fragment_size())
        .unwrap_or(0);
    if room < (mib << 20) {
        skip(&format!(
            "/dev/shm has {} MiB free, less than the {mib} MiB this test needs",
            room >> 20
        ));
        return None;
    }
    Some(dir)
}

/// The run parks its files' descriptors in flight in its RPC socket, the
/// one Unix socket the memory watchdog lets it hold (capsule drains it).
/// First it makes capsule stop draining: a flood of malformed lines whose
/// error answers it never reads, until capsule's write of them blocks (the
/// server then reads no more). Then each 32 MiB file on the granted tmpfs
/// is sent there (one whitespace byte, which capsule ignores should it read
/// it), unlinked and closed: no name, no descriptor, no mapping, and no
/// Unix socket but the RPC one. Prints HELD with what the tmpfs grew by.
const PARK_IN_RPC: &str = r#"
import os, socket, sys, time
g = sys.argv[1]
rpc = socket.socket(fileno=int(os.environ["CAPSULE_RPC_FD"]))
base = os.statvfs(g)
used0 = (base.f_blocks - base.f_bfree) * base.f_frsize
# About 400 KiB of error answers the run never reads: more than a Unix
# socket's buffer, so capsule's write of them blocks.
junk = b"x\n" * 4096
rpc.sendall(junk)
time.sleep(1.0)
buf = b"\x07" * (1 << 20)
for i in range(8):
    p = os.path.join(g, "f%d" % i)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(32):
        os.write(fd, buf)
    socket.send_fds(rpc, [b" "], [fd])
    os.unlink(p)
    os.close(fd)
    time.sleep(0.3)
st = os.statvfs(g)
grown = (st.f_blocks - st.f_bfree) * st.f_frsize - used0
print("HELD %d" % (grown >> 20), flush=True)
time.sleep(1.5)
"#;

/// The memory watchdog keeps a host tmpfs's whole growth as the run's count
/// when the run holds a Unix socket (a file in flight there has no name,
/// descriptor or mapping), except its RPC socket, "which capsule drains".
/// But capsule stops draining it when the run stops reading answers: a run
/// under `memory_mb: 64` parked 256 MiB of a granted /dev/shm directory in
/// flight in its RPC socket and was not killed.
#[test]
fn files_in_flight_in_the_rpc_socket_count_toward_memory_mb() {
    let Some(dir) = shm_scratch("capsule-shm-rpc.", 400) else {
        return;
    };
    let py = python();
    for no_ns in ["0", "1"] {
        let mut last = None;
        // The quick bound is what the whole tmpfs grew by: what another
        // program frees there meanwhile offsets it. A real escape escapes
        // every time; three attempts.
        for attempt in 0..3 {
            let mut sb = Sandbox::new();
            sb.set_env("CAPSULE_NO_CGROUPS", "1");
            sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
            let grant = dir.path().join(format!("rpc-{no_ns}-{attempt}"));
            std::fs::create_dir(&grant).expect("mkdir grant");
            let g = grant.display().to_string();
            let pol = sb.policy(&format!(
                "version: 1\nfilesystem:\n  write: [{g}]\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n"
            ));
            let run = sb.exec_json(&["--policy", &pol], &[&py, "-c", PARK_IN_RPC, &g]);
            let _ = std::fs::remove_dir_all(&grant);
            let held = run
                .child_stdout()
                .lines()
                .find_map(|l| l.strip_prefix("HELD "))
                .and_then(|v| v.trim().parse::<u64>().ok());
            let escaped = held.is_some_and(|mib| mib >= 200);
            last = Some((run, held));
            if !escaped {
                break;
            }
        }
        let (run, held) = last.unwrap();
        if held.is_some_and(|mib| mib >= 200) {
            panic!(
                "ESCAPE (no_namespaces={no_ns}): held {} MiB in flight in the RPC socket \
                 on a granted host tmpfs under memory_mb: 64, three times{}",
                held.unwrap(),
                run.ctx()
            );
        }
        let j = run.json();
        assert_eq!(j["termination_reason"], "signaled", "{}", run.ctx());
        assert!(
            j["kill_reason"]
                .as_str()
                .is_some_and(|r| r.contains("limits.memory_mb")),
            "kill_reason must name memory_mb{}",
            run.ctx()
        );
    }
}

//! Red team 6: attacks on the memory watchdog's handling of exiting and
//! zombie processes (a descriptor table that cannot be read), written as
//! the attack and run against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips. Each holds at most 64 MiB on the host's /dev/shm.

mod common;

use common::*;

/// One test at a time on the host's /dev/shm: the watchdog's first bound
/// for a granted host tmpfs is what the whole file system grew by, so the
/// other test's files would get a run killed early.
fn shm_exclusive() -> std::sync::MutexGuard<'static, ()> {
    static SHM: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SHM.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child of the run's process makes its leader thread exit (a raw `exit`,
/// not `exit_group`): `/proc/PID/status` then says `Z (zombie)` and the
/// leader's own `/proc/PID/fd` is empty or unreadable, while its other
/// thread lives on with the whole descriptor table. That thread then sends
/// each 16 MiB file of the granted tmpfs over a Unix socket pair the
/// process keeps, unlinks and closes it: no name, no descriptor, no
/// mapping. The parent, first of the run's processes (whose network
/// namespace's sockets the watchdog lists), stays alive and holds none. A watchdog that took the zombie leader for the whole process
/// ("a zombie holds no descriptor") would see no Unix socket and count only
/// the files still named. Prints HELD once 64 MiB are held so.
const ZOMBIE_LEADER_IN_FLIGHT: &str = r#"
import ctypes, os, socket, sys, threading, time
g = sys.argv[1]
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
libc = ctypes.CDLL(None, use_errno=True)

def state():
    try:
        with open("/proc/self/status") as f:  # the process's: its leader's state
            return next(l.split()[1] for l in f if l.startswith("State:"))
    except PermissionError:  # no /proc without namespaces: wait, then go
        time.sleep(0.5)
        return "gone"

def work():
    while state() not in ("Z", "gone"):
        time.sleep(0.01)
    print("LEADER", state(), flush=True)
    buf = b"\x07" * (1 << 20)
    for i in range(4):
        p = os.path.join(g, "f%d" % i)
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
        for _ in range(16):
            os.write(fd, buf)
        socket.send_fds(a, [b"x"], [fd])
        os.unlink(p)
        os.close(fd)
        time.sleep(0.3)
    print("HELD", flush=True)
    time.sleep(3)
    os._exit(0)

child = os.fork()
if child:
    # The parent lives on, first of the run, holding no socket.
    a.close()
    b.close()
    os.waitpid(child, 0)
    sys.exit(0)
threading.Thread(target=work).start()
time.sleep(0.2)
# SYS_exit: this thread alone (ctypes lets go of the GIL first).
libc.syscall(60 if os.uname().machine == "x86_64" else 93, 0)
"#;

#[test]
fn files_in_flight_held_by_a_process_whose_leader_is_a_zombie_count_toward_memory_mb() {
    let _shm = shm_exclusive();
    let Some(dir) = shm_scratch("capsule-shm-rt6-leader.", 150) else {
        return;
    };
    let py = python();
    for no_ns in ["0", "1"] {
        let grant = dir.path().join(format!("grant-{no_ns}"));
        std::fs::create_dir(&grant).expect("mkdir grant");
        let g = grant.display().to_string();
        let mut run = None;
        for _ in 0..3 {
            let mut sb = Sandbox::new();
            sb.set_env("CAPSULE_NO_CGROUPS", "1");
            sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
            let pol = sb.policy(&format!(
                "version: 1\nfilesystem:\n  write: [{g}]\nlimits:\n  memory_mb: 32\n  timeout_seconds: 60\n"
            ));
            let r = sb.exec_json(
                &["--policy", &pol],
                &[&py, "-c", ZOMBIE_LEADER_IN_FLIGHT, &g],
            );
            for i in 0..4 {
                let _ = std::fs::remove_file(grant.join(format!("f{i}")));
            }
            // Killed before the leader exited (another program's files on
            // this tmpfs): try again.
            let done = r.json()["killed"] == true && r.child_stdout().contains("LEADER");
            run = Some(r);
            if done {
                break;
            }
        }
        let run = run.expect("ran");
        assert!(
            run.child_stdout().contains("LEADER Z") || (no_ns == "1" && run.child_stdout().contains("LEADER gone")),
            "no_namespaces={no_ns}: the leader never read as a zombie (the attack did not happen){}",
            run.ctx()
        );
        assert!(
            !run.child_stdout().contains("HELD"),
            "ESCAPE (no_namespaces={no_ns}): held 64 MiB in flight on a granted tmpfs under \
             memory_mb: 32 from a process whose leader is a zombie{}",
            run.ctx()
        );
        let j = run.json();
        assert_eq!(j["signal"], 9, "no_namespaces={no_ns}{}", run.ctx());
        assert!(
            j["kill_reason"]
                .as_str()
                .is_some_and(|r| r.contains("limits.memory_mb")),
            "no_namespaces={no_ns}: kill_reason must name memory_mb{}",
            run.ctx()
        );
    }
}

/// The holder of the socket pair is never the same process for long: it
/// forks and exits, again and again (a chain, about one generation every
/// few ms), while 300 sleeping processes make each of the watchdog's
/// samples take longer than a generation. The census lists the holder of
/// the moment; by the time its descriptor table is read it is gone (no
/// table: "holds none") and its successor, born after the census, is
/// never asked. The chain writes 6 files of 16 MiB on the granted tmpfs,
/// 1 MiB per generation, sends each over the socket pair, unlinks and
/// closes it: 96 MiB in flight under `memory_mb: 64`, which the closer
/// count never sees. Prints HELD once all are in flight, then chains on
/// for about 5 s. Also with a process of the run made a subreaper
/// (PR_SET_CHILD_SUBREAPER) above the chain: the orphans go to it, not to
/// the run's init or keeper.
const CHAIN_IN_FLIGHT: &str = r#"
import os, socket, subprocess, sys, time
g = sys.argv[1]
sleepers = [subprocess.Popen(["sleep", "30"]) for _ in range(300)]
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
r, w = os.pipe()
if os.fork() == 0:
    os.close(r)
    if sys.argv[2] == "subreaper":
        # Orphans of the chain come to this process, not to the run's
        # init or keeper; it holds no socket itself.
        import ctypes
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        if os.fork():
            a.close(); b.close(); os.close(w)
            try:
                while True:
                    os.wait()
            except ChildProcessError:
                os._exit(0)
    buf = b"\x07" * (1 << 20)
    fd = None; n = 0; files = 0; printed = False
    end = time.time() + 7
    while time.time() < end:
        if files < 6:
            p = os.path.join(g, "f%d" % files)
            if fd is None:
                fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
            os.write(fd, buf)
            n += 1
            if n == 16:
                socket.send_fds(a, [b"x"], [fd])
                os.unlink(p)
                os.close(fd)
                fd = None; n = 0; files += 1
        elif not printed:
            print("HELD", flush=True)
            printed = True
        if os.fork():
            os._exit(0)
    os.write(w, b"x")
    os._exit(0)
os.close(w); a.close(); b.close()
os.read(r, 1)
for s in sleepers:
    s.kill()
"#;

#[test]

fn files_in_flight_held_by_a_chain_of_short_lived_processes_count_toward_memory_mb() {
    let _shm = shm_exclusive();
    let Some(dir) = shm_scratch("capsule-shm-rt6-chain.", 200) else {
        return;
    };
    let py = python();
    for (no_ns, how) in [
        ("0", "plain"),
        ("1", "plain"),
        ("0", "subreaper"),
        ("1", "subreaper"),
    ] {
        let grant = dir.path().join(format!("grant-{no_ns}-{how}"));
        std::fs::create_dir(&grant).expect("mkdir grant");
        let g = grant.display().to_string();
        // The race is the attacker's to win: two tries each.
        for _ in 0..2 {
            let mut sb = Sandbox::new();
            sb.set_env("CAPSULE_NO_CGROUPS", "1");
            sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
            let pol = sb.policy(&format!(
                "version: 1\nfilesystem:\n  write: [{g}]\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n"
            ));
            let run = sb.exec_json(&["--policy", &pol], &[&py, "-c", CHAIN_IN_FLIGHT, &g, how]);
            for i in 0..6 {
                let _ = std::fs::remove_file(grant.join(format!("f{i}")));
            }
            let j = run.json();
            assert!(
                j["killed"] == true,
                "ESCAPE (no_namespaces={no_ns}, {how}): held 96 MiB in flight on a granted tmpfs \
                 under memory_mb: 64 through a chain of short-lived holders{}",
                run.ctx()
            );
            assert!(
                j["kill_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("limits.memory_mb")),
                "no_namespaces={no_ns}, {how}: kill_reason must name memory_mb{}",
                run.ctx()
            );
        }
    }
}

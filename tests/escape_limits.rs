//! Resource escapes: a fork bomb against max_processes, memory against
//! memory_mb, file size, open files and CPU time. Every case is bounded: the
//! probe stops on its own whatever the limit does.

mod common;

use common::*;
use std::time::Instant;

#[test]
fn fork_bomb_is_bounded_by_max_processes() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nlimits:\n  max_processes: 16\n  timeout_seconds: 60\n");
    let started = Instant::now();
    let run = sb.probe(&["--policy", &pol], &[&["fork_bomb", "200"]]);
    let took = started.elapsed().as_secs_f64();
    run.assert_ran();
    let j = run.json();
    assert_eq!(
        j["termination_reason"],
        "exited",
        "the run must end on its own{}",
        run.ctx()
    );
    assert!(
        took < 55.0,
        "the fork bomb ran into the timeout ({took}s){}",
        run.ctx()
    );
    let v = run.probe(0);
    assert_ok(&v, &run);
    let forked = v["value"]["forked"].as_i64().unwrap_or(-1);
    // The probe itself is one of the 16.
    assert!(forked >= 1, "could not fork at all{}", run.ctx());
    assert!(
        forked < 16,
        "max_processes: 16 let {forked} extra processes start{}",
        run.ctx()
    );
    assert_eq!(v["value"]["errno"], "EAGAIN", "{}", run.ctx());

    // Positive control: without the limit the same probe forks 40.
    let run = sb.probe(&[], &[&["fork_bomb", "40"]]);
    run.assert_ran();
    assert_eq!(run.probe(0)["value"]["forked"], 40, "{}", run.ctx());
}

#[test]
fn memory_is_bounded_by_memory_mb() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n");
    let run = sb.probe(&["--policy", &pol], &[&["alloc", "512"]]);
    let out = run.child_stdout();
    assert!(
        out.contains("alloc_start"),
        "python did not even start under 64 MiB{}",
        run.ctx()
    );
    let lines = run.probes();
    let res = lines.iter().find(|l| l["op"] == "alloc");
    match res {
        // RLIMIT_DATA/AS style: the allocation fails inside.
        Some(v) => {
            assert_eq!(
                v["ok"],
                false,
                "allocated 512 MiB under memory_mb: 64{}",
                run.ctx()
            );
            assert_eq!(v["exc"], "MemoryError", "{}", run.ctx());
        }
        // cgroup style: the OOM killer ends the run.
        None => {
            let j = run.json();
            assert_eq!(j["signal"], 9, "no result and not OOM-killed{}", run.ctx());
            assert_eq!(run.code, Some(137), "{}", run.ctx());
        }
    }

    // Positive control: 512 MiB fits under memory_mb: 2048.
    let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 2048\n  timeout_seconds: 60\n");
    let run = sb.probe(&["--policy", &pol], &[&["alloc", "512"]]);
    assert_probe_value(&run, "alloc", 512 << 20, "512 MiB under memory_mb: 2048");
}

#[test]
fn file_size_is_bounded_by_max_file_size_mb() {
    let sb = Sandbox::new();
    sb.mkdir("out");
    let pol =
        sb.policy("version: 1\nfilesystem:\n  write: [./out]\nlimits:\n  max_file_size_mb: 1\n");
    let run = sb.probe(&["--policy", &pol], &[&["fsize", &sb.p("out/big"), "4"]]);
    run.assert_ran();
    assert_errno(&run.probe(0), &["EFBIG"], &run);
    let len = std::fs::metadata(sb.path("out/big"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(len <= 1 << 20, "file grew to {len} bytes{}", run.ctx());

    let pol =
        sb.policy("version: 1\nfilesystem:\n  write: [./out]\nlimits:\n  max_file_size_mb: 8\n");
    let run = sb.probe(&["--policy", &pol], &[&["fsize", &sb.p("out/big"), "4"]]);
    run.assert_ran();
    assert_eq!(run.probe(0)["value"], 4 << 20, "{}", run.ctx());
}

#[test]
fn open_files_are_bounded_by_max_open_files() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nlimits:\n  max_open_files: 32\n");
    let run = sb.probe(&["--policy", &pol], &[&["nofile", "100"], &["rlimits"]]);
    run.assert_ran();
    assert_errno(&run.probe(0), &["EMFILE"], &run);
    assert_eq!(run.probe(1)["value"]["NOFILE"][0], 32, "{}", run.ctx());
    let run = sb.probe(&[], &[&["nofile", "100"]]);
    run.assert_ran();
    assert_eq!(run.probe(0)["value"], 100, "{}", run.ctx());
}

/// A sandbox for the CPU-limit cases: `cpu_seconds: 1`, with (`no_ns` "0")
/// or without ("1") namespaces; and the audit log's path.
fn cpu_limited(no_ns: &str) -> (Sandbox, String, String) {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
    let pol = sb.policy("version: 1\nlimits:\n  cpu_seconds: 1\n  timeout_seconds: 30\n");
    let log = sb.p("audit.jsonl");
    (sb, pol, log)
}

/// The audit record of the last run written to `log`.
fn last_audit_record(log: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let line = text.lines().last().unwrap_or("{}");
    serde_json::from_str(line).unwrap_or_default()
}

/// RLIMIT_CPU (soft == hard) ends the command with SIGKILL: the result says
/// capsule's CPU limit did it, as it says so for the memory limit and the
/// timeout, on the namespace path and without namespaces.
#[test]
fn cpu_time_is_bounded_by_cpu_seconds() {
    for no_ns in ["0", "1"] {
        let (sb, pol, log) = cpu_limited(no_ns);
        let run = sb.exec_json(
            &["--policy", &pol, "--audit-log", &log],
            &[&python(), "-c", "while True: pass"],
        );
        let j = run.json();
        let ctx = format!("CAPSULE_NO_NAMESPACES={no_ns}{}", run.ctx());
        assert_eq!(
            run.code,
            Some(137),
            "busy loop not stopped by cpu_seconds: {ctx}"
        );
        assert_eq!(j["termination_reason"], "signaled", "{ctx}");
        assert_eq!(j["signal"], libc::SIGKILL, "{ctx}");
        assert_eq!(j["exit_code"], 137, "{ctx}");
        assert_eq!(j["success"], false, "{ctx}");
        assert_eq!(
            j["killed"], true,
            "a run ended by capsule's CPU limit is killed: {ctx}"
        );
        assert_eq!(
            j["kill_reason"], "CPU time limit reached (limits.cpu_seconds)",
            "{ctx}"
        );
        let rec = last_audit_record(&log);
        assert_eq!(rec["reason"], "cpu_limit", "audit: {rec} {ctx}");
        assert_eq!(rec["outcome"], "failed", "audit: {rec} {ctx}");
    }
}

/// A SIGKILL that is not the CPU limit's stays a plain signal, even under
/// `cpu_seconds`: the command's own (after half a second of CPU), and
/// another process of the run's.
#[test]
fn a_sigkill_below_cpu_seconds_is_not_the_cpu_limit() {
    let own = "import os, time\nt = time.process_time()\n\
               while time.process_time() - t < 0.5: pass\nos.kill(os.getpid(), 9)\n";
    let by_another = format!(
        "{} -c 'import os; os.kill(os.getppid(), 9)'; sleep 5",
        python()
    );
    for no_ns in ["0", "1"] {
        for cmd in [
            vec![python(), "-c".to_string(), own.to_string()],
            vec!["/bin/sh".to_string(), "-c".to_string(), by_another.clone()],
        ] {
            let (sb, pol, log) = cpu_limited(no_ns);
            let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let run = sb.exec_json(&["--policy", &pol, "--audit-log", &log], &cmd);
            let j = run.json();
            let ctx = format!("CAPSULE_NO_NAMESPACES={no_ns}{}", run.ctx());
            assert_eq!(run.code, Some(137), "{ctx}");
            assert_eq!(j["termination_reason"], "signaled", "{ctx}");
            assert_eq!(j["signal"], libc::SIGKILL, "{ctx}");
            assert_eq!(
                j["killed"], false,
                "a SIGKILL below cpu_seconds is not capsule's: {ctx}"
            );
            assert_eq!(j["kill_reason"], serde_json::Value::Null, "{ctx}");
            assert_eq!(last_audit_record(&log)["reason"], "signaled", "{ctx}");
        }
    }
}

#[test]
fn core_dumps_off_and_privileges_dropped() {
    let sb = Sandbox::new();
    let run = sb.probe(
        &[],
        &[
            &["rlimits"],
            &["status", "NoNewPrivs"],
            &["status", "CapEff"],
            &["status", "CapPrm"],
            &["status", "CapInh"],
            &["status", "CapBnd"],
            &["status", "CapAmb"],
            &["status", "Seccomp"],
        ],
    );
    run.assert_ran();
    assert_eq!(
        run.probe(0)["value"]["CORE"][0],
        0,
        "core dumps on{}",
        run.ctx()
    );
    assert_eq!(
        run.probe(1)["value"],
        "1",
        "no_new_privs not set{}",
        run.ctx()
    );
    for i in 2..7 {
        // Without a user namespace an unprivileged capsule cannot shrink the
        // bounding set (PR_CAPBSET_DROP needs CAP_SETPCAP); with no_new_privs
        // set (above) no exec can gain a capability from it anyway.
        if i == 5 && !view_expected() && !is_root() {
            continue;
        }
        assert_eq!(
            run.probe(i)["value"],
            "0000000000000000",
            "a capability set is not empty{}",
            run.ctx()
        );
    }
    assert_eq!(run.probe(7)["value"], "2", "no seccomp filter{}", run.ctx());
}

/// A sandbox where capsule may make no cgroup, with (`no_ns` "0") or without
/// ("1") namespaces, and its policy of `max` processes.
fn without_cgroups(no_ns: &str, max: u32) -> (Sandbox, String) {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_CGROUPS", "1");
    sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
    let pol = sb.policy(&format!(
        "version: 1\nlimits:\n  max_processes: {max}\n  timeout_seconds: 60\n"
    ));
    (sb, pol)
}

/// Root with no cgroup capsule may make (a container whose cgroupfs is
/// read-only; emulated with CAPSULE_NO_CGROUPS=1): RLIMIT_NPROC does not
/// bind uid 0, so the process guard (seccomp user notification: capsule
/// counts the run's tasks at every fork) holds max_processes, with and
/// without namespaces. Before the guard this run was refused (exit 125).
#[test]
fn as_root_without_a_cgroup_the_process_guard_bounds_a_fork_bomb() {
    if !is_root() {
        skip("needs root: RLIMIT_NPROC binds every other uid");
        return;
    }
    for no_ns in ["0", "1"] {
        let (sb, pol) = without_cgroups(no_ns, 16);
        let run = sb.probe(&["--policy", &pol], &[&["fork_bomb", "200"]]);
        run.assert_ran();
        let j = run.json();
        assert_eq!(
            j["enforcement"]["limits"]["max_processes"],
            "seccomp-notify",
            "no_namespaces={no_ns}{}",
            run.ctx()
        );
        let v = run.probe(0);
        assert_ok(&v, &run);
        let forked = v["value"]["forked"].as_i64().unwrap_or(-1);
        assert!(
            (1..16).contains(&forked),
            "no_namespaces={no_ns}: max_processes 16 let {forked} more start{}",
            run.ctx()
        );
        assert_eq!(v["value"]["errno"], "EAGAIN", "{}", run.ctx());
    }
}

/// Forks from several processes at once: the guard decides one at a time
/// and counts a fork whose child has not appeared yet, so the run never
/// holds more tasks than max_processes.
const CONCURRENT_FORKS_PY: &str = r#"
import os, sys
workers, per = 6, 60
r, w = os.pipe()          # children wait on it
res_r, res_w = os.pipe()  # workers report how many children they made
go_r, go_w = os.pipe()    # workers start together
kids = []
for _ in range(workers):
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        os.close(w)
        os.read(go_r, 1)
        made = 0
        for _ in range(per):
            try:
                if os.fork() == 0:
                    os.read(r, 1)
                    os._exit(0)
                made += 1
            except OSError:
                break
        os.write(res_w, b"%d\n" % made)
        os.read(r, 1)
        os._exit(0)
    kids.append(pid)
os.close(go_w)
total = 0
with os.fdopen(res_r) as f:
    for _ in range(workers):
        total += int(f.readline())
print("alive", 1 + workers + total)
os.close(w)
for pid in kids:
    os.waitpid(pid, 0)
"#;

#[test]
fn as_root_without_a_cgroup_concurrent_forks_stay_within_max_processes() {
    if !is_root() {
        skip("needs root: RLIMIT_NPROC binds every other uid");
        return;
    }
    for no_ns in ["0", "1"] {
        let (sb, pol) = without_cgroups(no_ns, 40);
        let run = sb.exec_json(&["--policy", &pol], &[&python(), "-c", CONCURRENT_FORKS_PY]);
        run.assert_ran();
        let out = run.child_stdout();
        let alive: i64 = out
            .trim()
            .strip_prefix("alive ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count{}", run.ctx()));
        // The workers' forks fail at the limit (EAGAIN), never past it.
        assert!(
            (30..=40).contains(&alive),
            "no_namespaces={no_ns}: {alive} tasks alive at once under max_processes 40{}",
            run.ctx()
        );
    }
}

/// The tests that write hundreds of MiB on the host's /dev/shm run one at a
/// time. The watchdog's first bound for a host tmpfs is what the whole file
/// system grew by, and it stands where the closer count cannot be made (a
/// mapped unlinked file an unprivileged capsule cannot size, a Unix socket
/// that may carry a file). (A full CI run once had a run holding 40 MiB of
/// `memory_mb: 64` killed at "450 MiB" while another of these tests wrote
/// its 512 MiB: a process of the run exiting read as one hiding a socket,
/// fixed with [`a_zombie_of_the_run_does_not_make_another_writers_files_count`].)
/// Freed meanwhile, another test's files offset a run's growth instead
/// (both limitations, README).
fn shm_exclusive() -> std::sync::MutexGuard<'static, ()> {
    static SHM: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SHM.lock().unwrap_or_else(|e| e.into_inner())
}

/// A sandbox for the shared-memory cases: TMPDIR on a tmpfs (/dev/shm, as on
/// hosts whose /tmp is one), and with `no_cgroups` no cgroup capsule may
/// make (the default of an unprivileged user on a host without delegation,
/// and of pods): there `memory_mb` was RLIMIT_DATA alone.
fn shmem_sandbox(no_cgroups: bool) -> Sandbox {
    let mut sb = Sandbox::new();
    if no_cgroups {
        sb.set_env("CAPSULE_NO_CGROUPS", "1");
    }
    sb.set_env("TMPDIR", "/dev/shm");
    sb
}

/// Issue 20, finding 6: RLIMIT_DATA does not count shared memory. With
/// `memory_mb: 64` a run held 512 MiB through MAP_SHARED|MAP_ANONYMOUS, a
/// memfd (one the memfd guard itself made) or a tmpfs file. Without a
/// cgroup (the memory watchdog) each must end the run with `memory_limit`,
/// and a run under a limit it stays below must be left alone.
#[test]
fn shared_memory_is_bounded_by_memory_mb() {
    let _shm = shm_exclusive();
    if !std::path::Path::new("/dev/shm").is_dir() {
        skip("no /dev/shm tmpfs for the TMPDIR case");
        return;
    }
    // The tmpfs cases write 512 MiB into /dev/shm: where that tmpfs is
    // smaller (a container's is 64 MiB by default), the host's own tmpfs
    // bounds the run before capsule has to, and the cases say nothing.
    let shm_room = nix::sys::statvfs::statvfs("/dev/shm")
        .map(|v| v.blocks_available() * v.fragment_size())
        .unwrap_or(0);
    let tmpfs_fits = shm_room > (600u64 << 20);
    if !tmpfs_fits {
        skip_part(&format!(
            "the tmpfs cases: /dev/shm has {} MiB free, less than the 512 MiB they write (its own size bounds them)",
            shm_room >> 20
        ));
    }
    for no_cgroups in [true] {
        let sb = shmem_sandbox(no_cgroups);
        let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n");
        for kind in [
            "anon",
            "anon_orphan",
            "memfd",
            "memfd_parked",
            "sysv",
            "tmpfs",
            "tmpfs_unlinked",
        ] {
            if kind.starts_with("tmpfs") && !tmpfs_fits {
                continue;
            }
            let run = sb.probe(&["--policy", &pol], &[&["shmem", kind, "512", "6"]]);
            let lines = run.probes();
            let held = lines.iter().any(|l| l["op"] == "shmem" && l["ok"] == true);
            assert!(
                !held,
                "{kind}: held 512 MiB under memory_mb: 64 (no_cgroups={no_cgroups}){}",
                run.ctx()
            );
            if kind == "sysv" && lines.iter().any(|l| l["op"] == "shmem") {
                // Refused outright: without the run's own IPC namespace
                // seccomp refuses SysV IPC (EPERM), and within it the
                // namespace's kernel.shmall (memory_mb) refuses the segment.
                let v = lines.iter().find(|l| l["op"] == "shmem").unwrap();
                assert_errno(v, &["EPERM", "ENOSPC", "ENOMEM", "EINVAL"], &run);
                continue;
            }
            assert_killed_for_memory(&run, "shmem", &format!("{kind} (no_cgroups={no_cgroups})"));
        }
        // Positive control: the same 512 MiB fits under memory_mb: 2048.
        let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 2048\n  timeout_seconds: 60\n");
        for kind in ["anon", "memfd", "tmpfs"] {
            if kind == "tmpfs" && !tmpfs_fits {
                continue;
            }
            let run = sb.probe(&["--policy", &pol], &[&["shmem", kind, "512", "1"]]);
            assert_probe_value(&run, "shmem", 512 << 20, kind);
        }
    }
}

/// Without a cgroup the watchdog counted the run's own tmpfs (the view's
/// /dev/shm and /tmp, a TMPDIR on a host tmpfs) but not a write grant on a
/// host tmpfs: a run under `memory_mb: 64` wrote 512 MiB into a granted
/// directory of /dev/shm (a pod's memory-backed emptyDir is the same: its
/// pages count against the pod, whose OOM then takes the agent with it).
/// Now what such a file system holds beyond what it held when the run
/// began counts toward the limit, and what another program writes on that
/// tmpfs outside the grant does not.
#[test]
fn a_write_grant_on_a_host_tmpfs_is_bounded_by_memory_mb() {
    let _shm = shm_exclusive();
    let Some(dir) = shm_scratch("capsule-shm-grant.", 600) else {
        return;
    };
    // Both paths: the view (the grant bound inside the run's private
    // /dev/shm) and no namespaces (a container's fallback: the host's
    // /dev/shm itself). The run's TMPDIR stays where capsule puts it by
    // default (not this tmpfs) until the last case.
    for no_ns in ["0", "1"] {
        let (mut sb, grant) = grant_sandbox(dir.path(), no_ns);
        shm_grant_cases(&mut sb, dir.path(), &grant);
    }
}

/// A sandbox for the cases of a write grant on a host tmpfs: no cgroup (the
/// memory watchdog is what bounds the run), the namespace path `no_ns`
/// asks for, and a fresh grant directory `grant-{no_ns}` in `dir`.
fn grant_sandbox(dir: &std::path::Path, no_ns: &str) -> (Sandbox, std::path::PathBuf) {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_CGROUPS", "1");
    sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
    let grant = dir.join(format!("grant-{no_ns}"));
    std::fs::create_dir(&grant).expect("mkdir grant");
    (sb, grant)
}

/// A policy writing `path` only, under `memory_mb: 64`.
fn write_under_64_mib(sb: &Sandbox, path: &str) -> String {
    sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [{path}]\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n"
    ))
}

/// `run`, while another program writes 128 MiB on the same tmpfs (`dir`),
/// outside the grant: not the run's (it may push the watchdog's quick
/// bound over the limit, never the run's own count).
fn beside_another_writer(dir: &std::path::Path, run: impl FnOnce() -> Run) -> Run {
    let other = dir.join("other");
    let writer = std::thread::spawn({
        let other = other.clone();
        move || {
            std::thread::sleep(std::time::Duration::from_millis(700));
            let _ = std::fs::write(&other, vec![7u8; 128 << 20]);
        }
    });
    let r = run();
    writer.join().unwrap();
    let _ = std::fs::remove_file(&other);
    r
}

/// Up to three attempts of `once` until one is killed (the last run
/// otherwise). The watchdog's first bound for a host tmpfs the run may
/// write is what that whole file system grew by: what another program frees
/// there meanwhile (another test's files on this shared /dev/shm) offsets
/// the run's growth (a limitation, README). A real escape escapes every
/// time.
fn until_killed(mut once: impl FnMut() -> Run) -> Run {
    let mut run = once();
    for _ in 0..2 {
        if run.json()["killed"] == true {
            break;
        }
        run = once();
    }
    run
}

/// The run did not hold what it asked for (`op` never reported ok) and was
/// killed for `limits.memory_mb` (SIGKILL, 137, `kill_reason` naming it).
fn assert_killed_for_memory(run: &Run, op: &str, what: &str) {
    let j = run.json();
    assert!(
        !run.probes()
            .iter()
            .any(|l| l["op"] == op && l["ok"] == true),
        "ESCAPE: {what} under memory_mb{}",
        run.ctx()
    );
    assert_eq!(j["termination_reason"], "signaled", "{what}{}", run.ctx());
    assert_eq!(j["signal"], 9, "{what}{}", run.ctx());
    assert!(
        j["kill_reason"]
            .as_str()
            .is_some_and(|r| r.contains("limits.memory_mb")),
        "{what}: kill_reason must name memory_mb{}",
        run.ctx()
    );
    assert_eq!(run.code, Some(137), "{what}{}", run.ctx());
}

/// The run completed and its probe `op` reported `value`.
fn assert_probe_value(run: &Run, op: &str, value: u64, what: &str) {
    run.assert_ran();
    let v = run
        .probes()
        .into_iter()
        .find(|l| l["op"] == op)
        .unwrap_or_else(|| panic!("{what}: no {op} result{}", run.ctx()));
    assert_eq!(v["value"], value, "{what}{}", run.ctx());
}

fn shm_grant_cases(sb: &mut Sandbox, dir: &std::path::Path, grant: &std::path::Path) {
    let g = grant.display().to_string();
    for (mb, killed) in [("512", true), ("16", false)] {
        let pol = write_under_64_mib(sb, &g);
        let once = || {
            let run = beside_another_writer(dir, || {
                sb.probe(&["--policy", &pol], &[&["shmem", "tmpfs", mb, "3", &g]])
            });
            let _ = std::fs::remove_file(grant.join("hold"));
            run
        };
        if killed {
            let run = until_killed(once);
            assert_killed_for_memory(&run, "shmem", "held 512 MiB in a granted host tmpfs");
        } else {
            once().assert_ran();
        }
    }
    // A grant that is one file: its own blocks count (a walk of it found
    // nothing, so the closer bound said 0 once the quick one was over).
    let file = grant.join("granted-file");
    std::fs::write(&file, "").unwrap();
    let f = file.display().to_string();
    let pol = write_under_64_mib(sb, &f);
    let run = until_killed(|| {
        std::fs::write(&file, "").unwrap();
        sb.probe(
            &["--policy", &pol],
            &[&["shmem", "tmpfs_at", "512", "3", &f]],
        )
    });
    let _ = std::fs::remove_file(&file);
    assert_killed_for_memory(&run, "shmem", "held 512 MiB in a granted host tmpfs file");
    // A TMPDIR beneath the grant is counted once: 40 MiB there stays under
    // memory_mb: 64 (counted twice, the run would be killed).
    sb.set_env("TMPDIR", &g);
    let pol = write_under_64_mib(sb, &g);
    let run = sb.probe(&["--policy", &pol], &[&["shmem", "tmpfs", "40", "2"]]);
    assert_probe_value(
        &run,
        "shmem",
        40 << 20,
        "40 MiB in a TMPDIR beneath the grant",
    );
}

/// A run under `memory_mb: 64` holds 16 MiB in a write grant on a host
/// tmpfs and a zombie child (one it has not reaped yet, as a shell's
/// finished background job), while another program writes 128 MiB on that
/// tmpfs outside the grant. The file system's growth (144 MiB) is over the
/// limit, so the watchdog takes its closer count, unless the run might hold
/// a Unix socket. A zombie's descriptor table reads as root's (its memory
/// is gone), and an unprivileged capsule took that for a socket it could
/// not see: the run was killed at "144 MiB" (a full CI run, as
/// capsule-test; the earlier "450 MiB" kill was the same, a process of the
/// run exiting while another test wrote there).
#[test]
fn a_zombie_of_the_run_does_not_make_another_writers_files_count() {
    let _shm = shm_exclusive();
    let Some(dir) = shm_scratch("capsule-shm-zombie.", 300) else {
        return;
    };
    for no_ns in ["0", "1"] {
        let (sb, grant) = grant_sandbox(dir.path(), no_ns);
        let g = grant.display().to_string();
        let pol = write_under_64_mib(&sb, &g);
        let run = beside_another_writer(dir.path(), || {
            sb.probe(
                &["--policy", &pol],
                &[&["zombie"], &["shmem", "tmpfs", "16", "3", &g]],
            )
        });
        let _ = std::fs::remove_file(grant.join("hold"));
        assert_probe_value(
            &run,
            "shmem",
            16 << 20,
            &format!("16 MiB beside a zombie (no_namespaces={no_ns})"),
        );
    }
}

/// The memory cgroup's OOM killer must never take capsule down with the
/// run. init (pid namespace) and the keeper (no namespace) share capsule's
/// memory (CLONE_VM) and sit in the run's cgroup; when the run's memory lies
/// outside its processes' RSS (here a memfd that `dd`, smaller than capsule,
/// writes into), the OOM killer picked init or the keeper by capsule's RSS,
/// and the kernel kills every process sharing the victim's memory: capsule
/// died by SIGKILL, with no result and no audit record, and without a pid
/// namespace a setsid'd daemon of the run lived on. The run's processes are
/// now the OOM killer's first choice (oom_score_adj 1000, which Landlock
/// keeps them from lowering): `dd` goes and capsule reports it.
#[test]
fn the_oom_killer_takes_the_run_not_capsule() {
    const FILL: &str = "import os\n\
        try:\n    fd = os.memfd_create('fill', 8)\n\
        except OSError:\n    fd = os.memfd_create('fill', 0)\n\
        os.dup2(fd, 1)\n\
        os.execv('/bin/dd', ['dd', 'if=/dev/zero', 'bs=1M', 'count=512'])\n";
    for no_ns in ["0", "1"] {
        let mut sb = Sandbox::new();
        sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
        let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n");
        let py = python();
        let run = sb.exec_json(&["--policy", &pol], &[&py, "-c", FILL]);
        assert!(
            run.code.is_some(),
            "capsule itself was killed (the OOM killer chose a process sharing its memory){}",
            run.ctx()
        );
        let j = run.json();
        let mech = j["enforcement"]["limits"]["memory_mb"]
            .as_str()
            .unwrap_or("");
        if !mech.starts_with("cgroup") {
            skip_part(&format!(
                "memory_mb by {mech} (CAPSULE_NO_NAMESPACES={no_ns}): no memory cgroup, no cgroup OOM killer"
            ));
            continue;
        }
        assert_eq!(j["signal"], 9, "the run was not OOM-killed{}", run.ctx());
        assert_eq!(run.code, Some(137), "{}", run.ctx());
    }
}

/// A run holding files on a granted host tmpfs where the watchdog's walk
/// of the grant does not see them: each chunk of 32 MiB (under the limit
/// by itself, so the quick bound never shows it alone) is hidden before the
/// next is written. `how`: `mmap` (mapped shared but never touched, its
/// descriptor closed and the file unlinked: no name, no descriptor, no
/// resident page), `chmod` (in a directory made mode 000: an unprivileged
/// capsule cannot list it; Landlock has no hook for chmod), `inflight` (the
/// descriptor in flight in a Unix socket, the file unlinked). Prints HELD
/// once 256 MiB are held.
const HIDE_ON_TMPFS: &str = r#"
import ctypes, os, socket, sys, time
how, g = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
buf = b"\x07" * (1 << 20)
for i in range(8):
    d = os.path.join(g, "d%d" % i)
    os.mkdir(d)
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(32):
        os.write(fd, buf)
    if how == "inflight":
        socket.send_fds(a, [b"x"], [fd]); os.unlink(p)
    elif how == "mmap":
        assert libc.mmap(None, 32 << 20, 1, 1, fd, 0) not in (None, ctypes.c_void_p(-1).value)
        os.unlink(p)
    elif how == "chmod":
        os.chmod(d, 0)
    os.close(fd)
    time.sleep(0.3)
print("HELD", flush=True)
time.sleep(1.5)
"#;

fn hidden_on_a_granted_tmpfs(hows: &[&str]) {
    let _shm = shm_exclusive();
    let Some(dir) = shm_scratch("capsule-shm-hide.", 400) else {
        return;
    };
    let py = python();
    for no_ns in ["0", "1"] {
        for how in hows {
            // The watchdog's first bound is what the whole tmpfs grew by: what
            // another program frees there meanwhile (another test's files on
            // this shared /dev/shm) offsets the run's growth (see README). Up
            // to three attempts: a real escape escapes every time.
            let mut last = None;
            for attempt in 0..3 {
                let (held, run) = hide_once(dir.path(), no_ns, how, attempt, &py);
                if !held {
                    last = Some(run);
                    break;
                }
                last = Some(run);
                if attempt == 2 {
                    let run = last.as_ref().unwrap();
                    panic!(
                        "ESCAPE ({how}, no_namespaces={no_ns}): held 256 MiB on a granted host tmpfs \
                         under memory_mb: 64, three times{}",
                        run.ctx()
                    );
                }
            }
            let run = last.unwrap();
            let j = run.json();
            assert_eq!(j["termination_reason"], "signaled", "{how}{}", run.ctx());
            assert!(
                j["kill_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("limits.memory_mb")),
                "{how}: kill_reason must name memory_mb{}",
                run.ctx()
            );
        }
    }
}

/// One attempt of [`hidden_on_a_granted_tmpfs`]: whether the run held it all.
fn hide_once(dir: &std::path::Path, no_ns: &str, how: &str, attempt: u32, py: &str) -> (bool, Run) {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_CGROUPS", "1");
    sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
    let grant = dir.join(format!("{how}-{no_ns}-{attempt}"));
    if how == "file" {
        std::fs::write(&grant, b"").expect("create the granted file");
    } else {
        std::fs::create_dir(&grant).expect("mkdir grant");
    }
    let g = grant.display().to_string();
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  write: [{g}]\nlimits:\n  memory_mb: 64\n  timeout_seconds: 60\n"
    ));
    let run = sb.exec_json(&["--policy", &pol], &[py, "-c", HIDE_ON_TMPFS, how, &g]);
    // Clean up what a chmod left unreadable.
    for i in 0..8 {
        let d = grant.join(format!("d{i}"));
        let _ = std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700));
    }
    let _ = std::fs::remove_dir_all(&grant);
    let _ = std::fs::remove_file(&grant);
    (run.child_stdout().contains("HELD"), run)
}

/// The watchdog's closer bound for a write grant on a host tmpfs (the
/// grant's walk plus the run's unlinked files found through its
/// descriptors) missed a file the run keeps only mapped, and files in a
/// directory the run made unreadable (as an unprivileged capsule): under
/// `memory_mb: 64` the run held 256 MiB in its grant on /dev/shm.
#[test]
fn files_hidden_from_the_walk_of_a_granted_tmpfs_count_toward_memory_mb() {
    hidden_on_a_granted_tmpfs(&["mmap", "chmod"]);
}

/// The same with the files' descriptors in flight in a Unix socket: no
/// name, no descriptor of a process, no mapping. Such a file lives only as
/// long as a socket of the run, so a run holding a Unix socket (other than
/// its RPC channel) keeps the file system's whole growth as its count.
#[test]
fn files_in_flight_from_a_granted_tmpfs_count_toward_memory_mb() {
    hidden_on_a_granted_tmpfs(&["inflight"]);
}

/// Files of the run's TMPDIR (on /dev/shm here, as on hosts whose /tmp is a
/// tmpfs), each 32 MiB (under the limit by itself), sent over a Unix socket
/// pair the run keeps, then unlinked and closed: no name, no descriptor, no
/// mapping. Prints HELD once 256 MiB are held so.
const IN_FLIGHT_FROM_TMPDIR: &str = r#"
import os, socket, time
t = os.environ["TMPDIR"]
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
buf = b"\x07" * (1 << 20)
for i in range(8):
    p = os.path.join(t, "f%d" % i)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(32):
        os.write(fd, buf)
    socket.send_fds(a, [b"x"], [fd])
    os.unlink(p)
    os.close(fd)
    time.sleep(0.3)
print("HELD", flush=True)
time.sleep(3)
"#;

/// Without a cgroup the watchdog counted a private TMPDIR on a host tmpfs
/// by walking it, plus the files there the run unlinked but holds open or
/// mapped: a file sent over a Unix socket, then unlinked and closed, lives
/// only in flight, and a run held 256 MiB so under `memory_mb: 64`. Now that
/// tmpfs counts as a write grant on it does: what the whole file system
/// grew by, kept as the count while the run holds a Unix socket.
#[test]
fn files_in_flight_from_a_tmpdir_on_a_host_tmpfs_count_toward_memory_mb() {
    a_tmpdir_attack_is_killed(
        IN_FLIGHT_FROM_TMPDIR,
        64,
        400,
        "held 256 MiB in flight from a TMPDIR on /dev/shm",
    );
}

/// Run `script` (Python; it prints HELD once it holds what it is after) with
/// its TMPDIR on /dev/shm, no cgroup and `memory_mb`, with and without
/// namespaces: it must be killed for `limits.memory_mb` before it holds it
/// (up to three attempts, [`until_killed`]). `room`: the MiB /dev/shm needs
/// free for the attack to say anything; `held`: what an escape did.
fn a_tmpdir_attack_is_killed(script: &str, memory_mb: u32, room: u64, held: &str) {
    let _shm = shm_exclusive();
    let Some(_room) = shm_scratch("capsule-shm-tmpdir.", room) else {
        return;
    };
    let py = python();
    for no_ns in ["0", "1"] {
        let run = until_killed(|| {
            let mut sb = shmem_sandbox(true);
            sb.set_env("CAPSULE_NO_NAMESPACES", no_ns);
            let pol = sb.policy(&format!(
                "version: 1\nlimits:\n  memory_mb: {memory_mb}\n  timeout_seconds: 60\n"
            ));
            sb.exec_json(&["--policy", &pol], &[&py, "-c", script])
        });
        assert!(
            !run.child_stdout().contains("HELD"),
            "ESCAPE (no_namespaces={no_ns}): {held} under memory_mb: {memory_mb}{}",
            run.ctx()
        );
        assert_killed_for_memory(&run, "none", &format!("{held} (no_namespaces={no_ns})"));
    }
}

const UNLINKED_BEYOND_PATH_MAX: &str = r#"
import os, time
os.chdir(os.environ["TMPDIR"])
name = "d" * 250
for _ in range(20):
    os.mkdir(name)
    os.chdir(name)
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o600)
os.unlink("f")
for _ in range(20):
    os.chdir("..")
    os.rmdir(name)
try:
    os.readlink("/proc/self/fd/%d" % fd)
    print("SHORT", flush=True)
except OSError as e:
    print("LONG", e.errno, flush=True)
buf = b"\x07" * (1 << 20)
for _ in range(48):
    os.write(fd, buf)
time.sleep(1)
print("HELD", flush=True)
time.sleep(2)
"#;

/// A file the run unlinked and holds open counts through its descriptor's
/// name (`/proc/PID/fd/N` beneath the TMPDIR or a grant). A name longer
/// than PATH_MAX (a file opened 20 directories of 250 characters deep,
/// then unlinked, the directories removed) has no name there: readlink
/// says ENAMETOOLONG, and the watchdog skipped it. Without a cgroup a run
/// held 48 MiB on /dev/shm under `memory_mb: 16`.
#[test]
fn an_unlinked_file_whose_name_is_too_long_still_counts_toward_memory_mb() {
    a_tmpdir_attack_is_killed(
        UNLINKED_BEYOND_PATH_MAX,
        16,
        100,
        "held 48 MiB in an unlinked TMPDIR file whose name is longer than PATH_MAX",
    );
}

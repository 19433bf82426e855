//! Seccomp escapes: namespaces, mounts, chroot, bpf, keyrings, io_uring,
//! userfaultfd, perf_event_open, module/kexec, personality, TIOCSTI, unknown
//! syscalls, clone3, foreign ABIs (x32, i386 int 0x80); setuid/setgid modes,
//! limits and scheduling of other processes (capsule itself included), the
//! host's SysV/POSIX IPC, and executing a memfd.
//!
//! Arguments are chosen so that the kernel itself, without seccomp, answers
//! with a DIFFERENT errno (ENOENT, EINVAL, EFAULT, ENOTTY...). The sandboxed
//! run must answer EPERM; the same probe on the host is the positive control
//! proving the EPERM came from capsule's filter, not from missing privilege.
#![cfg(target_arch = "x86_64")]

mod common;

use common::*;

/// Run OPS inside capsule and on the host; each sandboxed op must fail with
/// EXPECT, and on the host must not fail with EXPECT (unless listed in
/// `host_may_match`, for calls the host refuses for its own reasons).
fn denied_everywhere(ops: &[&[&str]], expect: &str, host_may_match: &[&str]) {
    let sb = Sandbox::new();
    let run = sb.probe(&[], ops);
    run.assert_ran();
    for (i, op) in ops.iter().enumerate() {
        assert_errno(&run.probe(i), &[expect], &run);
        let _ = op;
    }
    let host = sb.host_probe(ops);
    assert_eq!(host.len(), ops.len(), "host control produced {:?}", host);
    for h in &host {
        let name = h["op"].as_str().unwrap_or_default();
        if host_may_match.contains(&name) && h["errno"] == expect {
            skip_part(&format!(
                "host control for {name} inconclusive: the host also says {expect} ({h})"
            ));
            continue;
        }
        assert_host_not(h, expect);
    }
}

#[test]
fn namespaces_are_denied() {
    // unshare(CLONE_NEWUSER) is allowed to unprivileged users on this
    // kernel, so the host control succeeds; a host that disables user
    // namespaces makes that control inconclusive (printed).
    denied_everywhere(
        &[
            &["unshare", "0x10000000"],
            &["clone_ns", "0x10000000"],
            &["setns_bad"],
        ],
        "EPERM",
        &["unshare", "clone_ns"],
    );
    let sb = Sandbox::new();
    let run = sb.probe(
        &[],
        &[
            &["unshare", "0x20000"],
            &["unshare", "0x40000000"],
            &["unshare", "0x20000000"],
            &["clone_ns", "0x40000000"],
        ],
    );
    run.assert_ran();
    for i in 0..4 {
        assert_errno(&run.probe(i), &["EPERM"], &run);
    }
}

#[test]
fn mount_family_and_chroot_are_denied() {
    denied_everywhere(
        &[&["mount_bad"], &["chroot_bad"], &["open_tree_bad"]],
        "EPERM",
        &[],
    );
    // These the kernel already refuses to unprivileged callers; seccomp
    // must refuse them too (no host control possible without root harm).
    let sb = Sandbox::new();
    let run = sb.probe(
        &[],
        &[&["umount_bad"], &["pivot_root_bad"], &["fsopen_bad"]],
    );
    run.assert_ran();
    for i in 0..3 {
        assert_errno(&run.probe(i), &["EPERM"], &run);
    }
}

#[test]
fn bpf_and_perf_event_open_are_denied() {
    denied_everywhere(&[&["bpf_bad"], &["perf_bad"]], "EPERM", &[]);
}

#[test]
fn keyrings_are_denied() {
    denied_everywhere(
        &[&["keyctl_bad"], &["add_key_bad"], &["request_key_bad"]],
        "EPERM",
        &[],
    );
}

#[test]
fn io_uring_is_denied() {
    // kernel.io_uring_disabled=2 makes the host say EPERM too (printed).
    denied_everywhere(
        &[&["io_uring_bad"], &["io_uring_enter_bad"]],
        "EPERM",
        &["io_uring_bad", "io_uring_enter_bad"],
    );
}

#[test]
fn userfaultfd_is_denied() {
    // UFFD_USER_MODE_ONLY: the kernel hands it to any user.
    denied_everywhere(&[&["userfaultfd_user"]], "EPERM", &["userfaultfd_user"]);
}

#[test]
fn modules_and_kexec_are_denied() {
    let sb = Sandbox::new();
    let run = sb.probe(
        &[],
        &[
            &["kexec_bad"],
            &["finit_module_bad"],
            &["init_module_bad"],
            &["delete_module_bad"],
        ],
    );
    run.assert_ran();
    for i in 0..4 {
        assert_errno(&run.probe(i), &["EPERM"], &run);
    }
}

#[test]
fn personality_changes_are_denied() {
    let sb = Sandbox::new();
    let run = sb.probe(
        &[],
        &[
            &["personality", "0xffffffff"], // query: allowed
            &["personality", "0x0400000"],  // READ_IMPLIES_EXEC
            &["personality", "0x0040000"],  // ADDR_NO_RANDOMIZE
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    assert_errno(&run.probe(1), &["EPERM"], &run);
    assert_errno(&run.probe(2), &["EPERM"], &run);
    let host = sb.host_probe(&[&["personality", "0x0400000"]]);
    let h = &host[0];
    let errno = h["errno"].as_str().unwrap_or_default();
    if !container_refuses(h, errno) {
        assert_eq!(h["ok"], true, "host control {:?}", host);
    }
}

#[test]
fn tiocsti_and_tioclinux_are_denied_also_with_high_bits() {
    // On /dev/null the kernel says ENOTTY; the filter must say EPERM first,
    // including for a command with bits set above 32 (CVE-2019-10063).
    denied_everywhere(
        &[&["tiocsti"], &["tiocsti_high"], &["tioclinux"]],
        "EPERM",
        &[],
    );
}

#[test]
fn unknown_syscalls_and_clone3_say_enosys_and_fork_still_works() {
    let sb = Sandbox::new();
    let run = sb.probe(
        &[],
        &[
            &["nosys", "1000"],
            &["clone3"],
            &["kill_own_child"],
            &["exec", "/bin/true"],
            &["whoami"],
        ],
    );
    run.assert_ran();
    assert_errno(&run.probe(0), &["ENOSYS"], &run);
    assert_errno(&run.probe(1), &["ENOSYS"], &run);
    // libc falls back from clone3 to clone: fork and spawn work.
    assert_ok(&run.probe(2), &run);
    assert_eq!(run.probe(3)["value"], 0, "{}", run.ctx());
    assert_ok(&run.probe(4), &run);
    // Control: on the host clone3 with size 0 is EINVAL, not ENOSYS.
    let host = sb.host_probe(&[&["clone3"]]);
    assert_host_not(&host[0], "ENOSYS");
}

fn assert_killed_by_sigsys(run: &Run, start: &str) {
    run.assert_code(128 + 31);
    let j = run.json();
    assert_eq!(j["termination_reason"], "signaled", "{}", run.ctx());
    assert_eq!(j["signal"], 31, "{}", run.ctx());
    assert_eq!(j["exit_code"], 159, "{}", run.ctx());
    assert_eq!(j["success"], false);
    let out = j["stdout"].as_str().unwrap_or_default();
    assert!(
        out.contains(start),
        "the probe never started ({start}){}",
        run.ctx()
    );
    assert!(
        !out.contains("returned"),
        "the foreign syscall returned{}",
        run.ctx()
    );
}

#[test]
fn x32_syscall_is_killed_python() {
    let sb = Sandbox::new();
    let run = sb.probe(&[], &[&["x32"], &["whoami"]]);
    assert_killed_by_sigsys(&run, "x32_start");
    assert!(
        !run.child_stdout().contains("\"whoami\""),
        "survived the x32 call{}",
        run.ctx()
    );
    // Control: on the host the same call is not a kill (ENOSYS where x32 is
    // off, a pid where it is on).
    let host = sb.host_probe(&[&["x32"], &["whoami"]]);
    assert_eq!(host.len(), 3, "host control was killed: {:?}", host);
}

#[test]
fn foreign_abis_are_killed_c_probe() {
    let sb = Sandbox::new();
    let Some(bin) = sb.compile_foreign_abi("bin") else {
        return;
    };
    let bin = bin.to_string_lossy().into_owned();
    let dir = sb.p("bin");

    // Positive control: the native call works inside capsule.
    let run = sb.exec_json(&["--allow-exec", &dir], &[&bin, "native"]);
    run.assert_code(0);
    assert!(run.child_stdout().contains("returned"), "{}", run.ctx());

    let run = sb.exec_json(&["--allow-exec", &dir], &[&bin, "x32"]);
    assert_killed_by_sigsys(&run, "start x32");

    // i386 int 0x80 needs IA32 emulation in the kernel; check on the host.
    let host = std::process::Command::new(&bin)
        .arg("int80")
        .output()
        .expect("run probe on host");
    let host_out = String::from_utf8_lossy(&host.stdout);
    if !host.status.success() || !host_out.contains("returned") {
        skip_part(&format!(
            "kernel lacks IA32 emulation: int 0x80 on the host gave {:?} {host_out}",
            host.status
        ));
        return;
    }
    let run = sb.exec_json(&["--allow-exec", &dir], &[&bin, "int80"]);
    assert_killed_by_sigsys(&run, "start int80");
}

// ---------------------------------------------------------------------------
// Argument checks: setuid/setgid modes, other processes' limits and
// scheduling, SysV/POSIX IPC, executing a memfd. Each attack runs with
// namespaces (when this machine can make them) and in the fallback without
// (`CAPSULE_NO_NAMESPACES=1`), where seccomp is the only layer in the way.

/// The probe for these attacks (`tests/probes/seccomp_args.py`), passed with
/// `python3 -c` so it needs no file grant.
const ARGS_PROBE: &str = include_str!("probes/seccomp_args.py");

/// How capsule is asked to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Whatever namespaces this machine allows (the default).
    Namespaces,
    /// `CAPSULE_NO_NAMESPACES=1`: no user, pid or IPC namespace.
    Fallback,
}

const MODES: [Mode; 2] = [Mode::Namespaces, Mode::Fallback];

fn sandbox(mode: Mode) -> Sandbox {
    let mut sb = Sandbox::new();
    if mode == Mode::Fallback {
        sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    }
    sb
}

/// Whether a run in `mode` is really without a pid namespace.
fn fallback(mode: Mode) -> bool {
    mode == Mode::Fallback || std::env::var_os("CAPSULE_NO_NAMESPACES").is_some()
}

fn args_argv(ops: &[&[&str]]) -> Vec<String> {
    let mut v = vec![python(), "-c".to_string(), ARGS_PROBE.to_string()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            v.push(";".into());
        }
        v.extend(op.iter().map(|s| s.to_string()));
    }
    v
}

/// `capsule exec --json OPTS -- python3 -c ARGS_PROBE ops...`
fn args_probe(sb: &Sandbox, opts: &[&str], ops: &[&[&str]]) -> Run {
    let argv = args_argv(ops);
    let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
    sb.exec_json(opts, &refs)
}

/// The same probe on the host, outside capsule: the positive control.
fn args_host_probe(sb: &Sandbox, ops: &[&[&str]]) -> Vec<serde_json::Value> {
    let argv = args_argv(ops);
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(&sb.root)
        .env_clear()
        .env("PATH", TEST_PATH)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run host probe");
    let v = parse_probe_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v.len(), ops.len(), "host probe: {out:?}");
    v
}

fn file_mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[test]
fn setuid_and_setgid_bits_are_refused_in_every_mode() {
    for mode in MODES {
        let sb = sandbox(mode);
        let dir = sb.mkdir("w");
        let f = sb.write("w/f", "#!/bin/sh\n");
        let fs_ = f.to_string_lossy().into_owned();
        let outside = sb.write("outside", "x");
        let outs = outside.to_string_lossy().into_owned();
        let created = dir.join("created").to_string_lossy().into_owned();
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        let run = args_probe(
            &sb,
            &["--allow-write", &dir.to_string_lossy()],
            &[
                &["chmod", &fs_, "4755"],
                &["fchmod", &fs_, "2755"],
                &["fchmodat", &fs_, "6755"],
                &["fchmodat2", &fs_, "4755"],
                &["chmod_high", &fs_, "4755"],
                &["chmod", &outs, "4777"],
                &["mode", &fs_],
                &["chmod", &fs_, "0755"],
                &["fchmodat2", &fs_, "0700"],
                &["fchmod", &fs_, "1755"],
                &["mode", &fs_],
                &["create_mode", &created, "6755"],
            ],
        );
        run.assert_ran();
        for i in 0..6 {
            assert_errno(&run.probe(i), &["EPERM"], &run);
        }
        assert_eq!(run.probe(6)["value"], "0o644", "{mode:?}{}", run.ctx());
        // A container whose seccomp profile predates fchmodat2 (podman 4.3's)
        // answers it ENOSYS outside capsule too.
        let host = args_host_probe(&sb, &[&["fchmodat2", &outs, "0644"]]);
        for i in 7..10 {
            if i == 8 && container_refuses(&host[0], "ENOSYS") {
                assert_errno(&run.probe(i), &["ENOSYS"], &run);
                continue;
            }
            assert_ok(&run.probe(i), &run);
        }
        // Sticky bit and plain modes stay allowed.
        assert_eq!(run.probe(10)["value"], "0o1755", "{mode:?}{}", run.ctx());
        // open(O_CREAT, 06755): the kernel strips both bits at the first
        // write of a process without CAP_FSETID (the child has none).
        let c = run.probe(11);
        assert_ok(&c, &run);
        let after = u32::from_str_radix(
            c["value"][1]
                .as_str()
                .unwrap_or("0o7777")
                .trim_start_matches("0o"),
            8,
        )
        .expect("octal");
        assert_eq!(after & 0o6000, 0, "{mode:?}: {c}{}", run.ctx());
        assert_eq!(file_mode(&f), 0o1755);
        assert_eq!(file_mode(&outside) & 0o6000, 0);

        // The coreutils command a user (or an attacker) would type.
        let sh = format!(
            "chmod 4755 {fs_}; echo a=$?; chmod g+s {fs_}; echo b=$?; chmod u+s {outs}; echo c=$?; \
             chmod 0755 {fs_}; echo d=$?; stat -c %a {fs_}"
        );
        let run = sb.exec_json(
            &["--allow-write", &dir.to_string_lossy()],
            &["/bin/sh", "-c", &sh],
        );
        run.assert_ran();
        let out = run.child_stdout();
        for want in ["a=1", "b=1", "c=1", "d=0", "\n755"] {
            assert!(out.contains(want), "{mode:?}: no {want:?}{}", run.ctx());
        }
        assert!(
            run.child_stderr().contains("Operation not permitted"),
            "{mode:?}{}",
            run.ctx()
        );
        assert_eq!(file_mode(&f), 0o755);
    }
    // Positive control: on the host the same call sets the bit.
    let sb = Sandbox::new();
    let f = sb.write("host", "x").to_string_lossy().into_owned();
    let host = args_host_probe(&sb, &[&["fchmodat", &f, "4755"], &["mode", &f]]);
    assert_eq!(host[0]["ok"], true, "{host:?}");
    assert_eq!(host[1]["value"], "0o4755", "{host:?}");
}

/// Calls aimed at process `who` that change it.
fn changes_of(who: &str) -> Vec<Vec<String>> {
    [
        vec!["prlimit", who, "RLIMIT_FSIZE", "0", "0"],
        vec!["prlimit_null_high", who],
        vec!["setpriority", "0", who, "19"],
        vec!["sched_setaffinity", who],
        vec!["sched_setscheduler", who, "5"],
        vec!["sched_setparam", who],
        vec!["sched_setattr", who, "5"],
        vec!["ioprio_set", "1", who],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect()
}

fn as_ops(v: &[Vec<String>]) -> Vec<Vec<&str>> {
    v.iter()
        .map(|op| op.iter().map(String::as_str).collect())
        .collect()
}

#[test]
fn the_supervisor_cannot_be_limited_or_deprioritised_in_the_fallback() {
    // Without a pid namespace the child's parent is capsule itself. Before
    // the fix, `prlimit(ppid, RLIMIT_FSIZE, 0)` made capsule die of SIGXFSZ
    // on its next file write (the audit record): no result, no audit.
    let sb = sandbox(Mode::Fallback);
    let ops = changes_of("ppid");
    let ops = as_ops(&ops);
    let refs: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    let run = args_probe(&sb, &[], &refs);
    run.assert_ran();
    let j = run.json();
    assert_eq!(j["exit_code"], 0, "{}", run.ctx());
    for i in 0..refs.len() {
        assert_errno(&run.probe(i), &["EPERM"], &run);
    }
    let audit = std::fs::read_to_string(sb.state.join("capsule/audit.jsonl")).unwrap_or_default();
    assert_eq!(audit.lines().count(), 1, "audit record missing: {audit:?}");
}

/// As root the kernel already refuses setpriority and the sched_* calls on
/// another root process to a child without CAP_SYS_NICE (EPERM either way);
/// prlimit64 it allows, so the test fails without the filter as root too.
/// As an unprivileged user the kernel allows every one of them.
#[test]
fn host_processes_of_the_same_uid_are_out_of_reach() {
    let (_child, guard) = host_sleeper();
    let pid = guard.pid.to_string();
    let ops = changes_of(&pid);
    let ops = as_ops(&ops);
    let refs: Vec<&[&str]> = ops.iter().map(Vec::as_slice).collect();
    for mode in MODES {
        let sb = sandbox(mode);
        let run = args_probe(&sb, &[], &refs);
        run.assert_ran();
        // In a pid namespace the host process is not even visible (ESRCH).
        let want: &[&str] = if fallback(mode) {
            &["EPERM"]
        } else {
            &["EPERM", "ESRCH"]
        };
        for i in 0..refs.len() {
            assert_errno(&run.probe(i), want, &run);
        }
    }
    // Positive control: the kernel lets a same-uid process do all of it.
    let sb = Sandbox::new();
    for (i, h) in args_host_probe(&sb, &refs).iter().enumerate() {
        assert_eq!(h["ok"], true, "host control #{i}: {h}");
    }
}

#[test]
fn changing_ones_own_limits_and_priority_still_works() {
    for mode in MODES {
        let sb = sandbox(mode);
        let run = args_probe(
            &sb,
            &[],
            &[
                &["setrlimit", "RLIMIT_CORE", "0", "0"],
                &["prlimit", "0", "RLIMIT_NOFILE", "256", "512"],
                &["prlimit_read", "ppid", "RLIMIT_NOFILE"],
                &["setpriority", "0", "0", "5"],
                &["setpriority", "1", "0", "6"],
                &["sched_setaffinity", "0"],
                &["sched_setscheduler", "0", "3"],
                &["ioprio_set", "1", "0"],
                &["sched_setattr", "0", "0"],
                // PRIO_USER 0 is every process of our uid: the supervisor too.
                &["setpriority", "2", "0", "7"],
            ],
        );
        run.assert_ran();
        for i in 0..9 {
            assert_ok(&run.probe(i), &run);
        }
        if fallback(mode) {
            assert_errno(&run.probe(9), &["EPERM"], &run);
        }
        let run = sb.exec_json(&[], &["/bin/sh", "-c", "nice -n 5 /bin/true && echo NICE"]);
        run.assert_ran();
        assert!(run.child_stdout().contains("NICE"), "{}", run.ctx());
    }
}

/// A SysV shared-memory segment of the host, created by the test, holding `text`.
struct HostSegment {
    id: i32,
    key: i32,
}

impl HostSegment {
    fn new(text: &str) -> HostSegment {
        let key = 0x4341_0000 | (std::process::id() as i32 & 0xffff);
        // SAFETY: shmget/shmat/shmdt on a fresh private segment of 4096 bytes;
        // at most text.len() + 1 (< 4096) bytes are written into the mapping,
        // which is detached before it goes out of scope.
        unsafe {
            let id = libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600);
            assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
            let p = libc::shmat(id, std::ptr::null(), 0);
            assert!(
                p as isize != -1,
                "shmat: {}",
                std::io::Error::last_os_error()
            );
            std::ptr::copy_nonoverlapping(text.as_ptr(), p.cast::<u8>(), text.len());
            *p.cast::<u8>().add(text.len()) = 0;
            libc::shmdt(p);
            HostSegment { id, key }
        }
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        // SAFETY: IPC_RMID on the segment this test created; no buffer is passed.
        unsafe {
            libc::shmctl(self.id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}

#[test]
fn sysv_and_posix_ipc_are_refused_without_an_ipc_namespace() {
    let secret = format!("seg{}", std::process::id());
    let seg = HostSegment::new(&secret);
    let (id, key) = (seg.id.to_string(), seg.key.to_string());
    let mq = format!("/capsule-probe-{}", std::process::id());
    let ops: &[&[&str]] = &[
        &["shmat_read", &id],
        &["shmget", &key],
        &["shmctl_stat", &id],
        &["msgget", &key],
        &["semget", &key],
        &["sem_private"],
        &["mq_open", &mq],
    ];
    // Sharing the host's IPC namespace (the fallback always; today every
    // mode), seccomp refuses every call. With an IPC namespace of its own
    // (seccomp's private_ipc), the host's objects are simply not there:
    // ENOENT for the key, EINVAL for the id; the child's own semaphores and
    // queues then work.
    let in_own_namespace: [&[&str]; 5] = [
        &["EPERM", "EINVAL"],
        &["EPERM", "ENOENT"],
        &["EPERM", "EINVAL"],
        &["EPERM", "ENOENT"],
        &["EPERM", "ENOENT"],
    ];
    for mode in MODES {
        let sb = sandbox(mode);
        let run = args_probe(&sb, &[], ops);
        run.assert_ran();
        for i in 0..ops.len() {
            let p = run.probe(i);
            assert_ne!(
                p["value"],
                secret,
                "{mode:?}: read the host segment{}",
                run.ctx()
            );
            if fallback(mode) {
                assert_errno(&p, &["EPERM"], &run);
            } else if let Some(want) = in_own_namespace.get(i) {
                assert_errno(&p, want, &run);
            }
        }
    }
    // Positive control: the host reads it.
    let sb = Sandbox::new();
    let host = args_host_probe(&sb, &[&["shmat_read", &id]]);
    assert_eq!(host[0]["value"], secret, "{host:?}");
}

#[test]
fn fexecve_of_a_memfd_is_refused() {
    for mode in MODES {
        let sb = sandbox(mode);
        let run = args_probe(
            &sb,
            &[],
            &[
                &["memfd_fexecve", "/bin/echo"],
                &["execveat_path", "/bin/true"],
                &["memfd_create", "1"],
                // MFD_HUGETLB | MFD_CLOEXEC: hugetlbfs ignores the exec seal.
                &["memfd_create", "5"],
            ],
        );
        run.assert_ran();
        assert_errno(&run.probe(0), &["EPERM"], &run);
        // execveat by path goes through Landlock like execve: allowed.
        assert_eq!(run.probe(1)["value"], 0, "{mode:?}{}", run.ctx());
        // memfd_create itself stays allowed (MFD_CLOEXEC).
        assert_ok(&run.probe(2), &run);
        // A hugetlb memfd could be chmod'ed executable (no exec seal there).
        assert_errno(&run.probe(3), &["EPERM"], &run);
    }
    let sb = Sandbox::new();
    let host = args_host_probe(&sb, &[&["memfd_fexecve", "/bin/echo"]]);
    assert_eq!(host[0]["value"], "RAN-FROM-MEMFD", "{host:?}");
}

#[test]
fn exec_of_a_memfd_through_proc_self_fd_is_refused_or_reported() {
    // execve("/proc/self/fd/N") of a memfd passes Landlock (the file lives on
    // the kernel's internal shmem mount) and seccomp cannot see the path:
    // vm.memfd_noexec=2 in the run's pid namespace closes it (6.3+, capsule
    // as root), and elsewhere on 6.3+ the memfd guard (capsule makes every
    // memfd of the run itself, sealed against execution). Before 6.3 the
    // gap must be reported.
    let sb = Sandbox::new();
    let run = args_probe(&sb, &[], &[&["memfd_proc_exec", "/bin/echo"]]);
    run.assert_ran();
    let v = run.json();
    let layer = v["enforcement"]["memfd_exec"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let kernel_has_it = std::path::Path::new("/proc/sys/vm/memfd_noexec").exists();
    if kernel_has_it {
        assert!(
            layer == "pid-namespace-sysctl" || layer == "seccomp-notify",
            "Linux 6.3+ and no layer holds memfd exec: {layer:?}{}",
            run.ctx()
        );
    }
    if layer == "none" {
        let missing = v["enforcement"]["missing"].to_string();
        assert!(
            missing.contains("execution of a memfd"),
            "the memfd gap is not reported{}",
            run.ctx()
        );
    } else {
        assert_errno(&run.probe(0), &["EACCES", "EPERM"], &run);
    }
}

/// `open(path, 3)`: access mode 3 ("neither read nor write", a descriptor
/// for ioctls only) asks Landlock for no right, so seccomp refuses it for
/// `open`/`openat` in every mode and on every file, granted ones too (EPERM
/// before the path is looked up); `openat2`, whose flags lie behind a
/// pointer, answers ENOSYS. tests/escape_truncate.rs has the truncation and
/// ioctl attacks at Landlock ABI 1-3; here the rule itself, with the host as
/// the positive control.
#[test]
fn open_access_mode_3_is_refused_and_openat2_is_enosys() {
    for mode in MODES {
        let sb = sandbox(mode);
        sb.write("rw/file.txt", "content");
        let f = sb.p("rw/file.txt");
        let run = sb.probe(
            &["--allow-write", &sb.p("rw")],
            &[
                &["open_mode3", &f],
                &["open_mode3", &f, "0o2000000"], // O_CLOEXEC
                &["openat2", &f],
                &["read", &f],
            ],
        );
        run.assert_ran();
        assert_errno(&run.probe(0), &["EPERM"], &run);
        assert_errno(&run.probe(1), &["EPERM"], &run);
        assert_errno(&run.probe(2), &["ENOSYS"], &run);
        // Ordinary opens of the same file work.
        assert_eq!(run.probe(3)["value"], "content", "{mode:?}{}", run.ctx());
        let host = sb.host_probe(&[&["open_mode3", &f], &["openat2", &f]]);
        assert_eq!(host[0]["ok"], true, "host control: {host:?}");
        assert_eq!(host[1]["ok"], true, "host control: {host:?}");
    }
}

/// `check` and `--dry-run` name the rules on access mode 3, openat2 and
/// socket pairs (and what allow_unix_sockets changes about the pairs).
#[test]
fn check_and_dry_run_name_the_open_and_socketpair_rules() {
    let sb = Sandbox::new();
    let strict = sb.policy("version: 1\n");
    let unix = sb.policy_named(
        "unix.yaml",
        "version: 1\nnetwork:\n  allow_unix_sockets: true\n",
    );
    let check = sb.run(&["check", "--policy", &strict]);
    let dry = sb.run(&["exec", "--dry-run", "--", "/bin/true"]);
    for out in [&check.stdout, &dry.stdout] {
        assert!(out.contains("access mode 3"), "{out}");
        assert!(out.contains("openat2"), "{out}");
        assert!(out.contains("stream and seqpacket only"), "{out}");
    }
    let check = sb.run(&["check", "--policy", &unix, "--json"]);
    let j: serde_json::Value = serde_json::from_str(check.stdout.trim()).expect("json");
    assert!(
        j["seccomp"]
            .as_str()
            .unwrap_or_default()
            .contains("AF_UNIX any type"),
        "{j}"
    );
}

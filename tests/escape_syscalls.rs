//! Seccomp escapes: namespaces, mounts, chroot, bpf, keyrings, io_uring,
//! userfaultfd, perf_event_open, module/kexec, personality, TIOCSTI, unknown
//! syscalls, clone3, and foreign ABIs (x32, i386 int 0x80).
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
            skip(&format!(
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
    assert_eq!(host[0]["ok"], true, "host control {:?}", host);
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
        skip(&format!(
            "kernel lacks IA32 emulation: int 0x80 on the host gave {:?} {host_out}",
            host.status
        ));
        return;
    }
    let run = sb.exec_json(&["--allow-exec", &dir], &[&bin, "int80"]);
    assert_killed_by_sigsys(&run, "start int80");
}

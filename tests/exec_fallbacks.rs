//! capsule where a container, a pod or a CI runner refuses part of what the
//! run's namespaces need (issue 19): `exec` takes the next path, confined,
//! before anything of the command ran, or refuses with the reason and the
//! remedy; `check` and `doctor` predict which.
//!
//! The shapes are emulated on the bare host, faithfully to what the kernel
//! answers there:
//! * a RuntimeDefault pod (Docker's/containerd's seccomp profile without
//!   CAP_SYS_ADMIN): tests/probes/outer_seccomp.c `runtimedefault` (EPERM for
//!   unshare/setns/mount and clone with namespace flags, clone3 ENOSYS) and
//!   `runtimedefault-enosys` (clone answered ENOSYS, as podman 4.3 applies
//!   that profile: today's "clone() => ENOSYS" in such pods);
//! * namespaces that can be created but not used (AppArmor's
//!   `unprivileged_userns` profile on Ubuntu 23.10+, a seccomp profile that
//!   allows unshare but denies mount): outer_seccomp `nomount` (clone and
//!   unshare allowed, the mount family EPERM) and `noifup` (bringing
//!   loopback up refused, as AppArmor refuses it in the new network
//!   namespace);
//! * a container's masked /proc (pod-restricted, root-default, rootless
//!   podman): `unshare -Urm` with /dev/null bound over /proc/timer_list, and
//!   capsule started as root without CAP_SYS_ADMIN (`capsh --drop`), so it
//!   needs a user namespace of its own: the overmount is then locked for it
//!   and the kernel refuses a fresh procfs (`mount_too_revealing`), exactly
//!   as in a pod. As root, also the pod-restricted shape itself: a private
//!   mount namespace with the overmount, capsule as capsule-test.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

const OUTER_SECCOMP_C: &str = include_str!("probes/outer_seccomp.c");

/// tests/probes/outer_seccomp.c, built in the sandbox (None, said, without a C compiler).
fn outer_seccomp(sb: &Sandbox) -> Option<PathBuf> {
    sb.compile_c("probe", "outer_seccomp", OUTER_SECCOMP_C)
}

/// `capsh --drop=cap_sys_admin` before capsule: root without CAP_SYS_ADMIN,
/// as a container's root with the runtime's default capabilities.
fn without_sys_admin() -> Option<Vec<OsString>> {
    without_caps("cap_sys_admin")
}

fn limitations(v: &Value) -> String {
    v["enforcement"]["limitations"].to_string()
}

/// `capsule doctor --json` behind PREFIX: its prediction for the default policy.
fn doctor(sb: &Sandbox, prefix: &[OsString]) -> Value {
    let r = wrapped(sb, prefix, &["doctor", "--json"]);
    serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("doctor printed no JSON ({e}):{}", r.ctx()))
}

/// `capsule check` of the default-like policy behind PREFIX.
fn check(sb: &Sandbox, prefix: &[OsString], extra: &str) -> Run {
    let pol = sb.policy(&format!("version: 1\n{extra}"));
    wrapped(sb, prefix, &["check", "--json", "-p", &pol])
}

/// A place outside every grant the run must not write (a positive control
/// shows the test itself can).
fn outside_dir(sb: &Sandbox) -> PathBuf {
    let d = tempfile::Builder::new()
        .prefix("capsule-fallback-outside-")
        .tempdir_in("/var/tmp")
        .expect("tempdir")
        .keep();
    std::fs::write(d.join("control"), "x").expect("the test itself writes there");
    let _ = sb;
    d
}

/// The command every fallback run executes: appends one line to
/// `marker` (granted), tries to write `outside` (not granted), prints "ran".
fn marker_cmd(marker: &Path, outside: &Path) -> String {
    format!(
        "echo once >> {m}; if echo x > {o}/escaped 2>/dev/null; then echo ESCAPED; fi; echo ran",
        m = marker.display(),
        o = outside.display()
    )
}

/// RuntimeDefault pods (EPERM and ENOSYS answers): an unprivileged run takes
/// the no-namespace path, confined, and says why; root refuses without
/// --best-effort (no view: every root-owned file's metadata) and runs with
/// it; check and doctor predict each.
#[test]
fn runtimedefault_pod_runs_confined_without_namespaces_or_refuses_root() {
    for mode in ["runtimedefault", "runtimedefault-enosys"] {
        let sb = Sandbox::new();
        let Some(probe) = outer_seccomp(&sb) else {
            return;
        };
        let prefix: Vec<OsString> = vec![probe.into(), mode.into()];
        let work = sb.mkdir("work");
        let marker = work.join("marker");
        let outside = outside_dir(&sb);
        let cmd = marker_cmd(&marker, &outside);
        let args = [
            "exec",
            "--json",
            "--no-audit",
            "--allow-write",
            work.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            &cmd,
        ];
        let r = wrapped(&sb, &prefix, &args);
        let chk = check(&sb, &prefix, "");
        let doc = doctor(&sb, &prefix);
        let root_refuses = is_root() && !no_namespaces_env();
        if root_refuses {
            r.assert_code(125);
            assert!(
                r.stderr.contains(
                    "capsule runs as root and the run cannot have its own mount namespace"
                ) && r.stderr.contains("clone() refused")
                    && r.stderr.contains("--best-effort"),
                "{mode}: the refusal names the reason and the remedy:{}",
                r.ctx()
            );
            assert_eq!(
                sb.read("work/marker"),
                "",
                "{mode}: nothing ran:{}",
                r.ctx()
            );
            assert_eq!(
                chk.code,
                Some(125),
                "{mode}: check predicts the refusal:{}",
                chk.ctx()
            );
            assert!(chk.stdout.contains("capsule runs as root"), "{}", chk.ctx());
            assert_eq!(doc["default_policy"]["runs"], false, "{mode}: {doc}");
            let mut be = args.to_vec();
            be.insert(3, "--best-effort");
            let r = wrapped(&sb, &prefix, &be);
            r.assert_ran();
            let v = r.json();
            assert!(
                v["enforcement"]["missing"]
                    .to_string()
                    .contains("EVERY root-owned file"),
                "{v}"
            );
            assert_eq!(v["stdout"], "ran\n", "{}", r.ctx());
        } else {
            r.assert_ran();
            let v = r.json();
            assert_eq!(
                v["stdout"],
                "ran\n",
                "{mode}: confined (no write outside grants):{}",
                r.ctx()
            );
            assert_eq!(v["enforcement"]["tree_kill"], "subreaper", "{v}");
            assert!(v["enforcement"]["view"].is_null(), "{v}");
            assert!(v["enforcement"]["seccomp"].as_bool().unwrap(), "{v}");
            if !no_namespaces_env() {
                assert!(
                    limitations(&v).contains("clone() refused the run's namespaces"),
                    "{v}"
                );
                assert!(
                    chk.stdout.contains("clone() refused the run's namespaces"),
                    "{}",
                    chk.ctx()
                );
                assert_eq!(
                    doc["default_policy"]["fallbacks"].as_array().map(Vec::len),
                    Some(1),
                    "{doc}"
                );
            }
            chk.assert_code(0);
            let c: Value = serde_json::from_str(chk.stdout.trim()).expect("check json");
            assert_eq!(
                c["tree_kill"], "subreaper",
                "check predicts exec's path: {c}"
            );
            let dry = wrapped(
                &sb,
                &prefix,
                &["exec", "--dry-run", "--json", "--", "/bin/true"],
            );
            let d: Value = serde_json::from_str(dry.stdout.trim()).expect("dry-run json");
            assert_eq!(
                d["tree_kill"], "subreaper",
                "--dry-run predicts exec's path: {d}"
            );
            assert!(d["view"].is_null(), "{d}");
            assert_eq!(doc["default_policy"]["runs"], true, "{doc}");
            assert_eq!(doc["default_policy"]["view"], false, "{doc}");
            assert_eq!(doc["namespaces"], false, "{doc}");
        }
        assert_eq!(
            sb.read("work/marker"),
            "once\n",
            "{mode}: the command ran once"
        );
        assert!(
            !outside.join("escaped").exists(),
            "{mode}: wrote outside its grants"
        );
        let _ = std::fs::remove_dir_all(&outside);
    }
}

/// Namespaces that can be created but not used: the mount family refused
/// (AppArmor's unprivileged_userns, a seccomp profile allowing unshare but
/// not mount), or bringing up loopback refused (proxy mode). capsule
/// learns it from init before the command exists: the command runs exactly
/// once, on the no-namespace path, confined; check and doctor predict it.
#[test]
fn namespaces_created_but_unusable_take_the_no_namespace_path_before_the_command_runs() {
    let cases: [(&str, &str, &str); 2] = [
        ("nomount", "", "mounting the read-only view of the host"),
        (
            "noifup",
            "network:\n  mode: proxy\n  allow_hosts: [example.com]\n",
            "setting up the network namespace",
        ),
    ];
    for (mode, policy, step) in cases {
        let sb = Sandbox::new();
        let Some(probe) = outer_seccomp(&sb) else {
            return;
        };
        let prefix: Vec<OsString> = vec![probe.into(), mode.into()];
        let work = sb.mkdir("work");
        let marker = work.join("marker");
        let outside = outside_dir(&sb);
        let cmd = marker_cmd(&marker, &outside);
        let pol = sb.policy(&format!("version: 1\n{policy}"));
        let args = [
            "exec",
            "--json",
            "--no-audit",
            "-p",
            &pol,
            "--allow-write",
            work.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            &cmd,
        ];
        let r = wrapped(&sb, &prefix, &args);
        let chk = check(&sb, &prefix, policy);
        r.assert_ran();
        if is_root() && !no_namespaces_env() {
            // Root's gap without the view (every root-owned file's
            // metadata) is closed by the metadata guard here (the profile
            // lets capsule read the caller: no refusal).
            assert!(
                limitations(&r.json()).contains("metadata guard"),
                "{mode}:{}",
                r.ctx()
            );
            assert!(
                !r.json()["enforcement"]["missing"]
                    .to_string()
                    .contains("EVERY root-owned file"),
                "{mode}:{}",
                r.ctx()
            );
        }
        let v = r.json();
        assert_eq!(v["stdout"], "ran\n", "{mode}:{}", r.ctx());
        assert_eq!(
            sb.read("work/marker"),
            "once\n",
            "{mode}: the command ran exactly once (nothing of it ran on the refused path):{}",
            r.ctx()
        );
        assert!(
            !outside.join("escaped").exists(),
            "{mode}: wrote outside its grants"
        );
        assert_eq!(v["enforcement"]["tree_kill"], "subreaper", "{v}");
        assert!(v["enforcement"]["view"].is_null(), "{v}");
        chk.assert_code(0);
        let c: Value = serde_json::from_str(chk.stdout.trim()).expect("check json");
        assert_eq!(
            c["tree_kill"], "subreaper",
            "check predicts exec's path: {c}"
        );
        if !no_namespaces_env() {
            let l = limitations(&v);
            assert!(
                l.contains("the kernel created the run's namespaces but refused")
                    && l.contains(step),
                "{v}"
            );
            assert!(c["notes"].to_string().contains(step), "{c}");
        }
        if mode == "nomount" {
            let doc = doctor(&sb, &prefix);
            assert_eq!(doc["default_policy"]["runs"], true, "{doc}");
            assert_eq!(doc["namespaces"], false, "{doc}");
        }
        let _ = std::fs::remove_dir_all(&outside);
    }
}

/// A process outside the run with the same uid, holding a fake API key in
/// its environment.
fn key_holder() -> (std::process::Child, KillOnDrop, String) {
    let key = format!("sk-fallback-{}", token("key"));
    let child = Command::new("/bin/sleep")
        .arg("120")
        .env("FAKE_API_KEY", &key)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let guard = KillOnDrop {
        pid: child.id() as i32,
        token: Some("sleep".into()),
    };
    (child, guard, key)
}

/// What the run does to /proc: reads the key holder's environ (must fail),
/// and a descendant reads its own /proc/self/status and /proc/self/fd.
fn proc_cmd(pid: u32) -> Vec<String> {
    let src = format!(
        r#"
import os, subprocess, sys
try:
    data = open("/proc/{pid}/environ", "rb").read()
    print("ENVIRON-READ", data.decode(errors="replace"))
except OSError as e:
    print("environ-refused", e.errno)
child = '''
import os
print("self-status", open("/proc/self/status").read().splitlines()[0])
print("self-fd", len(os.listdir("/proc/self/fd")) > 0)
'''
out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
print(out.stdout.strip())
print("child-stderr", out.stderr.strip()[-200:])
"#
    );
    vec![python(), "-c".into(), src]
}

fn exec_proc(sb: &Sandbox, prefix: &[OsString], extra: &[&str], pid: u32) -> Run {
    let cmd = proc_cmd(pid);
    let mut args: Vec<&str> = vec!["exec", "--json", "--no-audit"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend(cmd.iter().map(String::as_str));
    wrapped(sb, prefix, &args)
}

/// Below a container's masked /proc (the kernel refuses a fresh procfs in
/// the run's user namespace): the run keeps the rest of its view and binds
/// the container's /proc read-only; Landlock keeps the environ of a process
/// outside the run, same uid, unreadable, and a descendant reads its own
/// /proc/self. Without Landlock that /proc is refused unless --best-effort.
#[test]
fn masked_proc_keeps_the_view_with_the_containers_proc_under_landlock() {
    let sb = Sandbox::new();
    let Some(prefix) = masked_proc_root("cap_sys_admin") else {
        return;
    };
    let (holder, _guard, key) = key_holder();
    let pid = holder.id();
    // Positive control: the test itself (same uid) reads the key (once
    // the sleeper has exec'd: before that its environ is the test's).
    let read = || std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let t0 = std::time::Instant::now();
    while !String::from_utf8_lossy(&read()).contains(&key) {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the sleeper's environ never showed the key"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }

    let r = exec_proc(&sb, &prefix, &[], pid);
    r.assert_ran();
    let v = r.json();
    let out = v["stdout"].as_str().unwrap_or_default().to_string();
    assert!(
        !out.contains(&key),
        "the key of a process outside the run leaked:{}",
        r.ctx()
    );
    assert!(out.contains("environ-refused"), "{}", r.ctx());
    let e = &v["enforcement"];
    if no_namespaces_env() {
        assert!(e["view"].is_null(), "{v}");
        skip_part("no namespaces here: no pid namespace or view to check");
        return;
    }
    assert_eq!(e["tree_kill"], "pid-namespace", "{v}");
    assert_eq!(e["view"]["read_only_host"], true, "{v}");
    assert_eq!(e["view"]["private_proc"], false, "{v}");
    assert_eq!(e["view"]["private_tmp"], true, "{v}");
    assert_eq!(e["view"]["private_shm"], true, "{v}");
    assert_eq!(e["view"]["devpts"], true, "{v}");
    assert!(limitations(&v).contains("bound read-only"), "{v}");
    assert_ne!(
        e["memfd_exec"], "pid-namespace-sysctl",
        "no sysctl on a read-only /proc: {v}"
    );
    assert!(
        out.contains("self-status Name:"),
        "a descendant reads /proc/self/status:{}",
        r.ctx()
    );
    assert!(
        out.contains("self-fd True"),
        "a descendant reads /proc/self/fd:{}",
        r.ctx()
    );

    // check and doctor predict exactly that.
    let chk = check(&sb, &prefix, "");
    chk.assert_code(0);
    let c: Value = serde_json::from_str(chk.stdout.trim()).expect("check json");
    assert_eq!(c["tree_kill"], "pid-namespace", "{c}");
    assert_eq!(c["view"]["bound_proc"], true, "{c}");
    let doc = doctor(&sb, &prefix);
    assert_eq!(doc["default_policy"]["bound_proc"], true, "{doc}");
    assert_eq!(doc["namespaces"], true, "{doc}");
    let dry = wrapped(
        &sb,
        &prefix,
        &["exec", "--dry-run", "--json", "--", "/bin/true"],
    );
    dry.assert_code(0);
    let d: Value = serde_json::from_str(dry.stdout.trim()).expect("dry-run json");
    assert_eq!(d["tree_kill"], "pid-namespace", "{d}");
    assert_eq!(
        d["view"]["bound_proc"], true,
        "--dry-run predicts exec's /proc: {d}"
    );

    // Without Landlock nothing keeps that environ unreadable: refused (the
    // filesystem rules need Landlock first), and with --best-effort run with
    // that /proc's gap in `missing` too.
    let nol = sb_with(&sb, "CAPSULE_LANDLOCK_ABI_MAX", "0");
    let r = exec_proc(&nol, &prefix, &[], pid);
    r.assert_code(125);
    let r = exec_proc(&nol, &prefix, &["--best-effort"], pid);
    r.assert_ran();
    assert!(
        r.json()["enforcement"]["missing"]
            .to_string()
            .contains("private /proc"),
        "{}",
        r.ctx()
    );
}

fn sb_with(sb: &Sandbox, k: &str, v: &str) -> Sandbox {
    let mut s = Sandbox::new();
    s.env = sb.env.clone();
    s.set_env(k, v);
    s
}

/// The pod-restricted shape itself (root only: it needs a mount namespace
/// made by root): the masked /proc, capsule as an unprivileged user making
/// its own user namespace. Today's "mounting the run's private /proc:
/// Operation not permitted" becomes a run with the view.
#[test]
fn pod_restricted_shape_runs_with_the_view() {
    if !is_root() {
        skip("needs root to make the mount namespace with the masked /proc (the capsule-test pass covers the rest)");
        return;
    }
    let sb = Sandbox::new();
    std::fs::set_permissions(
        &sb.root,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    for d in [&sb.home, &sb.state, &sb.config] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let Some(setpriv) = first_tool(&["/usr/bin/setpriv", "/bin/setpriv"]) else {
        skip("no setpriv");
        return;
    };
    let prefix: Vec<OsString> = vec![
        "/usr/bin/unshare".into(),
        "-m".into(),
        "--propagation".into(),
        "private".into(),
        "/bin/sh".into(),
        "-c".into(),
        "mount --bind /dev/null /proc/timer_list && exec \"$0\" \"$@\"".into(),
        setpriv.into(),
        "--reuid=65534".into(),
        "--regid=65534".into(),
        "--clear-groups".into(),
        "--inh-caps=-all".into(),
    ];
    // capsule's binary must be reachable for 65534.
    let bin = capsule_bin();
    if !bin.ancestors().all(|p| {
        std::fs::metadata(p)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o001 != 0)
            .unwrap_or(false)
            || p == Path::new("/")
    }) {
        skip("capsule's binary is not reachable for uid 65534 here");
        return;
    }
    let r = wrapped(
        &sb,
        &prefix,
        &[
            "exec",
            "--json",
            "--no-audit",
            "--",
            "/bin/sh",
            "-c",
            "cat /proc/self/status | head -1",
        ],
    );
    r.assert_ran();
    let v = r.json();
    if no_namespaces_env() {
        skip_part("no namespaces here: no pid namespace or view to check");
        return;
    }
    assert_eq!(v["enforcement"]["tree_kill"], "pid-namespace", "{v}");
    assert_eq!(v["enforcement"]["view"]["private_proc"], false, "{v}");
    assert!(
        v["stdout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Name:"),
        "{v}"
    );
}

/// Root without CAP_SYS_ADMIN (a CI job container's root): a user namespace
/// of its own gives it the whole view; where even that is refused, the run
/// is refused without --best-effort, and check says so.
#[test]
fn root_without_cap_sys_admin_gets_the_view_or_refuses() {
    let sb = Sandbox::new();
    let Some(drop) = without_sys_admin() else {
        return;
    };
    let mut prefix: Vec<OsString> = vec!["/usr/bin/unshare".into(), "-Ur".into()];
    prefix.extend(drop);
    let r = wrapped(
        &sb,
        &prefix,
        &[
            "exec",
            "--json",
            "--no-audit",
            "--",
            "/bin/sh",
            "-c",
            "chmod 0666 /etc/hostname 2>&1; echo done",
        ],
    );
    if no_namespaces_env() {
        // The operator's own choice of the no-namespace path: it runs, and
        // root's chmod of a file outside its grants is held by the metadata
        // guard (or, where that cannot run, the gap is said).
        r.assert_ran();
        let v = r.json();
        let guarded = limitations(&v).contains("metadata guard");
        assert!(
            guarded
                || v["enforcement"]["missing"]
                    .to_string()
                    .contains("EVERY root-owned file"),
            "{}",
            r.ctx()
        );
        if guarded {
            assert!(
                v["stdout"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("Permission denied"),
                "ESCAPE: root's chmod outside its grants went through: {}",
                r.ctx()
            );
        }
        return;
    }
    r.assert_ran();
    let v = r.json();
    assert_eq!(v["enforcement"]["tree_kill"], "pid-namespace", "{v}");
    assert_eq!(v["enforcement"]["view"]["read_only_host"], true, "{v}");
    assert_eq!(v["enforcement"]["view"]["private_proc"], true, "{v}");
    assert_ne!(
        v["enforcement"]["memfd_exec"], "pid-namespace-sysctl",
        "only the initial namespace's root sets it: {v}"
    );
    assert!(
        v["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("Read-only file system"),
        "{v}"
    );

    // No user namespace either (RuntimeDefault): refused, with the remedy.
    let Some(probe) = outer_seccomp(&sb) else {
        return;
    };
    let mut pod = prefix.clone();
    pod.push(probe.into());
    pod.push("runtimedefault".into());
    let r = wrapped(
        &sb,
        &pod,
        &["exec", "--json", "--no-audit", "--", "/bin/true"],
    );
    r.assert_code(125);
    assert!(
        r.stderr.contains("Run capsule as an unprivileged user"),
        "{}",
        r.ctx()
    );
    let chk = check(&sb, &pod, "");
    assert_eq!(chk.code, Some(125), "{}", chk.ctx());
    let r = wrapped(
        &sb,
        &pod,
        &[
            "exec",
            "--json",
            "--no-audit",
            "--best-effort",
            "--",
            "/bin/true",
        ],
    );
    r.assert_ran();
}

/// The uid map refused (as AppArmor's unprivileged_userns profile can):
/// emulated with capsule started from a binary its user may execute but not
/// read, which makes the kernel mark it non-dumpable, so that the files of
/// its children's /proc/PID (uid_map among them) belong to root and the
/// write fails with EACCES. capsule learns it before its init goes on, and
/// takes the no-namespace path; check predicts it. As root the test runs
/// capsule as uid 65534 (root writes any uid_map). Without this, today's
/// capsule exits 125 ("writing the user namespace maps ... Permission denied").
#[test]
fn a_refused_uid_map_takes_the_no_namespace_path() {
    if no_namespaces_env() {
        skip("CAPSULE_NO_NAMESPACES=1: no user namespace, so no uid map to refuse");
        return;
    }
    let sb = Sandbox::new();
    for d in [&sb.root, &sb.home, &sb.state, &sb.config] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let bin = sb.path("unreadable/capsule");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(capsule_bin(), &bin).expect("copy capsule");
    let mut prefix: Vec<OsString> = Vec::new();
    if is_root() {
        // runuser, not setpriv: setpriv keeps capabilities up to the exec,
        // and with them the binary counts as readable (dumpable).
        let Some(runuser) = first_tool(&["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"])
        else {
            skip("no runuser to run capsule as uid 65534");
            return;
        };
        let Some(nobody) = std::fs::read_to_string("/etc/passwd").ok().and_then(|p| {
            p.lines()
                .find(|l| l.split(':').nth(2) == Some("65534"))
                .map(|l| l.split(':').next().unwrap_or_default().to_string())
        }) else {
            skip("no user with uid 65534 to run capsule as");
            return;
        };
        std::os::unix::fs::chown(&bin, Some(65534), Some(65534)).expect("chown");
        prefix.extend([
            runuser.into_os_string(),
            "-u".into(),
            nobody.into(),
            "--".into(),
        ]);
    }
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o111)).unwrap();
    prefix.push(bin.clone().into_os_string());
    let marker = sb.mkdir("work").join("marker");
    std::fs::set_permissions(
        sb.path("work"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let cmd = format!("echo once >> {}", marker.display());
    // `wrapped` appends capsule's own path: run the unreadable copy instead.
    let run = |args: &[&str]| {
        let c = sb.std_command(args);
        let envs: Vec<(OsString, OsString)> = c
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
            .collect();
        let out = assert_cmd::Command::new(&prefix[0])
            .args(&prefix[1..])
            .args(args)
            .env_clear()
            .envs(envs)
            .current_dir(&sb.root)
            .timeout(RUN_BOUND)
            .output()
            .expect("run capsule");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&[
        "exec",
        "--json",
        "--no-audit",
        "--allow-write",
        sb.path("work").to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        &cmd,
    ]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(v["enforcement"]["tree_kill"], "subreaper", "{v}");
    assert!(limitations(&v).contains("uid map"), "{v}");
    assert_eq!(
        sb.read("work/marker"),
        "once\n",
        "the command ran exactly once"
    );
    let pol = sb.policy("version: 1\n");
    std::fs::set_permissions(&pol, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let (code, stdout, _) = run(&["check", "--json", "-p", &pol]);
    assert_eq!(code, Some(0), "{stdout}");
    let c: Value = serde_json::from_str(stdout.trim()).expect("check json");
    assert_eq!(
        c["tree_kill"], "subreaper",
        "check predicts exec's path: {c}"
    );
    assert!(c["notes"].to_string().contains("uid map"), "{c}");
}

//! Red team 9: what the unsandboxed parent does with what a run left
//! behind, and the no-namespace path, written as the attack and run
//! against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips. Each case takes a few seconds at most.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// Run capsule with ARGS and no stdin, but give up after `bound`: the
/// process is killed (by its pid) and None returned. Some(exit code,
/// stdout, stderr) when it ended by itself.
fn run_bounded(sb: &Sandbox, args: &[&str], bound: Duration) -> Option<(Option<i32>, String)> {
    let mut c = sb.std_command(args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawn capsule");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            let out = child.wait_with_output().expect("output");
            let text = format!(
                "stdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return Some((out.status.code(), text));
        }
        if start.elapsed() > bound {
            // Ours, by pid: the capsule (or via_serve wrapper) we spawned.
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Planning reads the `#!` line of the command (and of each `command`
/// tool's program) on the host, before the run and its timeout start. The
/// file only had to exist and carry an execute bit, so a run with a write
/// grant left `ws/build.sh` as a FIFO of mode 0755, and the next
/// `capsule exec -- ws/build.sh` (the user's, a CI job's, an agent's next
/// step) opened it to read the `#!` line and blocked there for good: no
/// writer ever comes, and `--timeout` does not bound planning. The parent
/// must end by itself (the kernel refuses to execute a FIFO: 126).
#[test]
fn a_fifo_left_as_the_command_does_not_hang_the_next_run() {
    let sb = Sandbox::new();
    let ws = sb.mkdir("ws");
    let fifo = ws.join("build.sh");
    let fifo_s = fifo.to_string_lossy().into_owned();
    let ws_s = ws.to_string_lossy().into_owned();
    // The earlier run plants it, inside its own write grant.
    let plant = format!(
        "import os; os.mkfifo({fifo_s:?}, 0o755); os.chmod({fifo_s:?}, 0o755); print('PLANTED')"
    );
    let r = sb.exec_json(&["--allow-write", &ws_s], &[&python(), "-c", &plant]);
    assert!(
        r.child_stdout().contains("PLANTED"),
        "the run could not make a FIFO in its write grant:{}",
        r.ctx()
    );
    for args in [
        vec![
            "exec",
            "--json",
            "--timeout",
            "3",
            "--allow-write",
            &ws_s,
            "--",
            &fifo_s,
        ],
        vec!["exec", "--dry-run", "--allow-write", &ws_s, "--", &fifo_s],
    ] {
        let ended = run_bounded(&sb, &args, Duration::from_secs(30));
        assert!(
            ended.is_some(),
            "capsule {} hung on the FIFO the earlier run left as the command",
            args.join(" ")
        );
    }
}

/// The same through a `command` tool: an earlier run (under a policy that
/// could write there) left the tool's program as an executable FIFO in a
/// place this policy only reads. `capsule check` and `exec` read its `#!`
/// line while planning and hung.
#[test]
fn a_fifo_left_as_a_tools_program_does_not_hang_check() {
    let sb = Sandbox::new();
    let bin = sb.mkdir("tools/bin");
    let prog = bin.join("lint");
    let prog_s = prog.to_string_lossy().into_owned();
    let plant = format!(
        "import os; os.mkfifo({prog_s:?}, 0o755); os.chmod({prog_s:?}, 0o755); print('PLANTED')"
    );
    let r = sb.exec_json(
        &["--allow-write", &bin.to_string_lossy()],
        &[&python(), "-c", &plant],
    );
    assert!(
        r.child_stdout().contains("PLANTED"),
        "the run could not make a FIFO in its write grant:{}",
        r.ctx()
    );
    let policy = sb.policy_named(
        "pol/policy.yaml",
        &format!("version: 1\ntools:\n  allow:\n    - name: lint\n      command: [{prog_s:?}]\n"),
    );
    let ended = run_bounded(
        &sb,
        &["check", "--policy", &policy],
        Duration::from_secs(30),
    );
    assert!(
        ended.is_some(),
        "capsule check hung on the FIFO an earlier run left as a tool's program"
    );
}

/// Without namespaces (path 3: no unprivileged user namespaces, a
/// RuntimeDefault pod, Ubuntu 24.04) the command's own `/proc/self` is
/// granted, and its `net/` directory (also `task/TID/net/`) is the
/// network namespace the process is in: the host's. So the run read every
/// TCP and UDP connection and listener of the host (`net/tcp`: addresses,
/// ports, uids), every Unix socket's name (`net/unix`), the interfaces and
/// routes, none of which any grant names. The attack: a host listener on
/// 127.0.0.1 the run must not find there.
#[test]
fn without_namespaces_the_run_cannot_read_the_hosts_sockets_through_its_own_proc() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().unwrap().port();
    let needle = format!(":{port:04X} ");
    let script = r#"
import os
pid = os.getpid()
for p in ["/proc/self/net/tcp", "/proc/%d/net/tcp" % pid, "/proc/thread-self/net/tcp",
          "/proc/self/task/%d/net/tcp" % pid, "/proc/self/net/unix"]:
    try:
        data = open(p).read()
        print("READ", p, data.replace("\n", "|"))
    except OSError as e:
        print("REFUSED", p, e.errno)
print("STATUS", open("/proc/self/status").read().splitlines()[0])
print("FDS", len(os.listdir("/proc/self/fd")) > 0)
"#;
    let r = sb.exec_json(&[], &[&python(), "-c", script]);
    let out = r.child_stdout();
    assert!(
        out.contains("STATUS Name:") && out.contains("FDS True"),
        "the command no longer reads its own /proc/self:{}",
        r.ctx()
    );
    for line in out.lines().filter(|l| l.starts_with("READ")) {
        assert!(
            !line.contains(&needle),
            "the run read the host's loopback listener (port {port}) in {}:{}",
            line.split_whitespace().nth(1).unwrap_or("?"),
            r.ctx()
        );
        assert!(
            !line.contains("/net/"),
            "the run read the host's network state: {}:{}",
            line.split_whitespace().nth(1).unwrap_or("?"),
            r.ctx()
        );
    }
    drop(listener);
}

/// A btrfs directory for the subvolume attacks: `CAPSULE_TEST_BTRFS_DIR`,
/// else the sandbox's own directory when it lies on btrfs; None (a skip)
/// elsewhere.
fn btrfs_dir(sb: &Sandbox) -> Option<std::path::PathBuf> {
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
    let on_btrfs = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: all-zero is a valid `struct statfs`; statfs only writes it.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is NUL-terminated and `st` lives across the call.
        let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
        Some(r == 0 && st.f_type as i64 == BTRFS_SUPER_MAGIC)
    };
    let base = std::env::var_os("CAPSULE_TEST_BTRFS_DIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| sb.root.clone());
    if on_btrfs(&base) != Some(true) {
        skip(&format!("{} is not on btrfs (set CAPSULE_TEST_BTRFS_DIR to a btrfs directory this user can write)",
            base.display()
        ));
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("capsule-rt9-")
        .tempdir_in(&base)
        .ok()?
        .keep();
    std::fs::canonicalize(dir).ok()
}

/// The btrfs subvolume ioctls a run must not make, as a Python prelude:
/// `snap(dst_dir_fd, src_dir_fd, name)`, `setflags(fd, flags)`.
const BTRFS_PY: &str = r#"
import os, fcntl, struct
SNAP_CREATE, SUBVOL_SETFLAGS = 0x50009401, 0x4008941a
def snap(dst, src, name):
    fcntl.ioctl(dst, SNAP_CREATE, bytearray(struct.pack("q", src) + name + b"\0" * (4088 - len(name))))
def setflags(fd, flags):
    fcntl.ioctl(fd, SUBVOL_SETFLAGS, bytearray(struct.pack("Q", flags)))
"#;

/// Make `path` a btrfs subvolume (on the host, as the test's user); false
/// where this user cannot.
fn make_subvolume(path: &std::path::Path) -> bool {
    let script = format!(
        "{BTRFS_PY}\nSUBVOL_CREATE = 0x5000940e\nd = os.open({:?}, os.O_RDONLY)\nn = {:?}.encode()\n\
         fcntl.ioctl(d, SUBVOL_CREATE, bytearray(struct.pack('q', 0) + n + b'\\0' * (4088 - len(n))))\n",
        path.parent().unwrap().to_string_lossy(),
        path.file_name().unwrap().to_string_lossy()
    );
    std::process::Command::new(python())
        .args(["-c", &script])
        .status()
        .is_ok_and(|s| s.success())
}

/// btrfs's subvolume ioctls are no path operation: Landlock (no hook for
/// them), seccomp (ioctl numbers only TIOCSTI/TIOCLINUX and chattr's were
/// refused) and the view see nothing but an ioctl on a directory the run
/// may open. `BTRFS_IOC_SNAP_CREATE` on a directory of a write grant, with
/// the descriptor of a readable subvolume root, copied the whole
/// subvolume there — a `deny` carve-out (`./.env`), a credential file in a
/// granted home subvolume, as root an `/etc` secret — and the run read the
/// copy: both paths. Without namespaces (no read-only view) the same call
/// on a directory the run may only read planted a directory of its own
/// making there (a `__pycache__`, a systemd drop-in directory as root),
/// and `BTRFS_IOC_SUBVOL_SETFLAGS` made a subvolume it may only read
/// read-only. Skipped where no btrfs directory is at hand.
#[test]
fn btrfs_subvolume_ioctls_cannot_copy_carve_outs_or_write_outside_grants() {
    let sb = Sandbox::new();
    let Some(dir) = btrfs_dir(&sb) else { return };
    let proj = dir.join("proj");
    if !make_subvolume(&proj) {
        skip(&format!(
            "cannot create a btrfs subvolume in {}",
            dir.display()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let secret = token("btrfs-secret");
    std::fs::write(proj.join(".env"), &secret).unwrap();
    std::fs::write(proj.join("readme"), "hi").unwrap();
    let out = dir.join("out");
    let own = out.join("own");
    std::fs::create_dir_all(&out).unwrap();
    let p = |x: &std::path::Path| x.to_string_lossy().into_owned();
    let policy = sb.policy(&format!(
        "version: 1\nfilesystem:\n  read: [{:?}]\n  write: [{:?}]\n  deny: [{:?}]\n",
        p(&proj),
        p(&out),
        p(&proj.join(".env"))
    ));
    let script = format!(
        r#"{BTRFS_PY}
import sys
proj, out, own = {:?}, {:?}, {:?}
def attempt(what, f):
    try:
        f(); print(what, "MADE")
    except OSError as e:
        print(what, "refused", e.errno)
src = os.open(proj, os.O_RDONLY | os.O_DIRECTORY)
dst = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
attempt("snapshot-into-write-grant", lambda: snap(dst, src, b"copy%d" % os.getpid()))
for name in os.listdir(out):
    try:
        print("READ", open(os.path.join(out, name, ".env")).read())
    except OSError:
        pass
# A subvolume of its own making in its write grant (or a plain directory).
attempt("subvolume-in-write-grant", lambda: fcntl.ioctl(dst, 0x5000940e,
    bytearray(b"\0" * 8 + b"own" + b"\0" * 4085)))
if not os.path.isdir(own):
    os.mkdir(own)
open(os.path.join(own, "payload"), "w").write("planted")
o = os.open(own, os.O_RDONLY | os.O_DIRECTORY)
attempt("snapshot-into-read-grant", lambda: snap(src, o, b"planted"))
attempt("setflags-read-grant", lambda: setflags(src, 2))
"#,
        p(&proj),
        p(&out),
        p(&own)
    );
    for no_ns in [false, true] {
        let mut sb2 = Sandbox::new();
        if no_ns {
            sb2.set_env("CAPSULE_NO_NAMESPACES", "1");
        }
        let r = sb2.exec_json(&["--policy", &policy], &[&python(), "-c", &script]);
        let so = r.child_stdout();
        assert!(
            so.contains("snapshot-into-write-grant"),
            "the attack did not run (no_ns {no_ns}):{}",
            r.ctx()
        );
        assert!(
            !so.contains(&secret),
            "a snapshot copied the denied ./.env where the run reads it (no_ns {no_ns}):{}",
            r.ctx()
        );
        assert!(
            !so.lines()
                .any(|l| l.ends_with("MADE") && !l.starts_with("subvolume-in-write-grant")),
            "a btrfs subvolume ioctl went through (no_ns {no_ns}):{}",
            r.ctx()
        );
        assert!(
            !proj.join("planted").exists(),
            "the run planted a directory in its read grant (no_ns {no_ns}):{}",
            r.ctx()
        );
        let _ = std::fs::remove_dir_all(&own);
    }
    // Subvolumes go with rmdir once empty (Linux 4.18+); the flag first.
    let _ = std::process::Command::new(python())
        .args([
            "-c",
            &format!(
                "{BTRFS_PY}\nsetflags(os.open({:?}, os.O_RDONLY), 0)",
                p(&proj)
            ),
        ])
        .status();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory on a file system with fscrypt (ext4 `-O encrypt`, f2fs):
/// `CAPSULE_TEST_FSCRYPT_DIR`, else the sandbox's own directory; the test
/// then finds out by trying.
fn fscrypt_base(sb: &Sandbox) -> std::path::PathBuf {
    std::env::var_os("CAPSULE_TEST_FSCRYPT_DIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| sb.root.clone())
}

/// fscrypt's ioctls as a Python prelude: `add_key(fd)` (a fresh v2 key:
/// its identifier), `set_policy(dir_fd, ident)`, `get_ident(dir_fd)`,
/// `remove_key(fd, ident)`, `key_status(fd, ident)` (1 absent, 2 present).
const FSCRYPT_PY: &str = r#"
import os, fcntl, struct
def add_key(fd):
    arg = bytearray(struct.pack("II32sII32x", 2, 0, b"", 64, 0) + os.urandom(64))
    fcntl.ioctl(fd, 0xC0506617, arg)
    return bytes(arg[8:24])
def set_policy(dfd, ident):
    fcntl.ioctl(dfd, 0x800c6613, bytearray(struct.pack("BBBB4x16s", 2, 1, 4, 3, ident)))
def get_ident(dfd):
    buf = bytearray(struct.pack("Q", 24) + b"\0" * 24)
    fcntl.ioctl(dfd, 0xC0096616, buf)
    return bytes(buf[16:32])
def remove_key(fd, ident):
    fcntl.ioctl(fd, 0xC0406618, bytearray(struct.pack("II16s16x", 2, 0, ident) + b"\0" * 24))
def key_status(fd, ident):
    arg = bytearray(struct.pack("II16s16x", 2, 0, ident) + b"\0" * 88)
    fcntl.ioctl(fd, 0xC080661A, arg)
    return struct.unpack_from("I", arg, 64)[0]
"#;

/// fscrypt keeps its master keys in the file system's keyring, keyed by
/// the user who added them, and takes them with ioctls on any descriptor
/// of that file system: no path operation, no Landlock hook, and a
/// read-only mount does not stop them. A run that may only read an
/// encrypted directory asked its key identifier
/// (`FS_IOC_GET_ENCRYPTION_POLICY_EX`) and removed the user's key
/// (`FS_IOC_REMOVE_ENCRYPTION_KEY`, the same uid's claim): the user's
/// encrypted files were locked on the host ("Required key not
/// available") until the key is added again. `FS_IOC_ADD_ENCRYPTION_KEY`
/// left keys of the run's in the file system's keyring after it, charged
/// to the user's key quota. Skipped where no file system with fscrypt is
/// at hand.
#[test]
fn a_run_cannot_remove_the_users_fscrypt_key() {
    let sb = Sandbox::new();
    let base = fscrypt_base(&sb);
    let dir = match tempfile::Builder::new()
        .prefix("capsule-rt9-")
        .tempdir_in(&base)
    {
        Ok(d) => d,
        Err(e) => {
            skip(&format!("no directory in {}: {e}", base.display()));
            return;
        }
    };
    let enc = dir.path().join("enc");
    std::fs::create_dir(&enc).unwrap();
    let enc_s = enc.to_string_lossy().into_owned();
    let setup = format!(
        "{FSCRYPT_PY}\nd = os.open({enc_s:?}, os.O_RDONLY)\nident = add_key(d)\nset_policy(d, ident)\n\
         open(os.path.join({enc_s:?}, 'file'), 'w').write('plain')\nprint(ident.hex())\n"
    );
    let out = std::process::Command::new(python())
        .args(["-c", &setup])
        .output()
        .expect("run python");
    if !out.status.success() {
        skip(&format!("no fscrypt in {} (set CAPSULE_TEST_FSCRYPT_DIR to a directory on ext4 with -O encrypt): {}",
            base.display(),
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        ));
        return;
    }
    let ident = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let attack = format!(
        r#"{FSCRYPT_PY}
d = os.open({enc_s:?}, os.O_RDONLY)
ident = get_ident(d)
print("IDENT", ident.hex())
for what, f in [("remove", lambda: remove_key(d, ident)), ("add", lambda: add_key(d))]:
    try:
        f(); print(what, "MADE")
    except OSError as e:
        print(what, "refused", e.errno)
"#
    );
    let status = format!(
        "{FSCRYPT_PY}\nprint(key_status(os.open({enc_s:?}, os.O_RDONLY), bytes.fromhex({ident:?})))"
    );
    let host_status = || {
        let o = std::process::Command::new(python())
            .args(["-c", &status])
            .output()
            .expect("run python");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    for no_ns in [false, true] {
        let mut sb2 = Sandbox::new();
        if no_ns {
            sb2.set_env("CAPSULE_NO_NAMESPACES", "1");
        }
        let r = sb2.exec_json(&["--allow-read", &enc_s], &[&python(), "-c", &attack]);
        let so = r.child_stdout();
        assert!(
            so.contains("remove "),
            "the attack did not run (no_ns {no_ns}):{}",
            r.ctx()
        );
        assert!(
            !so.contains("MADE"),
            "the run changed the file system's fscrypt keyring (no_ns {no_ns}):{}",
            r.ctx()
        );
        assert_eq!(
            host_status(),
            "2",
            "the user's key is no longer present after the run (no_ns {no_ns}):{}",
            r.ctx()
        );
    }
    let cleanup = format!(
        "{FSCRYPT_PY}\nremove_key(os.open({enc_s:?}, os.O_RDONLY), bytes.fromhex({ident:?}))"
    );
    let _ = std::process::Command::new(python())
        .args(["-c", &cleanup])
        .status();
}

/// capsule left RLIMIT_RTPRIO and RLIMIT_NICE as the host gave them. A
/// desktop user in the `audio` or `pipewire` group gets `rtprio 95` (and
/// often a negative nice ceiling) from limits.d, so the run could make its
/// threads SCHED_FIFO 95 (no capability needed within RLIMIT_RTPRIO) or
/// raise its priority: a few spinning real-time threads hold every core
/// against the user's session, and against capsule's own supervisor,
/// for the run's whole timeout: far more than the CPU-share contention
/// the README leaves open. The attack: capsule started with RLIMIT_RTPRIO
/// 50 and RLIMIT_NICE 30; the run asks for SCHED_FIFO 10 and nice -5.
/// (Skipped where this user cannot raise them: raising a hard limit needs
/// CAP_SYS_RESOURCE; `sandbox::rlimits`'s unit test holds the fix there.)
#[test]
fn a_run_cannot_take_realtime_priority_the_hosts_limits_allow() {
    let sb = Sandbox::new();
    let script = r#"
import os
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10)); print("FIFO MADE")
except OSError as e:
    print("FIFO refused", e.errno)
try:
    os.nice(-5); print("NICE MADE", os.nice(0))
except OSError as e:
    print("NICE refused", e.errno)
"#;
    let c = sb.std_command(["exec", "--json", "--", &python(), "-c", script]);
    let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    // Raise both limits, then exec capsule (a user in the audio group
    // starts with them raised).
    let raise = "import os, resource, sys\n\
                 try:\n    \
                 resource.setrlimit(resource.RLIMIT_RTPRIO, (50, 50))\n    \
                 resource.setrlimit(resource.RLIMIT_NICE, (30, 30))\n\
                 except (OSError, ValueError):\n    \
                 print('NOLIMIT'); sys.exit(0)\n\
                 os.execv(sys.argv[1], sys.argv[1:])\n";
    let out = std::process::Command::new(python())
        .arg("-c")
        .arg(raise)
        .arg(c.get_program())
        .args(c.get_args())
        .env_clear()
        .envs(envs)
        .current_dir(&sb.root)
        .stdin(Stdio::null())
        .output()
        .expect("run capsule");
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    if so.trim() == "NOLIMIT" {
        skip("this user cannot raise RLIMIT_RTPRIO/RLIMIT_NICE to start capsule with them");
        return;
    }
    assert!(
        so.contains("FIFO ") && so.contains("NICE "),
        "the attack did not run: {so}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !so.contains("MADE"),
        "the run raised its scheduling priority with the host's limits: {so}"
    );
}

/// Free huge pages in the host's pool (`HugePages_Free`), 0 when none.
fn free_huge_pages() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `mmap(MAP_HUGETLB)` takes pages of the host's huge page pool, which
/// neither a memory cgroup (v1; v2 without `memory_hugetlb_accounting`)
/// nor RLIMIT_DATA counts: where `memory_mb` is held by a cgroup, a run
/// under `memory_mb: 64` held 100 MiB of huge pages, and on a host that
/// reserves a pool for its databases or DPDK the run can take the whole
/// pool from them. The attack needs a pool of at least 50 free 2 MiB pages
/// (`vm.nr_hugepages`); skipped without one.
#[test]
fn a_run_cannot_hold_huge_pages_past_memory_mb() {
    if free_huge_pages() < 50 {
        skip("fewer than 50 free huge pages (vm.nr_hugepages)");
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy("version: 1\nlimits:\n  memory_mb: 64\n");
    let script = r#"
import mmap
MAP_HUGETLB = 0x40000
try:
    m = mmap.mmap(-1, 100 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_HUGETLB)
    for i in range(0, len(m), 2 << 20):
        m[i] = 1
    print("HELD", flush=True)
    import time; time.sleep(1)
except OSError as e:
    print("refused", e.errno)
"#;
    let r = sb.exec_json(&["--policy", &policy], &[&python(), "-c", script]);
    assert!(
        !r.child_stdout().contains("HELD"),
        "the run held 100 MiB of huge pages under memory_mb: 64:{}",
        r.ctx()
    );
}

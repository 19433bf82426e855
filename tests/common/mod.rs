//! Shared helpers for the integration tests: run the real `capsule` binary,
//! one fresh sandbox (temp dir, fake HOME, private state dirs) per case.
//!
//! Other test files use this module read-only (`mod common;`). Locations can
//! be overridden so the suite runs from a copied location as another user:
//! - `CAPSULE_BIN`        the capsule binary (default: cargo's build of this tree)
//! - `CAPSULE_TEST_ROOT`  the source tree holding `policy/` and `tests/probes/`
//!   (default: `CARGO_MANIFEST_DIR`)
//! - `CAPSULE_TEST_PYTHON` the interpreter for probes (default `/usr/bin/python3`)
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

/// The exact marker a truncated stream ends with (contract section 4).
pub const MARKER: &str = "\n[...output truncated at byte limit]\n";

/// A PATH without per-user shims: capsule resolves commands on it.
pub const TEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// The probe program, compiled into the test binary so no file grant is
/// needed to run it (`python3 -c PROBE op args...`).
pub const PROBE_PY: &str = include_str!("../probes/probe.py");

/// The foreign-ABI C probe, compiled with gcc by the tests that need it.
pub const FOREIGN_ABI_C: &str = include_str!("../probes/foreign_abi.c");

/// Generous outer bound on any single capsule run, so a broken capsule fails
/// a test instead of hanging the suite.
pub const RUN_BOUND: Duration = Duration::from_secs(90);

/// The capsule binary under test.
pub fn capsule_bin() -> PathBuf {
    match std::env::var_os("CAPSULE_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_capsule")),
    }
}

/// Whether `capsule exec` runs go through `capsule serve`
/// (CAPSULE_TEST_VIA_SERVE=1; tests/probes/via_serve.py).
pub fn via_serve() -> bool {
    std::env::var("CAPSULE_TEST_VIA_SERVE").is_ok_and(|v| v == "1")
}

/// The source tree (for `policy/schema.json`, the starter policies, probes).
pub fn repo_root() -> PathBuf {
    match std::env::var_os("CAPSULE_TEST_ROOT") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    }
}

/// The Python interpreter used for probes: an absolute system path, never a
/// per-user shim (capsule grants the command's install prefix, not $HOME).
pub fn python() -> String {
    if let Ok(p) = std::env::var("CAPSULE_TEST_PYTHON") {
        if !p.is_empty() {
            return p;
        }
    }
    for p in ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"] {
        if Path::new(p).exists() {
            return p.to_string();
        }
    }
    "python3".to_string()
}

/// Whether a host control V (a probe op run outside capsule) failed with
/// ERRNO because this container refuses it already (its own seccomp profile
/// or capabilities): capsule's denial is still asserted, but which layer
/// gave it cannot be told apart here. Printed as a `CONTAINER:` line, which
/// scripts/test-containers lists. Never true outside a container.
pub fn container_refuses(v: &Value, errno: &str) -> bool {
    let refused = v["ok"] != Value::Bool(true) && v["errno"].as_str() == Some(errno);
    if refused && in_container() {
        let msg = format!(
            "host control `{}` already fails with {errno} in this container (its own seccomp profile or capabilities): capsule's denial is asserted, its own layer cannot be told apart here",
            v["op"].as_str().unwrap_or("?")
        );
        eprintln!("CONTAINER: {msg}");
        println!("CONTAINER: {msg}");
        return true;
    }
    false
}

mod skip;
#[allow(unused_imports)]
pub use skip::{skip, skip_part};

/// Whether we run as root (some kernel checks differ for root).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether a run gets the view of the host (its own mount, IPC, pid and
/// network namespaces) here: asked of capsule itself ([`exec_enforcement`]),
/// so the tests adapt to the path capsule takes in a container shape too.
/// On a bare host (not in a container) that path must be the one the host
/// allows ([`host_allows_view`]): a run that silently lost the view there
/// fails every test that asks, instead of turning them into the no-view
/// checks.
pub fn view_expected() -> bool {
    let given = !exec_enforcement()["view"].is_null();
    if !in_container() {
        assert_eq!(
            given,
            host_allows_view(),
            "capsule exec {} the view, where this host {} it (enforcement: {})",
            if given { "gives" } else { "does not give" },
            if host_allows_view() {
                "allows"
            } else {
                "does not allow"
            },
            exec_enforcement()
        );
    }
    given
}

/// Whether the run's view has PART (`private_proc`, `private_shm`, ...:
/// a boolean of `enforcement.view`), as capsule's exec reports it here.
pub fn view_gives(part: &str) -> bool {
    exec_enforcement()["view"][part].as_bool() == Some(true)
}

/// Whether the run's view holds the container's own /proc, bound read-only,
/// instead of a private one (a container runtime's masked /proc paths make
/// the kernel refuse a fresh procfs): processes outside the run are listed
/// and their cmdline, status and stat readable, their environ, memory and
/// descriptors not (capsule's `enforcement.limitations` says so).
pub fn proc_is_bound() -> bool {
    let bound = !exec_enforcement()["view"].is_null() && !view_gives("private_proc");
    if bound {
        assert!(
            view_gaps().contains("cmdline, status and stat are readable"),
            "a bound /proc that capsule does not describe: {}",
            exec_enforcement()
        );
    }
    bound
}

/// What capsule says a run here lacks: `enforcement.missing` and
/// `enforcement.limitations`, joined (the named reason a test checks for
/// when a part of the view is not given).
pub fn view_gaps() -> String {
    let e = exec_enforcement();
    format!("{} {}", e["missing"], e["limitations"])
}

/// The `enforcement` object of `capsule exec --json -- /bin/true` with the
/// default policy in this environment (CAPSULE_NO_NAMESPACES and the other
/// knobs of the suite apply): the path capsule takes here. One run per test
/// binary.
pub fn exec_enforcement() -> &'static Value {
    static E: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let sb = Sandbox::new();
        let run = sb.exec_json(&["--no-audit"], &["/bin/true"]);
        assert_eq!(
            run.code,
            Some(0),
            "capsule exec -- /bin/true: {}",
            run.ctx()
        );
        run.json()["enforcement"].clone()
    })
}

/// Whether these tests run inside a container (podman, Docker, Kubernetes),
/// where the view depends on the container's shape rather than the sysctls.
pub fn in_container() -> bool {
    std::env::var_os("CAPSULE_TEST_IN_CONTAINER").is_some_and(|v| v == "1")
        || std::env::var_os("container").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || Path::new("/run/.containerenv").exists()
        || Path::new("/.dockerenv").exists()
}

/// Whether a bare host allows the view: root, or unprivileged user
/// namespaces allowed by the sysctls, and `CAPSULE_NO_NAMESPACES` not set.
pub fn host_allows_view() -> bool {
    if std::env::var_os("CAPSULE_NO_NAMESPACES").is_some_and(|v| !v.is_empty() && v != "0") {
        return false;
    }
    if is_root() {
        return true;
    }
    let read = |p: &str| fs::read_to_string(p).map(|s| s.trim().to_string()).ok();
    read("/proc/sys/user/max_user_namespaces").as_deref() != Some("0")
        && read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() != Some("0")
        && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() != Some("1")
}

/// One `sleep` on the host, same uid as the test: a process the run must not
/// reach. Killed when the guard drops.
pub fn host_sleeper() -> (std::process::Child, KillOnDrop) {
    let child = StdCommand::new("/bin/sleep")
        .arg("120")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn sleep");
    let guard = KillOnDrop {
        pid: child.id() as i32,
        token: Some("sleep".into()),
    };
    (child, guard)
}

/// One fresh sandbox: a temp dir holding a fake HOME and private XDG dirs.
/// capsule runs with a clean environment pointing there, so tests never
/// touch the real home, config or audit log.
pub struct Sandbox {
    dir: TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
    /// Extra environment for capsule itself.
    pub env: Vec<(String, String)>,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("capsule-test-")
            .tempdir()
            .expect("create temp dir");
        Sandbox::at(dir)
    }

    /// A sandbox whose root lies outside the places the run's view makes
    /// its own (`/tmp`, `/dev/shm`): under `/var/tmp` (or
    /// `CAPSULE_TEST_VISIBLE_DIR`), which the view shows as the host's,
    /// read-only. A test about Landlock needs its fixtures there: beneath
    /// `/tmp` the view hides whatever is not granted, and the test would
    /// pass with Landlock gone.
    pub fn visible() -> Sandbox {
        let base = std::env::var_os("CAPSULE_TEST_VISIBLE_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp"));
        let dir = tempfile::Builder::new()
            .prefix("capsule-test-")
            .tempdir_in(&base)
            .unwrap_or_else(|e| panic!("create a temp dir in {}: {e}", base.display()));
        Sandbox::at(dir)
    }

    fn at(dir: TempDir) -> Sandbox {
        // Canonical path: grants and getcwd() compare against it.
        let root = fs::canonicalize(dir.path()).expect("canonicalize temp dir");
        let home = root.join("home");
        let state = root.join("state");
        let config = root.join("config");
        for d in [&home, &state, &config] {
            fs::create_dir_all(d).expect("mkdir");
        }
        Sandbox {
            dir,
            root,
            home,
            state,
            config,
            env: vec![],
        }
    }

    /// A path beneath the sandbox root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A path as a String (for argv).
    pub fn p(&self, rel: &str) -> String {
        self.path(rel).to_string_lossy().into_owned()
    }

    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path(rel);
        fs::create_dir_all(&p).expect("mkdir");
        p
    }

    pub fn write(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("mkdir parent");
        }
        fs::write(&p, contents).expect("write file");
        p
    }

    /// Write an executable file.
    pub fn write_exec(&self, rel: &str, contents: &str) -> PathBuf {
        let p = self.write(rel, contents);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// Write a policy file (YAML) and return its path.
    pub fn policy(&self, yaml: &str) -> String {
        self.policy_named("policy.yaml", yaml)
    }

    pub fn policy_named(&self, name: &str, text: &str) -> String {
        self.write(name, text).to_string_lossy().into_owned()
    }

    pub fn set_env(&mut self, k: &str, v: &str) {
        self.env.push((k.to_string(), v.to_string()));
    }

    /// The std Command for capsule with the sandbox's clean environment.
    pub fn std_command<I, S>(&self, args: I) -> StdCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let mut c = if via_serve() && args.first().is_some_and(|a| a == "exec") {
            // The same test through the warm parent (`capsule serve`).
            let mut c = StdCommand::new(python());
            c.arg(repo_root().join("tests/probes/via_serve.py"));
            c.arg(capsule_bin());
            c
        } else {
            StdCommand::new(capsule_bin())
        };
        c.args(args);
        c.env_clear();
        c.env("PATH", TEST_PATH);
        c.env("HOME", &self.home);
        c.env("XDG_STATE_HOME", &self.state);
        c.env("XDG_CONFIG_HOME", &self.config);
        c.env("LANG", "C.UTF-8");
        // Knobs of the suite itself pass through.
        for k in [
            "CAPSULE_NO_NAMESPACES",
            "CAPSULE_LANDLOCK_ABI_MAX",
            // The mutation check's layer switch (scripts/mutation; only a
            // `--features mutation` build reads it).
            "CAPSULE_MUTATE",
            "RUST_LOG",
            "RUST_BACKTRACE",
        ] {
            if let Ok(v) = std::env::var(k) {
                c.env(k, v);
            }
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.current_dir(&self.root);
        c
    }

    /// Run capsule with ARGS (stdin empty), bounded by [`RUN_BOUND`].
    pub fn run<S: AsRef<OsStr>>(&self, args: &[S]) -> Run {
        self.run_in(args, &self.root.clone(), b"")
    }

    /// Run capsule with ARGS from directory CWD, feeding STDIN.
    pub fn run_in<S: AsRef<OsStr>>(&self, args: &[S], cwd: &Path, stdin: &[u8]) -> Run {
        let mut c = assert_cmd::Command::from_std(self.std_command(args));
        c.current_dir(cwd);
        c.write_stdin(stdin.to_vec());
        c.timeout(RUN_BOUND);
        let out = c.output().expect("spawn capsule");
        Run::from_output(
            args.iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect(),
            out,
        )
    }

    /// `capsule exec --json OPTS -- CMD...`
    pub fn exec_json(&self, opts: &[&str], cmd: &[&str]) -> Run {
        let mut args: Vec<String> = vec!["exec".into(), "--json".into()];
        args.extend(opts.iter().map(|s| s.to_string()));
        args.push("--".into());
        args.extend(cmd.iter().map(|s| s.to_string()));
        self.run(&args)
    }

    /// Run the probe inside capsule: `capsule exec --json OPTS -- python3 -c PROBE ops...`.
    /// OPS is a list of operations, each `[name, args...]`.
    pub fn probe(&self, opts: &[&str], ops: &[&[&str]]) -> Run {
        let cmd = probe_argv(ops);
        let refs: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
        self.exec_json(opts, &refs)
    }

    /// The same probe run directly on the host, outside any sandbox: the
    /// positive control for kernel-level denials.
    pub fn host_probe(&self, ops: &[&[&str]]) -> Vec<Value> {
        let argv = probe_argv(ops);
        let out = StdCommand::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&self.root)
            .env_clear()
            .env("PATH", TEST_PATH)
            .env("HOME", &self.home)
            .stdin(Stdio::null())
            .output()
            .expect("run host probe");
        parse_probe_lines(&String::from_utf8_lossy(&out.stdout))
    }

    /// Compile the foreign-ABI C probe into DIR/foreign_abi. None (with a
    /// printed reason) when no C compiler is available.
    pub fn compile_foreign_abi(&self, dir_rel: &str) -> Option<PathBuf> {
        self.compile_c(dir_rel, "foreign_abi", FOREIGN_ABI_C)
    }

    /// Compile the C probe `source` (tests/probes/NAME.c) into DIR/NAME.
    /// None (with a printed reason) when no C compiler is available.
    pub fn compile_c(&self, dir_rel: &str, name: &str, source: &str) -> Option<PathBuf> {
        let dir = self.mkdir(dir_rel);
        let src = dir.join(format!("{name}.c"));
        fs::write(&src, source).expect("write C probe");
        let out = dir.join(name);
        for cc in ["gcc", "cc", "clang"] {
            let st = StdCommand::new(cc)
                .args(["-O0", "-o"])
                .arg(&out)
                .arg(&src)
                .env("PATH", TEST_PATH)
                .env("TMPDIR", &self.root)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .status();
            if matches!(st, Ok(s) if s.success()) {
                return Some(out);
            }
        }
        skip(&format!(
            "no working C compiler (gcc/cc/clang) to build tests/probes/{name}.c"
        ));
        None
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

/// argv of the probe: python3 -c SOURCE op args ; op args ...
pub fn probe_argv(ops: &[&[&str]]) -> Vec<String> {
    let mut v = vec![python(), "-c".to_string(), PROBE_PY.to_string()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            v.push(";".into());
        }
        v.extend(op.iter().map(|s| s.to_string()));
    }
    v
}

/// The probe's JSON lines from a blob of output.
pub fn parse_probe_lines(s: &str) -> Vec<Value> {
    s.lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("op").is_some())
        .collect()
}

/// One finished capsule run.
#[derive(Debug)]
pub struct Run {
    pub args: Vec<String>,
    /// capsule's own exit code (None when a signal ended capsule itself).
    pub code: Option<i32>,
    pub stdout: String,
    pub stdout_raw: Vec<u8>,
    pub stderr: String,
}

impl Run {
    fn from_output(args: Vec<String>, out: std::process::Output) -> Run {
        Run {
            args,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stdout_raw: out.stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A short description for assertion messages (argv without the probe source).
    pub fn ctx(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| {
                if a.len() > 200 {
                    format!("<{} bytes>", a.len())
                } else {
                    a.clone()
                }
            })
            .collect();
        let mut out = self.stdout.clone();
        if out.len() > 3000 {
            out.truncate(3000);
            out.push_str("...");
        }
        let mut err = self.stderr.clone();
        if err.len() > 3000 {
            err.truncate(3000);
            err.push_str("...");
        }
        format!(
            "\n  capsule {}\n  exit: {:?}\n  stdout: {}\n  stderr: {}",
            args.join(" "),
            self.code,
            out,
            err
        )
    }

    /// The single JSON result object capsule printed on stdout.
    pub fn json(&self) -> Value {
        let v: Value = serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!("capsule did not print ONE JSON object ({e}):{}", self.ctx())
        });
        assert!(v.is_object(), "result is not a JSON object:{}", self.ctx());
        v
    }

    /// The child's captured stdout from the JSON result.
    pub fn child_stdout(&self) -> String {
        self.json()["stdout"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn child_stderr(&self) -> String {
        self.json()["stderr"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The probe's result lines, from the JSON result's stdout.
    pub fn probes(&self) -> Vec<Value> {
        parse_probe_lines(&self.child_stdout())
    }

    /// The probe result for operation index I (panics with context).
    pub fn probe(&self, i: usize) -> Value {
        let p = self.probes();
        match p.get(i) {
            Some(v) => v.clone(),
            None => panic!(
                "probe result #{i} missing ({} results):{}",
                p.len(),
                self.ctx()
            ),
        }
    }

    /// Assert capsule exited with CODE.
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected capsule exit status:{}",
            self.ctx()
        );
        self
    }

    /// Assert the run started and the command exited 0 (the probe ran).
    pub fn assert_ran(&self) -> &Self {
        self.assert_code(0)
    }
}

/// Assert a probe op succeeded.
pub fn assert_ok(v: &Value, run: &Run) {
    assert_eq!(
        v["ok"],
        Value::Bool(true),
        "expected `{}` to SUCCEED (positive control), got {v}{}",
        v["op"],
        run.ctx()
    );
}

/// Assert a probe op failed with one of ERRNOS.
pub fn assert_errno(v: &Value, errnos: &[&str], run: &Run) {
    assert_eq!(
        v["ok"],
        Value::Bool(false),
        "expected `{}` to FAIL with {errnos:?}, but it succeeded: {v}{}",
        v["op"],
        run.ctx()
    );
    let got = v["errno"].as_str().unwrap_or("<none>");
    // Inside the run's view of the host (mount namespace) a denial can come
    // from the view before Landlock sees it: EROFS (outside write grants the
    // host is read-only) or ENOENT (a place of the host's /tmp that is not
    // granted is not in the view at all). Both are the sandbox's denial.
    // A container's read-only root refuses a write with EROFS before
    // Landlock is asked: the write is refused all the same.
    let view = (run.stdout.contains("\"view\":{") || in_container())
        .then_some(["EROFS", "ENOENT"])
        .filter(|_| errnos.contains(&"EACCES"));
    let ok = errnos.contains(&got) || view.is_some_and(|v| v.contains(&got));
    assert!(
        ok,
        "expected `{}` to fail with {errnos:?}, got {got}: {v}{}",
        v["op"],
        run.ctx()
    );
}

/// Assert a probe op was refused by Landlock: EACCES and nothing else. For
/// reads (and writes beneath a write grant, which the view binds writable)
/// of fixtures the view shows ([`Sandbox::visible`]): there no other layer
/// refuses them, so a run without Landlock fails this.
pub fn assert_landlock_refused(v: &Value, run: &Run) {
    assert_errno_exactly(v, &["EACCES"], run);
}

/// Assert a write outside every write grant was refused by the layer that
/// enforces it here: with the run's view its read-only host refuses first
/// (EROFS, before Landlock is asked), without it Landlock (EACCES). A
/// container's read-only root may answer EROFS in either case.
pub fn assert_write_refused(v: &Value, run: &Run) {
    let view = run.json()["enforcement"]["view"].is_object();
    if in_container() {
        assert_errno_exactly(v, &["EROFS", "EACCES"], run);
    } else if view {
        assert_errno_exactly(v, &["EROFS"], run);
    } else {
        assert_errno_exactly(v, &["EACCES"], run);
    }
}

/// Assert a probe op failed with one of ERRNOS, with no allowance for the
/// view's own refusals (unlike [`assert_errno`]).
pub fn assert_errno_exactly(v: &Value, errnos: &[&str], run: &Run) {
    assert_eq!(
        v["ok"],
        Value::Bool(false),
        "ESCAPE: expected `{}` to FAIL with {errnos:?}, but it succeeded: {v}{}",
        v["op"],
        run.ctx()
    );
    let got = v["errno"].as_str().unwrap_or("<none>");
    assert!(
        errnos.contains(&got),
        "expected `{}` to fail with {errnos:?} (the refusal of the layer under test), got {got}: {v}{}",
        v["op"],
        run.ctx()
    );
}

/// Assert a host-probe op (positive control outside capsule) did not fail
/// with ERRNO, i.e. the kernel itself would let the attempt through or
/// reject it for a different reason.
pub fn assert_host_not(v: &Value, errno: &str) {
    if container_refuses(v, errno) {
        return;
    }
    assert!(
        v["ok"] == Value::Bool(true) || v["errno"].as_str() != Some(errno),
        "host control: `{}` already fails with {errno} outside capsule: {v}",
        v["op"]
    );
}

/// Whether /proc/PID exists and is not a zombie, and (when TOKEN is given)
/// its command line contains TOKEN (guards against pid reuse).
pub fn pid_alive(pid: i32, token: Option<&str>) -> bool {
    let stat = match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(_) => return false,
    };
    // state is the field after the parenthesised comm.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().next());
    if matches!(state, Some("Z") | Some("X")) {
        return false;
    }
    match token {
        Some(t) => fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(t))
            .unwrap_or(false),
        None => true,
    }
}

/// The host pid of a process of the run that reported PID (its pid in the
/// run's own pid namespace, as a private /proc shows it) and carries TOKEN
/// in its argv. A pid that is already the host's is returned as it is.
pub fn host_pid(pid: i32, token: &str) -> i32 {
    if pid_alive(pid, Some(token)) {
        return pid;
    }
    let Ok(dir) = fs::read_dir("/proc") else {
        return pid;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .find(|&p| p != std::process::id() as i32 && pid_alive(p, Some(token)))
        .unwrap_or(pid)
}

/// Wait up to TIMEOUT for PID to be gone.
pub fn wait_gone(pid: i32, token: Option<&str>, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if !pid_alive(pid, token) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills PID with SIGKILL on drop if it is still the process we started
/// (recognised by TOKEN): tests clean up after a failed assertion.
pub struct KillOnDrop {
    pub pid: i32,
    pub token: Option<String>,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.pid > 0 && pid_alive(self.pid, self.token.as_deref()) {
            // SAFETY: kill(2) on a pid we verified is our own process.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }
}

/// A unique token for recognising processes and secrets of this test.
pub fn token(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("capsule-{tag}-{}-{nanos}", std::process::id())
}

/// Write BYTES to a file (helper for fixtures with exact contents).
pub fn write_bytes(path: &Path, bytes: &[u8]) {
    let mut f = fs::File::create(path).expect("create");
    f.write_all(bytes).expect("write");
}

/// The Landlock ABI capsule uses here (0 = none): the kernel's, lowered by
/// `CAPSULE_LANDLOCK_ABI_MAX` when the suite runs with one (capsule reads
/// the same variable).
pub fn landlock_abi() -> i64 {
    let kernel = kernel_landlock_abi();
    std::env::var("CAPSULE_LANDLOCK_ABI_MAX")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map_or(kernel, |max| kernel.min(max.max(0)))
}

/// The Landlock ABI the kernel offers (0 = none).
fn kernel_landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns a number.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        0
    } else {
        r
    }
}

// ------------------------------------------------------ container shapes
// Shared by the tests that run capsule behind a wrapper emulating a
// container's shape (tests/exec_fallbacks.rs, tests/container_guards.rs).

/// Whether the suite runs with CAPSULE_NO_NAMESPACES set (the no-namespace pass).
pub fn no_namespaces_env() -> bool {
    std::env::var_os("CAPSULE_NO_NAMESPACES").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The first of NAMES that exists.
pub fn first_tool(names: &[&str]) -> Option<PathBuf> {
    names.iter().map(PathBuf::from).find(|p| p.exists())
}

/// `capsh --drop=CAPS` before capsule: root without those capabilities, as a
/// container's root with the runtime's default capabilities (None, said as a
/// skip, without capsh).
pub fn without_caps(caps: &str) -> Option<Vec<std::ffi::OsString>> {
    let Some(capsh) = first_tool(&["/usr/sbin/capsh", "/sbin/capsh", "/usr/bin/capsh"]) else {
        skip("no capsh to drop CAP_SYS_ADMIN");
        return None;
    };
    Some(vec![
        capsh.into(),
        format!("--drop={caps}").into(),
        "--".into(),
        "-c".into(),
        "exec \"$0\" \"$@\"".into(),
    ])
}

/// `unshare -Urm` with /dev/null bound over /proc/timer_list (a masked
/// /proc path of podman's and runc's list), then root without CAPS
/// (`without_caps`): capsule as a container's root below a masked /proc.
pub fn masked_proc_root(caps: &str) -> Option<Vec<std::ffi::OsString>> {
    let mut v: Vec<std::ffi::OsString> = vec![
        "/usr/bin/unshare".into(),
        "-Urm".into(),
        "--propagation".into(),
        "private".into(),
        "/bin/sh".into(),
        "-c".into(),
        "mount --bind /dev/null /proc/timer_list && exec \"$0\" \"$@\"".into(),
    ];
    v.extend(without_caps(caps)?);
    Some(v)
}

/// Run capsule ARGS behind the PREFIX commands, with the sandbox's environment.
pub fn wrapped(sb: &Sandbox, prefix: &[std::ffi::OsString], args: &[&str]) -> Run {
    let c = sb.std_command(args);
    let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
        .collect();
    let out = assert_cmd::Command::new(&prefix[0])
        .args(&prefix[1..])
        .arg(capsule_bin())
        .args(args)
        .env_clear()
        .envs(envs)
        .current_dir(&sb.root)
        .timeout(RUN_BOUND)
        .output()
        .expect("run capsule behind the wrapper");
    Run {
        args: prefix
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .chain(args.iter().map(|a| a.to_string()))
            .collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stdout_raw: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A scratch directory on the host's /dev/shm (a tmpfs) with at least
/// `mib` MiB free; None (the test skipped, saying why) where there is none:
/// a smaller tmpfs bounds the run before capsule has to.
pub fn shm_scratch(prefix: &str, mib: u64) -> Option<tempfile::TempDir> {
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
            "/dev/shm has {} MiB free, less than the {mib} MiB this test needs (its own size bounds the run)",
            room >> 20
        ));
        return None;
    }
    Some(dir)
}

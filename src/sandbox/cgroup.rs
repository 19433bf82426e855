//! A cgroup for one run, for `memory_mb` and `max_processes`.
//!
//! capsule makes a cgroup only where one is delegated to it, and only ever
//! moves its own child and itself; it never moves any other process and
//! never changes a cgroup it did not create or was not delegated (no
//! controller enabled on a parent it does not own, no mode switched). In
//! order:
//!
//! 1. cgroup v2, the controllers already enabled in capsule's own cgroup's
//!    `cgroup.subtree_control` (e.g. root in a root cgroup systemd set up):
//!    the run's cgroup is made beneath it.
//! 2. cgroup v2, capsule's own cgroup delegated to it: marked by systemd
//!    (`trusted.delegate` or `user.delegate` = 1, set by systemd 251+ on a
//!    `Delegate=yes` unit) or, off systemd and for a user other than root,
//!    chowned to it (the kernel's delegation: the directory, `cgroup.procs`,
//!    `cgroup.threads` and `cgroup.subtree_control`); owned by capsule's
//!    user, and capsule the only process in it. The no-internal-process
//!    rule forbids controllers there while capsule sits in it, so capsule
//!    moves itself into a leaf (`capsule-<run>.supervisor`), enables
//!    `memory`/`pids` (those offered in its `cgroup.controllers`) and makes
//!    the run's cgroup beside the leaf. `remove` undoes all of it:
//!    controllers off, capsule back, leaf gone, so the delegated cgroup is
//!    as capsule found it (a capsule SIGKILLed mid-run leaves its leaf and
//!    the run's cgroup behind; systemd removes them with the unit).
//! 3. cgroup v1 `memory`/`pids` hierarchies (hybrid hosts).
//! 4. Root on a systemd host whose `max_processes` nothing else holds
//!    (RLIMIT_NPROC does not bind uid 0): capsule asks systemd for a
//!    `Delegate=yes` scope in its own slice (so the slice's limits still
//!    apply) with `systemd-run --scope`, whose command is a helper (`cat
//!    /proc/self/cgroup -`) that prints the scope's cgroup and waits. capsule
//!    moves itself there, lets the helper go, and goes on as in 2. capsule
//!    never hands itself to systemd-run (no re-exec): when systemd refuses
//!    or cannot be reached, nothing has changed and the run is decided as
//!    without it. `remove` moves capsule back; systemd removes the empty
//!    scope (`--collect`). `CAPSULE_NO_SYSTEMD_SCOPE=1` turns this off.
//!
//! Where none works the limits fall back to rlimits (see `sandbox::rlimits`),
//! and the result says which mechanism is in force.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::rlimits::Mechanism;

/// `CAPSULE_NO_CGROUPS=1`: capsule makes no cgroup and asks systemd for none,
/// as on a host (a container) whose cgroupfs is read-only.
pub const NO_CGROUPS_ENV: &str = "CAPSULE_NO_CGROUPS";

/// Where the v2 cgroup holding a run's limits comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The controllers were already enabled beneath capsule's own cgroup.
    Enabled,
    /// capsule's own cgroup is delegated to it (systemd `Delegate=yes`).
    Delegated,
    /// A `Delegate=yes` systemd scope capsule asked for.
    SystemdScope,
}

impl Source {
    pub fn describe(self) -> &'static str {
        match self {
            Source::Enabled => "beneath capsule's cgroup",
            Source::Delegated => "in capsule's delegated cgroup",
            Source::SystemdScope => "in a delegated systemd scope capsule asks for",
        }
    }
}

/// The cgroup(s) made for one run.
#[derive(Debug, Default)]
pub struct RunCgroup {
    dirs: Vec<PathBuf>,
    pub memory: Option<Mechanism>,
    pub procs: Option<Mechanism>,
    memory_dir: Option<(PathBuf, bool)>,
    /// Where the v2 cgroup comes from, when there is one.
    pub source: Option<Source>,
    /// Why systemd gave no delegated scope (on a systemd host, as root).
    pub systemd_note: Option<String>,
    /// What capsule changed in a cgroup delegated to it.
    entered: Option<Entered>,
    /// The cgroup capsule left for a systemd scope: it goes back there.
    left: Option<PathBuf>,
    /// The v1 hierarchies' run cgroups (a subset of `dirs`).
    v1_dirs: Vec<PathBuf>,
    /// Their `tasks` files, open for the run's first stage to join itself
    /// ([`RunCgroup::self_join_files`]).
    self_join: Vec<(PathBuf, std::os::fd::OwnedFd)>,
    /// The run's v2 cgroup directory, open for clone3's `CLONE_INTO_CGROUP`
    /// ([`RunCgroup::v2_dir_fd`]).
    v2_dir: Option<std::os::fd::OwnedFd>,
}

/// capsule's own moves in a delegated cgroup, undone by [`Entered::undo`].
#[derive(Debug)]
struct Entered {
    own: PathBuf,
    leaf: PathBuf,
    enabled: Vec<String>,
}

/// The v2 path and the v1 path of each controller, from /proc/self/cgroup.
pub(crate) fn parse_proc_cgroup(text: &str) -> (Option<String>, Vec<(String, String)>) {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if ctrls.is_empty() {
            v2 = Some(path.to_string());
        } else {
            for c in ctrls.split(',') {
                v1.push((c.to_string(), path.to_string()));
            }
        }
    }
    (v2, v1)
}

/// Where this process sits: the v2 path and the v1 path of each controller.
fn own_cgroups() -> (Option<String>, Vec<(String, String)>) {
    parse_proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default())
}

/// The cgroup2 mount point, if any.
pub fn v2_mount() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.join("cgroup.controllers").exists())
}

fn join_rel(mount: &Path, rel: &str) -> PathBuf {
    mount.join(rel.trim_start_matches('/'))
}

fn has_word(file: &Path, word: &str) -> bool {
    std::fs::read_to_string(file)
        .map(|s| s.split_whitespace().any(|w| w == word))
        .unwrap_or(false)
}

/// Whether systemd marked `dir` as a delegated cgroup: `trusted.delegate`
/// (system manager, readable by root only) or `user.delegate` = "1".
pub(crate) fn delegate_marked(dir: &Path) -> bool {
    [c"trusted.delegate", c"user.delegate"]
        .into_iter()
        .any(|n| crate::sys::getxattr(dir, n).as_deref() == Some(b"1"))
}

/// Whether `dir` is delegated to the non-root user `euid` in the kernel's
/// sense (cgroup-v2.rst, "Delegation"): the directory and its
/// `cgroup.procs`, `cgroup.threads` and `cgroup.subtree_control` are that
/// user's. Never true for root, which owns every cgroup it did not delegate.
/// Not used on a systemd host: there a user's manager owns cgroups of units
/// that are not delegated (systemd's delegation contract), and only systemd's
/// mark says which are.
pub(crate) fn chowned_to(dir: &Path, euid: u32) -> bool {
    euid != 0
        && [
            "",
            "cgroup.procs",
            "cgroup.threads",
            "cgroup.subtree_control",
        ]
        .iter()
        .all(|f| std::fs::metadata(dir.join(f)).is_ok_and(|m| m.uid() == euid))
}

/// Whether capsule may take `dir`, its own v2 cgroup, as delegated to it,
/// and which of `want` it would enable there. `marked`: systemd marked it
/// delegated, or it is a `Delegate=yes` scope capsule asked for. Refused
/// (with the reason) unless it is owned by `euid`, a domain cgroup, `pid`
/// is the only process in it, and it offers one of `want`.
pub(crate) fn delegation(
    dir: &Path,
    marked: bool,
    pid: u32,
    euid: u32,
    want: &[&str],
) -> Result<Vec<String>, String> {
    if !marked {
        return Err("not delegated (no trusted.delegate or user.delegate mark)".into());
    }
    let owner = std::fs::metadata(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .uid();
    if owner != euid {
        return Err(format!(
            "delegated to uid {owner}, not to capsule's uid {euid}"
        ));
    }
    let ty = std::fs::read_to_string(dir.join("cgroup.type"))
        .map_err(|_| "the root cgroup (no cgroup.type) is never delegated".to_string())?;
    if ty.trim() != "domain" {
        return Err(format!(
            "a {} cgroup (capsule never switches modes)",
            ty.trim()
        ));
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let procs: Vec<&str> = procs.split_whitespace().collect();
    if procs != [pid.to_string().as_str()] {
        return Err(format!(
            "other processes share it ({} in cgroup.procs): enabling controllers would need moving them",
            procs.len()
        ));
    }
    let offered: Vec<String> = want
        .iter()
        .filter(|c| has_word(&dir.join("cgroup.controllers"), c))
        .map(|c| c.to_string())
        .collect();
    if offered.is_empty() {
        return Err(format!("no {} controller offered to it", want.join("/")));
    }
    Ok(offered)
}

fn write_procs(dir: &Path, pid: u32) -> Result<(), String> {
    std::fs::write(dir.join("cgroup.procs"), pid.to_string())
        .map_err(|e| format!("moving capsule into {}: {e}", dir.display()))
}

fn rmdir_retry(d: &Path) {
    for _ in 0..50 {
        if std::fs::remove_dir(d).is_ok() || !d.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl Entered {
    /// Move capsule into the leaf `leaf` of `own` and enable `ctrls` there.
    fn enter(own: &Path, leaf: &str, ctrls: Vec<String>) -> Result<Entered, String> {
        let pid = std::process::id();
        let leaf = own.join(leaf);
        std::fs::create_dir(&leaf).map_err(|e| format!("creating {}: {e}", leaf.display()))?;
        if let Err(e) = write_procs(&leaf, pid) {
            rmdir_retry(&leaf);
            return Err(e);
        }
        let plus: Vec<String> = ctrls.iter().map(|c| format!("+{c}")).collect();
        if let Err(e) = std::fs::write(own.join("cgroup.subtree_control"), plus.join(" ")) {
            let _ = write_procs(own, pid);
            rmdir_retry(&leaf);
            return Err(format!(
                "enabling {} in {}: {e}",
                plus.join(" "),
                own.join("cgroup.subtree_control").display()
            ));
        }
        Ok(Entered {
            own: own.to_path_buf(),
            leaf,
            enabled: ctrls,
        })
    }

    /// Controllers off, capsule back in its cgroup, the leaf gone (the
    /// run's cgroup must be gone already). Stops at the first step that
    /// fails: capsule then stays in the leaf, which systemd removes with
    /// the unit.
    fn undo(self) {
        let minus: Vec<String> = self.enabled.iter().map(|c| format!("-{c}")).collect();
        let sc = self.own.join("cgroup.subtree_control");
        if let Err(e) = std::fs::write(&sc, minus.join(" ")) {
            tracing::warn!(
                "could not disable {} in {}: {e}",
                minus.join(" "),
                sc.display()
            );
            return;
        }
        if let Err(e) = write_procs(&self.own, std::process::id()) {
            tracing::warn!("{e}");
            return;
        }
        rmdir_retry(&self.leaf);
    }
}

/// systemd's place of a v2 cgroup path: the leading `*.slice` components
/// are the system manager's slices, the next one is its unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    /// `/user.slice/user-0.slice`
    pub slice_path: String,
    /// `user-0.slice`
    pub slice: String,
    /// `session-3.scope`
    pub unit: String,
}

pub(crate) fn systemd_placement(rel: &str) -> Option<Placement> {
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let n = parts.iter().take_while(|p| p.ends_with(".slice")).count();
    let unit = parts.get(n)?;
    if n == 0 || !(unit.ends_with(".scope") || unit.ends_with(".service")) {
        return None;
    }
    Some(Placement {
        slice_path: format!("/{}", parts[..n].join("/")),
        slice: parts[n - 1].to_string(),
        unit: unit.to_string(),
    })
}

/// Whether systemd is the init (sd_booted(3): `/run/systemd/system` exists).
fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// What decides whether capsule may ask systemd for a scope.
#[derive(Debug, Clone)]
pub(crate) struct SystemdHost {
    /// systemd is the init (`/run/systemd/system` exists).
    pub booted: bool,
    pub systemd_run: Option<PathBuf>,
    pub cat: Option<PathBuf>,
    /// `CAPSULE_NO_SYSTEMD_SCOPE` is set.
    pub disabled: bool,
    /// The v2 root offers the pids controller (a pure cgroup v2 host).
    pub v2_pids: bool,
}

/// `name` in the directories of $PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

impl SystemdHost {
    fn probe(mount: &Path) -> SystemdHost {
        SystemdHost {
            booted: systemd_booted(),
            systemd_run: on_path("systemd-run"),
            cat: on_path("cat"),
            disabled: std::env::var_os("CAPSULE_NO_SYSTEMD_SCOPE").is_some_and(|v| v != "0"),
            v2_pids: has_word(&mount.join("cgroup.controllers"), "pids"),
        }
    }
}

/// One request for a delegated scope.
#[derive(Debug)]
pub(crate) struct ScopeRequest {
    pub argv: Vec<String>,
    pub unit: String,
    /// The scope's cgroup, as /proc/self/cgroup will name it.
    pub expected: String,
}

/// The `systemd-run` command that gives capsule a delegated scope beside
/// the unit it runs in (`rel`), or why there is none (`None`: not a
/// systemd host, nothing to say). `seq` keeps the unit names of one run
/// apart.
pub(crate) fn scope_request(
    rel: &str,
    host: &SystemdHost,
    run_id: &str,
    seq: u32,
) -> Result<ScopeRequest, Option<String>> {
    if !host.booted {
        return Err(None);
    }
    if host.disabled {
        return Err(Some("not asked (CAPSULE_NO_SYSTEMD_SCOPE is set)".into()));
    }
    let Some(run) = &host.systemd_run else {
        return Err(Some("systemd-run is not on PATH".into()));
    };
    let Some(cat) = &host.cat else {
        return Err(Some("cat is not on PATH".into()));
    };
    if !host.v2_pids {
        return Err(Some(
            "the cgroup v2 hierarchy has no pids controller".into(),
        ));
    }
    let Some(place) = systemd_placement(rel) else {
        return Err(Some(format!(
            "capsule's cgroup {rel} is not in a systemd slice"
        )));
    };
    let unit = format!("capsule-{}-{seq}.scope", run_id.to_ascii_lowercase());
    let argv = [
        run.to_string_lossy().as_ref(),
        "--scope",
        "--quiet",
        "--collect",
        "--no-ask-password",
        "--property=Delegate=yes",
        &format!("--slice={}", place.slice),
        &format!("--unit={unit}"),
        &format!("--description=capsule run {run_id}"),
        "--",
        cat.to_string_lossy().as_ref(),
        "/proc/self/cgroup",
        "-",
    ]
    .map(String::from)
    .to_vec();
    Ok(ScopeRequest {
        expected: format!("{}/{unit}", place.slice_path),
        argv,
        unit,
    })
}

/// The v2 cgroup the helper printed: `None` while its line is incomplete;
/// an error when it is not the scope asked for.
pub(crate) fn scope_from_output(out: &str, expected: &str) -> Option<Result<String, String>> {
    let line = out
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .find_map(|l| l.trim_end().strip_prefix("0::"))?;
    Some(if line == expected {
        Ok(line.to_string())
    } else {
        Err(format!(
            "systemd-run's command ran in {line}, not in the scope asked for ({expected})"
        ))
    })
}

/// The helper systemd-run became: it waits for its stdin to close.
#[derive(Debug)]
pub(crate) struct Helper(std::process::Child);

impl Helper {
    /// Let the helper go and reap it.
    pub(crate) fn finish(mut self) -> Option<std::process::ExitStatus> {
        drop(self.0.stdin.take());
        self.0.wait().ok()
    }

    fn kill(mut self) -> String {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let mut err = String::new();
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        err
    }
}

/// Run `req` and read the scope's cgroup from the helper, within `timeout`.
/// The helper stays until [`Helper::finish`]: the scope must not be empty
/// (and so removed by systemd) before capsule moved into it.
pub(crate) fn ask_systemd(
    req: &ScopeRequest,
    timeout: Duration,
) -> Result<(String, Helper), String> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    use std::process::{Command, Stdio};
    let (prog, args) = req.argv.split_first().ok_or("no command")?;
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {prog}: {e}"))?;
    let mut helper = Helper(child);
    let mut out = Vec::new();
    let deadline = Instant::now() + timeout;
    let why = loop {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break format!(
                "no answer from systemd-run within {} s",
                timeout.as_secs_f32()
            );
        };
        let Some(stdout) = helper.0.stdout.as_mut() else {
            break "no stdout".to_string();
        };
        let ms = PollTimeout::try_from(left.as_millis().clamp(1, 60_000) as u32)
            .unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => break format!("poll: {e}"),
            Ok(_) => {}
        }
        let mut buf = [0u8; 4096];
        match stdout.read(&mut buf) {
            Ok(0) => break String::new(),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break format!("reading systemd-run's output: {e}"),
        }
        if out.len() > 64 * 1024 {
            break "too much output from systemd-run".to_string();
        }
        match scope_from_output(&String::from_utf8_lossy(&out), &req.expected) {
            None => continue,
            Some(Ok(rel)) => return Ok((rel, helper)),
            Some(Err(e)) => break e,
        }
    };
    let err = helper.kill();
    let err = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    Err(match (why.is_empty(), err.is_empty()) {
        (true, true) => "systemd-run ended without running its command".to_string(),
        (true, false) => format!("systemd-run: {err}"),
        (false, true) => why,
        (false, false) => format!("{why} (systemd-run: {err})"),
    })
}

/// What `doctor` reports about cgroups on this host.
pub fn describe() -> String {
    let (v2, v1) = own_cgroups();
    let mut parts = Vec::new();
    if let (Some(m), Some(rel)) = (v2_mount(), v2.as_deref()) {
        let dir = join_rel(&m, rel);
        let ctrls = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        parts.push(format!(
            "cgroup v2 at {} (delegated controllers: {}{})",
            dir.display(),
            if ctrls.trim().is_empty() {
                "none"
            } else {
                ctrls.trim()
            },
            if delegate_marked(&dir) {
                "; a Delegate=yes cgroup"
            } else {
                ""
            }
        ));
        if nix::unistd::geteuid().is_root()
            && scope_request(rel, &SystemdHost::probe(&m), "X", 0).is_ok()
        {
            parts.push(
                "systemd: as root, capsule asks for a Delegate=yes scope when max_processes needs a cgroup"
                    .into(),
            );
        }
    }
    for c in ["memory", "pids"] {
        if let Some((_, rel)) = v1.iter().find(|(n, _)| n == c) {
            parts.push(format!(
                "cgroup v1 {c} at {}",
                join_rel(&Path::new("/sys/fs/cgroup").join(c), rel).display()
            ));
        }
    }
    if parts.is_empty() {
        "no cgroup available".into()
    } else {
        parts.join("; ")
    }
}

/// Keeps the systemd unit names of one process apart (a run prepared twice).
static SCOPE_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

impl RunCgroup {
    /// Make the run's cgroup(s) for the limits asked; a limit that no cgroup
    /// can hold is left `None` for the caller to handle. `ask_systemd`: ask
    /// systemd for a delegated scope when nothing else holds `procs` (root).
    pub fn create(
        run_id: &str,
        memory: Option<u64>,
        procs: Option<u64>,
        ask_systemd: bool,
    ) -> RunCgroup {
        let mut cg = RunCgroup::default();
        if memory.is_none() && procs.is_none() {
            return cg;
        }
        // As in a container whose cgroupfs is read-only (tests, and the
        // kernel matrix, emulate that host with it).
        if std::env::var_os(NO_CGROUPS_ENV).is_some_and(|v| v != "0") {
            cg.systemd_note = Some(format!("not asked ({NO_CGROUPS_ENV} is set)"));
            return cg;
        }
        let (v2, v1) = own_cgroups();
        let name = format!("capsule-{run_id}");
        let want: Vec<&str> = [("memory", memory.is_some()), ("pids", procs.is_some())]
            .into_iter()
            .filter(|(_, w)| *w)
            .map(|(c, _)| c)
            .collect();
        let v2 = v2_mount().zip(v2);
        if let Some((mount, rel)) = &v2 {
            let own = join_rel(mount, rel);
            let sc = own.join("cgroup.subtree_control");
            if want.iter().any(|c| has_word(&sc, c)) {
                // 1. Already enabled beneath capsule's cgroup.
                cg.v2_make(&own, &name, memory, procs, Source::Enabled);
            } else if delegate_marked(&own)
                || (!systemd_booted() && chowned_to(&own, nix::unistd::geteuid().as_raw()))
            {
                // 2. capsule's own cgroup is delegated to it.
                let source = Source::Delegated;
                if let Err(e) =
                    cg.take_delegated(&own, true, &want, run_id, &name, memory, procs, source)
                {
                    tracing::info!("not using the delegated cgroup {}: {e}", own.display());
                }
            }
        }
        // 3. cgroup v1 hierarchies for what v2 could not take.
        let mut v1_make = |ctrl: &str, file: &str, value: u64| -> bool {
            let Some((_, rel)) = v1.iter().find(|(n, _)| n == ctrl) else {
                return false;
            };
            let dir = join_rel(&Path::new("/sys/fs/cgroup").join(ctrl), rel).join(&name);
            if std::fs::create_dir(&dir).is_err() {
                return false;
            }
            cg.dirs.push(dir.clone());
            cg.v1_dirs.push(dir.clone());
            if std::fs::write(dir.join(file), value.to_string()).is_ok() {
                if ctrl == "memory" {
                    let _ =
                        std::fs::write(dir.join("memory.memsw.limit_in_bytes"), value.to_string());
                    cg.memory_dir = Some((dir, false));
                }
                true
            } else {
                false
            }
        };
        if let (Some(m), None) = (memory, cg.memory) {
            if v1_make("memory", "memory.limit_in_bytes", m) {
                cg.memory = Some(Mechanism::CgroupV1);
            }
        }
        if let (Some(p), None) = (procs, cg.procs) {
            if v1_make("pids", "pids.max", p) {
                cg.procs = Some(Mechanism::CgroupV1);
            }
        }
        // 4. A delegated systemd scope, for what nothing else holds.
        if let (true, Some(_), None, Some((mount, rel))) = (ask_systemd, procs, cg.procs, &v2) {
            if cg.source.is_some() {
                // A process is in one v2 cgroup: the run's own cannot be in
                // two places (memory here, pids in a scope).
                cg.systemd_note = Some(
                    "not asked: capsule's cgroup holds memory_mb but offers no pids controller"
                        .into(),
                );
            } else if let Err(e) = cg.systemd_scope(
                mount,
                rel,
                run_id,
                &name,
                memory.filter(|_| cg.memory.is_none()),
                procs,
            ) {
                tracing::info!("no delegated systemd scope: {e}");
                cg.systemd_note = Some(e);
            }
        }
        cg.open_v2_dir();
        cg
    }

    /// The run's v2 cgroup `parent/name`, with the limits of the
    /// controllers enabled in `parent`'s `cgroup.subtree_control`.
    fn v2_make(
        &mut self,
        parent: &Path,
        name: &str,
        memory: Option<u64>,
        procs: Option<u64>,
        source: Source,
    ) {
        let sc = parent.join("cgroup.subtree_control");
        let dir = parent.join(name);
        if std::fs::create_dir(&dir).is_err() {
            return;
        }
        self.dirs.push(dir.clone());
        if let Some(m) = memory {
            if has_word(&sc, "memory")
                && std::fs::write(dir.join("memory.max"), m.to_string()).is_ok()
            {
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                self.memory = Some(Mechanism::CgroupV2);
                self.memory_dir = Some((dir.clone(), true));
            }
        }
        if let Some(p) = procs {
            if has_word(&sc, "pids") && std::fs::write(dir.join("pids.max"), p.to_string()).is_ok()
            {
                self.procs = Some(Mechanism::CgroupV2);
            }
        }
        if self.memory == Some(Mechanism::CgroupV2) || self.procs == Some(Mechanism::CgroupV2) {
            self.source = Some(source);
        }
    }

    /// 2: take `own` as delegated (capsule into a leaf, controllers on) and
    /// make the run's cgroup there; everything undone when that fails.
    #[allow(clippy::too_many_arguments)]
    fn take_delegated(
        &mut self,
        own: &Path,
        marked: bool,
        want: &[&str],
        run_id: &str,
        name: &str,
        memory: Option<u64>,
        procs: Option<u64>,
        source: Source,
    ) -> Result<(), String> {
        let euid = nix::unistd::geteuid().as_raw();
        let ctrls = delegation(own, marked, std::process::id(), euid, want)?;
        let entered = Entered::enter(own, &format!("capsule-{run_id}.supervisor"), ctrls)?;
        let before = self.dirs.len();
        self.v2_make(own, name, memory, procs, source);
        if self.dirs.len() == before {
            entered.undo();
            return Err(format!("creating {}", own.join(name).display()));
        }
        tracing::info!(
            "run cgroup {} ({})",
            own.join(name).display(),
            source.describe()
        );
        self.entered = Some(entered);
        Ok(())
    }

    /// 4: ask systemd for a delegated scope in capsule's slice, move there,
    /// and take it as in 2. On failure capsule is back where it was.
    fn systemd_scope(
        &mut self,
        mount: &Path,
        rel: &str,
        run_id: &str,
        name: &str,
        memory: Option<u64>,
        procs: Option<u64>,
    ) -> Result<(), String> {
        let seq = SCOPE_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let req = match scope_request(rel, &SystemdHost::probe(mount), run_id, seq) {
            Ok(r) => r,
            Err(None) => return Ok(()),
            Err(Some(why)) => return Err(why),
        };
        tracing::debug!(
            "asking systemd for a delegated scope: {}",
            req.argv.join(" ")
        );
        let (scope_rel, helper) = ask_systemd(&req, Duration::from_secs(30))?;
        let scope = join_rel(mount, &scope_rel);
        let own = join_rel(mount, rel);
        let moved = write_procs(&scope, std::process::id());
        // The scope holds capsule now (or the move failed): the helper may go.
        let _ = helper.finish();
        moved?;
        self.left = Some(own.clone());
        let want: Vec<&str> = [("memory", memory.is_some()), ("pids", procs.is_some())]
            .into_iter()
            .filter(|(_, w)| *w)
            .map(|(c, _)| c)
            .collect();
        // capsule asked for Delegate=yes: no mark needed (systemd < 251 sets none).
        let marked = true;
        if let Err(e) = self.take_delegated(
            &scope,
            marked,
            &want,
            run_id,
            name,
            memory,
            procs,
            Source::SystemdScope,
        ) {
            if let Some(back) = self.left.take() {
                let _ = write_procs(&back, std::process::id());
            }
            return Err(format!("the scope {} ({}): {e}", req.unit, scope.display()));
        }
        Ok(())
    }

    /// The `tasks` files of the run's v1 cgroups, open (close-on-exec) for
    /// the run's first stage to write `0` to: it moves itself, a single
    /// thread, before it creates anything. The kernel moves a lone thread
    /// that names itself without its global cgroup-migration lock; the
    /// parent's write of the child's pid to `cgroup.procs` takes that lock
    /// for writing and, on a host not moving processes all the time, waits
    /// for a full RCU grace period (~6–11 ms here) on every run (README,
    /// "Performance"). The kernel checks the opener's credentials (capsule's),
    /// as for the parent's write. A file that does not open is left to
    /// [`RunCgroup::join`]. Repeated calls (a run's next path) return the
    /// same descriptors.
    pub fn self_join_files(&mut self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        if self.self_join.is_empty() {
            for d in &self.v1_dirs {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_CLOEXEC)
                    .open(d.join("tasks"))
                {
                    Ok(f) => self.self_join.push((d.clone(), f.into())),
                    Err(e) => tracing::info!("{}/tasks: {e}; capsule moves the run", d.display()),
                }
            }
        }
        self.self_join.iter().map(|(_, f)| f.as_raw_fd()).collect()
    }

    /// Whether some cgroup of the run is left for [`RunCgroup::join`] (the
    /// child then waits for capsule's "go").
    pub fn parent_joins(&self) -> bool {
        self.dirs.iter().any(|d| !self.self_joined(d))
    }

    /// Whether the run's first stage joins `d` itself.
    fn self_joined(&self, d: &Path) -> bool {
        self.self_join.iter().any(|(s, _)| s == d)
    }

    /// The run's v2 cgroup (there is at most one: `memory` and `pids` share
    /// it), opened for the run's first stage to be born in it (clone3 with
    /// `CLONE_INTO_CGROUP`, Linux 5.7+), which takes none of the global
    /// lock a write to `cgroup.procs` takes. The kernel checks, at the
    /// clone, that capsule could have written its `cgroup.procs`. None
    /// without one, or where it does not open (then [`RunCgroup::join`]
    /// moves the child).
    pub fn v2_dir_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.v2_dir.as_ref().map(|f| f.as_raw_fd())
    }

    /// Open the run's v2 cgroup directory (see [`RunCgroup::v2_dir_fd`]).
    fn open_v2_dir(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        let Some(d) = self.dirs.iter().find(|d| !self.v1_dirs.contains(d)) else {
            return;
        };
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(d)
        {
            Ok(f) => self.v2_dir = Some(f.into()),
            Err(e) => tracing::info!("{}: {e}; capsule moves the run", d.display()),
        }
    }

    /// Move the (stopped, waiting) child into every cgroup of the run that
    /// it does not join itself ([`RunCgroup::self_join_files`]); with
    /// `born_in_v2`, it was born in the v2 one ([`RunCgroup::v2_dir_fd`]).
    pub fn join(&self, pid: libc::pid_t, born_in_v2: bool) -> Result<(), String> {
        for d in &self.dirs {
            if self.self_joined(d) || (born_in_v2 && !self.v1_dirs.contains(d)) {
                continue;
            }
            std::fs::write(d.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("moving pid {pid} into {}: {e}", d.display()))?;
        }
        Ok(())
    }

    /// The run's v2 cgroup's `cgroup.kill` (Linux 5.14+), where it has one:
    /// writing `1` SIGKILLs every process in it, and no fork races that (the
    /// tree kill without a pid namespace starts there, `supervisor::treekill`).
    /// A v1 hierarchy has none; its `pids.max` bounds a fork racing the kill.
    pub fn kill_file(&self) -> Option<PathBuf> {
        let d = self.dirs.iter().find(|d| !self.v1_dirs.contains(d))?;
        let f = d.join("cgroup.kill");
        f.exists().then_some(f)
    }

    /// Whether the kernel's OOM killer acted in the run's memory cgroup.
    pub fn oom_killed(&self) -> bool {
        let Some((dir, v2)) = &self.memory_dir else {
            return false;
        };
        let file = if *v2 {
            dir.join("memory.events")
        } else {
            dir.join("memory.oom_control")
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        text.lines().any(|l| {
            l.strip_prefix("oom_kill ")
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0)
                > 0
        })
    }

    /// Remove the run's cgroups (every process is gone by now) and undo what
    /// capsule changed in a delegated cgroup: controllers off, capsule back
    /// where it was, its leaf removed. An empty scope capsule asked for is
    /// removed by systemd (`--collect`).
    pub fn remove(&mut self) {
        self.self_join.clear();
        self.v2_dir = None;
        self.v1_dirs.clear();
        for d in self.dirs.drain(..) {
            rmdir_retry(&d);
        }
        if let Some(e) = self.entered.take() {
            e.undo();
        }
        if let Some(back) = self.left.take() {
            if let Err(e) = write_procs(&back, std::process::id()) {
                tracing::info!("{e}");
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;

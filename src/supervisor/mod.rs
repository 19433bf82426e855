//! The unsandboxed parent: spawn, watch, capture, time out, report.
//!
//! [`run`] takes a [`Plan`], prepares the layers (`crate::sandbox`),
//! creates the private tmp dir, forks the child (`spawn`), and then — only
//! then — starts a single-threaded tokio runtime that drains stdout and
//! stderr (`capture`), serves the RPC broker and the proxy, forwards
//! signals and enforces the wall-clock limit (`event_loop`), until the child
//! is gone. It returns the JSON result, judged by [`crate::result::classify`];
//! the caller prints it and writes the audit record.

pub mod capture;
pub mod cleanup;
pub mod egress;
pub mod event_loop;
pub mod memwatch;
pub mod net_counters;
pub mod ns_hold;
pub mod pty;
pub mod services;
pub mod spawn;
pub mod tmpdir_aside;
pub mod treekill;

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use crate::guards::{judge, memfd, metadata, network, notify_loop, processes};
use crate::plan::Plan;
use crate::result::{self, exit, Enforcement, Reason, RunResult, Termination};
use crate::sandbox::{self, child::ChildSpec, view::ViewSummary};
use crate::sys::{self, channel::Msg};
use capture::{Captured, Sink};
use spawn::{NsRequest, Spawned, TreeMode};

/// How to run, beyond the plan.
#[derive(Debug)]
pub struct ExecOptions {
    /// Capture into the JSON result (else stream live).
    pub json: bool,
    /// SIGTERM → SIGKILL grace at the wall-clock limit.
    pub grace: Duration,
    /// `--tool-fd`: where `forward: true` tools are relayed.
    pub tool_fd: Option<OwnedFd>,
    /// `--no-tty`: pipes even when capsule's stdio is a terminal.
    pub no_tty: bool,
    /// `--explain`: the path observer, whose record the caller reads after
    /// the run (None: no observer, no extra work).
    pub observer: Option<crate::guards::observer::Observer>,
}

/// What a run produced besides the result: a fixed reason code for the audit record.
pub struct Finished {
    pub result: RunResult,
    pub reason: Reason,
}

impl Finished {
    /// A run that never started: the reason's termination and exit status,
    /// and `error` saying why.
    pub fn not_run(run_id: &str, reason: Reason, error: String) -> Finished {
        Finished {
            result: RunResult::not_run(
                run_id.to_string(),
                reason.termination(),
                reason.exit_code().unwrap_or(exit::REFUSED),
                error,
            ),
            reason,
        }
    }
}

/// A run that was refused before anything ran.
pub fn refused(plan_run_id: &str, reason: Reason, error: String) -> Finished {
    debug_assert_eq!(reason.termination(), Termination::Refused, "{reason}");
    Finished::not_run(plan_run_id, reason, error)
}

/// Run the plan to completion.
pub fn run(plan: &Plan, opts: ExecOptions) -> Finished {
    // From here on there is something to clean up: a termination signal
    // waits for the event loop (see `event_loop::hold_stop_signals`).
    event_loop::hold_stop_signals();
    tracing::debug!("supervisor: preparing services");
    let mut services = match services::Services::prepare(plan, opts.tool_fd) {
        Ok(s) => s,
        Err(e) => return refused(&plan.run_id, Reason::ServiceUnavailable, e.to_string()),
    };
    if let Err(f) = make_run_files(plan, &mut services) {
        return *f;
    }
    let mut path = sandbox::RunPath::initial();
    loop {
        tracing::debug!("supervisor: preparing layers ({path:?})");
        let mut layers = match sandbox::prepare(plan, services.proxy_port(), &path) {
            Ok(l) => l,
            Err(e) => {
                let _ = remove_tmpdir(plan);
                return refused(&plan.run_id, Reason::ProtectionUnavailable, e.to_string());
            }
        };
        for m in &layers.missing {
            if plan.best_effort {
                crate::say!("capsule: warning: not enforced (--best-effort): {m}");
            } else if m == sandbox::ROOT_NO_VIEW_GAP {
                // The one gap of the no-namespace path that reaches the whole host.
                crate::say!("capsule: warning: not enforced on this host: {m}");
            } else {
                tracing::warn!("not enforced on this host: {m}");
            }
        }
        if let Some(o) = &opts.observer {
            add_observer(&mut layers, o);
        }
        tracing::debug!("supervisor: layers ready");
        let attempt = run_prepared(
            plan,
            (opts.json, opts.grace, opts.no_tty),
            &mut layers,
            &mut services,
            opts.observer.clone(),
        );
        layers.cgroup.remove();
        match attempt {
            Attempt::Finished(finished) => {
                let mut finished = *finished;
                tracing::debug!("supervisor: run finished");
                // A serve step moves a TMPDIR of empty entries aside and
                // removes it after its report (tmpdir_aside), when no process
                // of the run can be left: its pid namespace is gone with init.
                let tree_gone = finished.result.enforcement.tree_kill
                    == spawn::TreeMode::PidNamespace.as_str()
                    && finished.result.left_behind.is_empty();
                let aside =
                    tree_gone && plan.tmpdir.as_deref().is_some_and(tmpdir_aside::move_aside);
                if !aside {
                    // After any process of the run the tree kill left (its
                    // lines come first; `treekill::sweep`).
                    let tmp = remove_tmpdir(plan);
                    finished.result.left_behind.extend(tmp);
                }
                return finished;
            }
            Attempt::Refused(r) => {
                // Nothing of the command ran: prepare the next path (its own
                // Landlock rules and view, or none) and try again. What this
                // attempt's init held goes now (the next path may hold none).
                drop(ns_hold::NET.take());
                drop(ns_hold::MNT.take());
                match path.after(r) {
                    Some(next) => {
                        tracing::info!(
                            "the kernel refused the run's namespaces ({r:?}); {next:?} next"
                        );
                        path = next;
                    }
                    None => {
                        let _ = remove_tmpdir(plan);
                        return refused(
                            &plan.run_id,
                            Reason::SetupFailed,
                            format!("the kernel refused the run's namespaces: {r:?}"),
                        );
                    }
                }
            }
        }
    }
}

/// `--explain`: the notify filter gets the observer part where seccomp is
/// enforced and a listener can be had; else the observer says it saw nothing.
fn add_observer(layers: &mut sandbox::Layers, o: &crate::guards::observer::Observer) {
    let mut seen = o.seen.lock().unwrap_or_else(|p| p.into_inner());
    seen.active = false;
    if layers.seccomp.is_none() {
        seen.why_not = Some("seccomp is not enforced here".into());
        return;
    }
    if let Err(e) = sandbox::seccomp::listener_available() {
        seen.why_not = Some(format!("no seccomp user-notification listener here ({e})"));
        return;
    }
    let mut parts = layers.notify_parts;
    parts.observe = true;
    match sandbox::seccomp::notify_filter(parts) {
        Ok(f) => {
            layers.notify_filter = Some((f, true));
            seen.active = true;
            seen.why_not = None;
        }
        Err(e) => seen.why_not = Some(format!("the observer's filter: {e}")),
    }
}

/// How one attempt to start the run ended.
/// The private TMPDIR, then the run's CA bundle (before the layers: Landlock
/// and the view open both).
fn make_run_files(plan: &Plan, services: &mut services::Services) -> Result<(), Box<Finished>> {
    if let Some(t) = &plan.tmpdir {
        use std::os::unix::fs::DirBuilderExt;
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(t) {
            return Err(Box::new(refused(
                &plan.run_id,
                Reason::SetupFailed,
                format!("creating the private TMPDIR {}: {e}", t.display()),
            )));
        }
    }
    if let Err(e) = services.write_ca_bundle(plan) {
        let _ = remove_tmpdir(plan);
        return Err(Box::new(refused(
            &plan.run_id,
            Reason::SetupFailed,
            e.to_string(),
        )));
    }
    Ok(())
}

enum Attempt {
    Finished(Box<Finished>),
    /// The kernel refused the namespaces or a step of their set-up: nothing
    /// of the command ran, try the next path.
    Refused(sandbox::NsRefusal),
}

/// The child's view of a host path: inside the view the private TMPDIR is `/tmp`.
fn in_view(p: &std::path::Path, tmpdir: Option<&std::path::Path>) -> std::path::PathBuf {
    match tmpdir.and_then(|t| p.strip_prefix(t).ok()) {
        Some(rest) if rest.as_os_str().is_empty() => "/tmp".into(),
        Some(rest) => std::path::Path::new("/tmp").join(rest),
        None => p.to_path_buf(),
    }
}

/// Remove the private TMPDIR with whatever the child left in it (see
/// `cleanup`: deep trees, mode-000 directories, symlinks out of it). What
/// stays is said on stderr and returned for the result's `left_behind`.
fn remove_tmpdir(plan: &Plan) -> Vec<String> {
    let Some(t) = &plan.tmpdir else {
        return Vec::new();
    };
    let lines = cleanup::remove_dir_or_tree(t);
    if lines.is_empty() {
        return lines;
    }
    crate::say!(
        "capsule: warning: the private TMPDIR {} could not be removed entirely; left behind:",
        t.display()
    );
    for l in &lines {
        crate::say!("capsule:   {l}");
    }
    lines
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
}

/// One attempt at the run: build the child's spec, spawn it, run the event
/// loop until the child is gone, and judge how it ended.
fn run_prepared(
    plan: &Plan,
    (json, grace, no_tty): (bool, Duration, bool),
    layers: &mut sandbox::Layers,
    services: &mut services::Services,
    observer: Option<crate::guards::observer::Observer>,
) -> Attempt {
    let Started {
        mut spawned,
        start,
        out_r,
        err_r,
        terminal,
        view_summary,
        cgroup_missing,
        ruleset,
        granted_tmpfs,
    } = match start_child(plan, (json, no_tty), layers, services, observer.as_ref()) {
        Ok(s) => s,
        Err(attempt) => return attempt,
    };
    let rt = match event_loop_or_kill(plan, &spawned) {
        Ok(rt) => rt,
        Err(attempt) => return attempt,
    };
    let relay = {
        let _in_runtime = rt.enter();
        terminal.start(plan.limits.max_output_bytes)
    };
    let (guards, memory_watch) = guard_parts(
        plan,
        layers,
        services,
        &spawned,
        observer,
        (ruleset, granted_tmpfs),
    );
    let mut sup = rt.block_on(supervise(
        &mut spawned,
        out_r,
        err_r,
        json,
        plan,
        grace,
        services,
        guards,
        memory_watch,
    ));
    let duration = start.elapsed();
    rt.block_on(relay.finish(Duration::from_secs(2), &mut sup.stdout, &mut sup.stderr));
    tracing::debug!("supervisor: child gone, output drained");
    let usage = rt.block_on(services.finish());
    tracing::debug!("supervisor: services finished");
    // Not `drop(rt)`, which waits for every blocking task: a write to
    // capsule's own stdout whose reader stays but never reads again (`| sleep
    // 1000`, a terminal stopped with ^S) would hold capsule, its result and
    // its audit record, for as long as that reader lives.
    rt.shutdown_timeout(Duration::from_secs(2));
    if spawned.tree == TreeMode::PidNamespace {
        // Init reported the command's status and exits right after (or was
        // killed at the timeout): reap it, so no zombie outlives capsule.
        sys::wait_blocking(spawned.pid);
    }
    if services.starts_processes() {
        // Tool calls may still have run after the command ended (requests
        // already sent): whatever they left behind is a child of capsule now.
        let left = treekill::sweep(&spawned.inherited, None, treekill::SWEEP_BOUND);
        sup.left_running.extend(left);
    }
    // network.mode none: how often the run tried the network (its own
    // namespace's counters, see `net_counters`).
    let net_attempts = (plan.net.mode == crate::policy::NetMode::None)
        .then(|| spawned.net_counters.as_ref().and_then(|c| c.failed()))
        .flatten();
    let ended = Ended {
        sup,
        duration,
        usage,
        cgroup_missing,
        view_summary,
        net_attempts,
    };
    Attempt::Finished(Box::new(judge(
        plan, grace, layers, services, &spawned, ended,
    )))
}

/// The supervisor's event loop; where it cannot be had, the run started
/// already is killed, reaped and swept, and the attempt is a set-up failure.
fn event_loop_or_kill(plan: &Plan, spawned: &Spawned) -> Result<tokio::runtime::Runtime, Attempt> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            sys::signal(spawned.pid, libc::SIGKILL);
            sys::wait_blocking(spawned.pid);
            if spawned.tree == TreeMode::Subreaper {
                // The command may have started already: what it started is
                // reparented to capsule with the keeper gone.
                treekill::sweep(
                    &spawned.inherited,
                    spawned.cgroup_kill.as_deref(),
                    treekill::SWEEP_BOUND,
                );
            }
            setup_failed(plan, "starting the supervisor's event loop", &e)
        })
}

/// A set-up step that failed before the command ran.
fn setup_failed(plan: &Plan, what: &str, e: &dyn std::fmt::Display) -> Attempt {
    Attempt::Finished(Box::new(refused(
        &plan.run_id,
        Reason::SetupFailed,
        format!("{what}: {e}"),
    )))
}

/// A spawned child and what the parent keeps of its set-up.
struct Started {
    spawned: Spawned,
    start: Instant,
    out_r: OwnedFd,
    err_r: OwnedFd,
    terminal: pty::Terminal,
    view_summary: Option<ViewSummary>,
    cgroup_missing: Vec<String>,
    /// A copy of the run's Landlock ruleset for the network guard's binds.
    ruleset: Option<std::sync::Arc<OwnedFd>>,
    /// The host tmpfs file systems the run may write, as they were before
    /// it began (the memory watchdog counts their growth).
    granted_tmpfs: memwatch::Before,
}

/// What the memory watchdog notes before the run exists: each host tmpfs
/// the run may write as it is, and the run's RPC channel.
fn watch_before(layers: &sandbox::Layers, services: &services::Services) -> memwatch::Before {
    memwatch::Before {
        granted: layers
            .memory_watch
            .as_ref()
            .map(|w| w.granted_tmpfs.iter().map(memwatch::Grown::new).collect())
            .unwrap_or_default(),
        rpc_socket: services.child_rpc_inode(),
        rpc_queue: layers
            .memory_watch
            .as_ref()
            .and_then(|_| services.rpc_queue()),
    }
}

/// The run's pipes and terminal, the child's spec, the child spawned (and,
/// under the keeper, its command stage's pid read when a guard needs it).
fn start_child(
    plan: &Plan,
    (json, no_tty): (bool, bool),
    layers: &mut sandbox::Layers,
    services: &mut services::Services,
    observer: Option<&crate::guards::observer::Observer>,
) -> Result<Started, Attempt> {
    let fail = |what: &str, e: &dyn std::fmt::Display| Err(setup_failed(plan, what, e));
    let (out_r, out_w) = match pipe() {
        Ok(p) => p,
        Err(e) => return fail("pipe()", &e),
    };
    let (err_r, err_w) = match pipe() {
        Ok(p) => p,
        Err(e) => return fail("pipe()", &e),
    };
    sys::grow_pipe(out_r.as_raw_fd(), 1 << 20);
    // The user's terminal never reaches the child (pty.rs). Before the
    // child exists: the terminal watchdog must not look like part of the run.
    let mut terminal = match pty::Terminal::open(json, no_tty) {
        Ok(t) => t,
        Err(e) => return fail("the terminal", &e),
    };
    let stdio = (out_w.as_raw_fd(), err_w.as_raw_fd());
    // Before the child spec takes the ruleset: the network guard's bind
    // thread puts itself under it.
    let ruleset = (layers.net_part != sandbox::seccomp::NetPart::None)
        .then(|| layers.landlock.as_ref().and_then(|l| l.ruleset_copy()))
        .flatten()
        .map(std::sync::Arc::new);
    let spec = match child_spec(plan, layers, services, &terminal, stdio) {
        Ok(s) => s,
        Err(e) => return fail("a NUL byte in the command, environment or cwd", &e),
    };
    let view_summary = spec.view.as_ref().map(|v| v.summary.clone());
    // Before the run exists: what it writes on a host tmpfs is all growth.
    let granted_tmpfs = watch_before(layers, services);
    let mut cgroup_missing = Vec::new();
    let spawned = spawn_child(plan, layers, services, spec, &mut cgroup_missing);
    // The parent's copies of the child's ends.
    drop(out_w);
    drop(err_w);
    terminal.close_child_ends();
    let (spawned, start) = match spawned {
        Ok(s) => s,
        Err(spawn::SpawnError::Refused(r)) => return Err(Attempt::Refused(r)),
        Err(e) => {
            return Err(Attempt::Finished(Box::new(refused(
                &plan.run_id,
                Reason::SetupFailed,
                e.to_string(),
            ))))
        }
    };
    tracing::debug!("supervisor: spawned");
    if let Some(o) = observer {
        o.run_root
            .store(spawned.pid, std::sync::atomic::Ordering::Relaxed);
    }
    // The signal and process guards judge by the command's pid: under the
    // keeper, wait for its report (only then; it arrives before the
    // listener they serve).
    let tree_guard = layers.signals == sandbox::SignalLayer::SeccompNotify
        || layers.limits.get("max_processes").map(String::as_str) == Some("seccomp-notify");
    if spawned.tree == TreeMode::Subreaper && tree_guard {
        if let Err(e) = spawn::await_command(&spawned) {
            sys::signal(spawned.pid, libc::SIGKILL);
            sys::wait_blocking(spawned.pid);
            treekill::sweep(
                &spawned.inherited,
                spawned.cgroup_kill.as_deref(),
                treekill::SWEEP_BOUND,
            );
            return fail("starting the run", &e);
        }
    }
    Ok(Started {
        spawned,
        start,
        out_r,
        err_r,
        terminal,
        view_summary,
        cgroup_missing,
        ruleset,
        granted_tmpfs,
    })
}

/// The guards the run's listener will serve (signals, network, processes,
/// memfds, metadata, the observer), and the memory watchdog.
fn guard_parts(
    plan: &Plan,
    layers: &sandbox::Layers,
    services: &services::Services,
    spawned: &Spawned,
    observer: Option<crate::guards::observer::Observer>,
    (ruleset, granted_tmpfs): (Option<std::sync::Arc<OwnedFd>>, memwatch::Before),
) -> (GuardParts, Option<memwatch::Watch>) {
    // The run's signal filter sends its listener before exec; the guard
    // serving it needs to know the run (the command has not exec'd yet).
    let signal_tree = if layers.signals == sandbox::SignalLayer::SeccompNotify {
        let tree = judge::Tree::for_run(spawned.command.get(), keeper(spawned), &spawned.inherited);
        if tree.is_none() {
            tracing::warn!(
                "signal guard: /proc does not show capsule as itself; every checked signal call of the run fails"
            );
        }
        tree
    } else {
        None
    };
    // The network guard: proxy mode on the host's network; only binds
    // where allow_unix_sockets shares the host's abstract names.
    let net_guard = match layers.net_part {
        sandbox::seccomp::NetPart::Guard => services.proxy_port().map(Some),
        sandbox::seccomp::NetPart::UnixBind => Some(None),
        _ => None,
    }
    .map(|proxy_port| network::NetGuard {
        proxy_port,
        ruleset,
    });
    let proc_guard = proc_guard(plan, layers, spawned);
    let memory_watch = memory_watch(layers, spawned, granted_tmpfs);
    let memfd_guard = layers.memfd_guard.map(|seal| memfd::MemfdGuard {
        seal,
        keep: memory_watch.as_ref().map(|w| w.memfds.clone()),
    });
    // The metadata guard: no view of the host.
    let meta_guard = layers.meta_guard.as_ref().and_then(|m| {
        metadata::MetaGuard::start(metadata::Grants {
            write: m.write.clone(),
            deny: m.deny.clone(),
        })
        .map_err(|e| {
            tracing::warn!(
                "metadata guard: cannot start: {e}; every metadata call of the run fails"
            )
        })
        .ok()
    });
    (
        (
            signal_tree,
            net_guard,
            proc_guard,
            memfd_guard,
            meta_guard,
            observer.filter(|o| o.seen.lock().is_ok_and(|s| s.active)),
        ),
        memory_watch,
    )
}

/// The process guard: max_processes as root without a cgroup.
fn proc_guard(
    plan: &Plan,
    layers: &sandbox::Layers,
    spawned: &Spawned,
) -> Option<processes::ProcGuard> {
    (layers.limits.get("max_processes").map(String::as_str) == Some("seccomp-notify"))
        .then_some(plan.limits.max_processes)
        .flatten()
        .and_then(|max| {
            let census = if spawned.tree == TreeMode::PidNamespace {
                Some(processes::Census::PidNamespace {
                    init: spawned.pid,
                    tree: judge::Tree::for_run(spawned.pid, None, &spawned.inherited),
                })
            } else {
                judge::Tree::for_run(spawned.command.get(), keeper(spawned), &spawned.inherited)
                    .map(processes::Census::Tree)
            };
            if census.is_none() {
                tracing::warn!(
                "process guard: /proc does not show capsule as itself; every fork of the run fails"
            );
            }
            census.map(|c| processes::ProcGuard::new(max, c))
        })
}

/// memory_mb without a cgroup: the memory watchdog, which also counts
/// the memfds the memfd guard makes for the run.
fn memory_watch(
    layers: &sandbox::Layers,
    spawned: &Spawned,
    before: memwatch::Before,
) -> Option<memwatch::Watch> {
    layers.memory_watch.as_ref().map(|w| {
        let census = if spawned.tree == TreeMode::PidNamespace {
            memwatch::Census::PidNamespace { init: spawned.pid }
        } else {
            // The keeper's descendants: orphans of the run are handed to it.
            memwatch::Census::Keeper {
                keeper: spawned.pid,
            }
        };
        memwatch::Watch {
            limit: w.limit,
            census,
            memfds: crate::guards::memfd::Memfds::default(),
            view_tmpfs: w.view_tmpfs.clone(),
            host_tmpfs: w.host_tmpfs.clone(),
            unlinked_in: w.unlinked_in.clone(),
            granted_tmpfs: before.granted,
            rpc_socket: before.rpc_socket,
            rpc_queue: before.rpc_queue,
        }
    })
}

/// What the parent gathered of an ended run, for [`judge`].
struct Ended {
    sup: Supervised,
    duration: Duration,
    usage: services::Usage,
    cgroup_missing: Vec<String>,
    view_summary: Option<ViewSummary>,
    /// network.mode none with the run's own namespace: its failed attempts
    /// to reach the network.
    net_attempts: Option<u64>,
}

/// The run's result: its streams, enforcement and usage, and how it ended
/// ([`result::classify`]).
fn judge(
    plan: &Plan,
    grace: Duration,
    layers: &sandbox::Layers,
    services: &services::Services,
    spawned: &Spawned,
    ended: Ended,
) -> Finished {
    let Ended {
        mut sup,
        duration,
        usage,
        cgroup_missing,
        view_summary,
        net_attempts,
    } = ended;
    let mut r = RunResult::new(plan.run_id.clone(), Termination::Exited, 0);
    r.set_streams(&mut sup.stdout, &mut sup.stderr);
    r.left_behind = std::mem::take(&mut sup.left_running);
    r.duration_seconds = duration.as_secs_f64();
    r.enforcement = enforcement(
        plan,
        layers,
        services,
        spawned,
        cgroup_missing,
        view_summary,
    );
    r.policy_sha256 = plan.policy_sha256.clone();
    usage.apply(&mut r);
    if let Some(n) = net_attempts {
        let network = serde_json::json!({"failed_attempts": n});
        match r.usage.as_mut().and_then(serde_json::Value::as_object_mut) {
            Some(u) => {
                u.insert("network".into(), network);
            }
            None => r.usage = Some(serde_json::json!({ "network": network })),
        }
    }
    let context = result::Context {
        program: &plan.program,
        timeout: plan.limits.timeout,
        grace,
        cpu_seconds: plan.limits.cpu_seconds,
    };
    let watchdog = sup.ended.memory;
    let verdict = result::classify(&sup.ending(), &context, || {
        layers.cgroup.oom_killed() || watchdog.is_some()
    });
    let reason = verdict.apply(&mut r);
    if let (Some(held), Reason::MemoryLimit) = (watchdog, reason) {
        r.kill_reason = Some(if held == u64::MAX {
            "memory limit reached (limits.memory_mb): capsule's memory watchdog could not read the run's memory"
                .into()
        } else {
            format!(
                "memory limit reached (limits.memory_mb): the run held {} MiB (capsule's memory watchdog)",
                held >> 20
            )
        });
    }
    Finished { result: r, reason }
}

/// The keeper of a run without a pid namespace (capsule's child there).
fn keeper(spawned: &Spawned) -> Option<libc::pid_t> {
    (spawned.tree == TreeMode::Subreaper).then_some(spawned.pid)
}

/// Spawn the child (`spec`) into its namespaces and cgroup, and pick how its
/// tree is killed at the end; returns it with the time it started. A cgroup
/// limit that --best-effort let go is added to `cgroup_missing`.
fn spawn_child(
    plan: &Plan,
    layers: &sandbox::Layers,
    services: &mut services::Services,
    spec: ChildSpec,
    cgroup_missing: &mut Vec<String>,
) -> Result<(Spawned, Instant), spawn::SpawnError> {
    // The end-of-run sweeps (subreaper mode; tool processes) kill children of
    // capsule, but never the ones it had before this run: a script may have
    // started something in the background and then exec'd capsule.
    let sweeps = services.starts_processes() || !layers.want_pidns;
    let inherited = if sweeps {
        treekill::own_children_except(&[])
    } else {
        Vec::new()
    };
    let view = spec.view.is_some();
    let ns = NsRequest {
        pid: layers.want_pidns,
        // `none` gets its own (empty) network namespace too, so that the
        // private /proc shows nothing of the host's network.
        // The run's own loopback holds only inside a namespace of its own:
        // `layers.netns` (which `own_loopback` implies) asks for it too.
        net: layers.want_pidns
            && !sandbox::mutation::removed(sandbox::mutation::Layer::Netns)
            && (services.wants_netns()
                || layers.netns
                || (view && plan.net.mode == crate::policy::NetMode::None)),
        view,
    };
    let cgroup = &layers.cgroup;
    // A cgroup that refuses the child (a layout capsule did not foresee)
    // refuses the run, unless --best-effort: then the run goes on with those
    // limits reported missing. --best-effort never fails because of a cgroup.
    let best_effort = plan.best_effort;
    let mut join = |pid: libc::pid_t, placed: bool| match cgroup.join(pid, placed) {
        Err(e) if best_effort => {
            tracing::warn!("not enforced (--best-effort): {e}");
            cgroup_missing.push(format!("cgroup limits (memory_mb, max_processes): {e}"));
            Ok(())
        }
        r => r,
    };
    let start = Instant::now();
    let spawned = spawn::spawn(spec, ns, cgroup.v2_dir_fd(), &mut join);
    // Namespaces refused: nothing ran, and the services' child ends serve the
    // next attempt.
    if !matches!(spawned, Err(spawn::SpawnError::Refused(_))) {
        services.close_child_ends();
    }
    let mut spawned = spawned?;
    if spawned.tree == TreeMode::Subreaper {
        spawned.cgroup_kill = layers.cgroup.kill_file();
    }
    spawned.inherited = if sweeps {
        inherited
    } else if spawned.tree == TreeMode::Subreaper {
        // A pid namespace was wanted but refused. The command stage has not
        // exec'd yet, so nothing of the run can have been reparented to us.
        treekill::own_children_except(&[spawned.pid])
    } else {
        Vec::new()
    };

    // Tool processes run on the host, each in its own process group, which
    // the broker kills when the call ends. A descendant that moved to a
    // session of its own escapes that; as a child subreaper capsule inherits
    // it instead and kills it with the run (after the event loop). In
    // subreaper mode capsule already is one.
    if services.starts_processes() && spawned.tree != TreeMode::Subreaper {
        if let Err(e) = sys::set_child_subreaper() {
            tracing::warn!("cannot become a child subreaper for tool processes: {e}");
        }
    }
    Ok((spawned, start))
}

/// The child's spec: the command with the run's environment and cwd (as seen
/// inside the view), its stdio, and the prepared layers taken from `layers`.
fn child_spec(
    plan: &Plan,
    layers: &mut sandbox::Layers,
    services: &services::Services,
    terminal: &pty::Terminal,
    (stdout_w, stderr_w): (std::os::fd::RawFd, std::os::fd::RawFd),
) -> Result<ChildSpec, std::ffi::NulError> {
    let mut env = plan.env.clone();
    let service_env = services.child_env();
    // The services' variables win (e.g. no `env.set` HTTP_PROXY may bypass the proxy).
    env.retain(|(k, _)| !service_env.iter().any(|(s, _)| s == k));
    env.extend(service_env);
    terminal.add_env(&mut env);
    // Inside the view the private TMPDIR is /tmp: HOME, TMPDIR and the cwd say so.
    let private_tmp = layers.view.as_ref().is_some_and(|v| v.summary.private_tmp);
    let mut cwd = plan.cwd.clone();
    if private_tmp {
        let t = plan.tmpdir.as_deref();
        for (k, v) in env.iter_mut() {
            if k == "HOME" || k == "TMPDIR" {
                *v = in_view(std::path::Path::new(v.as_str()), t)
                    .to_string_lossy()
                    .into_owned();
            }
        }
        cwd = in_view(&cwd, t);
    }
    let (program, argv, envp, cwd) = ChildSpec::strings(&plan.program, &plan.argv, &env, &cwd)?;
    let mut spec = ChildSpec::new(program, argv, envp, cwd);
    spec.stdout_w = Some(stdout_w);
    spec.stderr_w = Some(stderr_w);
    terminal.apply(&mut spec);
    spec.rpc_fd = services.child_rpc_fd();
    spec.rlimits = std::mem::take(&mut layers.rlimits)
        .into_iter()
        .map(|(r, v)| (r as libc::c_int, v))
        .collect();
    spec.landlock = layers
        .landlock
        .take()
        .map(sandbox::landlock::Prepared::into_child);
    spec.seccomp = layers.seccomp.take();
    spec.notify_filter = layers.notify_filter.take();
    spec.truncate_guard = layers.truncate_guard.take();
    // The run's first stage moves itself into the v1 cgroups (far cheaper
    // than capsule moving it; `RunCgroup::self_join_files`). Not with
    // --best-effort: a cgroup that refuses the run there is reported
    // missing, which only capsule's own move can tell.
    if !plan.best_effort {
        spec.cgroup_tasks = layers.cgroup.self_join_files();
    }
    spec.wait_go = layers.cgroup.parent_joins();
    spec.net_setup = if layers.want_pidns {
        services.net_setup()
    } else {
        None
    };
    spec.loopback_up = layers.own_loopback;
    spec.view = layers.view.take();
    spec.seal();
    Ok(spec)
}

/// Which layer enforced what for this run, as the result reports it.
fn enforcement(
    plan: &Plan,
    layers: &sandbox::Layers,
    services: &services::Services,
    spawned: &Spawned,
    cgroup_missing: Vec<String>,
    view: Option<ViewSummary>,
) -> Enforcement {
    Enforcement {
        landlock_abi: layers.landlock_abi,
        seccomp: layers.seccomp_enforced,
        network: plan.net.mode.as_str().to_string(),
        netns: spawned.netns,
        loopback: layers.own_loopback && spawned.netns,
        network_path: services.network_path().map(|p| {
            if spawned.netns {
                p
            } else {
                sandbox::host_network_path(layers.net_part, layers.landlock_abi).to_string()
            }
        }),
        tree_kill: spawned.tree.as_str().to_string(),
        signals: layers.signals.as_str().to_string(),
        memfd_exec: layers.memfd_exec.to_string(),
        limits: layers.limits.clone(),
        missing: layers
            .missing
            .iter()
            .cloned()
            .chain(cgroup_missing)
            .collect(),
        limitations: layers.limitations.clone(),
        view: view.map(|v| result::ViewReport {
            mount_namespace: true,
            ipc_namespace: true,
            read_only_host: true,
            private_proc: v.private_proc,
            private_tmp: v.private_tmp,
            private_shm: v.private_shm,
            devpts: v.devpts,
            memfd_noexec: v.memfd_noexec,
            mounts: sandbox::view::describe(&v),
            secrets_covered: v.secrets.len(),
        }),
    }
}

/// What the event loop observed.
struct Supervised {
    stdout: Captured,
    stderr: Captured,
    status: Option<i32>,
    /// The command's own CPU time when it ended, as its parent in the run
    /// read it (`Msg::Exited`).
    cpu_time: Option<Duration>,
    exec_failed: Option<Errno>,
    setup_failed: Option<(sys::channel::Stage, Errno)>,
    ended: event_loop::Ended,
    /// The guards' CPU budget (`notify_loop::cpu_budget`).
    guard_budget: Duration,
    /// Processes of the run the tree kill could not end within its bound
    /// (`treekill::sweep`): the first lines of the result's `left_behind`.
    left_running: Vec<String>,
}

impl Supervised {
    /// Nothing observed yet, for a run of `plan`.
    fn new(plan: &Plan) -> Supervised {
        Supervised {
            stdout: Captured::default(),
            stderr: Captured::default(),
            status: None,
            cpu_time: None,
            exec_failed: None,
            setup_failed: None,
            ended: event_loop::Ended::default(),
            guard_budget: notify_loop::cpu_budget(plan.limits.timeout, plan.limits.cpu_seconds),
            left_running: Vec::new(),
        }
    }

    /// The facts of the run's end, for [`result::classify`].
    fn ending(&self) -> result::Ending {
        result::Ending {
            setup_failed: self.setup_failed,
            stop_signal: self.ended.signal,
            timed_out: self.ended.timed_out,
            guard_budget: self.ended.guard_budget.then_some(self.guard_budget),
            exec_failed: self.exec_failed,
            status: self.status,
            cpu_time: self.cpu_time,
        }
    }
}

/// The command's own CPU time as its parent in the run reported it with its
/// wait status (-1 ms: unknown).
fn reported_cpu_time(status: i32, cpu_ms: i32) -> Option<Duration> {
    tracing::debug!("supervisor: the command ended, status {status:#x}, CPU {cpu_ms} ms");
    u64::try_from(cpu_ms).ok().map(Duration::from_millis)
}

/// What the guard thread serves once the run's listener arrives.
type GuardParts = (
    Option<judge::Tree>,
    Option<network::NetGuard>,
    Option<processes::ProcGuard>,
    Option<memfd::MemfdGuard>,
    Option<metadata::MetaGuard>,
    Option<crate::guards::observer::Observer>,
);

#[allow(clippy::too_many_arguments)]
async fn supervise(
    sp: &mut Spawned,
    out_r: OwnedFd,
    err_r: OwnedFd,
    json: bool,
    plan: &Plan,
    grace: Duration,
    services: &mut services::Services,
    mut guard_parts: GuardParts,
    memory_watch: Option<memwatch::Watch>,
) -> Supervised {
    let limit = plan.limits.max_output_bytes;
    let (so, se) = if json {
        (Sink::Capture, Sink::Capture)
    } else {
        (Sink::Stdout, Sink::Stderr)
    };
    let out_task = tokio::spawn(capture::pump(out_r, so, limit));
    let err_task = tokio::spawn(capture::pump(err_r, se, limit));
    services.start(&sp.chan, sp.netns);
    for (tag, fd) in std::mem::take(&mut sp.early_fds) {
        services.on_fd(tag, fd);
    }

    let mut state = Supervised::new(plan);
    let budget = state.guard_budget;
    let exhausted = notify_loop::Exhausted::default();
    let mut guard: Option<notify_loop::Guard> = None;
    let (over_tx, over_rx) = tokio::sync::oneshot::channel();
    let watchdog = memory_watch.and_then(|w| match memwatch::start(w, over_tx) {
        Ok(d) => Some(d),
        Err(e) => {
            // Fail closed: a run whose memory cannot be watched is killed.
            tracing::warn!("memory watchdog: cannot start: {e}");
            event_loop::kill_run(sp);
            None
        }
    });
    let over_rx = watchdog.as_ref().map(|_| over_rx);
    let init_status = event_loop::watch(
        sp,
        plan.limits.timeout,
        grace,
        &mut state.ended,
        &exhausted,
        over_rx,
        |msg, fd| match msg {
            Msg::ExecFailed { errno } => state.exec_failed = Some(Errno::from_raw(errno)),
            Msg::SetupFailed { stage, errno } => {
                state.setup_failed = Some((stage, Errno::from_raw(errno)))
            }
            Msg::Exited { status, cpu_ms } => {
                state.status = Some(status);
                state.cpu_time = reported_cpu_time(status, cpu_ms);
            }
            // The command stage's first word under the keeper (unless
            // `await_command` read it already): whom signals go to.
            Msg::Command { pid } if pid > 0 && sp.command.get() == 0 => {
                sp.command.set(pid);
                if let Some(fd) = fd {
                    let _ = sp.command_fd.set(fd);
                }
            }
            Msg::Command { pid } => {
                tracing::warn!("an unexpected command pid {pid} reported; ignored")
            }
            Msg::Fd { tag } if tag == notify_loop::LISTENER_TAG => {
                start_guard(fd, &mut guard_parts, budget, &exhausted, &mut guard)
            }
            Msg::Fd { tag } => services.on_fd(tag, fd),
            Msg::Ready => {}
        },
    )
    .await;
    drop(watchdog);
    tracing::debug!("supervisor: child exited");
    after_the_child(sp, &mut state, init_status);
    if let Some(g) = guard {
        g.stop();
    }
    // Every writer is gone now; the pipes reach end-of-file promptly.
    let drain = Duration::from_secs(2);
    state.stdout = drained(drain, out_task).await;
    state.stderr = drained(drain, err_task).await;
    state
}

/// The child (init, or the keeper) is gone: the run's status as far as it
/// is known, and without a pid namespace the sweep of what is left.
fn after_the_child(sp: &Spawned, state: &mut Supervised, init_status: Option<i32>) {
    if state.ended.memory.is_some() && state.status.is_none() {
        // The watchdog SIGKILLed the run (in a pid namespace: its init,
        // which could report nothing): the run ended by that signal.
        state.status = Some(libc::SIGKILL);
    }
    if sp.tree == TreeMode::Subreaper {
        state.status = state.status.or(init_status);
        // The keeper killed whatever the command left behind; should it be
        // gone (killed with the run), what it held was reparented to capsule
        // and goes now, until nothing is left or the sweep's time bound.
        // Nothing is signalled by the command's pid: the keeper reaped it.
        state.left_running = treekill::sweep(
            &sp.inherited,
            sp.cgroup_kill.as_deref(),
            treekill::SWEEP_BOUND,
        );
    }
}

/// The run's listener arrived: start the guard thread with the parts wanted.
/// Without a guard the listener closes here, and every notified call of the
/// run fails (ENOSYS).
fn start_guard(
    fd: Option<OwnedFd>,
    parts: &mut GuardParts,
    budget: Duration,
    exhausted: &notify_loop::Exhausted,
    guard: &mut Option<notify_loop::Guard>,
) {
    let (signal_tree, net_guard, proc_guard, memfd_guard, meta_guard, observer) = parts;
    let (tree, net, procs) = (signal_tree.take(), net_guard.take(), proc_guard.take());
    let (memfd, meta) = (memfd_guard.take(), meta_guard.take());
    let observe = observer.take();
    let wanted = tree.is_some()
        || net.is_some()
        || procs.is_some()
        || memfd.is_some()
        || meta.is_some()
        || observe.is_some();
    let parts = notify_loop::Parts {
        tree,
        net,
        procs,
        memfd,
        meta,
        observe,
        budget,
        exhausted: exhausted.clone(),
    };
    match (fd, guard.is_none() && wanted) {
        (Some(fd), true) => match notify_loop::start(fd, parts) {
            Ok(g) => *guard = Some(g),
            Err(e) => tracing::warn!("guard: cannot start: {e}"),
        },
        _ => tracing::warn!("guard: unexpected listener message"),
    }
}

/// What a capture task collected, waiting at most `limit` for it.
async fn drained(limit: Duration, task: tokio::task::JoinHandle<Captured>) -> Captured {
    tokio::time::timeout(limit, task)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

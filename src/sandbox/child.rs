//! What runs in the child stages, between clone and exec.
//!
//! Both stages are created with `CLONE_VM` (see `supervisor::spawn`): they
//! run on stacks of their own but inside the supervisor's address space, at
//! the same time as the supervisor. That is what makes them cheap (no page
//! tables copied, nothing copied on write, nothing torn down at exit), and it
//! sets the rules for this file:
//! * only raw system calls (`crate::sys::raw`: no libc wrapper, so no
//!   `errno` written into the supervisor's thread-local storage);
//! * no allocation, no lock, no logging, no panic: nothing but reads of the
//!   [`ChildSpec`] the supervisor prepared (and then leaked, so it stays valid
//!   and unchanged), writes to the stage's own stack, and system calls;
//! * the spec is shared memory: a stage never writes to it.
//!
//! Each step that fails reports `SetupFailed { stage, errno }` on the
//! channel and exits 125: nothing runs. Init reports `Ready` once the
//! namespaces and the view are built, before it creates the command: the
//! supervisor waits for it, and a step the kernel refused there (a
//! container's masked /proc, AppArmor's or a seccomp profile's refused
//! mounts or loopback) makes it take the next path
//! (`sandbox::RunPath::after`) while nothing of the command has run.
//!
//! Two stages:
//! * [`init_main`]: pid 1 of the run's own pid namespace. It creates the
//!   command (`CLONE_VM | CLONE_VFORK`: it sleeps until the command has
//!   exec'd), forwards the signals the supervisor sends it to every process
//!   of the namespace, reaps orphans, and when the command ends kills
//!   whatever is left, reports the wait status and exits. If the supervisor
//!   dies, PR_SET_PDEATHSIG kills init and with it the whole namespace.
//! * [`keeper_main`]: where the run has no pid namespace, the keeper sits
//!   between capsule and the command: a child subreaper, so every orphan of
//!   the run (a `setsid`'d daemon whose parent exited) is reparented to it,
//!   not to capsule. It reports the command's wait status, and kills every
//!   process left when the command ends — and when capsule dies, even by
//!   SIGKILL (PR_SET_PDEATHSIG): so a SIGKILLed capsule leaves nothing of
//!   the run behind on this path either.
//! * [`command_main`]: confines this process and execs the command.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::fd::{AsRawFd, RawFd};

use crate::sandbox::netns::{self, NetSetup};
use crate::sandbox::{landlock, seccomp};
use crate::sys::channel::{Msg, Stage};
use crate::sys::raw::{self, SigSet};

/// Everything the child stages need, prepared by the supervisor before the
/// clone and never changed after it.
pub struct ChildSpec {
    pub program: CString,
    pub argv: Vec<CString>,
    pub argv_ptrs: Vec<*const c_char>,
    pub envp: Vec<CString>,
    pub envp_ptrs: Vec<*const c_char>,
    /// `/bin/sh PROGRAM ARGS...` for a program execve answers with ENOEXEC
    /// (`sys::stage::exec`), built by `seal`.
    pub sh_argv: Vec<CString>,
    pub sh_argv_ptrs: Vec<*const c_char>,
    pub cwd: CString,
    /// Write ends of the capture pipes, dup'ed onto 1 and 2 (None: inherit).
    pub stdout_w: Option<RawFd>,
    pub stderr_w: Option<RawFd>,
    /// Dup'ed onto 0 (None: inherit capsule's stdin).
    pub stdin_r: Option<RawFd>,
    /// The run's pty slave: made the controlling terminal right after setsid.
    pub ctty: Option<RawFd>,
    /// The child's end of the RPC socketpair, kept open across exec at this number.
    pub rpc_fd: Option<RawFd>,
    /// (RLIMIT_* resource, value for both limits).
    pub rlimits: Vec<(c_int, u64)>,
    pub landlock: Option<landlock::ChildRules>,
    pub seccomp: Option<seccomp::Filters>,
    /// The notify filter (signal checks without a pid namespace below
    /// Landlock ABI 6; the network guard in proxy mode on the host's
    /// network): installed last; with `true` its listener is sent to the
    /// supervisor.
    pub notify_filter: Option<(seccomp::NotifyFilter, bool)>,
    /// The truncate guard, installed right after the main program.
    pub truncate_guard: Option<seccomp::TruncateGuard>,
    /// Wait for the supervisor's "go" (uid maps written, cgroup joined).
    pub wait_go: bool,
    /// The run's v1 cgroups' `tasks` files (close-on-exec): the first stage
    /// writes `0` to each, moving itself before it creates anything
    /// (`RunCgroup::self_join_files`).
    pub cgroup_tasks: Vec<RawFd>,
    /// The supervisor's pid, to detect its death before PR_SET_PDEATHSIG took effect
    /// (0 when the child is in a new pid namespace and cannot see it).
    pub parent_pid: libc::pid_t,
    /// The proxy's endpoint in the run's network namespace, made by init
    /// (proxy mode, netns path).
    pub net_setup: Option<NetSetup>,
    /// Bring the run's loopback up (its own network namespace, the run's own
    /// loopback allowed); proxy mode's `net_setup` does it as well.
    pub loopback_up: bool,
    /// The run's view of the host, mounted by init in its new mount namespace.
    pub view: Option<crate::sandbox::view::View>,
    /// The first stage is the keeper ([`keeper_main`]; the no-namespace
    /// path), which creates the command (set by `spawn`).
    pub keeper: bool,
    /// The child's end of the channel (set by `spawn`).
    pub chan: RawFd,
    /// Top of the stack the command stage runs on when init creates it (set by `spawn`).
    pub command_stack: Option<crate::sys::StageStack>,
    /// A trial (`supervisor::spawn::trial`): init builds the namespaces,
    /// reports, and exits without creating the command.
    pub trial: bool,
}

impl ChildSpec {
    /// A spec with the command's strings; the rest is filled in by the caller.
    pub fn new(
        program: CString,
        argv: Vec<CString>,
        envp: Vec<CString>,
        cwd: CString,
    ) -> ChildSpec {
        ChildSpec {
            program,
            argv,
            argv_ptrs: Vec::new(),
            envp,
            envp_ptrs: Vec::new(),
            sh_argv: Vec::new(),
            sh_argv_ptrs: Vec::new(),
            cwd,
            stdout_w: None,
            stderr_w: None,
            stdin_r: None,
            ctty: None,
            rpc_fd: None,
            rlimits: Vec::new(),
            landlock: None,
            seccomp: None,
            notify_filter: None,
            truncate_guard: None,
            wait_go: false,
            cgroup_tasks: Vec::new(),
            parent_pid: 0,
            net_setup: None,
            loopback_up: false,
            view: None,
            keeper: false,
            chan: -1,
            command_stack: None,
            trial: false,
        }
    }

    /// Build argv/envp CStrings.
    pub fn strings(
        program: &std::path::Path,
        argv: &[String],
        env: &[(String, String)],
        cwd: &std::path::Path,
    ) -> Result<(CString, Vec<CString>, Vec<CString>, CString), std::ffi::NulError> {
        use std::os::unix::ffi::OsStrExt;
        let program = CString::new(program.as_os_str().as_bytes())?;
        let argv = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()?;
        let cwd = CString::new(cwd.as_os_str().as_bytes())?;
        Ok((program, argv, envp, cwd))
    }

    /// Fill the argv/envp pointer arrays: the last step before the spec is
    /// handed to `spawn`.
    pub fn seal(&mut self) {
        self.sh_argv = std::iter::once(c"/bin/sh".to_owned())
            .chain(std::iter::once(self.program.clone()))
            .chain(self.argv.iter().skip(1).cloned())
            .collect();
        self.argv_ptrs = null_terminated(&self.argv);
        self.envp_ptrs = null_terminated(&self.envp);
        self.sh_argv_ptrs = null_terminated(&self.sh_argv);
    }
}

/// Pointers to `strings`, then NULL: an argv or envp for execve.
fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

impl crate::sys::stage::Stages for ChildSpec {
    fn init_main(&'static self) -> c_int {
        init_main(self)
    }
    fn keeper_main(&'static self) -> c_int {
        keeper_main(self)
    }
    fn command_main(&'static self) -> c_int {
        command_main(self)
    }
    fn exec_args(&self) -> (&CStr, &[*const c_char], &[*const c_char]) {
        (&self.program, &self.argv_ptrs, &self.envp_ptrs)
    }
    fn sh_fallback_args(&self) -> &[*const c_char] {
        &self.sh_argv_ptrs
    }
}

fn report(chan: RawFd, msg: Msg) {
    let _ = raw::send(chan, &msg.encode());
}

fn fail(spec: &ChildSpec, stage: Stage, errno: i32) -> ! {
    report(spec.chan, Msg::SetupFailed { stage, errno });
    raw::exit_group(125)
}

/// Block until the supervisor's "go"; exit quietly if it went away.
fn wait_go(spec: &ChildSpec) {
    let mut b = [0u8; 1];
    match raw::recv(spec.chan, &mut b, 0) {
        Ok(1) if b[0] == b'g' => {}
        _ => raw::exit_group(125),
    }
}

/// The first stage moves itself into the run's v1 cgroups (a lone thread
/// naming itself: no global lock in the kernel) before it creates anything;
/// the command and everything it starts inherit them.
fn join_cgroups(spec: &ChildSpec) {
    for &fd in &spec.cgroup_tasks {
        match raw::write(fd, b"0") {
            Ok(1) => {}
            Ok(_) => fail(spec, Stage::Cgroup, libc::EIO),
            Err(e) => fail(spec, Stage::Cgroup, e),
        }
    }
}

/// The signals init passes on to every process of the run.
const FORWARDED: [c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// Pid 1 of the run's pid namespace. `arg` is the leaked `&'static ChildSpec`.
/// Starts with every signal blocked (the supervisor blocks them around the clone).
pub(crate) fn init_main(spec: &'static ChildSpec) -> c_int {
    if let Err(e) = raw::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize) {
        fail(spec, Stage::Session, e);
    }
    if spec.wait_go {
        wait_go(spec);
    } else {
        // The supervisor may have died before PR_SET_PDEATHSIG took effect:
        // then its end of the channel is closed and a peek sees end-of-file.
        let mut b = [0u8; 1];
        if raw::recv(spec.chan, &mut b, libc::MSG_PEEK | libc::MSG_DONTWAIT) == Ok(0) {
            raw::exit_group(125);
        }
    }
    join_cgroups(spec);
    if let Some(view) = &spec.view {
        // The private /proc shows init to the run as pid 1, and init shares
        // the supervisor's memory (its environment may hold provider keys):
        // a non-dumpable mm makes /proc/1's environ, mem, maps and fds
        // unreadable to the run (they need ptrace rights over it).
        if let Err(e) = raw::prctl(libc::PR_SET_DUMPABLE, 0) {
            fail(spec, Stage::View, e);
        }
        let ruleset = spec
            .landlock
            .as_ref()
            .and_then(|l| l.ruleset.as_ref())
            .map_or(-1, |fd| fd.as_raw_fd());
        if let Err((stage, e)) = view.apply(ruleset) {
            fail(spec, stage, e);
        }
    }
    if let Some(net) = &spec.net_setup {
        if let Err(e) = netns::setup(net, spec.chan) {
            fail(spec, Stage::Network, e);
        }
    } else if spec.loopback_up {
        if let Err(e) = netns::loopback_up() {
            fail(spec, Stage::Network, e);
        }
    }
    // The namespaces are built: the supervisor commits to this path (or,
    // for a trial, has its answer) before anything of the command runs.
    report(spec.chan, Msg::Ready);
    if spec.trial {
        raw::exit_group(0);
    }
    // The command stage runs on its own stack (`command_stack`), reads only
    // the leaked spec, and either execs or exits; CLONE_VFORK keeps this
    // stage asleep until then.
    let Some(stack) = spec.command_stack else {
        fail(spec, Stage::Fork, libc::EINVAL)
    };
    let cmd = match crate::sys::stage::clone_stage(
        libc::CLONE_VFORK,
        stack,
        crate::sys::stage::Entry::Command,
        spec,
    ) {
        Ok(pid) => pid,
        Err(e) => fail(spec, Stage::Fork, e),
    };
    keep_only_channel(spec);
    let mut waited = SigSet::of(&FORWARDED);
    waited.0 |= SigSet::of(&[libc::SIGCHLD]).0;
    loop {
        match raw::sigwait(waited) {
            Ok(s) if s as c_int == libc::SIGCHLD => {
                if let Some(end) = reap(cmd) {
                    // The command is done: nothing it left behind survives it.
                    // Every process of the namespace descends from init, so
                    // when init has no child left there is nothing to kill
                    // (and kill(-1) walks every task of the system).
                    if raw::wait4(-1, libc::WNOHANG | libc::__WALL) != Err(libc::ECHILD) {
                        raw::kill(-1, libc::SIGKILL);
                        while raw::wait4(-1, libc::__WALL).is_ok() {}
                    }
                    report(
                        spec.chan,
                        Msg::Exited {
                            status: end.status,
                            cpu_ms: end.cpu_ms,
                        },
                    );
                    raw::exit_group(0);
                }
            }
            Ok(s) => raw::kill(-1, s as c_int),
            Err(_) => {}
        }
    }
}

/// Keep nothing but stdio and the channel (init, the keeper): not the
/// command's plumbing (end-of-file on the capture pipes and the RPC socket
/// must mean that every process of the run is gone), nor the Landlock
/// ruleset or the plan's O_PATH descriptors. The descriptor table is the
/// stage's own copy (no CLONE_FILES). Where close_range is missing or
/// filtered (an outer seccomp profile), at least the plumbing goes.
fn keep_only_channel(spec: &ChildSpec) {
    let below = if spec.chan > 3 {
        raw::close_range(3, (spec.chan - 1) as std::ffi::c_uint)
    } else {
        Ok(0)
    };
    let above = raw::close_range(spec.chan + 1, std::ffi::c_uint::MAX);
    if below.is_err() || above.is_err() {
        for fd in [
            spec.stdout_w,
            spec.stderr_w,
            spec.stdin_r,
            spec.ctty,
            spec.rpc_fd,
        ]
        .into_iter()
        .flatten()
        {
            raw::close(fd);
        }
        if let Some(fd) = spec.landlock.as_ref().and_then(|l| l.ruleset.as_ref()) {
            raw::close(fd.as_raw_fd());
        }
    }
}

/// The signal the keeper asks for when capsule dies (PR_SET_PDEATHSIG). It
/// is a notice, not a verdict: the keeper then asks whether its parent is
/// still capsule, so the same signal from anyone else changes nothing.
const KEEPER_DEATH_NOTICE: c_int = libc::SIGTERM;

/// The keeper, capsule's child where the run has no pid namespace (see the
/// module docs). Starts with every signal blocked, like init.
pub(crate) fn keeper_main(spec: &'static ChildSpec) -> c_int {
    if let Err(e) = raw::prctl(libc::PR_SET_PDEATHSIG, KEEPER_DEATH_NOTICE as usize) {
        fail(spec, Stage::Session, e);
    }
    // capsule died before PR_SET_PDEATHSIG took effect: nothing of the run exists yet.
    if raw::getppid() != spec.parent_pid {
        raw::exit_group(125);
    }
    if let Err(e) = raw::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) {
        fail(spec, Stage::Session, e);
    }
    // The cgroup (if any) is joined by the keeper: the command inherits it.
    if spec.wait_go {
        wait_go(spec);
    }
    join_cgroups(spec);
    let Some(stack) = spec.command_stack else {
        fail(spec, Stage::Fork, libc::EINVAL)
    };
    let cmd = match crate::sys::stage::clone_stage(
        libc::CLONE_VFORK,
        stack,
        crate::sys::stage::Entry::Command,
        spec,
    ) {
        Ok(pid) => pid,
        Err(e) => fail(spec, Stage::Fork, e),
    };
    keep_only_channel(spec);
    let waited = SigSet::of(&[libc::SIGCHLD, KEEPER_DEATH_NOTICE]);
    loop {
        match raw::sigwait(waited) {
            Ok(s) if s as c_int == libc::SIGCHLD => {
                if let Some(end) = reap(cmd) {
                    kill_every_child();
                    report(
                        spec.chan,
                        Msg::Exited {
                            status: end.status,
                            cpu_ms: end.cpu_ms,
                        },
                    );
                    raw::exit_group(0);
                }
            }
            Ok(_) => {
                if raw::getppid() != spec.parent_pid {
                    // capsule is gone: so is the run.
                    kill_every_child();
                    raw::exit_group(0);
                }
            }
            Err(_) => {}
        }
    }
}

/// SIGKILL every child of this process, round after round, reaping each,
/// until none is left. The keeper is a child subreaper: a process of the run
/// whose parent dies is reparented to it before that parent can be reaped, so
/// once it has no child, nothing of the run is left. A fork racing the kill
/// is bounded by the run's process limit and by capsule's absence (the
/// process guard's listener is gone: a guarded fork fails).
fn kill_every_child() {
    loop {
        if !kill_listed_children() {
            // No list of children (no /proc here, or a kernel built without
            // CONFIG_PROC_CHILDREN; planning reports it): reap what ended and
            // never wait for a child nothing killed.
            while let Ok((pid, _)) = raw::wait4(-1, libc::WNOHANG | libc::__WALL) {
                if pid <= 0 {
                    break;
                }
            }
            return;
        }
        if raw::wait4(-1, libc::__WALL).is_err() {
            // ECHILD: none left.
            return;
        }
    }
}

/// The keeper's list of its children (single-threaded: its one thread's).
pub const CHILDREN_FILE: &std::ffi::CStr = c"/proc/thread-self/children";

/// SIGKILL each child [`CHILDREN_FILE`] lists (a child cannot be reused
/// before it is reaped, so each pid is one of ours); false when the list
/// cannot be read.
fn kill_listed_children() -> bool {
    let Ok(fd) = raw::openat(
        libc::AT_FDCWD,
        CHILDREN_FILE,
        libc::O_RDONLY | libc::O_CLOEXEC,
    ) else {
        return false;
    };
    let fd = fd as c_int;
    let mut buf = [0u8; 512];
    let (mut pid, mut digits) = (0 as c_int, false);
    let ok = loop {
        let n = match raw::read(fd, &mut buf) {
            Ok(0) => break true,
            Ok(n) => n,
            Err(_) => break false,
        };
        for &b in &buf[..n.min(buf.len())] {
            if b.is_ascii_digit() {
                pid = pid.saturating_mul(10).saturating_add(c_int::from(b - b'0'));
                digits = true;
            } else {
                if digits && pid > 0 {
                    raw::kill(pid, libc::SIGKILL);
                }
                (pid, digits) = (0, false);
            }
        }
    };
    if digits && pid > 0 {
        raw::kill(pid, libc::SIGKILL);
    }
    raw::close(fd);
    ok
}

/// Make the command, and every process it starts, the OOM killer's first
/// choice (`oom_score_adj` 1000; raising it needs no privilege, and Landlock
/// keeps the run from writing it back down). init and the keeper share
/// capsule's memory (CLONE_VM) and sit in the run's memory cgroup: were one
/// of them the victim, the kernel would SIGKILL every process sharing that
/// memory, capsule included (no result, no audit record, and without a pid
/// namespace the run's daemons left behind). This stage is a vfork child, so
/// the value stays its own and is not copied to capsule. Best effort: a
/// /proc that refuses it changes nothing else.
fn oom_first() {
    if let Ok(fd) = raw::openat(
        libc::AT_FDCWD,
        c"/proc/self/oom_score_adj",
        libc::O_WRONLY | libc::O_CLOEXEC,
    ) {
        let _ = raw::write(fd as c_int, b"1000");
        raw::close(fd as c_int);
    }
}

/// How the command ended, as its parent (init, the keeper) saw it.
#[derive(Clone, Copy)]
struct CommandEnd {
    /// Its raw wait status.
    status: c_int,
    /// The CPU time it had used, in milliseconds (-1: unknown).
    cpu_ms: c_int,
}

/// Reap every exited child without blocking; how the command ended if it was
/// among them. Each exited child is looked at before it is reaped
/// (`peek_exited`, which leaves it a zombie): the command's CPU clock is read
/// while it still exists, and is exactly the one RLIMIT_CPU was checked
/// against, whatever its reaped children used.
fn reap(cmd: c_int) -> Option<CommandEnd> {
    let mut found = None;
    while let Some(pid) = raw::peek_exited() {
        let cpu_ms = if pid == cmd {
            raw::process_cpu_time_ns(cmd)
                .map(|ns| c_int::try_from(ns / 1_000_000).unwrap_or(c_int::MAX))
                .unwrap_or(-1)
        } else {
            -1
        };
        match raw::wait4(pid, libc::WNOHANG | libc::__WALL) {
            Ok((p, status)) if p == pid => {
                if p == cmd {
                    found = Some(CommandEnd { status, cpu_ms });
                }
            }
            // Not reaped after all: never spin on it; the loop below reaps.
            _ => break,
        }
    }
    // Whatever waitid could not show (a kernel or profile that refuses it):
    // reaped as before, the command's CPU time then unknown.
    while let Ok((pid, status)) = raw::wait4(-1, libc::WNOHANG | libc::__WALL) {
        if pid <= 0 {
            break;
        }
        if pid == cmd {
            found = Some(CommandEnd { status, cpu_ms: -1 });
        }
    }
    found
}

/// Confine this process and exec the command. `arg` is the leaked
/// `&'static ChildSpec`. Never returns.
///
/// Each step below is a plain function call on this stage's own stack: the
/// rules of the module (no allocation, no lock, raw system calls only) hold
/// in every one of them.
pub(crate) fn command_main(spec: &'static ChildSpec) -> c_int {
    tie_to_parent(spec);
    oom_first();
    session_and_stdio(spec);
    drop_privileges(spec);
    restrict_paths(spec);
    close_on_exec(spec);
    install_filters(spec);
    set_limits(spec);
    let err = crate::sys::stage::exec(spec);
    report(spec.chan, Msg::ExecFailed { errno: err });
    raw::exit_group(if err == libc::ENOENT { 127 } else { 126 })
}

/// The command's signal state, its death with its parent, and its parent
/// still there (the keeper, init or the supervisor); then the supervisor's
/// "go" where it is the parent.
#[inline]
fn tie_to_parent(spec: &ChildSpec) {
    // Default dispositions and an empty mask for the command. execve resets
    // caught signals by itself; only ignored ones survive it, and Rust's
    // SIGPIPE = ignore must not leak into the command (`yes | head` would
    // never end).
    let _ = raw::default_action(libc::SIGPIPE);
    let _ = raw::sigprocmask(libc::SIG_SETMASK, SigSet::EMPTY);
    if let Err(e) = raw::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize) {
        fail(spec, Stage::Session, e);
    }
    if spec.keeper {
        // Created by the keeper: capsule (a child subreaper too) or init is
        // its parent only if the keeper died before PR_SET_PDEATHSIG took
        // effect. Then capsule learns the command's pid, the first word on
        // the channel from this stage, with a pidfd of this process: the
        // keeper reaps the command, after which its pid may be anyone's, so
        // capsule signals the command through that descriptor only
        // (`supervisor::event_loop::signal_run`). Where pidfd_open is
        // refused (an outer seccomp profile), the pid comes alone.
        let parent = raw::getppid();
        if parent == spec.parent_pid || parent == 1 {
            raw::exit_group(125);
        }
        let me = raw::getpid();
        let word = Msg::Command { pid: me }.encode();
        match raw::pidfd_open(me) {
            Ok(fd) => {
                if raw::send_with_fd(spec.chan, &word, fd).is_err() {
                    let _ = raw::send(spec.chan, &word);
                }
                raw::close(fd);
            }
            Err(_) => {
                let _ = raw::send(spec.chan, &word);
            }
        }
    } else if spec.parent_pid != 0 && raw::getppid() != spec.parent_pid {
        // The supervisor may have died before PR_SET_PDEATHSIG took effect.
        raw::exit_group(125);
    }
    if spec.wait_go && spec.parent_pid != 0 && !spec.keeper {
        wait_go(spec);
    }
}

/// A session of its own, the run's terminal as its controlling terminal,
/// stdio onto 0, 1 and 2, and the working directory.
#[inline]
fn session_and_stdio(spec: &ChildSpec) {
    if let Err(e) = raw::setsid() {
        fail(spec, Stage::Session, e);
    }
    if let Some(tty) = spec.ctty {
        if let Err(e) = raw::set_controlling_tty(tty) {
            fail(spec, Stage::Stdio, e);
        }
    }
    for (src, dst) in [(spec.stdin_r, 0), (spec.stdout_w, 1), (spec.stderr_w, 2)] {
        if let Some(src) = src {
            if let Err(e) = raw::dup_onto(src, dst) {
                fail(spec, Stage::Stdio, e);
            }
        }
    }
    if let Err(e) = raw::chdir(&spec.cwd) {
        fail(spec, Stage::Cwd, e);
    }
}

/// No capability left, and none to be gained (NO_NEW_PRIVS).
#[inline]
fn drop_privileges(spec: &ChildSpec) {
    if let Err(e) = drop_capabilities() {
        fail(spec, Stage::Capabilities, e);
    }
    if let Err(e) = raw::prctl(libc::PR_SET_NO_NEW_PRIVS, 1) {
        fail(spec, Stage::NoNewPrivs, e);
    }
}

/// The Landlock domain, from the ruleset the parent built.
#[inline]
fn restrict_paths(spec: &ChildSpec) {
    if let Some(ll) = &spec.landlock {
        if let Err(e) = ll.restrict() {
            fail(spec, Stage::Landlock, e);
        }
    }
}

/// Every inherited descriptor above stderr goes at exec, except the RPC
/// end; the channel stays usable until then to report an exec failure.
#[inline]
fn close_on_exec(spec: &ChildSpec) {
    if let Err(e) = cloexec_from(3) {
        fail(spec, Stage::Fds, e);
    }
    if let Some(rpc) = spec.rpc_fd {
        if let Err(e) = raw::fcntl(rpc, libc::F_SETFD, 0) {
            fail(spec, Stage::Fds, e);
        }
    }
}

/// The seccomp filters, in order: the main program, the truncate guard, the
/// notify filter (its listener sent to the supervisor where it has one).
#[inline]
fn install_filters(spec: &ChildSpec) {
    if let Some(filters) = &spec.seccomp {
        if let Err(e) = filters.install() {
            fail(spec, Stage::Seccomp, e as i32);
        }
    }
    if let Some(guard) = &spec.truncate_guard {
        if let Err(e) = guard.install() {
            fail(spec, Stage::Seccomp, e);
        }
    }
    // The notify filter is the last filter, and its listener leaves this process
    // before exec: a process of the run that held it could answer its own
    // calls. The kernel made it close-on-exec; it is closed here anyway.
    if let Some((sig, false)) = &spec.notify_filter {
        if let Err(e) = sig.install() {
            fail(spec, Stage::SignalFilter, e);
        }
    }
    if let Some((sig, true)) = &spec.notify_filter {
        let fd = match sig.install_with_listener() {
            Ok(fd) => fd,
            Err(e) => fail(spec, Stage::SignalFilter, e),
        };
        let tag = seccomp::signals::LISTENER_TAG;
        let sent = raw::send_with_fd(spec.chan, &Msg::Fd { tag }.encode(), fd);
        raw::close(fd);
        if let Err(e) = sent {
            fail(spec, Stage::SignalFilter, e);
        }
    }
}

/// The resource limits, last: they come after every descriptor this stage
/// opens or inherits (the plan's O_PATH descriptors, /proc/self, the signal
/// filter's listener), so a small max_open_files binds the command and does
/// not make its own confinement fail. They close at exec. The seccomp
/// program lets prlimit64 on the caller itself through.
#[inline]
fn set_limits(spec: &ChildSpec) {
    for &(res, val) in &spec.rlimits {
        if let Err(e) = raw::set_rlimit(res, val) {
            fail(spec, Stage::Rlimits, e);
        }
    }
}

/// Empty every capability set: bounding (needs CAP_SETPCAP, which root and a
/// fresh user namespace have; without it NO_NEW_PRIVS already stops any gain),
/// ambient, then effective/permitted/inheritable.
fn drop_capabilities() -> Result<(), i32> {
    if raw::prctl(libc::PR_CAPBSET_READ, 0).is_ok() {
        for cap in 0..=63usize {
            match raw::prctl(libc::PR_CAPBSET_DROP, cap) {
                Ok(_) => {}
                Err(libc::EINVAL) => break,
                Err(libc::EPERM) => {}
                Err(e) => return Err(e),
            }
        }
    }
    // EINVAL on kernels without ambient capabilities.
    let _ = raw::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as usize,
    );
    raw::clear_capabilities().map(drop)
}

/// Mark every descriptor from `first` upwards close-on-exec.
fn cloexec_from(first: c_int) -> Result<(), i32> {
    if raw::cloexec_range(first).is_ok() {
        return Ok(());
    }
    // Kernels before 5.11: walk the table up to a bound.
    for fd in first..65536 {
        let _ = raw::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC as usize);
    }
    Ok(())
}

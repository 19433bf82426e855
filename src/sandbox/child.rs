//! What runs in the forked child, between fork and exec.
//!
//! The supervisor is single-threaded when it forks (see `supervisor::spawn`),
//! so this code may allocate, but it is kept to the minimum: everything it
//! touches — argv/envp pointer arrays, the working directory, the Landlock
//! ruleset with its rules, the seccomp BPF programs, the rlimits — was built
//! before fork in a [`ChildSpec`]. Each step that fails reports
//! `SetupFailed { stage, errno }` on the channel and exits 125: nothing runs.
//!
//! Two shapes:
//! * [`init_stage`]: when the child is pid 1 of a fresh pid namespace. It
//!   forks the command, forwards the signals the supervisor sends it to every
//!   process of the namespace, reaps orphans, and when the command ends kills
//!   whatever is left, reports the wait status and exits. If the supervisor
//!   dies, PR_SET_PDEATHSIG kills init and with it the whole namespace.
//! * [`command_stage`]: confines this process and execs the command.

use std::ffi::{c_char, CString};
use std::os::fd::RawFd;

use nix::errno::Errno;
use nix::sys::resource::{setrlimit, Resource};

use crate::sandbox::{landlock, seccomp};
use crate::sys::{self, channel::Channel, channel::Msg, channel::Stage};

/// A set-up step run by the init stage inside the new namespaces, before it forks
/// the command (proxy mode: the network namespace's endpoint).
pub type NetSetup = fn(&Channel) -> Result<(), Errno>;

/// Everything the child needs, prepared in the parent.
pub struct ChildSpec {
    pub program: CString,
    pub argv: Vec<CString>,
    pub argv_ptrs: Vec<*const c_char>,
    pub envp: Vec<CString>,
    pub envp_ptrs: Vec<*const c_char>,
    pub cwd: CString,
    /// Write ends of the capture pipes, dup'ed onto 1 and 2 (None: inherit).
    pub stdout_w: Option<RawFd>,
    pub stderr_w: Option<RawFd>,
    /// The child's end of the RPC socketpair, kept open across exec at this number.
    pub rpc_fd: Option<RawFd>,
    pub rlimits: Vec<(Resource, u64)>,
    pub landlock: Option<landlock::Prepared>,
    pub seccomp: Option<seccomp::Filters>,
    /// Wait for the supervisor's "go" (uid maps written, cgroup joined).
    pub wait_go: bool,
    /// The supervisor's pid, to detect its death before PR_SET_PDEATHSIG took effect
    /// (0 when the child is in a new pid namespace and cannot see it).
    pub parent_pid: libc::pid_t,
    /// Hook for the network namespace set-up of proxy mode (runs in init, before the fork).
    pub net_setup: Option<NetSetup>,
}

impl ChildSpec {
    /// Build argv/envp CStrings and their NULL-terminated pointer arrays.
    pub fn strings(
        program: &std::path::Path,
        argv: &[String],
        env: &[(String, String)],
        cwd: &std::path::Path,
    ) -> Result<(CString, Vec<CString>, Vec<CString>, CString), std::ffi::NulError> {
        use std::os::unix::ffi::OsStrExt;
        let program = CString::new(program.as_os_str().as_bytes())?;
        let argv = argv.iter().map(|a| CString::new(a.as_bytes())).collect::<Result<Vec<_>, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")))
            .collect::<Result<Vec<_>, _>>()?;
        let cwd = CString::new(cwd.as_os_str().as_bytes())?;
        Ok((program, argv, envp, cwd))
    }

    /// Pointer arrays into `argv`/`envp`; call after the strings are in place.
    pub fn fill_pointers(&mut self) {
        self.argv_ptrs = self.argv.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        self.envp_ptrs = self.envp.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    }
}

fn fail(chan: &Channel, stage: Stage, errno: Errno) -> ! {
    let _ = chan.send(Msg::SetupFailed { stage, errno: errno as i32 });
    sys::exit_now(125)
}

/// Pid 1 of the run's pid namespace.
pub fn init_stage(spec: &mut ChildSpec, chan: &Channel) -> ! {
    if let Err(e) = sys::set_parent_death_signal(libc::SIGKILL) {
        fail(chan, Stage::Session, e);
    }
    sys::block_all_signals();
    if spec.wait_go && !chan.wait_go() {
        sys::exit_now(125);
    }
    if let Some(setup) = spec.net_setup {
        if let Err(e) = setup(chan) {
            fail(chan, Stage::Network, e);
        }
    }
    let cmd = match sys::fork() {
        Ok(pid) => pid,
        Err(e) => fail(chan, Stage::Fork, e),
    };
    if cmd == 0 {
        spec.wait_go = false;
        command_stage(spec, chan);
    }
    // Init keeps nothing of the command's plumbing, so that end-of-file on
    // the capture pipes means every process of the run is gone.
    for fd in [spec.stdout_w, spec.stderr_w, spec.rpc_fd].into_iter().flatten() {
        let _ = nix::unistd::close(fd);
    }
    drop(spec.landlock.take());
    let waited = sys::sigset_of(&[
        libc::SIGCHLD,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGWINCH,
    ]);
    loop {
        match sys::sigwait_any(&waited) {
            libc::SIGCHLD => {
                if let Some(status) = reap(cmd) {
                    // The command is done: nothing it left behind survives it.
                    sys::signal(-1, libc::SIGKILL);
                    while sys::wait_any() {}
                    let _ = chan.send(Msg::Exited { status });
                    sys::exit_now(0);
                }
            }
            0 => {}
            sig => sys::signal(-1, sig),
        }
    }
}

/// Reap every exited child without blocking; the command's wait status if it was among them.
fn reap(cmd: libc::pid_t) -> Option<i32> {
    let mut found = None;
    while let Some((pid, status)) = sys::try_wait(-1) {
        if pid == cmd {
            found = Some(status);
        }
    }
    found
}

/// Confine this process and exec the command. Never returns.
pub fn command_stage(spec: &mut ChildSpec, chan: &Channel) -> ! {
    sys::reset_signals();
    if let Err(e) = sys::set_parent_death_signal(libc::SIGKILL) {
        fail(chan, Stage::Session, e);
    }
    // The supervisor may have died before PR_SET_PDEATHSIG took effect.
    if spec.parent_pid != 0 && nix::unistd::getppid().as_raw() != spec.parent_pid {
        sys::exit_now(125);
    }
    if spec.wait_go && !chan.wait_go() {
        sys::exit_now(125);
    }
    if let Err(e) = nix::unistd::setsid() {
        fail(chan, Stage::Session, e);
    }
    for (src, dst) in [(spec.stdout_w, 1), (spec.stderr_w, 2)] {
        if let Some(src) = src {
            if let Err(e) = sys::dup2(src, dst) {
                fail(chan, Stage::Stdio, e);
            }
        }
    }
    for &(res, val) in &spec.rlimits {
        if let Err(e) = setrlimit(res, val, val) {
            fail(chan, Stage::Rlimits, e);
        }
    }
    if let Err(e) = nix::unistd::chdir(spec.cwd.as_c_str()) {
        fail(chan, Stage::Cwd, e);
    }
    if let Err(e) = sys::drop_all_capabilities() {
        fail(chan, Stage::Capabilities, e);
    }
    if let Err(e) = sys::set_no_new_privs() {
        fail(chan, Stage::NoNewPrivs, e);
    }
    if let Some(ll) = spec.landlock.take() {
        if ll.restrict_in_child().is_err() {
            // The parent already checked what this kernel supports; a failure
            // here means the restriction was refused or weaker than promised.
            fail(chan, Stage::Landlock, Errno::EPERM);
        }
    }
    // Every inherited descriptor above stderr goes at exec, except the RPC
    // end; the channel stays usable until then to report an exec failure.
    if let Err(e) = sys::cloexec_from(3) {
        fail(chan, Stage::Fds, e);
    }
    if let Some(rpc) = spec.rpc_fd {
        if let Err(e) = sys::keep_across_exec(rpc) {
            fail(chan, Stage::Fds, e);
        }
    }
    if let Some(filters) = spec.seccomp.as_ref() {
        if let Err(e) = filters.install() {
            fail(chan, Stage::Seccomp, e);
        }
    }
    let err = sys::execve(&spec.program, &spec.argv_ptrs, &spec.envp_ptrs);
    let _ = chan.send(Msg::ExecFailed { errno: err as i32 });
    sys::exit_now(if err == Errno::ENOENT { 127 } else { 126 })
}

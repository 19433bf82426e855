//! `capsule serve`: a long-lived parent that runs one `capsule exec` per
//! request, each in a fresh process forked from it (protocol: docs/serve.md).
//!
//! The server reads newline-delimited JSON requests on stdin and writes one
//! JSON response line per request on stdout. It stays single-threaded (no
//! async runtime, no thread alive at fork time) and, for each request, forks
//! a step process that runs exactly the code of `capsule exec ARGS`: the
//! same parsing, refusals, planning (afresh: nothing about grants is kept
//! from one step to the next), confined child, result object and audit
//! record. What a run leaks on purpose (the child's spec and stage stacks)
//! dies with its step process. The server saves the exec of capsule, the
//! dynamic loader's work, the build of the argument parser (made once,
//! before any fork) and the wait for a step's teardown (a step reports its
//! exit status on a pipe when `capsule exec` returns; the server answers
//! then and reaps after); a step still pays for its planning and its
//! namespaces.
//!
//! The server's death ends every step: each step process has
//! PR_SET_PDEATHSIG (SIGTERM, the signal `capsule exec` answers by killing
//! its run's tree), and each run's own child dies with its supervisor
//! (PR_SET_PDEATHSIG, the pid namespace). A caller that closes stdin gets
//! the responses of the steps still running, then the server exits.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use clap::Args;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error_line;
use crate::sys::raw;
use crate::sys::serve::{
    fork_step, recv_status, send_json_mode, send_status, status_pair, Forked, Status,
};

/// The longest request line; a longer one is answered with an error and skipped.
pub const MAX_LINE: usize = 1 << 20;

/// What one read takes from the caller or from a step's output.
const CHUNK: usize = 64 * 1024;
/// Requests read ahead of the steps running (then stdin is not read).
const MAX_PENDING: usize = 64;
/// Where a step's process finds its report channel.
const STATUS_FD: i32 = 3;
/// Held network namespaces closed together (`supervisor::ns_hold`)...
const NETNS_BATCH: usize = 16;
/// ...or this long after the oldest came.
const NETNS_LINGER: Duration = Duration::from_secs(1);

/// `capsule serve --help` and its man page.
pub const LONG_ABOUT: &str = "A long-lived parent that runs one `capsule exec` per request, each in a \
fresh process forked from it: planned afresh, confined, reported and audited exactly as \
`capsule exec` (docs/serve.md).\n\n\
Requests are JSON objects, one per line on stdin (at most 1 MiB): \
{\"id\": 1, \"args\": [\"--json\", \"--\", \"/bin/true\"]} with optional \"policy\" \
(the policy as text), \"env\", \"clear_env\", \"cwd\", \"stdin\" or \"stdin_base64\"; \
{\"id\": 1, \"op\": \"cancel\"} ends a running request. Each gets one response line on stdout: \
{\"id\", \"exit_code\", \"result\" (with --json) or \"stdout\", \"stderr\"}, or {\"id\", \"error\"}. \
EOF on stdin: the running requests are answered, then the server exits. \
The server's death (even SIGKILL) ends every running request.";

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Most steps running at once; further requests wait for one to end.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_parallel: u32,
    /// Bytes of each step's stdout and of its stderr kept for its response (the rest is counted,
    /// dropped); a step run with --json has its result line kept whole (its size follows the
    /// step's policy: up to ~12x limits.max_output_bytes, both streams JSON-escaped).
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    pub max_output: u64,
}

/// One request line (docs/serve.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    #[allow(dead_code)] // read from the raw object, so that even a bad request's reply has it
    id: Value,
    /// "exec" (the default) or "cancel".
    #[serde(default)]
    op: Option<String>,
    /// What `capsule exec` takes after `exec`: flags, `--`, the command.
    #[serde(default)]
    args: Vec<String>,
    /// A policy as text (YAML or JSON), instead of `--policy FILE`.
    #[serde(default)]
    policy: Option<String>,
    /// Variables set in the step's environment (capsule's own, as for a
    /// `capsule exec` started with them; the run's child gets what the
    /// policy passes).
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Start the step from an empty environment instead of the server's.
    #[serde(default)]
    clear_env: bool,
    /// The step's working directory (default: the server's).
    #[serde(default)]
    cwd: Option<String>,
    /// The run's stdin as text; absent: /dev/null.
    #[serde(default)]
    stdin: Option<String>,
    /// The run's stdin as base64 (binary data).
    #[serde(default)]
    stdin_base64: Option<String>,
}

struct Stream {
    fd: Option<OwnedFd>,
    kept: Vec<u8>,
    total: u64,
}

impl Stream {
    fn new(fd: OwnedFd) -> Stream {
        Stream {
            fd: Some(fd),
            kept: Vec::new(),
            total: 0,
        }
    }

    /// Read what is there now (the descriptor is non-blocking), through
    /// the server's `chunk`; false at EOF.
    fn pump(&mut self, cap: u64, buf: &mut [u8]) -> bool {
        let Some(fd) = &self.fd else { return false };
        loop {
            match nix::unistd::read(fd, buf) {
                Ok(0) => {
                    self.fd = None;
                    return false;
                }
                Ok(n) => {
                    self.total += n as u64;
                    let room = cap.saturating_sub(self.kept.len() as u64) as usize;
                    self.kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => return true,
                Err(_) => {
                    self.fd = None;
                    return false;
                }
            }
        }
    }
}

struct Step {
    id: Value,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    /// The step said it runs with `--json` ([`Status::Json`]): its own
    /// parsing, so a `--json` that is the command's argument does not count.
    json: bool,
    out: Stream,
    err: Stream,
    /// The step's report: its exit status, sent when `capsule exec` has
    /// returned (the run over, its tree gone, its record written), with
    /// the run's network namespace when the step could hold it.
    status: Option<OwnedFd>,
    code: Option<i32>,
    netns: Option<OwnedFd>,
}

impl Step {
    /// What is kept of the step's stdout. With `--json` that is capsule's
    /// own result line, kept whole: cut at `--max-output` it would be no
    /// result at all, and its size follows the step's policy (the run's
    /// stdout and stderr in it, each bounded by `limits.max_output_bytes`,
    /// take up to six times that once JSON-escaped). Otherwise the step's
    /// stdout carries the run's own output, kept up to `--max-output`.
    fn out_cap(&self, max_output: u64) -> u64 {
        if self.json {
            u64::MAX
        } else {
            max_output
        }
    }

    /// Read what the step has sent on its report channel (non-blocking):
    /// that it runs with `--json`, then its report.
    fn read_status(&mut self) {
        while let Some(fd) = &self.status {
            match recv_status(fd) {
                Status::Json => self.json = true,
                Status::Report(code, netns) => {
                    self.code = Some(code);
                    self.netns = netns;
                    self.status = None;
                }
                Status::Pending => return,
                // EOF (or a malformed report): the step ended without
                // reporting; its response waits for its exit status.
                Status::Gone => self.status = None,
            }
        }
    }
}

/// The server's stdout, written with plain write(2): no buffer of std's
/// `Stdout` that a forked step could inherit and flush.
struct Out(ManuallyDrop<File>);

impl Out {
    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        if self.0.write_all(&line).is_err() {
            // The caller is gone: so are its answers. Ending the server ends
            // every step (PR_SET_PDEATHSIG).
            std::process::exit(crate::result::exit::REFUSED);
        }
    }
}

/// The server's state between polls.
struct Server {
    input: ManuallyDrop<File>,
    out: Out,
    server_pid: libc::pid_t,
    max: usize,
    max_output: u64,
    /// capsule's parser, built once: each step's process parses its
    /// arguments with its own copy (clap's build is most of a parse).
    cli: clap::Command,
    buf: Vec<u8>,
    /// The buffer every read goes through, zeroed once: after each fork the
    /// server's pages are shared with the step until written, and a zeroed
    /// stack buffer per read would copy all 16 of its pages every time.
    chunk: Vec<u8>,
    /// Inside an overlong line.
    skipping: bool,
    eof: bool,
    pending: VecDeque<(Value, Request)>,
    steps: Vec<Step>,
    /// Step processes already answered (their report is in), not yet
    /// reaped: they count against `--max-parallel` until they are.
    reaping: Vec<(libc::pid_t, OwnedFd)>,
    /// The network namespaces of answered steps, and when the oldest came:
    /// closed together, so that the kernel tears them down in one batch
    /// (`supervisor::ns_hold`).
    netns: Vec<OwnedFd>,
    netns_since: Option<Instant>,
    /// Whether steps hand their network namespace to the server.
    hold_netns: bool,
}

pub fn run(a: ServeArgs) -> i32 {
    if crate::sys::serve::thread_count().is_some_and(|n| n != 1) {
        error_line("serve: more than one thread before the first fork; refusing to fork");
        return crate::result::exit::REFUSED;
    }
    // What every step would otherwise find out afresh, found once here and
    // inherited by each forked step: the account's home (NSS) and the CPU
    // features the policy's sha256 uses (cpuid, dear in a VM). Neither
    // depends on a request's environment.
    let _ = crate::policy::home::account_home();
    let _ = crate::policy::parse::sha256_hex(b"");
    // SAFETY-free: fds 0 and 1 exist (ensure_std_fds); ManuallyDrop keeps them open.
    let mut sv = Server {
        input: ManuallyDrop::new(File::from(crate::sys::adopt_fd(0))),
        out: Out(ManuallyDrop::new(File::from(crate::sys::adopt_fd(1)))),
        server_pid: raw::getpid(),
        max: a.max_parallel as usize,
        max_output: a.max_output,
        cli: super::cli_command(),
        buf: Vec::new(),
        chunk: vec![0; CHUNK],
        skipping: false,
        eof: false,
        pending: VecDeque::new(),
        steps: Vec::new(),
        reaping: Vec::new(),
        netns: Vec::new(),
        netns_since: None,
        hold_netns: room_for_held_namespaces(),
    };
    loop {
        sv.start_pending();
        if sv.eof && sv.pending.is_empty() && sv.steps.is_empty() && sv.reaping.is_empty() {
            return 0;
        }
        let input_ready = match sv.wait() {
            Ok(r) => r,
            Err(e) => {
                error_line(format!("serve: poll: {e}"));
                return crate::result::exit::REFUSED;
            }
        };
        sv.collect();
        sv.release_netns();
        if input_ready {
            sv.read_requests();
        }
    }
}

impl Server {
    /// Start what may start: a step per free slot.
    fn start_pending(&mut self) {
        while self.steps.len() + self.reaping.len() < self.max {
            let Some((id, req)) = self.pending.pop_front() else {
                break;
            };
            match start(
                id.clone(),
                req,
                self.server_pid,
                self.hold_netns,
                &mut self.cli,
            ) {
                Ok(s) => self.steps.push(s),
                Err(e) => self.out.send(&json!({"id": id, "error": e})),
            }
        }
    }

    /// Wait for a request, output, a report or a step's end; whether the
    /// request pipe is readable.
    fn wait(&self) -> Result<bool, nix::errno::Errno> {
        let read_input = !self.eof && self.pending.len() < MAX_PENDING;
        let mut fds: Vec<PollFd> = Vec::new();
        if read_input {
            fds.push(PollFd::new(self.input.as_fd(), PollFlags::POLLIN));
        }
        for s in &self.steps {
            fds.push(PollFd::new(s.pidfd.as_fd(), PollFlags::POLLIN));
            for fd in [&s.out.fd, &s.err.fd, &s.status].into_iter().flatten() {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
        }
        for (_, pidfd) in &self.reaping {
            fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
        }
        // Wake up to let the held namespaces go.
        let timeout = match self.netns_since {
            // At most NETNS_LINGER (a second) in milliseconds, plus one.
            Some(t) => {
                PollTimeout::from(NETNS_LINGER.saturating_sub(t.elapsed()).as_millis() as u16 + 1)
            }
            None => PollTimeout::NONE,
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        Ok(read_input && fds[0].revents().is_some_and(|r| !r.is_empty()))
    }

    /// Pump the steps' output; answer each step whose report is in (or
    /// whose process ended without one); reap the answered ones that ended.
    fn collect(&mut self) {
        for s in &mut self.steps {
            // The report channel first: a step says it runs with --json
            // before it writes anything, and reports after all it wrote.
            s.read_status();
            s.out.pump(s.out_cap(self.max_output), &mut self.chunk);
            s.err.pump(self.max_output, &mut self.chunk);
        }
        let mut i = 0;
        while i < self.steps.len() {
            let s = &self.steps[i];
            if s.code.is_some() || (s.status.is_none() && readable(&s.pidfd)) {
                let mut s = self.steps.swap_remove(i);
                if let Some(ns) = s.netns.take() {
                    self.netns_since.get_or_insert_with(Instant::now);
                    self.netns.push(ns);
                }
                let (resp, left) = finish(s, self.max_output, &mut self.chunk);
                self.out.send(&resp);
                self.reaping.extend(left);
            } else {
                i += 1;
            }
        }
        self.reaping.retain(|(pid, pidfd)| {
            if readable(pidfd) {
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(*pid), None);
                false
            } else {
                true
            }
        });
    }

    /// Close the held network namespaces together once there are
    /// [`NETNS_BATCH`] or the oldest has waited [`NETNS_LINGER`] (the rest
    /// go when the server exits).
    fn release_netns(&mut self) {
        let due = self
            .netns_since
            .is_some_and(|t| t.elapsed() >= NETNS_LINGER);
        if due || self.netns.len() >= NETNS_BATCH {
            self.netns.clear();
            self.netns_since = None;
        }
    }

    /// Read what the caller sent and take each complete line.
    fn read_requests(&mut self) {
        match self.input.read(&mut self.chunk) {
            Ok(0) => {
                self.eof = true;
                if !self.buf.is_empty() && !self.skipping {
                    let line = std::mem::take(&mut self.buf);
                    take_line(&line, &mut self.pending, &mut self.steps, &mut self.out);
                }
            }
            Ok(n) => {
                let mut rest = &self.chunk[..n];
                while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                    if self.skipping {
                        self.skipping = false;
                    } else {
                        self.buf.extend_from_slice(&rest[..nl]);
                        let line = std::mem::take(&mut self.buf);
                        take_line(&line, &mut self.pending, &mut self.steps, &mut self.out);
                    }
                    rest = &rest[nl + 1..];
                }
                if !self.skipping {
                    self.buf.extend_from_slice(rest);
                    if self.buf.len() > MAX_LINE {
                        self.buf = Vec::new();
                        self.skipping = true;
                        self.out.send(&json!({"id": null, "error": format!(
                            "request line longer than {MAX_LINE} bytes: skipped up to its newline")}));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                error_line(format!("serve: reading requests: {e}"));
                self.eof = true;
            }
        }
    }
}

/// Whether holding [`NETNS_BATCH`] finished runs' network namespaces (and,
/// unprivileged, their user namespaces) leaves the steps room under the
/// kernel's per-user limits: a namespace held is one the next step cannot
/// make. Only where both limits are in the thousands (the default is
/// thousands per GiB of memory); a container that sets them low keeps the
/// old behaviour.
fn room_for_held_namespaces() -> bool {
    let limit = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/user/{f}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    ["max_net_namespaces", "max_user_namespaces"]
        .iter()
        .all(|f| limit(f).is_some_and(|n| n >= 1024))
}

/// Whether a process has ended (its pidfd is readable).
fn readable(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// One request line: queue an exec, act on a cancel, or answer an error.
fn take_line(
    line: &[u8],
    pending: &mut VecDeque<(Value, Request)>,
    steps: &mut [Step],
    out: &mut Out,
) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let raw: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            out.send(&json!({"id": null, "error": format!("request is not JSON: {e}")}));
            return;
        }
    };
    let id = raw.get("id").cloned().unwrap_or(Value::Null);
    if !(id.is_string() || id.is_u64() || id.is_i64()) {
        out.send(&json!({"id": id, "error": "request needs an `id` (a string or an integer)"}));
        return;
    }
    let req: Request = match serde_json::from_value(raw) {
        Ok(r) => r,
        Err(e) => {
            out.send(&json!({"id": id, "error": format!("bad request: {e}")}));
            return;
        }
    };
    match req.op.as_deref().unwrap_or("exec") {
        "exec" => {
            let busy = pending.iter().any(|(p, _)| *p == id) || steps.iter().any(|s| s.id == id);
            if busy {
                out.send(&json!({"id": id, "error": "a request with this id is still running"}));
            } else if req.args.is_empty() {
                out.send(&json!({"id": id, "error": "`args` is empty: give what `capsule exec` takes, e.g. [\"--json\", \"--\", \"/bin/true\"]"}));
            } else {
                pending.push_back((id, req));
            }
        }
        "cancel" => {
            // The step's capsule ends its run as for SIGTERM (grace, then
            // SIGKILL of the tree); its response follows as usual.
            if let Some(s) = steps.iter().find(|s| s.id == id) {
                crate::sys::signal(s.pid, libc::SIGTERM);
            } else if let Some(i) = pending.iter().position(|(p, _)| *p == id) {
                pending.remove(i);
                out.send(
                    &json!({"id": id, "error": "cancelled before it started", "cancelled": true}),
                );
            }
        }
        other => {
            out.send(&json!({"id": id, "error": format!("unknown op {other:?} (exec or cancel)")}))
        }
    }
}

/// Fork the step process for one request.
fn start(
    id: Value,
    req: Request,
    server_pid: libc::pid_t,
    hold_netns: bool,
    cli: &mut clap::Command,
) -> Result<Step, String> {
    let stdin_data = match (&req.stdin, &req.stdin_base64) {
        (Some(_), Some(_)) => return Err("give `stdin` or `stdin_base64`, not both".into()),
        (Some(t), None) => Some(t.as_bytes().to_vec()),
        (None, Some(b)) => Some(base64_decode(b).ok_or("`stdin_base64` is not base64")?),
        (None, None) => None,
    };
    let stdin_fd: OwnedFd = match stdin_data {
        // A pipe holding all of it (not a memfd: the run could execute a
        // memfd made outside its namespaces, past Landlock's exec rights).
        Some(data) => {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| format!("pipe for stdin: {e}"))?;
            if data.len() > 65536 {
                crate::sys::grow_pipe(w.as_raw_fd(), (data.len() + 4096) as libc::c_int);
            }
            crate::sys::set_nonblocking(w.as_raw_fd()).map_err(|e| format!("stdin: {e}"))?;
            let mut f = File::from(w);
            f.write_all(&data).map_err(|e| {
                format!(
                    "stdin of {} bytes does not fit a pipe here ({e}): raise /proc/sys/fs/pipe-max-size",
                    data.len()
                )
            })?;
            r
        }
        None => File::open("/dev/null")
            .map_err(|e| format!("/dev/null: {e}"))?
            .into(),
    };
    let pipe = || -> Result<(OwnedFd, OwnedFd), String> {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
        crate::sys::set_nonblocking(r.as_raw_fd()).map_err(|e| format!("pipe: {e}"))?;
        Ok((r, w))
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (status_r, status_w) = status_pair().map_err(|e| format!("socketpair: {e}"))?;
    match fork_step().map_err(|e| format!("fork: {e}"))? {
        Forked::Child => {
            if hold_netns {
                crate::supervisor::ns_hold::NET.want();
            }
            crate::supervisor::ns_hold::MNT.want();
            crate::supervisor::tmpdir_aside::want();
            step(req, [&stdin_fd, &out_w, &err_w, &status_w], server_pid, cli)
        }
        Forked::Parent(pid) => {
            let pidfd = match crate::sys::pidfd_open(pid) {
                Ok(fd) => fd,
                Err(e) => {
                    crate::sys::signal(pid, libc::SIGKILL);
                    crate::sys::wait_blocking(pid);
                    return Err(format!("pidfd_open: {e}"));
                }
            };
            Ok(Step {
                id,
                pid,
                pidfd,
                json: false,
                out: Stream::new(out_r),
                err: Stream::new(err_r),
                status: Some(status_r),
                code: None,
                netns: None,
            })
        }
    }
}

/// The step process: stdio onto the request's, then `capsule exec ARGS`;
/// its exit status goes to the server on fd 3 (close-on-exec) as soon as
/// `capsule exec` has returned, before this process is torn down.
fn step(
    req: Request,
    [stdin, out, err, status]: [&OwnedFd; 4],
    server: libc::pid_t,
    cli: &mut clap::Command,
) -> ! {
    // The server's death ends this step (as SIGTERM ends `capsule exec`).
    let _ = raw::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as usize);
    if raw::getppid() != server {
        raw::exit_group(crate::result::exit::REFUSED);
    }
    let ok = raw::dup_onto(stdin.as_raw_fd(), 0).is_ok()
        && raw::dup_onto(out.as_raw_fd(), 1).is_ok()
        && raw::dup_onto(err.as_raw_fd(), 2).is_ok()
        && raw::dup_onto(status.as_raw_fd(), STATUS_FD).is_ok();
    if !ok {
        raw::exit_group(crate::result::exit::REFUSED);
    }
    // Nothing of the server (its request pipe, other steps' pipes and
    // pidfds); the status pipe is close-on-exec, and the run's child
    // closes everything above 2 besides (sandbox::child).
    let _ = raw::close_range(STATUS_FD + 1, u32::MAX);
    if raw::cloexec_range(STATUS_FD).is_err() {
        raw::exit_group(crate::result::exit::REFUSED);
    }
    if req.clear_env {
        for (k, _) in std::env::vars_os() {
            std::env::remove_var(k);
        }
    }
    for (k, v) in &req.env {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            error_line(format!("serve: env {k:?}: not a variable name and value"));
            std::process::exit(crate::result::exit::REFUSED);
        }
        std::env::set_var(k, v);
    }
    if let Some(dir) = &req.cwd {
        if let Err(e) = std::env::set_current_dir(dir) {
            error_line(format!("serve: cwd {dir}: {e}"));
            std::process::exit(crate::result::exit::REFUSED);
        }
    }
    let json_mode = || {
        let _ = send_json_mode(STATUS_FD);
    };
    // A panic in `capsule exec` after its run (an `eprintln!` on a stderr
    // whose reader is gone, as when the server has died) must not skip what
    // follows: the report, and the removal of a TMPDIR moved aside. 101 is
    // the exit status such a panic gave the step.
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        super::exec_step(cli, &req.args, req.policy, &json_mode)
    }))
    .unwrap_or(101);
    let _ = std::io::stdout().flush();
    // Everything the run wrote is in the pipes: the server answers now,
    // while this process exits (the run itself is over: `capsule exec`
    // returns only once its tree is gone and its record written).
    let netns = crate::supervisor::ns_hold::NET.take();
    let _ = send_status(STATUS_FD, code, netns.as_ref());
    // While the server answers (it reaps this process, and exits, only once
    // it is gone): the run's mount namespace, held past init's end, is torn
    // down, then the TMPDIR, if it was moved aside, removed.
    drop(crate::supervisor::ns_hold::MNT.take());
    if let Some(aside) = crate::supervisor::tmpdir_aside::take() {
        for line in crate::supervisor::cleanup::remove_dir_or_tree(&aside) {
            tracing::warn!("after the report, left behind: {line}");
        }
    }
    std::process::exit(code)
}

/// The response for a step that reported (then its process, still to be
/// reaped, is returned) or whose process ended without a report.
fn finish(mut s: Step, cap: u64, buf: &mut [u8]) -> (Value, Option<(libc::pid_t, OwnedFd)>) {
    s.out.pump(s.out_cap(cap), buf);
    s.err.pump(cap, buf);
    let mut r = Map::new();
    r.insert("id".into(), s.id.clone());
    let left = match s.code {
        Some(code) => {
            r.insert("exit_code".into(), code.into());
            Some((s.pid, s.pidfd))
        }
        None => {
            exit_status(s.pid, &mut r);
            None
        }
    };
    put_output(&mut r, &s.out, &s.err, s.json);
    (Value::Object(r), left)
}

/// `exit_code` (and `error`) for a step process that ended without a report.
fn exit_status(pid: libc::pid_t, r: &mut Map<String, Value>) {
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    use nix::sys::wait::WaitStatus;
    match status {
        Ok(WaitStatus::Exited(_, code)) => {
            r.insert("exit_code".into(), code.into());
        }
        Ok(WaitStatus::Signaled(_, sig, _)) => {
            r.insert("exit_code".into(), (128 + sig as i32).into());
            r.insert(
                "error".into(),
                format!("the step's capsule process was killed by {sig}: no result").into(),
            );
        }
        other => {
            r.insert("exit_code".into(), crate::result::exit::REFUSED.into());
            r.insert(
                "error".into(),
                format!("waiting for the step: {other:?}").into(),
            );
        }
    }
}

/// `result` (or `stdout`) and `stderr`, with the truncation counts.
fn put_output(r: &mut Map<String, Value>, out: &Stream, err: &Stream, json: bool) {
    let parsed = json
        .then(|| serde_json::from_slice::<Map<String, Value>>(&out.kept).ok())
        .flatten();
    match parsed {
        Some(obj) => {
            r.insert("result".into(), Value::Object(obj));
        }
        None => put_bytes(r, "stdout", &out.kept),
    }
    put_bytes(r, "stderr", &err.kept);
    for (name, st) in [("stdout", out), ("stderr", err)] {
        if st.total > st.kept.len() as u64 {
            r.insert(format!("{name}_truncated"), true.into());
            r.insert(format!("{name}_bytes"), st.total.into());
        }
    }
}

/// `name` as text when it is UTF-8, else `name_base64`.
fn put_bytes(r: &mut Map<String, Value>, name: &str, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(t) => {
            r.insert(name.into(), t.into());
        }
        Err(_) => {
            r.insert(format!("{name}_base64"), base64_encode(b).into());
        }
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                s.push(B64[(n >> shift) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_round_trips() {
        for n in 0..40u8 {
            let data: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            let enc = super::base64_encode(&data);
            assert_eq!(enc.len() % 4, 0);
            assert_eq!(super::base64_decode(&enc).unwrap(), data, "{enc}");
        }
        assert_eq!(super::base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(super::base64_encode(b"fo"), "Zm8=");
        assert!(super::base64_decode("a!b").is_none());
    }
}

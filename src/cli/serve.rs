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
//! dynamic loader's work and the parse of its own arguments; a step still
//! pays for its planning and its namespaces.
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

use clap::Args;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error_line;
use crate::sys::raw;
use crate::sys::serve::{fork_step, Forked};

/// The longest request line; a longer one is answered with an error and skipped.
pub const MAX_LINE: usize = 1 << 20;
/// Requests read ahead of the steps running (then stdin is not read).
const MAX_PENDING: usize = 64;

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
    /// Bytes of each step's stdout and of its stderr kept for its response (the rest is counted, dropped).
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

    /// Read what is there now (the descriptor is non-blocking); false at EOF.
    fn pump(&mut self, cap: u64) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mut buf = [0u8; 65536];
        loop {
            match nix::unistd::read(fd, &mut buf) {
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
    json: bool,
    out: Stream,
    err: Stream,
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

pub fn run(a: ServeArgs) -> i32 {
    if crate::sys::serve::thread_count().is_some_and(|n| n != 1) {
        error_line("serve: more than one thread before the first fork; refusing to fork");
        return crate::result::exit::REFUSED;
    }
    // SAFETY-free: fds 0 and 1 exist (ensure_std_fds); ManuallyDrop keeps them open.
    let mut input = ManuallyDrop::new(File::from(crate::sys::adopt_fd(0)));
    let mut out = Out(ManuallyDrop::new(File::from(crate::sys::adopt_fd(1))));
    let server_pid = raw::getpid();
    let max = a.max_parallel as usize;
    let mut buf: Vec<u8> = Vec::new();
    let mut skipping = false; // inside an overlong line
    let mut eof = false;
    let mut pending: VecDeque<(Value, Request)> = VecDeque::new();
    let mut steps: Vec<Step> = Vec::new();

    loop {
        // Start what may start.
        while steps.len() < max {
            let Some((id, req)) = pending.pop_front() else {
                break;
            };
            match start(id.clone(), req, server_pid) {
                Ok(s) => steps.push(s),
                Err(e) => out.send(&json!({"id": id, "error": e})),
            }
        }
        if eof && pending.is_empty() && steps.is_empty() {
            return 0;
        }
        // Wait for a request, output or a step's end.
        let read_input = !eof && pending.len() < MAX_PENDING;
        let mut fds: Vec<PollFd> = Vec::new();
        if read_input {
            fds.push(PollFd::new(input.as_fd(), PollFlags::POLLIN));
        }
        for s in &steps {
            fds.push(PollFd::new(s.pidfd.as_fd(), PollFlags::POLLIN));
            for st in [&s.out, &s.err] {
                if let Some(fd) = &st.fd {
                    fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                }
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                error_line(format!("serve: poll: {e}"));
                return crate::result::exit::REFUSED;
            }
        }
        let input_ready = read_input && fds[0].revents().is_some_and(|r| !r.is_empty());
        drop(fds);

        for s in &mut steps {
            s.out.pump(a.max_output);
            s.err.pump(a.max_output);
        }
        let mut i = 0;
        while i < steps.len() {
            if exited(&steps[i]) {
                let s = steps.swap_remove(i);
                out.send(&finish(s, a.max_output));
            } else {
                i += 1;
            }
        }

        if input_ready {
            let mut chunk = [0u8; 65536];
            match input.read(&mut chunk) {
                Ok(0) => {
                    eof = true;
                    if !buf.is_empty() && !skipping {
                        let line = std::mem::take(&mut buf);
                        take_line(&line, &mut pending, &mut steps, &mut out);
                    }
                }
                Ok(n) => {
                    let mut rest = &chunk[..n];
                    while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                        if skipping {
                            skipping = false;
                        } else {
                            buf.extend_from_slice(&rest[..nl]);
                            let line = std::mem::take(&mut buf);
                            take_line(&line, &mut pending, &mut steps, &mut out);
                        }
                        rest = &rest[nl + 1..];
                    }
                    if !skipping {
                        buf.extend_from_slice(rest);
                        if buf.len() > MAX_LINE {
                            buf = Vec::new();
                            skipping = true;
                            out.send(&json!({"id": null, "error": format!(
                                "request line longer than {MAX_LINE} bytes: skipped up to its newline")}));
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    error_line(format!("serve: reading requests: {e}"));
                    eof = true;
                }
            }
        }
    }
}

/// Whether a step's process has ended (its pidfd is readable).
fn exited(s: &Step) -> bool {
    let mut fds = [PollFd::new(s.pidfd.as_fd(), PollFlags::POLLIN)];
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
fn start(id: Value, req: Request, server_pid: libc::pid_t) -> Result<Step, String> {
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
    let json = req
        .args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json");
    match fork_step().map_err(|e| format!("fork: {e}"))? {
        Forked::Child => step(req, &stdin_fd, &out_w, &err_w, server_pid),
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
                json,
                out: Stream::new(out_r),
                err: Stream::new(err_r),
            })
        }
    }
}

/// The step process: stdio onto the request's, then `capsule exec ARGS`.
fn step(req: Request, stdin: &OwnedFd, out: &OwnedFd, err: &OwnedFd, server: libc::pid_t) -> ! {
    // The server's death ends this step (as SIGTERM ends `capsule exec`).
    let _ = raw::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as usize);
    if raw::getppid() != server {
        raw::exit_group(crate::result::exit::REFUSED);
    }
    let ok = raw::dup_onto(stdin.as_raw_fd(), 0).is_ok()
        && raw::dup_onto(out.as_raw_fd(), 1).is_ok()
        && raw::dup_onto(err.as_raw_fd(), 2).is_ok();
    if !ok {
        raw::exit_group(crate::result::exit::REFUSED);
    }
    // Nothing of the server (its request pipe, other steps' pipes and pidfds).
    let _ = raw::close_range(3, u32::MAX);
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
    let code = super::exec_step(&req.args, req.policy);
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// The response for a step whose process has ended.
fn finish(mut s: Step, cap: u64) -> Value {
    s.out.pump(cap);
    s.err.pump(cap);
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(s.pid), None);
    let mut r = Map::new();
    r.insert("id".into(), s.id.clone());
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
    let parsed = s
        .json
        .then(|| serde_json::from_slice::<Map<String, Value>>(&s.out.kept).ok())
        .flatten();
    match parsed {
        Some(obj) => {
            r.insert("result".into(), Value::Object(obj));
        }
        None => put_bytes(&mut r, "stdout", &s.out.kept),
    }
    put_bytes(&mut r, "stderr", &s.err.kept);
    for (name, st) in [("stdout", &s.out), ("stderr", &s.err)] {
        if st.total > st.kept.len() as u64 {
            r.insert(format!("{name}_truncated"), true.into());
            r.insert(format!("{name}_bytes"), st.total.into());
        }
    }
    Value::Object(r)
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

//! The result of one run: the JSON object of `--json` (contract section 4),
//! the reason code of its audit record, and capsule's exit status.
//!
//! The supervisor fills a [`RunResult`] and judges how the run ended with
//! [`classify`]; `audit` and `cli` read it. Everything a run reports and every
//! code it can end with is here, and nothing here depends on how the run was
//! supervised.

mod classify;
mod reason;

use serde::Serialize;

pub use classify::{classify, Context, Ending};
pub use reason::Reason;

pub const SCHEMA: &str = "capsule.result/1";

/// Exit statuses capsule itself uses (GNU timeout/env conventions); which
/// reason ends with which is [`Reason::exit_code`].
pub mod exit {
    pub const TIMEOUT: i32 = 124;
    pub const REFUSED: i32 = 125;
    pub const CANNOT_EXECUTE: i32 = 126;
    pub const NOT_FOUND: i32 = 127;
}

/// Why the run ended, coarsely: the result's `termination_reason`
/// ([`Reason::termination`] maps the fine codes onto it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Termination {
    Exited,
    Signaled,
    Timeout,
    Refused,
    Error,
}

/// Which layer enforced what, on this kernel, for this run.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Enforcement {
    /// Landlock ABI in force (0: none).
    pub landlock_abi: u32,
    pub seccomp: bool,
    /// none | proxy | unrestricted
    pub network: String,
    /// The child has its own network namespace.
    pub netns: bool,
    /// The run may open IP sockets (TCP, UDP) on its own loopback
    /// (`network.loopback`): only inside its own network namespace.
    pub loopback: bool,
    /// Proxy mode only: how the child reaches the proxy, "netns" (its own network
    /// namespace holding only the proxy endpoint), "landlock-tcp-fallback" (the host's
    /// loopback, Landlock TCP port rule + seccomp TCP-only, and the network guard
    /// where it can run) or "seccomp-notify-fallback" (the host's loopback below
    /// Landlock ABI 4: the network guard alone); null in other modes.
    pub network_path: Option<String>,
    /// pid-namespace | subreaper
    pub tree_kill: String,
    /// The layer that keeps the run's signals inside it: pid-namespace |
    /// landlock-scope | seccomp-notify | none (--best-effort, then listed in `missing`).
    pub signals: String,
    /// The layer that keeps a memfd from being executed: pid-namespace-sysctl
    /// (vm.memfd_noexec = 2) | seccomp-notify (capsule makes every memfd
    /// sealed against execution) | none (listed in `missing`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memfd_exec: String,
    /// How each limit is enforced, e.g. {"memory_mb": "cgroup-v1"}.
    pub limits: std::collections::BTreeMap<String, String>,
    /// Protections not enforced: what --best-effort let go, and the gaps of
    /// the no-namespace path (which no layer there can close).
    pub missing: Vec<String>,
    /// What works differently on this kernel without weakening a
    /// protection (e.g. no cross-directory rename on Landlock ABI 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limitations: Vec<String>,
    /// The run's private view of the host (mount, IPC and network
    /// namespaces); null on the no-namespace path.
    pub view: Option<ViewReport>,
}

/// What the view gave this run.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ViewReport {
    pub mount_namespace: bool,
    pub ipc_namespace: bool,
    /// Everything outside write grants mounted read-only (nosuid).
    pub read_only_host: bool,
    pub private_proc: bool,
    pub private_tmp: bool,
    pub private_shm: bool,
    pub devpts: bool,
    /// vm.memfd_noexec = 2 in the run's pid namespace.
    pub memfd_noexec: bool,
    /// The writable binds and `mounts:`, one line each.
    pub mounts: Vec<String>,
    /// How many secrets of /etc were covered.
    pub secrets_covered: usize,
}

/// What one output stream produced.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    /// Kept bytes (when captured for `--json`), marker included when truncated.
    pub data: Vec<u8>,
    /// Every byte the child wrote.
    pub total: u64,
    pub truncated: bool,
    /// Streaming: the reader of capsule's own stream went away (EPIPE), and
    /// capsule closed the run's stream in turn.
    pub closed: bool,
}

/// The result object printed by `--json` (contract section 4; its JSON
/// Schema is `capsule schema result`, `schemas/result.schema.json`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(title = "capsule.result/1")]
pub struct RunResult {
    /// Always `capsule.result/1`.
    #[schemars(extend("const" = "capsule.result/1"))]
    pub schema: &'static str,
    pub run_id: String,
    pub termination_reason: Termination,
    pub success: bool,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Streaming: the reader of capsule's stdout (stderr) went away during
    /// the run, and capsule closed the run's stdout (stderr) in turn, so that
    /// the run got EPIPE/SIGPIPE as it would without capsule (`| head`).
    /// Absent when false; never true with `--json`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdout_closed_by_reader: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stderr_closed_by_reader: bool,
    pub duration_seconds: f64,
    pub killed: bool,
    pub kill_reason: Option<String>,
    pub enforcement: Enforcement,
    pub policy_sha256: String,
    pub tool_calls: u64,
    pub tool_refusals: u64,
    pub llm_calls: u64,
    pub denied_hosts: Vec<String>,
    /// Credentials the proxy injected (contract section 8), by name, with the
    /// number of requests each went into; never a value. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials_used: Vec<CredentialUsed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The broker's and the proxy's counters in detail (tool refusals by
    /// reason, LLM calls/ok/refusals by reason/provider errors/model/caps,
    /// proxy allowed/denied), also written to the audit record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
    /// What capsule could not remove after the run (the child's remains in
    /// the private TMPDIR): one `PATH: error` line each, the first 16, then
    /// `... and N more`. Absent when everything was removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_behind: Vec<String>,
    /// `exec --explain`: every access the sandbox refused, deduplicated,
    /// each with `why`'s answer (absent without --explain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denials: Option<Vec<serde_json::Value>>,
    /// `exec --explain`: what the explanation could see (`files`: whether
    /// file accesses were observed, `why_not`, `dropped`: denials not kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<serde_json::Value>,
}

/// One credential's use in a run: its name and the requests it went into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct CredentialUsed {
    pub name: String,
    pub requests: u64,
}

/// The JSON Schema of the `--json` result (`capsule schema result`).
pub fn schema_json() -> String {
    crate::policy::schema_json_of::<RunResult>()
}

impl RunResult {
    /// A result for a run that never started (refused or failed before exec).
    pub fn not_run(
        run_id: String,
        termination: Termination,
        exit_code: i32,
        error: String,
    ) -> RunResult {
        RunResult {
            error: Some(error),
            ..RunResult::new(run_id, termination, exit_code)
        }
    }

    /// A result with nothing observed yet: no output, no error, not killed.
    pub fn new(run_id: String, termination: Termination, exit_code: i32) -> RunResult {
        RunResult {
            schema: SCHEMA,
            run_id,
            termination_reason: termination,
            success: false,
            exit_code,
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_closed_by_reader: false,
            stderr_closed_by_reader: false,
            duration_seconds: 0.0,
            killed: false,
            kill_reason: None,
            enforcement: Enforcement::default(),
            policy_sha256: String::new(),
            tool_calls: 0,
            tool_refusals: 0,
            llm_calls: 0,
            denied_hosts: vec![],
            credentials_used: Vec::new(),
            error: None,
            usage: None,
            left_behind: Vec::new(),
            denials: None,
            explain: None,
        }
    }

    /// Take the captured streams (decoded as UTF-8 with replacement, without a copy when already valid).
    pub fn set_streams(&mut self, out: &mut Captured, err: &mut Captured) {
        let text = |v: Vec<u8>| {
            String::from_utf8(v)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
        };
        self.stdout = text(std::mem::take(&mut out.data));
        self.stderr = text(std::mem::take(&mut err.data));
        self.stdout_bytes = out.total;
        self.stderr_bytes = err.total;
        self.stdout_truncated = out.truncated;
        self.stderr_truncated = err.truncated;
        self.stdout_closed_by_reader = out.closed;
        self.stderr_closed_by_reader = err.closed;
    }

    /// Write the result as one JSON line, streamed (no copy of the output in
    /// memory); a closed stdout is not an error worth dying for.
    pub fn write_json_line(&self, out: impl std::io::Write) -> std::io::Result<()> {
        use std::io::Write;
        let mut w = std::io::BufWriter::with_capacity(64 * 1024, out);
        serde_json::to_writer(&mut w, self).map_err(std::io::Error::other)?;
        w.write_all(b"\n")?;
        w.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract section 4: `termination_reason` is `exited` | `signaled` |
    /// `timeout` | `refused` | `error`, and every reason maps onto one of them.
    #[test]
    fn termination_reasons_are_the_contracts() {
        let all = [
            Termination::Exited,
            Termination::Signaled,
            Termination::Timeout,
            Termination::Refused,
            Termination::Error,
        ];
        let names: Vec<serde_json::Value> = all
            .iter()
            .map(|t| serde_json::to_value(t).unwrap())
            .collect();
        assert_eq!(
            names,
            ["exited", "signaled", "timeout", "refused", "error"].map(serde_json::Value::from)
        );
        for &r in Reason::ALL {
            assert!(all.contains(&r.termination()), "{r}");
        }
    }

    #[test]
    fn streams_are_decoded_with_replacement() {
        let mut r = RunResult::new("r".into(), Termination::Exited, 0);
        let mut out = Captured {
            data: b"ok\n".to_vec(),
            total: 3,
            truncated: false,
            closed: false,
        };
        let mut err = Captured {
            data: b"a\xffb".to_vec(),
            total: 10,
            truncated: true,
            closed: false,
        };
        r.set_streams(&mut out, &mut err);
        assert_eq!((r.stdout.as_str(), r.stdout_bytes), ("ok\n", 3));
        assert_eq!((r.stderr.as_str(), r.stderr_bytes), ("a\u{fffd}b", 10));
        assert!(!r.stdout_truncated && r.stderr_truncated);
        assert!(out.data.is_empty() && err.data.is_empty());
    }
}

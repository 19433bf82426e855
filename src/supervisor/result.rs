//! The JSON result of one run (contract section 4) and the exit status.

use serde::Serialize;

use super::capture::Captured;

pub const SCHEMA: &str = "capsule.result/1";

/// Exit statuses capsule itself uses (GNU timeout/env conventions).
pub mod exit {
    pub const TIMEOUT: i32 = 124;
    pub const REFUSED: i32 = 125;
    pub const CANNOT_EXECUTE: i32 = 126;
    pub const NOT_FOUND: i32 = 127;
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Termination {
    Exited,
    Signaled,
    Timeout,
    Refused,
    Error,
}

/// Which layer enforced what, on this kernel, for this run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Enforcement {
    /// Landlock ABI in force (0: none).
    pub landlock_abi: u32,
    pub seccomp: bool,
    /// none | proxy | unrestricted
    pub network: String,
    /// The child has its own network namespace.
    pub netns: bool,
    /// Proxy mode only: how the child reaches the proxy, "netns" (its own network
    /// namespace holding only the proxy endpoint) or "landlock-tcp-fallback" (the host's
    /// loopback, Landlock TCP port rule + seccomp TCP-only); null in other modes.
    pub network_path: Option<String>,
    /// pid-namespace | subreaper
    pub tree_kill: String,
    /// How each limit is enforced, e.g. {"memory_mb": "cgroup-v1"}.
    pub limits: std::collections::BTreeMap<String, String>,
    /// Protections asked for but not enforced (only with --best-effort).
    pub missing: Vec<String>,
}

/// The result object printed by `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
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
    pub duration_seconds: f64,
    pub killed: bool,
    pub kill_reason: Option<String>,
    pub enforcement: Enforcement,
    pub policy_sha256: String,
    pub tool_calls: u64,
    pub tool_refusals: u64,
    pub llm_calls: u64,
    pub denied_hosts: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Extra detail from the broker and proxy (counters by reason).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
}

impl RunResult {
    /// A result for a run that never started (refused or failed before exec).
    pub fn not_run(run_id: String, termination: Termination, exit_code: i32, error: String) -> RunResult {
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
            duration_seconds: 0.0,
            killed: false,
            kill_reason: None,
            enforcement: Enforcement::default(),
            policy_sha256: String::new(),
            tool_calls: 0,
            tool_refusals: 0,
            llm_calls: 0,
            denied_hosts: vec![],
            error: Some(error),
            usage: None,
        }
    }

    pub fn set_streams(&mut self, out: &Captured, err: &Captured) {
        self.stdout = String::from_utf8_lossy(&out.data).into_owned();
        self.stderr = String::from_utf8_lossy(&err.data).into_owned();
        self.stdout_bytes = out.total;
        self.stderr_bytes = err.total;
        self.stdout_truncated = out.truncated;
        self.stderr_truncated = err.truncated;
    }

    pub fn to_json_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }
}

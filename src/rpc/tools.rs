//! The tool allowlist (`tools.allow`) and how each kind of tool runs:
//! a host `command`, a `command` under its own capsule `policy:`, or
//! `forward: true` (see [`super::forward`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::process::{self, ProcessError};
use super::protocol::{Reason, RpcFault};
use super::RpcError;
use crate::policy::Tool;

/// Largest stdout a tool may print (the answer line is bounded to 1 MiB too).
pub const MAX_TOOL_OUTPUT: usize = 1024 * 1024;

/// How one allow-listed tool runs.
#[derive(Debug, Clone)]
pub enum ToolKind {
    Command { argv: Vec<String> },
    Policy { argv: Vec<String>, policy: PathBuf },
    Forward,
}

#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub kind: ToolKind,
    pub timeout: Duration,
}

/// The validated allowlist.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    pub tools: Vec<ToolSpec>,
    pub max_calls: u32,
}

impl ToolSet {
    pub fn new(
        tools: Option<&crate::policy::Tools>,
        policy_dir: &Path,
    ) -> Result<ToolSet, RpcError> {
        let Some(t) = tools else {
            return Ok(ToolSet {
                tools: vec![],
                max_calls: 0,
            });
        };
        let mut specs: Vec<ToolSpec> = Vec::with_capacity(t.allow.len());
        for tool in &t.allow {
            let spec = spec_of(tool, policy_dir)?;
            if specs.iter().any(|s| s.name == spec.name) {
                return Err(RpcError::InvalidTool {
                    name: spec.name,
                    message: "listed twice in tools.allow".into(),
                });
            }
            specs.push(spec);
        }
        Ok(ToolSet {
            tools: specs,
            max_calls: t.max_calls,
        })
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The `tools/list` result.
    pub fn list(&self) -> Value {
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema}))
            .collect();
        json!({ "tools": tools })
    }
}

fn spec_of(tool: &Tool, policy_dir: &Path) -> Result<ToolSpec, RpcError> {
    let bad = |message: &str| RpcError::InvalidTool {
        name: tool.name.clone(),
        message: message.to_string(),
    };
    if tool.name.is_empty() {
        return Err(bad("a tool needs a non-empty name"));
    }
    if !(tool.timeout_seconds.is_finite() && tool.timeout_seconds > 0.0) {
        return Err(bad("timeout_seconds must be > 0"));
    }
    let kind = match (&tool.command, tool.forward, &tool.policy) {
        (Some(_), true, _) => {
            return Err(bad(
                "a tool is either `command` or `forward: true`, not both",
            ))
        }
        (None, true, Some(_)) => return Err(bad("`policy` applies to `command` tools only")),
        (None, true, None) => ToolKind::Forward,
        (None, false, _) => return Err(bad("a tool needs `command` or `forward: true`")),
        (Some(argv), false, _) if argv.is_empty() || argv[0].is_empty() => {
            return Err(bad("`command` is empty"))
        }
        (Some(argv), false, None) => ToolKind::Command { argv: argv.clone() },
        (Some(argv), false, Some(p)) => ToolKind::Policy {
            argv: argv.clone(),
            policy: policy_dir.join(p),
        },
    };
    Ok(ToolSpec {
        name: tool.name.clone(),
        description: tool.description.clone().unwrap_or_default(),
        input_schema: tool
            .input_schema
            .clone()
            .unwrap_or_else(|| json!({"type": "object"})),
        kind,
        timeout: Duration::from_secs_f64(tool.timeout_seconds.min(1e9)),
    })
}

/// The `tools/call` result of a tool that ran: stdout as text, and as
/// `structuredContent` when it is JSON.
pub fn result_of(stdout: &[u8], stderr: &[u8], is_error: bool) -> Value {
    let mut text = String::from_utf8_lossy(stdout).into_owned();
    if is_error && text.trim().is_empty() {
        text = String::from_utf8_lossy(stderr).into_owned();
    }
    let mut result = json!({"content": [{"type": "text", "text": text}], "isError": is_error});
    if !stdout.iter().all(u8::is_ascii_whitespace) {
        if let Ok(v) = serde_json::from_slice::<Value>(stdout) {
            result["structuredContent"] = v;
        }
    }
    result
}

fn fault_of(name: &str, e: ProcessError) -> RpcFault {
    match e {
        ProcessError::Timeout(d) => RpcFault::new(
            Reason::Timeout,
            format!(
                "tool '{name}' did not finish within {:.3} s and was killed",
                d.as_secs_f64()
            ),
        ),
        ProcessError::OutputTooLarge(n) => RpcFault::new(
            Reason::OutputTooLarge,
            format!("tool '{name}' printed more than {n} bytes and was killed"),
        ),
        ProcessError::Spawn { .. } => RpcFault::new(
            Reason::ToolFailed,
            format!("tool '{name}' could not be started"),
        ),
        ProcessError::Io(_) => RpcFault::new(
            Reason::ToolFailed,
            format!("tool '{name}' failed (i/o error)"),
        ),
    }
}

/// Run a host `command` tool.
pub async fn run_command(
    spec: &ToolSpec,
    argv: &[String],
    cwd: &Path,
    arguments: &Value,
) -> Result<Value, RpcFault> {
    let input = serde_json::to_vec(arguments).unwrap_or_default();
    match process::run(argv, cwd, &input, spec.timeout, MAX_TOOL_OUTPUT, &[]).await {
        Ok(out) => {
            if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&out.status) {
                tracing::debug!(tool = %spec.name, signal = sig, "tool killed by a signal");
            }
            Ok(result_of(&out.stdout, &out.stderr, !out.status.success()))
        }
        Err(e) => {
            tracing::debug!(tool = %spec.name, error = %e, "tool run failed");
            Err(fault_of(&spec.name, e))
        }
    }
}

/// Run a `command` tool under its own policy:
/// `capsule exec --no-audit --json --policy P --timeout T --max-output N -- argv...`.
pub async fn run_under_policy(
    spec: &ToolSpec,
    argv: &[String],
    policy: &Path,
    capsule_exe: &Path,
    cwd: &Path,
    arguments: &Value,
) -> Result<Value, RpcFault> {
    let mut outer: Vec<String> = vec![
        capsule_exe.to_string_lossy().into_owned(),
        "exec".into(),
        "--no-audit".into(),
        "--json".into(),
        "--policy".into(),
        policy.to_string_lossy().into_owned(),
        "--timeout".into(),
        format!("{}", spec.timeout.as_secs_f64()),
        "--max-output".into(),
        MAX_TOOL_OUTPUT.to_string(),
        "--".into(),
    ];
    outer.extend(argv.iter().cloned());
    let input = serde_json::to_vec(arguments).unwrap_or_default();
    // The inner capsule enforces the tool's timeout; the outer one is a backstop.
    let backstop = spec.timeout + Duration::from_secs(5);
    let out = process::run(
        &outer,
        cwd,
        &input,
        backstop,
        16 * MAX_TOOL_OUTPUT,
        process::NESTED_CAPSULE_ENV,
    )
    .await
    .map_err(|e| fault_of(&spec.name, e))?;
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        RpcFault::new(
            Reason::ToolFailed,
            format!("tool '{}': capsule printed no result object", spec.name),
        )
    })?;
    let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    match field("termination_reason") {
        "timeout" => Err(fault_of(&spec.name, ProcessError::Timeout(spec.timeout))),
        "refused" | "error" => {
            // The nested capsule's reason can quote host paths and host
            // config lines: it goes to the operator's log, not to the sandbox.
            let why: String = field("error").chars().take(300).collect();
            tracing::warn!(tool = %spec.name, "tool could not run under its policy: {why}");
            Err(RpcFault::new(
                Reason::ToolFailed,
                format!(
                    "tool '{}' could not run under its policy (the reason is in capsule's log: -v)",
                    spec.name
                ),
            ))
        }
        _ if v.get("stdout_truncated").and_then(Value::as_bool) == Some(true) => Err(fault_of(
            &spec.name,
            ProcessError::OutputTooLarge(MAX_TOOL_OUTPUT),
        )),
        _ => {
            let ok = v.get("success").and_then(Value::as_bool) == Some(true)
                && v.get("exit_code").and_then(Value::as_i64) == Some(0);
            Ok(result_of(
                field("stdout").as_bytes(),
                field("stderr").as_bytes(),
                !ok,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_shapes() {
        let r = result_of(b"{\"a\":1}\n", b"", false);
        assert_eq!(r["structuredContent"], json!({"a": 1}));
        assert_eq!(r["content"][0]["text"], "{\"a\":1}\n");
        assert_eq!(r["isError"], false);
        let r = result_of(b"plain", b"", false);
        assert!(r.get("structuredContent").is_none());
        let r = result_of(b"", b"boom", true);
        assert_eq!(r["content"][0]["text"], "boom");
        assert_eq!(r["isError"], true);
    }

    #[test]
    fn invalid_tools_fail_closed() {
        let dir = Path::new("/p");
        let mk = |t: Tool| {
            ToolSet::new(
                Some(&crate::policy::Tools {
                    max_calls: 1,
                    allow: vec![t],
                }),
                dir,
            )
        };
        let base = Tool {
            name: "t".into(),
            timeout_seconds: 1.0,
            ..Default::default()
        };
        assert!(mk(base.clone()).is_err());
        assert!(mk(Tool {
            command: Some(vec![]),
            ..base.clone()
        })
        .is_err());
        assert!(mk(Tool {
            command: Some(vec!["x".into()]),
            forward: true,
            ..base.clone()
        })
        .is_err());
        assert!(mk(Tool {
            forward: true,
            timeout_seconds: 0.0,
            ..base.clone()
        })
        .is_err());
        let s = mk(Tool {
            command: Some(vec!["x".into()]),
            policy: Some("p.yaml".into()),
            ..base
        })
        .unwrap();
        assert!(
            matches!(&s.tools[0].kind, ToolKind::Policy { policy, .. } if policy == Path::new("/p/p.yaml"))
        );
    }
}

//! The broker: one per run, shared by the connection's request tasks.
//! Dispatches methods, applies the tool allowlist and budget, and counts.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::counters::RpcCounters;
use super::forward::Forwarder;
use super::host_config::HostConfig;
use super::llm::LlmBroker;
use super::protocol::{self, code, Id, Reason, RpcFault, MAX_LINE_BYTES};
use super::tools::{self, ToolKind, ToolSet};
use super::RpcError;

/// What the supervisor hands the broker.
pub struct BrokerConfig {
    pub tools: Option<crate::policy::Tools>,
    pub llm: Option<crate::policy::LlmAccess>,
    /// Directory that relative tool commands and `policy:` paths resolve against.
    pub policy_dir: PathBuf,
    /// `--tool-fd`: a connected stream socket to the program that started capsule.
    pub tool_fd: Option<OwnedFd>,
    pub host: HostConfig,
    /// This capsule binary, for tools with `policy:`.
    pub capsule_exe: PathBuf,
}

pub struct Broker {
    tools: ToolSet,
    policy_dir: PathBuf,
    capsule_exe: PathBuf,
    forwarder: Forwarder,
    llm: LlmBroker,
    counters: Mutex<RpcCounters>,
}

impl Broker {
    pub fn new(cfg: BrokerConfig) -> Result<Broker, RpcError> {
        let tools = ToolSet::new(cfg.tools.as_ref(), &cfg.policy_dir)?;
        let llm = LlmBroker::new(cfg.llm.as_ref(), &cfg.host);
        let mut counters = RpcCounters::default();
        counters.llm.caps = llm.caps().clone();
        counters.llm.model = llm.model().map(str::to_string);
        Ok(Broker {
            tools,
            policy_dir: cfg.policy_dir,
            capsule_exe: cfg.capsule_exe,
            forwarder: Forwarder::new(cfg.tool_fd),
            llm,
            counters: Mutex::new(counters),
        })
    }

    /// Whether a tool call can start a host process (a `command:` or
    /// `policy:` tool; `forward: true` tools are answered by the caller).
    pub fn starts_processes(&self) -> bool {
        self.tools
            .tools
            .iter()
            .any(|t| !matches!(t.kind, ToolKind::Forward))
    }

    /// A snapshot of the counters, for the result and the audit record.
    pub fn counters(&self) -> RpcCounters {
        self.counters.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Answer a quick method straight into `out`; false when `method` needs
    /// [`Broker::answer`] (it may wait on a tool or a provider).
    pub fn answer_quick(&self, id: &Id, method: &str, params: &Value, out: &mut Vec<u8>) -> bool {
        match method {
            "ping" => protocol::write_raw_result(out, id, b"{}"),
            "tools/list" => out.extend_from_slice(&protocol::result_line(id, self.tools.list())),
            "initialize" => out.extend_from_slice(&protocol::result_line(id, initialize(params))),
            _ => return false,
        }
        true
    }

    /// Answer one request: the full line to write, at most 1 MiB.
    pub async fn answer(&self, id: &Id, method: &str, params: Value) -> Vec<u8> {
        let line = match self.dispatch(method, params).await {
            Ok(result) => protocol::result_line(id, result),
            Err(fault) => protocol::error_line(id, &fault),
        };
        if line.len() <= MAX_LINE_BYTES {
            return line;
        }
        if method == "tools/call" {
            if let Ok(mut c) = self.counters.lock() {
                c.tool_errors += 1;
            }
        }
        protocol::error_line(
            id,
            &RpcFault::new(
                Reason::OutputTooLarge,
                "the answer would be larger than 1 MiB",
            ),
        )
    }

    async fn dispatch(&self, method: &str, params: Value) -> Result<Value, RpcFault> {
        match method {
            "ping" => Ok(json!({})),
            "initialize" => Ok(initialize(&params)),
            "tools/list" => Ok(self.tools.list()),
            "tools/call" => self.tools_call(params).await,
            "llm/complete" => self.llm.complete(&params, &self.counters).await,
            _ => Err(RpcFault::with_code(
                code::METHOD_NOT_FOUND,
                Reason::BadRequest,
                "unknown method",
            )),
        }
    }

    fn refuse_tool(&self, fault: RpcFault) -> RpcFault {
        if let Ok(mut c) = self.counters.lock() {
            c.record_tool_refusal(fault.reason);
        }
        fault
    }

    async fn tools_call(&self, params: Value) -> Result<Value, RpcFault> {
        let (name, arguments) = match parse_call(params) {
            Ok(x) => x,
            Err(f) => return Err(self.refuse_tool(f)),
        };
        let Some(spec) = self.tools.get(&name) else {
            let shown: String = name.chars().take(100).collect();
            if let Ok(mut c) = self.counters.lock() {
                c.record_refused_tool(&name);
            }
            return Err(self.refuse_tool(RpcFault::with_code(
                code::INVALID_PARAMS,
                Reason::NotAllowed,
                format!("unknown tool '{shown}': not in the policy's tools.allow"),
            )));
        };
        {
            let Ok(mut c) = self.counters.lock() else {
                return Err(RpcFault::new(Reason::ToolFailed, "internal error"));
            };
            if c.tool_calls >= u64::from(self.tools.max_calls) {
                drop(c);
                return Err(self.refuse_tool(RpcFault::new(
                    Reason::LimitReached,
                    format!("tools.max_calls ({}) reached", self.tools.max_calls),
                )));
            }
            c.tool_calls += 1;
        }
        let r = match &spec.kind {
            ToolKind::Command { argv } => {
                tools::run_command(spec, argv, &self.policy_dir, &arguments).await
            }
            ToolKind::Policy { argv, policy } => {
                tools::run_under_policy(
                    spec,
                    argv,
                    policy,
                    &self.capsule_exe,
                    &self.policy_dir,
                    &arguments,
                )
                .await
            }
            ToolKind::Forward => {
                self.forwarder
                    .call(&spec.name, &arguments, spec.timeout)
                    .await
            }
        };
        if r.is_err() {
            if let Ok(mut c) = self.counters.lock() {
                c.tool_errors += 1;
            }
        }
        r
    }
}

fn parse_call(params: Value) -> Result<(String, Value), RpcFault> {
    let Value::Object(mut obj) = params else {
        return Err(RpcFault::bad_params("tools/call: params must be an object"));
    };
    let name = match obj.remove("name") {
        Some(Value::String(n)) => n,
        _ => return Err(RpcFault::bad_params("tools/call: name must be a string")),
    };
    let arguments = match obj.remove("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a,
        Some(_) => {
            return Err(RpcFault::bad_params(
                "tools/call: arguments must be an object",
            ))
        }
    };
    Ok((name, arguments))
}

/// MCP's handshake, so stock MCP clients can talk to the pipe.
fn initialize(params: &Value) -> Value {
    let version = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("2025-06-18");
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "capsule", "version": env!("CARGO_PKG_VERSION")},
    })
}

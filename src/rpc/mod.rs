//! The tool and LLM broker served over the child's RPC fd (section 5).
//!
//! The child holds one end of a socketpair at `$CAPSULE_RPC_FD`; the
//! supervisor runs [`serve`] on the other end in its event loop. Messages are
//! newline-delimited JSON-RPC 2.0 (MCP's stdio framing and tool shapes):
//! `ping`, `tools/list`, `tools/call`, `llm/complete` (and MCP's
//! `initialize`). Provider keys stay in the parent; tools run on the host
//! with a scrubbed environment; every refusal is counted in
//! [`RpcCounters`](counters::RpcCounters) for the result and the audit record.
//!
//! * [`protocol`] — codes, reasons, request/answer lines;
//! * [`framing`] — the bounded line reader (1 MiB a line);
//! * [`server`] — the per-connection loop;
//! * [`broker`] — dispatch, tool allowlist and budget, counters;
//! * [`tools`], [`process`] — host `command` tools (and under `policy:`);
//! * [`forward`] — `forward: true` tools over `--tool-fd`;
//! * [`llm`] — providers, caps, the HTTP client;
//! * [`host_config`] — the host's provider binding and ceiling;
//! * [`client`] — the blocking client used inside the sandbox (`capsule rpc`).

pub mod broker;
pub mod client;
pub mod counters;
pub mod forward;
pub mod framing;
pub mod host_config;
pub mod llm;
pub mod process;
pub mod protocol;
pub mod server;
pub mod tools;

pub use broker::{Broker, BrokerConfig};
pub use host_config::{HostConfig, HostConfigError};
pub use server::serve;

/// Errors setting up the broker (the run is refused: fail closed).
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("tools.allow: tool '{name}': {message}")]
    InvalidTool { name: String, message: String },
}

#[cfg(test)]
mod tests;

//! What the broker did, for the result object and the audit record.
//! Counts and caps only: never prompts, arguments, outputs or keys.

use std::collections::BTreeMap;

use serde::Serialize;

use super::protocol::Reason;

/// The effective LLM caps of a run (policy ∩ host ceiling).
#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct LlmCaps {
    pub enabled: bool,
    pub max_calls: Option<u32>,
    pub max_input_chars: Option<u64>,
    pub max_output_chars: Option<u64>,
    /// None = any model; `[]` = none.
    pub allowed_models: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct LlmCounters {
    /// Requests sent to the provider.
    pub calls: u64,
    /// Completions returned to the child.
    pub ok: u64,
    pub refused_not_allowed: u64,
    pub refused_limit_reached: u64,
    pub refused_input_too_large: u64,
    pub refused_output_too_large: u64,
    pub refused_model_not_allowed: u64,
    /// Malformed `llm/complete` params.
    pub refused_bad_request: u64,
    pub provider_errors: u64,
    pub timeouts: u64,
    /// The host-side model (None when no provider is configured).
    pub model: Option<String>,
    pub caps: LlmCaps,
}

impl LlmCounters {
    pub(crate) fn record_refusal(&mut self, r: Reason) {
        match r {
            Reason::NotAllowed => self.refused_not_allowed += 1,
            Reason::LimitReached => self.refused_limit_reached += 1,
            Reason::InputTooLarge => self.refused_input_too_large += 1,
            Reason::OutputTooLarge => self.refused_output_too_large += 1,
            Reason::ModelNotAllowed => self.refused_model_not_allowed += 1,
            Reason::Timeout => self.timeouts += 1,
            Reason::ProviderError | Reason::ToolFailed => self.provider_errors += 1,
            Reason::BadRequest => self.refused_bad_request += 1,
        }
    }
}

#[derive(Debug, Serialize, Default, Clone, PartialEq)]
pub struct RpcCounters {
    /// `tools/call` requests that ran a tool (within the allowlist and limit).
    pub tool_calls: u64,
    /// `tools/call` requests refused before running (unknown tool, limit, bad params).
    pub tool_refusals: u64,
    pub tool_refusals_by_reason: BTreeMap<String, u64>,
    /// Tool runs that ended in an error answer (timeout, failure to run, too much output).
    pub tool_errors: u64,
    pub llm: LlmCounters,
    /// The names of the tools refused as not allow-listed (distinct, the
    /// first [`MAX_REFUSED_TOOLS`], each at most 100 characters), for
    /// `exec --explain`.
    pub refused_tools: Vec<String>,
    /// The models of the LLM requests refused as not allowed (distinct,
    /// bounded as the tools), for `exec --explain`.
    pub refused_models: Vec<String>,
}

/// At most this many refused tool names are kept.
pub const MAX_REFUSED_TOOLS: usize = 16;

impl RpcCounters {
    pub(crate) fn record_refused_model(&mut self, name: &str) {
        let shown: String = name.chars().take(100).collect();
        if self.refused_models.len() < MAX_REFUSED_TOOLS && !self.refused_models.contains(&shown) {
            self.refused_models.push(shown);
        }
    }

    pub(crate) fn record_refused_tool(&mut self, name: &str) {
        let shown: String = name.chars().take(100).collect();
        if self.refused_tools.len() < MAX_REFUSED_TOOLS && !self.refused_tools.contains(&shown) {
            self.refused_tools.push(shown);
        }
    }

    pub(crate) fn record_tool_refusal(&mut self, r: Reason) {
        self.tool_refusals += 1;
        *self
            .tool_refusals_by_reason
            .entry(r.as_str().to_string())
            .or_insert(0) += 1;
    }
}

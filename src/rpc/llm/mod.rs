//! The LLM broker: `llm/complete` on behalf of the child, with the host's
//! provider, model and key, under the effective caps (policy ∩ ceiling).
//!
//! Order of checks, so that a refusal never reaches the provider:
//! access enabled → model allowed → params well-formed → input size →
//! call budget; then the provider call (timeout), then the output size.

pub mod anthropic;
pub mod caps;
pub mod http;
pub mod openai;

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use super::counters::{LlmCaps, RpcCounters};
use super::host_config::{HostConfig, LlmBinding, Provider};
use super::protocol::{Reason, RpcFault};
use crate::policy::LlmAccess;
use http::HttpFail;

/// One chat message, normalised to text.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// A provider's answer, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub content: String,
    pub model: Option<String>,
    pub finish_reason: Option<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// A key held by the parent only; never printed.
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

pub struct LlmBroker {
    binding: Option<LlmBinding>,
    caps: LlmCaps,
    key: Mutex<Option<Secret>>,
}

/// The largest `max_tokens` a child may ask for.
const MAX_TOKENS_LIMIT: u64 = 1_000_000;

impl LlmBroker {
    pub fn new(policy: Option<&LlmAccess>, host: &HostConfig) -> LlmBroker {
        let caps = caps::effective(policy, host);
        let binding = host.llm.clone();
        let key = if caps.enabled {
            binding.as_ref().and_then(read_key)
        } else {
            None
        };
        LlmBroker {
            binding,
            caps,
            key: Mutex::new(key),
        }
    }

    pub fn caps(&self) -> &LlmCaps {
        &self.caps
    }

    pub fn model(&self) -> Option<&str> {
        self.binding.as_ref().map(|b| b.model.as_str())
    }

    /// Handle one `llm/complete`; every refusal and failure is counted.
    pub async fn complete(
        &self,
        params: &Value,
        counters: &Mutex<RpcCounters>,
    ) -> Result<Value, RpcFault> {
        let r = self.complete_inner(params, counters).await;
        if let Ok(mut c) = counters.lock() {
            match &r {
                Ok(_) => c.llm.ok += 1,
                Err(f) => {
                    c.llm.record_refusal(f.reason);
                    // For `exec --explain`: which model was refused.
                    if matches!(f.reason, Reason::NotAllowed | Reason::ModelNotAllowed) {
                        if let Some(b) = &self.binding {
                            c.record_refused_model(&b.model);
                        }
                    }
                }
            }
        }
        r
    }

    async fn complete_inner(
        &self,
        params: &Value,
        counters: &Mutex<RpcCounters>,
    ) -> Result<Value, RpcFault> {
        // Access off: one refusal, whatever the host has configured, so the
        // child learns nothing about the host's provider.
        if !self.caps.enabled {
            return Err(RpcFault::new(
                Reason::NotAllowed,
                "LLM access is not allowed by the policy or the host",
            ));
        }
        let binding = match &self.binding {
            Some(b) => b,
            None => {
                return Err(RpcFault::new(
                    Reason::NotAllowed,
                    "no LLM provider is configured on the host",
                ))
            }
        };
        if !caps::model_allowed(&self.caps, &binding.model) {
            return Err(RpcFault::new(
                Reason::ModelNotAllowed,
                format!(
                    "the host's model '{}' is not in allowed_models",
                    binding.model
                ),
            ));
        }
        let (messages, max_tokens) = parse_params(params, binding.max_tokens)?;
        let input_chars: u64 = messages
            .iter()
            .map(|m| m.content.chars().count() as u64)
            .sum();
        if let Some(max) = self.caps.max_input_chars {
            if input_chars > max {
                return Err(RpcFault::new(
                    Reason::InputTooLarge,
                    format!("input is {input_chars} characters, the limit is {max}"),
                ));
            }
        }
        {
            let mut c = counters
                .lock()
                .map_err(|_| RpcFault::new(Reason::ProviderError, "internal error"))?;
            if let Some(max) = self.caps.max_calls {
                if c.llm.calls >= u64::from(max) {
                    return Err(RpcFault::new(
                        Reason::LimitReached,
                        format!("llm_access.max_calls ({max}) reached"),
                    ));
                }
            }
            c.llm.calls += 1;
        }
        let completion = self.call_provider(binding, &messages, max_tokens).await?;
        let out_chars = completion.content.chars().count() as u64;
        if let Some(max) = self.caps.max_output_chars {
            if out_chars > max {
                return Err(RpcFault::new(
                    Reason::OutputTooLarge,
                    format!("the completion is {out_chars} characters, the limit is {max}"),
                ));
            }
        }
        Ok(json!({
            "message": {"role": "assistant", "content": completion.content},
            "model": completion.model.unwrap_or_else(|| binding.model.clone()),
            "finish_reason": completion.finish_reason,
            "usage": {"input_tokens": completion.input_tokens.unwrap_or(0), "output_tokens": completion.output_tokens.unwrap_or(0)},
        }))
    }

    fn key(&self, binding: &LlmBinding) -> Option<String> {
        let mut k = self.key.lock().ok()?;
        if k.is_none() {
            *k = read_key(binding);
        }
        k.as_ref().map(|s| s.0.clone())
    }

    async fn call_provider(
        &self,
        b: &LlmBinding,
        messages: &[ChatMessage],
        max_tokens: u32,
    ) -> Result<Completion, RpcFault> {
        let key = self.key(b);
        if key.is_none() && b.provider != Provider::OpenaiCompatible {
            let var = b.api_key_env.as_deref().unwrap_or("(none)");
            return Err(RpcFault::new(
                Reason::ProviderError,
                format!("the host has no API key for the LLM provider (variable {var} is not set)"),
            ));
        }
        let (url, headers, body) = match b.provider {
            Provider::Anthropic => (
                format!("{}{}", b.base_url, anthropic::path()),
                anthropic::headers(key.as_deref(), &b.anthropic_version),
                anthropic::body(&b.model, messages, max_tokens),
            ),
            Provider::Openai | Provider::OpenaiCompatible => (
                format!("{}{}", b.base_url, openai::path()),
                openai::headers(key.as_deref()),
                openai::body(&b.model, messages, max_tokens),
            ),
        };
        let timeout = Duration::from_secs_f64(b.timeout_seconds.min(1e9));
        let answer = http::post_json(&url, &headers, &body, key.is_some(), timeout)
            .await
            .map_err(|e| match e {
                HttpFail::Timeout => RpcFault::new(
                    Reason::Timeout,
                    format!(
                        "the LLM provider did not answer within {} s",
                        b.timeout_seconds
                    ),
                ),
                HttpFail::Status(s) => RpcFault::new(
                    Reason::ProviderError,
                    format!("the LLM provider returned HTTP {s}"),
                ),
                HttpFail::Failed(why) => RpcFault::new(Reason::ProviderError, why),
            })?;
        let parsed = match b.provider {
            Provider::Anthropic => anthropic::parse(&answer),
            _ => openai::parse(&answer),
        };
        let completion = parsed.ok_or_else(|| {
            RpcFault::new(
                Reason::ProviderError,
                "the LLM provider's answer has an unexpected shape",
            )
        })?;
        if key.as_deref().is_some_and(|k| quotes_key(&completion, k)) {
            tracing::warn!(
                "the LLM provider's answer quoted the host's API key; withheld from the run"
            );
            return Err(RpcFault::new(
                Reason::ProviderError,
                "the LLM provider's answer was withheld (it quoted a host secret)",
            ));
        }
        Ok(completion)
    }
}

/// Keys shorter than this are placeholders (`EMPTY`, `none`, `dummy`) that
/// local OpenAI-compatible servers accept, not secrets; an answer quoting
/// one is not withheld.
const MIN_SECRET_LEN: usize = 12;

/// Whether any text of the answer that goes back to the run contains the
/// key: a provider or gateway that echoes its request's headers would
/// otherwise hand the run the host's key.
fn quotes_key(c: &Completion, key: &str) -> bool {
    key.len() >= MIN_SECRET_LEN
        && [
            Some(c.content.as_str()),
            c.model.as_deref(),
            c.finish_reason.as_deref(),
        ]
        .into_iter()
        .flatten()
        .any(|t| t.contains(key))
}

fn read_key(b: &LlmBinding) -> Option<Secret> {
    let var = b.api_key_env.as_deref()?;
    std::env::var(var)
        .ok()
        .filter(|k| !k.is_empty())
        .map(Secret)
}

/// `{"messages": [{"role", "content"}], "max_tokens"?}` (at most the host's
/// `llm.max_tokens`, which is also the default); content is a string
/// or a list of `{"type": "text", "text"}` parts.
fn parse_params(params: &Value, host_max_tokens: u32) -> Result<(Vec<ChatMessage>, u32), RpcFault> {
    let bad = |m: &str| RpcFault::bad_params(format!("llm/complete: {m}"));
    let Some(obj) = params.as_object() else {
        return Err(bad("params must be an object"));
    };
    let Some(Value::Array(list)) = obj.get("messages") else {
        return Err(bad("messages must be a list"));
    };
    if list.is_empty() {
        return Err(bad("messages must not be empty"));
    }
    let mut messages = Vec::with_capacity(list.len());
    for m in list {
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "user" | "assistant")) => r.to_string(),
            _ => return Err(bad("each message needs a role: system, user or assistant")),
        };
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut s = String::new();
                for p in parts {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => s.push_str(t),
                        _ => return Err(bad("only text content parts are supported")),
                    }
                }
                s
            }
            _ => return Err(bad("each message needs a string content")),
        };
        messages.push(ChatMessage { role, content });
    }
    let max_tokens = match obj.get("max_tokens") {
        None | Some(Value::Null) => host_max_tokens,
        Some(v) => match v.as_u64() {
            // The host's value is a ceiling on the request, not a default
            // the run may raise: the provider bills what it is asked for.
            Some(n) if (1..=MAX_TOKENS_LIMIT).contains(&n) => (n as u32).min(host_max_tokens),
            _ => return Err(bad("max_tokens must be a positive integer")),
        },
    };
    Ok((messages, max_tokens))
}

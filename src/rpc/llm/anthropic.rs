//! Anthropic messages: POST {base}/v1/messages, `x-api-key`,
//! `anthropic-version`; system messages go to the top-level `system`.

use serde_json::{json, Value};

use super::{ChatMessage, Completion};

pub fn path() -> &'static str {
    "/v1/messages"
}

pub fn headers(key: Option<&str>, version: &str) -> Vec<(&'static str, String)> {
    let mut h = vec![("anthropic-version", version.to_string())];
    if let Some(k) = key {
        h.push(("x-api-key", k.to_string()));
    }
    h
}

pub fn body(model: &str, messages: &[ChatMessage], max_tokens: u32) -> Value {
    let system: Vec<&str> = messages
        .iter()
        .filter(|m| m.role == "system")
        .map(|m| m.content.as_str())
        .collect();
    let msgs: Vec<Value> = messages
        .iter()
        .filter(|m| m.role != "system")
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let mut b = json!({"model": model, "max_tokens": max_tokens, "messages": msgs});
    if !system.is_empty() {
        b["system"] = Value::String(system.join("\n\n"));
    }
    b
}

pub fn parse(v: &Value) -> Option<Completion> {
    let blocks = v.get("content")?.as_array()?;
    let content: String = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let finish_reason = v.get("stop_reason").and_then(Value::as_str).map(|r| {
        match r {
            "end_turn" | "stop_sequence" => "stop",
            "max_tokens" => "length",
            "tool_use" => "tool_calls",
            other => other,
        }
        .to_string()
    });
    Some(Completion {
        content,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        finish_reason,
        input_tokens: v.pointer("/usage/input_tokens").and_then(Value::as_u64),
        output_tokens: v.pointer("/usage/output_tokens").and_then(Value::as_u64),
    })
}

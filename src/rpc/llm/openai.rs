//! OpenAI chat completions (`openai` and `openai-compatible`):
//! POST {base}/chat/completions, `Authorization: Bearer KEY`.

use serde_json::{json, Value};

use super::{ChatMessage, Completion};

pub fn path() -> &'static str {
    "/chat/completions"
}

pub fn headers(key: Option<&str>) -> Vec<(&'static str, String)> {
    key.map(|k| vec![("authorization", format!("Bearer {k}"))])
        .unwrap_or_default()
}

pub fn body(model: &str, messages: &[ChatMessage], max_tokens: u32) -> Value {
    let msgs: Vec<Value> = messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    json!({"model": model, "messages": msgs, "max_tokens": max_tokens})
}

/// None when the answer does not have the expected shape.
pub fn parse(v: &Value) -> Option<Completion> {
    let choice = v.get("choices")?.get(0)?;
    let content = match choice.pointer("/message/content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(_) => return None,
    };
    Some(Completion {
        content,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        input_tokens: v.pointer("/usage/prompt_tokens").and_then(Value::as_u64),
        output_tokens: v
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64),
    })
}

//! JSON-RPC 2.0 wire types of section 5: codes, reasons, error and response
//! lines. Everything the broker writes to the child is built here.

use serde_json::{json, Value};

/// At most this many bytes in one line, in either direction (section 5).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// JSON-RPC error codes used by capsule.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const DENIED: i64 = -32001;
    pub const LIMIT_REACHED: i64 = -32002;
    pub const UPSTREAM: i64 = -32003;
    pub const TOO_LARGE: i64 = -32004;
}

/// `error.data.reason`: the fixed vocabulary of section 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    NotAllowed,
    LimitReached,
    InputTooLarge,
    OutputTooLarge,
    ModelNotAllowed,
    ProviderError,
    ToolFailed,
    Timeout,
    BadRequest,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::NotAllowed,
        Reason::LimitReached,
        Reason::InputTooLarge,
        Reason::OutputTooLarge,
        Reason::ModelNotAllowed,
        Reason::ProviderError,
        Reason::ToolFailed,
        Reason::Timeout,
        Reason::BadRequest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAllowed => "not_allowed",
            Reason::LimitReached => "limit_reached",
            Reason::InputTooLarge => "input_too_large",
            Reason::OutputTooLarge => "output_too_large",
            Reason::ModelNotAllowed => "model_not_allowed",
            Reason::ProviderError => "provider_error",
            Reason::ToolFailed => "tool_failed",
            Reason::Timeout => "timeout",
            Reason::BadRequest => "bad_request",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The code a refusal or failure of this kind carries (unless a more
    /// specific one applies, e.g. -32602 for an unknown tool).
    pub fn default_code(self) -> i64 {
        match self {
            Reason::NotAllowed | Reason::ModelNotAllowed => code::DENIED,
            Reason::LimitReached => code::LIMIT_REACHED,
            Reason::InputTooLarge | Reason::OutputTooLarge => code::TOO_LARGE,
            Reason::ProviderError | Reason::ToolFailed | Reason::Timeout => code::UPSTREAM,
            Reason::BadRequest => code::INVALID_PARAMS,
        }
    }
}

/// One JSON-RPC error answer: code, a message safe to show the child (never
/// a key, a provider body or a prompt), and the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcFault {
    pub code: i64,
    pub message: String,
    pub reason: Reason,
}

impl RpcFault {
    pub fn new(reason: Reason, message: impl Into<String>) -> RpcFault {
        RpcFault {
            code: reason.default_code(),
            message: message.into(),
            reason,
        }
    }
    pub fn with_code(code: i64, reason: Reason, message: impl Into<String>) -> RpcFault {
        RpcFault {
            code,
            message: message.into(),
            reason,
        }
    }
    pub fn bad_params(message: impl Into<String>) -> RpcFault {
        RpcFault::with_code(code::INVALID_PARAMS, Reason::BadRequest, message)
    }
    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message, "data": {"reason": self.reason.as_str()}})
    }
}

/// A request id as the child sent it (number, string or null), echoed back.
pub type Id = Value;

/// Serialize a success line (with its trailing newline).
pub fn result_line(id: &Id, result: Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// Serialize an error line (with its trailing newline).
pub fn error_line(id: &Id, fault: &RpcFault) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "error": fault.to_json()}))
}

/// Append a success line whose result is already serialized JSON.
pub fn write_raw_result(out: &mut Vec<u8>, id: &Id, result: &[u8]) {
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // Writing a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, id);
    out.extend_from_slice(br#","result":"#);
    out.extend_from_slice(result);
    out.extend_from_slice(b"}\n");
}

fn line(v: &Value) -> Vec<u8> {
    // serde_json cannot fail on a Value with string keys.
    let mut out = serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec());
    out.push(b'\n');
    out
}

/// A parsed request line.
#[derive(Debug)]
pub enum Incoming {
    /// A call with an id: must be answered.
    Request {
        id: Id,
        method: String,
        params: Value,
    },
    /// No id: never answered.
    Notification { method: String },
    /// A response or other message that is not ours to answer (ignored).
    Ignored,
    /// Not a valid request; answer with this id (null when unknown).
    Invalid { id: Id, fault: RpcFault },
}

/// Classify one line of bytes.
pub fn parse_line(bytes: &[u8]) -> Incoming {
    let v: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(_) => {
            return Incoming::Invalid {
                id: Value::Null,
                fault: RpcFault::with_code(
                    code::PARSE_ERROR,
                    Reason::BadRequest,
                    "parse error: not valid JSON",
                ),
            }
        }
    };
    let invalid = |id: Id, msg: &str| Incoming::Invalid {
        id,
        fault: RpcFault::with_code(
            code::INVALID_REQUEST,
            Reason::BadRequest,
            format!("invalid request: {msg}"),
        ),
    };
    let Value::Object(mut obj) = v else {
        return invalid(
            Value::Null,
            "expected a JSON object (batches are not supported)",
        );
    };
    let id = obj.remove("id");
    let id_ok = matches!(
        id,
        None | Some(Value::Null) | Some(Value::Number(_)) | Some(Value::String(_))
    );
    if !id_ok {
        return invalid(Value::Null, "id must be a number, a string or null");
    }
    let answer_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(answer_id, "jsonrpc must be \"2.0\"");
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => return invalid(answer_id, "method must be a string"),
        None if obj.contains_key("result") || obj.contains_key("error") => {
            return Incoming::Ignored
        }
        None => return invalid(answer_id, "missing method"),
    };
    let params = obj.remove("params").unwrap_or(Value::Null);
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return invalid(answer_id, "params must be an object or an array");
    }
    match id {
        None => Incoming::Notification { method },
        Some(id) => Incoming::Request { id, method, params },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_lines() {
        assert!(
            matches!(parse_line(b"{"), Incoming::Invalid { fault, .. } if fault.code == code::PARSE_ERROR)
        );
        assert!(
            matches!(parse_line(b"[]"), Incoming::Invalid { fault, .. } if fault.code == code::INVALID_REQUEST)
        );
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#),
            Incoming::Invalid { fault, .. } if fault.code == code::INVALID_REQUEST
        ));
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","id":7,"method":3}"#),
            Incoming::Invalid { id, .. } if id == 7
        ));
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","method":"x"}"#),
            Incoming::Notification { .. }
        ));
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Incoming::Ignored
        ));
        assert!(matches!(
            parse_line(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#),
            Incoming::Request { method, .. } if method == "ping"
        ));
    }

    #[test]
    fn raw_result_line_is_json() {
        let mut out = vec![];
        write_raw_result(&mut out, &json!("a\"b"), b"{}");
        write_raw_result(&mut out, &json!(7), b"{}");
        let lines: Vec<Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(
            lines[0],
            json!({"jsonrpc": "2.0", "id": "a\"b", "result": {}})
        );
        assert_eq!(lines[1]["id"], 7);
    }

    #[test]
    fn reasons_round_trip() {
        for r in Reason::ALL {
            assert_eq!(Reason::parse(r.as_str()), Some(r));
        }
    }
}

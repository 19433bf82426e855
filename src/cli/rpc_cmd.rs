//! `capsule rpc METHOD [JSON]`: inside a sandbox, call the parent's broker.

use clap::Args;

#[derive(Debug, Args)]
pub struct RpcArgs {
    /// ping | tools/list | tools/call | llm/complete
    pub method: String,
    /// Params as JSON (default {}).
    pub params: Option<String>,
}

pub fn run(a: RpcArgs) -> i32 {
    let params: serde_json::Value = match a.params.as_deref().map(serde_json::from_str).transpose() {
        Ok(p) => p.unwrap_or_else(|| serde_json::json!({})),
        Err(e) => {
            super::error_line(format!("params are not valid JSON: {e}"));
            return 2;
        }
    };
    let _ = (a.method, params);
    super::error_line("the RPC client is not available in this build yet");
    1
}

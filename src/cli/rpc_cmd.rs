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
    crate::rpc::client::run_cli(&a.method, a.params.as_deref())
}

//! What the supervisor serves besides stdio: the RPC broker and the proxy.
//!
//! Prepared before fork (sockets the child inherits, variables for its
//! environment), started on the event loop after fork, and asked for their
//! counters when the run ends.

use std::os::fd::{OwnedFd, RawFd};

use nix::errno::Errno;
use thiserror::Error;

use super::result::RunResult;
use crate::plan::Plan;
use crate::policy::NetMode;
use crate::sys::channel::Channel;

#[derive(Debug, Error)]
pub enum ServiceError {
    #[error("network.mode proxy is not available in this build yet; use `none` or `unrestricted` (nothing ran)")]
    ProxyUnavailable,
}

/// Counters gathered from the services at the end of a run.
#[derive(Debug, Default)]
pub struct Usage {
    pub tool_calls: u64,
    pub tool_refusals: u64,
    pub llm_calls: u64,
    pub denied_hosts: Vec<String>,
    pub detail: Option<serde_json::Value>,
}

impl Usage {
    pub fn apply(self, r: &mut RunResult) {
        r.tool_calls = self.tool_calls;
        r.tool_refusals = self.tool_refusals;
        r.llm_calls = self.llm_calls;
        r.denied_hosts = self.denied_hosts;
        r.usage = self.detail;
    }
}

/// The run's services.
#[derive(Default)]
pub struct Services {
    tool_fd: Option<OwnedFd>,
}

impl Services {
    pub fn prepare(plan: &Plan, tool_fd: Option<OwnedFd>) -> Result<Services, ServiceError> {
        if plan.net.mode == NetMode::Proxy {
            return Err(ServiceError::ProxyUnavailable);
        }
        Ok(Services { tool_fd })
    }
    /// The loopback port of a proxy the child reaches without a netns.
    pub fn proxy_port(&self) -> Option<u16> {
        None
    }
    /// Variables the services add to the child's environment.
    pub fn child_env(&self) -> Vec<(String, String)> {
        vec![]
    }
    pub fn child_rpc_fd(&self) -> Option<RawFd> {
        None
    }
    pub fn wants_netns(&self) -> bool {
        false
    }
    pub fn net_setup(&self) -> Option<fn(&Channel) -> Result<(), Errno>> {
        None
    }
    /// Close the parent's copies of descriptors that now belong to the child.
    pub fn close_child_ends(&mut self) {}
    /// Start serving on the event loop.
    pub fn start(&mut self, _chan: &Channel) {
        let _ = &self.tool_fd;
    }
    /// A descriptor the child sent (e.g. the proxy's listening socket).
    pub fn on_fd(&mut self, _tag: i32, _fd: Option<OwnedFd>) {}
    /// Stop serving and collect counters.
    pub async fn finish(&mut self) -> Usage {
        Usage::default()
    }
}

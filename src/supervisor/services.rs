//! What the supervisor serves besides stdio: the RPC broker and the proxy.
//!
//! Prepared before fork (sockets the child inherits, variables for its
//! environment), started on the event loop after fork, and asked for their
//! counters when the run ends.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::plan::Plan;
use crate::policy::NetMode;
use crate::proxy::ProxyService;
use crate::result::RunResult;
use crate::rpc::{Broker, BrokerConfig};
use crate::sandbox::netns::NetSetup;
use crate::sys::channel::Channel;

#[derive(Debug, Error)]
pub enum ServiceError {
    #[error("network.mode proxy: {0}")]
    Proxy(#[from] crate::proxy::ProxyServiceError),
    #[error("host LLM configuration: {0}")]
    HostConfig(#[from] crate::rpc::HostConfigError),
    #[error(transparent)]
    Broker(#[from] crate::rpc::RpcError),
    #[error("creating the RPC socketpair: {0}")]
    Socket(std::io::Error),
    #[error(transparent)]
    Egress(#[from] super::egress::EgressSetupError),
}

/// Counters gathered from the services at the end of a run.
#[derive(Debug, Default)]
pub struct Usage {
    pub tool_calls: u64,
    pub tool_refusals: u64,
    pub llm_calls: u64,
    pub denied_hosts: Vec<String>,
    pub detail: Option<serde_json::Value>,
    pub credentials_used: Vec<crate::result::CredentialUsed>,
    /// The proxy's refused requests to terminated hosts, as `denials` entries.
    pub egress_denials: Vec<serde_json::Value>,
}

impl Usage {
    pub fn apply(self, r: &mut RunResult) {
        r.tool_calls = self.tool_calls;
        r.tool_refusals = self.tool_refusals;
        r.llm_calls = self.llm_calls;
        r.denied_hosts = self.denied_hosts;
        r.usage = self.detail;
        r.credentials_used = self.credentials_used;
        if !self.egress_denials.is_empty() {
            r.denials
                .get_or_insert_with(Vec::new)
                .extend(self.egress_denials);
        }
    }
}

/// The run's services.
///
/// Every run gets the RPC pipe (so `ping` always works and tools/LLM
/// refusals are answered and counted even without a `tools` section).
pub struct Services {
    broker: Arc<Broker>,
    rpc_parent: Option<std::os::unix::net::UnixStream>,
    rpc_child: Option<OwnedFd>,
    rpc_task: Option<tokio::task::JoinHandle<()>>,
    /// The egress proxy (`network.mode: proxy` only).
    proxy: Option<ProxyService>,
    /// Credentials' placeholders and the run's CA, where the proxy terminates TLS.
    egress: Option<super::egress::RunEgress>,
    /// The run's CA bundle, once written (removed when the services go).
    bundle: Option<crate::plan::CaBundle>,
}

impl Drop for Services {
    fn drop(&mut self) {
        if let Some(b) = self.bundle.take() {
            super::egress::remove_bundle(&b);
        }
    }
}

impl Services {
    pub fn prepare(plan: &Plan, tool_fd: Option<OwnedFd>) -> Result<Services, ServiceError> {
        // Credentials are read (and the CA made) before anything else of the run.
        let egress = super::egress::prepare(plan)?;
        let proxy = if plan.net.mode == NetMode::Proxy {
            // Predict what clone() will grant (CAPSULE_NO_NAMESPACES=1 forces the fallback).
            Some(ProxyService::prepare_with_egress(
                &plan.net.allow_hosts,
                plan.net.max_connections,
                crate::kernel::probe().namespaces,
                egress.as_ref().map(|e| e.egress.clone()),
            )?)
        } else {
            None
        };
        // The host's LLM config (and key) is read only when the policy asks
        // for LLM access: an unreadable $HOME or config must not fail other runs.
        let host = if plan.llm.as_ref().is_some_and(|l| l.enabled) {
            crate::rpc::host_config::load()?
        } else {
            crate::rpc::HostConfig::default()
        };
        let broker = Broker::new(BrokerConfig {
            tools: plan.tools.clone(),
            llm: plan.llm.clone(),
            policy_dir: plan.policy_dir.clone(),
            tool_fd,
            host,
            capsule_exe: std::env::current_exe().unwrap_or_else(|_| "capsule".into()),
        })?;
        // Both ends close-on-exec; the child clears the flag on its end only.
        let (parent, child) =
            std::os::unix::net::UnixStream::pair().map_err(ServiceError::Socket)?;
        Ok(Services {
            broker: Arc::new(broker),
            rpc_parent: Some(parent),
            rpc_child: Some(child.into()),
            rpc_task: None,
            proxy,
            egress,
            bundle: None,
        })
    }

    /// Write the run's CA bundle (after the private TMPDIR exists, before the
    /// layers are prepared: Landlock and the view open it).
    pub fn write_ca_bundle(&mut self, plan: &Plan) -> Result<(), ServiceError> {
        if let (Some(e), Some(b)) = (&self.egress, &plan.fs.ca_bundle) {
            super::egress::write_bundle(b, &e.ca_pem)?;
            self.bundle = Some(b.clone());
        }
        Ok(())
    }
    /// The loopback port of a proxy the child reaches without a netns.
    pub fn proxy_port(&self) -> Option<u16> {
        self.proxy.as_ref().map(ProxyService::port)
    }
    /// Variables the services add to the child's environment.
    pub fn child_env(&self) -> Vec<(String, String)> {
        let mut env = vec![];
        if let Some(fd) = self.child_rpc_fd() {
            env.push(("CAPSULE_RPC_FD".to_string(), fd.to_string()));
        }
        if let Some(p) = &self.proxy {
            env.extend(p.child_env());
        }
        if let Some(e) = &self.egress {
            env.extend(super::egress::child_env(e, self.bundle.as_ref()));
        }
        env
    }
    pub fn child_rpc_fd(&self) -> Option<RawFd> {
        self.rpc_child.as_ref().map(|f| f.as_raw_fd())
    }
    /// A duplicate of capsule's end of the RPC socket pair, for the memory
    /// watchdog to ask what waits unread there (a descriptor the run sent,
    /// in flight, holds its file: `supervisor::memwatch`).
    pub fn rpc_queue(&self) -> Option<OwnedFd> {
        let parent = self.rpc_parent.as_ref()?;
        parent.try_clone().ok().map(OwnedFd::from)
    }
    /// The inode of the child's end of the RPC socket pair.
    pub fn child_rpc_inode(&self) -> Option<u64> {
        let fd = self.rpc_child.as_ref()?;
        nix::sys::stat::fstat(fd).ok().map(|st| st.st_ino)
    }
    pub fn wants_netns(&self) -> bool {
        self.proxy.as_ref().is_some_and(ProxyService::wants_netns)
    }
    /// What the run's init needs to create the proxy's endpoint in its network
    /// namespace (netns path only).
    pub fn net_setup(&self) -> Option<NetSetup> {
        let proxy = self.proxy.as_ref().filter(|p| p.wants_netns())?;
        Some(NetSetup {
            port: proxy.port(),
            backlog: crate::proxy::LISTENER_BACKLOG,
            tag: crate::proxy::LISTENER_TAG,
            host_listener: proxy.host_listener_fd(),
        })
    }
    /// How the child reaches the proxy ("netns" | "landlock-tcp-fallback"), once started.
    pub fn network_path(&self) -> Option<String> {
        self.proxy
            .as_ref()
            .and_then(|p| p.path())
            .map(|p| p.as_str().to_string())
    }
    /// Whether tool calls may start host processes (see `supervisor::run_prepared`).
    pub fn starts_processes(&self) -> bool {
        self.broker.starts_processes()
    }
    /// Close the parent's copies of descriptors that now belong to the child.
    pub fn close_child_ends(&mut self) {
        self.rpc_child = None;
    }
    /// Start serving on the event loop; `netns`: the child got its own network namespace.
    pub fn start(&mut self, _chan: &Channel, netns: bool) {
        if let Some(p) = &mut self.proxy {
            p.start(netns);
        }
        if let Some(parent) = self.rpc_parent.take() {
            let _ = parent.set_nonblocking(true);
            // The memory watchdog holds a duplicate of this end: when serving
            // ends, shut the socket down, so the run can park nothing more in
            // it (its sends fail, as they did when this end closed).
            let closer = parent.try_clone().ok();
            match tokio::net::UnixStream::from_std(parent) {
                Ok(stream) => {
                    let broker = self.broker.clone();
                    self.rpc_task = Some(tokio::spawn(async move {
                        crate::rpc::serve(stream, broker).await;
                        if let Some(c) = closer {
                            let _ = c.shutdown(std::net::Shutdown::Both);
                        }
                    }))
                }
                Err(e) => tracing::warn!("cannot serve the RPC pipe: {e}"),
            }
        }
    }
    /// A descriptor the child sent (e.g. the proxy's listening socket).
    /// Only the proxy's listener is expected; anything else is closed.
    pub fn on_fd(&mut self, tag: i32, fd: Option<OwnedFd>) {
        if let Some(p) = &mut self.proxy {
            p.on_fd(tag, fd);
        }
    }
    /// Stop serving and collect counters.
    pub async fn finish(&mut self) -> Usage {
        // The child's end is closed once every process of the run is gone, so
        // the broker sees end-of-file; give in-flight answers a moment.
        if let Some(mut task) = self.rpc_task.take() {
            if tokio::time::timeout(Duration::from_millis(500), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
        let c = self.broker.counters();
        let mut detail = serde_json::json!({
            "tool_refusals_by_reason": c.tool_refusals_by_reason,
            "tool_errors": c.tool_errors,
            "llm": c.llm,
        });
        if !c.refused_tools.is_empty() {
            detail["refused_tools"] = serde_json::json!(c.refused_tools);
        }
        if !c.refused_models.is_empty() {
            detail["refused_models"] = serde_json::json!(c.refused_models);
        }
        let mut denied_hosts = vec![];
        let mut credentials_used = vec![];
        let mut egress_denials = vec![];
        if let Some(p) = &mut self.proxy {
            let report = p.finish();
            denied_hosts = report.denied_hosts.clone();
            credentials_used = (report.credentials_used.iter())
                .map(|c| crate::result::CredentialUsed {
                    name: c.name.clone(),
                    requests: c.requests,
                })
                .collect();
            egress_denials = report.refusals.iter().map(super::egress::denial).collect();
            detail["proxy"] = serde_json::to_value(&report).unwrap_or_default();
        }
        Usage {
            tool_calls: c.tool_calls,
            tool_refusals: c.tool_refusals,
            llm_calls: c.llm.calls,
            denied_hosts,
            detail: Some(detail),
            credentials_used,
            egress_denials,
        }
    }
}

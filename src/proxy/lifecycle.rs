//! The proxy as a service of one run: prepared before fork, served on the supervisor's
//! current-thread runtime after it, counted at the end.
//!
//! Two paths, decided before fork and confirmed by what the kernel granted:
//! * **netns** — the child gets its own network namespace; its init listens on
//!   `127.0.0.1:<port>` in there and sends the socket back (`sandbox::netns`, from the
//!   port, [`LISTENER_BACKLOG`] and [`LISTENER_TAG`] the supervisor puts in the child's
//!   spec). The command can
//!   reach that endpoint and nothing else: no other interface exists in its namespace.
//! * **landlock-tcp-fallback** — no namespaces (user namespaces disabled, or
//!   `CAPSULE_NO_NAMESPACES=1`, which forces this path for testing): the supervisor
//!   listens on the host's `127.0.0.1:<port>`; seccomp allows TCP sockets only and
//!   Landlock allows TCP connect to that one port only. Landlock rules are per port, not
//!   per address, so this path cannot pin the address: the command could also reach
//!   another address's listener on the same port number (the port is an ephemeral one
//!   the kernel chose, so a clash is unlikely, not impossible).
//!
//! The host listener is bound before fork on both paths: its port is the one the
//! child's environment and Landlock rule name, and it is the endpoint if the kernel
//! refuses the namespaces at clone time after all.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use thiserror::Error;
use tokio::task::JoinHandle;

use super::bounds::Limits;
use super::egress::{Egress, EgressError, Engine};
use super::{
    listener_from_fd, serve_with_egress, Allowlist, AllowlistError, ProxyReport, ProxyStats,
};
use crate::sys::{self, raw};

/// The `Msg::Fd` tag of the listening socket the run's init sends from its network
/// namespace.
pub const LISTENER_TAG: i32 = 0x7078; // "px"

/// Pending connections a proxy listener queues before the supervisor accepts (std's
/// is 128): deep, for bursts of connections.
pub const LISTENER_BACKLOG: i32 = 4096;

#[derive(Debug, Error)]
pub enum ProxyServiceError {
    #[error(transparent)]
    Allowlist(#[from] AllowlistError),
    #[error("binding the proxy's listener on 127.0.0.1: {0}")]
    Bind(std::io::Error),
    #[error(transparent)]
    Egress(#[from] EgressError),
}

/// How the child reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyPath {
    Netns,
    LandlockTcpFallback,
}

impl ProxyPath {
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyPath::Netns => "netns",
            ProxyPath::LandlockTcpFallback => "landlock-tcp-fallback",
        }
    }
}

/// Variables naming the proxy in the child's environment (NO_PROXY empty: nothing
/// bypasses it; NODE_USE_ENV_PROXY makes Node's fetch honour them).
pub fn env_vars(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name.to_string(), url.clone()));
        env.push((name.to_ascii_lowercase(), url.clone()));
    }
    env.push(("NO_PROXY".into(), String::new()));
    env.push(("no_proxy".into(), String::new()));
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env
}

/// One run's proxy.
pub struct ProxyService {
    allow: Arc<Allowlist>,
    stats: Arc<ProxyStats>,
    limits: Limits,
    egress: Option<Arc<Engine>>,
    port: u16,
    want_netns: bool,
    path: Option<ProxyPath>,
    host_listener: Option<std::net::TcpListener>,
    task: Option<JoinHandle<()>>,
}

impl ProxyService {
    /// Parse the allowlist (empty: refused) and bind the host listener. Before fork.
    /// `max_connections`: client connections held at once (`network.max_connections`).
    #[cfg(test)]
    pub fn prepare(
        allow_hosts: &[String],
        max_connections: u32,
        want_netns: bool,
    ) -> Result<ProxyService, ProxyServiceError> {
        ProxyService::prepare_with_egress(allow_hosts, max_connections, want_netns, None)
    }

    /// [`ProxyService::prepare`], with the hosts `egress` names TLS-terminated (its
    /// patterns and `upstream_ca` checked here: an error is a start-up error).
    /// `allow_hosts` must hold every entry, the maps' hosts too.
    pub fn prepare_with_egress(
        allow_hosts: &[String],
        max_connections: u32,
        want_netns: bool,
        egress: Option<Arc<Egress>>,
    ) -> Result<ProxyService, ProxyServiceError> {
        let allow = Allowlist::parse(allow_hosts)?;
        let egress = egress.map(Engine::new).transpose()?.map(Arc::new);
        let host = listen_host_loopback(0).map_err(ProxyServiceError::Bind)?;
        let port = host.local_addr().map_err(ProxyServiceError::Bind)?.port();
        Ok(ProxyService {
            allow: Arc::new(allow),
            stats: Arc::default(),
            limits: Limits {
                max_connections: (max_connections as usize).max(1),
            },
            egress,
            port,
            want_netns,
            path: None,
            host_listener: Some(host),
            task: None,
        })
    }

    /// The loopback port the child connects to (also its Landlock TCP connect rule).
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn wants_netns(&self) -> bool {
        self.want_netns
    }

    pub fn child_env(&self) -> Vec<(String, String)> {
        env_vars(self.port)
    }

    /// The listener on the host's loopback, until [`ProxyService::start`]: on the
    /// netns path the run's init closes its copy.
    pub fn host_listener_fd(&self) -> Option<RawFd> {
        self.host_listener.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The path in force, once started.
    pub fn path(&self) -> Option<ProxyPath> {
        self.path
    }

    /// Start on the runtime, now that the kernel said whether the child got its own
    /// network namespace (`in_netns`). In a namespace the endpoint arrives later
    /// through [`ProxyService::on_fd`].
    pub fn start(&mut self, in_netns: bool) {
        raise_nofile_limit();
        let host = self.host_listener.take();
        if in_netns {
            self.path = Some(ProxyPath::Netns);
            // The child cannot reach the host's loopback: this endpoint is unused.
            drop(host);
            return;
        }
        self.path = Some(ProxyPath::LandlockTcpFallback);
        let Some(host) = host else { return };
        if self.want_netns {
            tracing::info!("no network namespace after all: the proxy listens on the host's loopback (Landlock TCP fallback)");
        }
        match host
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(host))
        {
            Ok(l) => self.serve(l),
            Err(e) => tracing::warn!("proxy: cannot serve the loopback listener: {e}"),
        }
    }

    /// A descriptor from the child: the listener of the namespace path. Anything else
    /// (another tag, a second listener, one on the fallback path) is closed.
    pub fn on_fd(&mut self, tag: i32, fd: Option<OwnedFd>) {
        let Some(fd) = fd else {
            tracing::warn!("proxy: the child sent message Fd({tag}) without a descriptor");
            return;
        };
        if tag != LISTENER_TAG || self.path != Some(ProxyPath::Netns) || self.task.is_some() {
            tracing::warn!("proxy: closing an unexpected descriptor from the child (tag {tag})");
            return;
        }
        match listener_from_fd(fd) {
            Ok(l) => self.serve(l),
            Err(e) => tracing::warn!("proxy: cannot serve the namespace's listener: {e}"),
        }
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        self.task = Some(tokio::spawn(serve_with_egress(
            listener,
            self.allow.clone(),
            self.stats.clone(),
            self.limits,
            self.egress.clone(),
        )));
    }

    /// Stop (every tunnel goes with the task) and report. Every process of the run is
    /// gone by now, so nothing is cut short that could still be used.
    pub fn finish(&mut self) -> ProxyReport {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.host_listener = None;
        self.stats.snapshot()
    }
}

/// A close-on-exec listener on the host's 127.0.0.1:port with the proxy's backlog:
/// the same socket the run's init makes inside its namespace (the command never
/// inherits it).
fn listen_host_loopback(port: u16) -> std::io::Result<std::net::TcpListener> {
    let fd = raw::listen_tcp_loopback(port, LISTENER_BACKLOG)
        .map_err(std::io::Error::from_raw_os_error)?;
    // The raw call just created this descriptor and nothing else owns it.
    Ok(std::net::TcpListener::from(sys::own_new_fd(fd)))
}

/// Each tunnel takes two descriptors: let the supervisor use its hard limit (the child
/// does not inherit this: it is raised after fork).
fn raise_nofile_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::debug!("proxy: could not raise RLIMIT_NOFILE to {hard}: {e}");
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_the_proxy_everywhere() {
        let env = env_vars(4321);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        for k in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            assert_eq!(get(k), Some("http://127.0.0.1:4321"), "{k}");
        }
        assert_eq!(get("NO_PROXY"), Some(""));
        assert_eq!(get("no_proxy"), Some(""));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
    }

    #[test]
    fn host_listener_listens_on_loopback_and_accepts() {
        let l = listen_host_loopback(0).expect("listen");
        let port = l.local_addr().expect("addr").port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let (s, _) = l.accept().expect("accept");
        assert_eq!(s.peer_addr().expect("peer"), c.local_addr().expect("local"));
    }

    #[test]
    fn empty_allowlist_is_refused() {
        assert!(matches!(
            ProxyService::prepare(&[], 256, false),
            Err(ProxyServiceError::Allowlist(AllowlistError::Empty))
        ));
    }

    #[test]
    fn fallback_serves_the_host_listener() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let mut svc =
            ProxyService::prepare(&["127.0.0.1".to_string()], 256, false).expect("prepare");
        let port = svc.port();
        let report = rt.block_on(async move {
            svc.start(false);
            assert_eq!(svc.path(), Some(ProxyPath::LandlockTcpFallback));
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(
                b"CONNECT blocked.example:443 HTTP/1.1\r\nHost: blocked.example:443\r\n\r\n",
            )
            .await
            .expect("write");
            let mut buf = vec![0u8; 12];
            s.read_exact(&mut buf).await.expect("read");
            assert_eq!(&buf, b"HTTP/1.1 403");
            svc.finish()
        });
        assert_eq!(report.denied, 1);
        assert_eq!(report.denied_hosts, vec!["blocked.example".to_string()]);
    }
}

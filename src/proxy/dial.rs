//! Open an upstream TCP connection for a request: decide, resolve, decide again on the
//! resolved addresses, connect to one of them. Counting and the refusal log line
//! happen here, once per connection attempt. [`Shared`] is what every client
//! connection brings to it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper::Response;
use tokio::net::TcpStream;

use super::allow_hosts::{Allowlist, TargetHost};
use super::decide::{check_target, filter_resolved};
use super::egress::Engine;
use super::refusal::{bad_gateway, ProxyBody, Refusal, UpstreamFailure};
use super::stats::ProxyStats;

/// How long one connect attempt (to one resolved address) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long name resolution may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection task shares: the list it is checked against and the
/// counters it adds to.
pub struct Shared {
    pub allow: Arc<Allowlist>,
    pub stats: Arc<ProxyStats>,
    /// The TLS-terminating engine, when some host is terminated.
    pub egress: Option<Arc<Engine>>,
}

/// Why no upstream stream: answered with 403 or 502.
#[derive(Debug)]
pub enum DialError {
    Refused(Refusal),
    Upstream(UpstreamFailure),
}

impl DialError {
    /// The response to send downstream.
    pub fn response(&self, host: &str, port: u16) -> Response<ProxyBody> {
        match self {
            DialError::Refused(r) => r.response(),
            DialError::Upstream(f) => bad_gateway(host, port, *f),
        }
    }
}

/// Step 1 with its bookkeeping: refusals are counted and logged here.
pub fn authorize(
    allow: &Allowlist,
    stats: &ProxyStats,
    host: &str,
    port: u16,
) -> Result<TargetHost, DialError> {
    check_target(allow, host, port).map_err(|r| refused(stats, r, port))
}

fn refused(stats: &ProxyStats, r: Refusal, port: u16) -> DialError {
    stats.record_denied(r.host(), port);
    tracing::info!(
        host = r.host(),
        port,
        reason = r.reason(),
        "proxy refused connection"
    );
    DialError::Refused(r)
}

/// Resolve an authorised target, filter the addresses, count, connect.
pub async fn connect(
    target: &TargetHost,
    port: u16,
    stats: &ProxyStats,
) -> Result<TcpStream, DialError> {
    let addrs = resolve(target, port).await.map_err(|e| {
        tracing::debug!(host = %target, port, error = %e, "proxy could not resolve");
        DialError::Upstream(UpstreamFailure::Resolve)
    })?;
    let addrs = filter_resolved(target, &owned_by_this_host, &addrs)
        .map_err(|r| refused(stats, r, port))?;
    if addrs.is_empty() {
        return Err(DialError::Upstream(UpstreamFailure::Resolve));
    }
    stats.record_allowed();
    let mut last = None;
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                // Nagle off: tunnels relay interactive protocols (TLS handshakes).
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => last = Some(io::Error::from(io::ErrorKind::TimedOut)),
        }
    }
    if let Some(e) = last {
        tracing::debug!(host = %target, port, error = %e, "proxy could not connect upstream");
    }
    Err(DialError::Upstream(UpstreamFailure::Connect))
}

/// Does this host own `ip` — would Linux deliver a connection to it through `lo`?
/// Asked of the kernel's routing table at every decision, so an address added to an
/// interface a moment ago counts (no cache to go stale). When the kernel cannot be
/// asked, the answer is yes: the address is refused rather than guessed at.
fn owned_by_this_host(ip: IpAddr) -> bool {
    match crate::sys::route::is_local_destination(ip) {
        Ok(local) => local,
        Err(e) => {
            static WARNED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    address = %ip,
                    error = %e,
                    "proxy: cannot ask the kernel whether an address is this host's own; refusing it (and any other it cannot check)"
                );
            }
            true
        }
    }
}

/// Resolve with the system resolver; `localhost` is loopback by definition (RFC 6761)
/// and IP literals are not resolved at all.
async fn resolve(target: &TargetHost, port: u16) -> io::Result<Vec<SocketAddr>> {
    match target {
        TargetHost::Ip(ip) => Ok(vec![SocketAddr::new(*ip, port)]),
        TargetHost::Name(n) if n == "localhost" => Ok(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ]),
        TargetHost::Name(n) => {
            let lookup = lookup_bounded(n.clone(), port);
            match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut)),
            }
        }
    }
}

/// Name lookups running at once, for every run's proxy in this process.
/// getaddrinfo blocks, so each runs on tokio's blocking pool, which the output relay
/// (stdout writes) uses too; a lookup the proxy gave up on (the timeout above)
/// keeps its thread until the resolver itself gives up (up to attempts × timeout ×
/// name servers in resolv.conf). Without a bound, a child asking for names whose
/// lookups hang could fill the pool (512 threads) and stall capsule's own output.
const MAX_LOOKUPS: usize = 16;

/// getaddrinfo on the blocking pool, at most [`MAX_LOOKUPS`] at once: the permit is
/// held by the blocking call itself, so a lookup abandoned by its caller still
/// counts until it returns. Waiting for a permit counts against the caller's timeout.
async fn lookup_bounded(name: String, port: u16) -> io::Result<Vec<SocketAddr>> {
    static LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_LOOKUPS);
    let permit = LOOKUPS
        .acquire()
        .await
        .map_err(|_| io::Error::other("lookup semaphore closed"))?;
    // Hand the permit to the thread: it comes back when getaddrinfo returns (or
    // when the closure is dropped unrun, at runtime shutdown).
    permit.forget();
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            LOOKUPS.add_permits(1);
        }
    }
    let release = Release;
    let task = tokio::task::spawn_blocking(move || {
        let _release = release;
        std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(|a| a.collect())
    });
    task.await.map_err(io::Error::other)?
}

//! The accept loop and the per-connection HTTP/1.1 server (hyper): CONNECT goes to
//! `connect`, absolute-form requests to `plain_http`, anything else is a 400. Every
//! connection is held within the `bounds` (connections at once, head size and
//! deadline, buffers), so the supervisor's memory stays bounded whatever the child
//! sends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::allow_hosts::Allowlist;
use super::bounds::{client_side, Limits};
use super::connect::{self, PendingTunnel};
use super::dial::Shared;
use super::egress::Engine;
use super::plain_http::{self, UpstreamSlot};
use super::refusal::{bad_request, ProxyBody};
use super::stats::ProxyStats;

/// [`serve_with_egress`] without egress: every host spliced (the tests' proxy).
#[cfg(test)]
pub async fn serve(
    listener: TcpListener,
    allow: Arc<Allowlist>,
    stats: Arc<ProxyStats>,
    limits: Limits,
) {
    serve_with_egress(listener, allow, stats, limits, None).await
}

/// Accept connections until this future is dropped (every connection and tunnel it
/// started is dropped with it). The listener may live in another network namespace:
/// nothing here assumes its address is reachable from this process.
pub async fn serve_with_egress(
    listener: TcpListener,
    allow: Arc<Allowlist>,
    stats: Arc<ProxyStats>,
    limits: Limits,
    egress: Option<Arc<Engine>>,
) {
    let max = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let shared = Arc::new(Shared {
        allow,
        stats,
        egress,
    });
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        shared
                            .stats
                            .record_open((max - slots.available_permits()) as u64);
                        let shared = shared.clone();
                        conns.spawn(async move {
                            serve_connection(stream, shared).await;
                            drop(slot);
                        });
                    }
                    Err(_) => refuse_at_capacity(stream, &shared.stats, max),
                },
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "proxy: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Every slot is taken: answer 503 if the socket takes it at once (nothing is read,
/// nothing waits), close, count. Logged once per run, then only counted.
fn refuse_at_capacity(stream: TcpStream, stats: &ProxyStats, max: usize) {
    if stats.record_refused_at_capacity() == 0 {
        tracing::warn!(
            max_connections = max,
            "proxy refused a connection: network.max_connections are open (further refusals are only counted)"
        );
    }
    let body =
        format!("capsule proxy: refused: {max} connections are open (network.max_connections)\n");
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A direct non-blocking send: the socket is fresh, so the response fits in its
    // send buffer (tokio's try_write would refuse before the reactor has seen it).
    use nix::sys::socket::{send, MsgFlags};
    use std::os::fd::AsRawFd;
    let _ = send(
        stream.as_raw_fd(),
        resp.as_bytes(),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    );
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let tunnel: Arc<std::sync::Mutex<Option<PendingTunnel>>> = Arc::default();
    let upstream: UpstreamSlot = Arc::default();
    let stats = shared.stats.clone();
    let service = {
        let tunnel = tunnel.clone();
        service_fn(move |req: Request<Incoming>| {
            let shared = shared.clone();
            let tunnel = tunnel.clone();
            let upstream = upstream.clone();
            async move { Ok::<_, Infallible>(route(req, shared, tunnel, upstream).await) }
        })
    };
    let conn = client_side()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        if e.is_timeout() || e.is_parse_too_large() {
            stats.record_head_closed(e.is_timeout());
        }
        tracing::debug!(error = %e, "proxy: client connection ended with an error");
    }
    let pending = tunnel.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(pending) = pending {
        connect::run(pending).await;
    }
}

async fn route(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    tunnel: Arc<std::sync::Mutex<Option<PendingTunnel>>>,
    upstream: UpstreamSlot,
) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        connect::handle(req, shared, tunnel).await
    } else if req.uri().scheme().is_some() {
        plain_http::handle(req, shared, upstream).await
    } else {
        bad_request("this is a proxy: send absolute-form requests or CONNECT")
    }
}

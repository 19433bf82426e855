//! CONNECT tunnels: authorise and connect upstream before answering 200, then relay
//! bytes end to end (never inspected) once hyper hands over the upgraded connection.
//! A host the egress engine terminates is not connected here: after the 200 the
//! tunnel goes to `egress::terminate` (TLS with the run's CA, rules, credentials),
//! which connects upstream per request.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::dial::{self, Shared};
use super::egress::terminate::{self, Terminated};
use super::refusal::{bad_request, empty, ProxyBody};

/// Relay buffer per direction: large enough for bulk throughput on loopback.
const RELAY_BUF: usize = 64 * 1024;

/// A tunnel waiting for hyper to finish the 200 response and release the connection.
pub enum PendingTunnel {
    /// Relayed end to end.
    Splice {
        on_upgrade: OnUpgrade,
        upstream: TcpStream,
    },
    /// TLS-terminated by the egress engine.
    Terminated(Terminated),
}

/// Answer a CONNECT request. On success the tunnel is parked in `slot`; the connection
/// task runs it after hyper has written the 200 and handed the socket back.
pub async fn handle(
    mut req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: Arc<std::sync::Mutex<Option<PendingTunnel>>>,
) -> Response<ProxyBody> {
    let Some(authority) = req.uri().authority().cloned() else {
        return bad_request("CONNECT needs host:port");
    };
    let Some(port) = authority.port_u16() else {
        return bad_request("CONNECT needs host:port");
    };
    let host = authority.host();
    let target = match dial::authorize(&shared.allow, &shared.stats, host, port) {
        Ok(t) => t,
        Err(e) => return e.response(host, port),
    };
    if let Some(engine) = shared
        .egress
        .as_ref()
        .filter(|e| e.terminates(&target, port))
    {
        let pending = PendingTunnel::Terminated(Terminated {
            on_upgrade: hyper::upgrade::on(&mut req),
            target,
            port,
            engine: engine.clone(),
            stats: shared.stats.clone(),
        });
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(pending);
        return Response::new(empty());
    }
    let upstream = match dial::connect(&target, port, &shared.stats).await {
        Ok(s) => s,
        Err(e) => return e.response(&target.to_string(), port),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
    *guard = Some(PendingTunnel::Splice {
        on_upgrade,
        upstream,
    });
    Response::new(empty())
}

/// Run a parked tunnel to completion.
pub async fn run(pending: PendingTunnel) {
    let (on_upgrade, upstream) = match pending {
        PendingTunnel::Splice {
            on_upgrade,
            upstream,
        } => (on_upgrade, upstream),
        PendingTunnel::Terminated(t) => return terminate::run(t).await,
    };
    let upgraded = match on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(error = %e, "proxy tunnel: upgrade failed");
            return;
        }
    };
    if let Err(e) = relay(upgraded, upstream).await {
        tracing::debug!(error = %e, "proxy tunnel ended with an error");
    }
}

async fn relay(upgraded: Upgraded, mut upstream: TcpStream) -> std::io::Result<()> {
    // Fast path: get the plain TcpStream back (and any bytes hyper already read past the
    // request head), so the relay is socket to socket without hyper's wrapper.
    match upgraded.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let mut down = parts.io.into_inner();
            if !parts.read_buf.is_empty() {
                upstream.write_all(&parts.read_buf).await?;
            }
            match (super::splice::Pipe::new(), super::splice::Pipe::new()) {
                (Ok(p1), Ok(p2)) => {
                    super::splice::relay(&down, &upstream, (p1, p2)).await?;
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::debug!(error = %e, "proxy tunnel: no pipe for splice; copying");
                    tokio::io::copy_bidirectional_with_sizes(
                        &mut down,
                        &mut upstream,
                        RELAY_BUF,
                        RELAY_BUF,
                    )
                    .await?;
                }
            }
        }
        Err(upgraded) => {
            let mut down = TokioIo::new(upgraded);
            tokio::io::copy_bidirectional_with_sizes(
                &mut down,
                &mut upstream,
                RELAY_BUF,
                RELAY_BUF,
            )
            .await?;
        }
    }
    Ok(())
}

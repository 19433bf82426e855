//! A terminated CONNECT: once the 200 is out, TLS with a leaf for the CONNECT host
//! (ALPN `http/1.1` only: a client that offers only h2 fails the handshake; an SNI
//! naming another host fails it too), then HTTP/1.1 served by hyper within the same
//! bounds as the proxy's own connections, every request decided by `gate` and
//! forwarded over one verified upstream connection, kept while the client keeps its
//! connection.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::http::uri::{PathAndQuery, Uri};
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::Mutex;
use tokio_rustls::TlsAcceptor;

use super::engine::Engine;
use super::gate;
use super::upstream::{self, TlsUpstream};
use crate::proxy::allow_hosts::TargetHost;
use crate::proxy::bounds::{client_side, HEAD_TIMEOUT};
use crate::proxy::refusal::{bad_gateway, ProxyBody, UpstreamFailure};
use crate::proxy::stats::ProxyStats;

/// A CONNECT to a terminated host, waiting for hyper to hand over the connection.
pub struct Terminated {
    pub on_upgrade: OnUpgrade,
    pub target: TargetHost,
    pub port: u16,
    pub engine: Arc<Engine>,
    pub stats: Arc<ProxyStats>,
}

/// What every request of one terminated connection shares.
struct Conn {
    target: TargetHost,
    port: u16,
    engine: Arc<Engine>,
    stats: Arc<ProxyStats>,
    upstream: Mutex<Option<TlsUpstream>>,
}

/// Run a terminated tunnel to completion.
pub async fn run(t: Terminated) {
    let upgraded = match t.on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(error = %e, "proxy: upgrade failed");
            return;
        }
    };
    let config = match t.engine.server_config(&t.target) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(host = %t.target, error = %e, "proxy: no certificate for a terminated host");
            return;
        }
    };
    let accept = TlsAcceptor::from(config).accept(TokioIo::new(upgraded));
    let tls = match tokio::time::timeout(HEAD_TIMEOUT, accept).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::info!(host = %t.target, error = %e, "proxy: TLS handshake with the run failed");
            return;
        }
        Err(_) => return,
    };
    let conn = Arc::new(Conn {
        target: t.target,
        port: t.port,
        engine: t.engine,
        stats: t.stats.clone(),
        upstream: Mutex::new(None),
    });
    let service = service_fn(move |req: Request<Incoming>| {
        let conn = conn.clone();
        async move { Ok::<_, Infallible>(handle(req, conn).await) }
    });
    let served = client_side()
        .serve_connection(TokioIo::new(tls), service)
        .await;
    if let Err(e) = served {
        if e.is_timeout() || e.is_parse_too_large() {
            t.stats.record_head_closed(e.is_timeout());
        }
        tracing::debug!(error = %e, "proxy: terminated connection ended with an error");
    }
}

/// One request: decide, forward, relay the response.
async fn handle(req: Request<Incoming>, conn: Arc<Conn>) -> Response<ProxyBody> {
    let (mut parts, body) = req.into_parts();
    let (engine, stats) = (&conn.engine, &conn.stats);
    let admitted = match gate::admit(engine, stats, &conn.target, conn.port, true, &mut parts) {
        Ok(a) => a,
        Err(resp) => return *resp,
    };
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    parts.uri = Uri::from(path);
    parts.version = hyper::Version::HTTP_11;
    let host = if conn.port == 443 {
        conn.target.to_string()
    } else {
        format!("{}:{}", conn.target, conn.port)
    };
    if let Ok(v) = HeaderValue::from_str(&host) {
        parts.headers.insert(HOST, v);
    }
    let body = match gate::request_body(engine, stats, &admitted, &parts.headers, body).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let out = Request::from_parts(parts, body);

    let mut slot = conn.upstream.lock().await;
    let reuse = match slot.take() {
        Some(mut up) => up.sender.ready().await.is_ok().then_some(up),
        None => None,
    };
    let mut up = match reuse {
        Some(up) => up,
        None => match upstream::open(engine, &conn.target, conn.port, stats).await {
            Ok(up) => up,
            Err(resp) => return resp,
        },
    };
    match up.sender.send_request(out).await {
        Ok(resp) => {
            *slot = Some(up);
            gate::response(engine, &admitted, resp)
        }
        Err(e) => {
            tracing::debug!(host = %conn.target, error = %e, "proxy: upstream request failed");
            bad_gateway(
                &conn.target.to_string(),
                conn.port,
                UpstreamFailure::Request,
            )
        }
    }
}

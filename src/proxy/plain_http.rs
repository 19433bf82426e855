//! Absolute-form plain HTTP forwarding (`GET http://host/path`): the request is sent
//! upstream in origin-form with hop-by-hop headers removed and bodies streamed both
//! ways (never buffered whole). One upstream connection is kept per client connection
//! and reused while the client keeps asking the same host:port. A host the egress
//! engine terminates gets its rules and credentials (`egress::gate`).

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, EXPECT, HOST};
use hyper::http::uri::{PathAndQuery, Uri};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;

use super::allow_hosts::TargetHost;
use super::bounds::upstream_http1;
use super::dial::{self, Shared};
use super::egress::gate;
use super::headers::{add_via, strip_hop_by_hop};
use super::refusal::{bad_gateway, bad_request, ProxyBody, UpstreamFailure};

/// An open upstream HTTP/1.1 connection. Dropping it stops its driver task.
pub struct Upstream {
    target: TargetHost,
    port: u16,
    sender: SendRequest<ProxyBody>,
    driver: JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// The per-client-connection cache of one upstream connection.
pub type UpstreamSlot = Arc<tokio::sync::Mutex<Option<Upstream>>>;

/// Forward one absolute-form request. To a host the egress engine terminates, the
/// request is decided by its rules and credentials first (`http://`: a credential
/// only where `allow_plaintext` says so).
pub async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    slot: UpstreamSlot,
) -> Response<ProxyBody> {
    let uri = req.uri().clone();
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => return bad_request("only http:// can be forwarded; use CONNECT for https"),
        None => return bad_request("not a proxy request (origin-form)"),
    }
    let Some(authority) = uri.authority() else {
        return bad_request("absolute-form request without a host");
    };
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(80);
    let target = match dial::authorize(&shared.allow, &shared.stats, host, port) {
        Ok(t) => t,
        Err(e) => return e.response(host, port),
    };
    let (mut parts, body) = req.into_parts();
    let engine = shared
        .egress
        .as_ref()
        .filter(|e| e.terminates(&target, port));
    let (body, admitted) = match engine {
        Some(engine) => {
            match gate::admit(engine, &shared.stats, &target, port, false, &mut parts) {
                Ok(a) => {
                    let headers = &parts.headers;
                    match gate::request_body(engine, &shared.stats, &a, headers, body).await {
                        Ok(b) => (b, Some((engine, a))),
                        Err(resp) => return resp,
                    }
                }
                Err(resp) => return *resp,
            }
        }
        None => (body.map_err(Into::into).boxed(), None),
    };
    let req = Request::from_parts(parts, body);
    let shown = target.to_string();
    let result = match send(req, &target, port, &shared, &slot).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    match result {
        Ok(resp) => match admitted {
            Some((engine, a)) => gate::response(engine, &a, resp),
            None => {
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                add_via(&mut parts.headers);
                Response::from_parts(parts, body.map_err(Into::into).boxed())
            }
        },
        Err(e) => {
            tracing::debug!(host = %shown, port, error = %e, "proxy: upstream request failed");
            bad_gateway(&shown, port, UpstreamFailure::Request)
        }
    }
}

/// Send over the cached connection when it goes to the same place and is still
/// open, else over a new one (cached for the next request).
async fn send(
    req: Request<ProxyBody>,
    target: &TargetHost,
    port: u16,
    shared: &Shared,
    slot: &UpstreamSlot,
) -> Result<hyper::Result<Response<Incoming>>, Response<ProxyBody>> {
    let mut cache = slot.lock().await;
    let reuse = match cache.take() {
        Some(mut up) if up.target == *target && up.port == port => {
            if up.sender.ready().await.is_ok() {
                Some(up)
            } else {
                None
            }
        }
        _ => None,
    };
    let mut upstream = match reuse {
        Some(up) => {
            shared.stats.record_allowed();
            up
        }
        None => open(target, port, shared).await?,
    };
    let out = upstream_request(req, target, port).map_err(|_| bad_request("invalid host"))?;
    let result = upstream.sender.send_request(out).await;
    if result.is_ok() {
        *cache = Some(upstream);
    }
    Ok(result)
}

async fn open(
    target: &TargetHost,
    port: u16,
    shared: &Shared,
) -> Result<Upstream, Response<ProxyBody>> {
    let shown = target.to_string();
    let stream = dial::connect(target, port, &shared.stats)
        .await
        .map_err(|e| e.response(&shown, port))?;
    let (sender, driver) = upstream_http1(TokioIo::new(stream), &shown, port).await?;
    Ok(Upstream {
        target: target.clone(),
        port,
        sender,
        driver,
    })
}

/// The request as the origin should see it: origin-form target, `Host` from the
/// absolute URI (RFC 9112 3.2.2), no hop-by-hop headers, no `Expect` (hyper already
/// answered `100 Continue` downstream when we started reading the body).
fn upstream_request(
    req: Request<ProxyBody>,
    target: &TargetHost,
    port: u16,
) -> Result<Request<ProxyBody>, hyper::header::InvalidHeaderValue> {
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    parts.uri = Uri::from(path);
    parts.version = hyper::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(EXPECT);
    let host = if port == 80 {
        target.to_string()
    } else {
        format!("{target}:{port}")
    };
    let host = HeaderValue::from_str(&host)?;
    parts.headers.insert(HOST, host);
    add_via(&mut parts.headers);
    Ok(Request::from_parts(parts, body))
}

//! Why the proxy said no, and the short responses it sends: 403 (policy), 502 (an
//! allowed host failed upstream, sanitized), 400 (not a proxy request).

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{header, Response, StatusCode};

use super::DestClass;

/// The body type every proxy response uses.
pub type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// A policy refusal (answered with 403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{host}:{port} is not in network.allow_hosts")]
    NotListed { host: String, port: u16 },
    #[error("{host} is a cloud metadata name, refused whatever network.allow_hosts says")]
    MetadataName { host: String },
    #[error("{host} resolves to {}, refused whatever network.allow_hosts says", class.describe())]
    Forbidden { host: String, class: DestClass },
    #[error("{host} resolves to a loopback address; only `localhost` or a loopback literal listed in network.allow_hosts may reach loopback")]
    LoopbackNotExplicit { host: String },
    /// A name resolved to an internal address (DNS rebinding): only an IP literal
    /// listed in the allowlist reaches one.
    #[error("{host} resolves to {}; only that address listed literally in network.allow_hosts may reach it (DNS rebinding)", class.describe())]
    InternalAddress { host: String, class: DestClass },
}

impl Refusal {
    /// The host as the request named it (normalised), for stats and logs.
    pub fn host(&self) -> &str {
        match self {
            Refusal::NotListed { host, .. }
            | Refusal::MetadataName { host }
            | Refusal::Forbidden { host, .. }
            | Refusal::LoopbackNotExplicit { host }
            | Refusal::InternalAddress { host, .. } => host,
        }
    }

    /// A fixed code for the log line.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NotListed { .. } => "not_listed",
            Refusal::MetadataName { .. } => "metadata_name",
            Refusal::Forbidden { .. } => "forbidden_address",
            Refusal::LoopbackNotExplicit { .. } => "loopback_not_explicit",
            Refusal::InternalAddress { .. } => "internal_address",
        }
    }

    /// The 403 response: names the host and the policy key.
    pub fn response(&self) -> Response<ProxyBody> {
        text(
            StatusCode::FORBIDDEN,
            format!("capsule proxy: refused: {self}\n"),
        )
    }
}

/// An allowed host that could not be reached; the message is deliberately coarse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamFailure {
    Resolve,
    Connect,
    Request,
}

/// The 502 response for an allowed host that failed upstream (no internal details).
pub fn bad_gateway(host: &str, port: u16, what: UpstreamFailure) -> Response<ProxyBody> {
    let verb = match what {
        UpstreamFailure::Resolve => "could not resolve",
        UpstreamFailure::Connect => "could not connect to",
        UpstreamFailure::Request => "request failed upstream at",
    };
    text(
        StatusCode::BAD_GATEWAY,
        format!("capsule proxy: {verb} {host}:{port}\n"),
    )
}

/// A 400 for something that is not a proxy request (origin-form, bad target, https://).
pub fn bad_request(why: &str) -> Response<ProxyBody> {
    text(
        StatusCode::BAD_REQUEST,
        format!("capsule proxy: bad request: {why}\n"),
    )
}

/// A short plain-text response.
pub fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut resp = Response::new(full(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A complete body from bytes.
pub fn full(b: Bytes) -> ProxyBody {
    Full::new(b).map_err(|never| match never {}).boxed()
}

/// An empty body.
pub fn empty() -> ProxyBody {
    full(Bytes::new())
}

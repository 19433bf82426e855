//! Why the proxy said no, and the short responses it sends: 403 (policy), 502 (an
//! allowed host failed upstream, sanitized), 400 (not a proxy request).

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{header, Response, StatusCode};

use super::DestClass;

/// The error of a body the proxy relays: hyper's, or the proxy's own (an upload
/// past its budget).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type every proxy response (and forwarded request) uses.
pub type ProxyBody = BoxBody<Bytes, BoxError>;

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

/// A request to a terminated host refused by a rule (403), a budget (429) or a
/// credential's binding (403): the `X-Capsule-Refused` header names the rule, the JSON
/// body says what was refused and the smallest change that would allow it. Never
/// given a credential's value (its placeholder may appear in `path`).
pub struct RuleRefusal<'a> {
    pub status: StatusCode,
    pub host: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    /// `network.allow_hosts[2]`, `credentials[github]`, ...
    pub rule: &'a str,
    pub hint: &'a str,
}

impl RuleRefusal<'_> {
    pub fn response(&self) -> Response<ProxyBody> {
        let body = serde_json::json!({
            "capsule": "refused",
            "host": self.host,
            "method": self.method,
            "path": self.path,
            "rule": self.rule,
            "hint": self.hint,
        });
        let mut text = body.to_string();
        text.push('\n');
        let mut resp = Response::new(full(Bytes::from(text)));
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        // Header values must be visible ASCII: a rule name always is (policy keys).
        if let Ok(v) = header::HeaderValue::from_str(self.rule) {
            h.insert("x-capsule-refused", v);
        }
        resp
    }
}

/// The 502 for a terminated host whose TLS (or HTTP) upstream failed, with the reason
/// (`certificate not trusted`, ...): the run can tell a policy refusal from a broken
/// or impersonated upstream.
pub fn upstream_tls_failed(host: &str, port: u16, reason: &str) -> Response<ProxyBody> {
    text(
        StatusCode::BAD_GATEWAY,
        format!("capsule proxy: TLS to {host}:{port} failed: {reason}\n"),
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

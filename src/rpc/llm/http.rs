//! One JSON POST to a provider over hyper 1.x (rustls for https, plain
//! http to loopback or without a key). Failures are reduced to a generic
//! kind: no URL, body or header ever leaves this module in an error.

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Largest provider answer read.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpFail {
    Timeout,
    /// Generic, safe to show: never the URL, key or body.
    Failed(&'static str),
    Status(u16),
}

fn client() -> Result<&'static HttpClient, HttpFail> {
    static CLIENT: OnceLock<Option<HttpClient>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let b = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
                .ok()?;
            let https = b.https_or_http().enable_http1().build();
            Some(Client::builder(TokioExecutor::new()).build(https))
        })
        .as_ref()
        .ok_or(HttpFail::Failed("TLS setup failed"))
}

fn is_loopback(uri: &Uri) -> bool {
    match uri.host() {
        Some("localhost") => true,
        Some(h) => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// POST `body` as JSON to `url` and parse the JSON answer.
pub async fn post_json(
    url: &str,
    headers: &[(&'static str, String)],
    body: &Value,
    has_secret: bool,
    timeout: Duration,
) -> Result<Value, HttpFail> {
    let uri: Uri = url
        .parse()
        .map_err(|_| HttpFail::Failed("the configured base_url is not a valid URL"))?;
    if uri.scheme_str() == Some("http") && has_secret && !is_loopback(&uri) {
        return Err(HttpFail::Failed(
            "refusing to send an API key over plain http to a non-loopback host",
        ));
    }
    let client = client()?;
    let payload =
        serde_json::to_vec(body).map_err(|_| HttpFail::Failed("cannot encode the request"))?;
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(payload)))
        .map_err(|_| HttpFail::Failed("cannot build the request"))?;
    let exchange = async {
        let resp = client
            .request(req)
            .await
            .map_err(|_| HttpFail::Failed("the LLM provider could not be reached"))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|_| HttpFail::Failed("the LLM provider's answer could not be read"))?
            .to_bytes();
        if !status.is_success() {
            return Err(HttpFail::Status(status.as_u16()));
        }
        serde_json::from_slice::<Value>(&body)
            .map_err(|_| HttpFail::Failed("the LLM provider's answer is not JSON"))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(HttpFail::Timeout))
}

//! Hop-by-hop header handling (RFC 9110 section 7.6.1): a proxy removes the headers
//! that describe only one hop before forwarding a message, plus any header the
//! `Connection` field names.

use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, VIA};

/// Always hop-by-hop (RFC 9110 7.6.1, and the RFC 2616 list that proxies still see).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// Remove hop-by-hop headers, including those listed in `Connection`.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .chain(headers.get_all("proxy-connection").iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// Append ourselves to `Via` (RFC 9110 7.6.3).
pub fn add_via(headers: &mut HeaderMap) {
    headers.append(VIA, HeaderValue::from_static("1.1 capsule"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_fixed_and_connection_named_headers() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret-Hop , close"),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic Zm9vOmJhcg=="),
            ("x-secret-hop", "1"),
            ("content-length", "12"),
            ("content-type", "text/plain"),
            ("host", "example.com"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, vec!["content-length", "content-type", "host"]);
    }
}

//! Placeholders in a request head: found in every form a client could send them
//! (header values raw, percent-encoded, base64 as in `Authorization: Basic`, the
//! URI's path and query, any letter case); in a request bound to the credential,
//! allowed only in `Authorization` and the credential's own inject position,
//! replaced by the value in `Authorization`, and the credential injected at its
//! position.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine as _;
use hyper::header::{HeaderName, HeaderValue, AUTHORIZATION};
use hyper::http::request::Parts;
use hyper::http::uri::{PathAndQuery, Uri};

use super::Inject;

/// Why a credential could not be put into a request (the value is never named).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InjectError {
    #[error("the credential's value is not valid in an HTTP header")]
    NotAHeaderValue,
    #[error("the credential's inject header name is not a valid header name")]
    BadHeaderName,
    #[error("the request target could not be rebuilt")]
    BadUri,
}

/// Percent-decode every escape (malformed ones kept as they are).
fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if let (Some(h), Some(l)) = (
                s.get(i + 1).copied().and_then(hex),
                s.get(i + 2).copied().and_then(hex),
            ) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

/// Percent-encode every byte that is not unreserved (for a query or path).
pub fn percent_encode(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Does `text` carry `needle` (lower-case) in any form: as is, in any case, percent-
/// encoded (up to three times over), or base64 in any of its words?
fn mentions(text: &[u8], needle: &[u8]) -> bool {
    let mut view = text.to_ascii_lowercase();
    for _ in 0..4 {
        if contains(&view, needle) {
            return true;
        }
        let next = percent_decode(&view).to_ascii_lowercase();
        if next == view {
            break;
        }
        view = next;
    }
    text.split(|b| b.is_ascii_whitespace() || matches!(b, b',' | b'=' | b';' | b'&'))
        .filter(|w| w.len() >= 16)
        .filter_map(|w| {
            [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
                .iter()
                .find_map(|e| e.decode(w).ok())
        })
        .any(|decoded| contains(&decoded.to_ascii_lowercase(), needle))
}

/// Is `placeholder` anywhere in the request head (target or any header value)?
pub fn head_mentions(parts: &Parts, placeholder: &str) -> bool {
    let needle = placeholder.to_ascii_lowercase();
    let needle = needle.as_bytes();
    let target = parts.uri.to_string();
    mentions(target.as_bytes(), needle)
        || parts
            .headers
            .values()
            .any(|v| mentions(v.as_bytes(), needle))
}

fn replace_bytes(hay: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if !contains(hay, from) {
        return None;
    }
    let mut out = Vec::with_capacity(hay.len() + to.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    Some(out)
}

fn sensitive(bytes: &[u8]) -> Result<HeaderValue, InjectError> {
    let mut v = HeaderValue::from_bytes(bytes).map_err(|_| InjectError::NotAHeaderValue)?;
    v.set_sensitive(true);
    Ok(v)
}

/// `Basic <base64>` with the placeholder replaced inside the decoded credentials.
fn substitute_basic(value: &[u8], placeholder: &[u8], secret: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = STANDARD.decode(token.trim()).ok()?;
    let replaced = replace_bytes(&decoded, placeholder, secret)?;
    Some(format!("Basic {}", STANDARD.encode(replaced)).into_bytes())
}

/// Header names and query keys, as a refusal's hint shows them (the run chose them).
fn shown(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

/// Where a request bound to a credential may carry its placeholder: the
/// `Authorization` header, the credential's inject header, its inject query
/// parameter. Returns the first OTHER position mentioning it, in any form
/// [`mentions`] finds (an origin could keep what it gets there and serve it back
/// to a request the credential is not bound to).
pub fn misplaced(parts: &Parts, placeholder: &str, how: &Inject) -> Option<String> {
    let needle = placeholder.to_ascii_lowercase();
    let needle = needle.as_bytes();
    let allowed_header = |name: &HeaderName| {
        *name == AUTHORIZATION
            || matches!(how, Inject::Header { name: n, .. } if name.as_str().eq_ignore_ascii_case(n))
    };
    for (name, v) in &parts.headers {
        if !allowed_header(name) && mentions(v.as_bytes(), needle) {
            return Some(format!("the {} header", shown(name.as_str())));
        }
    }
    if let Some(a) = parts.uri.authority() {
        if mentions(a.as_str().as_bytes(), needle) {
            return Some("the request target's authority".to_string());
        }
    }
    if mentions(parts.uri.path().as_bytes(), needle) {
        return Some("the path".to_string());
    }
    let param = match how {
        Inject::Query { param } => Some(param.as_bytes()),
        _ => None,
    };
    for pair in parts.uri.query().unwrap_or("").split('&') {
        let key = pair.split('=').next().unwrap_or("");
        // The same test `inject` removes the client's pairs by.
        if param.is_some_and(|p| percent_decode(key.as_bytes()) == p) {
            continue;
        }
        if mentions(pair.as_bytes(), needle) {
            return Some(format!("the query parameter {}", shown(key)));
        }
    }
    None
}

/// The positions [`misplaced`] allows, for a refusal's hint.
pub fn allowed_positions(how: &Inject) -> String {
    match how {
        Inject::Header { name, .. } if !name.eq_ignore_ascii_case("authorization") => {
            format!("the Authorization header or the {name} header")
        }
        Inject::Query { param } => {
            format!("the Authorization header or the query parameter {param}")
        }
        _ => "the Authorization header".to_string(),
    }
}

/// Replace the placeholder (as sent: literal) by the value in the `Authorization`
/// header, also inside `Basic` credentials (username or password). Nowhere else:
/// [`misplaced`] refuses other positions, and [`inject`] overwrites the
/// credential's own position.
pub fn substitute(parts: &mut Parts, placeholder: &str, secret: &[u8]) -> Result<(), InjectError> {
    let ph = placeholder.as_bytes();
    let old: Vec<HeaderValue> = parts
        .headers
        .get_all(AUTHORIZATION)
        .iter()
        .cloned()
        .collect();
    let mut changed = false;
    let mut new = Vec::with_capacity(old.len());
    for v in old {
        let basic = substitute_basic(v.as_bytes(), ph, secret);
        match basic.or_else(|| replace_bytes(v.as_bytes(), ph, secret)) {
            Some(bytes) => {
                changed = true;
                new.push(sensitive(&bytes)?);
            }
            None => new.push(v),
        }
    }
    if changed {
        parts.headers.remove(AUTHORIZATION);
        for v in new {
            parts.headers.append(AUTHORIZATION, v);
        }
    }
    Ok(())
}

/// Replace the request target (path and query), keeping scheme and authority.
fn set_target(parts: &mut Parts, target: &str) -> Result<(), InjectError> {
    let pq = PathAndQuery::try_from(target).map_err(|_| InjectError::BadUri)?;
    let mut b = Uri::builder();
    if let Some(s) = parts.uri.scheme() {
        b = b.scheme(s.clone());
    }
    if let Some(a) = parts.uri.authority() {
        b = b.authority(a.clone());
    }
    parts.uri = b
        .path_and_query(pq)
        .build()
        .map_err(|_| InjectError::BadUri)?;
    Ok(())
}

/// Put the credential at its position, overriding whatever the client sent there.
pub fn inject(parts: &mut Parts, how: &Inject, secret: &[u8]) -> Result<(), InjectError> {
    match how {
        Inject::Header { name, format } => {
            let name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| InjectError::BadHeaderName)?;
            let mut bytes = Vec::with_capacity(format.len() + secret.len());
            let mut pieces = format.split("{}");
            bytes.extend_from_slice(pieces.next().unwrap_or("").as_bytes());
            for piece in pieces {
                bytes.extend_from_slice(secret);
                bytes.extend_from_slice(piece.as_bytes());
            }
            let v = sensitive(&bytes)?;
            parts.headers.remove(&name);
            parts.headers.insert(name, v);
        }
        Inject::Basic { username } => {
            let mut creds = Vec::with_capacity(username.len() + 1 + secret.len());
            creds.extend_from_slice(username.as_bytes());
            creds.push(b':');
            creds.extend_from_slice(secret);
            let v = sensitive(format!("Basic {}", STANDARD.encode(&creds)).as_bytes())?;
            parts.headers.remove(AUTHORIZATION);
            parts.headers.insert(AUTHORIZATION, v);
        }
        Inject::Query { param } => {
            let path = parts.uri.path().to_string();
            let mut pairs: Vec<String> = parts
                .uri
                .query()
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .filter(|p| {
                    let key = p.split('=').next().unwrap_or("");
                    percent_decode(key.as_bytes()) != param.as_bytes()
                })
                .map(str::to_string)
                .collect();
            pairs.push(format!(
                "{}={}",
                percent_encode(param.as_bytes()),
                percent_encode(secret)
            ));
            set_target(parts, &format!("{path}?{}", pairs.join("&")))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::headers::strip_hop_by_hop;

    const PH: &str = "capsule-phantom-0123456789abcdef0123456789abcdef";

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = hyper::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request").into_parts().0
    }

    #[test]
    fn placeholder_found_in_every_position() {
        let b64 = STANDARD.encode(format!("x-access-token:{PH}"));
        let upper = PH.to_ascii_uppercase();
        let pct: String = PH.bytes().map(|b| format!("%{b:02x}")).collect();
        let twice = pct.replace('%', "%25");
        let cases: Vec<Parts> = vec![
            parts("/", &[("authorization", &format!("Bearer {PH}"))]),
            parts("/", &[("x-api-key", PH)]),
            parts("/", &[("authorization", &format!("Basic {b64}"))]),
            parts(
                "/",
                &[("cookie", &format!("a=1; tok={}", STANDARD.encode(PH)))],
            ),
            parts(&format!("/x?token={PH}"), &[]),
            parts(&format!("/x?token={pct}"), &[]),
            parts(&format!("/x?token={twice}"), &[]),
            parts(&format!("/{PH}/y"), &[]),
            parts("/", &[("x-api-key", &upper)]),
            parts("/", &[("x-api-key", &pct)]),
            parts(&format!("https://h.example/x?t={PH}"), &[]),
        ];
        for (i, p) in cases.iter().enumerate() {
            assert!(head_mentions(p, PH), "case {i}: {:?}", p);
        }
        let clean = parts(
            "/x?token=capsule-phantom-0000",
            &[("x", "capsule-phantom-")],
        );
        assert!(!head_mentions(&clean, PH));
    }

    #[test]
    fn basic_is_decoded_replaced_and_reencoded() {
        let b64 = STANDARD.encode(format!("x-access-token:{PH}"));
        let mut p = parts("/", &[("authorization", &format!("Basic {b64}"))]);
        substitute(&mut p, PH, b"s3cr3t").expect("substitute");
        let want = format!("Basic {}", STANDARD.encode("x-access-token:s3cr3t"));
        assert_eq!(p.headers["authorization"], want.as_str());
        assert!(p.headers["authorization"].is_sensitive());
    }

    #[test]
    fn substitution_only_in_authorization() {
        let b64 = STANDARD.encode(format!("{PH}:{PH}"));
        let mut p = parts(
            &format!("/x?a=1&t={PH}"),
            &[
                ("authorization", &format!("token {PH}")),
                ("authorization", &format!("Basic {b64}")),
                ("x-key", PH),
            ],
        );
        substitute(&mut p, PH, b"v a/l").expect("substitute");
        let auth: Vec<_> = p.headers.get_all("authorization").iter().collect();
        let want = format!("Basic {}", STANDARD.encode("v a/l:v a/l"));
        assert_eq!(auth, vec!["token v a/l", want.as_str()]);
        assert_eq!(p.headers["x-key"], PH);
        assert_eq!(p.uri.to_string(), format!("/x?a=1&t={PH}"));
    }

    #[test]
    fn placeholder_allowed_only_in_its_positions() {
        let header = Inject::Header {
            name: "X-Api-Key".into(),
            format: "{}".into(),
        };
        let query = Inject::Query {
            param: "access_token".into(),
        };
        let basic = Inject::Basic {
            username: "u".into(),
        };
        let b64 = STANDARD.encode(format!("me:{PH}"));
        let fine: Vec<(Parts, &Inject)> = vec![
            (
                parts("/", &[("authorization", &format!("Bearer {PH}"))]),
                &basic,
            ),
            (
                parts("/", &[("authorization", &format!("Basic {b64}"))]),
                &query,
            ),
            (parts("/", &[("x-api-key", PH)]), &header),
            (parts(&format!("/x?a=1&access_token={PH}"), &[]), &query),
            (parts(&format!("/x?access%5Ftoken={PH}"), &[]), &query),
            (parts("/x?note=capsule-phantom-", &[]), &header),
        ];
        for (i, (p, how)) in fine.iter().enumerate() {
            assert_eq!(misplaced(p, PH, how), None, "case {i}");
        }
        let pct: String = PH.bytes().map(|b| format!("%{b:02x}")).collect();
        let upper = PH.to_ascii_uppercase();
        let bad: Vec<(Parts, &Inject, &str)> = vec![
            (
                parts(&format!("/x?note={PH}"), &[]),
                &header,
                "the query parameter note",
            ),
            (
                parts(&format!("/x?access_token={PH}"), &[]),
                &header,
                "the query parameter access_token",
            ),
            (
                parts(&format!("/x?note={pct}"), &[]),
                &query,
                "the query parameter note",
            ),
            (parts(&format!("/{upper}/x"), &[]), &basic, "the path"),
            (
                parts("/", &[("x-api-key", PH)]),
                &basic,
                "the x-api-key header",
            ),
            (
                parts("/", &[("x-note", &STANDARD.encode(PH))]),
                &header,
                "the x-note header",
            ),
            (
                parts("/", &[("cookie", &format!("a=1; t={PH}"))]),
                &query,
                "the cookie header",
            ),
            (
                parts(&format!("https://h.example/{PH}"), &[]),
                &header,
                "the path",
            ),
        ];
        for (i, (p, how, want)) in bad.iter().enumerate() {
            assert_eq!(misplaced(p, PH, how).as_deref(), Some(*want), "case {i}");
        }
        assert_eq!(
            allowed_positions(&query),
            "the Authorization header or the query parameter access_token"
        );
    }

    #[test]
    fn inject_positions_override() {
        let mut p = parts(
            "/x?access_token=theirs&b=2",
            &[("authorization", "Bearer theirs")],
        );
        inject(
            &mut p,
            &Inject::Header {
                name: "Authorization".into(),
                format: "Bearer {}".into(),
            },
            b"tok",
        )
        .expect("header");
        assert_eq!(p.headers.get_all("authorization").iter().count(), 1);
        assert_eq!(p.headers["authorization"], "Bearer tok");
        inject(
            &mut p,
            &Inject::Basic {
                username: "u".into(),
            },
            b"tok",
        )
        .expect("basic");
        assert_eq!(
            p.headers["authorization"],
            format!("Basic {}", STANDARD.encode("u:tok")).as_str()
        );
        inject(
            &mut p,
            &Inject::Query {
                param: "access_token".into(),
            },
            b"t&k",
        )
        .expect("q");
        assert_eq!(p.uri.to_string(), "/x?b=2&access_token=t%26k");
        // Basic base64-encodes any byte; a header format cannot carry a newline.
        let header = Inject::Header {
            name: "x-key".into(),
            format: "{}".into(),
        };
        let bad = inject(&mut p, &header, b"a\nb");
        assert_eq!(bad, Err(InjectError::NotAHeaderValue));
    }

    #[test]
    fn hop_by_hop_strip_then_inject_keeps_the_credential() {
        // A client naming Authorization in Connection must not make the proxy drop
        // the header it injects: stripping comes first.
        let mut p = parts(
            "/",
            &[("connection", "authorization"), ("authorization", "x")],
        );
        strip_hop_by_hop(&mut p.headers);
        inject(
            &mut p,
            &Inject::Header {
                name: "authorization".into(),
                format: "token {}".into(),
            },
            b"v",
        )
        .expect("inject");
        assert_eq!(p.headers["authorization"], "token v");
        assert!(p.headers.get("connection").is_none());
    }
}

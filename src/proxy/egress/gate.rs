//! One request to a terminated host, decided: its Host must be the tunnel's, no
//! smuggling shapes, hop-by-hop headers gone (before anything is injected), a path
//! that reads one way only, a map entry allowing its method and path, no placeholder
//! of a credential it is not bound to, a bound credential's placeholder only in its
//! positions, its budgets; then the bound credentials are substituted and injected,
//! `identity` asked for and any `Range` dropped. Also the bodies and response of an admitted request
//! (counted, scrubbed; refused when encoded, since encoded bytes cannot be scanned).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, EXPECT,
    HOST, TRANSFER_ENCODING,
};
use hyper::http::request::Parts;
use hyper::http::uri::Authority;
use hyper::{Method, Response, StatusCode};

use super::engine::Engine;
use super::git;
use super::inject::{allowed_positions, head_mentions, inject, misplaced, substitute};
use super::rules::{glob_matches, normalise_path_with};
use super::scrub::{needles, Metered, ScrubBody, Scrubber};
use crate::proxy::allow_hosts::TargetHost;
use crate::proxy::headers::{add_via, strip_hop_by_hop};
use crate::proxy::refusal::{bad_request, text, ProxyBody, RuleRefusal};
use crate::proxy::stats::{EgressRefusal, HostCounters, ProxyStats, RefusalKind};

/// A refusal's response, boxed (it is large; the happy path should not pay for it).
pub type Refused = Box<Response<ProxyBody>>;

/// The longest path kept in a refusal record or body.
const MAX_SHOWN_PATH: usize = 256;

/// What an admitted request carries to its exchange.
pub struct Admitted {
    /// The map entry (index into `egress.rules`) whose budgets it counts against.
    pub rule: Option<usize>,
    /// The credentials (indices into `egress.credentials`) injected into it.
    pub bound: Vec<usize>,
    pub counters: Arc<HostCounters>,
    pub head_only: bool,
    /// The host, for the 502 of an encoded response.
    pub host: String,
    /// A `git-receive-pack` POST to a map entry with git rules (index into
    /// `egress.rules`) and its shown path: its commands are judged before it goes.
    pub push: Option<(usize, String)>,
}

/// The request being decided, for refusals.
struct Seen<'a> {
    engine: &'a Engine,
    stats: &'a ProxyStats,
    host: String,
    method: String,
    path: String,
}

impl Seen<'_> {
    fn refuse(&self, kind: RefusalKind, rule: &str, hint: &str) -> Refused {
        let status = match kind {
            RefusalKind::Budget => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::FORBIDDEN,
        };
        tracing::info!(host = %self.host, method = %self.method, path = %self.path, rule, "proxy refused a request");
        self.stats.record_egress_refusal(EgressRefusal {
            kind,
            host: self.host.clone(),
            method: self.method.clone(),
            path: self.path.clone(),
            rule: rule.to_string(),
        });
        Box::new(
            RuleRefusal {
                status,
                host: &self.host,
                method: &self.method,
                path: &self.path,
                rule,
                hint,
            }
            .response(),
        )
    }
}

fn shown_path(parts: &Parts) -> String {
    parts
        .uri
        .path()
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_SHOWN_PATH)
        .collect()
}

/// The policy entry that made `target:port` terminated, for refusals that are not
/// one entry's (Host, ambiguous path).
fn entry_name(engine: &Engine, target: &TargetHost, port: u16) -> String {
    if let Some(&i) = engine.matching_rules(target, port).first() {
        return format!("network.allow_hosts[{}]", engine.egress.rules[i].index);
    }
    let creds = &engine.egress.credentials;
    match (0..creds.len()).find(|&i| engine.credential_host(i, target, port)) {
        Some(i) => format!("credentials[{}]", creds[i].name),
        None => "network.allow_hosts".to_string(),
    }
}

/// A shape hyper would pass but an origin might read differently (RFC 9112 6.3).
fn smuggling(parts: &Parts) -> Option<&'static str> {
    let count = |n| parts.headers.get_all(n).iter().count();
    if count(CONTENT_LENGTH) > 1 {
        Some("more than one Content-Length")
    } else if count(CONTENT_LENGTH) > 0 && count(TRANSFER_ENCODING) > 0 {
        Some("both Content-Length and Transfer-Encoding")
    } else if count(HOST) > 1 {
        Some("more than one Host")
    } else {
        None
    }
}

/// Do the request's authority and Host header (those present) name the tunnel's
/// `target:port` (the scheme's default port may be left out)?
fn names_target(parts: &Parts, target: &TargetHost, port: u16, tls: bool) -> bool {
    let default = if tls { 443 } else { 80 };
    let same = |a: &Authority| {
        TargetHost::parse(a.host()).as_ref() == Some(target)
            && a.port_u16().unwrap_or(default) == port
    };
    let uri_ok = parts.uri.authority().is_none_or(same);
    let host_ok = match parts.headers.get(HOST) {
        None => true,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse::<Authority>().ok())
            .is_some_and(|a| same(&a)),
    };
    uri_ok && host_ok
}

/// Check the request against the map entries naming its host: `Ok(Some(i))` the
/// entry allowing it, `Ok(None)` no entry names the host (terminated for a
/// credential only: the string entry allows it), `Err((entry, hint))` refused.
fn check_rules(
    engine: &Engine,
    target: &TargetHost,
    port: u16,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<Option<(usize, bool)>, (String, String)> {
    let matching = engine.matching_rules(target, port);
    let Some(&first) = matching.first() else {
        return Ok(None);
    };
    let rules = &engine.egress.rules;
    let method_ok = |i: usize| {
        rules[i]
            .methods
            .as_ref()
            .is_none_or(|m| m.iter().any(|m| m == method))
    };
    let path_ok = |i: usize| {
        rules[i]
            .paths
            .as_ref()
            .is_none_or(|p| p.iter().any(|p| glob_matches(p, path)))
    };
    let entry_of = |i: usize| format!("network.allow_hosts[{}]", rules[i].index);
    let git = |i: usize| {
        let g = rules[i].git.as_ref()?;
        Some(git::check(g, &entry_of(i), method, path, query))
    };
    for &i in &matching {
        match git(i) {
            Some(Ok(push)) => return Ok(Some((i, push))),
            Some(Err(_)) => {}
            None if method_ok(i) && path_ok(i) => return Ok(Some((i, false))),
            None => {}
        }
    }
    let entry = entry_of(first);
    let hint = if let Some(Err(hint)) = git(first) {
        hint
    } else if !method_ok(first) {
        format!("add {method} to {entry}.methods")
    } else {
        format!("add a pattern matching {path} to {entry}.paths")
    };
    Err((entry, hint))
}

/// Is credential `i` bound to this request? `Err(hint)`: no, and why.
fn binding(
    engine: &Engine,
    i: usize,
    target: &TargetHost,
    port: u16,
    tls: bool,
    method: &str,
    path: &str,
) -> Result<(), String> {
    let c = &engine.egress.credentials[i];
    let name = &c.name;
    if !engine.credential_host(i, target, port) {
        return Err(format!("add {target} to credentials[{name}].hosts"));
    }
    if let Some(m) = &c.methods {
        if !m.iter().any(|m| m == method) {
            return Err(format!("add {method} to credentials[{name}].methods"));
        }
    }
    if let Some(p) = &c.paths {
        if !p.iter().any(|p| glob_matches(p, path)) {
            return Err(format!(
                "add a pattern matching {path} to credentials[{name}].paths"
            ));
        }
    }
    if !tls && !c.allow_plaintext {
        return Err(format!(
            "use https://, or set credentials[{name}].allow_plaintext: true"
        ));
    }
    Ok(())
}

/// Decide one request (see the module's comment); on success its head is ready to
/// go upstream (credentials in place, hop-by-hop headers gone, `Expect` dropped).
pub fn admit(
    engine: &Engine,
    stats: &ProxyStats,
    target: &TargetHost,
    port: u16,
    tls: bool,
    parts: &mut Parts,
) -> Result<Admitted, Refused> {
    let seen = Seen {
        engine,
        stats,
        host: target.to_string(),
        method: parts.method.as_str().to_string(),
        path: shown_path(parts),
    };
    if let Some(why) = smuggling(parts) {
        return Err(Box::new(bad_request(why)));
    }
    if !names_target(parts, target, port, tls) {
        let hint = format!("send Host: {target} (the CONNECT target); a tunnel serves one host");
        return Err(seen.refuse(RefusalKind::Rule, &entry_name(engine, target, port), &hint));
    }
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(EXPECT);
    let path = match normalise_path_with(parts.uri.path(), !paths_apply(engine, target, port)) {
        Ok(p) => p,
        Err(why) => {
            let rule = entry_name(engine, target, port);
            return Err(seen.refuse(RefusalKind::Rule, &rule, why.describe()));
        }
    };
    let query = parts.uri.query();
    let checked = check_rules(engine, target, port, &seen.method, &path, query)
        .map_err(|(entry, hint)| seen.refuse(RefusalKind::Rule, &entry, &hint))?;
    let rule = checked.map(|(i, _)| i);
    let push = checked
        .filter(|&(_, push)| push)
        .map(|(i, _)| (i, seen.path.clone()));
    let bound = credentials(&seen, target, port, tls, &path, parts)?;
    charge_budget(&seen, rule, parts)?;
    for &i in &bound {
        let c = &engine.egress.credentials[i];
        let put = substitute(parts, &c.placeholder, c.value.expose())
            .and_then(|()| inject(parts, &c.inject, c.value.expose()));
        if let Err(e) = put {
            tracing::warn!(credential = %c.name, error = %e, "proxy could not inject a credential");
            let hint = format!("credentials[{}]: {e}", c.name);
            return Err(seen.refuse(
                RefusalKind::Rule,
                &format!("credentials[{}]", c.name),
                &hint,
            ));
        }
        stats.record_credential_use(&c.name);
    }
    if !bound.is_empty() {
        // The response is scanned for the value: it must come as it is, and
        // whole (a run asking an echo for byte ranges would get the value in
        // pieces no window sees whole).
        (parts.headers).insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        parts.headers.remove(hyper::header::RANGE);
        parts.headers.remove(hyper::header::IF_RANGE);
    }
    let counters = stats.host_counters(&seen.host);
    counters.requests.fetch_add(1, Ordering::Relaxed);
    Ok(Admitted {
        rule,
        bound,
        counters,
        head_only: parts.method == Method::HEAD,
        host: seen.host,
        push,
    })
}

/// Does a `paths` rule apply to `target:port`: a map entry naming it with
/// `paths`, or a credential naming it with `paths`?
fn paths_apply(engine: &Engine, target: &TargetHost, port: u16) -> bool {
    let rules = engine.matching_rules(target, port);
    rules.iter().any(|&i| {
        let r = &engine.egress.rules[i];
        r.paths.is_some() || r.git.is_some()
    }) || (engine.egress.credentials.iter().enumerate())
        .any(|(i, c)| c.paths.is_some() && engine.credential_host(i, target, port))
}

/// The credentials bound to the request; refused when the head carries the
/// placeholder of one it is not bound to, or a bound one's elsewhere than its
/// positions (`inject::misplaced`).
fn credentials(
    seen: &Seen<'_>,
    target: &TargetHost,
    port: u16,
    tls: bool,
    path: &str,
    parts: &Parts,
) -> Result<Vec<usize>, Refused> {
    let engine = seen.engine;
    let mut bound = Vec::new();
    for (i, c) in engine.egress.credentials.iter().enumerate() {
        let rule = format!("credentials[{}]", c.name);
        match binding(engine, i, target, port, tls, &seen.method, path) {
            Ok(()) => {
                if let Some(found) = misplaced(parts, &c.placeholder, &c.inject) {
                    let hint = format!(
                        "the placeholder of credentials[{}] goes only in {}; it was found in {found}",
                        c.name,
                        allowed_positions(&c.inject)
                    );
                    return Err(seen.refuse(RefusalKind::CredentialMisuse, &rule, &hint));
                }
                bound.push(i);
            }
            Err(hint) => {
                if head_mentions(parts, &c.placeholder) {
                    return Err(seen.refuse(RefusalKind::CredentialMisuse, &rule, &hint));
                }
            }
        }
    }
    Ok(bound)
}

/// Count the request against its entry's budgets (429 past them; a declared body
/// larger than what is left of `max_upload_bytes` is refused before it is sent).
fn charge_budget(seen: &Seen<'_>, rule: Option<usize>, parts: &Parts) -> Result<(), Refused> {
    let Some(i) = rule else { return Ok(()) };
    let r = &seen.engine.egress.rules[i];
    let budget = &seen.engine.budgets[i];
    let entry = format!("network.allow_hosts[{}]", r.index);
    if let Some(max) = r.max_requests {
        if budget.requests.fetch_add(1, Ordering::Relaxed) >= max {
            let hint = format!("raise {entry}.max_requests (now {max})");
            return Err(seen.refuse(RefusalKind::Budget, &entry, &hint));
        }
    }
    if let Some(max) = r.max_upload_bytes {
        let declared = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        if budget
            .upload
            .load(Ordering::Relaxed)
            .saturating_add(declared)
            > max
        {
            let hint = format!("raise {entry}.max_upload_bytes (now {max})");
            return Err(seen.refuse(RefusalKind::Budget, &entry, &hint));
        }
    }
    Ok(())
}

/// The request body as it goes upstream: a push's commands judged first (see
/// [`git::judge_push`]; refused: git's answer or a 400 instead), counted, and
/// stopped past the entry's `max_upload_bytes`.
pub async fn request_body(
    engine: &Engine,
    stats: &ProxyStats,
    admitted: &Admitted,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<ProxyBody, Response<ProxyBody>> {
    let body = match &admitted.push {
        None => body.map_err(Into::into).boxed(),
        Some((i, path)) => {
            let r = &engine.egress.rules[*i];
            let entry = format!("network.allow_hosts[{}]", r.index);
            let Some(push) = r.git.as_ref().and_then(|g| g.push.as_ref()) else {
                return Err(bad_request("no git push rule"));
            };
            match git::judge_push(headers.get(CONTENT_ENCODING), push, &entry, body).await {
                git::Pushed::Forward(b) => b,
                git::Pushed::Refused(resp, why) => {
                    tracing::info!(host = %admitted.host, path = %path, why = %why, "proxy refused a git push");
                    stats.record_egress_refusal(EgressRefusal {
                        kind: RefusalKind::Rule,
                        host: admitted.host.clone(),
                        method: "POST".into(),
                        path: path.clone(),
                        rule: format!("{entry}.git"),
                    });
                    return Err(resp);
                }
            }
        }
    };
    let limit = admitted.rule.and_then(|i| {
        let max = engine.egress.rules[i].max_upload_bytes?;
        Some((engine.budgets[i].upload.clone(), max))
    });
    let counters = vec![admitted.counters.bytes_up.clone()];
    Ok(Metered::new(body, counters, limit).boxed())
}

/// Does the response carry an encoding other than `identity` (content codings, or a
/// transfer coding besides `chunked`)? Unreadable values count as encoded.
fn encoded(headers: &HeaderMap) -> bool {
    let other = |name: HeaderName, fine: &[&str]| {
        headers.get_all(name).iter().any(|v| match v.to_str() {
            Ok(s) => s
                .split(',')
                .map(str::trim)
                .any(|t| !t.is_empty() && !fine.iter().any(|f| t.eq_ignore_ascii_case(f))),
            Err(_) => true,
        })
    };
    other(CONTENT_ENCODING, &["identity"]) || other(TRANSFER_ENCODING, &["identity", "chunked"])
}

/// The response as it goes to the run: hop-by-hop headers gone, counted, and for a
/// request a credential went into, the value (in every form [`needles`] lists)
/// replaced by its placeholder in headers and body (the length then changes:
/// `Content-Length` goes, hyper frames it). Such a response with a body that is
/// encoded anyway (capsule asked for `identity`) cannot be scanned: a 502 instead.
pub fn response(
    engine: &Engine,
    admitted: &Admitted,
    resp: Response<Incoming>,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    let bodiless = admitted.head_only
        || parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    if !admitted.bound.is_empty() && !bodiless && encoded(&parts.headers) {
        tracing::warn!(host = %admitted.host, "proxy refused an encoded response to a credentialed request");
        return text(
            StatusCode::BAD_GATEWAY,
            format!(
                "capsule proxy: {}: the origin compressed a response to a credentialed request \
                 (capsule asked for identity and must scan it for the credential)\n",
                admitted.host
            ),
        );
    }
    strip_hop_by_hop(&mut parts.headers);
    add_via(&mut parts.headers);
    let down = vec![admitted.counters.bytes_down.clone()];
    let body = Metered::new(body.map_err(Into::into).boxed(), down, None).boxed();
    if admitted.bound.is_empty() {
        return Response::from_parts(parts, body);
    }
    let pairs = admitted
        .bound
        .iter()
        .flat_map(|&i| {
            let c = &engine.egress.credentials[i];
            let ph = c.placeholder.as_bytes();
            needles(c.value.expose())
                .into_iter()
                .map(move |n| (n, ph.to_vec()))
        })
        .collect();
    let scrubber = Scrubber::new(pairs);
    scrubber.headers(&mut parts.headers);
    if !bodiless {
        parts.headers.remove(CONTENT_LENGTH);
    }
    Response::from_parts(parts, ScrubBody::new(body, scrubber).boxed())
}

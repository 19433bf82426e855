//! `capsule why 'POST https://api.github.com/repos/acme/widget/issues'`: one
//! HTTP(S) request, answered with the proxy's own matching
//! (`proxy::egress::rules`): whether its host is spliced or TLS-terminated,
//! the `allow_hosts` map entry that allows or refuses its method and path,
//! the credential it would carry (by name: `why` never reads a value), and
//! the smallest change that would allow it.
//!
//! A placeholder is not askable: `why` never sees one (nor a value). What it
//! says instead is which credentials a request is bound to; a request that
//! sends the placeholder of one it is not bound to is refused by the proxy
//! (403, `credential_misuse`).

use crate::plan::CredentialPlan;
use crate::policy::egress::{check_methods, check_paths, HostRules};
use crate::policy::NetMode;
use crate::proxy::allow_hosts::{Allowlist, TargetHost};
use crate::proxy::egress::rules::{glob_matches, normalise_path};

use serde_json::{json, Value};

use super::{Answer, Survey};

/// One request as asked: `METHOD http(s)://HOST[:PORT]/PATH[?QUERY]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub https: bool,
    /// As in the URL (`[::1]` for IPv6).
    pub host: String,
    pub port: u16,
    /// The path as sent (without its query), not yet normalised.
    pub path: String,
}

impl Request {
    /// Parse `METHOD URL` (one string, or the two words).
    pub fn parse(q: &str) -> Result<Request, String> {
        let mut words = q.split_whitespace();
        let (Some(method), Some(url), None) = (words.next(), words.next(), words.next()) else {
            return Err(format!(
                "`{q}`: ask a request as `METHOD URL`, e.g. 'POST https://api.github.com/repos/acme/widget/issues'"
            ));
        };
        if !method.bytes().all(crate::policy::egress::is_tchar) {
            return Err(format!("`{method}` is not an HTTP method"));
        }
        let lower = url
            .get(..8)
            .map(str::to_ascii_lowercase)
            .unwrap_or_default();
        let (https, rest) = if lower.starts_with("https://") {
            (true, &url[8..])
        } else if lower.starts_with("http://") {
            (false, &url[7..])
        } else {
            return Err(format!(
                "`{url}`: the URL must start with https:// or http://"
            ));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err(format!("`{url}`: no user information in the URL, please"));
        }
        let (host, port) = split_authority(authority, if https { 443 } else { 80 })
            .ok_or_else(|| format!("`{url}`: `{authority}` is not HOST or HOST:PORT"))?;
        let path = tail.split(['?', '#']).next().unwrap_or("");
        Ok(Request {
            method: method.to_string(),
            https,
            host,
            port,
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        })
    }

    /// `POST https://api.github.com/repos/x` (the default port left out).
    pub fn question(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        let default = if self.https { 443 } else { 80 };
        let port = if self.port == default {
            String::new()
        } else {
            format!(":{}", self.port)
        };
        format!(
            "{} {scheme}://{}{port}{}",
            self.method, self.host, self.path
        )
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_authority(a: &str, default: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => default,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        (format!("[{inside}]"), port)
    } else {
        match a.split_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (a.to_string(), default),
        }
    };
    (!host.is_empty() && port != 0 && TargetHost::parse(&host).is_some()).then_some((host, port))
}

/// What a request answer says beyond the verdict (for `--json`, `--explain`
/// and `capsule learn`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    /// `terminated` (TLS ended at the proxy: rules and credentials apply),
    /// `spliced` (CONNECT relayed end to end, never inspected), `plaintext`
    /// (plain http:// to a host with no rules) or `inspected` (plain http://
    /// to a host with rules).
    pub tls: &'static str,
    /// The credentials the request would carry, by name.
    pub credentials: Vec<String>,
    /// The widening of a map entry that would allow it.
    pub rule_change: Option<RuleChange>,
    /// The credentials of its host it does not carry: (name, why not, the
    /// widening of the credential that would bind it, if any).
    pub unbound: Vec<(String, String, Option<String>)>,
}

/// The smallest widening of one `allow_hosts` map entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleChange {
    /// Its index in `network.allow_hosts`.
    pub entry: usize,
    /// A method to add to its `methods`.
    pub method: Option<String>,
    /// A path pattern to add to its `paths`.
    pub path: Option<String>,
    /// Why the pattern is not the path itself (a segment made `*`).
    pub generalised: Option<String>,
}

impl RuleChange {
    pub fn describe(&self) -> String {
        let key = format!("network.allow_hosts[{}]", self.entry);
        let mut parts = Vec::new();
        if let Some(m) = &self.method {
            parts.push(format!("add {m} to {key}.methods"));
        }
        if let Some(p) = &self.path {
            parts.push(format!("add \"{p}\" to {key}.paths"));
        }
        let mut s = parts.join(" and ");
        if let Some(g) = &self.generalised {
            s.push_str(&format!(" ({g})"));
        }
        s
    }
}

/// The pattern naming `path` (normalised) as closely as a policy can: the
/// path itself, or with each segment a pattern cannot hold (an escape, `*`)
/// made `*` (one segment), saying so.
pub fn path_pattern(path: &str) -> Result<(String, Option<String>), String> {
    if check_paths(&[path.to_string()]).is_ok() && !path.contains('*') {
        return Ok((path.to_string(), None));
    }
    let segs: Vec<&str> = path[1..].split('/').collect();
    let mut star = Vec::new();
    let fixed: Vec<&str> = segs
        .iter()
        .map(|s| {
            let clean = check_paths(&[format!("/{s}")]).is_ok() && !s.contains('*');
            if clean {
                s
            } else {
                star.push(*s);
                "*"
            }
        })
        .collect();
    let p = format!("/{}", fixed.join("/"));
    check_paths(std::slice::from_ref(&p))?;
    let why = format!(
        "`*` stands for {}: a pattern cannot name an escape or a `*`",
        star.iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((p, Some(why)))
}

/// Does a host list (the forms `allow_hosts` takes) name `target:port`?
fn names(hosts: &[String], target: &TargetHost, port: u16) -> bool {
    !hosts.is_empty() && Allowlist::parse(hosts).is_ok_and(|l| l.permits_target(target, port))
}

fn methods_allow(m: &Option<Vec<String>>, method: &str) -> bool {
    m.as_ref().is_none_or(|m| m.iter().any(|m| m == method))
}

fn paths_allow(p: &Option<Vec<String>>, path: &str) -> bool {
    p.as_ref()
        .is_none_or(|p| p.iter().any(|p| glob_matches(p, path)))
}

fn list(v: &Option<Vec<String>>) -> String {
    v.as_ref()
        .map_or("any".into(), |v| format!("[{}]", v.join(", ")))
}

impl Survey<'_> {
    /// The map entries naming `target:port`: (allow_hosts index, rules).
    fn host_rules(&self, target: &TargetHost, port: u16) -> Vec<&(usize, HostRules)> {
        let rules = &self.plan.net.host_rules;
        rules
            .iter()
            .filter(|(_, r)| names(std::slice::from_ref(&r.host), target, port))
            .collect()
    }

    /// The credentials whose hosts name `target:port`.
    fn host_credentials(&self, target: &TargetHost, port: u16) -> Vec<&CredentialPlan> {
        let creds = &self.plan.net.credentials;
        creds
            .iter()
            .filter(|c| names(&c.hosts, target, port))
            .collect()
    }

    fn key_line(&self, a: &mut Answer, key: String) {
        a.line = self.line(&key);
        a.key = Some(key);
    }

    /// May the run send this request (through the proxy)?
    pub fn request(&self, r: &Request) -> Answer {
        let mut a = self.connect(&r.host, r.port);
        a.question = r.question();
        let mut facts = RequestFacts {
            tls: if r.https { "spliced" } else { "plaintext" },
            ..RequestFacts::default()
        };
        let target = TargetHost::parse(&r.host);
        let (Some(target), true, NetMode::Proxy) = (target, a.allowed, self.plan.net.mode) else {
            if a.allowed {
                a.notes.push(
                    "no proxy stands between the run and the host: no method/path rule applies and no credential is injected"
                        .into(),
                );
            }
            return a;
        };
        let rules = self.host_rules(&target, r.port);
        let creds = self.host_credentials(&target, r.port);
        if rules.is_empty() && creds.is_empty() {
            a.notes.push(if r.https {
                "TLS is spliced: the proxy relays the CONNECT tunnel end to end and never sees the method or path, \
                 so no rule applies and no credential is carried (a map entry `{host: ..., methods: [...], paths: [...]}` \
                 or a credential would terminate it)"
                    .into()
            } else {
                "plain http:// to a host with no rules: forwarded as is, no credential is carried".into()
            });
            a.request = Some(facts);
            return a;
        }
        facts.tls = if r.https { "terminated" } else { "inspected" };
        a.layer_detail = if r.https {
            "capsule's egress proxy (TLS terminated: method and path rules apply)".into()
        } else {
            "capsule's egress proxy (plain http://: method and path rules apply)".into()
        };
        if r.https {
            a.notes.push(
                "TLS is terminated at the proxy with a leaf from the run's own CA (the run trusts it through \
                 SSL_CERT_FILE and the other CA variables); the proxy opens a verified TLS connection upstream"
                    .into(),
            );
        }
        let path = match normalise_path(&r.path) {
            Ok(p) => p,
            Err(why) => {
                self.ambiguous(&mut a, &rules, &creds, why.describe());
                a.request = Some(facts);
                return a;
            }
        };
        self.decide_rules(&mut a, &mut facts, &rules, &r.method, &path);
        self.bind_credentials(&mut a, &mut facts, &creds, r, &path);
        a.request = Some(facts);
        a
    }

    /// A path the proxy could read more than one way: refused whatever the policy says.
    fn ambiguous(
        &self,
        a: &mut Answer,
        rules: &[&(usize, HostRules)],
        creds: &[&CredentialPlan],
        why: &str,
    ) {
        a.allowed = false;
        let key = match (rules.first(), creds.first()) {
            (Some((i, _)), _) => format!("network.allow_hosts[{i}]"),
            (None, Some(c)) => c.key.clone(),
            (None, None) => "network.allow_hosts".into(),
        };
        self.key_line(a, key);
        a.because = format!("ambiguous path ({why})");
        a.no_change = Some(
            "the proxy refuses a path an origin could read more than one way, whatever the policy says \
             (never guessed)"
                .into(),
        );
    }

    /// The map entries' verdict on `method` and `path` (normalised), as the
    /// proxy's gate: allowed by the first entry allowing both; refused with the
    /// smallest widening of the entry needing the fewest changes.
    fn decide_rules(
        &self,
        a: &mut Answer,
        facts: &mut RequestFacts,
        rules: &[&(usize, HostRules)],
        method: &str,
        path: &str,
    ) {
        if rules.is_empty() {
            a.because = format!(
                "{} (terminated for its credential only: a string entry allows any method and path)",
                a.because
            );
            return;
        }
        let ok = |r: &HostRules| {
            (
                methods_allow(&r.methods, method),
                paths_allow(&r.paths, path),
            )
        };
        if let Some((i, r)) = rules
            .iter()
            .map(|x| (x.0, &x.1))
            .find(|(_, r)| ok(r) == (true, true))
        {
            a.allowed = true;
            self.key_line(a, format!("network.allow_hosts[{i}]"));
            a.because = format!(
                "network.allow_hosts[{i}] (host {}) allows {method} {path}: methods {}, paths {}",
                r.host,
                list(&r.methods),
                list(&r.paths)
            );
            return;
        }
        // The entry needing the fewest changes (the first among equals).
        let (i, r) = rules
            .iter()
            .map(|x| (x.0, &x.1))
            .min_by_key(|(_, r)| {
                let (m, p) = ok(r);
                u8::from(!m) + u8::from(!p)
            })
            .expect("rules is not empty");
        let (m_ok, p_ok) = ok(r);
        a.allowed = false;
        self.key_line(a, format!("network.allow_hosts[{i}]"));
        let mut why = Vec::new();
        if !m_ok {
            why.push(format!(
                "{method} is not among its methods {}",
                list(&r.methods)
            ));
        }
        if !p_ok {
            why.push(format!(
                "{path} matches none of its paths {}",
                list(&r.paths)
            ));
        }
        a.because = format!(
            "network.allow_hosts[{i}] (host {}): {}",
            r.host,
            why.join(", and ")
        );
        if rules.len() > 1 {
            a.notes.push(format!(
                "{} map entries name this host; a request is allowed when one of them allows both its method and path",
                rules.len()
            ));
        }
        self.rule_change(
            a,
            facts,
            i,
            (!m_ok).then_some(method),
            (!p_ok).then_some(path),
        );
    }

    fn rule_change(
        &self,
        a: &mut Answer,
        facts: &mut RequestFacts,
        entry: usize,
        method: Option<&str>,
        path: Option<&str>,
    ) {
        if let Some(m) = method {
            if let Err(e) = check_methods(&[m.to_string()]) {
                a.no_change = Some(format!(
                    "methods are compared case-sensitively and a rule names upper-case methods only ({e})"
                ));
                return;
            }
        }
        let (pattern, generalised) = match path.map(path_pattern).transpose() {
            Ok(Some((p, g))) => (Some(p), g),
            Ok(None) => (None, None),
            Err(e) => {
                a.no_change = Some(format!("no path pattern can name this path: {e}"));
                return;
            }
        };
        let change = RuleChange {
            entry,
            method: method.map(str::to_string),
            path: pattern,
            generalised,
        };
        a.change = Some(change.describe());
        facts.rule_change = Some(change);
    }

    /// Which credentials the request carries, and why each other one of its
    /// host does not.
    fn bind_credentials(
        &self,
        a: &mut Answer,
        facts: &mut RequestFacts,
        creds: &[&CredentialPlan],
        r: &Request,
        path: &str,
    ) {
        for c in creds {
            let who = match self.line(&c.key) {
                Some(l) if c.key.starts_with("credentials[") => {
                    format!("{} ({}, line {l})", c.name, c.key)
                }
                _ => format!("{} ({})", c.name, c.key),
            };
            let excluded = if !methods_allow(&c.methods, &r.method) {
                let widen = check_methods(std::slice::from_ref(&r.method))
                    .is_ok()
                    .then(|| format!("add {} to {}.methods", r.method, c.key));
                let why = format!("its methods {} exclude {}", list(&c.methods), r.method);
                Some((why, widen))
            } else if !paths_allow(&c.paths, path) {
                let widen = path_pattern(path)
                    .ok()
                    .map(|(p, _)| format!("add \"{p}\" to {}.paths", c.key));
                Some((
                    format!("its paths {} do not match {path}", list(&c.paths)),
                    widen,
                ))
            } else if !r.https && !c.allow_plaintext {
                let widen = format!("set {}.allow_plaintext: true (or use https://)", c.key);
                let why = "it never goes over plain http:// (allow_plaintext: false)";
                Some((why.to_string(), Some(widen)))
            } else {
                None
            };
            match excluded {
                None => {
                    facts.credentials.push(c.name.clone());
                    a.notes.push(format!(
                        "carries credential {who}, injected as {} (the value is read by exec at start; why never reads it)",
                        crate::plan::egress::inject_text(c)
                    ));
                }
                Some((why, widen)) => {
                    a.notes.push(format!(
                        "does not carry credential {who}: {why}; the request goes without it, and if the run sends \
                         its placeholder the proxy refuses the request (403, credential_misuse)"
                    ));
                    facts.unbound.push((c.name.clone(), why, widen));
                }
            }
        }
        if a.allowed && facts.credentials.is_empty() {
            a.notes.push("carries no credential".into());
        }
    }
}

/// The port of a host entry as written (`localhost:8443`, `[::1]:443`), if any.
fn entry_port(entry: &str) -> Option<u16> {
    let tail = match entry.rsplit_once("]:") {
        Some((_, p)) => p,
        None if entry.matches(':').count() == 1 => entry.rsplit_once(':')?.1,
        None => return None,
    };
    tail.parse().ok()
}

impl Survey<'_> {
    /// The request a proxy refusal (a `denials` entry with a `kind`) names:
    /// its question is `METHOD HOST/PATH`; the port, not recorded, is the
    /// one its entry names (else 443), over https.
    fn refused_request(&self, d: &Value) -> Option<Request> {
        let q = d.get("question")?.as_str()?;
        let (method, rest) = q.split_once(' ')?;
        let slash = rest.find('/')?;
        let (host, path) = rest.split_at(slash);
        let key = d.get("key").and_then(Value::as_str).unwrap_or("");
        let net = &self.plan.net;
        let entry = key
            .strip_prefix("network.allow_hosts[")
            .and_then(|k| k.strip_suffix(']'))
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| net.allow_hosts.get(i));
        let port = match entry {
            Some(e) => entry_port(e),
            None => net
                .credentials
                .iter()
                .filter(|c| format!("credentials[{}]", c.name) == key)
                .flat_map(|c| c.hosts.iter())
                .find_map(|h| entry_port(h)),
        };
        Some(Request {
            method: method.to_string(),
            https: true,
            host: host.to_string(),
            port: port.unwrap_or(443),
            path: path.to_string(),
        })
    }

    /// `why`'s answer to the request a proxy refusal names (`capsule learn`).
    pub fn refusal_answer(&self, d: &Value) -> Option<Answer> {
        self.refused_request(d).map(|r| self.request(&r))
    }

    /// A proxy refusal of `exec --explain` (`d`, kind `rule`, `budget` or
    /// `credential_misuse`) with what `why` says of its request: the policy
    /// line, the reason in full, the smallest change, the credentials.
    pub fn explain_refusal(&self, d: &mut Value) {
        let Some(r) = self.refused_request(d) else {
            return;
        };
        let a = self.request(&r);
        let kind = d
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let facts = a.request.clone().unwrap_or_default();
        d["tls"] = json!(facts.tls);
        let keep = |n: &&String| n.contains("credential") || n.contains("map entries");
        d["notes"] = json!(a.notes.iter().filter(keep).collect::<Vec<_>>());
        if d.get("line").is_none_or(Value::is_null) {
            let key = d
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            // `credentials[NAME]`: the line of that credential's own entry.
            let creds = &self.plan.net.credentials;
            let key = creds
                .iter()
                .find(|c| format!("credentials[{}]", c.name) == key)
                .map_or(key, |c| c.key.clone());
            d["line"] = json!(self.line(&key).or(a.line));
        }
        match kind.as_str() {
            "rule" if !a.allowed => {
                d["because"] = json!(a.because);
                d["change"] = json!(a.change);
                d["no_change"] = json!(a.no_change);
            }
            "rule" => d["because"] = json!(format!(
                "{}; its method and path are allowed ({}), so the proxy refused something else: a Host header \
                 naming another host, or a credential that could not be injected",
                d["because"].as_str().unwrap_or(""),
                a.because
            )),
            "budget" => d["change"] = json!(self.budget_change(d)),
            "credential_misuse" => {
                let name = d["key"].as_str().and_then(|k| k.strip_prefix("credentials[")).and_then(|k| k.strip_suffix(']'));
                if let Some((n, why, widen)) = facts.unbound.iter().find(|u| Some(u.0.as_str()) == name) {
                    d["because"] = json!(format!("{}: {why}", d["because"].as_str().unwrap_or("")));
                    d["change"] = json!(widen.as_ref().map(|w| format!(
                        "{w}, only if {n} is meant to go with this request (otherwise the run sent it where it must not)"
                    )));
                }
            }
            _ => {}
        }
    }

    fn budget_change(&self, d: &Value) -> Option<String> {
        let key = d.get("key")?.as_str()?;
        let i: usize = key
            .strip_prefix("network.allow_hosts[")?
            .strip_suffix(']')?
            .parse()
            .ok()?;
        let (_, r) = self.plan.net.host_rules.iter().find(|(j, _)| *j == i)?;
        let mut raise = Vec::new();
        if let Some(n) = r.max_requests {
            raise.push(format!("{key}.max_requests (now {n})"));
        }
        if let Some(n) = r.max_upload_bytes {
            raise.push(format!("{key}.max_upload_bytes (now {n})"));
        }
        (!raise.is_empty()).then(|| format!("raise {}", raise.join(" or ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        let r = Request::parse("POST https://api.github.com/repos/acme/widget/issues?x=1").unwrap();
        assert_eq!(
            (
                r.method.as_str(),
                r.https,
                r.host.as_str(),
                r.port,
                r.path.as_str()
            ),
            (
                "POST",
                true,
                "api.github.com",
                443,
                "/repos/acme/widget/issues"
            )
        );
        let r = Request::parse("GET http://[::1]:8080").unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.path.as_str()),
            ("[::1]", 8080, "/")
        );
        assert_eq!(r.question(), "GET http://[::1]:8080/");
        for bad in [
            "GET",
            "GET ftp://x/",
            "GET https://u@x/",
            "GET https://x:0/",
            "G(T https://x/",
            "GET https:///a",
        ] {
            assert!(Request::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn patterns_name_the_path_or_star_a_segment() {
        assert_eq!(
            path_pattern("/repos/a/b").unwrap(),
            ("/repos/a/b".into(), None)
        );
        let (p, why) = path_pattern("/files/a%20b/raw").unwrap();
        assert_eq!(p, "/files/*/raw");
        assert!(why.unwrap().contains("a%20b"));
        let (p, _) = path_pattern("/x/*/y").unwrap();
        assert_eq!(p, "/x/*/y");
        assert_eq!(path_pattern("/").unwrap().0, "/");
    }

    #[test]
    fn entry_ports() {
        assert_eq!(entry_port("localhost:8443"), Some(8443));
        assert_eq!(entry_port("[::1]:443"), Some(443));
        assert_eq!(entry_port("::1"), None);
        assert_eq!(entry_port("api.github.com"), None);
    }
}

//! `network.allow_hosts`: which host names (and optionally ports) the proxy may reach.
//!
//! An entry is one of
//! * `api.github.com` — exactly that host, any port;
//! * `*.pythonhosted.org` — any subdomain, never the apex itself;
//! * `127.0.0.1`, `[::1]` (or bare `::1`) — an IP literal, matched only by that literal;
//! * any of the above followed by `:PORT` (`[::1]:8080` for IPv6) — that port only.
//!
//! Names are compared case-insensitively with one trailing dot removed. A bare `*` is an
//! error: unrestricted egress is only ever `network.mode: unrestricted`, said explicitly.

use std::net::{IpAddr, Ipv6Addr};

/// Why an `allow_hosts` entry was rejected. Every variant names the entry as written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllowlistError {
    #[error("network.allow_hosts is empty: proxy mode needs at least one host (use network.mode: unrestricted for unfiltered egress)")]
    Empty,
    #[error("network.allow_hosts entry {entry:?}: {reason}")]
    Invalid { entry: String, reason: &'static str },
}

/// The host part of an entry, or of a request's target, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// A DNS name, lower-case, without trailing dot.
    Exact(String),
    /// `*.suffix`: stores `suffix` (lower-case, no leading/trailing dot).
    Wildcard(String),
    /// An IP literal.
    Ip(IpAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: HostPattern,
    port: Option<u16>,
}

/// A parsed, validated allowlist. Cheap to share behind an `Arc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

/// A request's target host, normalised the same way entries are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetHost {
    Name(String),
    Ip(IpAddr),
}

impl TargetHost {
    /// Normalise a host as it appears in a request (`Example.COM.`, `[::1]`, `10.0.0.1`).
    /// Returns `None` for something that is neither a valid DNS name nor an IP literal.
    pub fn parse(host: &str) -> Option<TargetHost> {
        if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            return inner
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| TargetHost::Ip(IpAddr::V6(ip)));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(TargetHost::Ip(ip));
        }
        normalise_name(host).map(TargetHost::Name)
    }

    /// Is this `localhost` or a loopback literal (the only targets that may reach loopback)?
    pub fn is_explicit_loopback(&self) -> bool {
        match self {
            TargetHost::Name(n) => n == "localhost",
            TargetHost::Ip(ip) => {
                super::destination::classify_ip(*ip) == super::DestClass::Loopback
            }
        }
    }
}

impl std::fmt::Display for TargetHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetHost::Name(n) => f.write_str(n),
            TargetHost::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            TargetHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// Lower-case, strip one trailing dot, check DNS name syntax (letters, digits, `-`, `_`,
/// labels of 1..=63 bytes, at most 253 bytes in all).
fn normalise_name(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return None;
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return None;
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
    }
    Some(name.to_ascii_lowercase())
}

fn invalid(entry: &str, reason: &'static str) -> AllowlistError {
    AllowlistError::Invalid {
        entry: entry.to_string(),
        reason,
    }
}

fn parse_port(entry: &str, port: &str) -> Result<u16, AllowlistError> {
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(entry, "the port must be a number 1-65535"));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid(entry, "the port must be a number 1-65535")),
        Ok(p) => Ok(p),
    }
}

fn parse_entry(raw: &str) -> Result<Entry, AllowlistError> {
    let entry = raw.trim();
    if entry.is_empty() {
        return Err(invalid(raw, "empty entry"));
    }
    if entry.contains("://") {
        return Err(invalid(
            raw,
            "give a host name (and optional :port), not a URL",
        ));
    }
    if entry.contains('/') || entry.contains('@') || entry.contains(char::is_whitespace) {
        return Err(invalid(raw, "give a host name (and optional :port) only"));
    }
    // Bracketed IPv6, optionally with a port.
    if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| invalid(raw, "unclosed '[' in IPv6 literal"))?;
        let ip: Ipv6Addr = inside
            .parse()
            .map_err(|_| invalid(raw, "not a valid IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(parse_port(raw, p)?),
                None => return Err(invalid(raw, "unexpected text after ']'")),
            },
        };
        return Ok(Entry {
            host: HostPattern::Ip(IpAddr::V6(ip)),
            port,
        });
    }
    // A bare IPv6 literal (several colons), no port possible.
    if let Ok(ip) = entry.parse::<Ipv6Addr>() {
        return Ok(Entry {
            host: HostPattern::Ip(IpAddr::V6(ip)),
            port: None,
        });
    }
    let (host, port) = match entry.rsplit_once(':') {
        Some((h, p)) => {
            if h.contains(':') {
                return Err(invalid(raw, "write IPv6 literals in brackets: [::1]:443"));
            }
            (h, Some(parse_port(raw, p)?))
        }
        None => (entry, None),
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Entry {
            host: HostPattern::Ip(ip),
            port,
        });
    }
    if host == "*" {
        return Err(invalid(
            raw,
            "'*' would allow every host; use network.mode: unrestricted to say that explicitly",
        ));
    }
    if let Some(suffix) = host.strip_prefix("*.") {
        let suffix = normalise_name(suffix)
            .ok_or_else(|| invalid(raw, "not a valid host name after '*.'"))?;
        return Ok(Entry {
            host: HostPattern::Wildcard(suffix),
            port,
        });
    }
    if host.contains('*') {
        return Err(invalid(raw, "a wildcard is only allowed as a leading '*.'"));
    }
    let name = normalise_name(host).ok_or_else(|| invalid(raw, "not a valid host name"))?;
    Ok(Entry {
        host: HostPattern::Exact(name),
        port,
    })
}

impl Allowlist {
    /// Parse `network.allow_hosts`. An empty list is an error (fail closed).
    pub fn parse(entries: &[String]) -> Result<Allowlist, AllowlistError> {
        if entries.is_empty() {
            return Err(AllowlistError::Empty);
        }
        let entries = entries
            .iter()
            .map(|e| parse_entry(e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Allowlist { entries })
    }

    /// Does the list allow `host` (as written in a request: a name, `1.2.3.4` or `[::1]`)
    /// on `port`? Unparseable hosts are never permitted. The proxy parses the
    /// target once and calls [`Allowlist::permits_target`]; the tests use this.
    #[cfg(test)]
    pub fn permits(&self, host: &str, port: u16) -> bool {
        match TargetHost::parse(host) {
            Some(target) => self.permits_target(&target, port),
            None => false,
        }
    }

    /// Does the list hold the wildcard `*.suffix` (as written, lower-case) for
    /// `port` (any port when `None`: only an entry without a port)?
    pub fn lists_wildcard(&self, wildcard: &str, port: Option<u16>) -> bool {
        let Some(suffix) = wildcard.strip_prefix("*.") else {
            return false;
        };
        let suffix = suffix.strip_suffix('.').unwrap_or(suffix);
        self.entries.iter().any(|e| {
            matches!(&e.host, HostPattern::Wildcard(s) if s == suffix)
                && (e.port.is_none() || e.port == port)
        })
    }

    /// Does the list allow `target`, an already-normalised host, on `port`?
    pub fn permits_target(&self, target: &TargetHost, port: u16) -> bool {
        self.entries.iter().any(|e| {
            e.port.is_none_or(|p| p == port)
                && match (&e.host, target) {
                    (HostPattern::Exact(a), TargetHost::Name(b)) => a == b,
                    (HostPattern::Wildcard(suffix), TargetHost::Name(b)) => b
                        .strip_suffix(suffix.as_str())
                        .and_then(|head| head.strip_suffix('.'))
                        .is_some_and(|head| !head.is_empty()),
                    (HostPattern::Ip(a), TargetHost::Ip(b)) => a == b,
                    _ => false,
                }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        let v: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        Allowlist::parse(&v).expect("valid allowlist")
    }

    fn err(entry: &str) -> AllowlistError {
        Allowlist::parse(&[entry.to_string()]).expect_err("should be rejected")
    }

    #[test]
    fn empty_list_is_an_error() {
        assert_eq!(Allowlist::parse(&[]), Err(AllowlistError::Empty));
    }

    #[test]
    fn exact_host_any_port() {
        let a = list(&["api.github.com"]);
        assert!(a.permits("api.github.com", 443));
        assert!(a.permits("api.github.com", 80));
        assert!(!a.permits("github.com", 443));
        assert!(!a.permits("x.api.github.com", 443));
        assert!(!a.permits("api.github.com.evil.com", 443));
        assert!(!a.permits("evilapi.github.com", 443));
    }

    #[test]
    fn case_and_trailing_dot_are_normalised() {
        let a = list(&["API.GitHub.com."]);
        assert!(a.permits("api.github.com", 443));
        assert!(a.permits("Api.Github.Com.", 443));
        assert!(!a.permits("api.github.com..", 443));
        let w = list(&["*.Example.ORG"]);
        assert!(w.permits("WWW.example.org.", 80));
    }

    #[test]
    fn wildcard_matches_subdomains_not_apex() {
        let a = list(&["*.pythonhosted.org"]);
        assert!(a.permits("files.pythonhosted.org", 443));
        assert!(a.permits("a.b.pythonhosted.org", 443));
        assert!(!a.permits("pythonhosted.org", 443));
        assert!(!a.permits("evilpythonhosted.org", 443));
        assert!(!a.permits("pythonhosted.org.evil.com", 443));
        assert!(!a.permits(".pythonhosted.org", 443));
    }

    #[test]
    fn wildcard_never_matches_ip_literals() {
        let a = list(&["*.0.0.1"]);
        assert!(!a.permits("127.0.0.1", 80));
    }

    #[test]
    fn port_restriction() {
        let a = list(&["localhost:8080", "example.com:443", "*.foo.net:80"]);
        assert!(a.permits("localhost", 8080));
        assert!(!a.permits("localhost", 8081));
        assert!(a.permits("example.com", 443));
        assert!(!a.permits("example.com", 80));
        assert!(a.permits("a.foo.net", 80));
        assert!(!a.permits("a.foo.net", 443));
    }

    #[test]
    fn ip_literals_only_when_listed_literally() {
        let a = list(&["127.0.0.1", "[::1]:8443", "10.1.2.3:22"]);
        assert!(a.permits("127.0.0.1", 1));
        assert!(!a.permits("127.0.0.2", 1));
        assert!(!a.permits("localhost", 1));
        assert!(a.permits("[::1]", 8443));
        assert!(a.permits("[0:0:0:0:0:0:0:1]", 8443));
        assert!(!a.permits("[::1]", 443));
        assert!(a.permits("10.1.2.3", 22));
        assert!(!a.permits("10.1.2.3", 23));
        // A name is not an IP literal.
        let n = list(&["localhost"]);
        assert!(!n.permits("127.0.0.1", 80));
        assert!(!n.permits("[::1]", 80));
        // Bare IPv6 without brackets is accepted as an entry.
        let b = list(&["::1"]);
        assert!(b.permits("[::1]", 80));
    }

    #[test]
    fn invalid_entries_are_rejected() {
        for bad in [
            "",
            "  ",
            "*",
            "*:443",
            "foo.*.com",
            "*foo.com",
            "https://example.com",
            "example.com/path",
            "user@example.com",
            "example.com:0",
            "example.com:65536",
            "example.com:http",
            "example.com:",
            "[::1",
            "[::1]x",
            "[not-v6]",
            "exa mple.com",
            "a..b",
            "ex!ample.com",
            "1.2.3.4:5:6",
        ] {
            assert!(
                matches!(err(bad), AllowlistError::Invalid { .. }),
                "{bad:?} should be invalid"
            );
        }
    }

    #[test]
    fn error_names_the_entry() {
        let e = err("https://example.com");
        assert!(e.to_string().contains("https://example.com"), "{e}");
    }

    #[test]
    fn garbage_request_hosts_are_refused() {
        let a = list(&["example.com"]);
        assert!(!a.permits("", 80));
        assert!(!a.permits("exa mple.com", 80));
        assert!(!a.permits("[example.com]", 80));
    }
}

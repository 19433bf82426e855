//! Syntax of `network.allow_hosts` entries (and `--allow-host`).
//!
//! Accepted: `host.name`, `*.domain.tld` (any subdomain, not the apex; the
//! domain needs at least two labels, so `*` and `*.com` are refused), an IPv4
//! literal, an IPv6 literal (`[::1]`, or bare `::1` without a port), each
//! optionally followed by `:PORT` (1-65535). Matching is the proxy's job.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Check one allowlist entry; the error says what is wrong and what to write.
pub fn check_allow_host(entry: &str) -> Result<(), String> {
    if entry.is_empty() {
        return Err("empty host".into());
    }
    if entry.contains("://") || entry.contains('/') {
        return Err(format!(
            "`{entry}` is not a host name: write the host only, e.g. `api.github.com` or `api.github.com:443`"
        ));
    }
    if entry.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("`{entry}` contains whitespace"));
    }
    let (host, port) = split_port(entry)?;
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {}
            _ => return Err(format!("`{entry}`: port must be a number 1-65535")),
        }
    }
    if host.parse::<Ipv4Addr>().is_ok() || host.parse::<Ipv6Addr>().is_ok() {
        return Ok(());
    }
    if host == "*" {
        return Err(
            "a bare `*` would allow every host; unrestricted egress is only ever `network.mode: unrestricted`".into(),
        );
    }
    let (wild, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    if name.contains('*') {
        return Err(format!(
            "`{entry}`: `*` is only allowed as a whole leading label, as in `*.example.com`"
        ));
    }
    check_hostname(name).map_err(|e| format!("`{entry}`: {e}"))?;
    if wild && !name.contains('.') {
        return Err(format!(
            "`{entry}` would allow every host under a top-level domain; name a registered domain, e.g. `*.example.{name}`"
        ));
    }
    Ok(())
}

/// `host:port`, `[v6]:port`, `[v6]`, bare v6, `host`.
pub(crate) fn split_port(entry: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = entry.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err(format!("`{entry}`: missing `]`"));
        };
        if v6.parse::<Ipv6Addr>().is_err() {
            return Err(format!("`{entry}`: not an IPv6 address inside [ ]"));
        }
        return match after {
            "" => Ok((v6, None)),
            _ => match after.strip_prefix(':') {
                Some(p) => Ok((v6, Some(p))),
                None => Err(format!("`{entry}`: expected `:PORT` after `]`")),
            },
        };
    }
    if entry.matches(':').count() > 1 {
        return match entry.parse::<Ipv6Addr>() {
            Ok(_) => Ok((entry, None)),
            Err(_) => Err(format!(
                "`{entry}`: write an IPv6 address with a port as `[addr]:port`"
            )),
        };
    }
    Ok(match entry.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (entry, None),
    })
}

fn check_hostname(name: &str) -> Result<(), String> {
    if name.ends_with('.') {
        return Err("drop the trailing dot".into());
    }
    if name.len() > 253 {
        return Err("host name longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each dot-separated label must be 1-63 characters".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err("host names may only contain letters, digits, `-` and `.`".into());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label may not start or end with `-`".into());
        }
    }
    if name
        .rsplit('.')
        .next()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("not a valid IPv4 address or host name".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts() {
        for ok in [
            "api.github.com",
            "API.GitHub.com:443",
            "*.pythonhosted.org",
            "localhost",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:443",
            "::1",
            "xn--bcher-kva.example",
        ] {
            assert_eq!(check_allow_host(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses() {
        for bad in [
            "",
            "*",
            "*.com",
            "*:443",
            "a.*.com",
            "*example.com",
            "https://api.github.com",
            "api.github.com/path",
            "host:0",
            "host:65536",
            "host:x",
            "host:",
            "under_score.com",
            "-a.com",
            "a..com",
            "a.com.",
            "1.2.3",
            "[::1",
            "[nope]:1",
            "::1:443x",
            "a b.com",
        ] {
            assert!(check_allow_host(bad).is_err(), "{bad}");
        }
        assert!(check_allow_host("*")
            .unwrap_err()
            .contains("mode: unrestricted"));
    }
}

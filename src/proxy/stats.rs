//! Counters for the run's result and audit record: allowed and denied connections,
//! the distinct denied host names (the first [`MAX_DENIED_HOSTS`]), connections
//! refused because `network.max_connections` were open, the most open at once, and
//! connections closed for an unfinished or oversized request head.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// How many distinct denied host names are kept.
pub const MAX_DENIED_HOSTS: usize = 100;

/// Add `item` to `list` once, while it holds fewer than [`MAX_DENIED_HOSTS`].
fn remember(list: &Mutex<Vec<String>>, item: String) {
    // A poisoned lock only means another thread panicked mid-push; the Vec is intact.
    let mut list = list.lock().unwrap_or_else(|p| p.into_inner());
    if list.len() < MAX_DENIED_HOSTS && !list.contains(&item) {
        list.push(item);
    }
}

/// Shared between the proxy's connection tasks and the supervisor.
#[derive(Debug, Default)]
pub struct ProxyStats {
    allowed: AtomicU64,
    denied: AtomicU64,
    denied_hosts: Mutex<Vec<String>>,
    denied_targets: Mutex<Vec<String>>,
    refused_at_capacity: AtomicU64,
    peak_connections: AtomicU64,
    head_timeouts: AtomicU64,
    heads_too_large: AtomicU64,
    egress: Mutex<EgressCounters>,
}

/// Requests and body bytes to one terminated host, shared with the bodies that count.
#[derive(Debug, Default)]
pub struct HostCounters {
    pub requests: AtomicU64,
    /// Shared with the bodies that count them.
    pub bytes_up: Arc<AtomicU64>,
    pub bytes_down: Arc<AtomicU64>,
}

/// What the TLS-terminating egress engine counts (see `egress`).
#[derive(Debug, Default)]
struct EgressCounters {
    /// Credential name → requests it was injected into (one entry per credential).
    credentials: Vec<(String, u64)>,
    /// The first [`MAX_DENIED_HOSTS`] terminated hosts; later ones count under `*`.
    hosts: Vec<(String, Arc<HostCounters>)>,
    refusals: Vec<EgressRefusal>,
    refusals_total: u64,
}

/// Why a request to a terminated host was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// A credential's placeholder in a request not bound to it.
    CredentialMisuse,
    /// A method/path rule, the Host check, an ambiguous path.
    Rule,
    /// `max_requests` / `max_upload_bytes` (429).
    Budget,
}

/// One refused request (the first [`MAX_DENIED_HOSTS`] are kept). Never holds a
/// credential's value: `rule` names a credential by name (`credentials[github]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressRefusal {
    pub kind: RefusalKind,
    pub host: String,
    pub method: String,
    pub path: String,
    pub rule: String,
}

/// Per terminated host, in the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostUsage {
    pub host: String,
    pub requests: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// One credential's use, in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialUse {
    pub name: String,
    pub requests: u64,
}

/// A snapshot, as it goes into the JSON result and the audit record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProxyReport {
    pub allowed: u64,
    pub denied: u64,
    pub denied_hosts: Vec<String>,
    /// The distinct denied `host:port` pairs (`[v6]:port` for an IPv6
    /// literal), the first [`MAX_DENIED_HOSTS`]: what `learn --learn-hosts`
    /// proposes, so that a draft allows the port the run used, not every port.
    pub denied_targets: Vec<String>,
    /// Connections refused (503) because `network.max_connections` were open.
    pub refused_at_capacity: u64,
    /// The most client connections open at once.
    pub peak_connections: u64,
    /// Connections closed because no complete request head came within the deadline.
    pub head_timeouts: u64,
    /// Connections closed because a request head exceeded the size bound.
    pub heads_too_large: u64,
    /// Credentials injected, by name, with the requests each went into.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials_used: Vec<CredentialUse>,
    /// Terminated hosts: requests and body bytes each way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostUsage>,
    /// Requests to terminated hosts refused (the first [`MAX_DENIED_HOSTS`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refusals: Vec<EgressRefusal>,
    /// All such refusals, kept or not.
    #[serde(skip_serializing_if = "is_zero")]
    pub refusals_total: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ProxyStats {
    /// One connection (CONNECT tunnel or forwarded request) passed the policy.
    pub fn record_allowed(&self) {
        self.allowed.fetch_add(1, Ordering::Relaxed);
    }

    /// One connection to `host` on `port` was refused; the host, and the
    /// pair, are remembered once each.
    pub fn record_denied(&self, host: &str, port: u16) {
        self.denied.fetch_add(1, Ordering::Relaxed);
        remember(&self.denied_hosts, host.to_string());
        // An IPv6 literal is shown bracketed already (`TargetHost`'s Display).
        let target = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        remember(&self.denied_targets, target);
    }

    /// A new connection found every slot taken; returns the count before this one.
    pub fn record_refused_at_capacity(&self) -> u64 {
        self.refused_at_capacity.fetch_add(1, Ordering::Relaxed)
    }

    /// `open` client connections are open now.
    pub fn record_open(&self, open: u64) {
        self.peak_connections.fetch_max(open, Ordering::Relaxed);
    }

    /// A connection was closed while its request head was unfinished (timed out) or
    /// too large.
    pub fn record_head_closed(&self, timeout: bool) {
        let c = if timeout {
            &self.head_timeouts
        } else {
            &self.heads_too_large
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A credential was injected into one request.
    pub fn record_credential_use(&self, name: &str) {
        let mut e = self.egress.lock().unwrap_or_else(|p| p.into_inner());
        match e.credentials.iter_mut().find(|(n, _)| n == name) {
            Some((_, c)) => *c += 1,
            None => e.credentials.push((name.to_string(), 1)),
        }
    }

    /// The counters of terminated host `host` (those of `*` past the bound).
    pub fn host_counters(&self, host: &str) -> Arc<HostCounters> {
        let mut e = self.egress.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = e.hosts.iter().find(|(h, _)| h == host) {
            return c.clone();
        }
        let key = if e.hosts.len() < MAX_DENIED_HOSTS {
            host
        } else {
            "*"
        };
        if let Some((_, c)) = e.hosts.iter().find(|(h, _)| h == key) {
            return c.clone();
        }
        let c = Arc::new(HostCounters::default());
        e.hosts.push((key.to_string(), c.clone()));
        c
    }

    /// A request to a terminated host was refused.
    pub fn record_egress_refusal(&self, refusal: EgressRefusal) {
        let mut e = self.egress.lock().unwrap_or_else(|p| p.into_inner());
        e.refusals_total += 1;
        if e.refusals.len() < MAX_DENIED_HOSTS {
            e.refusals.push(refusal);
        }
    }

    pub fn snapshot(&self) -> ProxyReport {
        let hosts = self.denied_hosts.lock().unwrap_or_else(|p| p.into_inner());
        let targets = self
            .denied_targets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let e = self.egress.lock().unwrap_or_else(|p| p.into_inner());
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProxyReport {
            credentials_used: e
                .credentials
                .iter()
                .map(|(name, requests)| CredentialUse {
                    name: name.clone(),
                    requests: *requests,
                })
                .collect(),
            hosts: e
                .hosts
                .iter()
                .map(|(host, c)| HostUsage {
                    host: host.clone(),
                    requests: load(&c.requests),
                    bytes_up: load(&c.bytes_up),
                    bytes_down: load(&c.bytes_down),
                })
                .collect(),
            refusals: e.refusals.clone(),
            refusals_total: e.refusals_total,
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            denied_hosts: hosts.clone(),
            denied_targets: targets.clone(),
            refused_at_capacity: self.refused_at_capacity.load(Ordering::Relaxed),
            peak_connections: self.peak_connections.load(Ordering::Relaxed),
            head_timeouts: self.head_timeouts.load(Ordering::Relaxed),
            heads_too_large: self.heads_too_large.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_distinct_bounded_hosts() {
        let s = ProxyStats::default();
        s.record_allowed();
        s.record_denied("a.com", 443);
        s.record_denied("a.com", 443);
        for i in 0..200 {
            s.record_denied(&format!("h{i}.com"), 443);
        }
        let r = s.snapshot();
        assert_eq!(r.allowed, 1);
        assert_eq!(r.denied, 202);
        assert_eq!(r.denied_hosts.len(), MAX_DENIED_HOSTS);
        assert_eq!(r.denied_hosts[0], "a.com");
        assert_eq!(r.denied_hosts[1], "h0.com");
        assert_eq!(r.denied_targets[0], "a.com:443");
        assert_eq!(r.denied_targets.len(), MAX_DENIED_HOSTS);
        let s = ProxyStats::default();
        s.record_denied("a.com", 443);
        s.record_denied("a.com", 8443);
        s.record_denied("[2001:db8::1]", 443);
        assert_eq!(
            s.snapshot().denied_targets,
            ["a.com:443", "a.com:8443", "[2001:db8::1]:443"]
        );
        assert_eq!(s.snapshot().denied_hosts, ["a.com", "[2001:db8::1]"]);
        let json = serde_json::to_value(&r).expect("serialize");
        assert_eq!(json["allowed"], 1);
        assert_eq!(json["refused_at_capacity"], 0);
    }

    #[test]
    fn capacity_and_head_counters() {
        let s = ProxyStats::default();
        s.record_refused_at_capacity();
        s.record_refused_at_capacity();
        s.record_open(3);
        s.record_open(7);
        s.record_open(2);
        s.record_head_closed(true);
        s.record_head_closed(false);
        s.record_head_closed(false);
        let r = s.snapshot();
        assert_eq!(
            (
                r.refused_at_capacity,
                r.peak_connections,
                r.head_timeouts,
                r.heads_too_large
            ),
            (2, 7, 1, 2)
        );
    }

    #[test]
    fn egress_counters_are_bounded() {
        let s = ProxyStats::default();
        s.record_credential_use("github");
        s.record_credential_use("github");
        s.record_credential_use("npm");
        for i in 0..150 {
            s.host_counters(&format!("h{i}.example"))
                .requests
                .fetch_add(1, Ordering::Relaxed);
            s.record_egress_refusal(EgressRefusal {
                kind: RefusalKind::Rule,
                host: "h.example".into(),
                method: "GET".into(),
                path: "/".into(),
                rule: "network.allow_hosts[0]".into(),
            });
        }
        let r = s.snapshot();
        assert_eq!(r.credentials_used[0].requests, 2);
        assert_eq!(r.credentials_used[1].name, "npm");
        assert_eq!(r.hosts.len(), MAX_DENIED_HOSTS + 1);
        assert_eq!(
            r.hosts.last().map(|h| (h.host.as_str(), h.requests)),
            Some(("*", 50))
        );
        assert_eq!(r.refusals.len(), MAX_DENIED_HOSTS);
        assert_eq!(r.refusals_total, 150);
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["refusals"][0]["kind"], "rule");
        // Nothing egress-related in a report of a run without it.
        let plain = serde_json::to_value(ProxyStats::default().snapshot()).expect("json");
        assert!(plain.get("hosts").is_none() && plain.get("refusals").is_none());
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ProxyStats>();
    }
}

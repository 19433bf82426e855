//! Counters for the run's result and audit record: allowed and denied connections,
//! and the distinct denied host names (the first [`MAX_DENIED_HOSTS`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

/// How many distinct denied host names are kept.
pub const MAX_DENIED_HOSTS: usize = 100;

/// Shared between the proxy's connection tasks and the supervisor.
#[derive(Debug, Default)]
pub struct ProxyStats {
    allowed: AtomicU64,
    denied: AtomicU64,
    denied_hosts: Mutex<Vec<String>>,
}

/// A snapshot, as it goes into the JSON result and the audit record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProxyReport {
    pub allowed: u64,
    pub denied: u64,
    pub denied_hosts: Vec<String>,
}

impl ProxyStats {
    /// One connection (CONNECT tunnel or forwarded request) passed the policy.
    pub fn record_allowed(&self) {
        self.allowed.fetch_add(1, Ordering::Relaxed);
    }

    /// One connection was refused; `host` is remembered once.
    pub fn record_denied(&self, host: &str) {
        self.denied.fetch_add(1, Ordering::Relaxed);
        // A poisoned lock only means another thread panicked mid-push; the Vec is intact.
        let mut hosts = self.denied_hosts.lock().unwrap_or_else(|p| p.into_inner());
        if hosts.len() < MAX_DENIED_HOSTS && !hosts.iter().any(|h| h == host) {
            hosts.push(host.to_string());
        }
    }

    pub fn snapshot(&self) -> ProxyReport {
        let hosts = self.denied_hosts.lock().unwrap_or_else(|p| p.into_inner());
        ProxyReport {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            denied_hosts: hosts.clone(),
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
        s.record_denied("a.com");
        s.record_denied("a.com");
        for i in 0..200 {
            s.record_denied(&format!("h{i}.com"));
        }
        let r = s.snapshot();
        assert_eq!(r.allowed, 1);
        assert_eq!(r.denied, 202);
        assert_eq!(r.denied_hosts.len(), MAX_DENIED_HOSTS);
        assert_eq!(r.denied_hosts[0], "a.com");
        assert_eq!(r.denied_hosts[1], "h0.com");
        let json = serde_json::to_value(&r).expect("serialize");
        assert_eq!(json["allowed"], 1);
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ProxyStats>();
    }
}

//! The TLS-terminating egress engine (issue #38, contract section 8): hosts given as
//! `allow_hosts` maps, or carrying a credential, are not spliced end to end but
//! terminated with a leaf from the run's CA, so that their requests can be checked
//! against method/path rules and budgets, and credentials injected at the proxy (the
//! run only ever holds a placeholder).
//!
//! * [`ca`] — the per-run CA and the leaves it mints (key in this process only);
//! * [`rules`] — path normalisation (ambiguity is refused, never guessed) and globs;
//! * [`inject`] — placeholder detection and substitution, credential injection;
//! * [`scrub`] — the value replaced by its placeholder in responses (streaming);
//! * [`git`] — git smart-HTTP rules: repositories, and a push's refs judged before it goes;
//! * [`gate`] — one request's decision: host, smuggling shapes, rules, budgets, credentials;
//! * [`upstream`] — the verified rustls client side (host bundle + `upstream_ca`);
//! * [`terminate`] — the terminated CONNECT: TLS accept (SNI, ALPN), then HTTP/1.1.

pub mod ca;
pub mod engine;
pub(crate) mod gate;
pub mod git;
pub mod inject;
pub mod rules;
pub mod scrub;
pub(crate) mod terminate;
pub(crate) mod upstream;

#[cfg(test)]
mod tests;

use zeroize::Zeroizing;

pub use ca::RunCa;
pub use engine::{EgressError, Engine};

/// What the supervisor hands the proxy when something is terminated.
pub struct Egress {
    /// One per `allow_hosts` MAP entry.
    pub rules: Vec<HostRule>,
    pub credentials: Vec<BoundCredential>,
    /// `network.upstream_ca`'s contents (PEM), already read.
    pub upstream_extra_ca_pem: Option<Vec<u8>>,
    /// Made per run by [`RunCa::new`].
    pub ca: RunCa,
}

/// One `allow_hosts` map entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    /// Its index in `network.allow_hosts` (refusals name `network.allow_hosts[index]`).
    pub index: usize,
    /// The `host` as written: every form a string entry takes.
    pub host: String,
    /// Allowed methods (upper case, compared case-sensitively); `None`: any.
    pub methods: Option<Vec<String>>,
    /// Allowed path globs (`*` one segment, `**` any number); `None`: any.
    pub paths: Option<Vec<String>>,
    pub max_requests: Option<u64>,
    pub max_upload_bytes: Option<u64>,
    /// `git:` rules: only git smart-HTTP requests pass (see [`git`]).
    pub git: Option<git::GitRule>,
}

/// One credential, its value read on the host at start.
#[derive(Debug)]
pub struct BoundCredential {
    pub name: String,
    pub value: Secret,
    /// What the run sees instead of the value (see [`placeholder`]).
    pub placeholder: String,
    /// Host patterns (the forms `allow_hosts` takes).
    pub hosts: Vec<String>,
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub inject: Inject,
    /// May it be injected into plain `http://` requests?
    pub allow_plaintext: bool,
}

/// Where a bound credential goes in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inject {
    /// `name: format` with `{}` replaced by the value.
    Header { name: String, format: String },
    /// `Authorization: Basic base64(username:value)`.
    Basic { username: String },
    /// `?param=value` (replacing any `param` the client sent).
    Query { param: String },
}

/// A credential value: wiped from memory on drop; never printed (Debug shows
/// `[secret]`; no Display, no Serialize).
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    pub fn new(value: impl Into<Vec<u8>>) -> Secret {
        Secret(Zeroizing::new(value.into()))
    }

    /// The value, for injection and scrubbing only.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[secret]")
    }
}

/// The prefix every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "capsule-phantom-";

/// A fresh placeholder: [`PLACEHOLDER_PREFIX`] + 32 random lower-case hex digits
/// (128 bits from the system's CSPRNG; every character unreserved in URLs).
pub fn placeholder() -> String {
    let mut raw = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut raw)
        .expect("the system random number generator failed");
    let mut s = String::with_capacity(PLACEHOLDER_PREFIX.len() + 32);
    s.push_str(PLACEHOLDER_PREFIX);
    for b in raw {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

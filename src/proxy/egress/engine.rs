//! The engine one run's proxy holds: the [`Egress`] the supervisor gave, with its host
//! patterns parsed, its budgets' counters, the upstream TLS client configuration and
//! the leaves minted so far (one per host, bounded).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::ca::CaError;
use super::Egress;
use crate::proxy::allow_hosts::{Allowlist, AllowlistError, TargetHost};

/// Leaves (and their server configurations) kept per run: past it, a host's leaf is
/// minted for each connection instead of cached (wildcard entries can name many).
const MAX_LEAVES: usize = 256;

/// Where hosts keep their system CA bundle (Debian/Ubuntu/Alpine, Fedora/RHEL,
/// openSUSE, others).
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("{what}: {source}")]
    Host {
        what: String,
        source: AllowlistError,
    },
    #[error("network.upstream_ca holds no PEM certificate that can be used ({0})")]
    UpstreamCa(String),
    #[error(transparent)]
    Ca(#[from] CaError),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Counters of one map entry's budgets.
#[derive(Debug, Default)]
pub struct Budget {
    pub requests: AtomicU64,
    pub upload: Arc<AtomicU64>,
}

/// See the module's comment.
pub struct Engine {
    pub egress: Arc<Egress>,
    rule_hosts: Vec<Allowlist>,
    credential_hosts: Vec<Option<Allowlist>>,
    pub budgets: Vec<Budget>,
    client: Arc<ClientConfig>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Engine {
    /// Parse every host pattern, build the upstream roots. Before fork: a bad
    /// pattern or `upstream_ca` is a start-up error.
    pub fn new(egress: Arc<Egress>) -> Result<Engine, EgressError> {
        let rule_hosts = egress
            .rules
            .iter()
            .map(|r| {
                Allowlist::parse(std::slice::from_ref(&r.host)).map_err(|source| {
                    EgressError::Host {
                        what: format!("network.allow_hosts[{}].host", r.index),
                        source,
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let credential_hosts = egress
            .credentials
            .iter()
            .map(|c| match c.hosts.is_empty() {
                true => Ok(None),
                false => Allowlist::parse(&c.hosts)
                    .map(Some)
                    .map_err(|source| EgressError::Host {
                        what: format!("credentials[{}].hosts", c.name),
                        source,
                    }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let roots = upstream_roots(egress.upstream_extra_ca_pem.as_deref())?;
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        let budgets = egress.rules.iter().map(|_| Budget::default()).collect();
        Ok(Engine {
            egress,
            rule_hosts,
            credential_hosts,
            budgets,
            client: Arc::new(client),
            leaves: Mutex::default(),
        })
    }

    /// Is `target:port` terminated (a map entry or a credential names it)?
    pub fn terminates(&self, target: &TargetHost, port: u16) -> bool {
        !self.matching_rules(target, port).is_empty()
            || (0..self.credential_hosts.len()).any(|i| self.credential_host(i, target, port))
    }

    /// Indices (into `egress.rules`) of the map entries naming `target:port`.
    pub fn matching_rules(&self, target: &TargetHost, port: u16) -> Vec<usize> {
        (0..self.rule_hosts.len())
            .filter(|&i| self.rule_hosts[i].permits_target(target, port))
            .collect()
    }

    /// Does credential `i`'s `hosts` name `target:port`?
    pub fn credential_host(&self, i: usize, target: &TargetHost, port: u16) -> bool {
        self.credential_hosts
            .get(i)
            .and_then(Option::as_ref)
            .is_some_and(|a| a.permits_target(target, port))
    }

    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// The TLS server configuration for a terminated `host`: a leaf from the run's
    /// CA, ALPN `http/1.1` only, and a handshake that fails when the client's SNI
    /// names another host.
    pub fn server_config(&self, host: &TargetHost) -> Result<Arc<ServerConfig>, EgressError> {
        let key = host.to_string();
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = leaves.get(&key) {
            return Ok(c.clone());
        }
        let leaf = self.egress.ca.mint(host)?;
        let certified = CertifiedKey::from_der(leaf.chain, leaf.key, &provider())?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OnlyFor {
                host: host.clone(),
                key: Arc::new(certified),
            }));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if leaves.len() < MAX_LEAVES {
            leaves.insert(key, config.clone());
        }
        Ok(config)
    }
}

/// Answers only a ClientHello whose SNI is absent or names `host`.
#[derive(Debug)]
struct OnlyFor {
    host: TargetHost,
    key: Arc<CertifiedKey>,
}

impl ResolvesServerCert for OnlyFor {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            Some(sni) if TargetHost::parse(sni).as_ref() != Some(&self.host) => {
                tracing::info!(
                    sni,
                    host = %self.host,
                    "proxy refused a TLS handshake: its SNI is not the CONNECT host"
                );
                None
            }
            _ => Some(self.key.clone()),
        }
    }
}

/// The host's system bundle (webpki-roots where it has none) plus `upstream_ca`.
fn upstream_roots(extra: Option<&[u8]>) -> Result<RootCertStore, EgressError> {
    let mut roots = RootCertStore::empty();
    let system = SYSTEM_BUNDLES.iter().find_map(|p| std::fs::read(p).ok());
    match system {
        Some(pem) => {
            let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
            let (added, ignored) = roots.add_parsable_certificates(certs);
            tracing::debug!(
                added,
                ignored,
                "proxy: upstream roots from the system bundle"
            );
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    if let Some(pem) = extra {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<_, _>>()
            .map_err(|e| EgressError::UpstreamCa(e.to_string()))?;
        if certs.is_empty() {
            return Err(EgressError::UpstreamCa("no CERTIFICATE block".into()));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| EgressError::UpstreamCa(e.to_string()))?;
        }
    }
    Ok(roots)
}

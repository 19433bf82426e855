//! The upstream side of a terminated host: TCP through `dial` (so resolution,
//! rebinding and destination rules apply as for any connection), then a verified
//! rustls client (the host's roots plus `network.upstream_ca`, SNI the host, or no
//! SNI and the IP in the certificate for a literal), then HTTP/1.1. Nothing here can
//! turn verification off.

use std::time::Duration;

use hyper::client::conn::http1::SendRequest;
use hyper::Response;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{CertificateError, Error as TlsError};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use super::engine::Engine;
use crate::proxy::allow_hosts::TargetHost;
use crate::proxy::bounds::upstream_http1;
use crate::proxy::dial;
use crate::proxy::refusal::{upstream_tls_failed, ProxyBody};
use crate::proxy::stats::ProxyStats;

/// How long the upstream TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An open upstream connection. Dropping it stops its driver task.
pub struct TlsUpstream {
    pub sender: SendRequest<ProxyBody>,
    driver: JoinHandle<()>,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A short reason for a failed handshake, for the 502 (no internal detail beyond
/// what the certificate check said).
fn reason(e: &std::io::Error) -> String {
    let tls = e.get_ref().and_then(|i| i.downcast_ref::<TlsError>());
    match tls {
        Some(TlsError::InvalidCertificate(c)) => match c {
            CertificateError::UnknownIssuer => "certificate not trusted".into(),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "certificate does not name the host".into()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "certificate expired".into()
            }
            other => format!("certificate refused ({other:?})"),
        },
        Some(other) => format!("TLS error: {other}"),
        None => format!("TLS handshake failed: {}", e.kind()),
    }
}

fn server_name(target: &TargetHost) -> Option<ServerName<'static>> {
    match target {
        TargetHost::Name(n) => ServerName::try_from(n.clone()).ok(),
        TargetHost::Ip(ip) => Some(ServerName::IpAddress((*ip).into())),
    }
}

/// Connect, verify, speak HTTP/1.1 over it.
pub async fn open(
    engine: &Engine,
    target: &TargetHost,
    port: u16,
    stats: &ProxyStats,
) -> Result<TlsUpstream, Response<ProxyBody>> {
    let shown = target.to_string();
    let tcp = dial::connect(target, port, stats)
        .await
        .map_err(|e| e.response(&shown, port))?;
    let Some(name) = server_name(target) else {
        return Err(upstream_tls_failed(
            &shown,
            port,
            "not a valid TLS server name",
        ));
    };
    let connector = TlsConnector::from(engine.client_config());
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let why = reason(&e);
            tracing::info!(host = %shown, port, reason = %why, "proxy: upstream TLS failed");
            return Err(upstream_tls_failed(&shown, port, &why));
        }
        Err(_) => return Err(upstream_tls_failed(&shown, port, "handshake timed out")),
    };
    let (sender, driver) = upstream_http1(TokioIo::new(tls), &shown, port).await?;
    Ok(TlsUpstream { sender, driver })
}

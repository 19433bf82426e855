//! The run's CA: made per run (an ECDSA P-256 key that lives only in this process's
//! memory, never written anywhere), trusted by the run through its CA bundle, and
//! the leaves it signs for each terminated host.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::proxy::allow_hosts::TargetHost;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("making the run's CA: {0}")]
    Generate(rcgen::Error),
    #[error("minting a certificate for {host}: {source}")]
    Leaf { host: String, source: rcgen::Error },
}

/// The per-run CA. Its key is never Debug-printed or serialised.
pub struct RunCa {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
}

impl std::fmt::Debug for RunCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunCa { .. }")
    }
}

/// A leaf for one host: its chain (leaf, CA) and key.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl RunCa {
    /// A fresh CA, named with a random serial so two runs' CAs never look alike.
    pub fn new() -> Result<RunCa, CaError> {
        let key = KeyPair::generate().map_err(CaError::Generate)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "capsule");
        let tag = super::placeholder();
        let tag = tag.trim_start_matches(super::PLACEHOLDER_PREFIX);
        dn.push(DnType::CommonName, format!("capsule run CA {}", &tag[..12]));
        params.distinguished_name = dn;
        // pathlen 0: it signs leaves only.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(CaError::Generate)?;
        Ok(RunCa {
            cert_der: cert.der().clone(),
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate (PEM), for the run's trust bundle.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// The CA certificate (DER).
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// A leaf for `host` (a DNS name or an IP literal, as a subject alternative name).
    pub fn mint(&self, host: &TargetHost) -> Result<Leaf, CaError> {
        let name = match host {
            TargetHost::Name(n) => n.clone(),
            TargetHost::Ip(ip) => ip.to_string(),
        };
        let err = |source| CaError::Leaf {
            host: name.clone(),
            source,
        };
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec![name.clone()]).map_err(err)?;
        if name.parse::<IpAddr>().is_err() {
            params.distinguished_name.push(DnType::CommonName, &name);
        }
        params.is_ca = IsCa::NoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.cert_der.clone()],
            key: key_der,
        })
    }
}

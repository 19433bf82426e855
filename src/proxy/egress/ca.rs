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
        validity(&mut params);
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
    #[cfg(test)]
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
        validity(&mut params);
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

/// From yesterday (clocks differ a little) to 30 days on: a run's certificates
/// need no more, and clients that cap a leaf's lifetime accept them.
fn validity(params: &mut CertificateParams) {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    let (y, m, d) = civil_from_days(days - 1);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_from_days(days + 30);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i32, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let y = (yoe + era * 400 + i64::from(m <= 2)) as i32;
    (y, m, d)
}

#[cfg(test)]
mod validity_tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }
}

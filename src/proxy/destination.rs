//! Classify where a connection would actually go, after resolution.
//!
//! Some destinations are refused whatever `network.allow_hosts` says: link-local
//! (169.254.0.0/16, fe80::/10), cloud metadata services (169.254.169.254,
//! fd00:ec2::254, 100.100.100.200, metadata.google.internal, ...), the unspecified
//! addresses and 0.0.0.0/8 (which Linux routes to the local host), multicast and
//! broadcast. IPv4 addresses embedded in IPv6 (mapped `::ffff:a.b.c.d`, the deprecated
//! compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`) are classified as the IPv4 address
//! they carry. Internal destinations — loopback, private (RFC 1918), carrier-grade NAT
//! (100.64.0.0/10) and unique-local IPv6 (fc00::/7, and the deprecated site-local
//! fec0::/10) — are reached only through an IP literal the allowlist names (or
//! `localhost` for loopback), never through a name: a listed name, or a wildcard over a
//! domain the child controls, could otherwise be pointed at internal services (DNS
//! rebinding; see `decide`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of destination an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestClass {
    /// An ordinary unicast address: allowed when the host is allow-listed.
    Ok,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 (RFC 1918).
    Private,
    /// 100.64.0.0/10 (RFC 6598, carrier-grade NAT); 100.100.100.200 is `Metadata`.
    Cgnat,
    /// fc00::/7 (RFC 4193) and the deprecated site-local fec0::/10; fd00:ec2::254 is
    /// `Metadata`.
    UniqueLocal,
    /// 169.254.0.0/16, fe80::/10 (metadata addresses inside it are `Metadata`).
    LinkLocal,
    /// A cloud instance-metadata endpoint.
    Metadata,
    /// 0.0.0.0/8, :: — "this host" on Linux.
    Unspecified,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
}

impl DestClass {
    /// Refused whatever the allowlist says.
    pub fn always_refused(self) -> bool {
        !matches!(self, DestClass::Ok) && !self.internal()
    }

    /// Reached only through an IP literal the allowlist names (or `localhost` for
    /// loopback), never through a name that resolves to it.
    pub fn internal(self) -> bool {
        matches!(
            self,
            DestClass::Loopback | DestClass::Private | DestClass::Cgnat | DestClass::UniqueLocal
        )
    }

    /// Short words for logs and the 403 body.
    pub fn describe(self) -> &'static str {
        match self {
            DestClass::Ok => "an ordinary address",
            DestClass::Loopback => "a loopback address",
            DestClass::Private => "a private (RFC 1918) address",
            DestClass::Cgnat => "a carrier-grade NAT (100.64.0.0/10) address",
            DestClass::UniqueLocal => "a unique-local (fc00::/7) or site-local IPv6 address",
            DestClass::LinkLocal => "a link-local address",
            DestClass::Metadata => "a cloud metadata address",
            DestClass::Unspecified => "an unspecified address",
            DestClass::Multicast => "a multicast address",
            DestClass::Broadcast => "a broadcast address",
        }
    }
}

/// Well-known metadata endpoints that are not link-local themselves.
const METADATA_V4: &[Ipv4Addr] = &[
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure, OCI, OpenStack, DigitalOcean
    Ipv4Addr::new(169, 254, 170, 2),   // AWS ECS task metadata
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(168, 63, 129, 16),   // Azure WireServer
];
const METADATA_V6: &[Ipv6Addr] = &[
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), // AWS IMDS over IPv6
];

/// Host names of metadata services (compared after normalisation: lower-case, no
/// trailing dot). Refused before any resolution.
const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
    "metadata.packet.net",
];

/// Is this (normalised) host name a known cloud metadata name?
pub fn is_metadata_name(name: &str) -> bool {
    METADATA_NAMES.contains(&name)
}

/// Classify an IP address (IPv4 embedded in IPv6 is classified as the IPv4 it carries).
pub fn classify_ip(ip: IpAddr) -> DestClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(v6),
        },
    }
}

fn classify_v4(ip: Ipv4Addr) -> DestClass {
    let o = ip.octets();
    if METADATA_V4.contains(&ip) {
        DestClass::Metadata
    } else if o[0] == 0 {
        DestClass::Unspecified
    } else if ip.is_loopback() {
        DestClass::Loopback
    } else if ip.is_link_local() {
        DestClass::LinkLocal
    } else if ip.is_private() {
        DestClass::Private
    } else if o[0] == 100 && o[1] & 0xc0 == 64 {
        DestClass::Cgnat
    } else if ip.is_broadcast() {
        DestClass::Broadcast
    } else if ip.is_multicast() {
        DestClass::Multicast
    } else {
        DestClass::Ok
    }
}

fn classify_v6(ip: Ipv6Addr) -> DestClass {
    let seg = ip.segments();
    if METADATA_V6.contains(&ip) {
        DestClass::Metadata
    } else if ip.is_unspecified() {
        DestClass::Unspecified
    } else if ip.is_loopback() {
        DestClass::Loopback
    } else if seg[0] & 0xffc0 == 0xfe80 {
        DestClass::LinkLocal
    } else if seg[0] & 0xff00 == 0xff00 {
        DestClass::Multicast
    } else if seg[0] & 0xfe00 == 0xfc00 || seg[0] & 0xffc0 == 0xfec0 {
        DestClass::UniqueLocal
    } else {
        DestClass::Ok
    }
}

/// The IPv4 address carried by an IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible
/// (`::/96`, excluding `::` and `::1`) or NAT64 (`64:ff9b::/96`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new(
        (s[6] >> 8) as u8,
        (s[6] & 0xff) as u8,
        (s[7] >> 8) as u8,
        (s[7] & 0xff) as u8,
    );
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 || lo > 1 => Some(tail),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> DestClass {
        classify_ip(s.parse().expect("test address"))
    }

    #[test]
    fn ordinary_addresses_are_ok() {
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "2606:4700::1111",
            "fbff:ffff::1",
            "fe00::1",
            "::ffff:93.184.216.34",
        ] {
            assert_eq!(c(a), DestClass::Ok, "{a}");
        }
    }

    #[test]
    fn private_rfc1918_in_every_spelling() {
        for a in [
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.0",
            "172.31.255.255",
            "192.168.0.1",
            "192.168.255.255",
            "::ffff:10.1.2.3",
            "::ffff:c0a8:0101",
            "::10.1.2.3",
            "64:ff9b::172.16.0.1",
        ] {
            assert_eq!(c(a), DestClass::Private, "{a}");
            assert!(c(a).internal() && !c(a).always_refused(), "{a}");
        }
    }

    #[test]
    fn cgnat() {
        for a in [
            "100.64.0.0",
            "100.64.0.1",
            "100.127.255.255",
            "::ffff:100.64.1.1",
            "64:ff9b::100.100.1.1",
        ] {
            assert_eq!(c(a), DestClass::Cgnat, "{a}");
            assert!(c(a).internal() && !c(a).always_refused(), "{a}");
        }
        // The Alibaba metadata address inside the range stays metadata.
        assert_eq!(c("100.100.100.200"), DestClass::Metadata);
    }

    #[test]
    fn unique_local_and_site_local() {
        for a in [
            "fc00::",
            "fc00::1",
            "fd12:3456::1",
            "fdff:ffff::1",
            "fec0::1",
            "feff::1",
        ] {
            assert_eq!(c(a), DestClass::UniqueLocal, "{a}");
            assert!(c(a).internal() && !c(a).always_refused(), "{a}");
        }
        // AWS IMDS over IPv6 inside fd00::/8 stays metadata.
        assert_eq!(c("fd00:ec2::254"), DestClass::Metadata);
    }

    #[test]
    fn loopback() {
        for a in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert_eq!(c(a), DestClass::Loopback, "{a}");
        }
    }

    #[test]
    fn link_local() {
        for a in [
            "169.254.0.1",
            "169.254.1.1",
            "fe80::1",
            "febf::1",
            "::ffff:169.254.3.4",
            "64:ff9b::169.254.3.4",
        ] {
            assert_eq!(c(a), DestClass::LinkLocal, "{a}");
        }
    }

    #[test]
    fn metadata_addresses_in_every_spelling() {
        for a in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "168.63.129.16",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "::ffff:a9fe:a9fe",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert_eq!(c(a), DestClass::Metadata, "{a}");
            assert!(c(a).always_refused());
        }
    }

    #[test]
    fn unspecified_and_this_network() {
        for a in [
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "::ffff:0.0.0.0",
            "::ffff:0.0.0.1",
        ] {
            assert_eq!(c(a), DestClass::Unspecified, "{a}");
        }
    }

    #[test]
    fn multicast_and_broadcast() {
        assert_eq!(c("224.0.0.1"), DestClass::Multicast);
        assert_eq!(c("ff02::1"), DestClass::Multicast);
        assert_eq!(c("255.255.255.255"), DestClass::Broadcast);
        assert_eq!(c("::ffff:255.255.255.255"), DestClass::Broadcast);
    }

    #[test]
    fn only_ok_and_internal_classes_are_not_always_refused() {
        assert!(!DestClass::Ok.always_refused());
        assert!(!DestClass::Ok.internal());
        for k in [
            DestClass::Loopback,
            DestClass::Private,
            DestClass::Cgnat,
            DestClass::UniqueLocal,
        ] {
            assert!(!k.always_refused() && k.internal(), "{k:?}");
        }
        for k in [
            DestClass::LinkLocal,
            DestClass::Metadata,
            DestClass::Unspecified,
            DestClass::Multicast,
            DestClass::Broadcast,
        ] {
            assert!(k.always_refused() && !k.internal(), "{k:?}");
        }
    }

    #[test]
    fn metadata_names() {
        assert!(is_metadata_name("metadata.google.internal"));
        assert!(is_metadata_name("metadata"));
        assert!(!is_metadata_name("metadata.example.com"));
    }
}

//! Classify where a connection would actually go, after resolution.
//!
//! Some destinations are refused whatever `network.allow_hosts` says: link-local
//! (169.254.0.0/16, fe80::/10), cloud metadata services (169.254.169.254,
//! fd00:ec2::254, 100.100.100.200, metadata.google.internal, ...), the unspecified
//! addresses and 0.0.0.0/8 (which Linux routes to the local host), multicast and
//! broadcast. IPv4 addresses embedded in IPv6 (mapped `::ffff:a.b.c.d`, the deprecated
//! compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`) are classified as the IPv4 address
//! they carry. Loopback is its own class: allowed only for an explicit `localhost` or
//! loopback literal (see `decide`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What kind of destination an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestClass {
    /// An ordinary unicast address: allowed when the host is allow-listed.
    Ok,
    /// 127.0.0.0/8, ::1.
    Loopback,
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
    /// Refused whatever the allowlist says (loopback has its own rule).
    pub fn always_refused(self) -> bool {
        !matches!(self, DestClass::Ok | DestClass::Loopback)
    }

    /// Short words for logs and the 403 body.
    pub fn describe(self) -> &'static str {
        match self {
            DestClass::Ok => "an ordinary address",
            DestClass::Loopback => "a loopback address",
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
            "10.0.0.1",
            "192.168.1.1",
            "2606:4700::1111",
            "fd12::1",
        ] {
            assert_eq!(c(a), DestClass::Ok, "{a}");
        }
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
        assert_eq!(c("fec0::1"), DestClass::Ok);
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
    fn only_ok_and_loopback_are_not_always_refused() {
        assert!(!DestClass::Ok.always_refused());
        assert!(!DestClass::Loopback.always_refused());
        assert!(DestClass::LinkLocal.always_refused());
        assert!(DestClass::Unspecified.always_refused());
    }

    #[test]
    fn metadata_names() {
        assert!(is_metadata_name("metadata.google.internal"));
        assert!(is_metadata_name("metadata"));
        assert!(!is_metadata_name("metadata.example.com"));
    }
}

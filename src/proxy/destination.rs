//! Classify where a connection would actually go, after resolution.
//!
//! Some destinations are refused whatever `network.allow_hosts` says: link-local
//! (169.254.0.0/16, fe80::/10), cloud metadata services (169.254.169.254,
//! fd00:ec2::254, 100.100.100.200, metadata.google.internal, ...), the unspecified
//! addresses and 0.0.0.0/8 (which Linux routes to the local host), multicast and
//! broadcast. IPv4 addresses embedded in IPv6 are classified as the IPv4 address they
//! carry: mapped `::ffff:a.b.c.d`, the deprecated compatible `::a.b.c.d`, NAT64's
//! well-known `64:ff9b::/96`, NAT64's local-use `64:ff9b:1::/48` (where the operator
//! chooses where the IPv4 address sits: every RFC 6052 position that fits is read,
//! and the strictest class wins) and 6to4 `2002::/16`. Internal destinations —
//! loopback, private (RFC 1918), carrier-grade NAT (100.64.0.0/10), unique-local IPv6
//! (fc00::/7, and the deprecated site-local fec0::/10) and any other address this
//! host owns ([`DestClass::ThisHost`], asked of the kernel at decision time, see
//! [`classify_for_connect`]) — are reached only through an IP literal the allowlist
//! names (or `localhost` for loopback), never through a name: a listed name, or a
//! wildcard over a domain the child controls, could otherwise be pointed at internal
//! services (DNS rebinding; see `decide`).

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
    /// An otherwise ordinary address this host owns (a public IPv4 or global IPv6
    /// address of one of its interfaces, or a prefix routed to `lo`): Linux delivers
    /// a connection to it through loopback, to whatever listens on `0.0.0.0`/`::`.
    /// Never returned by [`classify_ip`], only by [`classify_for_connect`].
    ThisHost,
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
            DestClass::Loopback
                | DestClass::Private
                | DestClass::Cgnat
                | DestClass::UniqueLocal
                | DestClass::ThisHost
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
            DestClass::ThisHost => "an address of this host (delivered through loopback)",
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
/// Pure: whether the host owns the address is [`classify_for_connect`]'s question.
pub fn classify_ip(ip: IpAddr) -> DestClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => {
            let carried = embedded_v4(v6);
            if carried.is_empty() {
                classify_v6(v6)
            } else {
                strictest(carried.iter().map(|v4| classify_v4(*v4)))
            }
        }
    }
}

/// The class of a destination the proxy is about to connect to: [`classify_ip`], and
/// an otherwise ordinary address for which `owned` (the kernel's routing table at
/// decision time, see `crate::sys::route`) says this host would deliver it to itself
/// — the address, or an IPv4 address it carries — is [`DestClass::ThisHost`].
pub fn classify_for_connect(ip: IpAddr, owned: &dyn Fn(IpAddr) -> bool) -> DestClass {
    let class = classify_ip(ip);
    if class != DestClass::Ok {
        return class;
    }
    let carried = match ip {
        IpAddr::V6(v6) => embedded_v4(v6),
        IpAddr::V4(_) => Vec::new(),
    };
    if owned(ip) || carried.into_iter().any(|v4| owned(IpAddr::V4(v4))) {
        DestClass::ThisHost
    } else {
        DestClass::Ok
    }
}

/// The most restrictive of several classes: refused whatever the list says, then
/// internal, then ordinary (the first of equals).
fn strictest(classes: impl Iterator<Item = DestClass>) -> DestClass {
    let rank = |c: DestClass| {
        if c.always_refused() {
            2
        } else if c.internal() {
            1
        } else {
            0
        }
    };
    classes.fold(
        DestClass::Ok,
        |worst, c| {
            if rank(c) > rank(worst) {
                c
            } else {
                worst
            }
        },
    )
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

/// The IPv4 addresses an IPv6 address may carry (empty: none):
/// * IPv4-mapped `::ffff:0:0/96`, IPv4-compatible `::/96` (excluding `::` and `::1`)
///   and NAT64's well-known prefix `64:ff9b::/96` (RFC 6052): the last 32 bits;
/// * NAT64's local-use prefix `64:ff9b:1::/48` (RFC 8215): the operator picks a
///   prefix of 48, 56, 64 or 96 bits inside it, which puts the IPv4 address at a
///   different place (RFC 6052 section 2.2, skipping bits 64..71): every reading
///   outside 0.0.0.0/8 (or the /96 one when all fall in it);
/// * 6to4 `2002::/16` (RFC 3056): bits 16..47.
fn embedded_v4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let v4 = |a: usize, b: usize, c: usize, d: usize| Ipv4Addr::new(o[a], o[b], o[c], o[d]);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => {
            vec![v4(12, 13, 14, 15)]
        }
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 || lo > 1 => vec![v4(12, 13, 14, 15)],
        [0x64, 0xff9b, 1, ..] => {
            let readings = [
                v4(6, 7, 9, 10),
                v4(7, 9, 10, 11),
                v4(9, 10, 11, 12),
                v4(12, 13, 14, 15),
            ];
            // Bits a format does not use are zero, so most readings of a real
            // address fall in 0.0.0.0/8: such a reading says nothing, unless all do.
            let told: Vec<Ipv4Addr> = readings
                .iter()
                .copied()
                .filter(|a| a.octets()[0] != 0)
                .collect();
            if told.is_empty() {
                vec![readings[3]]
            } else {
                told
            }
        }
        [0x2002, ..] => vec![v4(2, 3, 4, 5)],
        _ => Vec::new(),
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
            DestClass::ThisHost,
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

    /// 6to4 (2002:AABB:CCDD::/48) carries the IPv4 address AA.BB.CC.DD.
    #[test]
    fn six_to_four_is_the_ipv4_it_carries() {
        assert_eq!(c("2002:0a00:0001::1"), DestClass::Private);
        assert_eq!(c("2002:7f00:0001::"), DestClass::Loopback);
        assert_eq!(c("2002:a9fe:a9fe::1"), DestClass::Metadata);
        assert_eq!(c("2002:6440:0101:1::9"), DestClass::Cgnat);
        assert_eq!(c("2002:0000:0000::1"), DestClass::Unspecified);
        assert_eq!(c("2002:e000:0001::1"), DestClass::Multicast);
        assert_eq!(c("2002:5db8:d822::1"), DestClass::Ok); // 93.184.216.34
    }

    /// NAT64's local-use prefix: the IPv4 address sits where the operator's prefix
    /// length puts it (48, 56, 64 or 96 bits); each reading counts, the strictest wins.
    #[test]
    fn nat64_local_use_prefix_in_every_position() {
        // /96: the last 32 bits.
        assert_eq!(c("64:ff9b:1::10.1.2.3"), DestClass::Private);
        assert_eq!(c("64:ff9b:1::127.0.0.1"), DestClass::Loopback);
        assert_eq!(c("64:ff9b:1::169.254.169.254"), DestClass::Metadata);
        // /64: octets 9..12 (octet 8 is the reserved `u` octet).
        assert_eq!(c("64:ff9b:1:0:000a:0102:0300::"), DestClass::Private);
        // /56: octets 7, 9, 10, 11.
        assert_eq!(c("64:ff9b:1:000a:0001:0203::"), DestClass::Private);
        // /48: octets 6, 7, 9, 10.
        assert_eq!(c("64:ff9b:1:a9fe:00a9:fe00::"), DestClass::Metadata);
        // A refused reading beats an internal one, which beats an ordinary one.
        assert_eq!(c("64:ff9b:1::5db8:d822"), DestClass::Ok); // 93.184.216.34 at /96
        assert_eq!(c("64:ff9b:1:a9fe:a9:fe00:a00:1"), DestClass::Metadata);
        // Outside the /48: not NAT64.
        assert_eq!(c("64:ff9b:2::10.1.2.3"), DestClass::Ok);
    }

    /// The host's own (otherwise ordinary) addresses, in every spelling that
    /// carries them, are `ThisHost`; internal and refused classes keep theirs.
    #[test]
    fn addresses_this_host_owns() {
        let owned: &dyn Fn(IpAddr) -> bool = &|ip| {
            ["203.0.113.5", "2001:db8::5", "127.0.0.1", "10.0.0.5"]
                .iter()
                .any(|a| a.parse::<IpAddr>().unwrap() == ip)
        };
        let k = |s: &str| classify_for_connect(s.parse().unwrap(), owned);
        for a in [
            "203.0.113.5",
            "2001:db8::5",
            "::ffff:203.0.113.5",
            "::203.0.113.5",
            "64:ff9b::203.0.113.5",
            "64:ff9b:1::203.0.113.5",
            "2002:cb00:7105::1",
        ] {
            assert_eq!(k(a), DestClass::ThisHost, "{a}");
            assert!(k(a).internal() && !k(a).always_refused(), "{a}");
        }
        assert_eq!(k("127.0.0.1"), DestClass::Loopback);
        assert_eq!(k("10.0.0.5"), DestClass::Private);
        assert_eq!(k("203.0.113.6"), DestClass::Ok);
        assert_eq!(k("2001:db8::6"), DestClass::Ok);
        assert_eq!(k("169.254.169.254"), DestClass::Metadata);
    }

    #[test]
    fn metadata_names() {
        assert!(is_metadata_name("metadata.google.internal"));
        assert!(is_metadata_name("metadata"));
        assert!(!is_metadata_name("metadata.example.com"));
    }
}

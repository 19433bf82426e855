//! The policy decision, in two steps around name resolution, kept free of I/O so it
//! can be unit-tested with made-up resolved addresses:
//!
//! 1. [`check_target`]: the host as the request named it — metadata names and
//!    forbidden IP literals are refused whatever the list says, then the allowlist.
//! 2. [`filter_resolved`]: the addresses the proxy resolved — always-refused classes
//!    are dropped; internal ones (loopback, private, CGNAT, unique-local, and any
//!    other address this host owns, which the caller says through `owned`) are kept
//!    only when the target is the IP literal itself (which step 1 let through only if
//!    the list names it literally) or, for loopback, `localhost`. A name that resolves
//!    to an internal address is refused: DNS rebinding. Nothing survives → refused.

use std::net::{IpAddr, SocketAddr};

use super::allow_hosts::{Allowlist, TargetHost};
use super::destination::{classify_for_connect, classify_ip, is_metadata_name, DestClass};
use super::refusal::Refusal;

/// The longest host name we keep in a refusal (DNS names are at most 253 bytes).
const MAX_HOST_CHARS: usize = 255;

fn shown(host: &str) -> String {
    host.chars()
        .filter(|c| !c.is_control())
        .take(MAX_HOST_CHARS)
        .collect::<String>()
        .to_ascii_lowercase()
}

/// Step 1: may a request to `host:port` (as written in the request) go ahead?
pub fn check_target(allow: &Allowlist, host: &str, port: u16) -> Result<TargetHost, Refusal> {
    let Some(target) = TargetHost::parse(host) else {
        return Err(Refusal::NotListed {
            host: shown(host),
            port,
        });
    };
    match &target {
        TargetHost::Name(name) if is_metadata_name(name) => {
            return Err(Refusal::MetadataName { host: name.clone() });
        }
        TargetHost::Ip(ip) => {
            let class = classify_ip(*ip);
            if class.always_refused() {
                return Err(Refusal::Forbidden {
                    host: target.to_string(),
                    class,
                });
            }
        }
        TargetHost::Name(_) => {}
    }
    if !allow.permits_target(&target, port) {
        return Err(Refusal::NotListed {
            host: target.to_string(),
            port,
        });
    }
    Ok(target)
}

/// Step 2: of the addresses `target` resolved to, which may the proxy connect to?
/// `owned` tells whether this host owns an (otherwise ordinary) address: the
/// kernel's routing table at decision time in the proxy, made-up sets in tests.
/// An empty input gives an empty output (a resolution failure, not a refusal).
pub fn filter_resolved(
    target: &TargetHost,
    owned: &dyn Fn(IpAddr) -> bool,
    addrs: &[SocketAddr],
) -> Result<Vec<SocketAddr>, Refusal> {
    let literal = matches!(target, TargetHost::Ip(_));
    let loopback_ok = target.is_explicit_loopback();
    let mut first_refusal = None;
    let mut kept = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let class = classify_for_connect(addr.ip(), owned);
        let refusal = if class.always_refused() {
            Some(Refusal::Forbidden {
                host: target.to_string(),
                class,
            })
        } else if class == DestClass::Loopback && !loopback_ok {
            Some(Refusal::LoopbackNotExplicit {
                host: target.to_string(),
            })
        } else if class.internal() && class != DestClass::Loopback && !literal {
            Some(Refusal::InternalAddress {
                host: target.to_string(),
                class,
            })
        } else {
            None
        };
        match refusal {
            Some(r) => {
                first_refusal.get_or_insert(r);
            }
            None => kept.push(*addr),
        }
    }
    match (kept.is_empty(), first_refusal) {
        (true, Some(r)) => Err(r),
        _ => Ok(kept),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        let v: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        Allowlist::parse(&v).expect("valid allowlist")
    }

    /// A host that owns no ordinary address.
    const NONE: &dyn Fn(IpAddr) -> bool = &|_| false;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("test socket address")
    }

    #[test]
    fn listed_host_with_ordinary_address_is_allowed() {
        let a = list(&["api.example.com"]);
        let t = check_target(&a, "API.example.com.", 443).expect("allowed");
        let kept = filter_resolved(&t, NONE, &[sa("93.184.216.34:443")]).expect("allowed");
        assert_eq!(kept, vec![sa("93.184.216.34:443")]);
    }

    #[test]
    fn unlisted_host_is_refused_naming_host_and_key() {
        let a = list(&["api.example.com"]);
        let r = check_target(&a, "evil.example.com", 443).expect_err("refused");
        assert_eq!(r.host(), "evil.example.com");
        let msg = r.to_string();
        assert!(
            msg.contains("evil.example.com") && msg.contains("network.allow_hosts"),
            "{msg}"
        );
    }

    #[test]
    fn wildcard_decisions() {
        let a = list(&["*.example.com"]);
        assert!(check_target(&a, "a.example.com", 443).is_ok());
        assert!(check_target(&a, "a.b.example.com", 80).is_ok());
        assert!(check_target(&a, "example.com", 443).is_err());
        assert!(check_target(&a, "aexample.com", 443).is_err());
    }

    #[test]
    fn listed_host_resolving_to_link_local_or_metadata_is_refused() {
        let a = list(&["sneaky.example.com"]);
        let t = check_target(&a, "sneaky.example.com", 80).expect("listed");
        for bad in [
            "169.254.169.254:80",
            "169.254.10.10:80",
            "[fe80::1]:80",
            "[fd00:ec2::254]:80",
            "[::ffff:169.254.169.254]:80",
            "0.0.0.0:80",
            "[::]:80",
        ] {
            let r = filter_resolved(&t, NONE, &[sa(bad)]).expect_err(bad);
            assert!(matches!(r, Refusal::Forbidden { .. }), "{bad}: {r:?}");
        }
    }

    #[test]
    fn forbidden_addresses_are_dropped_from_a_mixed_answer() {
        let a = list(&["mixed.example.com"]);
        let t = check_target(&a, "mixed.example.com", 80).expect("listed");
        let kept = filter_resolved(
            &t,
            NONE,
            &[sa("169.254.169.254:80"), sa("93.184.216.34:80")],
        )
        .expect("one good address");
        assert_eq!(kept, vec![sa("93.184.216.34:80")]);
    }

    #[test]
    fn literal_metadata_or_link_local_in_the_list_is_still_refused() {
        let a = list(&[
            "169.254.169.254",
            "[fe80::1]",
            "[fd00:ec2::254]",
            "0.0.0.0",
            "metadata.google.internal",
        ]);
        for host in [
            "169.254.169.254",
            "[fe80::1]",
            "[fd00:ec2::254]",
            "0.0.0.0",
            "[::ffff:169.254.169.254]",
        ] {
            assert!(
                matches!(check_target(&a, host, 80), Err(Refusal::Forbidden { .. })),
                "{host}"
            );
        }
        assert!(matches!(
            check_target(&a, "Metadata.Google.Internal.", 80),
            Err(Refusal::MetadataName { .. })
        ));
    }

    #[test]
    fn loopback_only_for_explicit_localhost_or_literal() {
        // A listed ordinary name that resolves to loopback: refused.
        let a = list(&["rebind.example.com", "localhost"]);
        let t = check_target(&a, "rebind.example.com", 80).expect("listed");
        assert!(matches!(
            filter_resolved(&t, NONE, &[sa("127.0.0.1:80")]),
            Err(Refusal::LoopbackNotExplicit { .. })
        ));
        // localhost listed: allowed to loopback.
        let t = check_target(&a, "localhost", 80).expect("listed");
        assert!(filter_resolved(&t, NONE, &[sa("127.0.0.1:80"), sa("[::1]:80")]).is_ok());
        // A loopback literal listed literally.
        let b = list(&["127.0.0.1:8080", "[::1]"]);
        let t = check_target(&b, "127.0.0.1", 8080).expect("listed");
        assert!(filter_resolved(&t, NONE, &[sa("127.0.0.1:8080")]).is_ok());
        let t = check_target(&b, "[::1]", 9).expect("listed");
        assert!(filter_resolved(&t, NONE, &[sa("[::1]:9")]).is_ok());
        // Not listed: refused before resolution.
        assert!(check_target(&b, "localhost", 8080).is_err());
        assert!(check_target(&b, "127.0.0.2", 8080).is_err());
        // A wildcard cannot reach loopback.
        let w = list(&["*.localhost", "*.example.com"]);
        assert!(check_target(&w, "localhost", 80).is_err());
        let t = check_target(&w, "x.localhost", 80).expect("wildcard match");
        assert!(filter_resolved(&t, NONE, &[sa("127.0.0.1:80")]).is_err());
    }

    /// Every internal class, reached through a listed name (exact or wildcard) in
    /// every spelling a resolver may return: refused, naming the host and the class.
    #[test]
    fn names_resolving_to_internal_addresses_are_refused_dns_rebinding() {
        let a = list(&["api.example.com", "*.attacker.example"]);
        let cases: &[(&str, DestClass)] = &[
            ("127.0.0.1:443", DestClass::Loopback),
            ("127.9.9.9:443", DestClass::Loopback),
            ("[::1]:443", DestClass::Loopback),
            ("[::ffff:127.0.0.1]:443", DestClass::Loopback),
            ("10.0.0.5:443", DestClass::Private),
            ("172.16.1.1:443", DestClass::Private),
            ("172.31.255.254:443", DestClass::Private),
            ("192.168.1.10:443", DestClass::Private),
            ("[::ffff:10.0.0.5]:443", DestClass::Private),
            ("[::ffff:c0a8:010a]:443", DestClass::Private),
            ("[64:ff9b::192.168.1.10]:443", DestClass::Private),
            ("100.64.0.1:443", DestClass::Cgnat),
            ("100.127.255.254:443", DestClass::Cgnat),
            ("[::ffff:100.64.0.1]:443", DestClass::Cgnat),
            ("[fc00::1]:443", DestClass::UniqueLocal),
            ("[fd12:3456:789a::1]:443", DestClass::UniqueLocal),
            ("[fec0::1]:443", DestClass::UniqueLocal),
            ("169.254.1.1:443", DestClass::LinkLocal),
            ("[fe80::1]:443", DestClass::LinkLocal),
            ("[::ffff:169.254.1.1]:443", DestClass::LinkLocal),
            ("169.254.169.254:443", DestClass::Metadata),
            ("224.0.0.1:443", DestClass::Multicast),
            ("239.255.255.250:443", DestClass::Multicast),
            ("[ff02::1]:443", DestClass::Multicast),
            ("[::ffff:224.0.0.1]:443", DestClass::Multicast),
            ("0.0.0.0:443", DestClass::Unspecified),
            ("0.1.2.3:443", DestClass::Unspecified),
            ("[::]:443", DestClass::Unspecified),
            ("[::ffff:0.0.0.0]:443", DestClass::Unspecified),
            ("255.255.255.255:443", DestClass::Broadcast),
        ];
        for host in ["api.example.com", "x.attacker.example"] {
            let t = check_target(&a, host, 443).expect("listed");
            for (addr, class) in cases {
                let r = filter_resolved(&t, NONE, &[sa(addr)]).expect_err(addr);
                assert_eq!(r.host(), host, "{addr}");
                let msg = r.to_string();
                assert!(
                    msg.contains(host) && msg.contains(class.describe()),
                    "{addr}: {msg}"
                );
                assert!(msg.contains("network.allow_hosts"), "{msg}");
                match r {
                    Refusal::Forbidden { class: c, .. }
                    | Refusal::InternalAddress { class: c, .. } => {
                        assert_eq!(c, *class, "{addr}")
                    }
                    Refusal::LoopbackNotExplicit { .. } => {
                        assert_eq!(*class, DestClass::Loopback, "{addr}")
                    }
                    other => panic!("{addr}: {other:?}"),
                }
            }
            // A public address among internal ones: only the public one is used.
            let kept = filter_resolved(
                &t,
                NONE,
                &[
                    sa("10.0.0.5:443"),
                    sa("93.184.216.34:443"),
                    sa("[fd00::1]:443"),
                ],
            )
            .expect("one public address");
            assert_eq!(kept, vec![sa("93.184.216.34:443")]);
        }
    }

    /// An internal address listed literally is reachable by that literal, and only by it.
    #[test]
    fn internal_addresses_only_through_a_listed_literal() {
        let a = list(&["10.0.0.5", "[fd12::7]:8443", "100.64.0.9:80", "192.168.1.1"]);
        for (host, port, addr) in [
            ("10.0.0.5", 443, "10.0.0.5:443"),
            ("[fd12::7]", 8443, "[fd12::7]:8443"),
            ("100.64.0.9", 80, "100.64.0.9:80"),
            ("192.168.1.1", 22, "192.168.1.1:22"),
        ] {
            let t = check_target(&a, host, port).expect(host);
            assert_eq!(
                filter_resolved(&t, NONE, &[sa(addr)]),
                Ok(vec![sa(addr)]),
                "{host}"
            );
        }
        // Another internal literal, or the listed one on another port: not listed.
        assert!(matches!(
            check_target(&a, "10.0.0.6", 443),
            Err(Refusal::NotListed { .. })
        ));
        assert!(check_target(&a, "[fd12::7]", 443).is_err());
        // The same address spelled as a mapped IPv6 literal is a different literal.
        assert!(check_target(&a, "[::ffff:10.0.0.5]", 443).is_err());
        // A listed literal does not let a name reach that address.
        let b = list(&["10.0.0.5", "internal.example.com"]);
        let t = check_target(&b, "internal.example.com", 443).expect("listed");
        assert!(matches!(
            filter_resolved(&t, NONE, &[sa("10.0.0.5:443")]),
            Err(Refusal::InternalAddress {
                class: DestClass::Private,
                ..
            })
        ));
        // A link-local or multicast literal stays refused even when listed.
        let c = list(&["169.254.1.1", "224.0.0.1"]);
        assert!(matches!(
            check_target(&c, "169.254.1.1", 80),
            Err(Refusal::Forbidden { .. })
        ));
        assert!(matches!(
            check_target(&c, "224.0.0.1", 80),
            Err(Refusal::Forbidden { .. })
        ));
    }

    /// An ordinary address this host owns (the address of one of its interfaces,
    /// in any spelling that carries it) is loopback by another name: a name that
    /// resolves to it is refused, naming the class; listed literally, it is reached.
    #[test]
    fn the_hosts_own_addresses_are_reached_only_through_a_listed_literal() {
        let owned: &dyn Fn(IpAddr) -> bool = &|ip| {
            ip == "203.0.113.5".parse::<IpAddr>().unwrap()
                || ip == "2001:db8::5".parse::<IpAddr>().unwrap()
        };
        let a = list(&["*.example.com", "203.0.113.5:8080", "[2001:db8::5]"]);
        let t = check_target(&a, "self.example.com", 443).expect("listed");
        for addr in [
            "203.0.113.5:443",
            "[2001:db8::5]:443",
            "[::ffff:203.0.113.5]:443",
            "[64:ff9b::203.0.113.5]:443",
            "[64:ff9b:1::203.0.113.5]:443",
            "[2002:cb00:7105::1]:443",
        ] {
            let r = filter_resolved(&t, owned, &[sa(addr)]).expect_err(addr);
            assert!(
                matches!(
                    r,
                    Refusal::InternalAddress {
                        class: DestClass::ThisHost,
                        ..
                    }
                ),
                "{addr}: {r:?}"
            );
            let msg = r.to_string();
            assert!(msg.contains("an address of this host"), "{msg}");
            // Without the host owning it, the same address is ordinary.
            assert!(filter_resolved(&t, NONE, &[sa(addr)]).is_ok(), "{addr}");
        }
        // Mixed with an address the host does not own: that one is used.
        let kept = filter_resolved(&t, owned, &[sa("203.0.113.5:443"), sa("203.0.113.6:443")])
            .expect("one foreign address");
        assert_eq!(kept, vec![sa("203.0.113.6:443")]);
        // Listed literally: reached (as a loopback literal would be).
        let t = check_target(&a, "203.0.113.5", 8080).expect("listed");
        assert!(filter_resolved(&t, owned, &[sa("203.0.113.5:8080")]).is_ok());
        let t = check_target(&a, "[2001:db8::5]", 22).expect("listed");
        assert!(filter_resolved(&t, owned, &[sa("[2001:db8::5]:22")]).is_ok());
        // Another spelling of it is another literal: not listed.
        assert!(check_target(&a, "[::ffff:203.0.113.5]", 8080).is_err());
    }

    #[test]
    fn empty_resolution_is_not_a_refusal() {
        let a = list(&["x.example.com"]);
        let t = check_target(&a, "x.example.com", 80).expect("listed");
        assert_eq!(filter_resolved(&t, NONE, &[]), Ok(vec![]));
    }

    #[test]
    fn unparseable_host_is_refused() {
        let a = list(&["example.com"]);
        assert!(matches!(
            check_target(&a, "bad host\u{7}", 80),
            Err(Refusal::NotListed { .. })
        ));
    }
}

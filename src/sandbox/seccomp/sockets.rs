//! Socket creation rules: which `socket(domain, type, protocol)` and
//! `socketpair(domain, type, protocol, sv)` calls are refused with EPERM.
//! Only creation is filtered; `sendto`, `setsockopt`, `bind`, ... stay
//! untouched (filtering those breaks asyncio, Bun, Chromium).
//!
//! `socketpair` makes a connected AF_UNIX pair. A stream or seqpacket pair
//! stays connected to its twin for good (`connect` says EISCONN, `sendto`
//! with an address EISCONN too), but a **datagram** pair can be re-aimed:
//! `sendto(fd, msg, "/dev/log")` reaches any pathname datagram socket of
//! the host (journald, `sd_notify`, any service's), and without a network
//! namespace and Landlock's scope the host's abstract ones, with
//! `SCM_RIGHTS`/`SCM_CREDENTIALS` attached. So without `allow_unix_sockets`,
//! `socketpair` is allowed only for AF_UNIX `SOCK_STREAM` and
//! `SOCK_SEQPACKET` (with SOCK_NONBLOCK/SOCK_CLOEXEC), the pairs
//! multiprocessing, subprocess, asyncio and Chromium make; with it, any
//! AF_UNIX pair (`socket(AF_UNIX, SOCK_DGRAM)` is allowed then anyway).
//!
//! | domain            | none | proxy | unrestricted |
//! |-------------------|------|-------|--------------|
//! | AF_UNIX           | only with `allow_unix_sockets`, in every mode |
//! | AF_NETLINK        | protocol NETLINK_ROUTE only (getaddrinfo, `ip addr`), in every mode |
//! | AF_INET/AF_INET6  | no   | SOCK_STREAM (with SOCK_NONBLOCK/SOCK_CLOEXEC), protocol 0 or IPPROTO_TCP | any type and protocol |
//! | ... with `own_loopback` | SOCK_STREAM (protocol 0/TCP) or SOCK_DGRAM (0/UDP) | the same | (not used) |
//! | anything else     | no (AF_PACKET, AF_VSOCK, AF_ALG, AF_BLUETOOTH, ...), in every mode |
//!
//! **The run's own loopback** ([`SeccompOptions::own_loopback`]): where the
//! run has a network namespace of its own (modes `none` and `proxy`), that
//! namespace holds only its loopback interface (brought up by the run's
//! init; in proxy mode also the proxy's listening socket, which the
//! supervisor accepts on from the host's namespace). An IP socket there can
//! reach nothing but the run itself: no route leaves the namespace, and the
//! host's 127.0.0.1 is another namespace's. So TCP and UDP sockets are
//! allowed (a test server on 127.0.0.1, a Jupyter kernel, a database the
//! tests start), and proxy mode keeps its guarantee: the proxy's endpoint is
//! the only thing in the namespace that leads out. Raw, ICMP, MPTCP and SCTP
//! sockets stay refused (kernel surface no loopback workload needs). Without
//! a network namespace none of this applies: `none` has no IP socket at all.
//!
//! `unrestricted` means the host's IP network, nothing more: raw and packet
//! sockets still need CAP_NET_RAW, which the child does not have; MPTCP and
//! SCTP, which `proxy` refuses because the proxy speaks TCP only, are left to
//! the host's network policy there. AF_UNIX stays behind `allow_unix_sockets`
//! even in `unrestricted` because a pathname Unix socket (docker.sock, an
//! ssh-agent) is a host escape that has nothing to do with IP networking, and
//! AF_VSOCK/AF_PACKET reach the hypervisor or the link layer.

use super::arg_check::ArgCheck;
use super::SeccompOptions;
use crate::policy::NetMode;

// `socket`'s arguments are `int`s: compared as 32 bits.
pub(super) const AF_UNIX: u32 = libc::AF_UNIX as u32;
pub(super) const AF_INET: u32 = libc::AF_INET as u32;
pub(super) const AF_INET6: u32 = libc::AF_INET6 as u32;
pub(super) const AF_NETLINK: u32 = libc::AF_NETLINK as u32;
pub(super) const NETLINK_ROUTE: u32 = libc::NETLINK_ROUTE as u32;
pub(super) const IPPROTO_TCP: u32 = libc::IPPROTO_TCP as u32;
const SOCK_STREAM: u32 = libc::SOCK_STREAM as u32;
const SOCK_DGRAM: u32 = libc::SOCK_DGRAM as u32;
pub(super) const IPPROTO_UDP: u32 = libc::IPPROTO_UDP as u32;
const SOCK_SEQPACKET: u32 = libc::SOCK_SEQPACKET as u32;
const SOCK_NONBLOCK: u32 = libc::SOCK_NONBLOCK as u32;
const SOCK_CLOEXEC: u32 = libc::SOCK_CLOEXEC as u32;

/// `socket`'s arguments.
const DOMAIN: u8 = 0;
const TYPE: u8 = 1;
const PROTOCOL: u8 = 2;

/// The `type` values a proxy-mode IP socket may have: SOCK_STREAM with any of
/// the two flags the kernel accepts there (anything else in the type is EINVAL anyway).
pub(super) fn stream_types() -> Vec<u32> {
    let mut t = with_flags(SOCK_STREAM).to_vec();
    t.sort_unstable();
    t
}

/// The `type` values a datagram IP socket on the run's own loopback may have, sorted.
pub(super) fn dgram_types() -> Vec<u32> {
    let mut t = with_flags(SOCK_DGRAM).to_vec();
    t.sort_unstable();
    t
}

/// `base` with each combination of the two flags the kernel accepts in a
/// socket type (anything else in the type is EINVAL anyway).
fn with_flags(base: u32) -> [u32; 4] {
    [
        base,
        base | SOCK_NONBLOCK,
        base | SOCK_CLOEXEC,
        base | SOCK_NONBLOCK | SOCK_CLOEXEC,
    ]
}

/// The `type` values a `socketpair` may have without `allow_unix_sockets`,
/// sorted: stream and seqpacket pairs.
pub(super) fn pair_types() -> Vec<u32> {
    let mut t: Vec<u32> = with_flags(SOCK_STREAM)
        .into_iter()
        .chain(with_flags(SOCK_SEQPACKET))
        .collect();
    t.sort_unstable();
    t
}

/// The check on `socketpair(domain, type, protocol, sv)`: AF_UNIX only;
/// without `allow_unix_sockets` only stream and seqpacket pairs (see above).
pub(super) fn pair_check(opts: &SeccompOptions) -> ArgCheck {
    use ArgCheck::{Deny, Pass};
    let types = if opts.allow_unix_sockets {
        Pass
    } else {
        ArgCheck::one_of(TYPE, &pair_types(), Pass, Deny)
    };
    ArgCheck::one_of(DOMAIN, &[AF_UNIX], types, Deny)
}

/// The check on `socket(domain, type, protocol)`: the table above.
pub(super) fn check(opts: &SeccompOptions) -> ArgCheck {
    use ArgCheck::{Deny, Pass};
    let netlink = ArgCheck::one_of(PROTOCOL, &[NETLINK_ROUTE], Pass, Deny);
    let tcp_only = ArgCheck::one_of(
        TYPE,
        &stream_types(),
        ArgCheck::one_of(PROTOCOL, &[0, IPPROTO_TCP], Pass, Deny),
        Deny,
    );
    // The run's own loopback: TCP and UDP, nothing else.
    let loopback = ArgCheck::Match {
        arg: TYPE,
        arms: vec![
            (
                stream_types(),
                ArgCheck::one_of(PROTOCOL, &[0, IPPROTO_TCP], Pass, Deny),
            ),
            (
                dgram_types(),
                ArgCheck::one_of(PROTOCOL, &[0, IPPROTO_UDP], Pass, Deny),
            ),
        ],
        otherwise: Box::new(Deny),
    };
    let mut arms = vec![(vec![AF_NETLINK], netlink)];
    if opts.allow_unix_sockets {
        arms.push((vec![AF_UNIX], Pass));
    }
    match opts.net {
        NetMode::None | NetMode::Proxy if opts.own_loopback => {
            arms.push((vec![AF_INET, AF_INET6], loopback))
        }
        NetMode::None => {}
        NetMode::Proxy => arms.push((vec![AF_INET, AF_INET6], tcp_only)),
        NetMode::Unrestricted => arms.push((vec![AF_INET, AF_INET6], Pass)),
    }
    ArgCheck::Match {
        arg: DOMAIN,
        arms,
        otherwise: Box::new(Deny),
    }
}

/// One line of the tests' summary of the program.
#[cfg(test)]
pub(super) fn describe(opts: &SeccompOptions) -> String {
    let ip = match opts.net {
        NetMode::None | NetMode::Proxy if opts.own_loopback => {
            "AF_INET/AF_INET6 only TCP and UDP (the run's own network namespace: its loopback, \
             and in proxy mode the proxy's endpoint)"
        }
        NetMode::None => "AF_INET/AF_INET6 refused",
        NetMode::Proxy => "AF_INET/AF_INET6 only SOCK_STREAM with protocol 0 or TCP",
        NetMode::Unrestricted => "AF_INET/AF_INET6 allowed",
    };
    let unix = if opts.allow_unix_sockets {
        "AF_UNIX allowed"
    } else {
        "AF_UNIX refused (network.allow_unix_sockets: false)"
    };
    let pairs = if opts.allow_unix_sockets {
        "any type"
    } else {
        "stream and seqpacket only (a datagram pair can be re-aimed with sendto)"
    };
    format!(
        "socket(): {ip}; {unix}; AF_NETLINK only NETLINK_ROUTE; every other family refused \
         (AF_PACKET, AF_VSOCK, ...), all with EPERM; socketpair: AF_UNIX {pairs}"
    )
}

//! Socket creation rules: which `socket(domain, type, protocol)` calls are
//! refused with EPERM. Only creation is filtered; `sendto`, `setsockopt`,
//! `bind`, ... stay untouched (filtering those breaks asyncio, Bun, Chromium),
//! and `socketpair` is always allowed (it only makes connected AF_UNIX pairs).
//!
//! | domain            | none | proxy | unrestricted |
//! |-------------------|------|-------|--------------|
//! | AF_UNIX           | only with `allow_unix_sockets`, in every mode |
//! | AF_NETLINK        | protocol NETLINK_ROUTE only (getaddrinfo, `ip addr`), in every mode |
//! | AF_INET/AF_INET6  | no   | SOCK_STREAM (with SOCK_NONBLOCK/SOCK_CLOEXEC), protocol 0 or IPPROTO_TCP | any type and protocol |
//! | anything else     | no (AF_PACKET, AF_VSOCK, AF_ALG, AF_BLUETOOTH, ...), in every mode |
//!
//! `unrestricted` means the host's IP network, nothing more: raw and packet
//! sockets still need CAP_NET_RAW, which the child does not have; MPTCP and
//! SCTP, which `proxy` refuses because the proxy speaks TCP only, are left to
//! the host's network policy there. AF_UNIX stays behind `allow_unix_sockets`
//! even in `unrestricted` because a pathname Unix socket (docker.sock, an
//! ssh-agent) is a host escape that has nothing to do with IP networking, and
//! AF_VSOCK/AF_PACKET reach the hypervisor or the link layer.

use seccompiler::{BackendError, SeccompCmpOp, SeccompRule};

use super::deny::{cond, not_in};
use super::SeccompOptions;
use crate::policy::NetMode;

const AF_UNIX: u64 = libc::AF_UNIX as u64;
const AF_INET: u64 = libc::AF_INET as u64;
const AF_INET6: u64 = libc::AF_INET6 as u64;
const AF_NETLINK: u64 = libc::AF_NETLINK as u64;
const NETLINK_ROUTE: u64 = libc::NETLINK_ROUTE as u64;
const IPPROTO_TCP: u64 = libc::IPPROTO_TCP as u64;
const SOCK_STREAM: u64 = libc::SOCK_STREAM as u64;
const SOCK_NONBLOCK: u64 = libc::SOCK_NONBLOCK as u64;
const SOCK_CLOEXEC: u64 = libc::SOCK_CLOEXEC as u64;

/// The domains `socket` may create, sorted.
pub(super) fn allowed_domains(opts: &SeccompOptions) -> Vec<u64> {
    let mut d = vec![AF_NETLINK];
    if opts.allow_unix_sockets {
        d.push(AF_UNIX);
    }
    if opts.net != NetMode::None {
        d.push(AF_INET);
        d.push(AF_INET6);
    }
    d.sort_unstable();
    d
}

/// The `type` values a proxy-mode IP socket may have: SOCK_STREAM with any of
/// the two flags the kernel accepts there (anything else in the type is EINVAL anyway).
fn stream_types() -> Vec<u64> {
    let mut t = vec![
        SOCK_STREAM,
        SOCK_STREAM | SOCK_NONBLOCK,
        SOCK_STREAM | SOCK_CLOEXEC,
        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
    ];
    t.sort_unstable();
    t
}

/// The rules on `socket`'s arguments that make it fail with EPERM.
pub(super) fn rules(opts: &SeccompOptions) -> Result<Vec<SeccompRule>, BackendError> {
    // arg0 domain, arg1 type, arg2 protocol (all `int`: compared as 32 bits).
    let mut rules = not_in(0, &allowed_domains(opts), &[])?;
    let is = |domain: u64| cond(0, SeccompCmpOp::Eq, domain);
    rules.extend(not_in(2, &[NETLINK_ROUTE], &[is(AF_NETLINK)?])?);
    if opts.net == NetMode::Proxy {
        for domain in [AF_INET, AF_INET6] {
            rules.extend(not_in(1, &stream_types(), &[is(domain)?])?);
            rules.extend(not_in(2, &[0, IPPROTO_TCP], &[is(domain)?])?);
        }
    }
    Ok(rules)
}

/// One line for `--dry-run`.
pub(super) fn describe(opts: &SeccompOptions) -> String {
    let ip = match opts.net {
        NetMode::None => "AF_INET/AF_INET6 refused",
        NetMode::Proxy => "AF_INET/AF_INET6 only SOCK_STREAM with protocol 0 or TCP",
        NetMode::Unrestricted => "AF_INET/AF_INET6 allowed",
    };
    let unix = if opts.allow_unix_sockets {
        "AF_UNIX allowed"
    } else {
        "AF_UNIX refused (network.allow_unix_sockets: false)"
    };
    format!(
        "socket(): {ip}; {unix}; AF_NETLINK only NETLINK_ROUTE; every other family refused \
         (AF_PACKET, AF_VSOCK, ...), all with EPERM; socketpair always allowed"
    )
}

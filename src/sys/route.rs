//! Ask the kernel's routing table where a connection to an address would go
//! (`RTM_GETROUTE`, what `ip route get ADDR` does): the proxy must not connect to
//! an address this host owns, because Linux delivers such a connection through
//! `lo` to whatever listens on `0.0.0.0`/`::` — whichever interface carries the
//! address, and also for whole prefixes routed locally (`ip route add local
//! 198.51.100.0/24 dev lo`, "AnyIP"), which no interface lists.
//!
//! One small request per address on a fresh netlink socket: the kernel answers
//! inside `sendto`, so the reply is read without waiting (the caller is the
//! supervisor's event loop). No privilege is needed.

use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};

use nix::sys::socket::{
    recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

const NLMSG_HDR: usize = 16;
const RTMSG: usize = 12;
const NLMSG_ERROR: u16 = 2;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLM_F_REQUEST: u16 = 1;
const RTA_DST: u16 = 1;
const RTN_LOCAL: u8 = 2;

/// Would the kernel deliver a connection to `ip` to this host itself (a route of
/// type `local`)? `Ok(false)` also when there is no route at all (the connect
/// would fail). `Err` when the kernel could not be asked or gave an answer this
/// does not understand.
pub fn is_local_destination(ip: IpAddr) -> io::Result<bool> {
    static SEQ: AtomicU32 = AtomicU32::new(1);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let sock = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(io::Error::from)?;
    let req = request(ip, seq);
    sendto(
        sock.as_raw_fd(),
        &req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(io::Error::from)?;
    let mut buf = [0u8; 4096];
    // The kernel answered inside sendto: the reply is queued already.
    let n = recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)?;
    parse_reply(&buf[..n], seq)
}

/// nlmsghdr + rtmsg + one RTA_DST attribute, in native byte order.
fn request(ip: IpAddr, seq: u32) -> Vec<u8> {
    let (family, addr): (u8, Vec<u8>) = match ip {
        IpAddr::V4(v4) => (libc::AF_INET as u8, v4.octets().to_vec()),
        IpAddr::V6(v6) => (libc::AF_INET6 as u8, v6.octets().to_vec()),
    };
    let rta_len = 4 + addr.len();
    let total = NLMSG_HDR + RTMSG + rta_len;
    let mut m = Vec::with_capacity(total);
    m.extend_from_slice(&(total as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel fills it in
                                              // rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
    m.extend_from_slice(&[family, (addr.len() * 8) as u8, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&(rta_len as u16).to_ne_bytes());
    m.extend_from_slice(&RTA_DST.to_ne_bytes());
    m.extend_from_slice(&addr);
    m
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("route lookup: {what}"))
}

/// The kernel's answer: a route (local or not), or an error (no route: not local).
fn parse_reply(b: &[u8], seq: u32) -> io::Result<bool> {
    if b.len() < NLMSG_HDR {
        return Err(bad("short reply"));
    }
    let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let len = u32_at(0) as usize;
    if len < NLMSG_HDR || len > b.len() {
        return Err(bad("bad message length"));
    }
    if u32_at(8) != seq {
        return Err(bad("reply to another request"));
    }
    match u16_at(4) {
        RTM_NEWROUTE if len >= NLMSG_HDR + RTMSG => Ok(b[NLMSG_HDR + 7] == RTN_LOCAL),
        NLMSG_ERROR if len >= NLMSG_HDR + 4 => {
            let errno = -(u32_at(NLMSG_HDR) as i32);
            match errno {
                // No route to it: the connect cannot reach anything, local or not.
                // (Anything else, a malformed request included, is an error: the
                // caller then refuses rather than guess.)
                libc::ENETUNREACH | libc::EHOSTUNREACH => Ok(false),
                e => Err(io::Error::from_raw_os_error(e)),
            }
        }
        _ => Err(bad("unexpected reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_local_and_unroutable_is_not() {
        assert!(is_local_destination("127.0.0.1".parse().unwrap()).expect("lookup"));
        assert!(is_local_destination("127.9.9.9".parse().unwrap()).expect("lookup"));
        // A documentation address nobody here owns: a route (default) or none, never local.
        assert!(!is_local_destination("192.0.2.77".parse().unwrap()).expect("lookup"));
        if std::path::Path::new("/proc/net/if_inet6").exists() {
            assert!(is_local_destination("::1".parse().unwrap()).expect("lookup"));
            assert!(!is_local_destination("2001:db8::77".parse().unwrap()).expect("lookup"));
        }
    }

    #[test]
    fn replies_are_checked() {
        assert!(parse_reply(&[0u8; 4], 1).is_err());
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[8..12].copy_from_slice(&7u32.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::ENETUNREACH).to_ne_bytes());
        assert!(!parse_reply(&err, 7).expect("no route"));
        assert!(parse_reply(&err, 8).is_err(), "another request's reply");
        err[16..20].copy_from_slice(&(-libc::ENOBUFS).to_ne_bytes());
        assert!(parse_reply(&err, 7).is_err());
    }
}

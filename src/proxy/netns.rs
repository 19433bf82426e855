//! The proxy endpoint inside the child's own network namespace.
//!
//! [`setup`] runs in the child's init stage (pid 1 of the run, already inside the new
//! user, pid and network namespaces, before it creates the command; no seccomp filter
//! is installed there). Init shares the supervisor's memory, so this file's child-side
//! code makes raw system calls only (see `sandbox::child`). The namespace holds nothing but a loopback interface that is down,
//! so init brings `lo` up, listens on `127.0.0.1:<port>` and hands the listening socket
//! to the supervisor over the channel (SCM_RIGHTS, [`LISTENER_TAG`]), then closes its
//! own copy. The supervisor accepts on that socket from the host's namespace and dials
//! upstream from there: the command can reach the proxy and nothing else.
//!
//! The hook is a plain `fn(RawFd)` taking the channel (no captures), so the port is
//! agreed through [`set_port`], which the supervisor calls before the clone; init
//! reads the value it stored.

use std::os::fd::OwnedFd;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU16, Ordering};

use nix::errno::Errno;

use crate::sys::channel::Msg;
use crate::sys::raw;

/// The `Msg::Fd` tag of the proxy's listening socket.
pub const LISTENER_TAG: i32 = 0x7078; // "px"

/// Pending connections the namespace's listener queues before the supervisor accepts.
const BACKLOG: i32 = 4096;

static PORT: AtomicU16 = AtomicU16::new(0);
static HOST_LISTENER: AtomicI32 = AtomicI32::new(-1);

/// The loopback port [`setup`] listens on, and the supervisor's own listener on the
/// host's loopback (the fallback endpoint), which init closes. Call before fork.
pub fn set_port(port: u16, host_listener: Option<RawFd>) {
    PORT.store(port, Ordering::Relaxed);
    HOST_LISTENER.store(host_listener.unwrap_or(-1), Ordering::Relaxed);
}

/// Bring `lo` up, listen on 127.0.0.1:port and send the socket to the supervisor.
/// Runs in the init stage, which shares the supervisor's memory: raw system
/// calls only, no allocation (see `sandbox::child`). Errors are errno numbers.
pub fn setup(chan: RawFd) -> Result<(), i32> {
    // Init keeps nothing of the host's network: not even the fallback listener
    // (the supervisor closes its own copy once it knows the namespace exists).
    let host = HOST_LISTENER.load(Ordering::Relaxed);
    if host >= 0 {
        raw::close(host);
    }
    let port = PORT.load(Ordering::Relaxed);
    if port == 0 {
        return Err(libc::EINVAL);
    }
    loopback_up()?;
    let listener = listen_raw(port)?;
    let sent = raw::send_with_fd(chan, &Msg::Fd { tag: LISTENER_TAG }.encode(), listener);
    // The supervisor holds the only copy from here on.
    raw::close(listener);
    sent.map(drop)
}

/// `ip link set lo up` (raw ioctls, see `sys::raw::interface_up`).
fn loopback_up() -> Result<(), i32> {
    raw::interface_up(c"lo")
}

/// A close-on-exec TCP socket listening on 127.0.0.1:port. Raw system calls
/// only, so init can use it too (see `sandbox::child`).
fn listen_raw(port: u16) -> Result<libc::c_int, i32> {
    let fd = raw::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)? as libc::c_int;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let r = raw::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
        .and_then(|_| raw::bind_v4(fd, &addr))
        .and_then(|_| raw::listen(fd, BACKLOG));
    match r {
        Ok(_) => Ok(fd),
        Err(e) => {
            raw::close(fd);
            Err(e)
        }
    }
}

/// A close-on-exec TCP socket listening on 127.0.0.1:port (the supervisor's
/// fallback endpoint; the same code init uses inside the namespace).
pub fn listen_loopback(port: u16) -> Result<OwnedFd, Errno> {
    let fd = listen_raw(port).map_err(Errno::from_raw)?;
    // listen_raw just created this descriptor and nothing else owns it.
    Ok(crate::sys::own_new_fd(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listens_on_loopback_and_accepts() {
        // Port 0 is refused by `setup`, but `listen_loopback` takes any port.
        let fd = listen_loopback(0).expect("listen");
        let l = std::net::TcpListener::from(fd);
        let port = l.local_addr().expect("addr").port();
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let (s, _) = l.accept().expect("accept");
        assert_eq!(s.peer_addr().expect("peer"), c.local_addr().expect("local"));
    }
}

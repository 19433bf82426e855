//! The proxy's endpoint inside the run's own network namespace (proxy mode, netns path).
//!
//! `setup` runs in the child's init stage (pid 1 of the run, already inside the new
//! user, pid and network namespaces, before it creates the command; no seccomp filter
//! is installed there). Init shares the supervisor's memory, so this file makes raw
//! system calls only (see `sandbox::child`). The namespace holds nothing but a
//! loopback interface that is down, so init brings `lo` up, listens on
//! `127.0.0.1:<port>` and hands the listening socket to the supervisor over the
//! channel (SCM_RIGHTS, under the [`NetSetup::tag`] the proxy expects), then closes
//! its own copy. The supervisor accepts on that socket from the host's namespace and
//! dials upstream from there: the command can reach the proxy and nothing else.
//!
//! Everything init needs is a [`NetSetup`] in the child's spec, prepared by the
//! supervisor before the clone: no statics, nothing read that the parent set up
//! lazily.
//!
//! The run's own loopback (`network.loopback`, modes `none` and `proxy`): the
//! namespace's `lo` is up (by [`setup`], or [`loopback_up`] in `none` mode),
//! so the run may bind, listen and connect on 127.0.0.1 and ::1 among its own
//! processes; seccomp lets TCP and UDP sockets be made there. Nothing else is
//! in the namespace: no other interface, no route out, and the host's
//! loopback is the host namespace's (the proxy's endpoint, accepted on by the
//! supervisor, is the one door in proxy mode).

use std::os::fd::RawFd;

use crate::sys::channel::Msg;
use crate::sys::raw;

/// What init needs to create the endpoint; part of the
/// [`ChildSpec`](super::child::ChildSpec), never changed after the clone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetSetup {
    /// The loopback port to listen on: the one the command's environment names.
    pub port: u16,
    /// Pending connections the listener queues before the supervisor accepts.
    pub backlog: i32,
    /// The `Msg::Fd` tag the listening socket is sent under.
    pub tag: i32,
    /// The supervisor's own listener on the host's loopback (the fallback
    /// endpoint), which init closes.
    pub host_listener: Option<RawFd>,
}

/// Bring `lo` up in the run's network namespace (`none` mode with the run's
/// own loopback). Runs in the init stage: raw system calls only.
pub(crate) fn loopback_up() -> Result<(), i32> {
    raw::interface_up(c"lo")
}

/// Bring `lo` up, listen on 127.0.0.1:port and send the socket to the supervisor.
/// Runs in the init stage, which shares the supervisor's memory: raw system
/// calls only, no allocation (see `sandbox::child`). Errors are errno numbers.
pub(crate) fn setup(net: &NetSetup, chan: RawFd) -> Result<(), i32> {
    // Init keeps nothing of the host's network: not even the fallback listener
    // (the supervisor closes its own copy once it knows the namespace exists).
    if let Some(host) = net.host_listener {
        raw::close(host);
    }
    if net.port == 0 {
        return Err(libc::EINVAL);
    }
    // `ip link set lo up` (raw ioctls, see `sys::raw::interface_up`).
    raw::interface_up(c"lo")?;
    let listener = raw::listen_tcp_loopback(net.port, net.backlog)?;
    let sent = raw::send_with_fd(chan, &Msg::Fd { tag: net.tag }.encode(), listener);
    // The supervisor holds the only copy from here on.
    raw::close(listener);
    sent.map(drop)
}

//! The filtering egress proxy of `network.mode: proxy`.
//!
//! It runs in the unsandboxed parent (on the supervisor's current-thread runtime) and is
//! the child's only way out: HTTP CONNECT tunnels (relayed end to end, never
//! intercepted) and absolute-form plain HTTP forwarding, both subject to
//! `network.allow_hosts`. The proxy resolves names itself and connects to the address
//! it resolved; link-local, metadata, multicast and unspecified destinations are
//! refused whatever the list says; loopback, private, CGNAT and unique-local ones, and
//! any other address this host owns (the kernel's routing table says `local`), only
//! through an IP literal the list names (or `localhost` for loopback), never through a
//! name that resolves to them (DNS rebinding). At most `network.max_connections`
//! connections at once, a deadline and a size bound for request heads: the
//! supervisor's memory stays bounded whatever the child sends (see `bounds`).
//!
//! * [`allow_hosts`] — parsing and matching `network.allow_hosts`;
//! * [`destination`] — classifying resolved addresses;
//! * [`decide`] — the policy decision around resolution (pure, unit-tested);
//! * `dial` — decide, resolve, connect, count;
//! * `bounds` — what bounds the supervisor's memory (connections, heads, buffers);
//! * `server` — accept loop and hyper server; `connect` — tunnels (relayed with
//!   `splice`, zero-copy); `plain_http` — plain HTTP forwarding;
//! * [`stats`] — counters for the result and the audit record;
//! * [`lifecycle`] — one run's proxy, prepared, served and counted: the netns path
//!   and the Landlock TCP fallback;
//! * [`refusal`] — 403/502/400 responses;
//! * [`egress`] — the TLS-terminating engine for hosts given as `allow_hosts` maps or
//!   carrying a credential (issue #38): rules, budgets, credential injection.

pub mod allow_hosts;
mod bounds;
mod connect;
pub mod decide;
pub mod destination;
mod dial;
pub mod egress;
mod headers;
pub mod lifecycle;
mod plain_http;
pub mod refusal;
mod server;
mod splice;
pub mod stats;

#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;

pub use allow_hosts::{Allowlist, AllowlistError};
pub use destination::DestClass;
pub use lifecycle::{ProxyPath, ProxyService, ProxyServiceError, LISTENER_BACKLOG, LISTENER_TAG};
#[cfg(test)]
pub use server::serve;
pub use server::serve_with_egress;
pub use stats::{ProxyReport, ProxyStats};

/// Turn a listening TCP socket received as a raw fd (e.g. over SCM_RIGHTS from a child
/// that created it inside its own network namespace) into a tokio listener. Must be
/// called inside a tokio runtime.
pub fn listener_from_fd(fd: OwnedFd) -> std::io::Result<tokio::net::TcpListener> {
    let std_listener = std::net::TcpListener::from(fd);
    std_listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(std_listener)
}

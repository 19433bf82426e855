//! What bounds the supervisor's memory whatever the child does (the run's memory
//! limit does not apply to the parent):
//! * at most `network.max_connections` client connections at once ([`Limits`]); a
//!   connection past it gets a short 503 (written without reading anything) and is
//!   closed at once, and is counted;
//! * a request head must be complete within [`HEAD_TIMEOUT`] of the moment the proxy
//!   starts waiting for it (also the idle limit of a kept-alive connection), and may be
//!   at most [`MAX_HEAD`] bytes; otherwise the connection is closed (and counted);
//! * each connection buffers at most [`MAX_BUF`] bytes per direction; bodies are
//!   streamed with backpressure, tunnels relayed through kernel pipes (`splice`).
//!
//! A leaf: the server applies these to client connections and `plain_http` to
//! upstream ones.

use std::time::Duration;

/// Largest request (or response) head the proxy reads, in bytes.
pub const MAX_HEAD: usize = 64 * 1024;
/// Connection read buffer limit (hyper's minimum is 8 KiB).
pub const MAX_BUF: usize = 256 * 1024;
/// A client that sends no complete request head within this time is dropped.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Limits of one run's proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections held at once (`network.max_connections`, at least 1).
    pub max_connections: usize,
}

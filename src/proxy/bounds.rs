//! What bounds the supervisor's memory whatever the child does (the run's memory
//! limit does not apply to the parent):
//! * at most `network.max_connections` client connections at once ([`Limits`]); a
//!   connection past it gets a short 503 (written without reading anything) and is
//!   closed at once, and is counted;
//! * a request head must be complete within [`HEAD_TIMEOUT`] of the moment the proxy
//!   starts waiting for it (also the idle limit of a kept-alive connection), and may be
//!   at most [`MAX_HEAD`] bytes; otherwise the connection is closed (and counted);
//! * each HTTP connection (client side and upstream side) reads into a buffer of at
//!   most [`MAX_BUF`] bytes and writes from one flat buffer of at most about
//!   [`MAX_BUF`] more (hyper's `writev(false)`: body chunks are copied, not queued as
//!   slices that would each keep a whole read buffer alive); bodies are streamed with
//!   backpressure, tunnels relayed through kernel pipes (`splice`). Measured with a
//!   client that POSTs an endless body to an origin that answers with an endless one
//!   and neither reads (tests/proxy_limits.rs): about 130 KiB of the supervisor's
//!   memory per plain-HTTP connection (130-155 KiB measured), documented as at most
//!   192 KiB (it was 1.3-1.5 MiB with 256 KiB buffers and hyper's write queue), about
//!   10 KiB per tunnel. So the default 256 connections hold at most 48 MiB, the
//!   largest setting (4,096) at most 768 MiB.
//!
//! A leaf: the server applies these to client connections and `plain_http` to
//! upstream ones.

use std::time::Duration;

/// Largest request (or response) head the proxy reads, in bytes (as Node.js's
/// default). Heads are read into the connection's buffer, so this is [`MAX_BUF`].
pub const MAX_HEAD: usize = MAX_BUF;
/// Connection buffer limit, each way (hyper's minimum is 8 KiB): every plain-HTTP
/// connection costs about 8 of these at worst (read buffer, a chunk in flight and
/// the flat write buffer, on both sides of the proxy).
pub const MAX_BUF: usize = 16 * 1024;
/// A client that sends no complete request head within this time is dropped.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Limits of one run's proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections held at once (`network.max_connections`, at least 1).
    pub max_connections: usize,
}

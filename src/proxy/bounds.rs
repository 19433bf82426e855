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
//! A leaf: [`client_side`] applies these to every connection from the run (the
//! proxy's own and each TLS-terminated tunnel), [`upstream_http1`] to every upstream
//! one (plain HTTP and terminated TLS).

use std::time::Duration;

use hyper::client::conn::http1::SendRequest;
use hyper::rt::{Read, Write};
use hyper::Response;
use hyper_util::rt::TokioTimer;
use tokio::task::JoinHandle;

use super::refusal::{bad_gateway, ProxyBody, UpstreamFailure};

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

/// The HTTP/1.1 server side of a connection from the run, within these bounds.
pub fn client_side() -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_header_size(MAX_HEAD)
        .max_buf_size(MAX_BUF)
        // Copy body chunks into one flat write buffer (bounded by MAX_BUF) instead of
        // queueing the slices: a queued slice keeps its whole read buffer alive.
        .writev(false)
        .keep_alive(true);
    b
}

/// An HTTP/1.1 client connection upstream over `io`, within these bounds, and the
/// task that drives it (abort it to drop the connection). A failed handshake is the
/// 502 to answer with.
pub async fn upstream_http1<T>(
    io: T,
    shown: &str,
    port: u16,
) -> Result<(SendRequest<ProxyBody>, JoinHandle<()>), Response<ProxyBody>>
where
    T: Read + Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_BUF)
        .writev(false) // as client_side: no queue of slices pinning read buffers
        .handshake(io)
        .await
        .map_err(|e| {
            tracing::debug!(host = %shown, port, error = %e, "proxy: upstream handshake failed");
            bad_gateway(shown, port, UpstreamFailure::Connect)
        })?;
    let driver = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "proxy: upstream connection ended with an error");
        }
    });
    Ok((sender, driver))
}

//! The zero-copy relay of CONNECT tunnels: splice(2) socket → pipe → socket.
//!
//! A copy through user space reads every byte into a buffer and writes it out again;
//! splice moves references to the socket's pages through a pipe instead, so the
//! supervisor touches no payload at all. On a 2-core machine, where the proxy competes
//! with both endpoints for CPU, that is the difference between roughly half of direct
//! loopback throughput and most of it (see `scripts/bench-proxy`).
//!
//! Each direction owns a non-blocking pipe and alternates: fill it from the source
//! socket when readable, drain it completely into the destination when writable. At
//! end-of-file the destination's write half is shut down (as `copy_bidirectional`
//! does) and the other direction carries on.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes asked of one splice call.
const CHUNK: usize = 1 << 20;
/// A non-blocking pipe used as the in-kernel buffer of one direction.
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    pub fn new() -> io::Result<Pipe> {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(io::Error::from)?;
        // Default capacity (64 KiB): pipe pages count against a per-user quota that the
        // sandboxed command, running as the same user, shares; 500 tunnels fit in it.
        Ok(Pipe { r, w })
    }
}

/// Move bytes from `src` to `dst` until `src` reaches end-of-file; returns the count.
async fn one_way(src: &TcpStream, dst: &TcpStream, pipe: &Pipe) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        let n = loop {
            src.readable().await?;
            match src.try_io(Interest::READABLE, || {
                crate::sys::splice_out(src.as_raw_fd(), pipe.w.as_raw_fd(), CHUNK)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // splice stops at TCP urgent data's mark and says "again" while
                    // bytes wait: read past the mark (the urgent byte comes in line,
                    // SO_OOBINLINE) and pass it on, else this direction stalls.
                    if queued(src) > 0 {
                        total += copy_once(src, dst).await?;
                    }
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            // An error means the peer is gone already.
            let _ = nix::sys::socket::shutdown(dst.as_raw_fd(), nix::sys::socket::Shutdown::Write);
            return Ok(total);
        }
        let mut left = n;
        while left > 0 {
            dst.writable().await?;
            match dst.try_io(Interest::WRITABLE, || {
                crate::sys::splice_out(pipe.r.as_raw_fd(), dst.as_raw_fd(), left)
            }) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        total += n as u64;
    }
}

/// Bytes waiting in `s`'s receive queue (0 when it cannot be asked).
fn queued(s: &TcpStream) -> usize {
    use std::os::fd::AsFd;
    crate::sys::socket_queued(s.as_fd()).unwrap_or(0)
}

/// One plain read from `src` (through an urgent mark) written whole to `dst`. Called
/// only with this direction's pipe empty, so the order of bytes is kept.
async fn copy_once(src: &TcpStream, dst: &TcpStream) -> io::Result<u64> {
    let mut buf = [0u8; 4096];
    // Straight to the socket: tokio's readiness was just cleared by the splice.
    let flags = nix::sys::socket::MsgFlags::MSG_DONTWAIT;
    let n = match nix::sys::socket::recv(src.as_raw_fd(), &mut buf, flags) {
        Ok(n) => n,
        Err(nix::errno::Errno::EAGAIN) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut left = &buf[..n];
    while !left.is_empty() {
        dst.writable().await?;
        match dst.try_write(left) {
            Ok(m) => left = &left[m..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n as u64)
}

/// Urgent data arrives in line: relayed as ordinary bytes, in order (a tunnel cannot
/// keep its urgency), instead of being held out of the stream.
fn urgent_in_line(s: &TcpStream) {
    let _ = nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::OobInline, &true);
}

/// Relay both ways until both directions reached end-of-file (or one failed).
/// `Err` before any byte moved when the pipes cannot be made (descriptor limits):
/// the caller then copies through user space instead.
pub async fn relay(a: &TcpStream, b: &TcpStream, pipes: (Pipe, Pipe)) -> io::Result<(u64, u64)> {
    let (ab, ba) = pipes;
    urgent_in_line(a);
    urgent_in_line(b);
    tokio::try_join!(one_way(a, b, &ab), one_way(b, a, &ba))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A pair of connected loopback sockets.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        (c.expect("connect"), s.expect("accept").0)
    }

    #[test]
    fn relays_both_ways_and_propagates_eof() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            // client <-> (a | relay | b) <-> server
            let (mut client, a) = pair().await;
            let (b, mut server) = pair().await;
            let relay = tokio::spawn(async move {
                let pipes = (Pipe::new().expect("pipe"), Pipe::new().expect("pipe"));
                relay(&a, &b, pipes).await
            });
            let up: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
            let down: Vec<u8> = (0..5_000_000u32).map(|i| (i % 241) as u8).collect();
            let (up2, down2) = (up.clone(), down.clone());
            let c = tokio::spawn(async move {
                let (mut r, mut w) = client.split();
                let send = async {
                    w.write_all(&up2).await.expect("client write");
                    w.shutdown().await.expect("client shutdown");
                };
                let mut got = Vec::new();
                let recv = r.read_to_end(&mut got);
                let (_, n) = tokio::join!(send, recv);
                n.expect("client read");
                got
            });
            let s = tokio::spawn(async move {
                let (mut r, mut w) = server.split();
                let send = async {
                    w.write_all(&down2).await.expect("server write");
                    w.shutdown().await.expect("server shutdown");
                };
                let mut got = Vec::new();
                let recv = r.read_to_end(&mut got);
                let (_, n) = tokio::join!(send, recv);
                n.expect("server read");
                got
            });
            assert_eq!(c.await.expect("client task"), down);
            assert_eq!(s.await.expect("server task"), up);
            let (ab, ba) = relay.await.expect("relay task").expect("relay");
            assert_eq!((ab, ba), (up.len() as u64, down.len() as u64));
        });
    }
}

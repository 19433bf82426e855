//! What `capsule serve` needs from the kernel: a plain fork of the
//! single-threaded server for each step.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// Which side of [`fork_step`] the caller is on.
pub enum Forked {
    /// The new process (one thread, a copy of the server's memory).
    Child,
    /// The server; the step's pid.
    Parent(libc::pid_t),
}

/// `fork()` for the server of `capsule serve`. The caller must be
/// single-threaded (the server never starts a thread or an async runtime),
/// so the child may allocate and run ordinary Rust code: no lock can be held
/// by a thread that does not exist in the child.
pub fn fork_step() -> Result<Forked, Errno> {
    debug_assert_eq!(
        thread_count(),
        Some(1),
        "capsule serve forks from one thread only"
    );
    // SAFETY: the server is single-threaded (checked in debug builds, and
    // `serve::run` refuses to start with more than one thread), so the
    // child's copy of every lock and allocator state is consistent.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child.as_raw())),
    }
}

/// The number of threads of this process (from /proc/self/stat), if known.
pub fn thread_count() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 20 (num_threads), counted after the command name's closing ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(17)?.parse().ok()
}

/// The step's report channel: a `SOCK_SEQPACKET` pair (close-on-exec), so
/// that the report can carry a descriptor (the run's network namespace,
/// see `supervisor::ns_hold`). `(server's end, step's end)`.
pub fn status_pair() -> Result<(OwnedFd, OwnedFd), Errno> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
}

/// The step's report: its exit code, and the descriptor it hands to the
/// server, if any.
pub fn send_status(sock: RawFd, code: i32, fd: Option<&OwnedFd>) -> Result<(), Errno> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let b = code.to_le_bytes();
    let iov = [std::io::IoSlice::new(&b)];
    let fds = fd.map(|f| [f.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage<'_>> = fds
        .as_ref()
        .map(|f| ControlMessage::ScmRights(f))
        .into_iter()
        .collect();
    loop {
        match sendmsg::<()>(sock, &iov, &cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(Errno::EINTR) => continue,
            r => return r.map(drop),
        }
    }
}

/// The one-byte message a step sends, before anything else, when its own
/// parsing of the request finds `--json`: its stdout is then one result line.
const JSON_MODE: u8 = b'J';

/// Tell the server that this step runs with `--json` (see [`Status::Json`]).
pub fn send_json_mode(sock: RawFd) -> Result<(), Errno> {
    use nix::sys::socket::{send, MsgFlags};
    loop {
        match send(sock, &[JSON_MODE], MsgFlags::MSG_NOSIGNAL) {
            Err(Errno::EINTR) => continue,
            r => return r.map(drop),
        }
    }
}

/// What a read of the report channel found.
pub enum Status {
    /// The step parsed `--json` in its arguments: its stdout is capsule's
    /// result line (sent before the run, so before any of its output).
    Json,
    /// The step's exit code, and the descriptor it sent (close-on-exec).
    Report(i32, Option<OwnedFd>),
    /// End of file or a malformed message: the step ended without a report.
    Gone,
    /// Nothing yet.
    Pending,
}

/// Read the step's report without blocking. Descriptors beyond the first
/// are closed.
pub fn recv_status(sock: &OwnedFd) -> Status {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut b = [0u8; 4];
    let mut iov = [std::io::IoSliceMut::new(&mut b)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
    let (n, fds) = loop {
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), flags) {
            Ok(msg) => {
                let mut fds = Vec::new();
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::ScmRights(got) = c {
                            // SAFETY: the kernel just installed these
                            // descriptors in this process for this message;
                            // nothing else refers to them.
                            fds.extend(
                                got.into_iter()
                                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                            );
                        }
                    }
                }
                break (msg.bytes, fds);
            }
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Status::Pending,
            Err(_) => return Status::Gone,
        }
    };
    if n == 1 && b[0] == JSON_MODE && fds.is_empty() {
        return Status::Json;
    }
    if n != 4 {
        return Status::Gone;
    }
    // The first descriptor is the report's; any other is dropped (closed).
    Status::Report(i32::from_le_bytes(b), fds.into_iter().next())
}

//! The typed channel between the supervisor and its child.
//!
//! A `SOCK_SEQPACKET` socketpair, close-on-exec on both ends. Messages are
//! fixed 16-byte records so the child can send them without allocating:
//! `[kind, a, b, c]` as native-endian `i32`s. A descriptor (the proxy's
//! listening socket made inside the child's network namespace) can ride
//! along with SCM_RIGHTS.

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{
    recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

/// Where in the child a set-up step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Stage {
    Wait = 1,
    Session = 2,
    Stdio = 3,
    Rlimits = 4,
    Cwd = 5,
    Capabilities = 6,
    NoNewPrivs = 7,
    Landlock = 8,
    Seccomp = 9,
    Fds = 10,
    Fork = 11,
    Network = 12,
    View = 13,
    ViewProc = 14,
    ViewDev = 15,
    SignalFilter = 16,
    Cgroup = 17,
}

impl Stage {
    pub fn from_i32(v: i32) -> Option<Stage> {
        use Stage::*;
        Some(match v {
            1 => Wait,
            2 => Session,
            3 => Stdio,
            4 => Rlimits,
            5 => Cwd,
            6 => Capabilities,
            7 => NoNewPrivs,
            8 => Landlock,
            9 => Seccomp,
            10 => Fds,
            11 => Fork,
            12 => Network,
            13 => View,
            14 => ViewProc,
            15 => ViewDev,
            16 => SignalFilter,
            17 => Cgroup,
            _ => return None,
        })
    }
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Wait => "waiting for the supervisor",
            Stage::Session => "creating the child's session",
            Stage::Stdio => "setting up stdio",
            Stage::Rlimits => "applying resource limits",
            Stage::Cwd => "changing to the working directory",
            Stage::Capabilities => "dropping capabilities",
            Stage::NoNewPrivs => "setting no_new_privs",
            Stage::Landlock => "applying the Landlock ruleset",
            Stage::Seccomp => "installing the seccomp filter",
            Stage::Fds => "closing inherited descriptors",
            Stage::Fork => "forking the command inside the namespace",
            Stage::Network => "setting up the network namespace",
            Stage::View => "mounting the read-only view of the host (mount namespace)",
            Stage::ViewProc => "mounting the run's private /proc",
            Stage::ViewDev => "mounting the run's /dev/shm and /dev/pts",
            Stage::SignalFilter => {
                "installing the notify filter (seccomp user notification: signal checks, network guard) and handing \
                 its listener to capsule"
            }
            Stage::Cgroup => "joining the run's cgroup (its v1 `tasks` file)",
        }
    }
}

/// A message from the child (or its init stage) to the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    /// execve failed with this errno (the command never ran).
    ExecFailed { errno: i32 },
    /// A confinement step failed: nothing ran.
    SetupFailed { stage: Stage, errno: i32 },
    /// The init stage (or the keeper) reports how the command ended: its raw
    /// wait status, and the CPU time it had used (user + system, its own
    /// threads, not its children's) in milliseconds, -1 when unknown: what
    /// tells a kill by `limits.cpu_seconds` (RLIMIT_CPU's SIGKILL) from
    /// another SIGKILL.
    Exited { status: i32, cpu_ms: i32 },
    /// A descriptor is attached (its meaning is agreed by the sender and receiver).
    Fd { tag: i32 },
    /// The command stage's pid, its first word where a keeper (not capsule)
    /// created it (the no-namespace path).
    Command { pid: i32 },
    /// The run's init has built its namespaces (the view, the network
    /// endpoint): the run is committed to the namespace path. Sent before
    /// init creates the command, so a refusal of any of those steps comes
    /// while nothing of the command has run (`supervisor::spawn`).
    Ready,
}

const KIND_EXEC: i32 = 1;
const KIND_SETUP: i32 = 2;
const KIND_EXITED: i32 = 3;
const KIND_FD: i32 = 4;
const KIND_COMMAND: i32 = 5;
const KIND_READY: i32 = 6;

impl Msg {
    /// The 16-byte record (no allocation).
    pub fn encode(self) -> [u8; 16] {
        let (k, a, b) = match self {
            Msg::ExecFailed { errno } => (KIND_EXEC, errno, 0),
            Msg::SetupFailed { stage, errno } => (KIND_SETUP, stage as i32, errno),
            Msg::Exited { status, cpu_ms } => (KIND_EXITED, status, cpu_ms),
            Msg::Fd { tag } => (KIND_FD, tag, 0),
            Msg::Command { pid } => (KIND_COMMAND, pid, 0),
            Msg::Ready => (KIND_READY, 0, 0),
        };
        let mut out = [0u8; 16];
        out[0..4].copy_from_slice(&k.to_ne_bytes());
        out[4..8].copy_from_slice(&a.to_ne_bytes());
        out[8..12].copy_from_slice(&b.to_ne_bytes());
        out
    }

    fn decode(buf: &[u8]) -> Option<Msg> {
        if buf.len() != 16 {
            return None;
        }
        let word = |i: usize| i32::from_ne_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let (k, a, b) = (word(0), word(4), word(8));
        Some(match k {
            KIND_EXEC => Msg::ExecFailed { errno: a },
            KIND_SETUP => Msg::SetupFailed {
                stage: Stage::from_i32(a)?,
                errno: b,
            },
            KIND_EXITED => Msg::Exited {
                status: a,
                cpu_ms: b,
            },
            KIND_FD => Msg::Fd { tag: a },
            KIND_COMMAND => Msg::Command { pid: a },
            KIND_READY => Msg::Ready,
            _ => return None,
        })
    }
}

/// One end of the channel.
#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
}

/// Create both ends (close-on-exec).
pub fn pair() -> Result<(Channel, Channel), Errno> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((Channel { fd: a }, Channel { fd: b }))
}

/// One message from the channel (None: not one capsule knows) and any descriptor
/// that came with it.
pub type Received = (Option<Msg>, Option<OwnedFd>);

impl Channel {
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A second descriptor for the same end (for readiness polling).
    pub fn try_clone_fd(&self) -> Result<OwnedFd, Errno> {
        nix::unistd::dup(&self.fd)
    }

    /// A single byte: "go on" (used by the supervisor once uid maps and cgroups are set).
    pub fn send_go(&self) -> Result<(), Errno> {
        // SAFETY: one valid byte.
        let n = unsafe { libc::send(self.raw(), b"g".as_ptr().cast(), 1, libc::MSG_NOSIGNAL) };
        if n == 1 {
            Ok(())
        } else {
            Err(Errno::last())
        }
    }

    /// Wait until a message (or end-of-file) can be received, at most
    /// `timeout` (whole milliseconds, capped at about a minute); false when
    /// it passed.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> Result<bool, Errno> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let ms = timeout.as_millis().min(u16::MAX as u128) as u16;
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(ms)).map(|n| n > 0)
    }

    /// Receive one message, with any descriptor that came along.
    /// `Ok(None)` is end-of-file: every sender is gone.
    pub fn recv(&self) -> Result<Option<Received>, Errno> {
        let mut buf = [0u8; 16];
        let mut cbuf = nix::cmsg_space!([RawFd; 2]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let (n, fd) = loop {
            match recvmsg::<()>(
                self.raw(),
                &mut iov,
                Some(&mut cbuf),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(m) => {
                    let mut fd = None;
                    if let Ok(cmsgs) = m.cmsgs() {
                        for c in cmsgs {
                            if let ControlMessageOwned::ScmRights(fds) = c {
                                for (i, raw) in fds.into_iter().enumerate() {
                                    // SAFETY: SCM_RIGHTS just installed these fds in our table; we own them.
                                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                                    if i == 0 {
                                        fd = Some(owned);
                                    }
                                }
                            }
                        }
                    }
                    break (m.bytes, fd);
                }
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 && fd.is_none() {
            return Ok(None);
        }
        Ok(Some((Msg::decode(&buf[..n]), fd)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for m in [
            Msg::ExecFailed { errno: 2 },
            Msg::SetupFailed {
                stage: Stage::Landlock,
                errno: 38,
            },
            Msg::Exited {
                status: 0x0300,
                cpu_ms: 1000,
            },
            Msg::Exited {
                status: 9,
                cpu_ms: -1,
            },
            Msg::Fd { tag: 7 },
            Msg::Command { pid: 4321 },
            Msg::Ready,
        ] {
            assert_eq!(Msg::decode(&m.encode()), Some(m));
        }
        assert_eq!(Msg::decode(&[0u8; 3]), None);
        assert_eq!(Msg::decode(&[9u8; 16]), None);
    }

    #[test]
    fn eof_when_peer_closes() {
        let (a, b) = pair().unwrap();
        // As the child stages send: one raw send of the encoded record.
        crate::sys::raw::send(
            a.raw(),
            &Msg::Exited {
                status: 0,
                cpu_ms: 0,
            }
            .encode(),
        )
        .unwrap();
        drop(a);
        assert!(matches!(
            b.recv(),
            Ok(Some((
                Some(Msg::Exited {
                    status: 0,
                    cpu_ms: 0
                }),
                None
            )))
        ));
        assert!(matches!(b.recv(), Ok(None)));
    }
}

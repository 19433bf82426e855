//! The network guard: proxy mode on the host's network namespace, the
//! supervisor's side.
//!
//! Without user namespaces the run shares the host's network namespace, and
//! the proxy listens on the host's loopback. Landlock's TCP rules (ABI 4+)
//! keep `connect` and `bind` to the proxy's port; below ABI 4 nothing in
//! the kernel can, because seccomp cannot read a socket address. And no
//! Landlock ABI sees two doors beside `connect`: TCP Fast Open (`sendto` or
//! `sendmsg` with MSG_FASTOPEN connects without a connect() call) and
//! `listen()` on an unbound socket (which binds an ephemeral port on every
//! address without a bind() call). The notify filter's network part
//! (`sandbox::seccomp::signals`, [`NetPart::Guard`]) refuses TCP Fast Open
//! in BPF and sends every `connect` and `listen` here:
//!
//! * `connect` on an IP socket: the supervisor takes the caller's socket
//!   (pidfd_getfd), reads the address it passed (process_vm_readv), and if
//!   that is the proxy (127.0.0.1:PORT, or ::ffff:127.0.0.1:PORT on an IPv6
//!   socket) makes the connect itself, with its own copy of the address, on
//!   that same socket, and returns the result (0, EINPROGRESS for a
//!   non-blocking socket, ...); anything else fails with EACCES, as Landlock
//!   answers. The call is never let through (CONTINUE), because another
//!   thread could change the address or the descriptor between the check and
//!   the kernel's own read.
//! * `connect` on any other socket is made by the supervisor too, never let
//!   through: a thread of the run could swap an IP socket in at that
//!   descriptor between the check and the kernel's own lookup (Landlock's
//!   TCP rule, where it exists, pins only the port). A pathname Unix socket
//!   is connected from the caller's working directory (a thread of ours with
//!   its own, `unshare(CLONE_FS)`; without namespaces the run has capsule's
//!   root); an abstract Unix socket is refused (EACCES): only Landlock's
//!   scope could tell the run's own abstract sockets from the host's, and it
//!   does not bind capsule; a netlink socket only to the kernel (port 0, no
//!   groups; any other port or a group is EPERM, as for a run without
//!   CAP_NET_ADMIN), AF_UNSPEC (disconnect) as asked.
//! * `listen` on an IP socket: EACCES. On any other socket the supervisor
//!   calls listen() on the caller's socket itself.
//! * `bind` (here also without a proxy: [`NetPart::UnixBind`], wherever
//!   `allow_unix_sockets` shares the host's abstract names, mode `none` or
//!   `proxy` without a network namespace): Landlock's scope keeps the run
//!   from connecting to the host's abstract sockets, not from binding a free
//!   name a host program will connect to (an X display's
//!   `@/tmp/.X11-unix/X1`). An abstract name is refused (EACCES); every
//!   other bind (a pathname, autobind, netlink, IP) the supervisor makes
//!   itself on the caller's socket, with its own copy of the address, from
//!   the caller's working directory and umask, on a thread that first puts
//!   itself under the run's own Landlock ruleset (so a socket file is made
//!   only where the run may make one, and a TCP bind gets Landlock's answer)
//!   besides the run's ids and no capabilities. Never let through: another
//!   thread could rewrite the address between the check and the kernel's read.
//!
//! Every connect and listen runs on a short-lived thread of its own (at
//! most [`MAX_BLOCKING`] at once, then EAGAIN), never on the guard's:
//! whether it blocks is the caller's to change at any moment (O_NONBLOCK
//! lives on the shared file), and a connect can wait for minutes (a dropped
//! SYN). That thread first lowers itself to the caller's file-system uid and
//! gid and no capabilities ([`crate::sys::lower_this_thread`], this thread
//! only): the kernel then checks the path's permissions, a netlink
//! destination and every LSM hook as it would for the run, never with
//! capsule's CAP_DAC_OVERRIDE or CAP_NET_ADMIN. The caller's effective uid
//! and gid must be capsule's (always so without namespaces: the run cannot
//! change them), else the call is refused (EACCES), so a Unix server's
//! SO_PEERCRED carries the run's uid and gid. Its pid is capsule's (the
//! process that connected): the one residual, see docs/guards.md.
//!
//! [`NetPart::Guard`]: crate::sandbox::seccomp::NetPart::Guard
//! [`NetPart::UnixBind`]: crate::sandbox::seccomp::NetPart::UnixBind

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::socket::{SockaddrIn, SockaddrIn6};

use super::procfs::read_remote;
use crate::sys::notify::{self, Listener, Notification, Reply};

/// Connects in flight at once; past it a connect fails with EAGAIN (the
/// run's own flood).
pub const MAX_BLOCKING: usize = 64;

/// The longest socket address read from the run (sockaddr_storage).
const MAX_ADDR: usize = 128;

/// What the guard knows about the run.
#[derive(Debug, Clone)]
pub struct NetGuard {
    /// The proxy's port on 127.0.0.1 (None: no proxy, only bind is the
    /// guard's).
    pub proxy_port: Option<u16>,
    /// The run's Landlock ruleset, which a bind thread puts itself under
    /// (None: no Landlock, best effort only).
    pub ruleset: Option<Arc<OwnedFd>>,
}

/// A connect, listen or bind the supervisor makes on the caller's socket,
/// with the caller's file-system ids and no capabilities.
pub struct Connect {
    sock: OwnedFd,
    op: Op,
    /// The caller's fsuid and fsgid.
    ids: (u32, u32),
}

enum Op {
    To(Target),
    Listen(i32),
    Bind {
        addr: Vec<u8>,
        /// The caller's working directory (a relative pathname).
        cwd: Option<OwnedFd>,
        /// The caller's umask (the socket file's mode).
        umask: u32,
        ruleset: Option<Arc<OwnedFd>>,
    },
}

enum Target {
    V4(SockaddrIn),
    V6(SockaddrIn6),
    /// A socket address that is not IP, as the caller passed it (copied),
    /// with the caller's working directory for a relative Unix path.
    Raw {
        addr: Vec<u8>,
        cwd: Option<OwnedFd>,
    },
}

/// A guard's answer to one notification (the guard thread sends it).
pub enum Action {
    Reply(Reply),
    /// Connect (or listen) on a thread of its own and answer with the result.
    Connect(Connect),
    /// Already answered (the memfd guard hands its descriptor over itself).
    Answered,
}

impl NetGuard {
    /// Whether notification number `nr` is the guard's.
    pub fn handles(nr: i32) -> bool {
        let nr = i64::from(nr);
        nr == libc::SYS_connect || nr == libc::SYS_listen || nr == libc::SYS_bind
    }

    /// Decide `n` (connect or listen). `listener` is asked whether the
    /// caller still waits once its thread group is pinned.
    pub fn decide(&self, listener: &Listener, n: &Notification) -> Action {
        match self.try_decide(listener, n) {
            Ok(a) => a,
            Err(e) => Action::Reply(Reply::Fail(e as i32)),
        }
    }

    fn try_decide(&self, listener: &Listener, n: &Notification) -> Result<Action, Errno> {
        let tid = n.pid as libc::pid_t;
        let fd = n.args[0] as u32 as i32;
        let who = caller(tid).ok_or(Errno::ESRCH)?;
        let tgid = who.tgid;
        // Without namespaces the run has capsule's uid and gid and cannot
        // change them: anything else is not a call this guard can make for it.
        if (who.euid, who.egid)
            != (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        {
            tracing::warn!("network guard: pid {tgid} runs with other ids than capsule; its connect/listen is refused");
            return Err(Errno::EACCES);
        }
        let ids = (who.fsuid, who.fsgid);
        let pidfd = crate::sys::pidfd_open(tgid)?;
        // The caller still waits in the call: `tid` and `tgid` are its own.
        if !listener.id_valid(n.id) {
            return Err(Errno::ESRCH);
        }
        let sock = notify::pidfd_getfd(pidfd.as_fd(), fd).map_err(|e| {
            if e == Errno::EPERM {
                tracing::warn!(
                    "network guard: no access to the descriptors of pid {tgid} (a non-dumpable program, or an LSM \
                     refusing ptrace access): its connect/listen is refused"
                );
                Errno::EACCES
            } else {
                e
            }
        })?;
        // A thread with a descriptor table of its own (clone without
        // CLONE_FILES) has other descriptors than its group leader: only
        // the socket the caller named is acted on.
        if !same_file(tid, fd, &sock) {
            return Err(Errno::EACCES);
        }
        let domain = notify::socket_domain(sock.as_fd())?;
        let ip = domain == libc::AF_INET || domain == libc::AF_INET6;
        if i64::from(n.nr) == libc::SYS_bind {
            let raw = read_addr(tid, n)?;
            let cwd = bind_target(tid, domain, &raw)?;
            return Ok(Action::Connect(Connect {
                sock,
                op: Op::Bind {
                    addr: raw,
                    cwd,
                    umask: who.umask,
                    ruleset: self.ruleset.clone(),
                },
                ids,
            }));
        }
        if i64::from(n.nr) == libc::SYS_listen {
            if ip {
                return Err(Errno::EACCES);
            }
            let backlog = n.args[1] as u32 as i32;
            return Ok(Action::Connect(Connect {
                sock,
                op: Op::Listen(backlog.clamp(0, libc::SOMAXCONN)),
                ids,
            }));
        }
        let raw = &read_addr(tid, n)?[..];
        let unspec = u16::from_ne_bytes([raw[0], raw[1]]) == libc::AF_UNSPEC as u16;
        let to = if ip && !unspec {
            self.proxy_target(domain, raw).ok_or(Errno::EACCES)?
        } else {
            other_target(tid, domain, raw)?
        };
        Ok(Action::Connect(Connect {
            sock,
            op: Op::To(to),
            ids,
        }))
    }

    /// The proxy's address in the family of the caller's socket, if the
    /// address the caller passed (`raw`, a struct sockaddr) is the proxy.
    fn proxy_target(&self, domain: i32, raw: &[u8]) -> Option<Target> {
        let proxy_port = self.proxy_port?;
        let family = i32::from(u16::from_ne_bytes([*raw.first()?, *raw.get(1)?]));
        let port = u16::from_be_bytes([*raw.get(2)?, *raw.get(3)?]);
        if port != proxy_port || family != domain {
            return None;
        }
        if domain == libc::AF_INET {
            let ip = Ipv4Addr::new(*raw.get(4)?, *raw.get(5)?, *raw.get(6)?, *raw.get(7)?);
            (raw.len() >= 16 && ip == Ipv4Addr::LOCALHOST).then(|| {
                Target::V4(SockaddrIn::from(SocketAddrV4::new(
                    Ipv4Addr::LOCALHOST,
                    proxy_port,
                )))
            })
        } else {
            // struct sockaddr_in6: family, port, flowinfo (4), address (16).
            let bytes: [u8; 16] = raw.get(8..24)?.try_into().ok()?;
            let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
            (Ipv6Addr::from(bytes) == mapped).then(|| {
                Target::V6(SockaddrIn6::from(SocketAddrV6::new(
                    mapped, proxy_port, 0, 0,
                )))
            })
        }
    }
}

/// The socket address of a connect or bind (`args[1]`, `args[2]` bytes),
/// copied once from the caller's memory.
fn read_addr(tid: libc::pid_t, n: &Notification) -> Result<Vec<u8>, Errno> {
    let len = n.args[2] as u32 as i32;
    if !(2..=MAX_ADDR as i32).contains(&len) {
        return Err(Errno::EINVAL);
    }
    let mut raw = vec![0u8; len as usize];
    read_remote(tid, n.args[1], &mut raw)?;
    Ok(raw)
}

/// Whether a bind of `raw` on a socket of `domain` may be made, and from
/// which directory: an abstract Unix name is refused (it is the host's
/// namespace of names); a relative pathname is bound from the caller's
/// working directory; anything else (an absolute pathname, autobind, a
/// netlink or IP address, an address the socket's family does not take)
/// as is, under the run's Landlock ruleset.
fn bind_target(tid: libc::pid_t, domain: i32, raw: &[u8]) -> Result<Option<OwnedFd>, Errno> {
    let family = i32::from(u16::from_ne_bytes([raw[0], raw[1]]));
    if domain != libc::AF_UNIX || family != libc::AF_UNIX {
        return Ok(None);
    }
    match raw.get(2) {
        // Autobind: the kernel picks a fresh name (five hex digits), never
        // one the run chose.
        None => Ok(None),
        Some(0) => Err(Errno::EACCES),
        Some(b'/') => Ok(None),
        Some(_) => caller_cwd(tid).map(Some),
    }
}

/// The caller's working directory (O_PATH).
fn caller_cwd(tid: libc::pid_t) -> Result<OwnedFd, Errno> {
    nix::fcntl::open(
        format!("/proc/{tid}/cwd").as_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|_| Errno::EACCES)
}

/// What a connect on a socket that is not IP may reach (see the module
/// docs): `raw` is the caller's address, `domain` its socket's family.
fn other_target(tid: libc::pid_t, domain: i32, raw: &[u8]) -> Result<Target, Errno> {
    let family = i32::from(u16::from_ne_bytes([raw[0], raw[1]]));
    if domain == libc::AF_NETLINK && family == libc::AF_NETLINK {
        // struct sockaddr_nl: family, pad (2), nl_pid (4), nl_groups (4).
        // The kernel (port 0, no groups) is what the run may reach; another
        // process's port or a multicast group needs CAP_NET_ADMIN for
        // NETLINK_ROUTE, and once connected send() goes there unchecked.
        let word = |i: usize| {
            raw.get(i..i + 4)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        return match (word(4), word(8)) {
            (Some(0), Some(0)) => Ok(Target::Raw {
                addr: raw.to_vec(),
                cwd: None,
            }),
            (Some(_), Some(_)) => Err(Errno::EPERM),
            _ => Err(Errno::EINVAL),
        };
    }
    if domain != libc::AF_UNIX || family != libc::AF_UNIX {
        // A disconnect, netlink and the like, or an address the socket's
        // family does not take (the kernel refuses it on this very socket):
        // no path, no scope.
        return Ok(Target::Raw {
            addr: raw.to_vec(),
            cwd: None,
        });
    }
    match raw.get(2) {
        // Abstract (or unnamed): only Landlock's scope tells the run's from the host's.
        None | Some(0) => Err(Errno::EACCES),
        Some(b'/') => Ok(Target::Raw {
            addr: raw.to_vec(),
            cwd: None,
        }),
        Some(_) => Ok(Target::Raw {
            addr: raw.to_vec(),
            cwd: Some(caller_cwd(tid)?),
        }),
    }
}

impl Connect {
    /// Make the connect (or listen); the caller's answer. On a thread of its
    /// own, which it lowers to the caller's ids and no capabilities for good,
    /// and whose working directory a relative Unix path changes.
    pub fn run(self) -> Reply {
        use std::os::fd::AsRawFd;
        if let Err(e) = crate::sys::lower_this_thread(self.ids.0, self.ids.1) {
            tracing::warn!(
                "network guard: cannot drop to the run's privileges: {e}; the call is refused"
            );
            return Reply::Fail(libc::EACCES);
        }
        let fd = self.sock.as_raw_fd();
        let to = match self.op {
            Op::To(to) => to,
            Op::Bind {
                addr,
                cwd,
                umask,
                ruleset,
            } => return bind(&self.sock, &addr, cwd.as_ref(), umask, ruleset.as_deref()),
            Op::Listen(backlog) => {
                let r = nix::sys::socket::Backlog::new(backlog)
                    .map_err(|_| Errno::EINVAL)
                    .and_then(|b| nix::sys::socket::listen(&self.sock, b));
                return match r {
                    Ok(()) => Reply::Value(0),
                    Err(e) => Reply::Fail(e as i32),
                };
            }
        };
        let r = match &to {
            Target::V4(a) => nix::sys::socket::connect(fd, a),
            Target::V6(a) => nix::sys::socket::connect(fd, a),
            Target::Raw { addr, cwd } => {
                let moved = match cwd {
                    None => Ok(()),
                    Some(dir) => nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                        .and_then(|()| nix::unistd::fchdir(dir)),
                };
                moved.and_then(|()| notify::connect_raw(self.sock.as_fd(), addr))
            }
        };
        match r {
            Ok(()) => Reply::Value(0),
            Err(e) => Reply::Fail(e as i32),
        }
    }
}

/// Make the caller's bind on its socket `sock` (already on a thread lowered
/// to its ids): under the run's Landlock `ruleset`, from its working
/// directory `cwd` and with its `umask`, in a file-system context of this
/// thread's own. Where `unshare(CLONE_FS)` is refused (a container's
/// RuntimeDefault seccomp profile), a relative name is bound through
/// `/proc/self/fd/CWD/` and the umask is applied to the socket before the
/// bind (the file then also loses what capsule's own umask masks).
fn bind(
    sock: &OwnedFd,
    addr: &[u8],
    cwd: Option<&OwnedFd>,
    umask: u32,
    ruleset: Option<&OwnedFd>,
) -> Reply {
    let own_fs = nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS).is_ok();
    let mode = nix::sys::stat::Mode::from_bits_truncate(umask & 0o777);
    let r = match ruleset {
        Some(rs) => crate::sys::landlock_this_thread(rs.as_fd()),
        None => Ok(()),
    }
    .and_then(|()| {
        if own_fs {
            if let Some(dir) = cwd {
                nix::unistd::fchdir(dir)?;
            }
            nix::sys::stat::umask(mode);
            notify::bind_raw(sock.as_fd(), addr)
        } else {
            nix::sys::stat::fchmod(
                sock.as_fd(),
                !mode & nix::sys::stat::Mode::from_bits_truncate(0o777),
            )?;
            match cwd {
                Some(dir) => notify::bind_raw(sock.as_fd(), &through_proc(dir, addr)?),
                None => notify::bind_raw(sock.as_fd(), addr),
            }
        }
    });
    match r {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Fail(e as i32),
    }
}

/// A Unix address `addr` with a relative name, made absolute through this
/// process's descriptor `dir` of the caller's working directory.
fn through_proc(dir: &OwnedFd, addr: &[u8]) -> Result<Vec<u8>, Errno> {
    use std::os::fd::AsRawFd;
    let mut out = addr[..2].to_vec();
    out.extend_from_slice(format!("/proc/self/fd/{}/", dir.as_raw_fd()).as_bytes());
    out.extend_from_slice(&addr[2..]);
    // struct sockaddr_un: the family and 108 bytes of path.
    if out.len() > 2 + 108 {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(out)
}

/// The connect threads in flight, and the CPU time (nanoseconds) the ended
/// ones spent, which counts against the guards' CPU budget.
#[derive(Default)]
pub struct Threads {
    pub in_flight: AtomicUsize,
    pub cpu_nanos: AtomicU64,
}

/// Serve a connect on a thread of its own (at most [`MAX_BLOCKING`] at once).
pub fn serve_connect(listener: &Arc<Listener>, id: u64, conn: Connect, threads: &Arc<Threads>) {
    let in_flight = &threads.in_flight;
    if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_BLOCKING {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        answer(listener, id, Reply::Fail(libc::EAGAIN));
        return;
    }
    let (l, t) = (Arc::clone(listener), Arc::clone(threads));
    let spawned = std::thread::Builder::new()
        .name("capsule-connect".into())
        .spawn(move || {
            let _ = crate::sys::block_all_signals();
            answer(&l, id, conn.run());
            let spent = crate::sys::thread_cpu_time().unwrap_or_default();
            t.cpu_nanos.fetch_add(
                u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            t.in_flight.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        in_flight.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!("network guard: no thread for a connect: {e}");
        answer(listener, id, Reply::Fail(libc::EAGAIN));
    }
}

/// Answer notification `id`; a caller that is gone needs none.
pub fn answer(listener: &Listener, id: u64, reply: Reply) {
    match listener.reply(id, reply) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => tracing::warn!("network guard: answering: {e}"),
    }
}

/// Who a thread is, from its /proc/TID/status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Caller {
    tgid: libc::pid_t,
    euid: u32,
    fsuid: u32,
    egid: u32,
    fsgid: u32,
    /// Its umask (`Umask:`, Linux 4.7+; 0o022 where not shown).
    umask: u32,
}

/// The thread group and ids of thread `tid` (`Tgid:`, `Uid:` and `Gid:`
/// of /proc/TID/status: real, effective, saved, file-system).
fn caller(tid: libc::pid_t) -> Option<Caller> {
    parse_caller(&std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?)
}

fn parse_caller(status: &str) -> Option<Caller> {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let ids = |name: &str| -> Option<(u32, u32)> {
        let v: Vec<u32> = field(name)?
            .split_whitespace()
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        Some((*v.get(1)?, *v.get(3)?))
    };
    let (euid, fsuid) = ids("Uid:")?;
    let (egid, fsgid) = ids("Gid:")?;
    Some(Caller {
        tgid: field("Tgid:")?.trim().parse().ok()?,
        euid,
        fsuid,
        egid,
        fsgid,
        umask: field("Umask:")
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap_or(0o022),
    })
}

/// Whether descriptor `fd` of thread `tid` is the file `sock` (its inode,
/// as `/proc/TID/fd/FD` names it: "socket:[INODE]").
fn same_file(tid: libc::pid_t, fd: i32, sock: &OwnedFd) -> bool {
    let Ok(link) = std::fs::read_link(format!("/proc/{tid}/fd/{fd}")) else {
        return false;
    };
    let Ok(st) = nix::sys::stat::fstat(sock) else {
        return false;
    };
    link.to_str()
        .and_then(|s| s.strip_prefix("socket:["))
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|s| s.parse::<u64>().ok())
        .is_some_and(|ino| ino == st.st_ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> NetGuard {
        NetGuard {
            proxy_port: Some(4321),
            ruleset: None,
        }
    }

    fn v4(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[4..8].copy_from_slice(&ip);
        b
    }

    fn v6(ip: Ipv6Addr, port: u16) -> Vec<u8> {
        let mut b = vec![0u8; 28];
        b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[8..24].copy_from_slice(&ip.octets());
        b
    }

    #[test]
    fn only_the_proxy_is_a_target() {
        let g = guard();
        assert!(g
            .proxy_target(libc::AF_INET, &v4([127, 0, 0, 1], 4321))
            .is_some());
        for (ip, port) in [
            ([127, 0, 0, 1], 4322),
            ([127, 0, 0, 2], 4321),
            ([0, 0, 0, 0], 4321),
            ([10, 0, 0, 1], 4321),
        ] {
            assert!(
                g.proxy_target(libc::AF_INET, &v4(ip, port)).is_none(),
                "{ip:?}:{port}"
            );
        }
        // Too short, or the family of the other socket type.
        assert!(g
            .proxy_target(libc::AF_INET, &v4([127, 0, 0, 1], 4321)[..8])
            .is_none());
        assert!(g
            .proxy_target(libc::AF_INET6, &v4([127, 0, 0, 1], 4321))
            .is_none());
        let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped();
        assert!(g.proxy_target(libc::AF_INET6, &v6(mapped, 4321)).is_some());
        assert!(g.proxy_target(libc::AF_INET6, &v6(mapped, 1)).is_none());
        assert!(g
            .proxy_target(libc::AF_INET6, &v6(Ipv6Addr::LOCALHOST, 4321))
            .is_none());
        assert!(g.proxy_target(libc::AF_INET, &v6(mapped, 4321)).is_none());
        assert!(g
            .proxy_target(libc::AF_INET6, &v6(mapped, 4321)[..20])
            .is_none());
        assert!(g.proxy_target(libc::AF_INET, &[]).is_none());
    }

    #[test]
    fn other_families_are_connected_by_capsule_and_abstract_unix_is_refused() {
        let me = std::process::id() as libc::pid_t;
        let unix = |path: &[u8]| {
            let mut b = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
            b.extend_from_slice(path);
            b
        };
        assert!(matches!(
            other_target(me, libc::AF_UNIX, &unix(b"/run/x.sock")),
            Ok(Target::Raw { cwd: None, .. })
        ));
        assert!(matches!(
            other_target(me, libc::AF_UNIX, &unix(b"rel.sock")),
            Ok(Target::Raw { cwd: Some(_), .. })
        ));
        assert!(matches!(
            other_target(me, libc::AF_UNIX, &unix(b"\0abstract")),
            Err(Errno::EACCES)
        ));
        assert!(matches!(
            other_target(me, libc::AF_UNIX, &unix(b"")),
            Err(Errno::EACCES)
        ));
        let unspec = (libc::AF_UNSPEC as u16).to_ne_bytes().to_vec();
        assert!(matches!(
            other_target(me, libc::AF_UNIX, &unspec),
            Ok(Target::Raw { cwd: None, .. })
        ));
        // An IP address on a Unix socket: the kernel's answer, on that socket.
        let mut inet = (libc::AF_INET as u16).to_ne_bytes().to_vec();
        inet.extend_from_slice(&[0x1f, 0x90, 127, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(
            other_target(me, libc::AF_UNIX, &inet),
            Ok(Target::Raw { cwd: None, .. })
        ));
        // Netlink: the kernel only (port 0, no groups).
        let nl = |port: u32, groups: u32| {
            let mut b = (libc::AF_NETLINK as u16).to_ne_bytes().to_vec();
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&port.to_ne_bytes());
            b.extend_from_slice(&groups.to_ne_bytes());
            b
        };
        assert!(matches!(
            other_target(me, libc::AF_NETLINK, &nl(0, 0)),
            Ok(Target::Raw { cwd: None, .. })
        ));
        assert!(matches!(
            other_target(me, libc::AF_NETLINK, &nl(4242, 0)),
            Err(Errno::EPERM)
        ));
        assert!(matches!(
            other_target(me, libc::AF_NETLINK, &nl(0, 1)),
            Err(Errno::EPERM)
        ));
        assert!(matches!(
            other_target(me, libc::AF_NETLINK, &nl(0, 0)[..8]),
            Err(Errno::EINVAL)
        ));
        assert!(matches!(
            other_target(me, libc::AF_NETLINK, &unspec),
            Ok(Target::Raw { cwd: None, .. })
        ));
    }

    #[test]
    fn the_callers_ids_are_read_from_its_status() {
        let c = parse_caller("Name:\tx\nTgid:\t41\nPid:\t42\nUid:\t1\t2\t3\t4\nGid:\t5\t6\t7\t8\n");
        assert_eq!(
            c,
            Some(Caller {
                tgid: 41,
                euid: 2,
                fsuid: 4,
                egid: 6,
                fsgid: 8,
                umask: 0o022,
            })
        );
        assert_eq!(parse_caller("Tgid:\t41\nUid:\t1\t2\n"), None);
        let me = caller(std::process::id() as libc::pid_t).expect("own status");
        assert_eq!(me.euid, nix::unistd::geteuid().as_raw());
        assert_eq!(me.fsgid, nix::unistd::getegid().as_raw());
    }

    #[test]
    fn a_thread_lowered_for_the_run_keeps_nothing_and_the_others_keep_theirs() {
        let caps = || {
            std::fs::read_to_string("/proc/thread-self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
                .unwrap()
        };
        let before = caps();
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        let lowered =
            std::thread::spawn(move || crate::sys::lower_this_thread(uid, gid).map(|()| caps()))
                .join()
                .unwrap();
        assert_eq!(lowered, Ok("0000000000000000".to_string()));
        assert_eq!(caps(), before, "another thread's capabilities changed");
    }

    #[test]
    fn only_connect_and_listen_are_the_guards() {
        assert!(NetGuard::handles(libc::SYS_connect as i32));
        assert!(NetGuard::handles(libc::SYS_listen as i32));
        assert!(!NetGuard::handles(libc::SYS_kill as i32));
        assert!(NetGuard::handles(libc::SYS_bind as i32));
        assert!(!NetGuard::handles(libc::SYS_accept as i32));
    }

    #[test]
    fn abstract_names_are_not_bound_and_pathnames_are_from_the_callers_directory() {
        let me = std::process::id() as libc::pid_t;
        let unix = |path: &[u8]| {
            let mut b = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
            b.extend_from_slice(path);
            b
        };
        assert!(matches!(
            bind_target(me, libc::AF_UNIX, &unix(b"\0/tmp/.X11-unix/X1")),
            Err(Errno::EACCES)
        ));
        assert!(matches!(
            bind_target(me, libc::AF_UNIX, &unix(b"\0")),
            Err(Errno::EACCES)
        ));
        assert!(matches!(
            bind_target(me, libc::AF_UNIX, &unix(b"")),
            Ok(None)
        ));
        assert!(matches!(
            bind_target(me, libc::AF_UNIX, &unix(b"/run/x.sock")),
            Ok(None)
        ));
        assert!(matches!(
            bind_target(me, libc::AF_UNIX, &unix(b"rel.sock")),
            Ok(Some(_))
        ));
        // Another family's address: the kernel's answer on that socket.
        assert!(matches!(
            bind_target(me, libc::AF_NETLINK, &unix(b"\0x")),
            Ok(None)
        ));
    }
}

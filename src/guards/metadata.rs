//! The metadata guard: without a mount namespace (no read-only view of the
//! host) the run may change the mode, owner, times and xattrs only of what a
//! write grant covers.
//!
//! Landlock has no hook for chmod, chown, utimensat or setxattr: a run
//! without the view changed those of its user's own files outside every
//! grant — by path, or through any descriptor it could open (a read grant
//! suffices) — and as root those of every root-owned file. So the notify
//! filter's metadata part (`sandbox::seccomp::signals`) sends every call of
//! those families here, and the supervisor makes each call itself:
//!
//! 1. it takes the caller's starting point once: its working directory or
//!    the descriptor it named (`/proc/TID/cwd`, `/proc/TID/fd/N`), then
//!    checks that the caller still waits (the tid is still its own);
//! 2. on a thread of its own that holds the run's credentials (fsuid and
//!    fsgid) and no capabilities, it resolves the path from there once, to
//!    an `O_PATH` descriptor (following the last link as the call would),
//!    as the kernel would have for the run (same root, same permissions on
//!    the way) but through no magic link (`openat2` with
//!    RESOLVE_NO_MAGICLINKS: `/proc/self` would be capsule's): the caller's
//!    own descriptors by their usual names (`/proc/self/fd/N`, `/dev/fd/N`,
//!    `/dev/stdin`) are taken from the caller, any other path through a
//!    magic link fails with ELOOP;
//! 3. it checks that object: where its name (`/proc/thread-self/fd/N`) lies
//!    beneath a write grant and beneath no `deny`; an object no path reaches
//!    (a memfd, an unlinked file, a pipe or socket) is the run's own; a name
//!    that was deleted while the object keeps another is refused, and so is
//!    a device (the system grants' /dev/null is given for its data);
//! 4. it makes the call on that very object, with the caller's copied
//!    arguments, and answers with the result. Otherwise EACCES.
//!
//! Nothing the caller can change after step 1 decides: the path is resolved
//! once, and the object checked is the object changed. setxattrat,
//! removexattrat and file_setattr (their arguments behind a struct) fail
//! with ENOSYS in the filter, and the FS_IOC_SETFLAGS/FS_IOC_FSSETXATTR
//! ioctls with EPERM, as no guard decides them.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;

use nix::errno::Errno;

use crate::sys::meta;
use crate::sys::notify::{Listener, Notification, Reply};

/// XATTR_NAME_MAX and XATTR_SIZE_MAX (linux/limits.h).
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65536;
/// PATH_MAX, with its NUL.
const PATH_MAX: usize = 4096;

/// What may be changed: the plan's write grants and its carve-outs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    pub write: Vec<PathBuf>,
    pub deny: Vec<PathBuf>,
}

impl Grants {
    /// Whether the object named `name` (as `/proc/self/fd` shows it) may be
    /// changed; `linked`: whether any name still reaches it.
    pub fn allows(&self, name: &str, linked: bool) -> bool {
        if !name.starts_with('/') || !linked {
            // A pipe, socket or anonymous inode, or an object no path
            // reaches any more (a memfd, an unlinked file): the run's own.
            return true;
        }
        if name.ends_with(" (deleted)") {
            // Its name went away but another still reaches it: unknown where.
            return false;
        }
        let p = std::path::Path::new(name);
        !self.deny.iter().any(|d| p.starts_with(d)) && self.write.iter().any(|g| p.starts_with(g))
    }
}

/// Where the call names its object.
enum Target {
    /// A path from a starting point (the caller's cwd or one of its
    /// descriptors); `follow`: whether a last link is followed; `empty`:
    /// whether an empty path means the starting point itself.
    Path {
        start: OwnedFd,
        path: CString,
        follow: bool,
        empty: bool,
        /// The calling thread (for its `/proc/self/fd/N`).
        caller: libc::pid_t,
    },
    /// One of the caller's descriptors, reopened as O_PATH.
    Fd(OwnedFd),
}

/// What the call changes.
enum Change {
    Times(Option<[libc::timespec; 2]>),
    Mode(u32),
    Owner(u32, u32),
    SetXattr {
        name: CString,
        value: Vec<u8>,
        flags: i32,
    },
    RemoveXattr(CString),
}

type Job = Box<dyn FnOnce() -> Reply + Send>;

/// The guard: the grants and the thread that acts with the run's credentials.
pub struct MetaGuard {
    grants: std::sync::Arc<Grants>,
    jobs: mpsc::SyncSender<(Job, mpsc::SyncSender<Reply>)>,
    /// The credentialed thread's CPU time so far (nanoseconds, after each
    /// call it made): it counts toward the guards' CPU budget.
    cpu_nanos: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// The syscalls the guard serves, by name (the filter notifies these).
pub use crate::sandbox::seccomp::signals::META_NOTIFIED as NOTIFIED;

fn nr_of(name: &str) -> Option<i64> {
    crate::sandbox::seccomp::native_nr(name)
}

impl MetaGuard {
    /// Start the thread that holds the run's credentials: capsule's own
    /// uid and gid without a user namespace (the run keeps them), and no
    /// capabilities. If it cannot drop them, every call is refused.
    pub fn start(grants: Grants) -> std::io::Result<MetaGuard> {
        let (tx, rx) = mpsc::sync_channel::<(Job, mpsc::SyncSender<Reply>)>(0);
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let cpu_nanos = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let spent = cpu_nanos.clone();
        std::thread::Builder::new()
            .name("capsule-meta".into())
            .spawn(move || {
                let _ = crate::sys::block_all_signals();
                let ready = meta::become_run(uid, gid);
                if let Err(e) = &ready {
                    tracing::warn!("metadata guard: cannot take the run's credentials ({e}); every call is refused");
                }
                for (job, answer) in rx {
                    let reply = match ready {
                        Ok(()) => job(),
                        Err(_) => Reply::Fail(libc::EPERM),
                    };
                    // Before answering: the notify loop reads it right after.
                    let t = crate::sys::thread_cpu_time().unwrap_or(std::time::Duration::MAX);
                    spent.store(
                        u64::try_from(t.as_nanos()).unwrap_or(u64::MAX),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    let _ = answer.send(reply);
                }
            })?;
        Ok(MetaGuard {
            grants: std::sync::Arc::new(grants),
            jobs: tx,
            cpu_nanos,
        })
    }

    /// The CPU time the credentialed thread has spent (as of its last call).
    pub fn cpu(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.cpu_nanos.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Whether notification number `nr` is the guard's.
    pub fn handles(nr: i32) -> bool {
        let nr = i64::from(nr);
        NOTIFIED.iter().any(|n| nr_of(n) == Some(nr))
    }

    /// Decide and make one call.
    pub fn serve(&self, listener: &Listener, n: &Notification) -> Reply {
        match self.prepare(listener, n) {
            Ok((target, change)) => {
                let grants = self.grants.clone();
                let job: Job = Box::new(move || act(&grants, target, change));
                let (atx, arx) = mpsc::sync_channel(1);
                if self.jobs.send((job, atx)).is_err() {
                    return Reply::Fail(libc::EPERM);
                }
                arx.recv().unwrap_or(Reply::Fail(libc::EPERM))
            }
            Err(e) => Reply::Fail(e as i32),
        }
    }

    /// Read the call: its starting point (taken now, once) and its change.
    fn prepare(&self, listener: &Listener, n: &Notification) -> Result<(Target, Change), Errno> {
        let (target, change) = Call::of(n).decode()?;
        // The starting point was taken through the caller's tid: it is the
        // caller's only if the caller still waits (no pid reuse in between).
        if !listener.id_valid(n.id) {
            return Err(Errno::ESRCH);
        }
        Ok((target, change))
    }
}

/// One notified call as the guard reads it: the calling thread, the call's
/// number and its raw arguments.
struct Call {
    tid: libc::pid_t,
    nr: i64,
    a: [u64; 6],
}

impl Call {
    fn of(n: &Notification) -> Call {
        Call {
            tid: n.pid as libc::pid_t,
            nr: i64::from(n.nr),
            a: n.args,
        }
    }

    /// Whether the call is `name`.
    fn is(&self, name: &str) -> bool {
        nr_of(name) == Some(self.nr)
    }

    /// Argument `i` as a C int.
    fn int(&self, i: usize) -> i32 {
        self.a[i] as u32 as i32
    }

    /// The path at `addr` from `dirfd` (the caller's cwd for `AT_FDCWD` or
    /// an absolute path), its starting point taken now.
    fn path_at(&self, dirfd: i32, addr: u64, follow: bool, empty: bool) -> Result<Target, Errno> {
        let tid = self.tid;
        if addr == 0 {
            return Err(Errno::EFAULT);
        }
        let path = read_cstr(tid, addr, PATH_MAX, Errno::ENAMETOOLONG)?;
        if path.as_bytes().is_empty() && !empty {
            return Err(Errno::ENOENT);
        }
        let start = if dirfd == libc::AT_FDCWD || path.as_bytes().first() == Some(&b'/') {
            open_proc(&format!("/proc/{tid}/cwd"))?
        } else {
            open_proc(&format!("/proc/{tid}/fd/{dirfd}"))?
        };
        Ok(Target::Path {
            start,
            path,
            follow,
            empty,
            caller: tid,
        })
    }

    /// The caller's descriptor `fd`, taken now.
    fn fd(&self, fd: i32) -> Result<Target, Errno> {
        let tid = self.tid;
        if fd < 0 {
            return Err(Errno::EBADF);
        }
        open_proc(&format!("/proc/{tid}/fd/{fd}")).map(Target::Fd)
    }

    /// Which call it is: its target and its change.
    fn decode(&self) -> Result<(Target, Change), Errno> {
        let a = self.a;
        let int = |i: usize| self.int(i);
        let is = |name: &str| self.is(name);
        let (target, change) = if is("utime") {
            self.utime()?
        } else if is("utimes") || is("futimesat") {
            self.utimes()?
        } else if is("utimensat") {
            self.utimensat()?
        } else if is("chmod") {
            (
                self.path_at(libc::AT_FDCWD, a[0], true, false)?,
                Change::Mode(int(1) as u32),
            )
        } else if is("fchmod") {
            (self.fd(int(0))?, Change::Mode(int(1) as u32))
        } else if is("fchmodat") {
            (
                self.path_at(int(0), a[1], true, false)?,
                Change::Mode(int(2) as u32),
            )
        } else if is("fchmodat2") {
            let (follow, empty) =
                flags_at(int(3), libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
            (
                self.path_at(int(0), a[1], follow, empty)?,
                Change::Mode(int(2) as u32),
            )
        } else if is("chown") || is("lchown") {
            (
                self.path_at(libc::AT_FDCWD, a[0], is("chown"), false)?,
                Change::Owner(int(1) as u32, int(2) as u32),
            )
        } else if is("fchown") {
            (
                self.fd(int(0))?,
                Change::Owner(int(1) as u32, int(2) as u32),
            )
        } else if is("fchownat") {
            let (follow, empty) =
                flags_at(int(4), libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
            (
                self.path_at(int(0), a[1], follow, empty)?,
                Change::Owner(int(2) as u32, int(3) as u32),
            )
        } else if is("setxattr") || is("lsetxattr") || is("fsetxattr") {
            self.setxattr()?
        } else if is("removexattr") || is("lremovexattr") || is("fremovexattr") {
            self.removexattr()?
        } else {
            return Err(Errno::ENOSYS);
        };
        Ok((target, change))
    }

    /// utime(path, times): whole seconds.
    fn utime(&self) -> Result<(Target, Change), Errno> {
        let (tid, a) = (self.tid, self.a);
        let times = if a[1] == 0 {
            None
        } else {
            let mut b = [0u8; 16];
            read(tid, a[1], &mut b)?;
            let t = |i: usize| i64::from_ne_bytes(b[i..i + 8].try_into().expect("8"));
            Some([ts(t(0), 0), ts(t(8), 0)])
        };
        Ok((
            self.path_at(libc::AT_FDCWD, a[0], true, false)?,
            Change::Times(times),
        ))
    }

    /// utimes(path, tv) and futimesat(dirfd, path, tv): timevals.
    fn utimes(&self) -> Result<(Target, Change), Errno> {
        let (tid, a) = (self.tid, self.a);
        let (dirfd, p, tv) = if self.is("utimes") {
            (libc::AT_FDCWD, a[0], a[1])
        } else {
            (self.int(0), a[1], a[2])
        };
        let times = if tv == 0 {
            None
        } else {
            let mut b = [0u8; 32];
            read(tid, tv, &mut b)?;
            let t = |i: usize| i64::from_ne_bytes(b[i..i + 8].try_into().expect("8"));
            let mut out = [ts(0, 0); 2];
            for (k, slot) in out.iter_mut().enumerate() {
                let (sec, usec) = (t(16 * k), t(16 * k + 8));
                if !(0..1_000_000).contains(&usec) {
                    return Err(Errno::EINVAL);
                }
                *slot = ts(sec, usec * 1000);
            }
            Some(out)
        };
        let target = if p == 0 && !self.is("utimes") {
            self.fd(dirfd)?
        } else {
            self.path_at(dirfd, p, true, false)?
        };
        Ok((target, Change::Times(times)))
    }

    /// utimensat(dirfd, path, times, flags): timespecs; a NULL path means
    /// the descriptor itself.
    fn utimensat(&self) -> Result<(Target, Change), Errno> {
        let (tid, a) = (self.tid, self.a);
        let int = |i: usize| self.int(i);
        let (follow, empty) = flags_at(int(3), libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH)?;
        let times = if a[2] == 0 {
            None
        } else {
            let mut b = [0u8; 32];
            read(tid, a[2], &mut b)?;
            let t = |i: usize| i64::from_ne_bytes(b[i..i + 8].try_into().expect("8"));
            Some([ts(t(0), t(8)), ts(t(16), t(24))])
        };
        let target = if a[1] == 0 {
            if int(0) == libc::AT_FDCWD {
                return Err(Errno::EFAULT);
            }
            self.fd(int(0))?
        } else {
            self.path_at(int(0), a[1], follow, empty)?
        };
        Ok((target, Change::Times(times)))
    }

    /// setxattr, lsetxattr, fsetxattr: the name and value copied now.
    fn setxattr(&self) -> Result<(Target, Change), Errno> {
        let (tid, a) = (self.tid, self.a);
        let name = read_cstr(tid, a[1], XATTR_NAME_MAX + 1, Errno::ERANGE)?;
        if name.as_bytes().is_empty() {
            return Err(Errno::ERANGE);
        }
        let size = a[3] as usize;
        if size > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        let mut value = vec![0u8; size];
        if size > 0 {
            read(tid, a[2], &mut value)?;
        }
        let change = Change::SetXattr {
            name,
            value,
            flags: self.int(4),
        };
        let target = if self.is("fsetxattr") {
            self.fd(self.int(0))?
        } else {
            self.path_at(libc::AT_FDCWD, a[0], self.is("setxattr"), false)?
        };
        Ok((target, change))
    }

    /// removexattr, lremovexattr, fremovexattr: the name copied now.
    fn removexattr(&self) -> Result<(Target, Change), Errno> {
        let (tid, a) = (self.tid, self.a);
        let name = read_cstr(tid, a[1], XATTR_NAME_MAX + 1, Errno::ERANGE)?;
        let target = if self.is("fremovexattr") {
            self.fd(self.int(0))?
        } else {
            self.path_at(libc::AT_FDCWD, a[0], self.is("removexattr"), false)?
        };
        Ok((target, Change::RemoveXattr(name)))
    }
}

/// The `*at` flags of a call (only `allowed` may be set): whether a last
/// link is followed, whether an empty path means the starting point.
fn flags_at(flags: i32, allowed: i32) -> Result<(bool, bool), Errno> {
    if flags & !allowed != 0 {
        return Err(Errno::EINVAL);
    }
    Ok((
        flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        flags & libc::AT_EMPTY_PATH != 0,
    ))
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    }
}

/// Open one of the caller's objects through `/proc` (its cwd or a
/// descriptor) as O_PATH. No access to its /proc entries: EACCES.
fn open_proc(path: &str) -> Result<OwnedFd, Errno> {
    let c = CString::new(path).map_err(|_| Errno::EINVAL)?;
    let root = std::fs::File::open("/").map_err(|_| Errno::EACCES)?;
    meta::open_path(root.as_fd(), &c, 0).map_err(|e| match e {
        Errno::ENOENT => Errno::EBADF,
        Errno::EPERM => Errno::EACCES,
        e => e,
    })
}

/// The descriptor number a path names when it is one of the caller's own
/// descriptors by a usual name: `/proc/self/fd/N`, `/proc/thread-self/fd/N`,
/// `/proc/TID/fd/N` (the caller's), `/dev/fd/N`, `/dev/stdin|stdout|stderr`.
fn own_fd_path(path: &std::ffi::CStr, caller: libc::pid_t) -> Option<i32> {
    let p = path.to_str().ok()?;
    let std = [("/dev/stdin", 0), ("/dev/stdout", 1), ("/dev/stderr", 2)];
    if let Some((_, n)) = std.iter().find(|(s, _)| *s == p) {
        return Some(*n);
    }
    let own = format!("/proc/{caller}/fd/");
    let n = [
        "/proc/self/fd/",
        "/proc/thread-self/fd/",
        "/dev/fd/",
        own.as_str(),
    ]
    .iter()
    .find_map(|pre| p.strip_prefix(pre))?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// Read `buf.len()` bytes of the caller's memory.
fn read(tid: libc::pid_t, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    super::procfs::read_remote(tid, addr, buf).map_err(|e| {
        if e == Errno::EACCES {
            Errno::EFAULT
        } else {
            e
        }
    })
}

/// A NUL-terminated string of at most `max` bytes with its NUL, read a page
/// at a time (a string near the end of a mapping must not fault the read).
fn read_cstr(tid: libc::pid_t, addr: u64, max: usize, too_long: Errno) -> Result<CString, Errno> {
    let mut out = Vec::with_capacity(64);
    let mut at = addr;
    while out.len() < max {
        let to_page_end = 4096 - (at % 4096) as usize;
        let want = to_page_end.min(max - out.len());
        let mut buf = vec![0u8; want];
        read(tid, at, &mut buf)?;
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return CString::new(out).map_err(|_| Errno::EINVAL);
        }
        out.extend_from_slice(&buf);
        at += want as u64;
    }
    Err(too_long)
}

/// On the guard's credentialed thread: resolve, check, change.
fn act(grants: &Grants, target: Target, change: Change) -> Reply {
    match try_act(grants, target, change) {
        Ok(()) => Reply::Value(0),
        Err(e) => Reply::Fail(e as i32),
    }
}

fn try_act(grants: &Grants, target: Target, change: Change) -> Result<(), Errno> {
    let obj = match target {
        Target::Fd(fd) => fd,
        Target::Path {
            start,
            path,
            follow,
            empty,
            caller,
        } => {
            if path.as_bytes().is_empty() {
                if !empty {
                    return Err(Errno::ENOENT);
                }
                start
            } else {
                let extra = if follow { 0 } else { libc::O_NOFOLLOW };
                match meta::open_beneath_magic(start.as_fd(), &path, extra) {
                    // Through a magic link: /proc/self here would be
                    // capsule's own. The caller's own descriptors by their
                    // usual names are taken from the caller; nothing else.
                    Err(Errno::ELOOP) => match own_fd_path(&path, caller) {
                        Some(fd) => open_proc(&format!("/proc/{caller}/fd/{fd}"))?,
                        None => return Err(Errno::ELOOP),
                    },
                    r => r?,
                }
            }
        }
    };
    let own = format!("/proc/thread-self/fd/{}", obj.as_raw_fd());
    let name = std::fs::read_link(&own).map_err(|_| Errno::EACCES)?;
    let st = nix::sys::stat::fstat(obj.as_fd())?;
    let name = name.to_string_lossy();
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFCHR || kind == libc::S_IFBLK {
        // A device is the host's, whatever grant lets the run use it.
        return Err(Errno::EACCES);
    }
    if !grants.allows(&name, st.st_nlink > 0) {
        tracing::debug!("metadata guard: {name} lies outside every write grant");
        return Err(Errno::EACCES);
    }
    let symlink = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
    let own_c = CString::new(own).map_err(|_| Errno::EINVAL)?;
    match change {
        Change::Times(times) => match meta::utimens(obj.as_fd(), times.as_ref()) {
            // Before Linux 5.8 utimensat knows no AT_EMPTY_PATH.
            Err(Errno::EINVAL) if !symlink => meta::utimens_path(&own_c, times.as_ref()),
            r => r,
        },
        Change::Mode(mode) => {
            if mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
                return Err(Errno::EPERM);
            }
            if symlink {
                return Err(Errno::EOPNOTSUPP);
            }
            meta::chmod_path(&own_c, mode)
        }
        Change::Owner(uid, gid) => meta::chown(obj.as_fd(), uid, gid),
        Change::SetXattr { name, value, flags } => {
            if symlink {
                return Err(Errno::EPERM);
            }
            meta::setxattr(&own_c, &name, &value, flags)
        }
        Change::RemoveXattr(name) => {
            if symlink {
                return Err(Errno::EPERM);
            }
            meta::removexattr(&own_c, &name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_a_write_grant_covers_may_change() {
        let g = Grants {
            write: vec!["/home/u/ws".into(), "/tmp/capsule-1".into()],
            deny: vec!["/home/u/ws/.env".into()],
        };
        assert!(g.allows("/home/u/ws", true));
        assert!(g.allows("/home/u/ws/a/b", true));
        assert!(!g.allows("/home/u/wsx", true));
        assert!(!g.allows("/home/u/.bashrc", true));
        assert!(!g.allows("/home/u/ws/.env", true));
        assert!(!g.allows("/home/u/ws/.env/x", true));
        assert!(!g.allows("/etc/shadow", true));
        // A name deleted while another still reaches the object: refused.
        assert!(!g.allows("/home/u/ws/f (deleted)", true));
        // The run's own objects: no name reaches them.
        assert!(g.allows("/memfd:x (deleted)", false));
        assert!(g.allows("pipe:[1234]", true));
        assert!(g.allows("socket:[1234]", true));
        assert!(g.allows("anon_inode:[eventfd]", true));
    }

    #[test]
    fn every_notified_call_is_handled() {
        for name in NOTIFIED {
            if let Some(nr) = nr_of(name) {
                assert!(MetaGuard::handles(nr as i32), "{name}");
            }
        }
        assert!(!MetaGuard::handles(libc::SYS_read as i32));
    }
}

//! seccomp user notification: the supervisor's side of the notify filter's
//! listener (`guards::notify_loop`, `guards::network`), the probe that
//! says whether a child of this process can get such a listener at all, and
//! what the network guard needs to act on a notified call: the caller's
//! socket (pidfd_getfd) and the address it passed (process_vm_readv).

use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;

use super::raw::{self, SockFilter};

/// One notification: a call of the run that waits for the supervisor's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    pub id: u64,
    /// The calling thread, in capsule's pid namespace.
    pub pid: u32,
    pub nr: i32,
    pub arch: u32,
    pub args: [u64; 6],
}

/// The answer to a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Let the kernel run the call as made (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
    Continue,
    /// Fail the call with this errno (positive).
    Fail(i32),
    /// The call returns this value: the supervisor made it itself.
    Value(i64),
}

/// A seccomp listener descriptor.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    /// The kernel's sizes of `struct seccomp_notif` and `struct seccomp_notif_resp`.
    notif_size: usize,
    resp_size: usize,
}

fn notif_sizes() -> Result<libc::seccomp_notif_sizes, Errno> {
    let mut sizes = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: SECCOMP_GET_NOTIF_SIZES writes one struct seccomp_notif_sizes
    // through the pointer, which points at our live local.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_NOTIF_SIZES,
            0 as libc::c_uint,
            std::ptr::addr_of_mut!(sizes),
        )
    };
    Errno::result(rc).map(|_| sizes)
}

/// A zeroed buffer of at least `bytes` bytes, aligned for u64.
fn zeroed(bytes: usize) -> Vec<u64> {
    vec![0u64; bytes.div_ceil(8)]
}

impl Listener {
    /// Take a listener descriptor (from the command stage, over the channel).
    pub fn new(fd: OwnedFd) -> Result<Listener, Errno> {
        let sizes = notif_sizes()?;
        Ok(Listener {
            fd,
            notif_size: usize::from(sizes.seccomp_notif)
                .max(std::mem::size_of::<libc::seccomp_notif>()),
            resp_size: usize::from(sizes.seccomp_notif_resp)
                .max(std::mem::size_of::<libc::seccomp_notif_resp>()),
        })
    }

    /// Receive one notification (blocks if none is pending: poll first).
    /// ENOENT: the caller went away before it could be received.
    pub fn recv(&self) -> Result<Notification, Errno> {
        // The kernel refuses a buffer that is not zeroed (EINVAL).
        let mut buf = zeroed(self.notif_size);
        loop {
            // SAFETY: RECV writes the kernel's struct seccomp_notif
            // (`notif_size` bytes, from SECCOMP_GET_NOTIF_SIZES) into `buf`,
            // which is at least that large and lives for the call.
            let rc = unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_RECV,
                    buf.as_mut_ptr().cast::<c_void>(),
                )
            };
            match Errno::result(rc) {
                Ok(_) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
        // SAFETY: `buf` is u64-aligned, at least size_of::<seccomp_notif>()
        // bytes, and every bit pattern is a valid seccomp_notif (plain integers).
        let n: libc::seccomp_notif = unsafe { std::ptr::read(buf.as_ptr().cast()) };
        Ok(Notification {
            id: n.id,
            pid: n.pid,
            nr: n.data.nr,
            arch: n.data.arch,
            args: n.data.args,
        })
    }

    /// Whether notification `id` is still pending (its caller alive and waiting).
    pub fn id_valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: ID_VALID reads one u64 through the pointer, our live local.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                std::ptr::addr_of_mut!(id).cast::<c_void>(),
            )
        };
        rc == 0
    }

    /// Answer notification `id`. ENOENT: its caller is gone (nothing to do).
    pub fn reply(&self, id: u64, reply: Reply) -> Result<(), Errno> {
        let mut buf = zeroed(self.resp_size);
        let (val, error, flags) = match reply {
            Reply::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
            Reply::Fail(e) => (0, -e.abs(), 0),
            Reply::Value(v) => (v, 0, 0),
        };
        let resp = libc::seccomp_notif_resp {
            id,
            val,
            error,
            flags,
        };
        // SAFETY: `buf` is u64-aligned and at least size_of::<seccomp_notif_resp>() bytes.
        unsafe { std::ptr::write(buf.as_mut_ptr().cast(), resp) };
        loop {
            // SAFETY: SEND reads the kernel's struct seccomp_notif_resp
            // (`resp_size` bytes, the rest zero) from `buf`, alive for the call.
            let rc = unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_SEND,
                    buf.as_mut_ptr().cast::<c_void>(),
                )
            };
            match Errno::result(rc) {
                Ok(_) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl Listener {
    /// Answer notification `id` with a descriptor: `fd` is installed in the
    /// caller (close-on-exec with `cloexec`) and the call returns its number
    /// (SECCOMP_IOCTL_NOTIF_ADDFD with SECCOMP_ADDFD_FLAG_SEND, Linux 5.14+).
    pub fn reply_with_fd(&self, id: u64, fd: BorrowedFd<'_>, cloexec: bool) -> Result<i32, Errno> {
        let addfd = libc::seccomp_notif_addfd {
            id,
            flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
            srcfd: fd.as_raw_fd() as u32,
            newfd: 0,
            newfd_flags: if cloexec { libc::O_CLOEXEC as u32 } else { 0 },
        };
        loop {
            // SAFETY: ADDFD reads one struct seccomp_notif_addfd through the
            // pointer, our live local; `srcfd` is a descriptor we hold.
            let rc = unsafe {
                libc::ioctl(
                    self.fd.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_ADDFD,
                    std::ptr::addr_of!(addfd).cast::<c_void>(),
                )
            };
            match Errno::result(rc) {
                Ok(n) => return Ok(n),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The program the probe child installs, as the clone argument.
struct ProbeArg {
    prog: *const SockFilter,
    len: usize,
}

/// The probe child: set no_new_privs, install the filter with a listener,
/// exit 0 or with the errno. Runs with CLONE_VM | CLONE_VFORK: raw system
/// calls only, no allocation, reads only `*arg`.
extern "C" fn probe_entry(arg: *mut c_void) -> c_int {
    // SAFETY: `probe_listener` passes a pointer to a ProbeArg on its stack,
    // which outlives this child (CLONE_VFORK: the parent sleeps until we exit),
    // describing a live program slice.
    let prog = unsafe {
        let a = &*(arg as *const ProbeArg);
        std::slice::from_raw_parts(a.prog, a.len)
    };
    if let Err(e) = raw::prctl(libc::PR_SET_NO_NEW_PRIVS, 1) {
        raw::exit_group(e & 0xff)
    }
    match raw::seccomp_install_flags(prog, libc::SECCOMP_FILTER_FLAG_NEW_LISTENER) {
        Ok(_) => raw::exit_group(0),
        Err(e) => raw::exit_group(if e & 0xff == 0 {
            libc::EINVAL
        } else {
            e & 0xff
        }),
    }
}

/// Whether a child of this process can install `prog` with a new listener,
/// tried in a short-lived child that shares this address space
/// (CLONE_VM | CLONE_VFORK; nothing of this process is filtered). Also asks
/// the kernel for SECCOMP_RET_USER_NOTIF, and wants Linux 5.5+ (the CONTINUE
/// answer). EBUSY: a filter this process runs under already has a listener.
pub fn probe_listener(prog: &[SockFilter]) -> Result<(), Errno> {
    super::seccomp_action_available(libc::SECCOMP_RET_USER_NOTIF)?;
    if !kernel_at_least(5, 5) {
        return Err(Errno::ENOSYS);
    }
    let stack = super::leaked_stack(64 * 1024)?;
    let arg = ProbeArg {
        prog: prog.as_ptr(),
        len: prog.len(),
    };
    let mask = super::block_all_signals();
    // SAFETY: `probe_entry` follows the CLONE_VM rules (raw system calls
    // only, no allocation, no thread-locals, no panic); `arg` and the program
    // it points to live on this frame, which stays until the child has exited
    // (CLONE_VFORK suspends us until then); the stack is a fresh leaked one.
    let cloned = unsafe {
        super::clone_on_stack(
            libc::CLONE_VM | libc::CLONE_VFORK,
            stack.0,
            probe_entry,
            std::ptr::addr_of!(arg).cast_mut().cast(),
        )
    };
    super::restore_signals(&mask);
    let pid = cloned.map_err(Errno::from_raw)?;
    let status = loop {
        match nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::__WALL),
        ) {
            Err(Errno::EINTR) => continue,
            other => break other?,
        }
    };
    match status {
        nix::sys::wait::WaitStatus::Exited(_, 0) => Ok(()),
        nix::sys::wait::WaitStatus::Exited(_, e) => Err(Errno::from_raw(e)),
        _ => Err(Errno::EPERM),
    }
}

/// Whether the running kernel is at least `major.minor` (uname release).
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(u) = nix::sys::utsname::uname() else {
        return false;
    };
    let release = u.release().to_string_lossy();
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (a, b) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// `pidfd_getfd(pidfd, fd, 0)`: a duplicate of descriptor `fd` of the
/// process `pidfd` refers to (Linux 5.6+; needs ptrace access to it).
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: c_int) -> Result<OwnedFd, Errno> {
    // SAFETY: plain syscall with integer arguments; on success it returns a
    // new descriptor (close-on-exec) that we own.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(own_fd(ret as c_int))
}

/// The address family of socket `fd` (SO_DOMAIN). ENOTSOCK: not a socket.
pub fn socket_domain(fd: BorrowedFd<'_>) -> Result<c_int, Errno> {
    let mut domain: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: SO_DOMAIN writes one int through the pointer, our live local,
    // and its length through `len`, also ours.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            std::ptr::addr_of_mut!(domain).cast::<c_void>(),
            &mut len,
        )
    };
    Errno::result(rc).map(|_| domain)
}

/// What the guards do to a process of the run, each tried once on a child
/// of this process made for it (`trial`), as the guards do it: the kernel's
/// ptrace checks (Yama), a container's seccomp profile (Docker's and
/// containerd's RuntimeDefault allow pidfd_getfd only with CAP_SYS_PTRACE)
/// and a masked /proc answer here exactly as they would to the guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    /// pidfd_open of the child.
    pub pidfd_open: Result<(), Errno>,
    /// pidfd_getfd of one of its descriptors (the network guard).
    pub pidfd_getfd: Result<(), Errno>,
    /// process_vm_readv of its memory (the network guard).
    pub vm_read: Result<(), Errno>,
    /// readlink of its /proc/PID/fd/N (the network guard's same-file check).
    pub proc_fd: Result<(), Errno>,
    /// read of its /proc/PID/syscall (the process guard's in-clone check).
    pub proc_syscall: Result<(), Errno>,
}

/// The trial's child: waits until the parent writes a byte to `fds[0]`'s
/// pipe (or closes it), then exits. A fork (its own copy of the memory):
/// raw system calls only. Dumpable, as the run's processes are after their
/// exec: once a run's init has made capsule's memory non-dumpable (a path
/// left for the next), a child sharing it would answer the trial as the run
/// would not.
extern "C" fn trial_entry(arg: *mut c_void) -> c_int {
    // SAFETY: `trial` passes a pointer to two descriptors on its stack; this
    // child reads its own copy of that stack.
    let fds = unsafe { *(arg as *const [c_int; 2]) };
    raw::close(fds[1]);
    let _ = raw::prctl(libc::PR_SET_DUMPABLE, 1);
    let mut b = [0u8; 1];
    let _ = raw::read(fds[0], &mut b);
    raw::exit_group(0)
}

/// A value the trial reads back from its child's memory.
static TRIAL_MARK: u64 = 0x6361_7073_756c_6521;

/// The guards' operations tried on a child of this process (once per
/// process; a few hundred microseconds, only where a guard is planned).
pub fn trial() -> &'static Trial {
    static TRIED: std::sync::OnceLock<Trial> = std::sync::OnceLock::new();
    TRIED.get_or_init(|| {
        let failed = |e: Errno| Trial {
            pidfd_open: Err(e),
            pidfd_getfd: Err(e),
            vm_read: Err(e),
            proc_fd: Err(e),
            proc_syscall: Err(e),
        };
        match run_trial() {
            Ok(t) => t,
            Err(e) => failed(e),
        }
    })
}

fn run_trial() -> Result<Trial, Errno> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let fds: [c_int; 2] = [r.as_raw_fd(), w.as_raw_fd()];
    let stack = super::leaked_stack(16 * 1024)?;
    let mask = super::block_all_signals();
    // SAFETY: `trial_entry` does raw system calls only (no allocation, no
    // locks, no thread-locals, no panic), as a child forked from a threaded
    // process must; `fds` and the stack are copied into the child. Signals
    // stay blocked in the child.
    let cloned = unsafe {
        super::clone_on_stack(
            0,
            stack.0,
            trial_entry,
            std::ptr::addr_of!(fds).cast_mut().cast(),
        )
    };
    super::restore_signals(&mask);
    let pid = cloned.map_err(Errno::from_raw)?;
    let t = try_on(pid, fds[0]);
    let _ = nix::unistd::write(&w, b"x");
    drop(w);
    while let Err(Errno::EINTR) = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(pid),
        Some(nix::sys::wait::WaitPidFlag::__WALL),
    ) {}
    drop(r);
    Ok(t)
}

/// The guards' operations on the trial child `pid`, whose descriptor `fd`
/// is open.
fn try_on(pid: libc::pid_t, fd: c_int) -> Trial {
    let pidfd = super::pidfd_open(pid);
    let pidfd_getfd = match &pidfd {
        Ok(p) => pidfd_getfd(p.as_fd(), fd).map(drop),
        Err(e) => Err(*e),
    };
    let mut buf = [0u8; 8];
    let vm_read = {
        let remote = [nix::sys::uio::RemoteIoVec {
            base: std::ptr::addr_of!(TRIAL_MARK) as usize,
            len: buf.len(),
        }];
        let mut local = [std::io::IoSliceMut::new(&mut buf)];
        nix::sys::uio::process_vm_readv(nix::unistd::Pid::from_raw(pid), &mut local, &remote)
            .and_then(|n| {
                if n == 8 && u64::from_ne_bytes(buf) == TRIAL_MARK {
                    Ok(())
                } else {
                    Err(Errno::EFAULT)
                }
            })
    };
    let io = |r: std::io::Result<()>| {
        r.map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
    };
    Trial {
        pidfd_open: pidfd.as_ref().map(drop).map_err(|e| *e),
        pidfd_getfd,
        vm_read,
        proc_fd: io(std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).map(drop)),
        proc_syscall: io(std::fs::read(format!("/proc/{pid}/syscall")).map(drop)),
    }
}

/// Why an operation of the trial failed, for a refusal's text.
fn why_refused(what: &str, e: Errno) -> String {
    let ptrace = match yama_scope() {
        Some(2) if !has_cap_sys_ptrace() => {
            "; Yama's kernel.yama.ptrace_scope is 2 (admin-only attach) and capsule has no CAP_SYS_PTRACE"
                .to_string()
        }
        Some(n) if n >= 3 => format!("; Yama's kernel.yama.ptrace_scope is {n} (no attach at all)"),
        _ => String::new(),
    };
    let profile = if e == Errno::EPERM && ptrace.is_empty() {
        " (a seccomp profile around capsule refuses it: Docker's and containerd's RuntimeDefault allow it only \
         with CAP_SYS_PTRACE; examples/kubernetes/capsule-seccomp.json allows it)"
    } else {
        ""
    };
    format!("{what} on a child of capsule fails with {e}{profile}{ptrace}")
}

/// Whether the network guard can act for the run: pidfd_getfd exists (Linux
/// 5.6+) and capsule can take a descriptor of a child of its own, read its
/// memory and its /proc/PID/fd, as the guard does (`trial`). `Err` says why not.
pub fn fd_broker_available() -> Result<(), String> {
    let t = trial();
    for (what, r) in [
        ("pidfd_open", t.pidfd_open),
        ("pidfd_getfd", t.pidfd_getfd),
        ("process_vm_readv", t.vm_read),
        ("reading /proc/PID/fd", t.proc_fd),
    ] {
        match r {
            Ok(()) => {}
            Err(Errno::ENOSYS) if what == "pidfd_getfd" => {
                return Err("the kernel has no pidfd_getfd (Linux 5.6+)".into())
            }
            Err(e) => return Err(why_refused(what, e)),
        }
    }
    Ok(())
}

/// Whether the memfd guard can read the names the run passes to
/// memfd_create (process_vm_readv). Tried on this process itself rather than
/// on a trial child: the guard is planned on the bare host's default path
/// (an unprivileged run), which must not pay for a child, and a seccomp
/// profile answers the call the same for every target; what differs for a
/// descendant is Yama's rule, read here as the network guard's refusals
/// name it.
pub fn remote_read_available() -> Result<(), String> {
    static TRIED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    TRIED
        .get_or_init(|| {
            let mut buf = [0u8; 8];
            let remote = [nix::sys::uio::RemoteIoVec {
                base: std::ptr::addr_of!(TRIAL_MARK) as usize,
                len: buf.len(),
            }];
            let mut local = [std::io::IoSliceMut::new(&mut buf)];
            nix::sys::uio::process_vm_readv(nix::unistd::getpid(), &mut local, &remote)
                .map_err(|e| why_refused("process_vm_readv", e))?;
            match yama_scope() {
                Some(2) if !has_cap_sys_ptrace() => {
                    Err(why_refused("process_vm_readv", Errno::EPERM))
                }
                Some(n) if n >= 3 => Err(why_refused("process_vm_readv", Errno::EPERM)),
                _ => Ok(()),
            }
        })
        .clone()
}

/// Yama's kernel.yama.ptrace_scope (None: no Yama).
fn yama_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
}

/// Whether the process guard can see a forking task of the run still in its
/// call (/proc/TID/syscall of a child, as `trial` tries it).
pub fn proc_syscall_available() -> Result<(), String> {
    trial()
        .proc_syscall
        .map_err(|e| why_refused("reading /proc/PID/syscall", e))
}

/// Own a descriptor the kernel returned.
fn own_fd(fd: c_int) -> OwnedFd {
    // SAFETY: only called with a descriptor the kernel just returned to us.
    unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
}

/// linux/capability.h.
const CAP_SYS_PTRACE: u32 = 19;

/// Whether this process has CAP_SYS_PTRACE in its effective set (CapEff).
fn has_cap_sys_ptrace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}

/// `memfd_create(name, flags)`: a new memfd of this process (the memfd
/// guard makes the run's, sealed against execution).
pub fn memfd_create(name: &std::ffi::CStr, flags: u32) -> Result<OwnedFd, Errno> {
    // SAFETY: `name` is a valid NUL-terminated string for the call; on
    // success the kernel returns a new descriptor that we own.
    let ret = unsafe { libc::syscall(libc::SYS_memfd_create, name.as_ptr(), flags) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(own_fd(ret as c_int))
}

/// `connect(fd, addr)` with a socket address given as its bytes (a struct
/// sockaddr of any family, as a caller passed it).
pub fn connect_raw(fd: BorrowedFd<'_>, addr: &[u8]) -> Result<(), Errno> {
    with_sockaddr(addr, |sa, len| {
        // SAFETY: connect reads `len` bytes of the caller's local storage.
        unsafe { libc::connect(fd.as_raw_fd(), sa, len) }
    })
}

/// `bind(fd, addr)` with a socket address given as its bytes.
pub fn bind_raw(fd: BorrowedFd<'_>, addr: &[u8]) -> Result<(), Errno> {
    with_sockaddr(addr, |sa, len| {
        // SAFETY: bind reads `len` bytes of the caller's local storage.
        unsafe { libc::bind(fd.as_raw_fd(), sa, len) }
    })
}

/// Call `f` with `addr` copied into an aligned struct sockaddr_storage.
fn with_sockaddr(
    addr: &[u8],
    f: impl FnOnce(*const libc::sockaddr, libc::socklen_t) -> c_int,
) -> Result<(), Errno> {
    // Aligned for any struct sockaddr: the kernel copies it anyway.
    let mut storage: libc::sockaddr_storage =
        // SAFETY: sockaddr_storage is plain integers; all-zero is valid.
        unsafe { std::mem::zeroed() };
    let len = addr
        .len()
        .min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `len` bytes fit in `storage` (clamped above) and `addr` has them.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.as_ptr(),
            std::ptr::addr_of_mut!(storage).cast::<u8>(),
            len,
        )
    };
    let rc = f(
        std::ptr::addr_of!(storage).cast::<libc::sockaddr>(),
        len as libc::socklen_t,
    );
    Errno::result(rc).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a bare host (Yama 0 or 1, no outer seccomp profile) every operation
    /// of the guards succeeds on a child of this process; the refusals are
    /// tested from outside (tests/container_guards.rs, outer_deny.c).
    #[test]
    fn the_trial_child_answers_every_operation_here() {
        let fresh = run_trial().expect("trial child");
        let scope = yama_scope().unwrap_or(0);
        if scope >= 2 {
            assert!(fresh.pidfd_getfd.is_err() || has_cap_sys_ptrace());
            return;
        }
        assert_eq!(fresh.pidfd_open, Ok(()));
        assert_eq!(fresh.pidfd_getfd, Ok(()));
        assert_eq!(fresh.vm_read, Ok(()));
        assert_eq!(fresh.proc_fd, Ok(()));
        assert_eq!(fresh.proc_syscall, Ok(()));
        assert_eq!(fresh, *trial());
        assert_eq!(remote_read_available(), Ok(()));
    }
}

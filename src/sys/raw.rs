//! Raw system calls for the child stages that share the supervisor's memory.
//!
//! The run's init and the command's pre-exec stage are created with
//! `CLONE_VM` (see `supervisor::spawn`): they run on their own stacks but in
//! the supervisor's address space, while the supervisor goes on. So they
//! must not touch anything the supervisor's thread owns: not the allocator,
//! not thread-locals — and libc's syscall wrappers write the failing errno
//! into the supervisor's thread-local `errno`. Everything here goes through
//! the `syscalls` crate instead (inline assembly, the result in a register,
//! no errno), takes only pointers to data prepared before the clone, and
//! never allocates or panics. Errors are the raw errno numbers.
//!
//! Every function is `unsafe`-free for callers except where it takes raw
//! pointers; each `unsafe` block says why the kernel's use of its arguments
//! is sound.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use syscalls::{syscall, Sysno};

/// A raw syscall result: the value, or the errno number.
pub type Ret = Result<usize, i32>;

fn map(r: Result<usize, syscalls::Errno>) -> Ret {
    r.map_err(|e| e.into_raw())
}

/// A kernel signal set (`_NSIG` = 64 on the architectures capsule supports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct SigSet(pub u64);

impl SigSet {
    pub const EMPTY: SigSet = SigSet(0);

    pub fn of(sigs: &[c_int]) -> SigSet {
        let mut bits = 0u64;
        for &s in sigs {
            if (1..=64).contains(&s) {
                bits |= 1u64 << (s - 1);
            }
        }
        SigSet(bits)
    }
}

const SIGSET_SIZE: usize = std::mem::size_of::<SigSet>();

/// The kernel's `struct sigaction` (x86_64 and aarch64 both have sa_restorer).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: SigSet,
}

pub fn prctl(option: c_int, arg2: usize) -> Ret {
    // SAFETY: the prctl options capsule uses take integer arguments only.
    map(unsafe { syscall!(Sysno::prctl, option, arg2, 0, 0, 0) })
}

pub fn setsid() -> Ret {
    // SAFETY: no arguments.
    map(unsafe { syscall!(Sysno::setsid) })
}

pub fn getpid() -> c_int {
    // SAFETY: no arguments; getpid cannot fail.
    unsafe { syscall!(Sysno::getpid) }
        .map(|p| p as c_int)
        .unwrap_or(0)
}

/// `pidfd_open(pid, 0)`: a descriptor of exactly this process (the command
/// stage sends one of itself to the supervisor, which then signals the
/// command through it and never by a pid that may have been freed).
pub fn pidfd_open(pid: c_int) -> Result<c_int, i32> {
    // SAFETY: integers only; on success the kernel returns a new descriptor.
    map(unsafe { syscall!(Sysno::pidfd_open, pid, 0) }).map(|fd| fd as c_int)
}

pub fn getppid() -> c_int {
    // SAFETY: no arguments; getppid cannot fail.
    unsafe { syscall!(Sysno::getppid) }
        .map(|p| p as c_int)
        .unwrap_or(0)
}

/// `dup3(src, dst, 0)`, or nothing when they are already the same descriptor.
pub fn dup_onto(src: c_int, dst: c_int) -> Ret {
    if src == dst {
        return Ok(dst as usize);
    }
    // SAFETY: descriptor numbers only.
    map(unsafe { syscall!(Sysno::dup3, src, dst, 0) })
}

pub fn close(fd: c_int) {
    // SAFETY: closes a descriptor number of this process; the callers own it.
    let _ = unsafe { syscall!(Sysno::close, fd) };
}

/// `fstat(fd)`: the (device, inode) of the object.
pub fn fstat_id(fd: c_int) -> Result<(u64, u64), i32> {
    // SAFETY: all-zero is a valid `struct stat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live struct stat on our stack for the call.
    map(unsafe { syscall!(Sysno::fstat, fd, std::ptr::addr_of_mut!(st)) })?;
    Ok((st.st_dev, st.st_ino))
}

pub fn chdir(path: &CStr) -> Ret {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    map(unsafe { syscall!(Sysno::chdir, path.as_ptr()) })
}

pub fn openat(dir: c_int, path: &CStr, flags: c_int) -> Ret {
    // SAFETY: `path` is NUL-terminated and outlives the call; no mode is needed without O_CREAT.
    map(unsafe { syscall!(Sysno::openat, dir, path.as_ptr(), flags, 0) })
}

/// `prlimit64(0, resource, &limit, NULL)`: set both limits of this process.
pub fn set_rlimit(resource: c_int, value: u64) -> Ret {
    let lim = [value, value];
    // SAFETY: `lim` is a struct rlimit64 {cur, max} on our stack for the call.
    map(unsafe { syscall!(Sysno::prlimit64, 0, resource, lim.as_ptr(), 0) })
}

pub fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> Ret {
    // SAFETY: the commands used (F_SETFD/F_GETFD/F_SETFL) take integers.
    map(unsafe { syscall!(Sysno::fcntl, fd, cmd, arg) })
}

/// `close_range(first, last, 0)`: close every descriptor in the range.
pub fn close_range(first: c_int, last: c_uint) -> Ret {
    // SAFETY: closes descriptor numbers of this process; the caller owns them.
    map(unsafe { syscall!(Sysno::close_range, first, last, 0) })
}

/// `close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`.
pub fn cloexec_range(first: c_int) -> Ret {
    // SAFETY: flags only change descriptor flags of this process.
    map(unsafe {
        syscall!(
            Sysno::close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC
        )
    })
}

/// `capset` with a v3 header and all-zero sets: the calling thread's
/// capabilities (the kernel keeps them per thread).
pub fn clear_capabilities() -> Ret {
    let header: [u32; 2] = [0x2008_0522, 0]; // _LINUX_CAPABILITY_VERSION_3, this process
    let data = [0u32; 6]; // two {effective, permitted, inheritable} structs
                          // SAFETY: capset reads the header and both data structs from our stack.
    map(unsafe { syscall!(Sysno::capset, header.as_ptr(), data.as_ptr()) })
}

/// `landlock_add_rule(ruleset, LANDLOCK_RULE_PATH_BENEATH, {access, parent_fd})`.
pub fn landlock_add_path_rule(ruleset: c_int, access: u64, parent_fd: c_int) -> Ret {
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    let attr = PathBeneath {
        allowed_access: access,
        parent_fd,
    };
    // SAFETY: the kernel reads the packed attribute from our stack during the call.
    map(unsafe {
        syscall!(
            Sysno::landlock_add_rule,
            ruleset,
            1,
            std::ptr::addr_of!(attr),
            0
        )
    })
}

pub fn landlock_restrict_self(ruleset: c_int) -> Ret {
    // SAFETY: descriptor number and flags only.
    map(unsafe { syscall!(Sysno::landlock_restrict_self, ruleset, 0) })
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`; `prog` points at a `struct sock_fprog`.
///
/// One classic-BPF instruction, `struct sock_filter` (linux/filter.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `struct sock_fprog` (linux/filter.h).
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const SockFilter,
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, {len, prog})`: install `prog` on the
/// calling thread. EINVAL for an empty program or one over 65535 instructions
/// (the kernel's own limit, 4096, gives EINVAL too).
pub fn seccomp_install(prog: &[SockFilter]) -> Ret {
    seccomp_install_flags(prog, 0)
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, {len, prog})`. With
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` the result is the new filter's
/// listener descriptor (close-on-exec), else 0.
pub fn seccomp_install_flags(prog: &[SockFilter], flags: libc::c_ulong) -> Ret {
    let len = match libc::c_ushort::try_from(prog.len()) {
        Ok(len) if len > 0 => len,
        _ => return Err(libc::EINVAL),
    };
    let fprog = SockFprog {
        len,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, which is alive and unchanged for the
    // whole call; the kernel copies the program (copy_from_user) and keeps no
    // pointer to our memory. No TSYNC flag: this thread only.
    map(unsafe {
        syscall!(
            Sysno::seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            std::ptr::addr_of!(fprog)
        )
    })
}

/// `execve`; only returns on failure.
///
/// # Safety
/// `argv` and `envp` must be NULL-terminated arrays of pointers to NUL-terminated strings.
pub unsafe fn execve(path: &CStr, argv: *const *const c_char, envp: *const *const c_char) -> i32 {
    // SAFETY: per the caller's contract.
    match unsafe { syscall!(Sysno::execve, path.as_ptr(), argv, envp) } {
        Ok(_) => 0,
        Err(e) => e.into_raw(),
    }
}

pub fn exit_group(code: c_int) -> ! {
    // SAFETY: exit_group ends every thread of this process; it never returns.
    let _ = unsafe { syscall!(Sysno::exit_group, code) };
    // Not reached; the loop only satisfies the type.
    #[allow(clippy::empty_loop)]
    loop {}
}

/// `send(fd, buf, MSG_NOSIGNAL)`, retried on EINTR.
pub fn send(fd: c_int, buf: &[u8]) -> Ret {
    loop {
        // SAFETY: buf is valid for reading for its length during the call.
        let r = map(unsafe {
            syscall!(
                Sysno::sendto,
                fd,
                buf.as_ptr(),
                buf.len(),
                libc::MSG_NOSIGNAL,
                0,
                0
            )
        });
        if r != Err(libc::EINTR) {
            return r;
        }
    }
}

/// `recv(fd, buf, flags)`, retried on EINTR.
pub fn recv(fd: c_int, buf: &mut [u8], flags: c_int) -> Ret {
    loop {
        // SAFETY: buf is valid for writing for its length during the call.
        let r = map(unsafe {
            syscall!(
                Sysno::recvfrom,
                fd,
                buf.as_mut_ptr(),
                buf.len(),
                flags,
                0,
                0
            )
        });
        if r != Err(libc::EINTR) {
            return r;
        }
    }
}

/// `sendmsg` of `buf` with one descriptor attached (SCM_RIGHTS), no allocation.
pub fn send_with_fd(sock: c_int, buf: &[u8], fd: c_int) -> Ret {
    // cmsghdr {len: usize, level: i32, type: i32} + one i32, padded to 8 bytes.
    #[repr(C)]
    struct Cmsg {
        len: usize,
        level: c_int,
        kind: c_int,
        fd: c_int,
        pad: c_int,
    }
    let cmsg = Cmsg {
        len: std::mem::size_of::<usize>()
            + 2 * std::mem::size_of::<c_int>()
            + std::mem::size_of::<c_int>(),
        level: libc::SOL_SOCKET,
        kind: libc::SCM_RIGHTS,
        fd,
        pad: 0,
    };
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; every pointer in it refers to our stack for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = std::ptr::addr_of!(iov) as *mut libc::iovec;
    msg.msg_iovlen = 1;
    msg.msg_control = std::ptr::addr_of!(cmsg) as *mut c_void;
    msg.msg_controllen = std::mem::size_of::<Cmsg>() as _;
    loop {
        // SAFETY: as above; the kernel only reads msg, iov, buf and cmsg.
        let r = map(unsafe {
            syscall!(
                Sysno::sendmsg,
                sock,
                std::ptr::addr_of!(msg),
                libc::MSG_NOSIGNAL
            )
        });
        if r != Err(libc::EINTR) {
            return r;
        }
    }
}

pub fn sigprocmask(how: c_int, set: SigSet) -> Ret {
    // SAFETY: the kernel reads one sigset from our stack.
    map(unsafe {
        syscall!(
            Sysno::rt_sigprocmask,
            how,
            std::ptr::addr_of!(set),
            0,
            SIGSET_SIZE
        )
    })
}

/// Restore the default disposition of `sig`.
pub fn default_action(sig: c_int) -> Ret {
    set_action(sig, 0) // SIG_DFL
}

/// Ignore `sig` (an ignored disposition survives execve).
pub fn ignore_action(sig: c_int) -> Ret {
    set_action(sig, 1) // SIG_IGN
}

/// `rt_sigaction(sig, {handler, no flags, empty mask}, NULL)` for SIG_DFL or SIG_IGN.
fn set_action(sig: c_int, handler: usize) -> Ret {
    let act = KernelSigaction {
        handler,
        flags: 0,
        restorer: 0,
        mask: SigSet::EMPTY,
    };
    // SAFETY: the kernel reads one struct sigaction from our stack; no old action is asked for.
    map(unsafe {
        syscall!(
            Sysno::rt_sigaction,
            sig,
            std::ptr::addr_of!(act),
            0,
            SIGSET_SIZE
        )
    })
}

/// `read(fd, buf)`, retried on EINTR.
pub fn read(fd: c_int, buf: &mut [u8]) -> Ret {
    loop {
        // SAFETY: buf is valid for writing for its length during the call.
        let r = map(unsafe { syscall!(Sysno::read, fd, buf.as_mut_ptr(), buf.len()) });
        if r != Err(libc::EINTR) {
            return r;
        }
    }
}

/// `ioctl(fd, TIOCSCTTY, 0)`: make the terminal `fd` the controlling
/// terminal of this session (the caller leads a session that has none; the
/// terminal is nobody else's).
pub fn set_controlling_tty(fd: c_int) -> Ret {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal).
    map(unsafe { syscall!(Sysno::ioctl, fd, libc::TIOCSCTTY, 0) })
}

/// Wait for one signal of `set` (which must be blocked); its number.
pub fn sigwait(set: SigSet) -> Ret {
    loop {
        // SAFETY: the kernel reads the set; no siginfo and no timeout are passed.
        let r = map(unsafe {
            syscall!(
                Sysno::rt_sigtimedwait,
                std::ptr::addr_of!(set),
                0,
                0,
                SIGSET_SIZE
            )
        });
        if r != Err(libc::EINTR) {
            return r;
        }
    }
}

/// `wait4(pid, &status, options, NULL)`: (pid, raw status).
pub fn wait4(pid: c_int, options: c_int) -> Result<(c_int, c_int), i32> {
    let mut status: c_int = 0;
    loop {
        // SAFETY: the kernel writes the status into our local.
        let r = map(unsafe {
            syscall!(
                Sysno::wait4,
                pid,
                std::ptr::addr_of_mut!(status),
                options,
                0
            )
        });
        match r {
            Err(libc::EINTR) => continue,
            Err(e) => return Err(e),
            Ok(p) => return Ok((p as c_int, status)),
        }
    }
}

/// The pid of a child that has exited and is not reaped yet, left so
/// (`waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WALL)`): its CPU
/// clock can still be read before [`wait4`] reaps it. None when no child has
/// exited (or there is none).
pub fn peek_exited() -> Option<c_int> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value of the plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: the kernel writes one siginfo_t into our local; no rusage is passed.
        let r = map(unsafe {
            syscall!(
                Sysno::waitid,
                libc::P_ALL,
                0,
                std::ptr::addr_of_mut!(info),
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL,
                0
            )
        });
        match r {
            Err(libc::EINTR) => continue,
            Err(_) => return None,
            // SAFETY: waitid filled in (or left zero) the SIGCHLD fields, si_pid among them.
            Ok(_) => return Some(unsafe { info.si_pid() }).filter(|&p| p > 0),
        }
    }
}

/// The CPU time process `pid` (a child of ours, possibly exited but not yet
/// reaped) has used, in nanoseconds: user + system of all its threads, not
/// its children's. This is its `CPUCLOCK_PROF` process clock, the one
/// RLIMIT_CPU is checked against (`MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_PROF)`
/// = `~pid << 3`).
pub fn process_cpu_time_ns(pid: c_int) -> Result<u64, i32> {
    let clock: c_int = (!pid) << 3;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the kernel writes one timespec into our local.
    map(unsafe { syscall!(Sysno::clock_gettime, clock, std::ptr::addr_of_mut!(ts)) })?;
    Ok((ts.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec.max(0) as u64))
}

pub fn kill(pid: c_int, sig: c_int) {
    // SAFETY: integers only.
    let _ = unsafe { syscall!(Sysno::kill, pid, sig) };
}

pub fn socket(domain: c_int, kind: c_int, protocol: c_int) -> Ret {
    // SAFETY: integers only.
    map(unsafe { syscall!(Sysno::socket, domain, kind, protocol) })
}

/// # Safety
/// `arg` must be what `request` expects.
pub unsafe fn ioctl(fd: c_int, request: libc::c_ulong, arg: *mut c_void) -> Ret {
    // SAFETY: per the caller's contract.
    map(unsafe { syscall!(Sysno::ioctl, fd, request, arg) })
}

pub fn setsockopt_int(fd: c_int, level: c_int, name: c_int, value: c_int) -> Ret {
    // SAFETY: the kernel reads one int from our stack.
    map(unsafe {
        syscall!(
            Sysno::setsockopt,
            fd,
            level,
            name,
            std::ptr::addr_of!(value),
            std::mem::size_of::<c_int>()
        )
    })
}

pub fn bind_v4(fd: c_int, addr: &libc::sockaddr_in) -> Ret {
    // SAFETY: the kernel reads the address from our borrow during the call.
    map(unsafe {
        syscall!(
            Sysno::bind,
            fd,
            addr as *const libc::sockaddr_in,
            std::mem::size_of::<libc::sockaddr_in>()
        )
    })
}

pub fn listen(fd: c_int, backlog: c_int) -> Ret {
    // SAFETY: integers only.
    map(unsafe { syscall!(Sysno::listen, fd, backlog) })
}

/// A close-on-exec TCP socket listening on 127.0.0.1:`port` (SO_REUSEADDR):
/// the proxy's endpoint, made the same way by the run's init inside its
/// network namespace and by the supervisor on the host's loopback. On failure
/// nothing stays open.
pub fn listen_tcp_loopback(port: u16, backlog: c_int) -> Result<c_int, i32> {
    let fd = socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)? as c_int;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let r = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
        .and_then(|_| bind_v4(fd, &addr))
        .and_then(|_| listen(fd, backlog));
    match r {
        Ok(_) => Ok(fd),
        Err(e) => {
            close(fd);
            Err(e)
        }
    }
}

/// `write(fd, buf)`, retried on EINTR; the number of bytes written.
pub fn write(fd: c_int, buf: &[u8]) -> Ret {
    loop {
        // SAFETY: the kernel reads `buf.len()` bytes from our borrow during the call.
        let r = map(unsafe { syscall!(Sysno::write, fd, buf.as_ptr(), buf.len()) });
        if r != Err(libc::EINTR) {
            return r;
        }
    }
}

/// `mount(source, target, fstype, flags, data)`; `None` passes NULL.
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Ret {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is NULL or a NUL-terminated string that outlives the call;
    // the kernel only reads them.
    map(unsafe {
        syscall!(
            Sysno::mount,
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data)
        )
    })
}

/// `open_tree(dir, path, flags)`: with `OPEN_TREE_CLONE`, a detached copy of the
/// mount tree at `path`, as a new descriptor.
pub fn open_tree(dir: c_int, path: &CStr, flags: c_uint) -> Ret {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    map(unsafe { syscall!(Sysno::open_tree, dir, path.as_ptr(), flags) })
}

/// `move_mount(from, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH)`: attach the
/// (detached) mount `from` at the path `to`.
pub fn move_mount_fd(from: c_int, to: &CStr) -> Ret {
    const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 0x4;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    map(unsafe {
        syscall!(
            Sysno::move_mount,
            from,
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH
        )
    })
}

/// The kernel's `struct mount_attr` (Linux 5.12).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(dir, path, flags, {attr_set, attr_clr})` (Linux 5.12+).
pub fn mount_setattr(dir: c_int, path: &CStr, flags: c_uint, attr_set: u64, attr_clr: u64) -> Ret {
    let attr = MountAttr {
        attr_set,
        attr_clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is NUL-terminated and `attr` lives on our stack; the kernel
    // reads `size_of::<MountAttr>()` bytes of it.
    map(unsafe {
        syscall!(
            Sysno::mount_setattr,
            dir,
            path.as_ptr(),
            flags,
            std::ptr::addr_of!(attr),
            std::mem::size_of::<MountAttr>()
        )
    })
}

/// `mkdirat(AT_FDCWD, path, mode)`.
pub fn mkdir(path: &CStr, mode: c_uint) -> Ret {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    map(unsafe { syscall!(Sysno::mkdirat, libc::AT_FDCWD, path.as_ptr(), mode) })
}

/// `openat(dir, path, flags, mode)`: with `O_CREAT`, the mode of a new file.
pub fn openat_mode(dir: c_int, path: &CStr, flags: c_int, mode: c_uint) -> Ret {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    map(unsafe { syscall!(Sysno::openat, dir, path.as_ptr(), flags, mode) })
}

/// `ip link set NAME up`: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP |
/// IFF_RUNNING, on a throw-away datagram socket. Raw system calls only.
pub fn interface_up(name: &CStr) -> Result<(), i32> {
    let sock = socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)? as c_int;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.to_bytes_with_nul()) {
        *dst = *src as libc::c_char;
    }
    let ifr_ptr: *mut c_void = std::ptr::addr_of_mut!(ifr).cast();
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags member of our ifreq.
    let r = unsafe { ioctl(sock, libc::SIOCGIFFLAGS as libc::c_ulong, ifr_ptr) }.and_then(|_| {
        // SAFETY: SIOCGIFFLAGS just filled `ifru_flags`, so that union member is the live one.
        unsafe { ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
        // SAFETY: SIOCSIFFLAGS reads the name and flags of our ifreq.
        unsafe { ioctl(sock, libc::SIOCSIFFLAGS as libc::c_ulong, ifr_ptr) }
    });
    close(sock);
    r.map(drop)
}

/// `symlinkat(target, AT_FDCWD, path)`.
pub fn symlink(target: &CStr, path: &CStr) -> Ret {
    // SAFETY: both strings are NUL-terminated and outlive the call.
    map(unsafe {
        syscall!(
            Sysno::symlinkat,
            target.as_ptr(),
            libc::AT_FDCWD,
            path.as_ptr()
        )
    })
}

/// `chroot(path)`.
pub fn chroot(path: &CStr) -> Ret {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    map(unsafe { syscall!(Sysno::chroot, path.as_ptr()) })
}

/// `setns(fd, nstype)`.
pub fn setns(fd: c_int, nstype: c_int) -> Ret {
    // SAFETY: integer arguments only.
    map(unsafe { syscall!(Sysno::setns, fd, nstype) })
}

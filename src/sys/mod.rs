//! The few raw system calls capsule needs that `nix` does not wrap in a
//! fork-friendly way. Every `unsafe` block of the supervisor and the child
//! lives here, each with the reason it holds.

pub mod channel;
pub mod raw;

use std::ffi::{c_char, CStr};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// A stack for a child stage created with `CLONE_VM`: an anonymous mapping
/// with a guard page below it, never unmapped (the stage may outlive every
/// Rust owner in the supervisor).
pub fn leaked_stack(size: usize) -> Result<*mut std::ffi::c_void, Errno> {
    let page = 4096usize;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    // SAFETY: the lowest page of our own mapping becomes the guard.
    unsafe { libc::mprotect(base, page, libc::PROT_NONE) };
    // SAFETY: one past the end of the mapping: the initial stack pointer (stacks grow down).
    Ok(unsafe { base.cast::<u8>().add(size + page) }.cast())
}

/// `clone(flags | SIGCHLD)` running `entry(arg)` on `stack` (the top of a
/// [`leaked_stack`]); the pid of the new process.
///
/// # Safety
/// With `CLONE_VM` the new process shares this address space: `entry` must
/// follow the rules of `sandbox::child` (raw system calls only, no
/// allocation, no thread-locals, no panic), and everything `arg` points to
/// must stay valid and unchanged for as long as the new process reads it.
pub unsafe fn clone_on_stack(
    flags: libc::c_int,
    stack: *mut std::ffi::c_void,
    entry: extern "C" fn(*mut std::ffi::c_void) -> libc::c_int,
    arg: *mut std::ffi::c_void,
) -> Result<libc::pid_t, i32> {
    // SAFETY: per the caller's contract. glibc's clone() calls `entry` on the
    // new stack and touches no thread-local state in the child. Only a
    // failure writes errno: when the caller is itself a CLONE_VM stage (init
    // creating the command), that write lands in the supervisor's errno — a
    // run whose command could not even be created is refused anyway.
    let pid = unsafe { libc::clone(entry, stack, flags | libc::SIGCHLD, arg) };
    if pid < 0 {
        Err(Errno::last() as i32)
    } else {
        Ok(pid)
    }
}

/// Restore a signal mask saved by [`block_all_signals`].
pub fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: the set was filled by pthread_sigmask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// `pidfd_open(pid, 0)`: a descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // SAFETY: plain syscall with integer arguments; on success it returns a
    // new descriptor that we own.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if ret < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this fd to us and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// Mark every descriptor from `first` upwards close-on-exec (they stay usable
/// until execve, so the error channel keeps working).
pub fn cloexec_from(first: RawFd) -> Result<(), Errno> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes flags of fds
    // of this process; it does not free anything Rust owns.
    let ret = unsafe {
        libc::syscall(libc::SYS_close_range, first as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC)
    };
    if ret == 0 {
        return Ok(());
    }
    // Kernels before 5.11: walk the table.
    let max = match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => soft.min(65536) as RawFd,
        Err(_) => 4096,
    };
    for fd in first..max {
        // SAFETY: fcntl on an fd number that may or may not be open; EBADF is ignored.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// `execve` with prebuilt, NULL-terminated pointer arrays. Only returns on error.
pub fn execve(path: &CStr, argv: &[*const c_char], envp: &[*const c_char]) -> Errno {
    debug_assert!(argv.last().is_some_and(|p| p.is_null()));
    debug_assert!(envp.last().is_some_and(|p| p.is_null()));
    // SAFETY: path is NUL-terminated; argv/envp are NULL-terminated arrays of
    // pointers into CStrings that the caller keeps alive across this call.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Errno::last()
}

/// Leave the process now, without running atexit handlers or destructors
/// (the right way out of a forked child).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit is async-signal-safe and never returns.
    unsafe { libc::_exit(code) }
}

/// Block or unblock every signal of this thread; returns the previous mask.
pub fn block_all_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigfillset/sigprocmask only write into it.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        old
    }
}

/// Give the command default signal dispositions and an empty mask.
///
/// execve resets caught signals to their default by itself; only ignored
/// ones survive it. The supervisor forks before installing any handler, and
/// the only disposition it changed is Rust's SIGPIPE = ignore, which must not
/// leak into the command (a `yes | head` pipeline would never end).
pub fn reset_signals() {
    // SAFETY: setting SIG_DFL is always valid.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    // SAFETY: an empty set unblocks everything.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// Wait for one of the signals in `set` (which must be blocked); returns its number.
pub fn sigwait_any(set: &libc::sigset_t) -> libc::c_int {
    let mut sig: libc::c_int = 0;
    // SAFETY: sigwait only reads the set and writes the signal number.
    let r = unsafe { libc::sigwait(set, &mut sig) };
    if r != 0 {
        return 0;
    }
    sig
}

/// A signal set holding `sigs`.
pub fn sigset_of(sigs: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data manipulated only through libc.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Number of threads of this process, from /proc/self/stat (field 20).
pub fn thread_count() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(17)?.parse().ok()
}

/// `prctl(PR_SET_PDEATHSIG, sig)`.
pub fn set_parent_death_signal(sig: libc::c_int) -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    Errno::result(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`: orphaned descendants are reparented to us.
pub fn set_child_subreaper() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    Errno::result(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub fn set_no_new_privs() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    Errno::result(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}

/// Empty every capability set: bounding (needs CAP_SETPCAP, which root and a
/// fresh user namespace have; without it NO_NEW_PRIVS already stops any gain),
/// ambient, then effective/permitted/inheritable.
pub fn drop_all_capabilities() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    let last = unsafe { libc::prctl(libc::PR_CAPBSET_READ, 0, 0, 0, 0) };
    if last >= 0 {
        for cap in 0..=63 {
            // SAFETY: prctl with integer arguments; EINVAL past the last cap is ignored.
            let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
            if r != 0 {
                let e = Errno::last();
                if e == Errno::EINVAL {
                    break;
                }
                if e != Errno::EPERM {
                    return Err(e);
                }
            }
        }
    }
    // SAFETY: prctl with integer arguments; EINVAL on kernels without ambient caps.
    unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header { version: 0x2008_0522, pid: 0 }; // _LINUX_CAPABILITY_VERSION_3
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capset reads a v3 header and two data structs, which we pass.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Write all of `buf` to `fd`, retrying on EINTR (usable in the child).
pub fn write_all(fd: RawFd, buf: &[u8]) -> Result<(), Errno> {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: buf[off..] is valid for reading for its length.
        let n = unsafe { libc::write(fd, buf[off..].as_ptr().cast(), buf.len() - off) };
        if n < 0 {
            let e = Errno::last();
            if e == Errno::EINTR {
                continue;
            }
            return Err(e);
        }
        off += n as usize;
    }
    Ok(())
}

/// `kill(pid, sig)`, ignoring ESRCH.
pub fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill with integer arguments.
    unsafe { libc::kill(pid, sig) };
}

/// Make `fd` non-blocking (and keep it open).
pub fn set_nonblocking(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(Errno::last());
    }
    // SAFETY: as above.
    Errno::result(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// Grow a pipe's buffer (best effort): fewer wake-ups when capturing floods.
pub fn grow_pipe(fd: RawFd, size: libc::c_int) {
    // SAFETY: fcntl on a pipe descriptor we own; failure is harmless.
    unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, size) };
}

/// Watch an owned descriptor for readiness on the current tokio runtime
/// (made non-blocking first).
pub fn async_fd(fd: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    use std::os::fd::AsRawFd;
    set_nonblocking(fd.as_raw_fd()).map_err(std::io::Error::from)?;
    // SAFETY: an OwnedFd stays open, and keeps referring to the same open file
    // description, for as long as the AsyncFd owns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// `fork()`. Only for a single-threaded caller (the child's init stage).
pub fn fork() -> Result<libc::pid_t, Errno> {
    // SAFETY: the callers are single-threaded copies of the single-threaded
    // supervisor, so no lock can be held by a thread missing in the child.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(Errno::last())
    } else {
        Ok(pid)
    }
}

/// `dup2(src, dst)`.
pub fn dup2(src: RawFd, dst: RawFd) -> Result<(), Errno> {
    // SAFETY: dup2 on descriptor numbers; it closes `dst` first if open, which
    // is the intent (stdio of the forked child).
    Errno::result(unsafe { libc::dup2(src, dst) }).map(drop)
}

/// Clear FD_CLOEXEC so `fd` survives execve.
pub fn keep_across_exec(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: fcntl on a descriptor number; no memory is involved.
    Errno::result(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// `waitpid(pid, WNOHANG | __WALL)`: the raw status if `pid` has exited.
/// `pid == -1` reaps any child; then the reaped pid is returned too.
pub fn try_wait(pid: libc::pid_t) -> Option<(libc::pid_t, i32)> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) };
    (r > 0).then_some((r, status))
}

/// Blocking `waitpid(-1)`; false once there is no child left.
pub fn wait_any() -> bool {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
    pid > 0 || (pid < 0 && Errno::last() == Errno::EINTR)
}

/// Whether `fd` is an open descriptor of this process.
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// Take ownership of an inherited descriptor number (e.g. `--tool-fd`).
/// The caller must have checked it is open and that nothing else owns it.
pub fn adopt_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: per the contract above, fd is open and owned by nobody else in
    // this process: it was handed to capsule by its parent.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Make sure fds 0, 1 and 2 are open (to /dev/null if not), so no pipe or
/// socket capsule creates can land on them by accident.
pub fn ensure_std_fds() {
    for fd in 0..3 {
        if !fd_is_open(fd) {
            // SAFETY: opening /dev/null with a static C string; the lowest free fd is `fd`.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}

/// Die quietly on a closed stdout (`capsule doctor | head`), as Unix tools do.
/// Not for `capsule exec`, which keeps draining the child when its reader goes.
pub fn default_sigpipe() {
    // SAFETY: setting SIG_DFL is always valid.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Move up to `len` bytes from `from` to `to` (one of them a pipe) without
/// copying them through user space (non-blocking). Ok(0) is end-of-file.
pub fn splice_out(from: RawFd, to: RawFd, len: usize) -> std::io::Result<usize> {
    // SAFETY: splice with null offsets on descriptors we own; no memory of
    // ours is read or written.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

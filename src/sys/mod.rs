//! The few raw system calls capsule needs that `nix` does not wrap in a
//! fork-friendly way. Every `unsafe` block of the supervisor and the child
//! lives here, each with the reason it holds.

pub mod channel;
pub mod meta;
pub mod notify;
pub mod raw;
pub mod route;
pub mod serve;
pub mod stage;
pub mod stdio;
pub mod term;

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

/// A stack for a child stage created with `CLONE_VM`: an anonymous mapping
/// with a guard page below it, never unmapped (the stage may outlive every
/// Rust owner in the supervisor).
pub fn leaked_stack(size: usize) -> Result<StageStack, Errno> {
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
    Ok(StageStack(
        unsafe { base.cast::<u8>().add(size + page) }.cast(),
        size,
    ))
}

/// The top of a stack made by [`leaked_stack`]: the only kind of stack a
/// child stage may be cloned onto ([`stage::clone_stage`]).
#[derive(Debug, Clone, Copy)]
pub struct StageStack(*mut std::ffi::c_void, usize);

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

/// `CLONE_INTO_CGROUP` (Linux 5.7): clone3 starts the child in the cgroup
/// whose directory descriptor `clone_args.cgroup` holds.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `clone3(flags | CLONE_VM | CLONE_INTO_CGROUP, exit_signal SIGCHLD)`
/// running `entry(arg)` on `stack` as [`clone_on_stack`] does, the new
/// process born in the cgroup of the directory `cgroup`: no write to
/// `cgroup.procs` afterwards, and so none of the global cgroup-migration
/// lock that such a write takes (it waits for an RCU grace period). Where
/// clone3 is missing, filtered (an outer seccomp profile answers ENOSYS or
/// EPERM) or refuses the cgroup, the error comes back and the caller clones
/// as before. Only on x86_64 and aarch64 (elsewhere: `ENOSYS`). `None`:
/// a plain clone3 (the tests of this call).
///
/// # Safety
/// As for [`clone_on_stack`].
pub unsafe fn clone3_into_cgroup(
    flags: libc::c_int,
    stack: StageStack,
    cgroup: Option<RawFd>,
    entry: extern "C" fn(*mut std::ffi::c_void) -> libc::c_int,
    arg: *mut std::ffi::c_void,
) -> Result<libc::pid_t, i32> {
    let args = CloneArgs {
        // The flags are the clone(2) ones (namespaces, CLONE_VM): bits, not a value.
        flags: (flags | libc::CLONE_VM) as u32 as u64 | cgroup.map_or(0, |_| CLONE_INTO_CGROUP),
        exit_signal: libc::SIGCHLD as u64,
        // clone3 takes the lowest address and the size; the stage's stack
        // pointer starts at the top, as with clone.
        stack: (stack.0 as u64).wrapping_sub(stack.1 as u64),
        stack_size: stack.1 as u64,
        cgroup: cgroup.map_or(0, |c| c as u64),
        ..CloneArgs::default()
    };
    // SAFETY: per the caller's contract, as for `clone_on_stack`; `args`
    // lives across the call, and the new process never returns into this
    // function (`raw_clone3` runs `entry` and exits on the new stack).
    let ret = unsafe { raw_clone3(&args, entry, arg) };
    if ret < 0 {
        Err(-ret as i32)
    } else {
        Ok(ret as libc::pid_t)
    }
}

/// The clone3 system call; in the new process, `entry(arg)` on the new stack,
/// then `exit` with its value. Returns the raw result (pid or -errno).
///
/// # Safety
/// `args` must describe a valid stack (see [`clone3_into_cgroup`]).
#[cfg(target_arch = "x86_64")]
unsafe fn raw_clone3(
    args: &CloneArgs,
    entry: extern "C" fn(*mut std::ffi::c_void) -> libc::c_int,
    arg: *mut std::ffi::c_void,
) -> i64 {
    let ret: i64;
    // SAFETY: clone3 reads `args`; `syscall` clobbers rcx and r11. The
    // parent continues at 2 with the pid in rax. The child (rax = 0) starts
    // on the fresh, 16-byte aligned stack top with every other register as
    // the parent's: r12/r13 (callee-saved, ours) hold the entry and its
    // argument; it calls the entry and exits with its value, as glibc's
    // clone does, never reaching Rust code of this frame.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, 60",
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}

/// As the x86_64 one: `svc 0` keeps every register but x0; the child (x0 =
/// 0) starts on the new stack top.
///
/// # Safety
/// `args` must describe a valid stack (see [`clone3_into_cgroup`]).
#[cfg(target_arch = "aarch64")]
unsafe fn raw_clone3(
    args: &CloneArgs,
    entry: extern "C" fn(*mut std::ffi::c_void) -> libc::c_int,
    arg: *mut std::ffi::c_void,
) -> i64 {
    let ret: i64;
    // SAFETY: as for x86_64; x20/x21 are callee-saved and ours, x8 holds the
    // system call number (clone3 = 435, exit = 93).
    unsafe {
        std::arch::asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x0, x21",
            "blr x20",
            "mov x8, 93",
            "svc 0",
            "brk 1",
            "2:",
            inlateout("x0") args as *const CloneArgs as i64 => ret,
            in("x1") std::mem::size_of::<CloneArgs>(),
            in("x8") libc::SYS_clone3,
            in("x20") entry,
            in("x21") arg,
            lateout("x30") _,
        );
    }
    ret
}

/// Elsewhere no clone3 here: the caller clones as before.
///
/// # Safety
/// None needed; it makes no call.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn raw_clone3(
    _args: &CloneArgs,
    _entry: extern "C" fn(*mut std::ffi::c_void) -> libc::c_int,
    _arg: *mut std::ffi::c_void,
) -> i64 {
    -(libc::ENOSYS as i64)
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

/// `pidfd_send_signal(fd, sig, NULL, 0)`: `sig` to exactly the process `fd`
/// refers to (ESRCH once it has been reaped, whatever now has its pid).
/// Signal 0 only asks whether it still exists (a zombie does).
pub fn pidfd_signal(fd: std::os::fd::BorrowedFd<'_>, sig: libc::c_int) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: a descriptor we hold, a signal number, a null siginfo (the
    // kernel fills in one as kill(2) would) and no flags.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
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

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)`: orphaned descendants are reparented to us.
pub fn set_child_subreaper() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    Errno::result(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(drop)
}

/// `kill(pid, sig)`, ignoring ESRCH.
pub fn signal(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill with integer arguments.
    unsafe { libc::kill(pid, sig) };
}

/// Lower the calling thread, and only it, to file-system ids `fsuid` and
/// `fsgid` and no capabilities at all (effective, permitted, inheritable):
/// a thread that acts for the run then has no more than the run. The kernel
/// keeps credentials per thread; glibc's (and nix's) set*id wrappers would
/// broadcast the change to every thread of capsule (setxid), these raw
/// calls do not. There is no way back: only for a thread that ends after
/// the call it makes for the run.
pub fn lower_this_thread(fsuid: u32, fsgid: u32) -> Result<(), Errno> {
    // SAFETY: setfsgid/setfsuid take an integer and change this thread's
    // credentials only; each returns the previous id, never an error, so
    // the id is read back (-1 changes nothing) to see that it took.
    let (gid_now, uid_now) = unsafe {
        libc::syscall(libc::SYS_setfsgid, fsgid);
        libc::syscall(libc::SYS_setfsuid, fsuid);
        (
            libc::syscall(libc::SYS_setfsgid, u32::MAX),
            libc::syscall(libc::SYS_setfsuid, u32::MAX),
        )
    };
    if gid_now as u32 != fsgid || uid_now as u32 != fsuid {
        return Err(Errno::EPERM);
    }
    raw::clear_capabilities().map(drop).map_err(Errno::from_raw)
}

/// Put the calling thread (only it: without a TSYNC flag Landlock restricts
/// the calling thread's credentials) under `ruleset`, with no_new_privs
/// (also this thread's only). There is no way back: only for a thread that
/// ends after the call it makes for the run.
pub fn landlock_this_thread(ruleset: std::os::fd::BorrowedFd<'_>) -> Result<(), Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: prctl with integer arguments, on this thread's flags only.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    Errno::result(rc)?;
    raw::landlock_restrict_self(ruleset.as_raw_fd())
        .map(drop)
        .map_err(Errno::from_raw)
}

/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID); None if unreadable.
pub fn thread_cpu_time() -> Option<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into our local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
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

/// The bytes waiting in a socket's receive queue (SIOCINQ): what its peer
/// sent that nobody here has read yet.
pub fn socket_queued(fd: std::os::fd::BorrowedFd<'_>) -> Result<usize, Errno> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCINQ (FIONREAD) writes one int into our local; the
    // descriptor is borrowed, so open for the call.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Whether tasks `a` and `b` share one descriptor table (`kcmp` with
/// `KCMP_FILES`); None where the kernel cannot tell us (no kcmp, or no
/// ptrace read access to one of them).
pub fn same_fd_table(a: libc::pid_t, b: libc::pid_t) -> Option<bool> {
    const KCMP_FILES: libc::c_long = 2;
    // SAFETY: kcmp takes integer arguments only and writes nothing.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            libc::c_long::from(a),
            libc::c_long::from(b),
            KCMP_FILES,
            0 as libc::c_long,
            0 as libc::c_long,
        )
    };
    (r >= 0).then_some(r == 0)
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

/// `waitpid(pid, WNOHANG | __WALL)`: the raw status if `pid` has exited.
/// `pid == -1` reaps any child; then the reaped pid is returned too.
pub fn try_wait(pid: libc::pid_t) -> Option<(libc::pid_t, i32)> {
    let mut status = 0;
    // SAFETY: waitpid writes the status into our local.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG | libc::__WALL) };
    (r > 0).then_some((r, status))
}

/// Wait for `pid` (a child) to exit and reap it; EINTR is retried, ECHILD
/// (already reaped) ends the wait.
pub fn wait_blocking(pid: libc::pid_t) {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into our local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r >= 0 || Errno::last() != Errno::EINTR {
            return;
        }
    }
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

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`: the
/// kernel's Landlock ABI, or the errno (ENOSYS: not built; EOPNOTSUPP: built
/// but not enabled at boot, `lsm=`).
pub fn landlock_abi_version() -> Result<u32, Errno> {
    // SAFETY: with a NULL attribute pointer and size 0 the call reads no
    // memory and creates no fd; it returns the ABI version or -1 with errno.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if v < 0 {
        Err(Errno::last())
    } else {
        Ok(u32::try_from(v).unwrap_or(0))
    }
}

/// Whether the kernel knows the seccomp return `action`
/// (`SECCOMP_GET_ACTION_AVAIL`, 4.14+): Ok, or the kernel's errno
/// (EOPNOTSUPP for an unknown action, EINVAL/ENOSYS before 4.14).
pub fn seccomp_action_available(action: u32) -> Result<(), Errno> {
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 through the pointer,
    // which points at a live local; it changes no state.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0 as libc::c_uint,
            &action as *const u32,
        )
    };
    Errno::result(rc).map(drop)
}

/// Whether the kernel has `mount_setattr(2)` (Linux 5.12+), which the run's
/// view needs to make the host read-only recursively: asked with a bad
/// descriptor and no attributes, which fails with ENOSYS only where the call
/// does not exist (EBADF or EINVAL elsewhere) and changes nothing.
pub fn mount_setattr_available() -> bool {
    // SAFETY: dirfd -1, an empty path, no flags, a NULL attribute pointer and
    // size 0: the kernel rejects the call before it reads any memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1 as libc::c_int,
            c"".as_ptr(),
            0 as libc::c_uint,
            std::ptr::null::<libc::c_void>(),
            0 as libc::size_t,
        )
    };
    !(rc == -1 && Errno::last() == Errno::ENOSYS)
}

/// Whether seccomp filter mode with SECCOMP_RET_KILL_PROCESS exists (asked
/// once, by `kernel::probe`). Two syscalls that install nothing:
/// `SECCOMP_GET_ACTION_AVAIL` (4.14+, EOPNOTSUPP for an unknown action,
/// EINVAL/ENOSYS before 4.14 or without CONFIG_SECCOMP) and
/// `SECCOMP_SET_MODE_FILTER` with a NULL program, which fails with EFAULT
/// where filter mode exists (CONFIG_SECCOMP_FILTER) and EINVAL where it does
/// not.
pub fn seccomp_filter_mode_available() -> bool {
    if seccomp_action_available(libc::SECCOMP_RET_KILL_PROCESS).is_err() {
        return false;
    }
    // SAFETY: a NULL program pointer: the kernel's copy_from_user fails with
    // EFAULT before any filter is prepared or attached; no memory of ours is touched.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            std::ptr::null::<libc::c_void>(),
        )
    };
    rc == -1 && Errno::last() == Errno::EFAULT
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`: a close-on-exec duplicate of `fd`
/// numbered `min` or above, owned by the caller.
pub fn dup_cloexec(fd: RawFd, min: RawFd) -> Result<OwnedFd, Errno> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on any integer is memory-safe; it fails
    // with EBADF if the number is not an open fd.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(Errno::last());
    }
    // SAFETY: `new` is a freshly duplicated fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Fill `buf` from the kernel's random source (`getrandom(2)`, no flags);
/// false if it could not fill all of it.
pub fn getrandom(buf: &mut [u8]) -> bool {
    // SAFETY: getrandom writes at most `buf.len()` bytes into `buf`, a live borrow.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).ok() == Some(buf.len())
}

/// The value of the extended attribute `name` of `path` (up to 64 bytes;
/// `None` when it is absent, unreadable or longer), following symlinks.
pub fn getxattr(path: &std::path::Path, name: &std::ffi::CStr) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = [0u8; 64];
    // SAFETY: both names are NUL-terminated C strings that outlive the call;
    // the kernel writes at most `buf.len()` bytes into `buf`, a live borrow.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).ok()?;
    Some(buf[..n.min(buf.len())].to_vec())
}

/// Take ownership of a descriptor a raw system call just created.
///
/// The caller passes a descriptor that is open and owned by nothing else in
/// this process (e.g. the return value of [`raw::socket`]).
pub fn own_new_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: per the contract above.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Tests only: run `hook` in the forked child of `cmd` before it execs.
///
/// Contract (not checked by the compiler, hence test-only and crate-private):
/// the hook makes only async-signal-safe calls (raw system calls on data
/// prepared before the spawn, no allocation, no locks), as the child of a
/// possibly multi-threaded test process must.
#[cfg(test)]
pub(crate) fn pre_exec_for_tests<F>(cmd: &mut std::process::Command, hook: F)
where
    F: FnMut() -> std::io::Result<()> + Send + Sync + 'static,
{
    use std::os::unix::process::CommandExt;
    // SAFETY: per the contract above, which the two callers (the Landlock and
    // seccomp tests) follow: raw prctl/seccomp/landlock/setrlimit calls on
    // data built before the spawn.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Whether this process has capability `cap` (linux/capability.h's number)
/// in its effective set: one `capget`.
pub fn has_effective_cap(cap: u32) -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: a version-3 header and the two data records that version
    // writes, both ours and alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 || cap >= 64 {
        return false;
    }
    data[(cap / 32) as usize].effective & (1 << (cap % 32)) != 0
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    static SEEN: AtomicU32 = AtomicU32::new(0);

    extern "C" fn stage(arg: *mut std::ffi::c_void) -> libc::c_int {
        SEEN.store(arg as usize as u32, Ordering::SeqCst);
        // A frame of its own on the new stack, as a stage has.
        let local = [arg as usize as u8; 64];
        7 + local[63] as libc::c_int - local[0] as libc::c_int
    }

    /// The hand-written clone3: the new process runs the entry on the
    /// stage stack, in this address space (CLONE_VM), with its argument,
    /// and exits with its value; the parent gets its pid.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[test]
    fn clone3_runs_the_entry_on_the_stage_stack_and_exits_with_its_value() {
        let stack = super::leaked_stack(64 * 1024).unwrap();
        // SAFETY: `stage` only touches a static atomic and its own stack.
        let pid = unsafe { super::clone3_into_cgroup(0, stack, None, stage, 0x2a as *mut _) };
        let pid = match pid {
            Err(libc::ENOSYS) | Err(libc::EPERM) => {
                eprintln!("CAPSULE-SKIP clone3 unavailable here");
                return;
            }
            r => r.unwrap(),
        };
        let st = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            st,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 7)
        );
        assert_eq!(
            SEEN.load(Ordering::SeqCst),
            0x2a,
            "the entry ran in our memory with its argument"
        );
    }

    /// A descriptor that is not a cgroup directory: clone3 refuses and
    /// creates nothing (the caller then clones as before).
    #[test]
    fn clone3_into_a_non_cgroup_is_refused() {
        let stack = super::leaked_stack(64 * 1024).unwrap();
        let dir = std::fs::File::open("/").unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        let r = unsafe {
            super::clone3_into_cgroup(0, stack, Some(dir.as_raw_fd()), stage, std::ptr::null_mut())
        };
        assert!(r.is_err(), "{r:?}");
    }
}

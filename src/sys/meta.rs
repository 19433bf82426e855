//! The system calls the metadata guard (`guards::metadata`) makes for
//! the run: on its own thread, which holds the run's credentials (fsuid and
//! fsgid, per-thread raw calls, never glibc's broadcasting setfsuid/setuid
//! wrappers) and no capabilities, on an `O_PATH` descriptor of the object it
//! checked.

use std::ffi::{c_int, CStr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

fn ret(rc: libc::c_long) -> Result<(), Errno> {
    if rc < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// Give the calling thread (only it) the file-system ids `uid`/`gid` and no
/// capabilities at all (raw setfsuid, setfsgid and capset: per thread).
pub fn become_run(uid: u32, gid: u32) -> Result<(), Errno> {
    // SAFETY: setfsgid/setfsuid take integers and change only this thread.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
        // They return the previous id: ask again to see that it took.
        if libc::syscall(libc::SYS_setfsuid, u32::MAX) != uid as libc::c_long
            || libc::syscall(libc::SYS_setfsgid, u32::MAX) != gid as libc::c_long
        {
            return Err(Errno::EPERM);
        }
    }
    super::raw::clear_capabilities().map_err(Errno::from_raw)?;
    // Check that nothing is left in this thread's effective set.
    let mut header: [u32; 2] = [0x2008_0522, 0];
    let mut data = [0u32; 6];
    // SAFETY: capget writes the header and two data structs into our locals.
    let rc = unsafe { libc::syscall(libc::SYS_capget, header.as_mut_ptr(), data.as_mut_ptr()) };
    ret(rc)?;
    if data.iter().any(|&w| w != 0) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `openat(dir, path, O_PATH | O_CLOEXEC | extra)`: through magic links
/// too (capsule's own reach into `/proc/PID/fd/N` of the run).
pub fn open_path(dir: BorrowedFd<'_>, path: &CStr, extra: c_int) -> Result<OwnedFd, Errno> {
    // SAFETY: `path` is a valid C string for the call; on success the
    // kernel returns a new descriptor that we own.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            path.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | extra,
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dir, path, {O_PATH | O_CLOEXEC | extra, RESOLVE_NO_MAGICLINKS})`:
/// a path of the run resolved as the kernel would for it, except that a
/// magic link (`/proc/self/...`, which would name capsule's own process
/// here) fails with ELOOP. Linux 5.6+ (ENOSYS before).
pub fn open_beneath_magic(
    dir: BorrowedFd<'_>,
    path: &CStr,
    extra: c_int,
) -> Result<OwnedFd, Errno> {
    /// struct open_how (linux/openat2.h).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | extra) as u64,
        mode: 0,
        resolve: libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is a valid C string and `how` a live open_how of the
    // size passed; on success the kernel returns a descriptor we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            std::ptr::addr_of!(how),
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as c_int) })
}

/// Whether this kernel has openat2 (Linux 5.6+).
pub fn openat2_available() -> bool {
    let root = match std::fs::File::open("/") {
        Ok(f) => f,
        Err(_) => return false,
    };
    open_beneath_magic(std::os::fd::AsFd::as_fd(&root), c"/", 0).is_ok()
}

/// `utimensat(fd, "", times, AT_EMPTY_PATH)`: the object itself (a symlink
/// too). `times` None: now.
pub fn utimens(fd: BorrowedFd<'_>, times: Option<&[libc::timespec; 2]>) -> Result<(), Errno> {
    let p = times.map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: "" is a valid C string; `p` is null or points at two timespecs
    // that live for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_utimensat,
            fd.as_raw_fd(),
            c"".as_ptr(),
            p,
            libc::AT_EMPTY_PATH,
        )
    };
    ret(rc)
}

/// `utimensat(AT_FDCWD, path, times, 0)` (the fallback before Linux 5.8,
/// through `/proc/thread-self/fd/N`).
pub fn utimens_path(path: &CStr, times: Option<&[libc::timespec; 2]>) -> Result<(), Errno> {
    let p = times.map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: `path` is a valid C string; `p` is null or points at two
    // timespecs that live for the call.
    let rc = unsafe { libc::syscall(libc::SYS_utimensat, libc::AT_FDCWD, path.as_ptr(), p, 0) };
    ret(rc)
}

/// `fchmodat(AT_FDCWD, path, mode)`.
pub fn chmod_path(path: &CStr, mode: u32) -> Result<(), Errno> {
    // SAFETY: `path` is a valid C string for the call.
    let rc = unsafe { libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, path.as_ptr(), mode) };
    ret(rc)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`: the object itself.
pub fn chown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<(), Errno> {
    // SAFETY: "" is a valid C string for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fchownat,
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH,
        )
    };
    ret(rc)
}

/// `setxattr(path, name, value, flags)`.
pub fn setxattr(path: &CStr, name: &CStr, value: &[u8], flags: c_int) -> Result<(), Errno> {
    // SAFETY: `path` and `name` are valid C strings and `value` holds
    // `value.len()` bytes, all alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_setxattr,
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr(),
            value.len(),
            flags,
        )
    };
    ret(rc)
}

/// `removexattr(path, name)`.
pub fn removexattr(path: &CStr, name: &CStr) -> Result<(), Errno> {
    // SAFETY: both are valid C strings for the call.
    let rc = unsafe { libc::syscall(libc::SYS_removexattr, path.as_ptr(), name.as_ptr()) };
    ret(rc)
}

//! seccomp user notification: the supervisor's side of the signal filter's
//! listener (`supervisor::signals`), and the probe that says whether a child
//! of this process can get such a listener at all.

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
        let (error, flags) = match reply {
            Reply::Continue => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
            Reply::Fail(e) => (-e.abs(), 0),
        };
        let resp = libc::seccomp_notif_resp {
            id,
            val: 0,
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

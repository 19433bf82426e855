//! The memfd guard: no memfd of the run can be executed, where
//! `vm.memfd_noexec = 2` cannot be set for the run (an unprivileged capsule:
//! the sysctl file belongs to the host's root; or no pid namespace).
//!
//! `execve("/proc/self/fd/N")` of a memfd passes Landlock (the file lives on
//! the kernel's internal shmem mount) and seccomp cannot see the path. So on
//! Linux 6.3+ the notify filter's memfd part (`sandbox::seccomp::signals`)
//! sends every memfd_create of the run here: the supervisor makes the memfd
//! itself, with the caller's name and flags plus MFD_NOEXEC_SEAL (the
//! kernel's own seal: no execute bit, and none can be added), and installs it
//! in the caller as the call's result (SECCOMP_ADDFD_FLAG_SEND). A request
//! for MFD_EXEC fails with EACCES, as under `vm.memfd_noexec = 2`. Nothing of
//! the caller's is trusted but bytes: the name is copied, the flags are
//! checked by the kernel in capsule's own memfd_create.
//!
//! Where `limits.memory_mb` has no cgroup, the same part makes every memfd
//! of the run (sealed only where the kernel knows the seal, 6.3+), and the
//! guard keeps a duplicate for the memory watchdog (`memwatch`), which counts
//! its blocks: a memfd's pages are in no process's RLIMIT_DATA.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;

use super::network::Action;
use crate::sys::notify::{self, Listener, Notification, Reply};

/// The most memfds the guard keeps for one run (then memfd_create fails with EMFILE).
pub const MAX_MEMFDS: usize = 4096;

/// The memfds of the run, as the memfd guard made them.
#[derive(Default, Clone)]
pub struct Memfds(Arc<Mutex<Vec<OwnedFd>>>);

impl Memfds {
    /// Keep a duplicate of `fd`; false when [`MAX_MEMFDS`] are kept already.
    pub fn keep(&self, fd: &OwnedFd) -> bool {
        let Ok(mut held) = self.0.lock() else {
            return false;
        };
        if held.len() >= MAX_MEMFDS {
            return false;
        }
        match fd.try_clone() {
            Ok(dup) => {
                held.push(dup);
                true
            }
            Err(_) => false,
        }
    }

    /// The bytes allocated to every memfd kept.
    pub(crate) fn bytes(&self) -> u64 {
        let Ok(held) = self.0.lock() else {
            return u64::MAX;
        };
        held.iter()
            .map(|fd| {
                nix::sys::stat::fstat(fd.as_fd())
                    .map(|st| (st.st_blocks as u64).saturating_mul(512))
                    .unwrap_or(0)
            })
            .sum()
    }
}

/// MFD_NOEXEC_SEAL and MFD_EXEC (linux/memfd.h, 6.3+).
const MFD_NOEXEC_SEAL: u32 = 0x0008;
const MFD_EXEC: u32 = 0x0010;
/// The longest memfd name the kernel accepts (MFD_NAME_MAX_LEN), without its NUL.
const NAME_MAX: usize = 249;

/// Whether notification number `nr` is the guard's.
pub fn handles(nr: i32) -> bool {
    i64::from(nr) == libc::SYS_memfd_create
}

/// What the guard does for one run.
#[derive(Default, Clone)]
pub struct MemfdGuard {
    /// Seal every memfd against execution (MFD_NOEXEC_SEAL, Linux 6.3+).
    pub seal: bool,
    /// Keep a duplicate of every memfd for the memory watchdog.
    pub keep: Option<Memfds>,
}

/// Serve one memfd_create: answered here with the descriptor, or the
/// answer the caller still needs.
pub fn serve(listener: &Listener, n: &Notification, guard: &MemfdGuard) -> Action {
    match hand_over(listener, n, guard) {
        Ok(()) => Action::Answered,
        Err(reply) => Action::Reply(reply),
    }
}

fn hand_over(listener: &Listener, n: &Notification, guard: &MemfdGuard) -> Result<(), Reply> {
    let flags = n.args[1] as u32;
    if flags & MFD_EXEC != 0 && guard.seal {
        return Err(Reply::Fail(libc::EACCES));
    }
    let name = read_name(n.pid as libc::pid_t, n.args[0]).map_err(|e| Reply::Fail(e as i32))?;
    let seal = if guard.seal { MFD_NOEXEC_SEAL } else { 0 };
    let fd = notify::memfd_create(&name, flags | seal).map_err(|e| Reply::Fail(e as i32))?;
    // Counted from its birth, or not made at all.
    if let Some(keep) = &guard.keep {
        if !keep.keep(&fd) {
            return Err(Reply::Fail(libc::EMFILE));
        }
    }
    let cloexec = flags & libc::MFD_CLOEXEC != 0;
    match listener.reply_with_fd(n.id, std::os::fd::AsFd::as_fd(&fd), cloexec) {
        Ok(_) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => {
            tracing::warn!("memfd guard: handing the memfd over: {e}");
            Err(Reply::Fail(libc::EMFILE))
        }
    }
}

/// The NUL-terminated name at `addr` in thread `tid`'s memory, read a page
/// at a time (a name near the end of a mapping must not fault the read).
fn read_name(tid: libc::pid_t, addr: u64) -> Result<std::ffi::CString, Errno> {
    let mut name = Vec::with_capacity(64);
    let mut at = addr;
    while name.len() <= NAME_MAX {
        let to_page_end = 4096 - (at % 4096) as usize;
        let want = to_page_end.min(NAME_MAX + 1 - name.len());
        let mut buf = vec![0u8; want];
        super::procfs::read_remote(tid, at, &mut buf).map_err(|e| {
            if e == Errno::EACCES {
                Errno::EFAULT
            } else {
                e
            }
        })?;
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            name.extend_from_slice(&buf[..end]);
            return std::ffi::CString::new(name).map_err(|_| Errno::EINVAL);
        }
        name.extend_from_slice(&buf);
        at += want as u64;
    }
    Err(Errno::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_up_to_their_nul_across_pages() {
        let me = std::process::id() as libc::pid_t;
        // A name that straddles a page boundary: it starts 3 bytes before one.
        let mut page = vec![0u8; 3 * 4096];
        let base = page.as_ptr() as u64;
        let start = (4096 - (base % 4096) as usize) + 4096 - 3;
        page[start..start + 10].copy_from_slice(b"straddling");
        page[start + 10] = 0;
        let got = read_name(me, base + start as u64).expect("read");
        assert_eq!(got.as_bytes(), b"straddling");
        // Too long: EINVAL, as the kernel says.
        let long = vec![b'x'; 300];
        let mut long_nul = long.clone();
        long_nul.push(0);
        assert_eq!(read_name(me, long_nul.as_ptr() as u64), Err(Errno::EINVAL));
        assert!(handles(libc::SYS_memfd_create as i32));
        assert!(!handles(libc::SYS_read as i32));
        drop(page);
    }
}

//! Signal isolation by seccomp user notification: the supervisor's side.
//!
//! Where the run has no pid namespace and Landlock has no signal scope (ABI
//! below 6), the command stage installs the signal filter
//! (`sandbox::seccomp::signals`) and hands its listener over the channel
//! ([`LISTENER_TAG`](super::notify_loop::LISTENER_TAG)). A dedicated thread serves it ([`Guard`](super::notify_loop::Guard)): each
//! kill/tkill/tgkill/rt_sigqueueinfo/rt_tgsigqueueinfo and F_SETOWN of the
//! run waits until the thread has checked that the target is a process of
//! the run, then continues as made (CONTINUE) or fails with EPERM. The
//! thread never blocks the event loop, and the work per call is bounded: a
//! walk up the parent chain of at most [`MAX_HOPS`](super::judge::MAX_HOPS) `/proc/PID/stat`
//! reads, and for a process group whose leader has exited a scan of at most
//! [`MAX_SCAN`](super::procfs::MAX_SCAN) `/proc` entries. If the thread or the listener fails, the
//! descriptor closes and the kernel fails every notified call with ENOSYS:
//! closed, never open.
//!
//! Who is of the run is the judge's to say (`guards::judge`).
//!
//! Residual race: between the check and the kernel acting on CONTINUE the
//! target can exit and its pid be reused by a new process of the host; the
//! signal then reaches that process. Reuse needs the pid counter to wrap
//! around to that exact number in between, and only a process started after
//! the check can be hit (capsule itself never: its pid is held). F_SETOWN
//! pins the owner's `struct pid` when it runs, so a later reuse cannot
//! redirect SIGIO.

use super::judge::Judge;
use super::procfs::Procs;
use crate::sandbox::seccomp::signals as filter;
use crate::sys::notify::{Notification, Reply};

type Pid = libc::pid_t;

/// AUDIT_ARCH of this build (the filter kills every other one).
const NATIVE_ARCH: u32 = if cfg!(target_arch = "aarch64") {
    183 | 0xc000_0000
} else {
    62 | 0xc000_0000
};

impl<P: Procs> Judge<'_, P> {
    fn target(&self, pid: Pid) -> Reply {
        if self.in_tree(pid) {
            Reply::Continue
        } else {
            Reply::Fail(libc::EPERM)
        }
    }

    fn group(&self, pgid: Pid) -> Reply {
        match self.group_in_tree(pgid) {
            Some(true) => Reply::Continue,
            Some(false) => Reply::Fail(libc::EPERM),
            None => Reply::Fail(libc::ESRCH),
        }
    }

    /// The answer to one notification.
    pub fn decide(&self, n: &Notification) -> Reply {
        if n.arch != NATIVE_ARCH {
            return Reply::Fail(libc::EPERM);
        }
        // pid_t and int arguments: the kernel reads the low 32 bits.
        let arg = |i: usize| n.args[i] as u32 as i32;
        let nr = i64::from(n.nr);
        if nr == libc::SYS_kill {
            match arg(0) {
                0 => Reply::Continue,
                -1 => Reply::Fail(libc::EPERM),
                i32::MIN => Reply::Fail(libc::ESRCH),
                p if p > 0 => self.target(p),
                p => self.group(-p),
            }
        } else if nr == libc::SYS_tkill {
            match arg(0) {
                p if p > 0 => self.target(p),
                _ => Reply::Fail(libc::EINVAL),
            }
        } else if nr == libc::SYS_tgkill || nr == libc::SYS_rt_tgsigqueueinfo {
            match (arg(0), arg(1)) {
                (p, t) if p > 0 && t > 0 => self.target(p),
                _ => Reply::Fail(libc::EINVAL),
            }
        } else if nr == libc::SYS_rt_sigqueueinfo {
            match arg(0) {
                p if p > 0 => self.target(p),
                _ => Reply::Fail(libc::ESRCH),
            }
        } else if nr == libc::SYS_fcntl && arg(1) as u32 == filter::F_SETOWN {
            match arg(2) {
                0 => Reply::Continue,
                i32::MIN => Reply::Fail(libc::EINVAL),
                p if p > 0 => self.target(p),
                p => self.group(-p),
            }
        } else {
            Reply::Fail(libc::EPERM)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guards::judge::tests::{host, judge, tree, CHILD, SUP, SUP_SID};

    fn notif(name: i64, args: &[i64]) -> Notification {
        let mut a = [0u64; 6];
        for (i, v) in args.iter().enumerate() {
            a[i] = *v as u64;
        }
        Notification {
            id: 1,
            pid: 201,
            nr: name as i32,
            arch: NATIVE_ARCH,
            args: a,
        }
    }

    #[test]
    fn decisions() {
        let t = tree();
        let j = judge(&t, host());
        let go = |nr: i64, args: &[i64]| j.decide(&notif(nr, args));
        let (ok, eperm) = (Reply::Continue, Reply::Fail(libc::EPERM));
        assert_eq!(go(libc::SYS_kill, &[201, 9]), ok);
        assert_eq!(go(libc::SYS_kill, &[SUP as i64, 0]), eperm);
        assert_eq!(go(libc::SYS_kill, &[90, 19]), eperm);
        assert_eq!(go(libc::SYS_kill, &[0, 9]), ok);
        assert_eq!(go(libc::SYS_kill, &[-1, 9]), eperm);
        assert_eq!(go(libc::SYS_kill, &[0xffff_ffff, 9]), eperm);
        assert_eq!(go(libc::SYS_kill, &[-(CHILD as i64), 15]), ok);
        assert_eq!(go(libc::SYS_kill, &[-(SUP_SID as i64), 0]), eperm);
        assert_eq!(go(libc::SYS_kill, &[-777, 0]), Reply::Fail(libc::ESRCH));
        assert_eq!(
            go(libc::SYS_kill, &[i64::from(i32::MIN), 9]),
            Reply::Fail(libc::ESRCH)
        );
        // The high word of a pid_t is ignored, as by the kernel.
        assert_eq!(go(libc::SYS_kill, &[(1 << 32) | SUP as i64, 9]), eperm);
        assert_eq!(go(libc::SYS_kill, &[(1 << 32) | 201, 9]), ok);
        assert_eq!(go(libc::SYS_tkill, &[203, 9]), ok);
        assert_eq!(go(libc::SYS_tkill, &[SUP as i64, 19]), eperm);
        assert_eq!(go(libc::SYS_tkill, &[0, 9]), Reply::Fail(libc::EINVAL));
        assert_eq!(go(libc::SYS_tgkill, &[201, 201, 9]), ok);
        assert_eq!(go(libc::SYS_tgkill, &[SUP as i64, 201, 9]), eperm);
        assert_eq!(
            go(libc::SYS_tgkill, &[201, -1, 9]),
            Reply::Fail(libc::EINVAL)
        );
        assert_eq!(go(libc::SYS_rt_sigqueueinfo, &[204, 10, 0x1000]), ok);
        assert_eq!(go(libc::SYS_rt_sigqueueinfo, &[400, 10, 0x1000]), eperm);
        assert_eq!(go(libc::SYS_rt_tgsigqueueinfo, &[205, 205, 10, 0x1000]), ok);
        assert_eq!(
            go(libc::SYS_rt_tgsigqueueinfo, &[301, 301, 10, 0x1000]),
            eperm
        );
        let setown = i64::from(filter::F_SETOWN);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, 201]), ok);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, 0]), ok);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, SUP as i64]), eperm);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, -(CHILD as i64)]), ok);
        assert_eq!(go(libc::SYS_fcntl, &[3, setown, -(SUP_SID as i64)]), eperm);
        // Nothing else is expected from the filter.
        assert_eq!(go(libc::SYS_fcntl, &[3, 4, 201]), eperm);
        assert_eq!(go(libc::SYS_getpid, &[]), eperm);
        let mut foreign = notif(libc::SYS_kill, &[201, 9]);
        foreign.arch = 3 | 0x4000_0000;
        assert_eq!(j.decide(&foreign), eperm);
    }
}

//! What the guards read about a process of the run: the fields of
//! `/proc/PID/stat` and `/proc/PID/status` the judge needs (through
//! [`Procs`], a table in the tests), and the caller's own memory
//! ([`read_remote`], `process_vm_readv`) for the arguments a guard must copy.

use nix::errno::Errno;

/// The most `/proc` entries scanned for a member of a leaderless group.
pub const MAX_SCAN: usize = 100_000;

type Pid = libc::pid_t;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ppid: Pid,
    pub pgrp: Pid,
    pub session: Pid,
    pub start: u64,
}

/// The fields of `/proc/PID/status` the guard reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub no_new_privs: bool,
    /// `Seccomp_filters:` (Linux 5.9+).
    pub seccomp_filters: Option<u32>,
}

/// Where process facts come from: `/proc`, or a table in the tests.
pub trait Procs {
    fn stat(&self, pid: Pid) -> Option<Stat>;
    fn status(&self, pid: Pid) -> Option<Status>;
    /// Some process whose process group is `pgid` (at most [`MAX_SCAN`] looked at).
    fn group_member(&self, pgid: Pid) -> Option<Pid>;
}

/// The real `/proc`.
pub struct ProcFs;

/// Parse `/proc/PID/stat`: `pid (comm) state ppid pgrp session ... starttime`
/// (comm may hold spaces and parentheses: the fields follow the last ')').
pub fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().take(20).collect();
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
    })
}

/// Parse `/proc/PID/status` for NoNewPrivs and Seccomp_filters.
pub fn parse_status(text: &str) -> Status {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    Status {
        no_new_privs: field("NoNewPrivs:") == Some(1),
        seccomp_filters: field("Seccomp_filters:"),
    }
}

impl Procs for ProcFs {
    fn stat(&self, pid: Pid) -> Option<Stat> {
        parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }
    fn status(&self, pid: Pid) -> Option<Status> {
        Some(parse_status(
            &std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?,
        ))
    }
    fn group_member(&self, pgid: Pid) -> Option<Pid> {
        let dir = std::fs::read_dir("/proc").ok()?;
        for entry in dir.take(MAX_SCAN).flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<Pid>().ok())
            else {
                continue;
            };
            if self.stat(pid).is_some_and(|s| s.pgrp == pgid) {
                return Some(pid);
            }
        }
        None
    }
}

/// Read `buf.len()` bytes at `addr` of thread `tid`'s memory. EFAULT when
/// the caller passed a bad pointer.
pub fn read_remote(tid: libc::pid_t, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Err(Errno::EINVAL);
    }
    let len = buf.len();
    let remote = [nix::sys::uio::RemoteIoVec {
        base: addr as usize,
        len,
    }];
    let mut local = [std::io::IoSliceMut::new(buf)];
    match nix::sys::uio::process_vm_readv(nix::unistd::Pid::from_raw(tid), &mut local, &remote) {
        Ok(n) if n == len => Ok(()),
        Ok(_) => Err(Errno::EFAULT),
        Err(Errno::EPERM) => Err(Errno::EACCES),
        Err(e) => Err(if e == Errno::ESRCH { e } else { Errno::EFAULT }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_parsing() {
        let s = parse_stat(
            "1234 (a (weird) name) S 1 1234 1234 34816 1234 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 1 2 3",
        )
        .unwrap();
        assert_eq!(
            s,
            Stat {
                ppid: 1,
                pgrp: 1234,
                session: 1234,
                start: 98765
            }
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
        let st = parse_status("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n");
        assert!(st.no_new_privs);
        assert_eq!(st.seccomp_filters, Some(3));
        let st = parse_status("NoNewPrivs:\t0\nSeccomp:\t0\n");
        assert!(!st.no_new_privs);
        assert_eq!(st.seccomp_filters, None);
        // This process, read for real.
        let me = nix::unistd::getpid().as_raw();
        let mine = ProcFs.stat(me).unwrap();
        assert_eq!(mine.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(mine.pgrp, nix::unistd::getpgrp().as_raw());
    }
}

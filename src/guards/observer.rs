//! `exec --explain`: the path observer.
//!
//! In explain mode only, the run's notify filter sends the path-taking calls
//! (open, openat, creat, execve, mkdir, unlink, rename, truncate, ...) to
//! the guard thread, which reads the path the caller named (relative to its
//! working directory or the descriptor it named), records it with the access
//! it asks for, and always answers CONTINUE: the kernel then runs the call
//! as usual (Landlock and the view decide). The observer only explains; it
//! never permits. After the run, `why`'s Survey answers each recorded
//! (path, access) and the refused ones are the run's `denials`.
//!
//! Bounded: at most [`MAX_SEEN`] distinct (path, access) pairs and
//! [`MAX_SEEN_BYTES`] of paths are kept; beyond that only a count.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::sys::notify::{Listener, Notification, Reply};
use crate::why::FsAccess;

/// At most this many distinct (path, access) pairs are kept...
pub const MAX_SEEN: usize = 16384;
/// ...holding at most this many bytes of paths (kept twice: in order, and
/// in the set that deduplicates).
pub const MAX_SEEN_BYTES: usize = 4 << 20;

/// A path of more components is counted, not kept: the Survey's answer
/// walks the host's file system along it (each ancestor's links), so a
/// run's deep directory chain would make every answer cost its depth
/// squared.
pub const MAX_COMPONENTS: usize = 128;

/// At most this many signal targets are kept.
pub const MAX_SIGNALS: usize = 64;

/// The calls observed, by name (the notify filter's observe part).
pub use crate::sandbox::seccomp::signals::OBSERVED;

/// What the observer saw, shared with the supervisor.
#[derive(Debug, Default)]
pub struct Seen {
    /// In the order first seen (the first denial is the run's first).
    pub pairs: Vec<(PathBuf, u8)>,
    /// Who asked for each kept pair, by index: the caller's command name
    /// (`/proc/TID/comm`) and the call (`capsule learn` comments its grants
    /// with them).
    pub origins: Vec<(String, &'static str)>,
    /// Whether each kept pair's path was there in the caller's view when
    /// it asked, by index: in the run's private places (/tmp, /dev/shm)
    /// what was there is the run's own whatever the host holds at that
    /// path after the run; what was not, and is on the host, the view hid.
    pub present: Vec<bool>,
    known: std::collections::HashSet<(PathBuf, u8)>,
    bytes: usize,
    /// Pairs not kept (over [`MAX_SEEN`] or [`MAX_SEEN_BYTES`], or a path
    /// deeper than [`MAX_COMPONENTS`]; a pair
    /// seen again after that is counted again).
    pub dropped: u64,
    /// The pids (as the caller named them) of the processes outside the
    /// run it tried to signal (at most [`MAX_SIGNALS`]).
    pub signals: BTreeSet<i32>,
    /// Observed calls answered without reading their path: the guards'
    /// CPU budget was spent (`guards::notify_loop`), so the observer no
    /// longer does work for the run.
    pub skipped: u64,
    /// Whether the observer's filter was installed for the run.
    pub active: bool,
    /// Why not, when it was not.
    pub why_not: Option<String>,
}

impl Seen {
    /// The kept pairs with their access, and whether the path was there in
    /// the run's view.
    pub fn accesses(&self) -> Vec<(PathBuf, FsAccess, bool)> {
        self.pairs
            .iter()
            .enumerate()
            .map(|(i, (p, a))| {
                (
                    p.clone(),
                    access_of(*a),
                    self.present.get(i).copied().unwrap_or(true),
                )
            })
            .collect()
    }

    /// The kept pairs with their access, whether the path was there in the
    /// run's view, and who asked (command name, call).
    pub fn accesses_by(&self) -> Vec<(PathBuf, FsAccess, bool, String, &'static str)> {
        self.accesses()
            .into_iter()
            .enumerate()
            .map(|(i, (p, a, present))| {
                let (comm, call) = self.origins.get(i).cloned().unwrap_or_default();
                (p, a, present, comm, call)
            })
            .collect()
    }
}

fn access_of(a: u8) -> FsAccess {
    match a {
        0 => FsAccess::Read,
        1 => FsAccess::Write,
        2 => FsAccess::Exec,
        _ => FsAccess::Truncate,
    }
}

fn code_of(a: FsAccess) -> u8 {
    match a {
        FsAccess::Read => 0,
        FsAccess::Write => 1,
        FsAccess::Exec => 2,
        FsAccess::Truncate | FsAccess::Chmod => 3,
    }
}

/// The observer the guard thread serves.
#[derive(Debug, Clone, Default)]
pub struct Observer {
    pub seen: Arc<Mutex<Seen>>,
    /// The run's first process on the host (its keeper or its pid
    /// namespace's init): a signal target outside its tree is outside the run.
    pub run_root: Arc<std::sync::atomic::AtomicI32>,
}

fn nr(name: &str) -> i64 {
    crate::sandbox::seccomp::native_nr(name).unwrap_or(-1)
}

impl Observer {
    /// Whether notification number `nr` is the observer's.
    pub fn handles(n: i32) -> bool {
        let n = i64::from(n);
        OBSERVED.iter().any(|x| nr(x) == n)
    }

    /// Record what the call asks for; always CONTINUE.
    pub fn serve(&self, listener: &Listener, n: &Notification) -> Reply {
        if let Some((path, access, present, call)) = self.read_call(n) {
            // Only what the caller still waits for was read truthfully.
            if listener.id_valid(n.id) {
                self.record(path, access, present, || comm(n.pid as libc::pid_t), call);
            }
        }
        Reply::Continue
    }

    /// The guards' CPU budget is spent: answer at once, without reading
    /// the path (counted in `explain.not_observed`).
    pub fn skip(&self) -> Reply {
        let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        s.skipped += 1;
        Reply::Continue
    }

    /// The signal judge refused this call: record its target.
    pub fn refused_signal(&self, n: &Notification) {
        let pid = n.args[0] as i32;
        if pid > 0 {
            self.record_signal(pid);
        }
    }

    fn record_signal(&self, pid: i32) {
        let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if s.signals.len() < MAX_SIGNALS {
            s.signals.insert(pid);
        }
    }

    /// A signal call no capsule guard decides (a pid namespace or Landlock's
    /// scope does): record a target outside the run; always CONTINUE.
    pub fn serve_signal(&self, listener: &Listener, n: &Notification) -> Reply {
        let pid = n.args[0] as i32;
        // kill(pid, 0) only asks whether it exists; groups are not named.
        let probe = crate::sandbox::seccomp::native_nr("kill") == Some(i64::from(n.nr))
            && n.args[1] as i32 == 0;
        if pid > 0
            && !probe
            && self.outside_run(n.pid as libc::pid_t, pid)
            && listener.id_valid(n.id)
        {
            self.record_signal(pid);
        }
        Reply::Continue
    }

    /// Whether `pid`, as the caller `tid` names it, is a process outside the
    /// run: in a pid namespace, one the run's /proc does not show; else one
    /// the run's first process is not an ancestor of.
    fn outside_run(&self, tid: libc::pid_t, pid: i32) -> bool {
        let root = self.run_root.load(std::sync::atomic::Ordering::Relaxed);
        let own_ns = std::fs::read_link(format!("/proc/{tid}/ns/pid")).ok()
            != std::fs::read_link("/proc/self/ns/pid").ok();
        if own_ns {
            return !Path::new(&format!("/proc/{tid}/root/proc/{pid}")).exists();
        }
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return false;
        }
        let mut at = pid;
        for _ in 0..4096 {
            if at == root {
                return false;
            }
            if at <= 1 {
                return true;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{at}/stat")) else {
                return false;
            };
            // The field after the command's closing parenthesis: state, then ppid.
            let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok())
            else {
                return false;
            };
            at = ppid;
        }
        false
    }

    /// Keep a new (path, access) pair, with who asked (`comm` is read only
    /// for a new pair: a repeated call costs no more than before).
    fn record(
        &self,
        path: PathBuf,
        access: FsAccess,
        present: bool,
        comm: impl FnOnce() -> String,
        call: &'static str,
    ) {
        let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let key = (path, code_of(access));
        if s.known.contains(&key) {
            return;
        }
        let len = key.0.as_os_str().len();
        if s.pairs.len() >= MAX_SEEN
            || s.bytes + len > MAX_SEEN_BYTES
            || key.0.components().count() > MAX_COMPONENTS
        {
            s.dropped += 1;
        } else {
            s.bytes += len;
            s.known.insert(key.clone());
            s.pairs.push(key);
            s.origins.push((comm(), call));
            s.present.push(present);
        }
    }

    /// The path (absolute, as the caller sees it), the access and the name
    /// of one call.
    fn read_call(&self, n: &Notification) -> Option<(PathBuf, FsAccess, bool, &'static str)> {
        let name: &'static str = OBSERVED
            .iter()
            .find(|x| nr(x) == i64::from(n.nr))
            .copied()?;
        let a = n.args;
        let tid = n.pid as libc::pid_t;
        const AT_FDCWD: i64 = libc::AT_FDCWD as i64;
        let open_access = |flags: u64| {
            let f = flags as i32;
            if f & (libc::O_WRONLY | libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC) != 0 {
                FsAccess::Write
            } else {
                FsAccess::Read
            }
        };
        // (dirfd or AT_FDCWD, path pointer, access)
        let (dirfd, ptr, access, second) = match name {
            "open" => (AT_FDCWD, a[0], open_access(a[1]), None),
            "creat" => (AT_FDCWD, a[0], FsAccess::Write, None),
            "openat" => (a[0] as i32 as i64, a[1], open_access(a[2]), None),
            "openat2" => {
                // struct open_how: its first field is the flags.
                let mut b = [0u8; 8];
                crate::guards::procfs::read_remote(tid, a[2], &mut b).ok()?;
                (
                    a[0] as i32 as i64,
                    a[1],
                    open_access(u64::from_ne_bytes(b)),
                    None,
                )
            }
            "execve" => (AT_FDCWD, a[0], FsAccess::Exec, None),
            "execveat" => (a[0] as i32 as i64, a[1], FsAccess::Exec, None),
            "truncate" => (AT_FDCWD, a[0], FsAccess::Truncate, None),
            "mkdir" | "rmdir" | "unlink" => (AT_FDCWD, a[0], FsAccess::Write, None),
            "mknod" => (AT_FDCWD, a[0], FsAccess::Write, None),
            "mkdirat" | "unlinkat" | "mknodat" => (a[0] as i32 as i64, a[1], FsAccess::Write, None),
            "rename" | "link" => (AT_FDCWD, a[0], FsAccess::Write, Some((AT_FDCWD, a[1]))),
            "symlink" => (AT_FDCWD, a[1], FsAccess::Write, None),
            "symlinkat" => (a[1] as i32 as i64, a[2], FsAccess::Write, None),
            "renameat" | "renameat2" | "linkat" => (
                a[0] as i32 as i64,
                a[1],
                FsAccess::Write,
                Some((a[2] as i32 as i64, a[3])),
            ),
            _ => return None,
        };
        if let Some((d2, p2)) = second {
            if let Some(p) = resolve(tid, d2, p2) {
                if let Some(present) = relevant(tid, &p, FsAccess::Write) {
                    self.record(p, FsAccess::Write, present, || comm(tid), name);
                }
            }
        }
        let p = resolve(tid, dirfd, ptr)?;
        let present = relevant(tid, &p, access)?;
        Some((p, access, present, name))
    }
}

/// The command name of thread `tid` (`/proc/TID/comm`), or "?".
fn comm(tid: libc::pid_t) -> String {
    std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|s| s.trim_end().chars().take(16).collect())
        .unwrap_or_else(|_| "?".into())
}

/// Whether the path is worth keeping, and if so whether it is there in the
/// caller's own view (`Some(present)`). A read or exec of what does not
/// exist is refused by no layer (ENOENT): not a denial. Existence is asked
/// in the caller's own view, and on the host (what exists there but not in
/// the view is hidden by the view: the Survey says so). A write is always
/// kept (whether it may create the path is the question).
fn relevant(tid: libc::pid_t, p: &Path, access: FsAccess) -> Option<bool> {
    let rel = p.strip_prefix("/").unwrap_or(p);
    let in_view = Path::new(&format!("/proc/{tid}/root")).join(rel).exists();
    if matches!(access, FsAccess::Write) || in_view || p.exists() {
        Some(in_view)
    } else {
        None
    }
}

/// The absolute path the caller named: `ptr` read from its memory, relative
/// to its working directory (AT_FDCWD) or the descriptor `dirfd`.
fn resolve(tid: libc::pid_t, dirfd: i64, ptr: u64) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::with_capacity(128);
    let mut at = ptr;
    loop {
        let to_page_end = 4096 - (at % 4096) as usize;
        let mut buf = vec![0u8; to_page_end];
        crate::guards::procfs::read_remote(tid, at, &mut buf).ok()?;
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            break;
        }
        out.extend_from_slice(&buf);
        at += buf.len() as u64;
        if out.len() >= 4096 {
            return None;
        }
    }
    if out.is_empty() {
        return None;
    }
    let p = PathBuf::from(std::ffi::OsStr::from_bytes(&out));
    if p.is_absolute() {
        return Some(normalize(&p));
    }
    let base = if dirfd == i64::from(libc::AT_FDCWD) {
        std::fs::read_link(format!("/proc/{tid}/cwd")).ok()?
    } else {
        std::fs::read_link(format!("/proc/{tid}/fd/{dirfd}")).ok()?
    };
    if !base.is_absolute() {
        return None;
    }
    Some(normalize(&base.join(p)))
}

/// `.` and `..` taken away lexically (the Survey follows links itself).
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_is_kept_is_bounded() {
        let o = super::Observer::default();
        for i in 0..(super::MAX_SEEN + 10) {
            o.record(
                format!("/p/{i}").into(),
                crate::why::FsAccess::Read,
                true,
                || "t".into(),
                "open",
            );
        }
        o.record(
            "/p/0".into(),
            crate::why::FsAccess::Read,
            true,
            || "t".into(),
            "open",
        );
        let s = o.seen.lock().unwrap();
        assert_eq!(s.pairs.len(), super::MAX_SEEN);
        assert_eq!(s.dropped, 10);
        drop(s);
        let o = super::Observer::default();
        let long = "x".repeat(4000);
        for i in 0..2000 {
            o.record(
                format!("/{long}/{i}").into(),
                crate::why::FsAccess::Write,
                true,
                || "t".into(),
                "open",
            );
        }
        let s = o.seen.lock().unwrap();
        assert!(
            s.bytes <= super::MAX_SEEN_BYTES && s.dropped > 0,
            "{}",
            s.bytes
        );
    }

    #[test]
    fn a_path_deeper_than_the_bound_is_counted_not_kept() {
        let o = super::Observer::default();
        let deep = "/d".repeat(super::MAX_COMPONENTS + 1);
        o.record(
            deep.into(),
            crate::why::FsAccess::Write,
            true,
            || "t".into(),
            "open",
        );
        let ok = "/d".repeat(super::MAX_COMPONENTS - 1);
        o.record(
            ok.into(),
            crate::why::FsAccess::Write,
            true,
            || "t".into(),
            "open",
        );
        let s = o.seen.lock().unwrap();
        assert_eq!((s.pairs.len(), s.dropped), (1, 1));
    }

    #[test]
    fn normalize_takes_dots_away() {
        assert_eq!(
            super::normalize(std::path::Path::new("/a/./b/../c")),
            std::path::PathBuf::from("/a/c")
        );
    }

    #[test]
    fn every_observed_call_is_known_here() {
        for n in super::OBSERVED {
            if let Some(nr) = crate::sandbox::seccomp::native_nr(n) {
                assert!(super::Observer::handles(nr as i32), "{n}");
            }
        }
    }
}

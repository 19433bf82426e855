//! Removing a directory tree the child wrote (the run's private TMPDIR), so
//! that nothing the child planted there defeats it or reaches out of it.
//!
//! `std::fs::remove_dir_all` holds one descriptor per level and stops at the
//! first error: a chain of directories deeper than the descriptor limit, or
//! one directory the child made mode 000 (as an unprivileged user), left the
//! whole tree, with the child's data, in the host's /tmp. [`remove_tree`]:
//!
//! - walks iteratively (no recursion on the Rust stack) with the `*at` calls
//!   on directory descriptors, every open with `O_NOFOLLOW|O_DIRECTORY`, so a
//!   symlink is only ever unlinked, never followed: nothing outside the tree
//!   is read, changed or removed;
//! - keeps at most [`WINDOW`] directories open: deeper levels are closed and
//!   found again through `..`, checked by device and inode against what was
//!   opened on the way down (a tree moved meanwhile is never mistaken for it);
//! - gives a directory it cannot read or write mode 0700 before it enters it
//!   (within the tree only: a directory is only ever reached by name from its
//!   parent in the tree), and never crosses onto another file system;
//! - goes on past what it cannot remove, and returns it ([`Leftovers`]), so
//!   the caller reports it instead of a silent leftover.

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::{Dir, OwningIter, Type};
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fchmod, fchmodat, fstat, fstatat, FchmodatFlags, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Directories held open at once (two descriptors each: one read, one for the `*at` calls).
pub const WINDOW: usize = 16;
/// Failures listed one by one; the rest are only counted.
const LISTED: usize = 16;

/// What could not be removed.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// The first failures: the path and why.
    pub failures: Vec<(PathBuf, Errno)>,
    /// Failures beyond those listed.
    pub more: u64,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.failures.is_empty() && self.more == 0
    }

    /// One `PATH: error` line per listed failure, then `... and N more`.
    /// Paths are the child's names: control characters are escaped.
    pub fn lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .failures
            .iter()
            .map(|(p, e)| {
                let p = p.to_string_lossy();
                format!("{}: {}", p.escape_debug(), e.desc())
            })
            .collect();
        if self.more > 0 {
            v.push(format!("... and {} more", self.more));
        }
        v
    }
}

/// One directory on the way down.
struct Level {
    /// Its name in its parent.
    name: CString,
    dev: u64,
    ino: u64,
    /// Open while within the window: a descriptor for the `*at` calls and a
    /// reader (on a duplicate) that keeps its place.
    open: Option<(OwnedFd, OwningIter)>,
    /// Something inside could not be removed (so neither can it, and that
    /// needs no line of its own).
    failed: bool,
    /// Read a second time after rmdir found it not empty.
    second_pass: bool,
}

struct Walk<'a> {
    root: &'a Path,
    /// The root's parent (an `O_PATH` descriptor).
    top: OwnedFd,
    stack: Vec<Level>,
    /// stack[..lo] are closed, stack[lo..] open.
    lo: usize,
    /// Entries given up on (device, inode): skipped when a directory is read again.
    given_up: HashSet<(u64, u64)>,
    left: Leftovers,
}

/// Remove the directory `path`, which most runs leave empty: one `rmdir`,
/// and the full walk of [`remove_tree`] only when that fails. What stays is
/// returned as the lines of [`Leftovers::lines`] (empty: all gone).
pub fn remove_dir_or_tree(path: &Path) -> Vec<String> {
    if std::fs::remove_dir(path).is_ok() {
        return Vec::new();
    }
    let left = remove_tree(path);
    if left.is_empty() {
        Vec::new()
    } else {
        left.lines()
    }
}

/// Remove `path` and everything beneath it; what could not be removed is returned.
/// A missing `path` is not a failure.
pub fn remove_tree(path: &Path) -> Leftovers {
    let mut left = Leftovers::default();
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) if !p.as_os_str().is_empty() => (p, n),
        _ => {
            left.failures.push((path.to_path_buf(), Errno::EINVAL));
            return left;
        }
    };
    let top = match openat(
        AT_FDCWD,
        parent,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return left,
        Err(e) => {
            left.failures.push((path.to_path_buf(), e));
            return left;
        }
    };
    let Ok(name) = CString::new(name.as_bytes()) else {
        left.failures.push((path.to_path_buf(), Errno::EINVAL));
        return left;
    };
    let mut w = Walk {
        root: path,
        top,
        stack: Vec::new(),
        lo: 0,
        given_up: HashSet::new(),
        left,
    };
    w.run(name);
    w.left
}

/// Open the directory `name` in `dir` for reading, never through a symlink;
/// one its owner cannot read or search gets mode 0700 first.
fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match openat(dir, name, flags, Mode::empty()) {
        Err(Errno::EACCES) => {
            // AT_SYMLINK_NOFOLLOW: a symlink put there meanwhile is not followed.
            fchmodat(dir, name, Mode::S_IRWXU, FchmodatFlags::NoFollowSymlink)?;
            openat(dir, name, flags, Mode::empty())
        }
        r => r,
    }
}

fn reader(fd: &OwnedFd) -> Result<OwningIter, Errno> {
    let dup = fd
        .try_clone()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EMFILE)))?;
    Ok(Dir::from_fd(dup)?.into_iter())
}

impl Walk<'_> {
    fn run(&mut self, root_name: CString) {
        let entered = self.enter(None, &root_name);
        match entered {
            Ok(Some(level)) => self.stack.push(level),
            Ok(None) => return,
            Err(e) => {
                self.fail(self.root.to_path_buf(), e);
                return;
            }
        }
        while let Some(top) = self.stack.last_mut() {
            let Some((_, iter)) = top.open.as_mut() else {
                // Only an ascent closes the top, and it reopens it first.
                self.fail(self.path_of(None), Errno::EBADF);
                return;
            };
            match iter.next() {
                None => {
                    if !self.ascend() {
                        return;
                    }
                }
                Some(Err(e)) => {
                    // Unreadable: what remains in it stays; leave it.
                    let p = self.path_of(None);
                    self.fail(p, e);
                    if let Some(t) = self.stack.last_mut() {
                        t.failed = true;
                    }
                    if !self.ascend() {
                        return;
                    }
                }
                Some(Ok(entry)) => {
                    let name = entry.file_name();
                    if name.to_bytes() == b"." || name.to_bytes() == b".." {
                        continue;
                    }
                    if self.given_up.contains(&(top.dev, entry.ino())) {
                        continue;
                    }
                    let name = name.to_owned();
                    self.remove_entry(&name, entry.file_type(), entry.ino());
                }
            }
        }
    }

    /// The descriptor of the deepest open level (the root's parent when none).
    fn dir_fd(&self) -> BorrowedFd<'_> {
        match self.stack.last().and_then(|l| l.open.as_ref()) {
            Some((fd, _)) => fd.as_fd(),
            None => self.top.as_fd(),
        }
    }

    /// Remove one entry of the current directory: unlink a non-directory
    /// (a symlink included), enter a directory.
    fn remove_entry(&mut self, name: &CStr, ty: Option<Type>, d_ino: u64) {
        let is_dir = match ty {
            Some(t) => t == Type::Directory,
            None => fstatat(self.dir_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map(|s| SFlag::from_bits_truncate(s.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
                .unwrap_or(false),
        };
        if !is_dir {
            match unlinkat(self.dir_fd(), name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => return,
                // Became a directory meanwhile: enter it.
                Err(Errno::EISDIR) => {}
                Err(e) => return self.give_up(name, d_ino, e),
            }
        }
        let dev = self.stack.last().map(|l| l.dev);
        match self.enter(dev, name) {
            Ok(Some(level)) => self.push(level),
            Ok(None) => {}
            Err(e) => self.give_up(name, d_ino, e),
        }
    }

    /// Open the directory `name` of the current directory as a new level;
    /// `Ok(None)` when it turned out not to be a directory (then unlinked) or
    /// is gone. `dev`: the file system it must be on.
    fn enter(&mut self, dev: Option<u64>, name: &CStr) -> Result<Option<Level>, Errno> {
        let fd = match open_dir(self.dir_fd(), name) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            // A symlink (ELOOP) or another non-directory: unlink it, never follow it.
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return match unlinkat(self.dir_fd(), name, UnlinkatFlags::NoRemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => Ok(None),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        let st = fstat(&fd)?;
        if dev.is_some_and(|d| d != st.st_dev) {
            // A mount point inside the tree: not ours to empty.
            return Err(Errno::EXDEV);
        }
        // Write and search on it, to remove what is inside (its owner may
        // change its mode; root needs none).
        if st.st_mode & 0o700 != 0o700 {
            let _ = fchmod(&fd, Mode::S_IRWXU);
        }
        let iter = reader(&fd)?;
        Ok(Some(Level {
            name: name.to_owned(),
            dev: st.st_dev,
            ino: st.st_ino,
            open: Some((fd, iter)),
            failed: false,
            second_pass: false,
        }))
    }

    /// Push a level, closing the shallowest open one past the window.
    fn push(&mut self, level: Level) {
        self.stack.push(level);
        if self.stack.len() - self.lo > WINDOW {
            self.stack[self.lo].open = None;
            self.lo += 1;
        }
    }

    /// The current directory is read to its end: remove it from its parent.
    /// False when the walk cannot go on.
    fn ascend(&mut self) -> bool {
        let Some(done) = self.stack.pop() else {
            return false;
        };
        let depth = self.stack.len();
        if depth > 0 && depth <= self.lo {
            // The parent was closed: find it again from here.
            let Some((fd, _)) = done.open.as_ref() else {
                self.fail(self.path_of(None), Errno::EBADF);
                return false;
            };
            match self.reopen_parent(fd) {
                Ok(()) => {}
                Err(e) => {
                    let p = self.path_of(None);
                    self.fail(p, e);
                    return false;
                }
            }
        }
        self.lo = self.lo.min(self.stack.len());
        drop(done.open);
        let r = unlinkat(
            self.dir_fd(),
            done.name.as_c_str(),
            UnlinkatFlags::RemoveDir,
        );
        match r {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(Errno::ENOTEMPTY | Errno::EEXIST) if done.failed => {
                // Already said what is inside.
                self.mark_failed(done.dev, done.ino);
            }
            Err(Errno::ENOTEMPTY | Errno::EEXIST) if !done.second_pass => {
                // Something appeared after it was read: read it once more.
                let dev = self.stack.last().map(|l| l.dev);
                match self.enter(dev, &done.name) {
                    Ok(Some(mut level)) => {
                        level.second_pass = true;
                        self.push(level);
                    }
                    Ok(None) => {}
                    Err(e) => self.give_up(&done.name, done.ino, e),
                }
            }
            Err(e) => self.give_up(&done.name, done.ino, e),
        }
        true
    }

    /// Reopen stack's last level (closed by the window) through `..` of its
    /// child `child`, checked against the device and inode seen on the way
    /// down; else (the tree was moved meanwhile) by name from the root's
    /// parent, each step checked the same way.
    fn reopen_parent(&mut self, child: &OwnedFd) -> Result<(), Errno> {
        let i = self.stack.len() - 1;
        let (dev, ino) = (self.stack[i].dev, self.stack[i].ino);
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let up = openat(child, c"..", flags, Mode::empty())?;
        let st = fstat(&up)?;
        let fd = if (st.st_dev, st.st_ino) == (dev, ino) {
            up
        } else {
            drop(up);
            let mut cur: Option<OwnedFd> = None;
            for l in &self.stack[..=i] {
                let at = cur.as_ref().map_or(self.top.as_fd(), |f| f.as_fd());
                let next = openat(at, l.name.as_c_str(), flags, Mode::empty())?;
                let st = fstat(&next)?;
                if (st.st_dev, st.st_ino) != (l.dev, l.ino) {
                    return Err(Errno::ESTALE);
                }
                cur = Some(next);
            }
            cur.ok_or(Errno::ESTALE)?
        };
        let iter = reader(&fd)?;
        self.stack[i].open = Some((fd, iter));
        self.lo = i;
        Ok(())
    }

    /// An entry of the current directory could not be removed.
    fn give_up(&mut self, name: &CStr, ino: u64, e: Errno) {
        let dev = self.stack.last().map_or(0, |l| l.dev);
        self.given_up.insert((dev, ino));
        if let Some(t) = self.stack.last_mut() {
            t.failed = true;
        }
        if self.left.failures.len() < LISTED {
            let p = self.path_of(Some(name));
            self.left.failures.push((p, e));
        } else {
            self.left.more += 1;
        }
    }

    /// A directory stays because of what is inside it: skip it, and its parent stays too.
    fn mark_failed(&mut self, dev: u64, ino: u64) {
        self.given_up.insert((dev, ino));
        if let Some(t) = self.stack.last_mut() {
            t.failed = true;
        }
    }

    fn fail(&mut self, p: PathBuf, e: Errno) {
        if self.left.failures.len() < LISTED {
            self.left.failures.push((p, e));
        } else {
            self.left.more += 1;
        }
    }

    /// The path of the current directory (and `name` in it), for a report.
    fn path_of(&self, name: Option<&CStr>) -> PathBuf {
        let mut p = self.root.to_path_buf();
        for l in self.stack.iter().skip(1) {
            p.push(OsStr::from_bytes(l.name.to_bytes()));
        }
        if let Some(n) = name {
            p.push(OsStr::from_bytes(n.to_bytes()));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn scratch() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("capsule-cleanup-")
            .tempdir()
            .unwrap()
    }

    #[test]
    fn removes_a_chain_deeper_than_the_window_many_times_over() {
        let d = scratch();
        let root = d.path().join("t");
        fs::create_dir(&root).unwrap();
        // Relative creation: the full path would pass PATH_MAX.
        let mut fd = openat(
            AT_FDCWD,
            &root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        for i in 0..(WINDOW * 40) {
            nix::sys::stat::mkdirat(&fd, "dd", Mode::S_IRWXU).unwrap();
            if i % 7 == 0 {
                let f = openat(
                    &fd,
                    "f",
                    OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                    Mode::S_IRUSR,
                )
                .unwrap();
                drop(f);
            }
            fd = openat(
                &fd,
                "dd",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
        }
        drop(fd);
        let left = remove_tree(&root);
        assert!(left.is_empty(), "{:?}", left.lines());
        assert!(!root.exists());
    }

    #[test]
    fn fixes_modes_inside_and_never_follows_a_symlink_out() {
        let d = scratch();
        let outside = d.path().join("outside");
        fs::create_dir_all(outside.join("locked")).unwrap();
        fs::write(outside.join("keep"), "keep").unwrap();
        fs::set_permissions(outside.join("locked"), fs::Permissions::from_mode(0o000)).unwrap();
        let root = d.path().join("t");
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/f"), "x").unwrap();
        symlink(&outside, root.join("a/link")).unwrap();
        symlink(outside.join("locked"), root.join("a/b/link2")).unwrap();
        fs::set_permissions(root.join("a/b"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(root.join("a"), fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o000)).unwrap();
        let left = remove_tree(&root);
        assert!(left.is_empty(), "{:?}", left.lines());
        assert!(!root.exists());
        assert_eq!(fs::read_to_string(outside.join("keep")).unwrap(), "keep");
        let mode = fs::symlink_metadata(outside.join("locked"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0, "a mode outside the tree changed");
        fs::set_permissions(outside.join("locked"), fs::Permissions::from_mode(0o700)).unwrap();
    }

    #[test]
    fn a_symlink_as_the_root_is_unlinked_not_followed() {
        let d = scratch();
        let outside = d.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), "keep").unwrap();
        let root = d.path().join("t");
        symlink(&outside, &root).unwrap();
        let left = remove_tree(&root);
        assert!(left.is_empty(), "{:?}", left.lines());
        assert!(fs::symlink_metadata(&root).is_err());
        assert!(outside.join("keep").exists());
    }

    #[test]
    fn a_missing_tree_is_no_failure() {
        let d = scratch();
        assert!(remove_tree(&d.path().join("nothing")).is_empty());
    }

    #[test]
    fn lines_escape_control_characters() {
        let left = Leftovers {
            failures: vec![(PathBuf::from("/tmp/x/\x1b[2Jevil"), Errno::EACCES)],
            more: 3,
        };
        let l = left.lines();
        assert!(!l[0].contains('\x1b'), "{l:?}");
        assert_eq!(l[1], "... and 3 more");
    }
}

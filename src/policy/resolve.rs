//! Turning the paths written in a policy (or on the command line) into
//! absolute, canonical paths: relative → against the policy file's directory
//! (the cwd for CLI flags), `~` → the invoking user's home, then symlinks and
//! `..` resolved so the fail-closed rules see the real target (a symlink to
//! `/etc` is `/etc`).
//!
//! A symlink met on the way is followed only when no run of this user can
//! have planted it: the link lies in a directory that neither this user nor
//! any of its ancestors' owners-as-this-user can change (every directory
//! from `/` down to the link is not owned by and not writable by this
//! user). Any other link is refused with an error naming it ([`follow`]):
//! a run that can write `ws` could have replaced `ws/data` with a link to
//! `~/.ssh` (or, as root, `/etc/shadow`), and the next run's grant of
//! `ws/data` would be a grant of that target. As root every directory is
//! writable, so root's grants go through no link at all. Links beneath a
//! granted directory are not this module's business: Landlock checks where
//! they lead at each access.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use super::error::{PolicyError, Position};
use super::{LoadedPolicy, PathEntry};

/// One grant path after resolution, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Absolute and canonical (symlinks and `..` resolved).
    pub path: PathBuf,
    /// Key path of the entry (`filesystem.write[1]`) or the CLI flag (`--allow-write`).
    pub key: String,
    /// Policy line of the entry, when known.
    pub line: Option<usize>,
    /// The command-line flag that added it (None: the policy file).
    pub flag: Option<&'static str>,
    /// `path` opened while resolving ([`pin`]): Landlock's rule lands on
    /// this inode, whatever is put at the path later.
    pub opened: Opened,
}

/// The policy's filesystem grants, resolved. Optional entries that do not
/// exist are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedFs {
    pub read: Vec<ResolvedPath>,
    pub write: Vec<ResolvedPath>,
    pub exec: Vec<ResolvedPath>,
    pub deny: Vec<ResolvedPath>,
}

impl ResolvedFs {
    /// Every read, write and exec grant (not the denies).
    pub fn grants(&self) -> impl Iterator<Item = &ResolvedPath> {
        self.read.iter().chain(&self.write).chain(&self.exec)
    }
}

/// Directories that may never be granted `write` or `exec` as a whole
/// (validation refuses them; resolution trusts links directly in them).
pub const NO_WRITE_EXEC: &[&str] = &["/", "/etc", "/proc", "/sys", "/dev", "/usr", "/boot"];

pub use super::home::invoking_home;

/// Expand `~` / `~/x` and make `raw` absolute against `base`, without touching
/// the filesystem. `~user` is not supported.
pub fn expand(raw: &str, base: &Path, home: &Path) -> Result<PathBuf, String> {
    if raw.is_empty() {
        return Err("empty path".into());
    }
    if raw.contains('\0') {
        return Err("path contains a NUL byte".into());
    }
    let p = if raw == "~" {
        home.to_path_buf()
    } else if let Some(rest) = raw.strip_prefix("~/") {
        home.join(rest)
    } else if raw.starts_with('~') {
        return Err(format!(
            "`{raw}`: only `~` and `~/...` (the invoking user's home) are supported, not `~user`"
        ));
    } else {
        base.join(raw)
    };
    if !p.is_absolute() {
        return Err(format!(
            "`{raw}` does not resolve to an absolute path (base {})",
            base.display()
        ));
    }
    Ok(p)
}

/// Why [`follow`] could not resolve a path.
#[derive(Debug)]
pub enum FollowError {
    /// A link a run of this user could have planted.
    Link {
        link: PathBuf,
        target: PathBuf,
    },
    Io(std::io::Error),
}

impl std::fmt::Display for FollowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FollowError::Link { link, target } => write!(
                f,
                "passes through the symbolic link {} (-> {}) in a directory this user can write, where an \
                 earlier run may have planted it; a grant or mount is never taken through such a link (name \
                 the target itself if it is meant)",
                link.display(),
                target.display()
            ),
            FollowError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Whether no run of this user can have made `link`: it lies directly in
/// a directory that no policy may grant write in (`/`, `/usr`, `/etc`, ...:
/// a write grant or read-write mount of one of them, or of anything above
/// it, is refused), as the merged-/usr links `/bin` and `/lib64` do; or
/// every directory from `/` to the one holding it is neither owned by nor
/// writable by this user (an owner can chmod its directory writable again),
/// which is never so for root.
fn link_trusted(link: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if link
        .parent()
        .is_some_and(|dir| NO_WRITE_EXEC.iter().any(|d| dir == Path::new(d)))
    {
        return true;
    }
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return false;
    }
    link.ancestors().skip(1).all(|dir| {
        std::fs::metadata(dir).is_ok_and(|m| m.uid() != uid.as_raw())
            && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_err()
    })
}

/// An `O_PATH` descriptor of a grant's path, or none (then Landlock opens
/// the path itself). Not part of a grant's identity: it compares equal to
/// any other.
#[derive(Debug, Clone, Default)]
pub struct Opened(pub Option<std::sync::Arc<std::os::fd::OwnedFd>>);

impl Opened {
    pub const NONE: Opened = Opened(None);
}

impl PartialEq for Opened {
    fn eq(&self, _: &Opened) -> bool {
        true
    }
}

impl Eq for Opened {}

/// The canonical `path` ([`follow`]'s result) opened `O_PATH|O_NOFOLLOW`
/// and checked to be the one resolved (the kernel's name of the opened
/// inode): a run that swaps a component for a link after the walk gets the
/// grant refused, not redirected. Landlock takes the rule from this
/// descriptor.
pub fn pin(path: &Path) -> Result<Opened, FollowError> {
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;
    use std::os::fd::AsRawFd;
    let fd = open(
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| FollowError::Io(e.into()))?;
    let named =
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(FollowError::Io)?;
    let is_link = nix::sys::stat::fstat(&fd)
        .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
        .map_err(|e| FollowError::Io(e.into()))?;
    if named != path || is_link {
        return Err(FollowError::Io(std::io::Error::other(format!(
            "{} changed while it was being resolved (now {}): a link was put on the way",
            path.display(),
            named.display()
        ))));
    }
    Ok(Opened(Some(std::sync::Arc::new(fd))))
}

thread_local! {
    /// What [`follow`] learnt of each directory and file on its walks during
    /// one planning pass ([`WalkPass`]): whether it is a directory (links
    /// are never kept). None outside a pass.
    static WALKED: std::cell::RefCell<Option<std::collections::HashMap<PathBuf, bool>>> =
        const { std::cell::RefCell::new(None) };
}

/// One planning pass: while it lives, [`follow`] looks at each path that is
/// not a link once (every grant of a policy under `/home/u/project` walks
/// `/home`, `/home/u` and the project again: ~20 `statx` per run of a starter
/// policy). Never across passes: a `capsule serve` step, a `check` and an
/// `exec` each plan afresh, and the filesystem may have changed between them.
/// A link put on the way after the walk is still caught where the grant is
/// taken ([`pin`]). A pass begun inside another is part of it.
pub struct WalkPass {
    outer: bool,
}

impl WalkPass {
    pub fn begin() -> WalkPass {
        let outer = WALKED.with(|w| {
            let mut w = w.borrow_mut();
            let fresh = w.is_none();
            if fresh {
                *w = Some(Default::default());
            }
            fresh
        });
        WalkPass { outer }
    }
}

impl Drop for WalkPass {
    fn drop(&mut self) {
        if self.outer {
            WALKED.with(|w| w.borrow_mut().take());
        }
    }
}

/// Whether `p` (not followed) is a link, else a directory: through the
/// pass's record when there is one.
fn walk_kind(p: &Path) -> std::io::Result<(bool, bool)> {
    if let Some(dir) = WALKED.with(|w| w.borrow().as_ref().and_then(|m| m.get(p).copied())) {
        return Ok((false, dir));
    }
    let meta = std::fs::symlink_metadata(p)?;
    let (link, dir) = (meta.file_type().is_symlink(), meta.is_dir());
    if !link {
        WALKED.with(|w| {
            if let Some(m) = w.borrow_mut().as_mut() {
                m.insert(p.to_path_buf(), dir);
            }
        });
    }
    Ok((link, dir))
}

/// `abs` made canonical like `canonicalize`, following only trusted links
/// (see the module's documentation). The path, and the first link followed.
pub fn follow(abs: &Path) -> Result<(PathBuf, Option<PathBuf>), FollowError> {
    let mut todo: Vec<OsString> = Vec::new();
    let push_front = |todo: &mut Vec<OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_os_string()),
                Component::ParentDir => todo.push("..".into()),
                _ => {}
            }
        }
    };
    push_front(&mut todo, abs);
    let mut cur = PathBuf::from("/");
    let mut via = None;
    let mut hops = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            // `cur` is canonical: its parent is the real one.
            cur.pop();
            continue;
        }
        let next = cur.join(&name);
        let (link, dir) = walk_kind(&next).map_err(FollowError::Io)?;
        if !link {
            if !todo.is_empty() && !dir {
                return Err(FollowError::Io(std::io::Error::from(
                    ErrorKind::NotADirectory,
                )));
            }
            cur = next;
            continue;
        }
        let target = std::fs::read_link(&next).map_err(FollowError::Io)?;
        if !link_trusted(&next) {
            return Err(FollowError::Link { link: next, target });
        }
        hops += 1;
        if hops > 40 {
            return Err(FollowError::Io(std::io::Error::from_raw_os_error(
                libc::ELOOP,
            )));
        }
        via.get_or_insert(next);
        if target.is_absolute() {
            cur = PathBuf::from("/");
        }
        push_front(&mut todo, &target);
    }
    Ok((cur, via))
}

/// Resolve one path. `Ok(None)`: it does not exist and `optional` is set.
fn resolve_path(
    raw: &str,
    base: &Path,
    home: &Path,
    optional: bool,
) -> Result<Option<(PathBuf, Opened)>, String> {
    let abs = expand(raw, base, home)?;
    match follow(&abs).and_then(|(p, via)| Ok((pin(&p)?, p, via))) {
        Ok((opened, p, via)) => {
            match super::credentials::linked_into_secret(&p, via.as_deref(), &abs, home) {
                Some(why) => Err(format!("`{raw}` ({}) {why}", abs.display())),
                None => Ok(Some((p, opened))),
            }
        }
        Err(FollowError::Link { link, target }) => Err(format!(
            "`{raw}` ({}) {}",
            abs.display(),
            FollowError::Link { link, target }
        )),
        Err(FollowError::Io(e))
            if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) =>
        {
            if optional {
                tracing::debug!(path = %abs.display(), "optional grant path missing, skipped");
                Ok(None)
            } else {
                Err(format!(
                    "`{raw}` ({}) does not exist (create it, or mark the entry optional: `{raw}?` or {{path: {raw}, optional: true}})",
                    abs.display()
                ))
            }
        }
        Err(FollowError::Io(e)) => Err(format!("`{raw}` ({}): cannot resolve: {e}", abs.display())),
    }
}

/// Resolve a path given outside a policy file (`--allow-read PATH`, resolved
/// against the cwd as `base`). `key` labels the result and errors (the flag).
pub fn resolve_one(
    raw: &str,
    base: &Path,
    home: &Path,
    key: &str,
    optional: bool,
) -> Result<Option<ResolvedPath>, PolicyError> {
    let path = resolve_path(raw, base, home, optional).map_err(|message| PolicyError::Path {
        at: Position::default(),
        key: key.to_string(),
        message,
    })?;
    Ok(path.map(|(path, opened)| ResolvedPath {
        path,
        opened,
        key: key.to_string(),
        line: None,
        flag: None,
    }))
}

/// Resolve every `filesystem` path of a loaded policy. Missing non-optional
/// paths are errors naming the key and line.
pub fn resolve_fs(lp: &LoadedPolicy, home: &Path) -> Result<ResolvedFs, PolicyError> {
    let fs = &lp.policy.filesystem;
    let one = |section: &str, entries: &[PathEntry]| -> Result<Vec<ResolvedPath>, PolicyError> {
        let mut out = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let key = format!("filesystem.{section}[{i}]");
            match resolve_path(entry.raw(), &lp.base_dir, home, entry.optional()) {
                Ok(Some((path, opened))) => out.push(ResolvedPath {
                    path,
                    opened,
                    line: lp.line_of(&key),
                    key,
                    flag: None,
                }),
                Ok(None) => {}
                Err(message) => {
                    return Err(PolicyError::Path {
                        at: lp.position_of(&key),
                        key,
                        message,
                    })
                }
            }
        }
        Ok(out)
    };
    Ok(ResolvedFs {
        read: one("read", &fs.read)?,
        write: one("write", &fs.write)?,
        exec: one("exec", &fs.exec)?,
        deny: one("deny", &fs.deny)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::load_file;

    #[test]
    fn expands_home_and_relative() {
        let home = Path::new("/home/u");
        let base = Path::new("/srv/p");
        assert_eq!(expand("~", base, home).unwrap(), PathBuf::from("/home/u"));
        assert_eq!(
            expand("~/x/y", base, home).unwrap(),
            PathBuf::from("/home/u/x/y")
        );
        assert_eq!(
            expand("./d", base, home).unwrap(),
            PathBuf::from("/srv/p/./d")
        );
        assert_eq!(expand("/abs", base, home).unwrap(), PathBuf::from("/abs"));
        assert!(expand("~root/x", base, home).unwrap_err().contains("~user"));
        assert!(expand("", base, home).is_err());
    }

    #[test]
    fn resolves_canonically_and_skips_optional() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("data")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        let home = root.join("home");
        std::fs::create_dir(&home).unwrap();
        let policy = root.join("p.yaml");
        std::fs::write(
            &policy,
            "version: 1\nfilesystem:\n  read:\n    - ./data/../data\n    - ./gone?\n    - {path: ./gone2, optional: true}\n    - \"~\"\n",
        )
        .unwrap();
        let lp = load_file(&policy).unwrap();
        let fs = resolve_fs(&lp, &home).unwrap();
        let paths: Vec<_> = fs.read.iter().map(|r| r.path.clone()).collect();
        assert_eq!(paths, vec![root.join("data"), home.clone()]);
        assert_eq!(fs.read[1].key, "filesystem.read[3]");
        assert_eq!(fs.read[1].line, Some(7));
    }

    /// A link in a directory this user can write (here: its own temp dir)
    /// may have been planted by a run: refused, named. Links in directories
    /// only root can change are followed for other users, never for root.
    #[test]
    fn links_no_policy_could_have_planted_are_followed_as_root_too() {
        // Directly in `/` or `/usr`: no write grant reaches there.
        assert!(link_trusted(Path::new("/lib64")));
        assert!(link_trusted(Path::new("/usr/sbin")));
        // One level down a write grant may reach (as root, every directory
        // is writable by DAC).
        if nix::unistd::geteuid().is_root() {
            assert!(!link_trusted(Path::new("/var/run")));
            assert!(!link_trusted(Path::new("/usr/local/x")));
        }
    }

    #[test]
    fn links_a_run_may_have_planted_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
        let policy = root.join("p.yaml");
        std::fs::write(
            &policy,
            "version: 1\nfilesystem:\n  read: [./etc-link/ssl]\n",
        )
        .unwrap();
        let lp = load_file(&policy).unwrap();
        let e = resolve_fs(&lp, &root).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "symbolic link {} (-> /etc)",
                root.join("etc-link").display()
            )),
            "{e}"
        );
        // A link swapped in after the walk: the pin refuses, naming the change.
        std::fs::create_dir(root.join("data")).unwrap();
        let (p, _) = follow(&root.join("data")).unwrap();
        assert!(pin(&p).is_ok());
        std::fs::remove_dir(root.join("data")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("data")).unwrap();
        let e = pin(&p).expect_err("refused").to_string();
        assert!(
            e.contains("changed while it was being resolved") || e.contains("symbolic link"),
            "{e}"
        );
        std::fs::remove_file(root.join("data")).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let (p, _) = follow(&root.join("a/b")).unwrap();
        std::fs::rename(root.join("a"), root.join("a2")).unwrap();
        std::os::unix::fs::symlink(root.join("a2"), root.join("a")).unwrap();
        let e = pin(&p).expect_err("refused").to_string();
        assert!(e.contains("changed while it was being resolved"), "{e}");
        // `..` after a followed link is the target's parent, as the kernel has it.
        // (/proc/self lies directly in /proc, where no run can make a link:
        // followed as root too.)
        let sys = Path::new("/proc/self/../self");
        let (p, via) = follow(sys).unwrap();
        assert!(
            p.starts_with("/proc") && via == Some(PathBuf::from("/proc/self")),
            "{p:?}"
        );
    }

    #[test]
    fn a_walk_pass_is_one_plan_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let untrusted = !link_trusted(&root.join("a"));
        {
            let _pass = WalkPass::begin();
            assert_eq!(follow(&root.join("a/b")).unwrap().0, root.join("a/b"));
            // A nested pass is part of the outer one, which it does not end.
            drop(WalkPass::begin());
            assert!(WALKED.with(|w| w
                .borrow()
                .as_ref()
                .is_some_and(|m| m.contains_key(&root.join("a")))));
            // Inside the pass a link put on the way is still caught by the pin.
            std::fs::rename(root.join("a"), root.join("a2")).unwrap();
            std::os::unix::fs::symlink(root.join("a2"), root.join("a")).unwrap();
            let (p, _) = follow(&root.join("a/b")).unwrap();
            assert!(pin(&p).is_err());
        }
        // The next plan walks afresh and sees the link.
        assert!(WALKED.with(|w| w.borrow().is_none()));
        let _pass = WalkPass::begin();
        match follow(&root.join("a/b")) {
            Err(FollowError::Link { link, .. }) => assert!(untrusted && link == root.join("a")),
            Ok((p, via)) => {
                assert!(!untrusted);
                assert_eq!((p, via), (root.join("a2/b"), Some(root.join("a"))));
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn missing_path_names_key_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("p.yaml");
        std::fs::write(&policy, "version: 1\nfilesystem:\n  write: [./out]\n").unwrap();
        let lp = load_file(&policy).unwrap();
        let e = resolve_fs(&lp, Path::new("/nonexistent"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("p.yaml:3:11: filesystem.write[0]: `./out` ("),
            "{e}"
        );
        assert!(e.contains("does not exist") && e.contains("./out?"), "{e}");
    }

    #[test]
    fn resolve_one_for_cli_flags() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let r = resolve_one(".", &root, Path::new("/h"), "--allow-read", false)
            .unwrap()
            .unwrap();
        assert_eq!(r.path, root);
        assert_eq!(r.key, "--allow-read");
        assert_eq!(
            resolve_one("nope", &root, Path::new("/h"), "--allow-read", true).unwrap(),
            None
        );
        let e = resolve_one("nope", &root, Path::new("/h"), "--allow-write", false).unwrap_err();
        assert!(e.to_string().starts_with("--allow-write: `nope` ("), "{e}");
    }
}

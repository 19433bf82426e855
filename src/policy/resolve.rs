//! Turning the paths written in a policy (or on the command line) into
//! absolute, canonical paths: relative → against the policy file's directory
//! (the cwd for CLI flags), `~` → the invoking user's home, then symlinks and
//! `..` resolved so the fail-closed rules see the real target (a symlink to
//! `/etc` is `/etc`).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

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

/// The invoking user's home: `$HOME` if set and absolute, else the passwd
/// entry of the real uid, else `/nonexistent` (so `~` grants fail as missing).
pub fn invoking_home() -> PathBuf {
    if let Some(h) = std::env::var_os("HOME") {
        let p = PathBuf::from(h);
        if p.is_absolute() {
            return p;
        }
    }
    account_home().unwrap_or_else(|| PathBuf::from("/nonexistent"))
}

/// The home directory of this process's account in the password database.
/// A static capsule may have no NSS to ask: then /etc/passwd itself.
pub fn account_home() -> Option<PathBuf> {
    let uid = nix::unistd::getuid();
    if let Ok(Some(u)) = nix::unistd::User::from_uid(uid) {
        if u.dir.is_absolute() {
            return Some(u.dir);
        }
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd_home(&passwd, uid.as_raw())
}

/// The home field of `uid`'s line in a passwd(5) text.
pub fn passwd_home(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2].parse::<u32>().ok() == Some(uid))
            .then(|| PathBuf::from(f[5]))
            .filter(|p| p.is_absolute())
    })
}

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

/// Resolve one path. `Ok(None)`: it does not exist and `optional` is set.
fn resolve_path(
    raw: &str,
    base: &Path,
    home: &Path,
    optional: bool,
) -> Result<Option<PathBuf>, String> {
    let abs = expand(raw, base, home)?;
    match abs.canonicalize() {
        Ok(p) => Ok(Some(p)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
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
        Err(e) => Err(format!("`{raw}` ({}): cannot resolve: {e}", abs.display())),
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
    Ok(path.map(|path| ResolvedPath {
        path,
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
                Ok(Some(path)) => out.push(ResolvedPath {
                    path,
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
            "version: 1\nfilesystem:\n  read:\n    - ./data/../data\n    - ./etc-link\n    - ./gone?\n    - {path: ./gone2, optional: true}\n    - \"~\"\n",
        )
        .unwrap();
        let lp = load_file(&policy).unwrap();
        let fs = resolve_fs(&lp, &home).unwrap();
        let paths: Vec<_> = fs.read.iter().map(|r| r.path.clone()).collect();
        assert_eq!(
            paths,
            vec![root.join("data"), PathBuf::from("/etc"), home.clone()]
        );
        assert_eq!(fs.read[1].key, "filesystem.read[1]");
        assert_eq!(fs.read[1].line, Some(5));
        assert_eq!(fs.read[2].key, "filesystem.read[4]");
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

    #[test]
    fn home_is_absolute() {
        assert!(invoking_home().is_absolute());
        let text = "root:x:0:0:root:/root:/bin/bash\nbad line\nu:x:1000:1000::/home/u:/bin/sh\nr:x:7:7::rel:/bin/sh\n";
        assert_eq!(passwd_home(text, 0), Some(PathBuf::from("/root")));
        assert_eq!(passwd_home(text, 1000), Some(PathBuf::from("/home/u")));
        assert_eq!(passwd_home(text, 7), None);
        assert_eq!(passwd_home(text, 5), None);
    }
}

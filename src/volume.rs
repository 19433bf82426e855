//! Named volumes: directories that capsule owns, usable as mount sources
//! (`--mount volume:NAME:/dst`) and managed with `capsule volume`.
//!
//! A volume NAME is the directory `$XDG_DATA_HOME/capsule/volumes/NAME`
//! (default `~/.local/share/capsule/volumes/NAME`), mode 0700, owned by the
//! invoking user. Its creation time and labels live beside it in
//! `volumes/.NAME.json`: a name starts with a letter or digit, so that file
//! can never be a volume, and nothing mounted as the volume can reach it.
//! Names follow docker's rule, `[a-zA-Z0-9][a-zA-Z0-9_.-]*` (at most 255
//! bytes, one path component), so callers written for
//! `docker volume create|inspect|rm` keep working.
//!
//! Removal never follows a symbolic link out of the volume: a link inside is
//! unlinked, not descended into, and a volume path that is itself a link is
//! refused as a volume and only unlinked by `rm`.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Longest volume name (one path component).
pub const MAX_NAME: usize = 255;

/// What went wrong with a volume; each message names the volume or path.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(
        "invalid volume name {name:?}: {why} (names match [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 255 bytes)"
    )]
    InvalidName { name: String, why: &'static str },
    #[error("no such volume: {0}")]
    NotFound(String),
    #[error(
        "volume {name}: {path} is not a directory that capsule created ({why}); remove it by hand"
    )]
    NotAVolume {
        name: String,
        path: PathBuf,
        why: String,
    },
    #[error(
        "volume {name}: {path}: {source} (volumes live in $XDG_DATA_HOME/capsule/volumes, default \
         ~/.local/share/capsule/volumes: set XDG_DATA_HOME to a writable directory to keep them elsewhere)"
    )]
    Io {
        name: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("volume {name}: {path}: could not remove all of it: {what}")]
    Left {
        name: String,
        path: PathBuf,
        what: String,
    },
}

/// What `capsule volume inspect` prints for one volume, in the field names
/// and order of `docker volume inspect`.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeInfo {
    #[serde(rename = "CreatedAt")]
    pub created_at: String,
    #[serde(rename = "Driver")]
    pub driver: &'static str,
    #[serde(rename = "Labels")]
    pub labels: BTreeMap<String, String>,
    #[serde(rename = "Mountpoint")]
    pub mountpoint: PathBuf,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Options")]
    pub options: BTreeMap<String, String>,
    #[serde(rename = "Scope")]
    pub scope: &'static str,
}

/// The sidecar `volumes/.NAME.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Meta {
    created_at: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// `$XDG_DATA_HOME/capsule/volumes`, else `~/.local/share/capsule/volumes`.
pub fn volumes_dir() -> PathBuf {
    let data = match std::env::var_os("XDG_DATA_HOME").map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => crate::policy::resolve::invoking_home().join(".local/share"),
    };
    data.join("capsule/volumes")
}

/// Check a volume name against docker's rule.
pub fn validate_name(name: &str) -> Result<(), VolumeError> {
    let bad = |why| {
        Err(VolumeError::InvalidName {
            name: name.to_string(),
            why,
        })
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return bad("empty"),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return bad("the first character must be a letter or a digit")
        }
        Some(_) => {}
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return bad("only letters, digits, '_', '.' and '-' are allowed");
    }
    if name.len() > MAX_NAME {
        return bad("too long");
    }
    Ok(())
}

/// The directory of the existing volume NAME, for use as a mount source.
/// Fails when the name is invalid, the volume does not exist, or its path is
/// not a real directory owned by this user (a symlink is never followed).
pub fn volume_path(name: &str) -> Result<PathBuf, VolumeError> {
    volume_path_in(&volumes_dir(), name)
}

/// [`volume_path`] with the volumes directory given.
pub fn volume_path_in(volumes: &Path, name: &str) -> Result<PathBuf, VolumeError> {
    validate_name(name)?;
    let path = volumes.join(name);
    check_is_volume(name, &path)?;
    Ok(path)
}

fn path_of(name: &str) -> Result<PathBuf, VolumeError> {
    validate_name(name)?;
    Ok(volumes_dir().join(name))
}

fn meta_path(name: &str) -> PathBuf {
    volumes_dir().join(format!(".{name}.json"))
}

fn io_err(name: &str, path: &Path) -> impl FnOnce(io::Error) -> VolumeError {
    let (name, path) = (name.to_string(), path.to_path_buf());
    move |source| VolumeError::Io { name, path, source }
}

fn check_is_volume(name: &str, path: &Path) -> Result<fs::Metadata, VolumeError> {
    let md = match fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(VolumeError::NotFound(name.to_string()))
        }
        Err(e) => return Err(io_err(name, path)(e)),
    };
    let not = |why: String| VolumeError::NotAVolume {
        name: name.to_string(),
        path: path.to_path_buf(),
        why,
    };
    if md.file_type().is_symlink() {
        return Err(not("it is a symbolic link".into()));
    }
    if !md.is_dir() {
        return Err(not("it is not a directory".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if md.uid() != me {
        return Err(not(format!("owned by uid {}, not {me}", md.uid())));
    }
    Ok(md)
}

/// Create the volume NAME (idempotent: an existing volume is kept as it is).
/// Returns whether it was created now.
pub fn create(name: &str, labels: &BTreeMap<String, String>) -> Result<bool, VolumeError> {
    let path = path_of(name)?;
    let dir = volumes_dir();
    ensure_private_dir(name, &dir)?;
    let created = match fs::DirBuilder::new().mode(0o700).create(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(io_err(name, &path)(e)),
    };
    check_is_volume(name, &path)?;
    if created {
        // The umask may have taken bits away: the mode is 0700 exactly.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .map_err(io_err(name, &path))?;
    }
    if created || !meta_path(name).exists() {
        let meta = Meta {
            created_at: rfc3339_seconds(&crate::audit::rfc3339_now()),
            labels: labels.clone(),
        };
        write_meta(name, &meta)?;
    }
    Ok(created)
}

/// `capsule/` and `capsule/volumes/` under the data directory: created 0700
/// (their parents with the default mode), and never a symlink.
fn ensure_private_dir(name: &str, dir: &Path) -> Result<(), VolumeError> {
    if let Some(capsule_dir) = dir.parent() {
        if let Some(data) = capsule_dir.parent() {
            fs::create_dir_all(data).map_err(io_err(name, data))?;
        }
        for d in [capsule_dir, dir] {
            match fs::DirBuilder::new().mode(0o700).create(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err(name, d)(e)),
            }
        }
    }
    let md = fs::symlink_metadata(dir).map_err(io_err(name, dir))?;
    if !md.is_dir() {
        return Err(VolumeError::NotAVolume {
            name: name.to_string(),
            path: dir.to_path_buf(),
            why: "the volumes directory is not a directory".into(),
        });
    }
    Ok(())
}

fn write_meta(name: &str, meta: &Meta) -> Result<(), VolumeError> {
    let path = meta_path(name);
    let tmp = volumes_dir().join(format!(".{name}.json.{}", std::process::id()));
    let text = serde_json::to_vec_pretty(meta).unwrap_or_default();
    let write = || -> io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err(name, &path)(e)
    })
}

fn read_meta(name: &str) -> Option<Meta> {
    let text = fs::read(meta_path(name)).ok()?;
    serde_json::from_slice(&text).ok()
}

/// `2026-01-02T03:04:05.678Z` → `2026-01-02T03:04:05Z` (docker's precision).
fn rfc3339_seconds(t: &str) -> String {
    match (t.get(..19), t.ends_with('Z')) {
        (Some(head), true) => format!("{head}Z"),
        _ => t.to_string(),
    }
}

/// `docker volume inspect` for one volume.
pub fn inspect(name: &str) -> Result<VolumeInfo, VolumeError> {
    let path = path_of(name)?;
    check_is_volume(name, &path)?;
    let meta = read_meta(name).unwrap_or_default();
    Ok(VolumeInfo {
        created_at: meta.created_at,
        driver: "local",
        labels: meta.labels,
        mountpoint: path,
        name: name.to_string(),
        options: BTreeMap::new(),
        scope: "local",
    })
}

/// Every volume, by name (entries that are not volumes are left out).
pub fn list() -> Result<Vec<VolumeInfo>, VolumeError> {
    let dir = volumes_dir();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(io_err("*", &dir)(e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| validate_name(n).is_ok())
        .collect();
    names.sort();
    Ok(names.iter().filter_map(|n| inspect(n).ok()).collect())
}

/// Remove the volume NAME and everything in it. A missing volume is
/// `NotFound` (the CLI's `-f` ignores that). Symbolic links inside are
/// unlinked, never followed; a volume path that is a symlink is unlinked.
pub fn remove(name: &str) -> Result<(), VolumeError> {
    let path = path_of(name)?;
    let md = match fs::symlink_metadata(&path) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let _ = fs::remove_file(meta_path(name));
            return Err(VolumeError::NotFound(name.to_string()));
        }
        Err(e) => return Err(io_err(name, &path)(e)),
    };
    if !md.is_dir() {
        // A link or file planted where a volume would be: unlink it, never its target.
        fs::remove_file(&path).map_err(io_err(name, &path))?;
    } else {
        // The run that had the volume mounted shaped what is inside: std's
        // remove_dir_all holds a descriptor per level (a chain deeper than
        // the descriptor limit fails with EMFILE) and cannot enter a
        // directory made mode 0500/000 (as a non-root owner). The TMPDIR's
        // walk has neither limit and never follows a link.
        let left = crate::supervisor::cleanup::remove_tree(&path);
        if !left.is_empty() {
            return Err(VolumeError::Left {
                name: name.to_string(),
                path,
                what: left.lines().join("; "),
            });
        }
    }
    match fs::remove_file(meta_path(name)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(name, &meta_path(name))(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dockers_rule() {
        for ok in ["a", "A9", "0", "my-vol_1.2", "x.-_"] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(MAX_NAME + 1);
        for bad in [
            "", ".", "..", ".hidden", "-x", "_x", "a/b", "../x", "a b", "é", "a\0", &long,
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name(&"a".repeat(MAX_NAME)).is_ok());
    }

    #[test]
    fn volume_path_is_an_existing_real_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        let vols = dir.path();
        fs::create_dir(vols.join("v")).unwrap();
        assert_eq!(volume_path_in(vols, "v").unwrap(), vols.join("v"));
        assert!(matches!(
            volume_path_in(vols, "missing"),
            Err(VolumeError::NotFound(_))
        ));
        assert!(matches!(
            volume_path_in(vols, "../v"),
            Err(VolumeError::InvalidName { .. })
        ));
        std::os::unix::fs::symlink(vols.join("v"), vols.join("link")).unwrap();
        assert!(matches!(
            volume_path_in(vols, "link"),
            Err(VolumeError::NotAVolume { .. })
        ));
        fs::write(vols.join("file"), "").unwrap();
        assert!(matches!(
            volume_path_in(vols, "file"),
            Err(VolumeError::NotAVolume { .. })
        ));
    }

    #[test]
    fn created_at_has_docker_precision() {
        assert_eq!(
            rfc3339_seconds("2026-01-02T03:04:05.678Z"),
            "2026-01-02T03:04:05Z"
        );
    }
}

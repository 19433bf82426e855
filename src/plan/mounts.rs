//! `mounts:` and `--mount SRC:DST[:ro|rw]`: a host path (or a capsule
//! volume) seen at another path inside the run's view.
//!
//! Each mount becomes a Landlock grant on its source (the bind keeps the
//! inode, so the rule holds at the destination): read+exec for a read-only
//! mount (the run cannot write there, so executing from it is safe), read
//! and write for a read-write one. When a place the run can write (a write
//! grant, a read-write mount, the TMPDIR, the workspace's output) lies inside
//! a read-only mount's source, or holds it, the run could write a program
//! there and execute it through the mount: the mount then gets read only
//! ([`withhold_exec`]), and `check` says so. A source reached through a symlink a run
//! may have planted is refused (`resolve::follow`). A mount whose destination differs from
//! its source needs the view (a mount namespace): without one it is refused.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{Access, Bind, FsGrant, Opened, Origin};
use crate::policy::error::Position;
use crate::policy::resolve;
use crate::policy::validate::{self, GrantKind};
use crate::policy::LoadedPolicy;

#[derive(Debug, Error)]
pub enum MountError {
    /// `at` is the entry's place in the policy file (`FILE:LINE:COL: `), empty for a flag.
    #[error("{at}{key}: {why}")]
    Bad {
        at: Position,
        key: String,
        why: String,
    },
}

/// Parse `SRC:DST[:ro|rw]`.
pub fn parse_flag(raw: &str) -> Result<(String, String, bool), String> {
    let (rest, read_only) = if let Some(r) = raw.strip_suffix(":ro") {
        (r, true)
    } else if let Some(r) = raw.strip_suffix(":rw") {
        (r, false)
    } else {
        (raw, true)
    };
    // `volume:NAME:DST`: the first colon belongs to the source.
    let (src, dst) = if let Some(v) = rest.strip_prefix("volume:") {
        let (name, dst) = v.split_once(':').ok_or("expected SRC:DST[:ro|rw]")?;
        (format!("volume:{name}"), dst.to_string())
    } else {
        let (s, d) = rest.split_once(':').ok_or("expected SRC:DST[:ro|rw]")?;
        (s.to_string(), d.to_string())
    };
    if src.is_empty() || dst.is_empty() {
        return Err("expected SRC:DST[:ro|rw]".into());
    }
    Ok((src, dst, read_only))
}

/// Destinations a mount may not cover.
const NO_DST: &[&str] = &["/", "/proc", "/sys", "/dev", "/tmp"];

fn resolve_one(
    key: &str,
    src: &str,
    dst: &str,
    read_only: bool,
    base: &Path,
    home: &Path,
) -> Result<(Bind, Opened), MountError> {
    let bad = |why: String| MountError::Bad {
        at: Position::default(),
        key: key.to_string(),
        why,
    };
    // A volume is capsule's own directory; a host source is resolved like a
    // grant, through no link a run may have planted (`resolve::follow`).
    let mut literal = PathBuf::new();
    let (src_path, via_link) = if let Some(name) = src.strip_prefix("volume:") {
        let v = crate::volume::volume_path(name).map_err(|e| {
            bad(format!(
                "{e} (create it with `capsule volume create {name}`)"
            ))
        })?;
        let c =
            std::fs::canonicalize(&v).map_err(|e| bad(format!("source {}: {e}", v.display())))?;
        (c, None)
    } else {
        let abs = resolve::expand(src, base, home).map_err(bad)?;
        literal.clone_from(&abs);
        resolve::follow(&abs).map_err(|e| bad(format!("source {}: {e}", abs.display())))?
    };
    let opened =
        resolve::pin(&src_path).map_err(|e| bad(format!("source {}: {e}", src_path.display())))?;
    if let Some(why) =
        super::credentials::linked_into_secret(&src_path, via_link.as_deref(), &literal, home)
    {
        return Err(bad(format!("source {}: {why}", src_path.display())));
    }
    let dst_path = PathBuf::from(dst);
    if !dst_path.is_absolute() {
        return Err(bad(format!("destination `{dst}` must be an absolute path")));
    }
    let clean: PathBuf = dst_path.components().collect();
    if clean
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(bad(format!("destination `{dst}` may not contain `..`")));
    }
    if NO_DST.iter().any(|d| clean == Path::new(d))
        || clean.starts_with("/proc")
        || clean.starts_with("/sys")
        || clean.starts_with("/dev")
    {
        return Err(bad(format!(
            "destination `{dst}` is reserved for the run's view (/, /proc, /sys, /dev, /tmp)"
        )));
    }
    let kind = if read_only {
        GrantKind::Read
    } else {
        GrantKind::Write
    };
    validate::check_grant(&src_path, kind)
        .map_err(|why| bad(format!("source {}: {why}", src_path.display())))?;
    Ok((
        Bind {
            src: src_path,
            dst: clean,
            read_only,
        },
        opened,
    ))
}

/// Resolve the policy's `mounts:` and the `--mount` flags; the binds and
/// the Landlock grants on their sources.
pub fn resolve(
    loaded: &LoadedPolicy,
    flags: &[String],
    here: &Path,
    home: &Path,
) -> Result<(Vec<Bind>, Vec<FsGrant>), MountError> {
    let mut binds = Vec::new();
    let mut grants = Vec::new();
    for (i, m) in loaded.policy.mounts.iter().enumerate() {
        let key = format!("mounts[{i}]");
        let (b, opened) = resolve_one(&key, &m.src, &m.dst, m.read_only, &loaded.base_dir, home)
            .map_err(|MountError::Bad { key, why, .. }| MountError::Bad {
                // Every policy error names its place in the file (section 2).
                at: if loaded.source.is_some() {
                    loaded.position_of(&key)
                } else {
                    Position::default()
                },
                key,
                why,
            })?;
        let line = loaded.lines.get(&key).copied();
        grants.push(grant(&b, Origin::Policy { key, line }, opened));
        binds.push(b);
    }
    for raw in flags {
        let (src, dst, ro) = parse_flag(raw).map_err(|why| MountError::Bad {
            at: Position::default(),
            key: format!("--mount {raw}"),
            why,
        })?;
        let (b, opened) = resolve_one(&format!("--mount {raw}"), &src, &dst, ro, here, home)?;
        grants.push(grant(&b, Origin::Cli("--mount"), opened));
        binds.push(b);
    }
    Ok((binds, grants))
}

/// Take exec away from each read-only mount's grant that overlaps a place
/// the run can write (Landlock rules attach to inodes: exec on the source
/// covers the writable place beneath it by every path). One note each.
pub fn withhold_exec(grants: &mut [FsGrant], binds: &[Bind]) -> Vec<String> {
    let writable = super::tools::writable_places(grants);
    let mut notes = Vec::new();
    for g in grants.iter_mut() {
        if !g.origin.is_mount() || g.access != Access::EXEC {
            continue;
        }
        let Some((w, o)) = writable
            .iter()
            .find(|(w, _)| w.starts_with(&g.path) || g.path.starts_with(w))
        else {
            continue;
        };
        g.access = Access::READ;
        let at = binds
            .iter()
            .find(|b| b.src == g.path && b.read_only)
            .map(|b| format!(" (seen at {})", b.dst.display()))
            .unwrap_or_default();
        notes.push(format!(
            "{}{at} ({}): read-only mount, exec withheld: {} ({o}) is writable and {} it, so a program the run \
             wrote there could be executed through the mount (grant exec where it is meant with filesystem.exec)",
            g.path.display(),
            g.origin,
            w.display(),
            if w.starts_with(&g.path) { "inside" } else { "holds" }
        ));
    }
    notes
}

fn grant(b: &Bind, origin: Origin, opened: Opened) -> FsGrant {
    FsGrant {
        path: b.src.clone(),
        access: if b.read_only {
            Access::EXEC
        } else {
            Access::WRITE
        },
        origin,
        opened,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        assert_eq!(
            parse_flag("./a:/pack").unwrap(),
            ("./a".into(), "/pack".into(), true)
        );
        assert_eq!(
            parse_flag("./a:/pack:rw").unwrap(),
            ("./a".into(), "/pack".into(), false)
        );
        assert_eq!(
            parse_flag("volume:v1:/install:rw").unwrap(),
            ("volume:v1".into(), "/install".into(), false)
        );
        assert!(parse_flag("nodst").is_err());
        assert!(parse_flag(":/x").is_err());
    }
}

//! Turning grants and denies into Landlock rules, carving denied paths out.
//!
//! Landlock only adds rights, it cannot subtract: a rule on `G` gives its rights to
//! everything beneath `G`. So for a grant `G` with denied paths `D` strictly beneath it,
//! no rule is put on `G`. Instead, for each directory `P` on the way from `G` down to
//! `parent(D)`, every entry of `P` except the next component toward `D` gets a rule with
//! `G`'s rights; `D` itself gets none. Several denies beneath one grant share the walk.
//!
//! Consequences, by design:
//! * An entry created later directly in an expanded directory `P` (after the rules are
//!   built) is not reachable, and creating one directly in `P` is denied: `P` itself has
//!   no rule. Entries created deeper, inside a granted entry, are fine.
//! * An expanded directory can be listed only when every denied path beneath it is a
//!   file (then `P` gets ReadDir alone, which gives no file rights and reaches no denied
//!   directory); with a denied directory beneath, listing `P` is denied.
//! * Symbolic links among the entries of an expanded directory get no rule: opening the
//!   entry's path with `PathFd` would follow the link and grant its target, possibly
//!   outside `G` or inside a denied path. Skipping them loses nothing: Landlock checks a
//!   followed link against its target's own path, so a link to a place inside `G` still
//!   works through the target's rule and a link to anywhere else is refused. Entries are
//!   opened with `O_PATH|O_NOFOLLOW` relative to the directory and checked with fstat.
//! * Another name for a denied object inside `G` (a hard link, a bind mount) exposes it,
//!   as any copy would: Landlock rules attach to inodes.
//!
//! A grant naming a denied path exactly wins over that deny: the deny is still carved
//! out of the broader grants around it, and the exact grant gives it its own rights.
//! A grant strictly inside a (not overridden) denied path is dropped and reported,
//! unless it is a mount's source inside a built-in credential carve-out (a volume
//! inside capsule's volumes): the mount names it exactly.
//! A deny that is not beneath any grant is ignored here (the policy layer rejects it).
//! A deny that does not exist needs no carving: nothing is there to protect.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Component, Path};
use std::sync::Arc;

use landlock::{AccessFs, BitFlags, ABI};
use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

use super::error::LandlockError;
use super::report::{DenyLine, DroppedGrant, RuleKind, RuleLine};
use super::rights;
use crate::plan::{FsDeny, FsGrant, FsPlan, Origin};

/// Where each rule's opened path goes as soon as it is planned: the ruleset
/// adds it and the descriptor is closed, so planning holds one descriptor at
/// a time however many siblings a carve-out expands into (a carve-out
/// beneath a directory of 1,000 entries used to hold 1,000 descriptors at
/// once and failed with EMFILE at the usual soft limit of 1,024).
pub(super) type Sink<'s> =
    &'s mut dyn FnMut(Arc<OwnedFd>, BitFlags<AccessFs>) -> Result<(), LandlockError>;

/// Every filesystem rule of a plan, with the report lines.
#[derive(Default)]
pub(super) struct FsRules {
    pub lines: Vec<RuleLine>,
    pub denied: Vec<DenyLine>,
    pub dropped: Vec<DroppedGrant>,
}

/// An existing denied path.
struct Deny<'a> {
    deny: &'a FsDeny,
    is_dir: bool,
}

/// Open each grant (once), expanding grants that have denied paths beneath them.
pub(super) fn plan(fs: &FsPlan, abi: ABI, sink: Sink<'_>) -> Result<FsRules, LandlockError> {
    let denies = existing_denies(&fs.deny)?;
    let mut out = FsRules::default();
    for grant in &fs.grants {
        if grant.access.is_empty() {
            continue;
        }
        // A grant strictly inside a denied path that no grant names exactly: dropped.
        // A mount's source is named exactly by the mount: a built-in credential
        // carve-out around it (capsule's volumes around the volume mounted)
        // stays carved out of the broader grants, and the mount keeps its own.
        if let Some(d) = denies.iter().find(|d| {
            strictly_inside(&grant.path, &d.deny.path)
                && !fs.grants.iter().any(|g| g.path == d.deny.path)
                && !(grant.origin.is_mount() && matches!(d.deny.origin, Origin::Credential(_)))
        }) {
            tracing::warn!(grant = %grant.path.display(), deny = %d.deny.path.display(),
                "grant lies inside a denied path and is dropped");
            out.dropped.push(DroppedGrant {
                path: grant.path.clone(),
                access: grant.access,
                origin: grant.origin.clone(),
                deny: d.deny.path.clone(),
                deny_origin: d.deny.origin.clone(),
            });
            continue;
        }
        let mut tree = Node::default();
        for d in denies
            .iter()
            .filter(|d| strictly_inside(&d.deny.path, &grant.path))
        {
            tree.insert(&d.deny.path, &grant.path, d);
        }
        if tree.children.is_empty() {
            add_grant(&mut out, sink, grant, abi)?;
        } else {
            let mut walk = Walk {
                grant,
                abi,
                out: &mut out,
                sink: &mut *sink,
            };
            walk.expand(&grant.path, &tree)?;
        }
    }
    Ok(out)
}

fn strictly_inside(path: &Path, ancestor: &Path) -> bool {
    path != ancestor && path.starts_with(ancestor)
}

fn existing_denies(deny: &[FsDeny]) -> Result<Vec<Deny<'_>>, LandlockError> {
    let mut out = Vec::with_capacity(deny.len());
    for d in deny {
        match std::fs::symlink_metadata(&d.path) {
            Ok(m) => out.push(Deny {
                deny: d,
                is_dir: m.is_dir(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(deny = %d.path.display(), "denied path does not exist; nothing to carve");
            }
            Err(e) => {
                return Err(LandlockError::Stat {
                    path: d.path.clone(),
                    source: e,
                })
            }
        }
    }
    Ok(out)
}

/// The denied paths beneath one grant, as a tree of path components.
#[derive(Default)]
struct Node<'a> {
    children: Vec<(OsString, Node<'a>)>,
    /// This node is a denied path (its subtree is irrelevant).
    deny: Option<&'a Deny<'a>>,
    /// Some denied path in this subtree is a directory (so no ReadDir on this node).
    dir_below: bool,
}

impl<'a> Node<'a> {
    fn insert(&mut self, path: &Path, root: &Path, d: &'a Deny<'a>) {
        let Ok(rel) = path.strip_prefix(root) else {
            return;
        };
        let mut node = self;
        for c in rel.components() {
            let Component::Normal(name) = c else { return };
            if node.deny.is_some() {
                return; // already inside a denied path
            }
            node.dir_below |= d.is_dir;
            let i = match node.children.iter().position(|(n, _)| n == name) {
                Some(i) => i,
                None => {
                    node.children.push((name.to_os_string(), Node::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[i].1;
        }
        node.deny = Some(d);
        node.dir_below = d.is_dir;
        node.children.clear();
    }

    fn child(&self, name: &OsStr) -> Option<&Node<'a>> {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
    }

    /// Some denied path below, for error messages.
    fn any_deny(&self) -> Option<&Path> {
        match self.deny {
            Some(d) => Some(&d.deny.path),
            None => self.children.iter().find_map(|(_, c)| c.any_deny()),
        }
    }
}

fn add_grant(
    out: &mut FsRules,
    sink: Sink<'_>,
    grant: &FsGrant,
    abi: ABI,
) -> Result<(), LandlockError> {
    // Plan paths are absolute and canonical; following a final link would be a no-op.
    // Planning may have opened the path already (the same flags).
    let fd = match &grant.opened.0 {
        Some(fd) => fd.clone(),
        None => match open(&grant.path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(fd) => Arc::new(fd),
            // The run's CA bundle exists only once `exec` wrote it: `check`,
            // `why` and `--dry-run` plan the same layers without it.
            Err(nix::errno::Errno::ENOENT) if grant.origin == crate::plan::Origin::CaBundle => {
                return Ok(())
            }
            Err(source) => {
                return Err(LandlockError::Open {
                    path: grant.path.clone(),
                    source,
                })
            }
        },
    };
    let is_dir = fd_is_dir(&fd, &grant.path)?.unwrap_or(false);
    push(
        out,
        sink,
        fd,
        rights::for_access(grant.access, abi, is_dir),
        RuleLine {
            path: grant.path.clone(),
            access: grant.access,
            kind: RuleKind::Grant,
            origin: grant.origin.clone(),
        },
    )
}

/// Record a rule and hand its opened path to the sink. Its rights are empty
/// only without Landlock (ABI 0), where the rule is reported but never added.
fn push(
    out: &mut FsRules,
    sink: Sink<'_>,
    fd: Arc<OwnedFd>,
    rights: BitFlags<AccessFs>,
    line: RuleLine,
) -> Result<(), LandlockError> {
    sink(fd, rights)?;
    out.lines.push(line);
    Ok(())
}

/// Some(is_dir), or None for a symbolic link.
fn fd_is_dir(fd: &OwnedFd, path: &Path) -> Result<Option<bool>, LandlockError> {
    let st = fstat(fd).map_err(|e| LandlockError::Stat {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    Ok(match kind {
        SFlag::S_IFLNK => None,
        SFlag::S_IFDIR => Some(true),
        _ => Some(false),
    })
}

struct Walk<'g, 'o, 's> {
    grant: &'g FsGrant,
    abi: ABI,
    out: &'o mut FsRules,
    sink: Sink<'s>,
}

impl Walk<'_, '_, '_> {
    fn expand(&mut self, dir: &Path, node: &Node<'_>) -> Result<(), LandlockError> {
        let deny_path = || node.any_deny().unwrap_or(dir).to_path_buf();
        let dirfd = open(
            dir,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| match source {
            Errno::ENOTDIR | Errno::ELOOP => LandlockError::NotCanonical {
                deny: deny_path(),
                path: dir.to_path_buf(),
            },
            _ => LandlockError::Open {
                path: dir.to_path_buf(),
                source,
            },
        })?;
        let list_err = |source| LandlockError::ListDir {
            path: dir.to_path_buf(),
            deny: deny_path(),
            source,
        };
        for entry in std::fs::read_dir(dir).map_err(list_err)? {
            let entry = entry.map_err(list_err)?;
            let name = entry.file_name();
            if let Some(child) = node.child(&name) {
                let path = dir.join(&name);
                if let Some(d) = child.deny {
                    self.out.denied.push(DenyLine {
                        path,
                        origin: d.deny.origin.clone(),
                        grant: self.grant.path.clone(),
                    });
                } else {
                    self.expand(&path, child)?;
                }
                continue;
            }
            // d_type tells symlinks apart without a syscall (DT_UNKNOWN falls back to lstat).
            if entry.file_type().map(|t| t.is_symlink()).unwrap_or(false) {
                tracing::trace!(entry = %dir.join(&name).display(), "symlink in a carved directory: no rule");
                continue;
            }
            let fd = match openat(
                &dirfd,
                name.as_os_str(),
                OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => continue, // vanished since readdir
                Err(source) => {
                    return Err(LandlockError::Open {
                        path: dir.join(&name),
                        source,
                    })
                }
            };
            let path = dir.join(&name);
            let Some(is_dir) = fd_is_dir(&fd, &path)? else {
                continue;
            };
            let rights = rights::for_access(self.grant.access, self.abi, is_dir);
            push(
                self.out,
                &mut *self.sink,
                Arc::new(fd),
                rights,
                RuleLine {
                    path,
                    access: self.grant.access,
                    kind: RuleKind::CarveOut {
                        grant: self.grant.path.clone(),
                    },
                    origin: self.grant.origin.clone(),
                },
            )?;
        }
        if !node.dir_below {
            let rights =
                rights::list_only(self.abi) & rights::for_access(self.grant.access, self.abi, true);
            push(
                self.out,
                &mut *self.sink,
                Arc::new(dirfd),
                rights,
                RuleLine {
                    path: dir.to_path_buf(),
                    access: crate::plan::Access::READ,
                    kind: RuleKind::ListOnly {
                        grant: self.grant.path.clone(),
                    },
                    origin: self.grant.origin.clone(),
                },
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Access, Opened, Origin};
    use std::path::PathBuf;

    fn g(path: &Path, access: Access) -> FsGrant {
        FsGrant {
            opened: Opened::NONE,
            path: path.to_path_buf(),
            access,
            origin: Origin::Workspace,
        }
    }
    fn d(path: &Path) -> FsDeny {
        FsDeny {
            path: path.to_path_buf(),
            origin: Origin::Credential("test"),
        }
    }
    fn paths(r: &FsRules) -> Vec<(PathBuf, RuleKind)> {
        let mut v: Vec<_> = r
            .lines
            .iter()
            .map(|l| (l.path.clone(), l.kind.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn expansion_skips_denies_and_symlinks() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonical");
        for dir in ["a/b/secret", "a/c", "e"] {
            std::fs::create_dir_all(root.join(dir)).expect("mkdir");
        }
        for f in ["a/f", "a/b/z", "a/b/secret/k", "e/key", "e/pub"] {
            std::fs::write(root.join(f), "x").expect("write");
        }
        std::os::unix::fs::symlink("/etc/passwd", root.join("a/link")).expect("symlink");
        let fs = FsPlan {
            grants: vec![g(&root, Access::READ)],
            deny: vec![
                d(&root.join("a/b/secret")),
                d(&root.join("e/key")),
                d(&root.join("missing/x")),
            ],
            proc_self: false,
            mounts: vec![],
            ca_bundle: None,
        };
        let mut rights = Vec::new();
        let r = plan(&fs, ABI::V7, &mut |_, r| {
            rights.push(r);
            Ok(())
        })
        .expect("plan");
        let carve = || RuleKind::CarveOut {
            grant: root.clone(),
        };
        let list = || RuleKind::ListOnly {
            grant: root.clone(),
        };
        assert_eq!(
            paths(&r),
            vec![
                (root.join("a/b/z"), carve()),
                (root.join("a/c"), carve()),
                (root.join("a/f"), carve()),
                (root.join("e"), list()),
                (root.join("e/pub"), carve()),
            ]
        );
        assert_eq!(rights.len(), r.lines.len());
        let file = r
            .lines
            .iter()
            .position(|l| l.path == root.join("a/f"))
            .expect("a/f");
        assert_eq!(rights[file], BitFlags::from(AccessFs::ReadFile));
        let mut denied: Vec<_> = r.denied.iter().map(|x| x.path.clone()).collect();
        denied.sort();
        assert_eq!(denied, vec![root.join("a/b/secret"), root.join("e/key")]);
    }

    #[test]
    fn no_deny_beneath_means_one_rule() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonical");
        std::fs::create_dir_all(root.join("w")).expect("mkdir");
        let fs = FsPlan {
            grants: vec![g(&root.join("w"), Access::WRITE)],
            deny: vec![d(&root), d(&root.join("other"))], // above the grant: not carved here
            proc_self: false,
            mounts: vec![],
            ca_bundle: None,
        };
        // root is denied and w lies inside it: dropped.
        let r = plan(&fs, ABI::V7, &mut |_, _| Ok(())).expect("plan");
        assert!(r.lines.is_empty());
        assert_eq!(r.dropped.len(), 1);
        let fs = FsPlan {
            grants: fs.grants,
            deny: vec![d(&root.join("elsewhere"))],
            proc_self: false,
            mounts: vec![],
            ca_bundle: None,
        };
        let r = plan(&fs, ABI::V7, &mut |_, _| Ok(())).expect("plan");
        assert_eq!(paths(&r), vec![(root.join("w"), RuleKind::Grant)]);
    }

    #[test]
    fn deny_through_a_symlink_is_refused() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonical");
        std::fs::create_dir_all(root.join("real")).expect("mkdir");
        std::fs::write(root.join("real/k"), "k").expect("write");
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).expect("symlink");
        let fs = FsPlan {
            grants: vec![g(&root, Access::READ)],
            deny: vec![d(&root.join("link/k"))],
            proc_self: false,
            mounts: vec![],
            ca_bundle: None,
        };
        match plan(&fs, ABI::V7, &mut |_, _| Ok(())) {
            Err(LandlockError::NotCanonical { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a deny through a symlink must be refused"),
        }
    }

    #[test]
    fn a_carve_out_beneath_many_entries_holds_one_descriptor_at_a_time() {
        // More siblings than the usual soft limit of open files (1,024):
        // each rule's descriptor goes to the sink and is closed there.
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonical");
        for i in 0..3000 {
            std::fs::write(root.join(format!("f{i}")), "x").expect("write");
        }
        std::fs::create_dir_all(root.join(".ssh")).expect("mkdir");
        let fs = FsPlan {
            grants: vec![g(&root, Access::READ)],
            deny: vec![d(&root.join(".ssh"))],
            proc_self: false,
            mounts: vec![],
            ca_bundle: None,
        };
        let open_fds = || std::fs::read_dir("/proc/self/fd").expect("fds").count();
        let before = open_fds();
        let (mut seen, mut most) = (0usize, 0usize);
        let r = plan(&fs, ABI::V7, &mut |fd, _| {
            seen += 1;
            drop(fd);
            most = most.max(open_fds().saturating_sub(before));
            Ok(())
        })
        .expect("plan");
        assert_eq!(seen, r.lines.len());
        assert!(seen >= 3000, "{seen}");
        // Other test threads open files too: a bound well below 3,000.
        assert!(most < 64, "planning held {most} descriptors at once");
    }
}

//! The run's private view of the host: a mount namespace in which the host
//! is read-only.
//!
//! Landlock decides who may read, write and execute what, but it has no hook
//! for a file's metadata (chmod, chown, utimes, xattrs), for SysV IPC, or for
//! what `/proc` shows. The view closes those gaps with the kernel's mount
//! machinery, where capsule can create namespaces (root, or unprivileged user
//! namespaces):
//!
//! * every mount of the host, recursively, is read-only and nosuid in the
//!   run's mount namespace (`mount_setattr(AT_RECURSIVE)`), so mode, owner,
//!   times, xattrs and size of anything outside write grants cannot change,
//!   as root too (EROFS);
//! * each write grant (and the private TMPDIR, the workspace output, the
//!   policy's `mounts:`) is a recursive bind clone taken *before* the host
//!   turned read-only (`open_tree(OPEN_TREE_CLONE)`), attached at its
//!   destination afterwards (`move_mount`), so it stays writable;
//! * `/tmp` is the run's TMPDIR (or a size-limited tmpfs); grants that lie
//!   under the host's `/tmp` are bound again at their own paths inside it;
//! * a private `/proc` of the run's pid namespace, `/dev/shm` (tmpfs; grants
//!   beneath the host's `/dev/shm` are bound again inside it, as for `/tmp`),
//!   a new devpts instance at `/dev/pts` with `/dev/ptmx`;
//! * the secrets of `/etc` are covered (files by `/dev/null`, directories by
//!   an empty mode-000 tmpfs), so `/etc` can be granted whole;
//! * propagation is private: nothing the run mounts reaches the host.
//!
//! Landlock stays the read/write/exec control on top: the bind clones keep
//! their inodes, so the rules prepared in the parent apply at the new
//! places; the new mounts (`/proc`, `/dev/pts`, `/dev/ptmx`, `/dev/shm`, a
//! tmpfs `/tmp`) get their rules in init, right after they are mounted.
//!
//! Everything is decided here, in the parent ([`View::plan`]); the run's init
//! replays the list of [`Op`]s with raw system calls ([`View::apply`], which
//! follows the rules of `sandbox::child`).

use std::ffi::{c_int, c_uint, c_ulong, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::plan::Plan;
use crate::sys::channel::Stage;
use crate::sys::raw;

/// At most this many bind clones (write grants, mounts) per run: init keeps
/// their descriptors on its stack.
pub const MAX_BINDS: usize = 128;

/// Size of the run's private `/dev/shm` (as Docker's default).
const SHM_SIZE: &str = "size=64m,mode=1777";

/// Parts of the run's `/proc` that reach the host kernel rather than the
/// run's processes, bound read-only over themselves (runc's and
/// bubblewrap's list): sysctls (`/proc/sys/vm` and most others are not
/// namespaced), the magic SysRq key, IRQ affinities, bus devices, and
/// filesystem knobs (nfsd, ext4). Landlock's read-only rule on `/proc` says
/// the same where Landlock exists; this holds without it, as root too.
pub const PROC_READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];

#[derive(Debug, Error)]
pub enum ViewError {
    #[error("more than {MAX_BINDS} writable places or mounts: the run's view can hold at most {MAX_BINDS}")]
    TooManyBinds,
    #[error("mount destination {dst}: {why}")]
    Destination { dst: PathBuf, why: String },
    #[error("a NUL byte in the path {0}")]
    Nul(PathBuf),
}

pub use crate::plan::Bind;

/// One step of the view, replayed by init.
#[derive(Debug, Clone)]
enum Op {
    /// `mount --make-rprivate /`.
    Private,
    /// Take a detached recursive clone of `src` (the `n`th clone). `expect`:
    /// the (device, inode) planning pinned for it; a clone of anything else
    /// (a component swapped for a link since) fails with ESTALE.
    Clone {
        src: CString,
        expect: Option<(u64, u64)>,
    },
    /// Every mount read-only and nosuid, recursively.
    ReadOnlyHost,
    /// Attach clone `index` at `dst`, read-only or not.
    Attach {
        index: usize,
        dst: CString,
        read_only: bool,
    },
    /// A new filesystem (tmpfs, proc, devpts) at `dst`.
    Mount {
        fstype: &'static std::ffi::CStr,
        dst: CString,
        flags: c_ulong,
        data: Option<CString>,
        stage: Stage,
    },
    /// A plain bind of `src` at `dst` (non-recursive): /dev/null over a
    /// secret file, the devpts `ptmx` over `/dev/ptmx`.
    BindPath {
        src: CString,
        dst: CString,
        stage: Stage,
    },
    /// A directory to create (a mountpoint inside the private /tmp).
    Mkdir { path: CString },
    /// An empty file to create (a mountpoint for a file bind).
    Touch { path: CString },
    /// Write `value` into a sysctl of the run's namespaces; failure tolerated.
    Sysctl {
        path: &'static std::ffi::CStr,
        value: std::borrow::Cow<'static, [u8]>,
    },
    /// A Landlock rule for a path of the view (`access`: rights bits).
    Rule { path: CString, access: u64 },
    /// Make the one mount at `path` read-only (not its submounts).
    ReadOnly { path: CString },
    /// Bind `path` over itself (recursively), read-only: a part of a new
    /// filesystem (the private /proc) made read-only.
    ReadOnlyBind { path: CString, stage: Stage },
    /// A symbolic link (a top-level link of the host in a new root).
    Symlink { target: CString, path: CString },
    /// Make the mount at `dir` the root: chdir, MS_MOVE onto /, chroot(".")
    /// (switch_root's way: it works on an initramfs root too, unlike
    /// pivot_root), or where a seccomp profile refuses chroot, setns into
    /// the run's own mount namespace; then the new root read-only.
    SwitchRoot { dir: CString },
}

/// Landlock rights (bits) for the rules of the new mounts, from the ruleset's ABI.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewRights {
    /// Read a directory tree (`/proc`).
    pub read_dir: u64,
    /// Read and write a directory tree (`/dev/pts`, `/dev/shm`, a tmpfs `/tmp`).
    pub write_dir: u64,
    /// Read and write one file (`/dev/ptmx`).
    pub write_file: u64,
}

/// The prepared view: what init mounts, in order.
#[derive(Debug, Clone)]
pub struct View {
    ops: Vec<Op>,
    /// What the view gives, for the report.
    pub summary: ViewSummary,
}

/// What the view gives this run (for `enforcement` and `--dry-run`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewSummary {
    pub binds: Vec<Bind>,
    pub private_tmp: bool,
    pub private_proc: bool,
    /// The container's /proc, bound read-only, instead of a private one
    /// (`ViewInput::bound_proc`).
    pub bound_proc: bool,
    pub private_shm: bool,
    pub devpts: bool,
    pub memfd_noexec: bool,
    /// Parts of the private /proc made read-only ([`PROC_READ_ONLY`]).
    pub proc_read_only: Vec<PathBuf>,
    /// Secrets of /etc found on this host and covered: where in the view,
    /// and what they hold.
    pub secrets: Vec<(PathBuf, &'static str)>,
    /// The run has a new root (a mount destination the host lacks).
    pub new_root: bool,
}

fn cstr(p: &Path) -> Result<CString, ViewError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| ViewError::Nul(p.to_path_buf()))
}

/// The (device, inode) of the object planning resolved and pinned for the
/// bind source `src` (a grant's or a mount's descriptor), else of `src` now
/// (capsule's own TMPDIR). The child binds `src` by its path, in its own
/// mount namespace: another run of this user that swapped a component for a
/// link since would have the bind show the link's target where the grant's
/// rule (or the private /tmp's, above a destination there) lets the run in.
fn pinned_id(plan: &Plan, src: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let pinned = plan
        .fs
        .grants
        .iter()
        .filter(|g| g.path == src)
        .find_map(|g| g.opened.0.as_ref());
    match pinned {
        Some(fd) => nix::sys::stat::fstat(fd.as_ref())
            .ok()
            .map(|st| (st.st_dev, st.st_ino)),
        // open_tree follows a link at `src` (a command's `#!` interpreter
        // reached through one): so does the id it is compared with.
        None => std::fs::metadata(src).ok().map(|m| (m.dev(), m.ino())),
    }
}

/// Whether `p` is a directory (following links), a file, or absent.
fn kind(p: &Path) -> Option<bool> {
    std::fs::metadata(p).ok().map(|m| m.is_dir())
}

/// The secrets of /etc ([`crate::plan::credentials::SYSTEM_SECRETS`], the
/// one list) that the plan found on this host, symlinks left alone: their
/// targets are what matters, and a link into /etc is covered at the target.
pub fn etc_secrets(plan: &Plan) -> impl Iterator<Item = &crate::plan::credentials::Location> {
    plan.etc_secrets.iter().filter(|l| {
        l.path
            .symlink_metadata()
            .is_ok_and(|m| !m.file_type().is_symlink())
    })
}

/// Inputs of [`View::plan`] besides the plan.
#[derive(Debug, Default)]
pub struct ViewInput {
    /// A size limit for the private /tmp (then a tmpfs).
    pub tmp_size_mb: Option<u64>,
    /// Landlock rights for the new mounts; None without Landlock.
    pub rights: Option<ViewRights>,
    /// Set vm.memfd_noexec = 2 in the run's pid namespace.
    pub memfd_noexec: bool,
    /// Set kernel.shmall to this many pages in the run's IPC namespace
    /// (`limits.memory_mb`).
    pub shm_pages: Option<u64>,
    /// Keep the host's (the container's) /proc, read-only, instead of
    /// mounting a fresh one: the kernel refused the fresh procfs here.
    pub bound_proc: bool,
}

/// Whether `p` lies in the run's private TMPDIR (on the host).
fn under_tmpdir(plan: &Plan, p: &Path) -> bool {
    plan.tmpdir.as_ref().is_some_and(|t| p.starts_with(t))
}

/// The grants under the host's /tmp (bound again inside the private one),
/// and whether /tmp is private at all.
fn tmp_layout(plan: &Plan) -> (Vec<&crate::plan::FsGrant>, bool) {
    let tmp = Path::new("/tmp");
    let under_tmpdir = |p: &Path| under_tmpdir(plan, p);
    // /tmp is the run's private TMPDIR, and a grant that lies under the
    // host's /tmp is bound again at its own path inside it. Landlock
    // rights are inherited along the mount hierarchy, so such a grant
    // also gets the private /tmp's rights (read+write, not exec): its
    // bind is read-only unless it is a write grant, which makes that
    // harmless — but a carve-out beneath it (deny, credentials) would be
    // lost. Then, and when the cwd lies under the host's /tmp without a
    // grant to carry it, the host's /tmp stays instead, under Landlock as
    // everything else. (A mount's source does not count: it is seen at
    // its destination only.)
    let tmp_grants: Vec<&crate::plan::FsGrant> =
        plan.fs.grants_beneath_tmp(plan.tmpdir.as_deref()).collect();
    let carved = plan.fs.carved_beneath_tmp(plan.tmpdir.as_deref()).is_some();
    let cwd_lost = plan.cwd.starts_with(tmp)
        && !under_tmpdir(&plan.cwd)
        && !tmp_grants.iter().any(|g| plan.cwd.starts_with(&g.path));
    let host_tmp_granted = plan.fs.grants.iter().any(|g| g.path == tmp);
    let nested = carved || cwd_lost || host_tmp_granted;
    let private_tmp = plan.tmpdir.is_some() && !nested;
    (tmp_grants, private_tmp)
}

/// The places bound at their own paths, with whether each is writable,
/// those beneath another left out (they ride along).
fn own_places(
    plan: &Plan,
    tmp_grants: &[&crate::plan::FsGrant],
    private_tmp: bool,
) -> Vec<(PathBuf, bool)> {
    let mounts = &plan.fs.mounts;
    let under_tmpdir = |p: &Path| under_tmpdir(plan, p);
    // The places bound at their own paths: every write grant that is a
    // directory or a regular file (device nodes such as /dev/null stay
    // writable on a read-only mount), so that it stays writable; and the
    // grants under the host's /tmp, inside the private one.
    let mut places: Vec<(PathBuf, bool)> = Vec::new();
    for g in &plan.fs.grants {
        // (The TMPDIR itself is bound at /tmp when /tmp is private, and
        // at its own path otherwise.)
        let rebound = private_tmp && tmp_grants.iter().any(|t| t.path == g.path);
        // Beneath the private /dev/shm: bound again inside it, as under /tmp.
        let in_shm = beneath_shm(&g.path);
        if !(g.access.write || rebound || in_shm)
            || (g.path.starts_with("/dev") && !in_shm)
            || (private_tmp && under_tmpdir(&g.path))
            || mounts.iter().any(|m| m.src == g.path)
            || kind(&g.path).is_none()
        {
            continue;
        }
        match places.iter_mut().find(|(p, _)| *p == g.path) {
            Some((_, rw)) => *rw |= g.access.write,
            None => places.push((g.path.clone(), g.access.write)),
        }
    }
    // A place beneath another rides along with it, unless it is
    // writable and the other is not.
    let covered: Vec<(PathBuf, bool)> = places
        .iter()
        .filter(|(p, rw)| {
            !places
                .iter()
                .any(|(q, qrw)| q != p && p.starts_with(q) && (*qrw || !*rw))
        })
        .cloned()
        .collect();

    covered
}

/// Every bind of the view, parents before children: the private TMPDIR at
/// /tmp, the places bound at their own paths, the policy's mounts.
fn binds(
    plan: &Plan,
    input: &ViewInput,
    private_tmp: bool,
    covered: Vec<(PathBuf, bool)>,
) -> Result<Vec<Bind>, ViewError> {
    let tmp = Path::new("/tmp");
    let mounts = &plan.fs.mounts;
    let mut binds: Vec<Bind> = Vec::new();
    if private_tmp && input.tmp_size_mb.is_none() {
        if let Some(t) = &plan.tmpdir {
            binds.push(Bind {
                src: t.clone(),
                dst: tmp.to_path_buf(),
                read_only: false,
            });
        }
    }
    for (p, rw) in covered {
        binds.push(Bind {
            src: p.clone(),
            dst: p,
            read_only: !rw,
        });
    }
    for m in mounts {
        binds.push(m.clone());
    }
    // The run's CA bundle where clients look first: the system bundle.
    if let Some(crate::plan::CaBundle {
        file,
        system: Some(system),
    }) = &plan.fs.ca_bundle
    {
        binds.push(Bind {
            src: file.clone(),
            dst: system.clone(),
            read_only: true,
        });
    }
    if binds.len() > MAX_BINDS {
        return Err(ViewError::TooManyBinds);
    }
    // Attach parents before children: /tmp first, then what lies under it.
    let order = |b: &Bind| (b.dst != tmp, b.dst.components().count());
    binds.sort_by_key(order);
    Ok(binds)
}

/// A new root where a bind's destination has a first component the host
/// lacks; whether one is made.
fn new_root(binds: &[Bind], ops: &mut Vec<Op>) -> Result<bool, ViewError> {
    // A destination whose first component the host lacks (/pack, /src):
    // the view keeps the host's tree, which is read-only and must not be
    // changed, so the run gets a new root instead: a small tmpfs holding
    // read-only clones of each top-level entry of the host, its links,
    // and the missing directories.
    let mut missing_tops: Vec<PathBuf> = binds
        .iter()
        .filter_map(|b| b.dst.components().nth(1).map(|c| Path::new("/").join(c)))
        .filter(|top| top.symlink_metadata().is_err())
        .collect();
    missing_tops.sort();
    missing_tops.dedup();
    if !missing_tops.is_empty() {
        let stage = Path::new("/tmp");
        let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir("/")
            .map_err(|e| ViewError::Destination {
                dst: missing_tops[0].clone(),
                why: format!("listing / for a new root: {e}"),
            })?
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        let mut later = Vec::new();
        let mut index = binds.len();
        for e in &entries {
            let host = Path::new("/").join(e.file_name());
            let at = stage.join(e.file_name());
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                let target = std::fs::read_link(&host).map_err(|_| ViewError::Nul(host.clone()))?;
                later.push(Op::Symlink {
                    target: cstr(&target)?,
                    path: cstr(&at)?,
                });
                continue;
            }
            if !(ft.is_dir() || ft.is_file()) {
                continue;
            }
            // The host's top-level entries: no run can change `/`.
            ops.push(Op::Clone {
                src: cstr(&host)?,
                expect: None,
            });
            later.push(if ft.is_dir() {
                Op::Mkdir { path: cstr(&at)? }
            } else {
                Op::Touch { path: cstr(&at)? }
            });
            later.push(Op::Attach {
                index,
                dst: cstr(&at)?,
                read_only: true,
            });
            index += 1;
        }
        if index > MAX_BINDS {
            return Err(ViewError::TooManyBinds);
        }
        ops.push(Op::Mount {
            fstype: c"tmpfs",
            dst: cstr(stage)?,
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            data: Some(CString::new("size=1m,mode=0755").expect("no NUL")),
            stage: Stage::View,
        });
        ops.extend(later);
        for top in &missing_tops {
            ops.push(Op::Mkdir {
                path: cstr(&stage.join(top.strip_prefix("/").unwrap_or(top)))?,
            });
        }
        ops.push(Op::SwitchRoot { dir: cstr(stage)? });
        return Ok(true);
    }
    Ok(false)
}

/// The private /tmp's own tmpfs where it has a size limit; whether /tmp
/// then needs its Landlock rule.
fn private_tmp_mount(
    input: &ViewInput,
    private_tmp: bool,
    ops: &mut Vec<Op>,
    summary: &mut ViewSummary,
) -> Result<bool, ViewError> {
    let tmp = Path::new("/tmp");
    let mut tmp_rule = false;
    if private_tmp {
        if let Some(mb) = input.tmp_size_mb {
            ops.push(Op::Mount {
                fstype: c"tmpfs",
                dst: cstr(tmp)?,
                flags: libc::MS_NOSUID | libc::MS_NODEV,
                data: Some(CString::new(format!("size={mb}m,mode=1777")).expect("no NUL")),
                stage: Stage::View,
            });
            tmp_rule = true;
        }
        summary.private_tmp = true;
    }
    Ok(tmp_rule)
}

/// Attach every bind at its destination, making the directories that lead
/// to one inside the private /tmp or /dev/shm.
fn attach_binds(
    binds: &[Bind],
    (private_tmp, private_shm): (bool, bool),
    ops: &mut Vec<Op>,
) -> Result<(), ViewError> {
    let tmp = Path::new("/tmp");
    let shm = Path::new(SHM);
    let mut skeletons: Vec<PathBuf> = Vec::new();
    for (index, b) in binds.iter().enumerate() {
        // A destination inside the private /tmp or /dev/shm does not exist
        // there yet.
        let base = if private_tmp && b.dst.starts_with(tmp) && b.dst != tmp {
            Some(tmp)
        } else if private_shm && beneath_shm(&b.dst) {
            Some(shm)
        } else {
            None
        };
        if let Some(base) = base {
            let tmp = base;
            let rel = b.dst.strip_prefix(tmp).expect("checked");
            let mut at = tmp.to_path_buf();
            let comps: Vec<_> = rel.components().collect();
            // The directories leading to it live in a small tmpfs, made
            // read-only once its binds are attached: they are not the
            // private /tmp's (writable) directories, nor the host's.
            // Not when an earlier bind (parents attach first) already
            // holds them: a skeleton there would cover that bind
            // (`/tmp/proj` read-only, then `/tmp/proj/target`).
            let inside_earlier = binds[..index]
                .iter()
                .any(|e| e.dst != tmp && b.dst.starts_with(&e.dst));
            if comps.len() > 1 && !inside_earlier {
                let top = tmp.join(comps[0]);
                if !skeletons.contains(&top) {
                    ops.push(Op::Mkdir { path: cstr(&top)? });
                    ops.push(Op::Mount {
                        fstype: c"tmpfs",
                        dst: cstr(&top)?,
                        flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        data: Some(CString::new("size=64k,mode=0755").expect("no NUL")),
                        stage: Stage::View,
                    });
                    skeletons.push(top);
                }
            }
            for (i, c) in comps.iter().enumerate() {
                at.push(c);
                let last = i + 1 == comps.len();
                if last && kind(&b.src) == Some(false) {
                    // Inside an earlier (read-only) bind the file is
                    // there already: creating it would fail with EROFS.
                    if !inside_earlier {
                        ops.push(Op::Touch { path: cstr(&at)? });
                    }
                } else {
                    ops.push(Op::Mkdir { path: cstr(&at)? });
                }
            }
        } else if b.dst != tmp {
            let top_missing = b
                .dst
                .components()
                .nth(1)
                .is_some_and(|c| Path::new("/").join(c).symlink_metadata().is_err());
            let depth = b.dst.components().count();
            match (kind(&b.dst), kind(&b.src)) {
                // /pack: made in the new root (a file source needs a file there).
                (None, Some(true)) if top_missing && depth == 2 => {}
                (None, _) => {
                    return Err(ViewError::Destination {
                        dst: b.dst.clone(),
                        why: "does not exist on the host; the view keeps the host's tree and cannot create \
                              it (create it, or mount beneath /tmp)"
                            .into(),
                    })
                }
                (Some(d), Some(s)) if d != s => {
                    return Err(ViewError::Destination {
                        dst: b.dst.clone(),
                        why: "a directory and a file cannot be mounted on each other".into(),
                    })
                }
                _ => {}
            }
        }
        ops.push(Op::Attach {
            index,
            dst: cstr(&b.dst)?,
            read_only: b.read_only,
        });
    }
    for top in &skeletons {
        ops.push(Op::ReadOnly { path: cstr(top)? });
    }
    Ok(())
}

/// Hide the secrets of /etc a grant does not name exactly.
fn hide_etc_secrets(
    plan: &Plan,
    ops: &mut Vec<Op>,
    summary: &mut ViewSummary,
) -> Result<(), ViewError> {
    let mounts = &plan.fs.mounts;
    // Secrets of /etc, unless a grant names one exactly: at their own
    // paths (unless a mount hides them there), and wherever a mount
    // shows them elsewhere (`--mount /etc:/hostetc`): Landlock does not
    // carve them out inside the view.
    for secret in etc_secrets(plan) {
        let s = &secret.path;
        if plan.fs.grants.iter().any(|g| g.path == *s) {
            continue;
        }
        let mut places: Vec<PathBuf> = Vec::new();
        if !mounts.iter().any(|m| s.starts_with(&m.dst)) {
            places.push(s.clone());
        }
        for m in mounts {
            if let Ok(rel) = s.strip_prefix(&m.src) {
                let at = if rel.as_os_str().is_empty() {
                    m.dst.clone()
                } else {
                    m.dst.join(rel)
                };
                if !places.contains(&at) {
                    places.push(at);
                }
            }
        }
        for at in places {
            let dst = cstr(&at)?;
            if kind(s) == Some(true) {
                ops.push(Op::Mount {
                    fstype: c"tmpfs",
                    dst,
                    flags: libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    data: Some(CString::new("size=4k,mode=000").expect("no NUL")),
                    stage: Stage::View,
                });
            } else {
                ops.push(Op::BindPath {
                    src: CString::new("/dev/null").expect("no NUL"),
                    dst,
                    stage: Stage::View,
                });
            }
            summary.secrets.push((at, secret.what));
        }
    }

    Ok(())
}

/// Where the run's private `/dev/shm` goes.
const SHM: &str = "/dev/shm";

/// Whether `p` lies beneath `/dev/shm` (not `/dev/shm` itself): a grant
/// there is bound again inside the run's private one, which would hide it.
pub(crate) fn beneath_shm(p: &Path) -> bool {
    p.starts_with(SHM) && p != Path::new(SHM)
}

/// A grant beneath /dev/shm is bound inside the run's private one, where it
/// also gets that tmpfs's Landlock rights (rules follow the mount
/// hierarchy): its bind keeps it read-only unless it is a write grant, but
/// a carve-out beneath it would be lost. So that is refused, not weakened.
fn shm_carve_outs(plan: &Plan) -> Result<(), ViewError> {
    let grants = || plan.fs.grants.iter().filter(|g| beneath_shm(&g.path));
    for d in &plan.fs.deny {
        if let Some(g) = grants().find(|g| d.path.starts_with(&g.path)) {
            return Err(ViewError::Destination {
                dst: g.path.clone(),
                why: format!(
                    "lies in the run's private /dev/shm, where the carve-out {} beneath it cannot be kept; \
                     grant a place outside /dev/shm",
                    d.path.display()
                ),
            });
        }
    }
    Ok(())
}

/// The run's own /dev/shm; the Landlock rights used for the view's new
/// mounts.
fn private_shm(
    input: &ViewInput,
    ops: &mut Vec<Op>,
    summary: &mut ViewSummary,
) -> Result<ViewRights, ViewError> {
    let rights = input.rights.unwrap_or_default();
    let shm = Path::new(SHM);
    if kind(shm) == Some(true) {
        ops.push(Op::Mount {
            fstype: c"tmpfs",
            dst: cstr(shm)?,
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data: Some(CString::new(SHM_SIZE).expect("no NUL")),
            stage: Stage::ViewDev,
        });
        if input.rights.is_some() {
            ops.push(Op::Rule {
                path: cstr(shm)?,
                access: rights.write_dir,
            });
        }
        summary.private_shm = true;
    }
    Ok(rights)
}

/// The run's own devpts at /dev/pts, with /dev/ptmx.
fn private_pts(
    input: &ViewInput,
    rights: ViewRights,
    ops: &mut Vec<Op>,
    summary: &mut ViewSummary,
) -> Result<(), ViewError> {
    if kind(Path::new("/dev/pts")) == Some(true) && kind(Path::new("/dev/ptmx")) == Some(false) {
        ops.push(Op::Mount {
            fstype: c"devpts",
            dst: CString::new("/dev/pts").expect("no NUL"),
            flags: libc::MS_NOSUID | libc::MS_NOEXEC,
            data: Some(CString::new("newinstance,ptmxmode=0666,mode=0620").expect("no NUL")),
            stage: Stage::ViewDev,
        });
        ops.push(Op::BindPath {
            src: CString::new("/dev/pts/ptmx").expect("no NUL"),
            dst: CString::new("/dev/ptmx").expect("no NUL"),
            stage: Stage::ViewDev,
        });
        if input.rights.is_some() {
            ops.push(Op::Rule {
                path: CString::new("/dev/pts").expect("no NUL"),
                access: rights.write_dir,
            });
            ops.push(Op::Rule {
                path: CString::new("/dev/ptmx").expect("no NUL"),
                access: rights.write_file,
            });
        }
        summary.devpts = true;
    }
    Ok(())
}

/// The run's /proc: a fresh one (with its sysctls and read-only places),
/// or the container's, bound.
fn private_proc(
    input: &ViewInput,
    ops: &mut Vec<Op>,
    summary: &mut ViewSummary,
) -> Result<(), ViewError> {
    if input.bound_proc {
        // The container's own /proc stays, read-only and nosuid like the
        // rest of the host (`ReadOnlyHost` above): its runtime's masked
        // paths make the kernel refuse a fresh procfs in a user namespace
        // below it. Landlock's ptrace restriction keeps the environ,
        // memory, maps and descriptors of every process outside the run
        // unreadable there (`sandbox::BOUND_PROC_LIMITATION`), and
        // /proc/self of the run's processes resolves in the procfs's pid
        // namespace, where they have pids.
        summary.bound_proc = true;
    } else {
        // hidepid=4 ("ptraceable", Linux 5.8): a process the caller may not
        // ptrace-read is not listed at all. That hides the run's init, which
        // is non-dumpable because it shares the supervisor's memory.
        ops.push(Op::Mount {
            fstype: c"proc",
            dst: CString::new("/proc").expect("no NUL"),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data: Some(CString::new("hidepid=4").expect("no NUL")),
            stage: Stage::ViewProc,
        });
        summary.private_proc = true;
        if input.memfd_noexec {
            ops.push(Op::Sysctl {
                path: crate::kernel::MEMFD_NOEXEC,
                value: b"2".as_slice().into(),
            });
            summary.memfd_noexec = true;
        }
        if let Some(pages) = input.shm_pages {
            // memory_mb: SysV segments no process maps are in no process's
            // memory; the run's IPC namespace holds at most this many pages
            // of them (kernel.shmall, where the kernel lets the namespace's
            // root set it: Linux 5.19+ unprivileged). With the container's
            // /proc bound (read-only) it cannot be written: seccomp refuses
            // SysV shared memory there instead (`sandbox::prepare`).
            ops.push(Op::Sysctl {
                path: c"/proc/sys/kernel/shmall",
                value: pages.to_string().into_bytes().into(),
            });
        }
        // After the sysctls above: they are written through /proc/sys.
        for p in PROC_READ_ONLY {
            let path = Path::new(p);
            // The private /proc is of the same kernel as the host's.
            if path.symlink_metadata().is_ok() {
                ops.push(Op::ReadOnlyBind {
                    path: cstr(path)?,
                    stage: Stage::ViewProc,
                });
                summary.proc_read_only.push(path.to_path_buf());
            }
        }
    }
    Ok(())
}

const OPEN_TREE_CLONE: c_uint = 1;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;

// The steps of [`View::apply`]: they run in init, between clone and exec:
// raw system calls only, no allocation (see `sandbox::child`).

/// Attach the cloned tree `fd` at `dst` (read-only or not, nosuid), and close it.
fn attach(fd: c_int, dst: &std::ffi::CStr, read_only: bool) -> Result<(), i32> {
    let recursive = libc::AT_RECURSIVE as c_uint;
    let set = if read_only {
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
    } else {
        MOUNT_ATTR_NOSUID
    };
    let r = raw::mount_setattr(fd, c"", libc::AT_EMPTY_PATH as c_uint | recursive, set, 0)
        .and_then(|_| raw::move_mount_fd(fd, dst));
    raw::close(fd);
    r.map(drop)
}

/// Create the empty file `path` (a file bind's destination).
fn touch(path: &std::ffi::CStr) -> Result<(), i32> {
    match raw::openat_mode(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
        0o600,
    ) {
        Ok(fd) => {
            raw::close(fd as c_int);
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Write `value` to the sysctl file `path`, where the kernel lets us.
fn write_sysctl(path: &std::ffi::CStr, value: &[u8]) {
    if let Ok(fd) = raw::openat(libc::AT_FDCWD, path, libc::O_WRONLY | libc::O_CLOEXEC) {
        let _ = raw::write(fd as c_int, value);
        raw::close(fd as c_int);
    }
}

/// Bind `path` onto itself, read-only and nosuid.
fn read_only_bind(path: &std::ffi::CStr) -> Result<(), i32> {
    let recursive = libc::AT_RECURSIVE as c_uint;
    raw::mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)
        .and_then(|_| {
            raw::mount_setattr(
                libc::AT_FDCWD,
                path,
                recursive,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                0,
            )
        })
        .map(drop)
}

/// Make `dir` (the new root's stage) the root, read-only.
fn switch_root(dir: &std::ffi::CStr) -> Result<(), i32> {
    raw::chdir(dir)
        .and_then(|_| raw::mount(Some(c"."), c"/", None, libc::MS_MOVE, None))
        .and_then(|_| match raw::chroot(c".") {
            // A seccomp profile that refuses chroot without
            // CAP_SYS_CHROOT in the container (podman's default):
            // entering the run's own mount namespace again sets
            // the root to the mount on top of its root, the one
            // just moved there (the kernel's LOOKUP_DOWN), as
            // chroot(".") would.
            Err(libc::EPERM) => {
                let ns = raw::openat(
                    libc::AT_FDCWD,
                    c"/proc/self/ns/mnt",
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
                .map_err(|_| libc::EPERM)? as c_int;
                let r = raw::setns(ns, libc::CLONE_NEWNS).map_err(|_| libc::EPERM);
                raw::close(ns);
                r
            }
            other => other,
        })
        .and_then(|_| raw::chdir(c"/"))
        .and_then(|_| {
            raw::mount_setattr(
                libc::AT_FDCWD,
                c"/",
                0,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                0,
            )
        })
        .map(drop)
}

/// Add the Landlock rule for `path` (none without a ruleset or rights).
fn add_rule(ruleset: c_int, path: &std::ffi::CStr, access: u64) -> Result<(), (Stage, i32)> {
    if ruleset < 0 || access == 0 {
        Ok(())
    } else {
        match raw::openat(libc::AT_FDCWD, path, libc::O_PATH | libc::O_CLOEXEC) {
            Ok(fd) => {
                let r = raw::landlock_add_path_rule(ruleset, access, fd as c_int);
                raw::close(fd as c_int);
                r.map(drop).map_err(|e| (Stage::Landlock, e))
            }
            Err(e) => Err((Stage::Landlock, e)),
        }
    }
}

impl View {
    /// Decide the view for `plan`. Nothing is mounted here.
    pub fn plan(plan: &Plan, input: &ViewInput) -> Result<View, ViewError> {
        let tmp = Path::new("/tmp");
        let mut ops = vec![Op::Private];
        let mut summary = ViewSummary::default();
        let (tmp_grants, private_tmp) = tmp_layout(plan);
        shm_carve_outs(plan)?;
        let covered = own_places(plan, &tmp_grants, private_tmp);
        let binds = binds(plan, input, private_tmp, covered)?;
        for b in &binds {
            ops.push(Op::Clone {
                src: cstr(&b.src)?,
                expect: pinned_id(plan, &b.src),
            });
        }
        ops.push(Op::ReadOnlyHost);

        summary.new_root = new_root(&binds, &mut ops)?;
        let tmp_rule = private_tmp_mount(input, private_tmp, &mut ops, &mut summary)?;
        // The private /dev/shm before the binds: those beneath it go inside.
        let rights = private_shm(input, &mut ops, &mut summary)?;
        attach_binds(&binds, (private_tmp, summary.private_shm), &mut ops)?;
        summary.binds = binds;
        hide_etc_secrets(plan, &mut ops, &mut summary)?;
        private_pts(input, rights, &mut ops, &mut summary)?;
        private_proc(input, &mut ops, &mut summary)?;
        if input.rights.is_some() {
            ops.push(Op::Rule {
                path: CString::new("/proc").expect("no NUL"),
                access: rights.read_dir,
            });
            if tmp_rule {
                ops.push(Op::Rule {
                    path: cstr(tmp)?,
                    access: rights.write_dir,
                });
            }
        }
        Ok(View { ops, summary })
    }

    /// Build the view in the calling process's (new, private) mount
    /// namespace. Runs in init: raw system calls only, no allocation (see
    /// `sandbox::child`). `ruleset` is the Landlock ruleset to add the new
    /// mounts' rules to (-1: none). The error names the step.
    pub fn apply(&self, ruleset: c_int) -> Result<(), (Stage, i32)> {
        let recursive = libc::AT_RECURSIVE as c_uint;
        let mut fds = [-1 as c_int; MAX_BINDS];
        let mut n = 0usize;
        let close_all = |fds: &[c_int]| {
            for &fd in fds {
                if fd >= 0 {
                    raw::close(fd);
                }
            }
        };
        let view = |e: i32| (Stage::View, e);
        for op in &self.ops {
            let r: Result<(), (Stage, i32)> = match op {
                Op::Private => raw::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
                    .map(drop)
                    .map_err(view),
                Op::Clone { src, expect } => raw::open_tree(
                    libc::AT_FDCWD,
                    src,
                    OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint | recursive,
                )
                .and_then(|fd| {
                    let fd = fd as c_int;
                    fds[n] = fd;
                    n += 1;
                    match expect {
                        Some(id) if raw::fstat_id(fd)? != *id => Err(libc::ESTALE),
                        _ => Ok(()),
                    }
                })
                .map_err(view),
                Op::ReadOnlyHost => raw::mount_setattr(
                    libc::AT_FDCWD,
                    c"/",
                    recursive,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                    0,
                )
                .map(drop)
                .map_err(view),
                Op::Attach {
                    index,
                    dst,
                    read_only,
                } => {
                    let fd = fds[*index];
                    let r = attach(fd, dst, *read_only);
                    fds[*index] = -1;
                    r.map_err(view)
                }
                Op::Mount {
                    fstype,
                    dst,
                    flags,
                    data,
                    stage,
                } => raw::mount(Some(fstype), dst, Some(fstype), *flags, data.as_deref())
                    .map(drop)
                    .map_err(|e| (*stage, e)),
                Op::BindPath { src, dst, stage } => {
                    raw::mount(Some(src), dst, None, libc::MS_BIND, None)
                        .map(drop)
                        .map_err(|e| (*stage, e))
                }
                Op::Mkdir { path } => match raw::mkdir(path, 0o755) {
                    Ok(_) | Err(libc::EEXIST) => Ok(()),
                    Err(e) => Err(view(e)),
                },
                Op::Touch { path } => touch(path).map_err(view),
                Op::Sysctl { path, value } => {
                    write_sysctl(path, value);
                    Ok(())
                }
                Op::ReadOnly { path } => raw::mount_setattr(
                    libc::AT_FDCWD,
                    path,
                    0,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                    0,
                )
                .map(drop)
                .map_err(view),
                Op::ReadOnlyBind { path, stage } => read_only_bind(path).map_err(|e| (*stage, e)),
                Op::Symlink { target, path } => raw::symlink(target, path).map(drop).map_err(view),
                Op::SwitchRoot { dir } => switch_root(dir).map_err(view),
                Op::Rule { path, access } => add_rule(ruleset, path, *access),
            };
            if let Err(e) = r {
                close_all(&fds[..n]);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The view's writable places in `summary`, for `--dry-run` (one line each).
pub fn describe(summary: &ViewSummary) -> Vec<String> {
    let mut out = Vec::new();
    for b in &summary.binds {
        let mode = if b.read_only { "ro" } else { "rw" };
        if b.src == b.dst {
            out.push(format!("{} ({mode})", b.dst.display()));
        } else {
            out.push(format!(
                "{} at {} ({mode})",
                b.src.display(),
                b.dst.display()
            ));
        }
    }
    out
}

/// The mutation check's switch (`sandbox::mutation`, a test-only feature):
/// the view's mounts gone, its report kept.
#[cfg(feature = "mutation")]
impl View {
    pub(crate) fn strip_for_mutation(&mut self) {
        self.ops.clear();
    }
}

//! A `capsule serve` step's private TMPDIR, moved out of the way when the
//! run ends and removed once the step has reported.
//!
//! Removing an empty directory is not always cheap: on a file system that
//! discards freed blocks synchronously (ext4 with `discard` and no journal,
//! as on our CI's VMs), each `rmdir` waits for the device. A step whose view
//! has mount points inside the private /tmp (a workspace beneath /tmp, as a
//! Ray worker's) removes two directories; traced over a serial loop of such
//! steps, the removals took 0.43 ms (median) and 1.3 ms (mean) between init's
//! end and the step's report, in the caller's wait.
//!
//! So a step of `capsule serve` ([`want`]) whose run had its own pid
//! namespace (gone with init: no process of the run is left) and whose
//! TMPDIR holds nothing but empty directories and empty files (the mount
//! points the view made, or what the run left empty), each of this user and
//! writable by no one else, in a TMPDIR that is still the 0700 directory of
//! this user, renames it to `.NAME.removing` beside it (one `renameat2`, no
//! block freed) and removes it right after its report, before its process
//! exits; the server reaps a step only once its process is gone, and exits
//! only after all of them. Nothing can add to what is moved (no one else may
//! write in it, and no process of the run is left), so it can always be
//! removed and the result's `left_behind` stays exact. Anything else (a file
//! with data, a directory with entries, a mode the run widened, a run
//! without a pid namespace) is removed before the report, as by
//! `capsule exec`, which never defers. A step killed with SIGKILL between its
//! report and that removal leaves `.capsule-RUNID.removing` behind, as a
//! SIGKILLed `capsule exec` leaves `capsule-RUNID`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// Entries looked at before giving up on moving aside (the removal walk
/// handles any number; this is only the fast path).
const MAX_ENTRIES: usize = 16;

static WANTED: AtomicBool = AtomicBool::new(false);
static ASIDE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Move this process's run's TMPDIR aside instead of removing it
/// (`capsule serve`'s step process, which runs one run).
pub fn want() {
    WANTED.store(true, Ordering::Relaxed);
}

/// When [`want`]ed and `tmpdir` holds only empty entries: rename it beside
/// itself and keep the new path for [`take`]. Returns whether it did; when
/// not, the caller removes `tmpdir` itself.
pub(crate) fn move_aside(tmpdir: &Path) -> bool {
    if !WANTED.load(Ordering::Relaxed) || !tmpdir.is_absolute() || !only_empty_entries(tmpdir) {
        return false;
    }
    let (Some(parent), Some(name)) = (tmpdir.parent(), tmpdir.file_name()) else {
        return false;
    };
    let mut aside = std::ffi::OsString::from(".");
    aside.push(name);
    aside.push(".removing");
    let aside = parent.join(aside);
    match nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        tmpdir,
        nix::fcntl::AT_FDCWD,
        &aside,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {
            tracing::debug!(
                "{}: moved aside to {}, removed after the report",
                tmpdir.display(),
                aside.display()
            );
            *ASIDE.lock().unwrap_or_else(PoisonError::into_inner) = Some(aside);
            true
        }
        Err(e) => {
            tracing::debug!("{}: not moved aside ({e}); removed now", tmpdir.display());
            false
        }
    }
}

/// The TMPDIR moved aside for this process's run, if any (to remove).
pub fn take() -> Option<PathBuf> {
    ASIDE.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Whether `dir` is a directory of this user, mode 0700 (as capsule made it:
/// no one else may add to it or keep anything in it), whose entries are all
/// empty directories or empty regular files of this user that no one else
/// may write either (no group or other write bit, which an ACL's mask also
/// shows), at most [`MAX_ENTRIES`] of them.
fn only_empty_entries(dir: &Path) -> bool {
    let euid = nix::unistd::geteuid().as_raw();
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || meta.permissions().mode() & 0o7777 != 0o700 || meta.uid() != euid {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut n = 0;
    for entry in entries {
        n += 1;
        // DirEntry::metadata does not follow a symlink.
        let Ok(m) = entry.and_then(|e| e.metadata().map(|m| (e.path(), m))) else {
            return false;
        };
        let (path, m) = m;
        if m.uid() != euid || m.permissions().mode() & 0o022 != 0 {
            return false;
        }
        let empty = if m.is_dir() {
            std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none())
        } else {
            m.is_file() && m.len() == 0
        };
        if !empty || n > MAX_ENTRIES {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::DirBuilderExt;

    fn tmpdir(parent: &Path) -> PathBuf {
        let t = parent.join("capsule-TEST");
        std::fs::DirBuilder::new().mode(0o700).create(&t).unwrap();
        t
    }

    #[test]
    fn only_empty_entries_are_moved_aside() {
        let host = tempfile::tempdir().unwrap();
        let t = tmpdir(host.path());
        std::fs::create_dir(t.join("mountpoint")).unwrap();
        std::fs::write(t.join("empty"), b"").unwrap();
        assert!(only_empty_entries(&t));
        std::fs::write(t.join("data"), b"x").unwrap();
        assert!(!only_empty_entries(&t), "a file with data");
        std::fs::remove_file(t.join("data")).unwrap();
        std::fs::write(t.join("mountpoint/f"), b"").unwrap();
        assert!(!only_empty_entries(&t), "a directory with an entry");
        std::fs::remove_file(t.join("mountpoint/f")).unwrap();
        std::os::unix::fs::symlink("/etc", t.join("link")).unwrap();
        assert!(!only_empty_entries(&t), "a symlink");
        std::fs::remove_file(t.join("link")).unwrap();
        std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(!only_empty_entries(&t), "a mode the run changed");
        std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(t.join("mountpoint"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        assert!(!only_empty_entries(&t), "an entry others may write in");
        std::fs::set_permissions(t.join("mountpoint"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        assert!(only_empty_entries(&t));
        for i in 0..MAX_ENTRIES {
            std::fs::create_dir(t.join(format!("d{i}"))).unwrap();
        }
        assert!(
            !only_empty_entries(&t),
            "more entries than the fast path looks at"
        );
    }

    #[test]
    fn moved_aside_only_when_wanted_and_then_taken_once() {
        let host = tempfile::tempdir().unwrap();
        let t = tmpdir(host.path());
        std::fs::create_dir(t.join("mountpoint")).unwrap();
        // The flag is process-wide: this is the only test that sets it.
        want();
        assert!(move_aside(&t));
        assert!(!t.exists());
        let aside = take().expect("kept for the caller");
        assert_eq!(aside, host.path().join(".capsule-TEST.removing"));
        assert!(aside.join("mountpoint").is_dir());
        assert!(take().is_none());
        // Not moved over an existing name, nor by a relative path.
        let t = tmpdir(host.path());
        assert!(!move_aside(&t));
        assert!(t.is_dir());
        assert!(!move_aside(Path::new("capsule-TEST")));
    }
}

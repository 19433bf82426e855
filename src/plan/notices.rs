//! What a new user must be told rather than find out: the working
//! directory, grants that were skipped, settings that do nothing (issue 25).
//!
//! - Without `--policy`, the current directory is granted read-only (as
//!   `--allow-read .` would) and is the working directory, so that
//!   `cd project && capsule exec -- python3 agent.py` reads `agent.py`.
//!   Never when it is `/`, the user's home or one of its ancestors, the temp
//!   directory or one of its ancestors, a world-writable directory
//!   (`/var/tmp`), a credential location, or beneath `/proc`, `/sys` or
//!   `/dev`: those would hand the command far more than a project; then the
//!   run says so on stderr.
//! - When the working directory falls back to the private TMPDIR, the run
//!   says so on stderr (streaming mode), naming the flag that grants it, and
//!   a relative command that is not found there says why.
//! - `check` and `--dry-run` list optional grants skipped because they do
//!   not exist, and `allow_hosts` that the network mode ignores.

use std::path::{Path, PathBuf};

use super::command::CommandError;
use super::credentials;
use crate::policy::resolve::{self, ResolvedPath};
use crate::policy::validate::{self, GrantKind};
use crate::policy::{LoadedPolicy, NetMode};

/// The origin shown for the current directory granted without a policy.
pub const IMPLIED_CWD: &str = "--allow-read . (implied: no --policy)";

/// Something the user should know about the plan. `check` and `--dry-run`
/// print every notice; a streaming `exec` prints those with `on_exec` on
/// stderr before the run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Notice {
    pub text: String,
    pub on_exec: bool,
}

/// Why the current directory `here` is not granted implicitly, if it is not.
fn not_implied(here: &Path, home: &Path) -> Option<String> {
    if here == Path::new("/") {
        return Some("it is the root directory".into());
    }
    if home.starts_with(here) {
        return Some(if home == here {
            "it is your home directory".into()
        } else {
            format!("it contains your home directory {}", home.display())
        });
    }
    let tmp = std::env::temp_dir();
    let tmp = std::fs::canonicalize(&tmp).unwrap_or(tmp);
    if tmp.starts_with(here) {
        return Some(format!(
            "it is or contains the temporary directory {}, where other runs keep their files",
            tmp.display()
        ));
    }
    // A shared scratch place (/var/tmp, /dev/shm, ...): other programs' files.
    if std::fs::metadata(here).is_ok_and(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o002 != 0
    }) {
        return Some(
            "it is a world-writable directory, shared with other users and programs".into(),
        );
    }
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|d| here.starts_with(d))
    {
        return Some("it lies beneath /proc, /sys or /dev".into());
    }
    let creds = credentials::patterns(home, &[]);
    if here
        .ancestors()
        .any(|p| credentials::is_credential(&creds, p))
    {
        return Some("it is a credential location".into());
    }
    validate::check_grant(here, GrantKind::Read).err()
}

/// Without `--policy`: the read grant of the current directory, or why not.
/// None when a grant already covers it.
pub fn implied_cwd_grant(
    here: &Path,
    home: &Path,
    covered: bool,
) -> Result<Option<ResolvedPath>, String> {
    if covered {
        return Ok(None);
    }
    if let Some(why) = not_implied(here, home) {
        return Err(why);
    }
    // Pinned like every grant: Landlock's rule lands on this directory,
    // whatever is put at its path later.
    let opened = crate::policy::resolve::pin(here).map_err(|e| e.to_string())?;
    Ok(Some(ResolvedPath {
        path: here.to_path_buf(),
        key: IMPLIED_CWD.to_string(),
        line: None,
        flag: Some(IMPLIED_CWD),
        opened,
    }))
}

/// The notice for a working directory that fell back to the private TMPDIR
/// (or `/`): `why` says why the current directory is not granted.
pub fn cwd_fallback(here: &Path, cwd: &Path, why: &str) -> Notice {
    let place = if cwd == Path::new("/") {
        "/ (filesystem.tmp is off)".to_string()
    } else {
        "its private TMPDIR (/tmp inside the run), removed afterwards".to_string()
    };
    Notice {
        text: format!(
            "the current directory {} is not granted to the run ({why}), so the command runs in {place}: \
             relative paths do not reach your files and what it writes there is gone after the run. \
             Grant it with --allow-read . (or --allow-write .), or pick the working directory with --cwd DIR",
            here.display()
        ),
        on_exec: true,
    }
}

/// Why the current directory is not readable under a policy file.
pub fn policy_does_not_grant(loaded: &LoadedPolicy, here: &Path) -> String {
    match &loaded.source {
        Some(src) if loaded.base_dir != here => format!(
            "{} does not grant it; its relative paths resolve against {}, not the current directory",
            src.display(),
            loaded.base_dir.display()
        ),
        Some(src) => format!("{} does not grant it", src.display()),
        None => "the policy does not grant it".into(),
    }
}

/// A relative or absolute command that does not exist: say where it was
/// looked for (PATH was never searched for a name with a `/`).
pub fn command_not_found(
    e: CommandError,
    cwd: &Path,
    fallback: Option<&(PathBuf, String)>,
) -> CommandError {
    let name = match &e {
        CommandError::NotFound(n) if n.contains('/') => n.clone(),
        _ => return e,
    };
    let hint = if Path::new(&name).is_absolute() {
        String::new()
    } else {
        match fallback {
            Some((here, why)) => format!(
                " (a relative command is looked up in the working directory, {}: the current directory {} \
                 is not granted, because {why}; add --allow-read . or --cwd DIR)",
                cwd.display(),
                here.display()
            ),
            None => format!(" (in the working directory {})", cwd.display()),
        }
    };
    CommandError::NoSuchFile { name, hint }
}

/// Optional grants skipped because they do not exist, and network settings
/// that do nothing under the mode in force.
pub fn policy_notices(loaded: &LoadedPolicy, home: &Path, mode: NetMode) -> Vec<Notice> {
    let mut out = Vec::new();
    let fs = &loaded.policy.filesystem;
    for (section, entries) in [
        ("read", &fs.read),
        ("write", &fs.write),
        ("exec", &fs.exec),
        ("deny", &fs.deny),
    ] {
        for (i, e) in entries.iter().enumerate() {
            if !e.optional() {
                continue;
            }
            let key = format!("filesystem.{section}[{i}]");
            if let Ok(None) = resolve::resolve_one(e.raw(), &loaded.base_dir, home, &key, true) {
                let what = if section == "deny" {
                    "nothing to carve out"
                } else {
                    "not granted: create it before the run to grant it"
                };
                out.push(Notice {
                    text: format!(
                        "{key} `{}?` ({}) does not exist: skipped ({what})",
                        e.raw(),
                        loaded
                            .base_dir
                            .join(e.raw().trim_start_matches("./"))
                            .display()
                    ),
                    on_exec: false,
                });
            }
        }
    }
    let hosts = &loaded.policy.network.allow_hosts;
    if !hosts.is_empty() && mode != NetMode::Proxy {
        let effect = match mode {
            NetMode::None => "the run has no network at all",
            _ => "every host is reachable, not only these",
        };
        out.push(Notice {
            text: format!(
                "network.allow_hosts ({}) does nothing under network.mode {}: {effect}; \
                 the list applies in proxy mode only (mode: proxy, or --net proxy)",
                hosts
                    .iter()
                    .map(|h| h.host())
                    .collect::<Vec<_>>()
                    .join(", "),
                mode.as_str()
            ),
            on_exec: true,
        });
    }
    out
}

/// A carve-out beneath a grant under the host's /tmp (the starter
/// policies' `./.env?` of a project in /tmp): where the run has its view,
/// it keeps the host's /tmp under Landlock rather than a private one, so
/// that the carve-out holds, and HOME and TMPDIR are then the run's own
/// directory rather than `/tmp`. Said at the run (issue 39: whether the
/// project has a `.env` changed them without a word).
pub fn host_tmp_kept(fs: &super::FsPlan, tmpdir: Option<&Path>) -> Option<Notice> {
    let tmpdir = tmpdir?;
    let (deny, grant) = fs.carved_beneath_tmp(Some(tmpdir))?;
    Some(Notice {
        text: format!(
            "{} is carved out of the grant {} beneath /tmp — {} — so the run's view keeps the host's /tmp \
             under Landlock rather than a private /tmp, to keep it unreadable: HOME and TMPDIR are {}, not /tmp",
            deny.path.display(),
            grant.path.display(),
            deny.origin,
            tmpdir.display()
        ),
        on_exec: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_the_root_and_the_temp_dir_are_never_implied() {
        let home = Path::new("/home/u");
        assert!(not_implied(Path::new("/"), home).is_some());
        assert!(not_implied(home, home).is_some());
        assert!(not_implied(Path::new("/home"), home).is_some());
        assert!(not_implied(Path::new("/proc/self"), home).is_some());
        assert!(not_implied(Path::new("/home/u/.ssh"), home).is_some());
        assert!(not_implied(Path::new("/home/u/.ssh/keys"), home).is_some());
        assert!(not_implied(Path::new("/home/u/project"), home).is_none());
    }
}

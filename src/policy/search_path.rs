//! The module search paths a policy may set (`PYTHONPATH`, `NODE_PATH`):
//! accepted only when every entry is read-only in the child. Validation
//! checks their shape, the planner checks them again against every grant.

use std::path::{Component, Path, PathBuf};

use super::access::Access;

/// Module search paths accepted when every entry is read-only in the child.
pub const READ_ONLY_PATH_ENV: &[&str] = &["PYTHONPATH", "NODE_PATH"];

/// Whether `name` is one of [`READ_ONLY_PATH_ENV`].
pub fn is_search_path(name: &str) -> bool {
    READ_ONLY_PATH_ENV.contains(&name)
}

/// `value` of a module search path (`PYTHONPATH`, `NODE_PATH`): every
/// `:`-separated entry must be an absolute path without `..` that lies
/// beneath a read or exec grant, and neither lies in nor holds any write
/// grant (a write grant inside an entry would be importable as a package).
/// An empty entry means the current directory and is refused.
pub fn check_search_path(value: &str, grants: &[(PathBuf, Access)]) -> Result<(), String> {
    check_search_path_with(value, grants, true)
}

/// [`check_search_path`]; with `require_grant` false only the shape and the
/// write grants are checked (policy validation, before system grants exist).
pub fn check_search_path_with(
    value: &str,
    grants: &[(PathBuf, Access)],
    require_grant: bool,
) -> Result<(), String> {
    for entry in value.split(':') {
        if entry.is_empty() {
            return Err("an empty entry means the working directory, which may be writable".into());
        }
        let p = Path::new(entry);
        if !p.is_absolute()
            || p.components()
                .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        {
            return Err(format!(
                "entry `{entry}` is not an absolute path without . or .."
            ));
        }
        // The path as written, and where its symlinks lead.
        let mut forms = vec![p.to_path_buf()];
        if let Ok(c) = std::fs::canonicalize(p) {
            if c != p {
                forms.push(c);
            }
        }
        for f in &forms {
            if let Some((w, _)) = grants
                .iter()
                .find(|(g, a)| a.write && (f.starts_with(g) || g.starts_with(f)))
            {
                return Err(format!(
                    "entry `{entry}` is writable in the sandbox (write grant {}); module search paths must be read-only",
                    w.display()
                ));
            }
            let read_only = grants
                .iter()
                .any(|(g, a)| (a.read || a.exec) && !a.write && f.starts_with(g));
            if require_grant && !read_only {
                return Err(format!(
                    "entry `{entry}` is not beneath a read-only grant (filesystem.read or exec)"
                ));
            }
        }
    }
    Ok(())
}

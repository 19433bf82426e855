//! Resolving the command on the host, before anything runs.
//!
//! The parent finds the program on the host's PATH (or relative to the
//! child's working directory when it contains a `/`), so the child's
//! execve never searches. The program file, and a script's `#!`
//! interpreter (and the program `/usr/bin/env` would start), are granted
//! read+exec; with `filesystem.system` their install prefix is granted too
//! (for `/opt/tool/bin/tool`, `/opt/tool`), unless that prefix would be
//! `/`, `/usr` (already covered) or the user's home or one of its ancestors.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CommandError {
    #[error("command not found: {0} (searched PATH)")]
    NotFound(String),
    #[error("cannot execute {path}: {why}")]
    NotExecutable { path: PathBuf, why: &'static str },
    #[error("no command given (usage: capsule exec [OPTIONS] -- COMMAND [ARGS...])")]
    Empty,
}

impl CommandError {
    /// 127 when not found, 126 when found but not executable.
    pub fn exit_code(&self) -> i32 {
        match self {
            CommandError::NotFound(_) => 127,
            CommandError::NotExecutable { .. } => 126,
            CommandError::Empty => 125,
        }
    }
}

/// The program to exec and what it needs to be granted.
#[derive(Debug, Clone)]
pub struct ResolvedCommand {
    /// Absolute path passed to execve.
    pub program: PathBuf,
    /// Files that need read+exec: the program, its interpreter(s).
    pub files: Vec<PathBuf>,
    /// Install prefixes (granted read+exec under `system: true`).
    pub prefixes: Vec<PathBuf>,
}

/// Resolve `name` as a shell would, on `path_env`, relative paths against `cwd`.
pub fn resolve(
    name: &str,
    path_env: &str,
    cwd: &Path,
    home: &Path,
) -> Result<ResolvedCommand, CommandError> {
    if name.is_empty() {
        return Err(CommandError::Empty);
    }
    let program = if name.contains('/') {
        let p = if Path::new(name).is_absolute() {
            PathBuf::from(name)
        } else {
            cwd.join(name)
        };
        check_executable(&p, name)?;
        p
    } else {
        find_on_path(name, path_env)?
    };
    let mut out = ResolvedCommand {
        program: program.clone(),
        files: vec![program.clone()],
        prefixes: vec![],
    };
    add_prefix(&mut out, &program, home);
    if let Some((interp, arg)) = shebang(&program) {
        out.files.push(interp.clone());
        add_prefix(&mut out, &interp, home);
        // `#!/usr/bin/env python3`: the program env starts needs exec too.
        if interp.file_name().is_some_and(|n| n == "env") {
            if let Some(target) = arg {
                if let Ok(p) = find_on_path(&target, path_env) {
                    out.files.push(p.clone());
                    add_prefix(&mut out, &p, home);
                }
            }
        }
    }
    Ok(out)
}

fn check_executable(p: &Path, name: &str) -> Result<(), CommandError> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(_) => return Err(CommandError::NotFound(name.to_string())),
    };
    if meta.is_dir() {
        return Err(CommandError::NotExecutable {
            path: p.to_path_buf(),
            why: "it is a directory",
        });
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(CommandError::NotExecutable {
            path: p.to_path_buf(),
            why: "it has no execute permission",
        });
    }
    Ok(())
}

fn find_on_path(name: &str, path_env: &str) -> Result<PathBuf, CommandError> {
    let mut not_exec = None;
    for dir in path_env.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let cand = Path::new(dir).join(name);
        match check_executable(&cand, name) {
            Ok(()) if cand.is_absolute() => return Ok(cand),
            Ok(()) => {
                if let Ok(abs) = std::fs::canonicalize(&cand) {
                    return Ok(abs);
                }
            }
            Err(e @ CommandError::NotExecutable { .. }) => {
                not_exec.get_or_insert(e);
            }
            Err(_) => {}
        }
    }
    Err(not_exec.unwrap_or_else(|| CommandError::NotFound(name.to_string())))
}

/// `#!interpreter [arg]` of a script, if it is one.
fn shebang(program: &Path) -> Option<(PathBuf, Option<String>)> {
    let mut f = std::fs::File::open(program).ok()?;
    let mut head = [0u8; 256];
    let n = f.read(&mut head).ok()?;
    let head = &head[..n];
    if !head.starts_with(b"#!") {
        return None;
    }
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = std::str::from_utf8(&head[2..line_end]).ok()?;
    let mut parts = line.split_whitespace();
    let interp = PathBuf::from(parts.next()?);
    // `env -S cmd` and `env cmd`: the first word that is not an option.
    let arg = parts.find(|w| !w.starts_with('-')).map(str::to_string);
    Some((interp, arg))
}

fn add_prefix(out: &mut ResolvedCommand, program: &Path, home: &Path) {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    for p in [program, real.as_path()] {
        let Some(dir) = p.parent() else { continue };
        let is_bin = dir
            .file_name()
            .is_some_and(|n| n == "bin" || n == "sbin" || n == "shims");
        let Some(prefix) = dir.parent().filter(|_| is_bin) else {
            continue;
        };
        let too_broad = prefix == Path::new("/")
            || prefix == Path::new("/usr")
            || prefix == Path::new("/usr/local")
            || home.starts_with(prefix);
        if !too_broad && !out.prefixes.iter().any(|q| q == prefix) {
            out.prefixes.push(prefix.to_path_buf());
        }
    }
    if real != program && !out.files.contains(&real) {
        out.files.push(real);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_on_path_and_reports_missing() {
        let home = Path::new("/nonexistent-home");
        let r = resolve("sh", "/usr/bin:/bin", Path::new("/"), home).unwrap();
        assert!(r.program.is_absolute());
        let e = resolve("no-such-command-xyz", "/usr/bin:/bin", Path::new("/"), home).unwrap_err();
        assert_eq!(e.exit_code(), 127);
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "data").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(plain.to_str().unwrap(), "/usr/bin", Path::new("/"), home).unwrap_err();
        assert_eq!(e.exit_code(), 126);
        let e = resolve("/tmp", "/usr/bin", Path::new("/"), home).unwrap_err();
        assert_eq!(e.exit_code(), 126);
    }

    #[test]
    fn script_interpreters_are_granted() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/usr/bin/env sh\necho hi\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = resolve(
            script.to_str().unwrap(),
            "/usr/bin:/bin",
            Path::new("/"),
            Path::new("/h"),
        )
        .unwrap();
        assert!(r.files.iter().any(|f| f.ends_with("env")));
        assert!(r.files.iter().any(|f| f.ends_with("sh")));
    }

    #[test]
    fn prefix_of_opt_tool_but_never_home() {
        let mut out = ResolvedCommand {
            program: "/x".into(),
            files: vec![],
            prefixes: vec![],
        };
        add_prefix(
            &mut out,
            Path::new("/opt/tool/bin/tool"),
            Path::new("/home/u"),
        );
        add_prefix(
            &mut out,
            Path::new("/home/u/bin/tool"),
            Path::new("/home/u"),
        );
        add_prefix(&mut out, Path::new("/usr/bin/tool"), Path::new("/home/u"));
        assert_eq!(out.prefixes, vec![PathBuf::from("/opt/tool")]);
    }
}

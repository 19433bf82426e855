//! Resolving the command on the host, before anything runs.
//!
//! The parent finds the program on the PATH the child gets (the policy's
//! `env.set.PATH`, else capsule's own), in the host's filesystem (or relative to the
//! child's working directory when it contains a `/`), so the child's
//! execve never searches. The program file, and a script's `#!`
//! interpreter (and the program `/usr/bin/env` would start), are granted
//! read+exec (each only when no exec grant covers it already); with
//! `filesystem.system` their install prefix is granted too (for
//! `/opt/tool/bin/tool`, `/opt/tool`), unless that prefix would be `/`,
//! `/usr` (already covered) or the user's home or one of its ancestors.
//!
//! Content a sandboxed program may have written is not trusted: a program
//! (or its symlink target) under any grant of the policy (read, write or
//! exec, the workspace and TMPDIR included; an earlier run under another
//! policy may have written there) adds no prefix, neither its own nor its
//! `#!` interpreter's, and that interpreter is granted as one file at most.
//! An interpreter in a place this run can write is not granted at all.
//! Programs outside every grant (on PATH or named by path) keep their
//! prefixes. The planner then puts every added path through the checks
//! policy grants get (`plan::build`).

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CommandError {
    #[error("command not found: {0} (searched PATH)")]
    NotFound(String),
    /// A name with a `/`: never looked up on PATH.
    #[error("command not found: {name}: no such file{hint}")]
    NoSuchFile { name: String, hint: String },
    #[error("cannot execute {path}: {why}")]
    NotExecutable { path: PathBuf, why: &'static str },
    #[error("no command given (usage: capsule exec [OPTIONS] -- COMMAND [ARGS...])")]
    Empty,
}

impl CommandError {
    /// 127 when not found, 126 when found but not executable.
    pub fn exit_code(&self) -> i32 {
        match self {
            CommandError::NotFound(_) | CommandError::NoSuchFile { .. } => 127,
            CommandError::NotExecutable { .. } => 126,
            CommandError::Empty => 125,
        }
    }
}

/// A path the command adds, and why (shown by `check`/`--dry-run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    pub path: PathBuf,
    pub why: String,
}

/// The program to exec and what it needs to be granted.
#[derive(Debug, Clone, Default)]
pub struct ResolvedCommand {
    /// Absolute path passed to execve.
    pub program: PathBuf,
    /// Files that need read+exec: the program, its interpreter(s). The
    /// planner grants each only when no exec grant covers it already.
    pub files: Vec<Added>,
    /// Install prefixes (granted read+exec under `system: true`).
    pub prefixes: Vec<Added>,
    /// What the command would have added but may not, and why.
    pub skipped: Vec<String>,
}

/// Where the command is resolved, and which places the child can write.
pub struct Context<'a> {
    pub path_env: &'a str,
    pub cwd: &'a Path,
    pub home: &'a Path,
    /// Canonical paths the child can write (write grants, the workspace
    /// output, the private TMPDIR): content there is the child's, and adds
    /// no grant beyond the one file the user named.
    pub writable: &'a [PathBuf],
    /// Every grant of the policy but `filesystem.system` (read, write or
    /// exec; the workspace and the TMPDIR included): content there may be an
    /// earlier run's, written under another policy, and names no prefix.
    pub granted: &'a [PathBuf],
}

impl Context<'_> {
    /// Whether `p` (as written, or after following its symlinks) lies in a
    /// place the child can write.
    fn child_writable(&self, p: &Path) -> bool {
        Self::under(self.writable, p).is_some()
    }

    /// The grant `p` (as written, or after following its symlinks) lies under, if any.
    fn granted(&self, p: &Path) -> Option<&Path> {
        Self::under(self.granted, p)
    }

    fn under<'g>(dirs: &'g [PathBuf], p: &Path) -> Option<&'g Path> {
        let find = |q: &Path| dirs.iter().find(|w| q.starts_with(w)).map(PathBuf::as_path);
        find(p).or_else(|| std::fs::canonicalize(p).ok().and_then(|c| find(&c)))
    }
}

/// Resolve `name` as a shell would, on `path_env`, relative paths against `cwd`.
///
/// The program, its `#!` interpreter and the program `/usr/bin/env` starts
/// are returned as files to grant; their install prefixes too, but only when
/// neither the program nor its symlink target lies under a grant of the
/// policy, and neither the interpreter nor the prefix in a place the child
/// can write (a child-written `#!` line or symlink must not widen the next
/// run's grants, whatever that run's policy).
pub fn resolve(name: &str, ctx: &Context<'_>) -> Result<ResolvedCommand, CommandError> {
    if name.is_empty() {
        return Err(CommandError::Empty);
    }
    let program = if name.contains('/') {
        let p = if Path::new(name).is_absolute() {
            PathBuf::from(name)
        } else {
            ctx.cwd.join(name)
        };
        check_executable(&p, name)?;
        p
    } else {
        find_on_path(name, ctx.path_env)?
    };
    let mut out = ResolvedCommand {
        program: program.clone(),
        ..Default::default()
    };
    add_file(&mut out, &program, "the program");
    // Content a child may have written (this run's, or an earlier run's
    // under another policy): its `#!` line and symlinks name no prefix.
    let writable = ctx.child_writable(&program);
    let granted = ctx.granted(&program);
    let tainted = writable || granted.is_some();
    if writable {
        out.skipped.push(format!(
            "no install prefix for {}: it lies in a place the sandboxed program can write, so its #! line and symlinks are not trusted",
            program.display()
        ));
    } else if let Some(g) = granted {
        out.skipped.push(format!(
            "no install prefix for {} or its #! interpreter: it lies under the grant {}, where an earlier run may have written it, so its #! line and symlinks are not trusted",
            program.display(),
            g.display()
        ));
    } else {
        add_prefix(&mut out, &program, ctx);
    }
    if let Some((interp, arg)) = shebang(&program) {
        add_helper(&mut out, &interp, "its #! interpreter", tainted, ctx);
        // `#!/usr/bin/env python3`: the program env starts needs exec too.
        if interp.file_name().is_some_and(|n| n == "env") {
            if let Some(target) = arg {
                if let Ok(p) = find_on_path(&target, ctx.path_env) {
                    add_helper(&mut out, &p, "the program its #! env starts", tainted, ctx);
                }
            }
        }
    }
    Ok(out)
}

/// The interpreters a build tool or a script starts by name (a Makefile's
/// `python3`, an npm script's `node`, a test runner's `perl`), looked for on
/// the child's PATH.
pub const PATH_INTERPRETERS: &[&str] = &[
    "python3", "python", "pip3", "pip", "node", "npm", "npx", "ruby", "perl",
];

/// The interpreters of [`PATH_INTERPRETERS`] that the child's PATH resolves
/// to a directory no exec grant covers (`covered` says which do): a
/// virtualenv's or pyenv's `python3`, an nvm `node`. Each is added as the
/// top-level command's own `#!` interpreter is — the file, its symlink
/// target, and its install prefix, never one in a place the child can
/// write, no prefix for one under a grant of the policy — so that
/// `capsule exec -- make test` runs the `python3` that `capsule exec --
/// python3` runs. The planner grants them under `filesystem.system` only.
///
/// Only directories of the PATH that no grant covers are searched: on a
/// PATH of system directories alone this reads nothing.
pub fn path_interpreters(ctx: &Context<'_>, covered: impl Fn(&Path) -> bool) -> ResolvedCommand {
    let mut out = ResolvedCommand::default();
    let dirs: Vec<&str> = ctx.path_env.split(':').collect();
    let uncovered = |d: &str| {
        let d = Path::new(d);
        d.is_absolute() && !covered(d)
    };
    if !dirs.iter().any(|d| uncovered(d)) {
        return out;
    }
    for name in PATH_INTERPRETERS {
        // The first hit on the PATH is what the child's lookup finds.
        let Ok(found) = find_on_path(name, ctx.path_env) else {
            continue;
        };
        let Some(dir) = found.parent() else { continue };
        if !uncovered(&dir.to_string_lossy()) {
            continue;
        }
        let why = format!("{name} on the run's PATH");
        let tainted = ctx.granted(&found).is_some();
        add_helper(&mut out, &found, &why, tainted, ctx);
    }
    out
}

fn add_file(out: &mut ResolvedCommand, p: &Path, why: &str) {
    if !out.files.iter().any(|f| f.path == p) {
        out.files.push(Added {
            path: p.to_path_buf(),
            why: why.to_string(),
        });
    }
    // The link's target is what the kernel opens.
    if let Ok(real) = std::fs::canonicalize(p) {
        if real != p && !out.files.iter().any(|f| f.path == real) {
            out.files.push(Added {
                path: real,
                why: format!("{why} (symlink target of {})", p.display()),
            });
        }
    }
}

/// An interpreter (or env's target): never one in a child-writable place
/// (no exec from writable places), and no prefix when named by child content.
fn add_helper(out: &mut ResolvedCommand, p: &Path, why: &str, tainted: bool, ctx: &Context<'_>) {
    if ctx.child_writable(p) {
        out.skipped.push(format!(
            "{why} {} is not granted: it lies in a place the sandboxed program can write",
            p.display()
        ));
        return;
    }
    // Only an executable regular file can be an interpreter: a `#!` line
    // naming anything else must not turn into a read grant.
    if check_executable(p, &p.to_string_lossy()).is_err() {
        out.skipped.push(format!(
            "{why} {} is not granted: it is not an executable file",
            p.display()
        ));
        return;
    }
    add_file(out, p, why);
    if !tainted {
        add_prefix(out, p, ctx);
    }
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

/// The first 256 bytes of `program`, only when it is a regular file.
///
/// Planning runs on the host before the run and its timeout, and the
/// program may be what an earlier run left in its write grant: a FIFO with
/// an execute bit blocked a plain `open` for good (no writer ever comes),
/// and a device's `open` can act. So the path must name a regular file, is
/// opened non-blocking and without taking a controlling terminal, and the
/// descriptor must be a regular file too (the name may have been swapped
/// in between); anything else has no `#!` line.
pub(crate) fn script_head(program: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    if !std::fs::metadata(program).ok()?.is_file() {
        return None;
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(program)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut head = vec![0u8; 256];
    let n = f.read(&mut head).ok()?;
    head.truncate(n);
    Some(head)
}

/// `#!interpreter [arg]` of a script, if it is one.
fn shebang(program: &Path) -> Option<(PathBuf, Option<String>)> {
    let head = script_head(program)?;
    let head = &head[..];
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

fn add_prefix(out: &mut ResolvedCommand, program: &Path, ctx: &Context<'_>) {
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
            || ctx.home.starts_with(prefix);
        if too_broad || out.prefixes.iter().any(|q| q.path == prefix) {
            continue;
        }
        // A prefix in, or around, a place the child writes would let it
        // execute what it wrote (or name what the next run may read).
        if ctx.child_writable(prefix) || ctx.writable.iter().any(|w| w.starts_with(prefix)) {
            out.skipped.push(format!(
                "no install prefix {} for {}: it is, or holds, a place the sandboxed program can write",
                prefix.display(),
                program.display()
            ));
            continue;
        }
        out.prefixes.push(Added {
            path: prefix.to_path_buf(),
            why: format!("the install prefix of {}", p.display()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(path_env: &'a str, home: &'a Path, writable: &'a [PathBuf]) -> Context<'a> {
        Context {
            path_env,
            cwd: Path::new("/"),
            home,
            writable,
            granted: writable,
        }
    }

    #[test]
    fn finds_on_path_and_reports_missing() {
        let home = Path::new("/nonexistent-home");
        let c = ctx("/usr/bin:/bin", home, &[]);
        let r = resolve("sh", &c).unwrap();
        assert!(r.program.is_absolute());
        let e = resolve("no-such-command-xyz", &c).unwrap_err();
        assert_eq!(e.exit_code(), 127);
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "data").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve(plain.to_str().unwrap(), &c).unwrap_err();
        assert_eq!(e.exit_code(), 126);
        let e = resolve("/tmp", &c).unwrap_err();
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
            &ctx("/usr/bin:/bin", Path::new("/h"), &[]),
        )
        .unwrap();
        assert!(r.files.iter().any(|f| f.path.ends_with("env")));
        assert!(r.files.iter().any(|f| f.path.ends_with("sh")));
    }

    #[test]
    fn path_interpreters_only_where_no_grant_covers_and_never_written() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let venv = root.join("venv/bin");
        std::fs::create_dir_all(&venv).unwrap();
        std::os::unix::fs::symlink("/bin/sh", venv.join("python3")).unwrap();
        let covered = |d: &Path| d.starts_with("/usr") || d.starts_with("/bin");
        // A PATH of covered directories alone: nothing looked up.
        let c = ctx("/usr/bin:/bin", Path::new("/h"), &[]);
        let r = path_interpreters(&c, covered);
        assert!(r.files.is_empty() && r.prefixes.is_empty(), "{r:?}");
        // The venv first: its python3, the link's target and its prefix.
        let path = format!("{}:/usr/bin:/bin", venv.display());
        let c = ctx(&path, Path::new("/h"), &[]);
        let r = path_interpreters(&c, covered);
        assert!(
            r.files.iter().any(|f| f.path == venv.join("python3")),
            "{r:?}"
        );
        assert!(
            r.prefixes.iter().any(|p| p.path == root.join("venv")),
            "{r:?}"
        );
        // The venv after the system's: the child's lookup finds /usr/bin's.
        let path = format!("/usr/bin:/bin:{}", venv.display());
        let c = ctx(&path, Path::new("/h"), &[]);
        let r = path_interpreters(&c, covered);
        assert!(
            !r.files.iter().any(|f| f.path == venv.join("python3")),
            "{r:?}"
        );
        // A venv the child can write is never granted.
        let path = format!("{}:/usr/bin:/bin", venv.display());
        let w = [root.join("venv")];
        let c = ctx(&path, Path::new("/h"), &w);
        let r = path_interpreters(&c, covered);
        assert!(r.files.is_empty() && r.prefixes.is_empty(), "{r:?}");
        assert!(!r.skipped.is_empty(), "{r:?}");
    }

    #[test]
    fn prefix_of_opt_tool_but_never_home() {
        let mut out = ResolvedCommand::default();
        let c = ctx("", Path::new("/home/u"), &[]);
        add_prefix(&mut out, Path::new("/opt/tool/bin/tool"), &c);
        add_prefix(&mut out, Path::new("/home/u/bin/tool"), &c);
        add_prefix(&mut out, Path::new("/usr/bin/tool"), &c);
        let p: Vec<_> = out.prefixes.iter().map(|a| a.path.clone()).collect();
        assert_eq!(p, vec![PathBuf::from("/opt/tool")]);
    }

    #[test]
    fn child_written_scripts_add_no_prefix() {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let app = root.join("app/bin");
        std::fs::create_dir_all(&app).unwrap();
        std::os::unix::fs::symlink("/bin/sh", app.join("sh")).unwrap();
        let out_dir = root.join("out");
        std::fs::create_dir_all(&out_dir).unwrap();
        let script = out_dir.join("run_tests");
        std::fs::write(&script, format!("#!{}\n", app.join("sh").display())).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let w = [out_dir.clone()];
        let r = resolve(
            script.to_str().unwrap(),
            &ctx("/usr/bin:/bin", Path::new("/h"), &w),
        )
        .unwrap();
        assert!(r.prefixes.is_empty(), "{r:?}");
        assert!(r.files.iter().any(|f| f.path == app.join("sh")));
        // The same script outside any writable place: its prefix is granted.
        let r = resolve(
            script.to_str().unwrap(),
            &ctx("/usr/bin:/bin", Path::new("/h"), &[]),
        )
        .unwrap();
        assert!(
            r.prefixes.iter().any(|p| p.path == root.join("app")),
            "{r:?}"
        );
        // Under a grant this run only reads: an earlier run may have
        // written it, so no prefix either; the interpreter alone is granted.
        let g = [root.clone()];
        let r = resolve(
            script.to_str().unwrap(),
            &Context {
                granted: &g,
                ..ctx("/usr/bin:/bin", Path::new("/h"), &[])
            },
        )
        .unwrap();
        assert!(r.prefixes.is_empty(), "{r:?}");
        assert!(r.files.iter().any(|f| f.path == app.join("sh")), "{r:?}");
        assert!(
            r.skipped.iter().any(|s| s.contains("no install prefix")),
            "{r:?}"
        );
        // A non-executable file named as interpreter is not granted.
        std::fs::write(&script, "#!/etc/passwd\n").unwrap();
        let r = resolve(
            script.to_str().unwrap(),
            &ctx("/usr/bin:/bin", Path::new("/h"), &w),
        )
        .unwrap();
        assert_eq!(r.files.len(), 1, "{r:?}");
        // An interpreter inside the writable place is never granted.
        std::fs::write(&script, format!("#!{}\n", out_dir.join("py").display())).unwrap();
        let r = resolve(
            script.to_str().unwrap(),
            &ctx("/usr/bin:/bin", Path::new("/h"), &w),
        )
        .unwrap();
        assert_eq!(r.files.len(), 1, "{r:?}");
    }
}

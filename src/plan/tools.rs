//! Host `command` tools and the places the run can write.
//!
//! A `command` tool runs on the host, outside every layer of the run (or
//! under its own `policy:`, which may grant more than the run has). If its
//! program (or that program's `#!` interpreter), a path among its arguments,
//! its working directory (the policy file's directory: `python3 -m mod`
//! imports from there) or its `policy:` file lies where the run can write,
//! the run rewrites it and then calls the tool: the run's code would run on
//! the host. So too when the run can write what programs load from their
//! working directory by themselves (Python's `__pycache__`, `node_modules`,
//! `.git`, a Makefile, any dot entry: [`IMPLICIT_ENTRIES`]). Such a tool is refused while planning, so `check`, `--dry-run`
//! and `exec` all say so before anything runs. The same trust boundary as
//! the command's `#!` line (`super::command`): nothing a run can write
//! becomes code or policy the host runs.
//!
//! A bare program name is looked up here, on capsule's own PATH (the one the
//! tool process gets), and the tool runs that absolute path: a directory of
//! PATH the run can write cannot shadow it later.
//!
//! What this cannot see: a path written inside an inline script
//! (`sh -c "sh out/x.sh"`) and files a tool opens by itself (a config file,
//! a module found on its own search path). The README says so.

use std::path::{Component, Path, PathBuf};

use super::{FsGrant, Origin};
use crate::policy::Tools;

/// `enforcement.limitations` of a run with host `command` tools.
pub const LIMITATION: &str =
    "host command tools run outside the sandbox: capsule refuses one whose program, #! interpreter, path \
     arguments, working directory (or its __pycache__, node_modules, build files and dot entries) or policy: \
     file lies where the run can write, but it cannot see paths \
     inside an inline script (sh -c '...') or files the tool opens by itself (its configuration, modules on \
     its own search path): keep those out of the run's write grants too";

/// Whether `tools` has a host `command` tool (one [`LIMITATION`] applies to).
pub fn has_command_tools(tools: Option<&Tools>) -> bool {
    tools.is_some_and(|t| t.allow.iter().any(|t| t.command.is_some()))
}

/// One way a tool reaches a place the run can write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{key} (`{name}`): refused: {why}; the run could rewrite it and then call the tool, which runs on the host \
     outside the run's sandbox (move it where the run cannot write, or drop that write grant)"
)]
pub struct Refusal {
    /// `tools.allow[i]`.
    pub key: String,
    pub name: String,
    pub why: String,
}

/// The places the run can write: directories and regular files of its write
/// grants (the writable devices of `filesystem.system` hold no code).
pub fn writable_places(grants: &[FsGrant]) -> Vec<(PathBuf, Origin)> {
    grants
        .iter()
        .filter(|g| g.access.write)
        .filter(|g| {
            std::fs::metadata(&g.path).is_ok_and(|m| m.is_dir() || m.is_file()) || !g.path.exists()
        })
        .map(|g| (g.path.clone(), g.origin.clone()))
        .collect()
}

/// `p` without `.` and with `..` applied lexically.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `p` with its longest existing ancestor's links resolved (what the path
/// names on the host now), the rest appended.
fn canonical_prefix(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match (cur.file_name().map(|n| n.to_os_string()), cur.parent()) {
            (Some(n), Some(parent)) => {
                rest.push(n);
                cur = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// The writable place `p` lies in (itself or beneath), judged on the path
/// as written and on what it names now through links.
fn reached<'a>(p: &Path, writable: &'a [(PathBuf, Origin)]) -> Option<&'a (PathBuf, Origin)> {
    let (lex, canon) = (lexical(p), canonical_prefix(&lexical(p)));
    writable
        .iter()
        .find(|(w, _)| lex.starts_with(w) || canon.starts_with(w))
}

/// Find `name` on `path_env` as execvp would: the first executable file.
fn on_path(name: &str, path_env: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path_env
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The interpreter a `#!` line names, if `program` starts with one.
fn shebang(program: &Path) -> Option<PathBuf> {
    // Never a plain open: the program may be a FIFO an earlier run left.
    let head = super::command::script_head(program)?;
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    text.split_whitespace().next().map(PathBuf::from)
}

/// Check every `command` tool against the places the run can write; make
/// each bare program name absolute (capsule's PATH, as the tool would have
/// found it). `Err`: the first tool that reaches one, and how.
pub fn check(
    tools: &mut Option<Tools>,
    policy_dir: &Path,
    writable: &[(PathBuf, Origin)],
    path_env: Option<&str>,
    home: Option<&Path>,
) -> Result<(), Refusal> {
    let Some(tools) = tools else { return Ok(()) };
    for (i, tool) in tools.allow.iter_mut().enumerate() {
        let Some(argv) = tool.command.as_mut() else {
            continue;
        };
        let refuse = |why: String| Refusal {
            key: format!("tools.allow[{i}]"),
            name: tool.name.clone(),
            why,
        };
        check_places(policy_dir, tool.policy.as_deref(), writable).map_err(refuse)?;
        let Some(first) = argv.first().cloned() else {
            continue;
        };
        check_inherited(policy_dir, writable, path_env, home).map_err(refuse)?;
        check_program(&first, argv, policy_dir, writable, path_env).map_err(refuse)?;
        check_arguments(argv, policy_dir, writable).map_err(refuse)?;
    }
    Ok(())
}

/// One host program and its arguments (a credential's `command`), checked as a
/// `command` tool is (it runs in the policy file's directory, outside every
/// layer); a bare program name is made absolute.
pub fn check_command(
    argv: &mut [String],
    policy_dir: &Path,
    writable: &[(PathBuf, Origin)],
    path_env: Option<&str>,
    home: Option<&Path>,
) -> Result<(), String> {
    check_places(policy_dir, None, writable)?;
    let Some(first) = argv.first().cloned() else {
        return Ok(());
    };
    check_inherited(policy_dir, writable, path_env, home)?;
    check_program(&first, argv, policy_dir, writable, path_env)?;
    check_arguments(argv, policy_dir, writable)
}

/// Whether `p` lies in one of `places` (as written or through links now).
pub fn lies_in<'a>(p: &Path, places: &'a [(PathBuf, Origin)]) -> Option<&'a (PathBuf, Origin)> {
    reached(p, places)
}

/// A writable place and where it came from, for a refusal.
fn place((w, o): &(PathBuf, Origin)) -> String {
    format!("{} ({o})", w.display())
}

/// Where the tool runs (the policy file's directory: relative paths,
/// `-m`, the current directory on an interpreter's search path) and its
/// own policy: not where the run can write.
fn check_places(
    policy_dir: &Path,
    policy: Option<&str>,
    writable: &[(PathBuf, Origin)],
) -> Result<(), String> {
    if let Some(w) = reached(policy_dir, writable) {
        return Err(format!(
            "its working directory {} (the policy file's directory, where tools run) lies in {}, which the \
             run can write",
            policy_dir.display(),
            place(w)
        ));
    }
    if let Some(w) = implicit_in(policy_dir, writable) {
        return Err(format!(
            "its working directory {} holds {}, which the run can write: tools load such entries of their \
             working directory by themselves (Python's __pycache__ bytecode, node_modules, .git hooks and \
             config, build files, dot files)",
            policy_dir.display(),
            place(w)
        ));
    }
    if let Some(p) = policy {
        let pf = policy_dir.join(p);
        if let Some(w) = reached(&pf, writable) {
            return Err(format!(
                "its policy {} lies in {}, which the run can write",
                pf.display(),
                place(w)
            ));
        }
    }
    Ok(())
}

/// Entries of a working directory that programs load code or configuration
/// from by themselves, by relative name: Python's bytecode cache (a `.pyc`
/// whose recorded source mtime and size match is run without the source),
/// Node's packages, a virtual environment tools find by name, build and test
/// files (`make`, `pytest`'s conftest.py, packaging files), the customize
/// modules of a cwd on Python's path. Every dot entry counts too (`.git`'s
/// hooks and config, `.venv`, `.npmrc`, `.cargo/config.toml`, `.envrc`), as
/// in HOME.
const IMPLICIT_ENTRIES: &[&str] = &[
    "__pycache__",
    "node_modules",
    "venv",
    "Makefile",
    "makefile",
    "GNUmakefile",
    "conftest.py",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "tox.ini",
    "pytest.ini",
    "package.json",
    "Cargo.toml",
    "build.rs",
    "sitecustomize.py",
    "usercustomize.py",
];

/// A writable place that is, or lies beneath, an entry of `dir` that
/// programs load by themselves ([`IMPLICIT_ENTRIES`] or a dot entry).
fn implicit_in<'a>(dir: &Path, writable: &'a [(PathBuf, Origin)]) -> Option<&'a (PathBuf, Origin)> {
    let (dl, dc) = (lexical(dir), canonical_prefix(&lexical(dir)));
    writable.iter().find(|(w, _)| {
        [&dl, &dc].iter().any(|d| {
            w.strip_prefix(d)
                .ok()
                .and_then(|r| r.components().next())
                .is_some_and(|c| {
                    let name = c.as_os_str().as_encoded_bytes();
                    name.first() == Some(&b'.')
                        || IMPLICIT_ENTRIES.iter().any(|e| e.as_bytes() == name)
                })
        })
    })
}

/// The tool inherits capsule's PATH and HOME: a command it (or its
/// `#!/usr/bin/env` line, or a script it runs) looks up by name, or an
/// interpreter's per-user files (~/.local), must not come from a place the
/// run can write.
fn check_inherited(
    policy_dir: &Path,
    writable: &[(PathBuf, Origin)],
    path_env: Option<&str>,
    home: Option<&Path>,
) -> Result<(), String> {
    for d in path_env.unwrap_or("").split(':') {
        let d = if d.is_empty() { "." } else { d };
        if let Some(w) = reached(&policy_dir.join(d), writable) {
            return Err(format!(
                "the PATH it inherits holds {d}, which lies in {}, which the run can write",
                place(w)
            ));
        }
    }
    if let Some(h) = home {
        if let Some(w) = reached(h, writable) {
            return Err(format!(
                "the HOME it inherits ({}) lies in {}, which the run can write",
                h.display(),
                place(w)
            ));
        }
        // Its per-user files: a dot entry of HOME or anything beneath
        // one (Python's user site under ~/.local runs its `.pth` files
        // at every start; ~/.config/git, ~/.npmrc, ~/.cache/pre-commit).
        let (hl, hc) = (lexical(h), canonical_prefix(&lexical(h)));
        if let Some(w) = writable.iter().find(|(w, _)| {
            [&hl, &hc].iter().any(|h| {
                w.strip_prefix(h)
                    .ok()
                    .and_then(|r| r.components().next())
                    .is_some_and(|c| c.as_os_str().as_encoded_bytes().first() == Some(&b'.'))
            })
        }) {
            return Err(format!(
                "the HOME it inherits ({}) holds {}, per-user files (an interpreter's user site, a tool's \
                 configuration) that the run can write",
                h.display(),
                place(w)
            ));
        }
    }
    Ok(())
}

/// Its program (looked up on PATH when named bare) and the program's `#!`
/// interpreter: not where the run can write. `argv[0]` becomes its path.
fn check_program(
    first: &str,
    argv: &mut [String],
    policy_dir: &Path,
    writable: &[(PathBuf, Origin)],
    path_env: Option<&str>,
) -> Result<(), String> {
    let program = if first.contains('/') {
        Some(policy_dir.join(first))
    } else {
        path_env.and_then(|p| on_path(first, p))
    };
    if let Some(prog) = &program {
        if let Some(w) = reached(prog, writable) {
            return Err(format!(
                "its program {} lies in {}, which the run can write",
                prog.display(),
                place(w)
            ));
        }
        if let Some(interp) = shebang(prog) {
            if let Some(w) = reached(&interp, writable) {
                return Err(format!(
                    "its program's #! interpreter {} lies in {}, which the run can write",
                    interp.display(),
                    place(w)
                ));
            }
        }
        argv[0] = lexical(prog).to_string_lossy().into_owned();
    }
    Ok(())
}

/// Arguments that name a path (a script, a module directory, a `--opt=PATH`
/// value, a dotted module after -m): not where the run can write.
fn check_arguments(
    argv: &[String],
    policy_dir: &Path,
    writable: &[(PathBuf, Origin)],
) -> Result<(), String> {
    // `--opt=PATH` value, a dotted module after -m).
    let mut prev_m = false;
    for arg in argv.iter().skip(1) {
        let mut candidates = vec![arg.clone()];
        if let Some((_, v)) = arg.strip_prefix('-').and_then(|a| a.split_once('=')) {
            candidates.push(v.to_string());
        }
        if prev_m {
            candidates.push(arg.replace('.', "/"));
        }
        prev_m = arg == "-m";
        for c in candidates.iter().filter(|c| !c.is_empty()) {
            let p = policy_dir.join(c);
            if let Some(w) = reached(&p, writable) {
                return Err(format!(
                    "its argument `{arg}` ({}) lies in {}, which the run can write",
                    lexical(&p).display(),
                    place(w)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Tool;

    fn one(command: &[&str], policy: Option<&str>) -> Option<Tools> {
        Some(Tools {
            max_calls: 1,
            allow: vec![Tool {
                name: "t".into(),
                command: Some(command.iter().map(|s| s.to_string()).collect()),
                policy: policy.map(str::to_string),
                timeout_seconds: 1.0,
                ..Default::default()
            }],
        })
    }

    #[test]
    fn each_way_into_a_writable_place_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let out = root.join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&out, root.join("link")).unwrap();
        let w = vec![(out.clone(), Origin::Tmp)];
        let why = |c: &[&str], p: Option<&str>, dir: &Path| {
            check(&mut one(c, p), dir, &w, Some("/usr/bin:/bin"), None).map_err(|r| r.why)
        };
        assert!(why(&["./out/x"], None, &root)
            .unwrap_err()
            .starts_with("its program"));
        assert!(why(&["sh", "out/x.sh"], None, &root)
            .unwrap_err()
            .starts_with("its argument"));
        assert!(why(&["sh", "link/x.sh"], None, &root)
            .unwrap_err()
            .starts_with("its argument"));
        assert!(why(&["sh", "./a/../out"], None, &root)
            .unwrap_err()
            .starts_with("its argument"));
        assert!(why(&["py", "--conf=out/c"], None, &root)
            .unwrap_err()
            .starts_with("its argument"));
        assert!(why(&["python3", "-m", "out.mod"], None, &root)
            .unwrap_err()
            .starts_with("its argument"));
        assert!(why(&["sh"], Some("out/p.yaml"), &root)
            .unwrap_err()
            .starts_with("its policy"));
        assert!(why(&["sh"], None, &out)
            .unwrap_err()
            .starts_with("its working directory"));
        // Out of reach: fine, and a bare name is made absolute.
        let mut t = one(&["sh", "-c", "echo out/x"], None);
        let path = format!("/usr/bin:/bin:{}", out.display());
        let e = check(&mut t.clone(), &root, &w, Some(&path), None).unwrap_err();
        assert!(e.why.starts_with("the PATH it inherits"), "{e}");
        let e = check(
            &mut t.clone(),
            &root,
            &w,
            Some("/usr/bin"),
            Some(&out.join("h")),
        )
        .unwrap_err();
        assert!(e.why.starts_with("the HOME it inherits"), "{e}");
        // A write grant on a per-user dot directory of that HOME: Python's
        // user site (~/.local/lib/pythonX.Y/site-packages/*.pth runs at every
        // start), git's ~/.config/git/config, ~/.npmrc...
        let home = root.join("h");
        for dot in [".local", ".config/git", ".npmrc"] {
            let wd = vec![(home.join(dot), Origin::Tmp)];
            let e = check(&mut t.clone(), &root, &wd, Some("/usr/bin"), Some(&home)).unwrap_err();
            assert!(e.why.contains("per-user files"), "{dot}: {e}");
        }
        let wd = vec![(home.join("project"), Origin::Tmp)];
        check(&mut t.clone(), &root, &wd, Some("/usr/bin"), Some(&home)).unwrap();
        // A write grant on what a tool loads from its working directory by
        // itself: Python's bytecode cache beside `python3 tool.py`, git's
        // hooks, node_modules, a Makefile; through a link to it too.
        std::fs::create_dir(root.join(".git")).unwrap();
        std::os::unix::fs::symlink(&root, dir.path().join("proj")).unwrap();
        for entry in [
            "__pycache__",
            ".git/hooks",
            "node_modules/x",
            "Makefile",
            ".venv",
        ] {
            let wd = vec![(root.join(entry), Origin::Tmp)];
            for cwd in [root.clone(), dir.path().join("proj")] {
                let e = check(
                    &mut one(&["python3", "tool.py"], None),
                    &cwd,
                    &wd,
                    Some("/usr/bin"),
                    None,
                )
                .unwrap_err();
                assert!(e.why.contains("tools load such entries"), "{entry}: {e}");
            }
        }
        // An output directory beside the tool is not such an entry.
        check(
            &mut one(&["python3", "tool.py"], None),
            &root,
            &w,
            Some("/usr/bin"),
            None,
        )
        .unwrap();
        check(&mut t, &root, &w, Some("/usr/bin:/bin"), None).unwrap();
        let argv0 = t.unwrap().allow[0].command.clone().unwrap()[0].clone();
        assert!(argv0.starts_with('/') && argv0.ends_with("/sh"), "{argv0}");
    }
}

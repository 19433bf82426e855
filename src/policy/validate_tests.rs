//! Tests of the fail-closed rules, one per error class, on real files.

use std::path::{Path, PathBuf};

use super::*;
use crate::policy::load_file;
use crate::policy::resolve::{resolve_fs, resolve_one};

struct Dir {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

fn dir() -> Dir {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("data/secrets")).unwrap();
    std::fs::create_dir_all(root.join("out")).unwrap();
    Dir { _tmp: tmp, root }
}

/// Load, resolve and validate `text` written as `agent.yaml` in `d`.
fn check_in(d: &Dir, text: &str) -> Result<(), String> {
    let path = d.root.join("agent.yaml");
    std::fs::write(&path, text).unwrap();
    let lp = load_file(&path).map_err(|e| e.to_string())?;
    let fs = resolve_fs(&lp, Path::new("/nonexistent")).map_err(|e| e.to_string())?;
    validate(&lp, &fs).map_err(|e| e.to_string())
}

fn check(text: &str) -> Result<(), String> {
    check_in(&dir(), text)
}

fn fails(text: &str) -> String {
    let e = check(text).unwrap_err();
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn contract_shaped_policy_is_valid() {
    let d = dir();
    std::fs::create_dir_all(d.root.join("tools")).unwrap();
    std::fs::write(d.root.join("tools/search.yaml"), "version: 1\n").unwrap();
    let text = "\
version: 1
filesystem:
  read: [./data]
  write: [./out]
  exec: [/usr/bin/env]
  deny: [./data/secrets]
network:
  mode: proxy
  allow_hosts: [\"api.github.com\", \"*.pythonhosted.org\"]
env:
  pass: [LANG, TERM, TZ]
  set: {PYTHONUNBUFFERED: \"1\"}
limits: {timeout_seconds: 0.5, memory_mb: 512, max_processes: 64}
tools:
  allow:
    - name: search
      command: [/usr/bin/python3, tools/search.py]
      policy: tools/search.yaml
    - name: lookup
      forward: true
llm_access: {enabled: true, max_calls: 3, allowed_models: []}
";
    check_in(&d, text).unwrap();
}

#[test]
fn proxy_without_hosts_says_unrestricted_is_explicit() {
    let e = fails("version: 1\nnetwork:\n  mode: proxy\n");
    assert!(
        e.starts_with("agent.yaml") || e.contains("/agent.yaml:"),
        "{e}"
    );
    assert!(
        e.contains(":2:") && e.contains("network.allow_hosts: "),
        "{e}"
    );
    assert!(e.contains("mode: unrestricted"), "{e}");
    check("version: 1\nnetwork: {mode: unrestricted}\n").unwrap();
    check("version: 1\nnetwork: {mode: none}\n").unwrap();
}

#[test]
fn bad_allow_host_names_the_entry() {
    let e = fails(
        "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts:\n    - ok.example.com\n    - \"*\"\n",
    );
    assert!(
        e.contains("agent.yaml:6:7: network.allow_hosts[1]: "),
        "{e}"
    );
    assert!(e.contains("mode: unrestricted"), "{e}");
    let e = fails("version: 1\nnetwork: {mode: proxy, allow_hosts: [\"*.com\"]}\n");
    assert!(e.contains("network.allow_hosts[0]"), "{e}");
}

#[test]
fn max_connections_bounds() {
    let base = "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts: [api.example.com]\n";
    check(&format!("{base}  max_connections: 1\n")).unwrap();
    check(&format!("{base}  max_connections: 4096\n")).unwrap();
    for bad in ["0", "4097"] {
        let e = fails(&format!("{base}  max_connections: {bad}\n"));
        assert!(
            e.contains("agent.yaml:5:") && e.contains("network.max_connections: must be 1..=4096"),
            "{e}"
        );
    }
    let e = check(&format!("{base}  max_connections: -1\n")).unwrap_err();
    assert!(e.contains("network.max_connections"), "{e}");
    let p = crate::policy::parse::parse_str(base, "agent.yaml", Some(false)).unwrap();
    assert_eq!(p.network.max_connections(), 256);
}

#[test]
fn forbidden_write_and_exec_grants() {
    for dir in ["/", "/etc", "/proc", "/sys", "/dev", "/usr", "/boot"] {
        if !Path::new(dir).exists() {
            continue;
        }
        for kind in ["write", "exec"] {
            let e = fails(&format!("version: 1\nfilesystem:\n  {kind}: [{dir}]\n"));
            assert!(
                e.contains(":3:")
                    && e.contains(&format!(
                        "filesystem.{kind}[0]: `{kind}` grant of {dir} is refused"
                    )),
                "{e}"
            );
        }
    }
    fails("version: 1\nfilesystem:\n  read: [/proc]\n");
    fails("version: 1\nfilesystem:\n  read: [/sys]\n");
    // Beneath: /proc and /sys never writable; per-process /proc never readable.
    fails("version: 1\nfilesystem:\n  write: [/proc/self/attr]\n");
    fails("version: 1\nfilesystem:\n  write: [/sys/kernel]\n");
    let e = fails("version: 1\nfilesystem:\n  read: [/proc/self]\n");
    // As root no link is followed at all (see `resolve::follow`).
    assert!(
        e.contains("per-process") || e.contains("symbolic link /proc/self"),
        "{e}"
    );
    fails("version: 1\nfilesystem:\n  read: [/proc/1]\n");
    check("version: 1\nfilesystem:\n  read: [/proc/cpuinfo, /etc, /usr]\n").unwrap();
    check("version: 1\nfilesystem:\n  exec: [/usr/bin]\n").unwrap();
}

#[test]
fn forbidden_grants_are_caught_through_dotdot_and_symlinks() {
    let d = dir();
    std::os::unix::fs::symlink("/etc", d.root.join("conf")).unwrap();
    std::os::unix::fs::symlink("/", d.root.join("rootlink")).unwrap();
    // A link in a directory this user can write is refused before anything
    // else (a run may have planted it: `resolve::follow`).
    let e = check_in(&d, "version: 1\nfilesystem:\n  write: [./conf]\n").unwrap_err();
    assert!(
        e.contains("filesystem.write[0]: `./conf`") && e.contains("symbolic link"),
        "{e}"
    );
    let e = check_in(&d, "version: 1\nfilesystem:\n  read: [./rootlink/proc]\n").unwrap_err();
    assert!(e.contains("symbolic link"), "{e}");
    let e = check_in(&d, "version: 1\nfilesystem:\n  exec: [/usr/../usr]\n").unwrap_err();
    assert!(e.contains("grant of /usr is refused"), "{e}");
    let e = check_in(&d, "version: 1\nfilesystem:\n  write: [/etc/../etc]\n").unwrap_err();
    assert!(e.contains("grant of /etc is refused"), "{e}");
}

#[test]
fn check_grant_is_reusable_for_cli_grants() {
    let r = resolve_one(
        "/etc/..",
        Path::new("/"),
        Path::new("/h"),
        "--allow-write",
        false,
    )
    .unwrap()
    .unwrap();
    assert_eq!(r.path, Path::new("/"));
    assert!(check_grant(&r.path, GrantKind::Write).is_err());
    assert!(check_grant(&r.path, GrantKind::Read).is_ok());
    assert!(check_grant(Path::new("/sys"), GrantKind::Read).is_err());
    assert!(check_grant(Path::new("/etc/hostname"), GrantKind::Write).is_ok());
}

#[test]
fn deny_outside_every_grant_is_an_error() {
    let e = fails("version: 1\nfilesystem:\n  read: [./out]\n  deny: [./data/secrets]\n");
    assert!(
        e.contains(":4:") && e.contains("filesystem.deny[0]: deny "),
        "{e}"
    );
    assert!(
        e.contains("not beneath any read, write or exec grant"),
        "{e}"
    );
    check("version: 1\nfilesystem:\n  read: [./data]\n  deny: [./data/secrets]\n").unwrap();
    check("version: 1\nfilesystem:\n  write: [./data/secrets]\n  deny: [./data/secrets]\n")
        .unwrap();
    // A deny that does not exist must be marked optional.
    let e = fails("version: 1\nfilesystem:\n  read: [./data]\n  deny: [./data/nope]\n");
    assert!(
        e.contains("filesystem.deny[0]") && e.contains("does not exist"),
        "{e}"
    );
    check("version: 1\nfilesystem:\n  read: [./data]\n  deny: [./data/nope?]\n").unwrap();
}

#[test]
fn refused_env_names() {
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "NODE_OPTIONS",
        "BASH_ENV",
        "ENV",
        "_JAVA_OPTIONS",
        "DOTNET_STARTUP_HOOKS",
    ] {
        assert!(is_refused_env(name), "{name}");
    }
    for name in [
        "LANG",
        "PATH",
        "PYTHONUNBUFFERED",
        "ENVIRONMENT",
        "OLD_PRELOAD",
    ] {
        assert!(!is_refused_env(name), "{name}");
    }
    let e = fails("version: 1\nenv:\n  pass: [LANG, LD_PRELOAD]\n");
    assert!(
        e.contains("agent.yaml:3:") && e.contains("env.pass[1]: `LD_PRELOAD` is refused"),
        "{e}"
    );
    let e = fails("version: 1\nenv:\n  set:\n    PYTHONPATH: tmp\n");
    assert!(
        e.contains("agent.yaml:4:5: env.set.PYTHONPATH: `PYTHONPATH` is refused"),
        "{e}"
    );
    let e = fails("version: 1\nenv:\n  set: {\"A=B\": x}\n");
    assert!(e.contains("not a valid variable name"), "{e}");
    fails("version: 1\nenv:\n  pass: [\"\"]\n");
}

#[test]
fn limits_must_be_positive_and_finite() {
    let e = fails("version: 1\nlimits:\n  timeout_seconds: 0\n");
    assert!(
        e.contains("agent.yaml:3:3: limits.timeout_seconds: must be"),
        "{e}"
    );
    fails("version: 1\nlimits:\n  timeout_seconds: -1\n");
    fails("version: 1\nlimits:\n  timeout_seconds: .inf\n");
    fails("version: 1\nlimits:\n  timeout_seconds: .nan\n");
    fails("version: 1\nlimits:\n  timeout_seconds: 1e300\n");
    fails("version: 1\nlimits: {max_output_bytes: 0}\n");
    fails("version: 1\nlimits: {memory_mb: 0}\n");
    fails("version: 1\nlimits: {memory_mb: 18446744073709551615}\n");
    fails("version: 1\nlimits: {max_processes: 0}\n");
    check("version: 1\nlimits: {timeout_seconds: 0.01, cpu_seconds: 1}\n").unwrap();
}

#[test]
fn bad_tools() {
    let t = |body: &str| fails(&format!("version: 1\ntools:\n  allow:\n{body}"));
    let e = t("    - name: a\n");
    assert!(e.contains("tools.allow[0]: a tool needs `command"), "{e}");
    let e = t("    - name: a\n      forward: true\n      command: [x]\n");
    assert!(e.contains("not both"), "{e}");
    let e = t("    - name: a\n      command: []\n");
    assert!(
        e.contains("tools.allow[0].command: must be a non-empty argv"),
        "{e}"
    );
    let e = t("    - name: a b\n      forward: true\n");
    assert!(
        e.contains("agent.yaml:4:") && e.contains("tools.allow[0].name"),
        "{e}"
    );
    let e = t("    - name: a\n      forward: true\n    - name: a\n      forward: true\n");
    assert!(
        e.contains("agent.yaml:6:") && e.contains("listed twice"),
        "{e}"
    );
    let e = t("    - name: a\n      forward: true\n      policy: x.yaml\n");
    assert!(
        e.contains("tools.allow[0].policy: `policy` applies to a host `command` only"),
        "{e}"
    );
    let e = t("    - name: a\n      command: [x]\n      policy: missing.yaml\n");
    assert!(e.contains("does not exist"), "{e}");
    let e = t("    - name: a\n      command: [x]\n      timeout_seconds: 0\n");
    assert!(e.contains("tools.allow[0].timeout_seconds"), "{e}");
    let e = t(&format!(
        "    - name: {}\n      forward: true\n",
        "x".repeat(65)
    ));
    assert!(e.contains("1-64"), "{e}");
    fails("version: 1\ntools:\n  max_calls: 0\n");
}

#[test]
fn llm_caps_must_be_positive() {
    let e = fails("version: 1\nllm_access:\n  enabled: true\n  max_calls: 0\n");
    assert!(
        e.contains("agent.yaml:4:3: llm_access.max_calls: must be > 0"),
        "{e}"
    );
    fails("version: 1\nllm_access: {max_input_chars: 0}\n");
    fails("version: 1\nllm_access: {allowed_models: [\"\"]}\n");
    check("version: 1\nllm_access: {enabled: false}\n").unwrap();
}

/// Files that stay unreadable even beneath a broad grant, unless a grant
/// names them exactly. The one list lives in [`crate::plan::credentials`];
/// patterns (`.cargo/credentials*`) are returned as written.
fn credential_paths(home: &Path) -> Vec<PathBuf> {
    crate::plan::credentials::patterns(home, &[])
        .into_iter()
        .map(|l| l.path)
        .collect()
}

#[test]
fn credential_paths_cover_the_contract_list() {
    let home = Path::new("/home/u");
    let v = credential_paths(home);
    for p in [
        ".ssh",
        ".aws",
        ".gnupg",
        ".config/gcloud",
        ".kube",
        ".netrc",
        ".docker",
        ".config/capsule",
    ] {
        assert!(v.contains(&home.join(p)), "{p}");
    }
    let state = match std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d.join("capsule"),
        _ => home.join(".local/state/capsule"),
    };
    assert!(v.contains(&state));
}

#[test]
fn git_rules_check() {
    let head = "version: 1\nnetwork:\n  mode: proxy\n  allow_hosts:\n    - host: git.example.com\n";
    let ok = format!("{head}      git:\n        fetch: [\"acme/*\", \"**\"]\n        push: {{repos: [acme/widget], branches: [\"agent/*\"], tags: [], delete: false}}\n");
    check(&ok).unwrap();
    for (bad, says) in [
        ("      git: {fetch: [acme/widget.git]}\n", "git.fetch"),
        ("      git: {fetch: [/acme/widget]}\n", "git.fetch"),
        (
            "      git: {push: {repos: [], branches: [x]}}\n",
            "git.push.repos",
        ),
        (
            "      git: {push: {repos: [a/b], branches: [refs/heads/x]}}\n",
            "git.push.branches",
        ),
        (
            "      git: {push: {repos: [a/b], tags: [\"v 1\"]}}\n",
            "git.push.tags",
        ),
        (
            "      git: {push: {repos: [a/b], branches: [\"a**\"]}}\n",
            "git.push.branches",
        ),
        (
            "      methods: [GET]\n      git: {fetch: [a/b]}\n",
            "network.allow_hosts[0].git",
        ),
        ("      git: {fetch: [a/b], pull: [a/b]}\n", "pull"),
    ] {
        let e = fails(&format!("{head}{bad}"));
        assert!(e.contains(says), "{bad}: {e}");
    }
}

//! The first hour of a new user (issue 25): what `capsule exec` does with
//! the current directory, and the messages a user sees when something is
//! cut, refused or mistyped. Every test runs the real binary and checks the
//! words on stderr.

mod common;

use common::*;

/// A project directory: a script, an executable, nothing else.
fn project(sb: &Sandbox) -> std::path::PathBuf {
    let proj = sb.mkdir("proj");
    sb.write("proj/agent.py", "print('agent ran')\n");
    sb.write_exec("proj/run.sh", "#!/bin/sh\necho run.sh ran\n");
    proj
}

#[test]
fn without_a_policy_the_current_directory_is_read_only_and_the_cwd() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    let run = sb.run_in(&["exec", "--", "python3", "agent.py"], &proj, b"");
    run.assert_code(0);
    assert_eq!(run.stdout, "agent ran\n", "{}", run.ctx());
    assert!(!run.stderr.contains("note:"), "{}", run.ctx());

    let run = sb.run_in(&["exec", "--", "./run.sh"], &proj, b"");
    run.assert_code(0);
    assert_eq!(run.stdout, "run.sh ran\n", "{}", run.ctx());

    // Read-only: a write fails where the user sees it, and nothing appears.
    let run = sb.run_in(
        &["exec", "--", "/bin/sh", "-c", "echo x > here.txt"],
        &proj,
        b"",
    );
    assert_ne!(run.code, Some(0), "{}", run.ctx());
    assert!(
        run.stderr.contains("Read-only file system") || run.stderr.contains("Permission denied"),
        "{}",
        run.ctx()
    );
    assert!(!proj.join("here.txt").exists());

    // --dry-run says where the grant comes from.
    let run = sb.run_in(&["exec", "--dry-run", "--", "true"], &proj, b"");
    run.assert_code(0);
    assert!(
        run.stdout.contains(&format!(
            "{}  — command line --allow-read . (implied: no --policy)",
            proj.display()
        )),
        "{}",
        run.ctx()
    );
}

#[test]
fn the_home_directory_is_not_granted_and_the_run_says_so() {
    let sb = Sandbox::new();
    sb.write_exec("home/run.sh", "#!/bin/sh\necho ran\n");
    let run = sb.run_in(&["exec", "--", "/bin/pwd"], &sb.home, b"");
    run.assert_code(0);
    assert!(
        run.stderr.contains(&format!(
            "capsule: note: the current directory {} is not granted to the run (it is your home directory)",
            sb.home.display()
        )) && run.stderr.contains("--allow-read ."),
        "{}",
        run.ctx()
    );
    // A relative command names the real cause, not PATH.
    let run = sb.run_in(&["exec", "--", "./run.sh"], &sb.home, b"");
    run.assert_code(127);
    assert!(
        run.stderr
            .contains("command not found: ./run.sh: no such file")
            && run
                .stderr
                .contains("is not granted, because it is your home directory")
            && !run.stderr.contains("searched PATH"),
        "{}",
        run.ctx()
    );
    // A shared, world-writable directory is not granted either.
    let shared = sb.mkdir("shared");
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .expect("chmod");
    let run = sb.run_in(&["exec", "--", "/bin/true"], &shared, b"");
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("(it is a world-writable directory, shared with other users and programs)"),
        "{}",
        run.ctx()
    );
    // --json callers get no note on stderr (the plan is in --dry-run).
    let run = sb.run_in(&["exec", "--json", "--", "/bin/true"], &sb.home, b"");
    run.assert_code(0);
    assert!(!run.stderr.contains("note:"), "{}", run.ctx());
}

#[test]
fn a_policy_that_does_not_grant_the_cwd_says_where_its_paths_resolve() {
    let sb = Sandbox::new();
    let proj = project(&sb);
    sb.mkdir("conf");
    let pol = sb.policy_named(
        "conf/agent.yaml",
        "version: 1\nfilesystem:\n  read: [\".\"]\n  write: [\"./out?\"]\n",
    );
    let run = sb.run_in(&["exec", "-p", &pol, "--", "/bin/true"], &proj, b"");
    run.assert_code(0);
    assert!(
        run.stderr.contains(&format!(
            "the current directory {} is not granted to the run ({pol} does not grant it; its relative paths \
             resolve against {}, not the current directory)",
            proj.display(),
            sb.path("conf").display()
        )),
        "{}",
        run.ctx()
    );
    // check shows the skipped optional grant.
    let run = sb.run_in(&["check", "-p", &pol], &proj, b"");
    run.assert_code(0);
    assert!(
        run.stdout.contains(&format!(
            "note      filesystem.write[0] `./out?` ({}) does not exist: skipped (not granted: create it before the run to grant it)",
            sb.path("conf/out").display()
        )),
        "{}",
        run.ctx()
    );
}

#[test]
fn a_missing_absolute_command_is_not_searched_on_path() {
    let sb = Sandbox::new();
    let run = sb.run(&["exec", "--", "/nope/x"]);
    run.assert_code(127);
    assert!(
        run.stderr
            .contains("capsule: command not found: /nope/x: no such file\n"),
        "{}",
        run.ctx()
    );
}

#[test]
fn output_cut_at_the_byte_limit_is_said_at_the_end() {
    let sb = Sandbox::new();
    let run = sb.run(&[
        "exec",
        "--max-output",
        "10",
        "--",
        "/bin/sh",
        "-c",
        "seq 1 100",
    ]);
    // The command's own status: it did exit 0.
    run.assert_code(0);
    assert!(run.stdout.ends_with(MARKER), "{}", run.ctx());
    assert!(
        run.stderr.contains(
            "capsule: stdout was cut at the byte limit: 10 of 292 bytes written, 282 dropped \
             (raise it with --max-output BYTES or limits.max_output_bytes)"
        ),
        "{}",
        run.ctx()
    );
    let run = sb.run(&["exec", "--", "/bin/sh", "-c", "seq 1 100"]);
    assert!(!run.stderr.contains("cut at"), "{}", run.ctx());
}

#[test]
fn what_the_proxy_refused_is_said_at_the_end_of_a_streaming_run() {
    let sb = Sandbox::new();
    // The proxy refuses the host by name: nothing leaves the machine.
    let code = "import urllib.request\ntry:\n    urllib.request.urlopen('http://denied.invalid/', timeout=20)\nexcept Exception as e:\n    print('child:', e)\n";
    let run = sb.run(&[
        "exec",
        "--net",
        "proxy",
        "--allow-host",
        "allowed.invalid",
        "--",
        "python3",
        "-c",
        code,
    ]);
    run.assert_code(0);
    assert!(run.stdout.contains("403"), "{}", run.ctx());
    assert!(
        run.stderr.contains(
            "capsule: the sandbox refused 1 proxy connection(s) to hosts not in allow_hosts (denied.invalid; \
             allow one with --allow-host HOST) during this run"
        ) && run.stderr.contains("--explain"),
        "{}",
        run.ctx()
    );
    let run = sb.run(&["exec", "--", "/bin/true"]);
    assert!(!run.stderr.contains("refused"), "{}", run.ctx());
}

#[test]
fn errors_point_the_right_way() {
    let sb = Sandbox::new();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["exec".into(), "--allow-read".into(), sb.p("nope"), "--".into(), "true".into()],
            format!("capsule: --allow-read {}: does not exist; create it first\n", sb.p("nope")),
        ),
        (
            vec!["exec".into(), "--net".into(), "proxy".into(), "--".into(), "true".into()],
            "capsule: --net proxy: name the hosts the command may reach with --allow-host HOST".into(),
        ),
        (
            vec!["exec".into(), "-p".into(), sb.p("missing.yaml"), "--".into(), "true".into()],
            "(write a starter policy with `capsule policy init NAME > FILE`, NAME one of: python-agent, ci-build, read-only-review)".into(),
        ),
        (
            vec!["exec".into(), "--workspace".into(), sb.p("typo/ws"), "--".into(), "true".into()],
            format!("capsule: --workspace {}: {} does not exist", sb.p("typo/ws"), sb.p("typo")),
        ),
    ];
    for (args, want) in cases {
        let run = sb.run(&args);
        run.assert_code(125);
        assert!(run.stderr.contains(&want), "want {want:?}{}", run.ctx());
        assert!(!run.stderr.contains("nope?"), "{}", run.ctx());
    }
    assert!(
        !sb.path("typo").exists(),
        "--workspace created the typo'd path"
    );

    // A YAML bracket left open: the error names the line it was opened on.
    let pol = sb
        .policy("version: 1\nfilesystem:\n  read: [\".\",\n  write: []\nnetwork:\n  mode: none\n");
    let run = sb.run(&["check", "-p", &pol]);
    run.assert_code(125);
    assert!(
        run.stderr
            .contains("(the `[` opened on line 3 is not closed"),
        "{}",
        run.ctx()
    );
    // `key:value` without the space.
    let pol = sb.policy("version: 1\nfilesystem:\n  read:[\".\"]\n");
    let run = sb.run(&["check", "-p", &pol]);
    run.assert_code(125);
    assert!(
        run.stderr.contains(
            ":3:3: filesystem: expected a mapping of key: value (a space is missing after `read:`"
        ),
        "{}",
        run.ctx()
    );
}

#[test]
fn check_says_when_allow_hosts_does_nothing() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nnetwork:\n  mode: none\n  allow_hosts: [api.github.com]\n");
    let run = sb.run(&["check", "-p", &pol]);
    run.assert_code(0);
    assert!(
        run.stdout.contains(
            "note      network.allow_hosts (api.github.com) does nothing under network.mode none: the run has no network at all"
        ),
        "{}",
        run.ctx()
    );
    // exec says it too, on stderr.
    let run = sb.run(&["exec", "-p", &pol, "--", "/bin/true"]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("network.allow_hosts (api.github.com) does nothing"),
        "{}",
        run.ctx()
    );
}

#[test]
fn env_flags_set_and_pass_under_the_policy_refusals() {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_T_HOSTVAR", "from-host");
    sb.set_env("LD_PRELOAD", "");
    let run = sb.run(&[
        "exec",
        "-e",
        "CARGO_HOME=/opt/cargo",
        "--env",
        "CAPSULE_T_HOSTVAR",
        "-e",
        "CAPSULE_T_UNSET",
        "-e",
        "EQ=a=b",
        "--",
        "/usr/bin/env",
    ]);
    run.assert_code(0);
    for want in [
        "CARGO_HOME=/opt/cargo\n",
        "CAPSULE_T_HOSTVAR=from-host\n",
        "EQ=a=b\n",
    ] {
        assert!(run.stdout.contains(want), "{want}{}", run.ctx());
    }
    assert!(!run.stdout.contains("CAPSULE_T_UNSET"), "{}", run.ctx());
    // The refusals of env.set / env.pass, naming the flag.
    for (arg, want) in [
        (
            "LD_PRELOAD=/x.so",
            "env.set.LD_PRELOAD: `LD_PRELOAD` is refused",
        ),
        ("LD_PRELOAD", "env.pass[0]: `LD_PRELOAD` is refused"),
        ("PYTHONPATH=/tmp", "module search paths must be read-only"),
    ] {
        let run = sb.run(&["exec", "-e", arg, "--", "/bin/true"]);
        run.assert_code(125);
        assert!(
            run.stderr.contains(want) && run.stderr.contains("(given with -e "),
            "{want}{}",
            run.ctx()
        );
    }
    let run = sb.run(&["exec", "-e", "1A=b", "--", "/bin/true"]);
    run.assert_code(125);
    assert!(
        run.stderr.contains("-e 1A=b: expected KEY=VALUE or KEY"),
        "{}",
        run.ctx()
    );
}

#[test]
fn the_man_page_has_the_sections_a_user_expects_and_names_only_shipped_pages() {
    let sb = Sandbox::new();
    let run = sb.run(&["man"]);
    run.assert_code(0);
    for want in [
        ".SH EXAMPLES",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH \"SEE ALSO\"",
    ] {
        assert!(run.stdout.contains(want), "{want}{}", run.ctx());
    }
    let dir = sb.path("man1");
    let run = sb.run(&["man", "--dir", &sb.p("man1")]);
    run.assert_code(0);
    let pages: Vec<String> = std::fs::read_dir(&dir)
        .expect("man dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        pages.contains(&"capsule.1".to_string()) && pages.contains(&"capsule-exec.1".to_string())
    );
    // Every capsule page a page names is shipped beside it (no capsule-help(1)).
    let re = regex_lite_refs();
    for p in &pages {
        let text = std::fs::read_to_string(dir.join(p)).expect("read page");
        for name in re(&text) {
            assert!(
                pages.contains(&format!("{name}.1")),
                "{p} names {name}(1), which is not shipped"
            );
        }
    }
    let exec = std::fs::read_to_string(dir.join("capsule-exec.1")).expect("exec page");
    assert!(
        exec.contains(".SH \"EXIT STATUS\""),
        "capsule-exec.1 has no EXIT STATUS"
    );
}

/// The `capsule-…` names referenced as `NAME(1)` in a roff page (with `\-`).
fn regex_lite_refs() -> impl Fn(&str) -> Vec<String> {
    |text: &str| {
        let t = text
            .replace("\\-", "-")
            .replace("\\fB", "")
            .replace("\\fR", "");
        let mut out = Vec::new();
        for (i, _) in t.match_indices("(1)") {
            let start = t[..i]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(0, |s| s + 1);
            let name = &t[start..i];
            if name.starts_with("capsule") {
                out.push(name.to_string());
            }
        }
        out
    }
}

#[test]
fn completions_offer_net_modes_starter_policies_and_volume_names() {
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    let run = sb.run(&["completions", "bash"]);
    run.assert_code(0);
    assert!(
        run.stdout.contains("\"none proxy unrestricted\""),
        "{}",
        run.ctx()
    );
    assert!(
        run.stdout
            .contains("python-agent ci-build read-only-review"),
        "{}",
        run.ctx()
    );
    sb.run(&["volume", "create", "cache-one"]).assert_code(0);
    let script = sb.write("capsule.bash", &run.stdout);
    // bash itself completes `capsule volume rm <TAB>`.
    let probe = format!(
        "source {}; COMP_WORDS=(capsule volume rm ''); COMP_CWORD=3; _capsule_volumes; echo \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "-c", &probe])
        .env("XDG_DATA_HOME", &data)
        .output()
        .expect("bash");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "cache-one",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = sb.run(&["completions", "fish"]);
    assert!(run.stdout.contains("capsule/volumes"), "{}", run.ctx());

    // zsh: the NAME arguments of volume inspect|rm|remove complete from the volumes.
    let run = sb.run(&["completions", "zsh"]);
    run.assert_code(0);
    assert_eq!(
        run.stdout
            .matches("'*::names:_capsule_volume_names'")
            .count(),
        3,
        "{}",
        run.ctx()
    );
    let zscript = sb.write("_capsule", &run.stdout);
    if std::process::Command::new("zsh")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("no zsh here (.ci/run installs it): the zsh volume-name function is not run");
        return;
    }
    let probe = format!(
        "compdef() {{ :; }}; source {}; compadd() {{ print -l -- ${{(P)2}}; }}; _capsule_volume_names",
        zscript.display()
    );
    let out = std::process::Command::new("zsh")
        .args(["-f", "-c", &probe])
        .env("XDG_DATA_HOME", &data)
        .output()
        .expect("zsh");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "cache-one",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_unprivileged_user_is_not_shown_root_only_details() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nlimits:\n  max_processes: 64\n");
    let run = sb.run(&["exec", "--dry-run", "-p", &pol, "--", "/bin/true"]);
    run.assert_code(0);
    let line = run
        .stdout
        .lines()
        .find(|l| l.contains("max_processes 64"))
        .unwrap_or_default()
        .to_string();
    if is_root() {
        assert!(line.contains("process guard"), "{}", run.ctx());
    } else {
        assert!(
            line.contains("else RLIMIT_NPROC")
                && !line.contains("root")
                && !line.contains("process guard"),
            "{}",
            run.ctx()
        );
        let run = sb.run(&["doctor"]);
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        // This test's own cgroup is the one capsule sits in: the line says
        // whose it is when it is not this user's.
        if !own.is_empty() && run.stdout.contains("cgroup v2 at") {
            let delegated = run.stdout.contains("a Delegate=yes cgroup");
            assert!(
                delegated || run.stdout.contains("none is delegated to this user"),
                "{}",
                run.ctx()
            );
        }
    }
}

/// The READMEs and docs stand alone in a clone: no link or path reference
/// leaves the repository (the design notes outside it are not in a clone),
/// and every relative link names a file the repository has.
#[test]
fn the_docs_send_users_only_to_files_a_clone_has() {
    let docs: &[(&str, &str)] = &[
        ("README.md", include_str!("../README.md")),
        (
            "integration/python/README.md",
            include_str!("../integration/python/README.md"),
        ),
        ("docs/policy.md", include_str!("../docs/policy.md")),
        ("docs/guards.md", include_str!("../docs/guards.md")),
        ("docs/kernels.md", include_str!("../docs/kernels.md")),
        ("docs/signals.md", include_str!("../docs/signals.md")),
    ];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readable = root.join("README.md").is_file();
    if !readable {
        skip_part("the checkout is not readable by this user: links are checked for leaving the repository, not for existing");
    }
    for (name, text) in docs {
        assert!(
            !text.contains("../shared"),
            "{name} points outside the repository (../shared)"
        );
        let dir = root.join(name).parent().expect("dir").to_path_buf();
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let target = &rest[..rest.find(')').unwrap_or(0)];
            let target = target.split('#').next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let path = dir.join(target);
            let normal: std::path::PathBuf =
                path.components()
                    .fold(std::path::PathBuf::new(), |mut p, c| {
                        match c {
                            std::path::Component::ParentDir => {
                                p.pop();
                            }
                            std::path::Component::CurDir => {}
                            c => p.push(c),
                        }
                        p
                    });
            assert!(
                normal.starts_with(root),
                "{name}: the link {target} leaves the repository"
            );
            if readable {
                assert!(
                    normal.exists(),
                    "{name}: the link {target} names no file of the repository"
                );
            }
        }
    }
}

#[test]
fn a_refused_tool_call_is_said_at_the_end_of_a_streaming_run() {
    let sb = Sandbox::new();
    let bin = capsule_bin().to_string_lossy().into_owned();
    let run = sb.run(&[
        "exec",
        "--allow-exec",
        &bin,
        "--",
        &bin,
        "rpc",
        "tools/call",
        r#"{"name":"nope","arguments":{}}"#,
    ]);
    // The program itself sees the refusal (capsule rpc prints it on stderr).
    assert!(
        run.stderr.contains("\"reason\":\"not_allowed\""),
        "{}",
        run.ctx()
    );
    assert!(
        run.stderr.contains(
            "capsule: the sandbox refused 1 tool call(s) (not_allowed: 1) during this run; `--json` has the details"
        ),
        "{}",
        run.ctx()
    );
}

/// A project under the host's /tmp with a writable subdirectory: both are
/// bound into the run's private /tmp, the read-only parent first. (The
/// subdirectory's skeleton tmpfs used to cover the parent's bind, so the
/// project looked empty but for the subdirectory.)
#[test]
fn a_project_under_tmp_with_a_writable_subdirectory_keeps_its_files() {
    let sb = Sandbox::new();
    // Directly in /tmp: the first component beneath it is the grant itself.
    let dir = tempfile::Builder::new()
        .prefix("capsule-first-hour-")
        .tempdir_in("/tmp")
        .expect("tempdir in /tmp");
    let proj = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::write(proj.join("agent.py"), "print('agent ran')\n").expect("write");
    std::fs::create_dir(proj.join("target")).expect("mkdir target");
    for args in [
        vec![
            "exec",
            "--allow-write",
            "./target",
            "--",
            "/bin/sh",
            "-c",
            "cat agent.py; echo built > target/out",
        ],
        vec![
            "exec",
            "--allow-read",
            ".",
            "--allow-write",
            "./target",
            "--",
            "/bin/sh",
            "-c",
            "cat agent.py; echo built > target/out",
        ],
    ] {
        let _ = std::fs::remove_file(proj.join("target/out"));
        let run = sb.run_in(&args, &proj, b"");
        run.assert_code(0);
        assert_eq!(run.stdout, "print('agent ran')\n", "{}", run.ctx());
        assert_eq!(
            std::fs::read_to_string(proj.join("target/out")).unwrap_or_default(),
            "built\n",
            "{}",
            run.ctx()
        );
    }
    // A writable file inside the read-only project.
    std::fs::write(proj.join("notes.txt"), "data\n").expect("write");
    let run = sb.run_in(
        &[
            "exec",
            "--allow-write",
            "./notes.txt",
            "--",
            "/bin/sh",
            "-c",
            "cat agent.py; echo more >> notes.txt",
        ],
        &proj,
        b"",
    );
    run.assert_code(0);
    assert_eq!(run.stdout, "print('agent ran')\n", "{}", run.ctx());
    assert_eq!(
        std::fs::read_to_string(proj.join("notes.txt")).unwrap_or_default(),
        "data\nmore\n"
    );
}

/// The README's policy-less Rust step (`-e CARGO_HOME ... -- cargo test`)
/// runs as written, with the user's rustup toolchain.
#[test]
fn the_readme_cargo_step_runs_without_a_policy() {
    let home = std::env::var("HOME").unwrap_or_default();
    let cargo_home = std::path::Path::new(&home).join(".cargo");
    let rustup_home = std::path::Path::new(&home).join(".rustup");
    if !cargo_home.join("bin/cargo").exists() || !rustup_home.join("toolchains").is_dir() {
        skip("no rustup toolchain in this user's home: the README's cargo step is not run");
        return;
    }
    // cargo renames its outputs between directories: Landlock ABI 1 has no
    // refer right, so there it fails with EXDEV (a documented limitation).
    let abi = std::env::var("CAPSULE_LANDLOCK_ABI_MAX")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(landlock_abi(), |max| max.min(landlock_abi()));
    if abi < 2 {
        skip(
            "Landlock ABI 1 (no refer right): cargo's renames fail with EXDEV, as the README says",
        );
        return;
    }
    let mut sb = Sandbox::new();
    sb.set_env("HOME", &home);
    sb.set_env(
        "PATH",
        &format!("{}:{TEST_PATH}", cargo_home.join("bin").display()),
    );
    let proj = sb.mkdir("crate");
    sb.write(
        "crate/Cargo.toml",
        "[package]\nname = \"fh\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    sb.write(
        "crate/src/lib.rs",
        "#[test]\nfn it_runs() { assert_eq!(1 + 1, 2); }\n",
    );
    sb.write(
        "crate/Cargo.lock",
        "version = 3\n\n[[package]]\nname = \"fh\"\nversion = \"0.1.0\"\n",
    );
    sb.mkdir("crate/target");
    let readme = include_str!("../README.md");
    let line = readme
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("capsule exec --allow-read ~/.cargo"))
        .expect("the README's cargo step");
    let run = std::process::Command::new("/bin/sh")
        .args(["-c", line])
        .current_dir(&proj)
        .env_clear()
        .envs(
            sb.std_command(["x"])
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
        )
        .env(
            "PATH",
            format!(
                "{}:{}:{TEST_PATH}",
                capsule_bin().parent().expect("dir").display(),
                cargo_home.join("bin").display()
            ),
        )
        .output()
        .expect("sh");
    let out = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success() && out.contains("test it_runs ... ok"),
        "{line}\nstdout: {out}\nstderr: {err}"
    );
}

/// A Makefile's `python3` that the PATH resolves to a virtualenv (issue 39):
/// the run gets that interpreter and its prefix read-only, as it gets the
/// top-level command's, so `capsule exec -- make test` runs the project's
/// Python as `capsule exec -- python3` would. The venv lies under the
/// home directory, which the run is not otherwise granted.
#[test]
fn a_makefiles_python3_on_a_venv_path_runs() {
    let make = first_tool(&["/usr/bin/make", "/bin/make"]);
    let Some(make) = make else {
        skip("no make on this machine (apt-get install make)");
        return;
    };
    let sb = Sandbox::visible();
    let venv = sb.path("home/.venvs/proj");
    let made = std::process::Command::new(python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .expect("run python3 -m venv");
    if !made.status.success() {
        skip("this Python cannot make a virtualenv (Debian: apt-get install python3-venv)");
        return;
    }
    let proj = sb.mkdir("proj");
    sb.write(
        "proj/Makefile",
        "test:\n\tpython3 -c 'import sys; print(\"prefix\", sys.prefix)'\n",
    );
    let mut sb = sb;
    let path = format!("{}:{TEST_PATH}", venv.join("bin").display());
    sb.set_env("PATH", &path);
    let make = make.to_string_lossy().into_owned();
    let run = sb.run_in(&["exec", "--", &make, "-s", "test"], &proj, b"");
    run.assert_code(0);
    assert_eq!(
        run.stdout,
        format!("prefix {}\n", venv.display()),
        "{}",
        run.ctx()
    );
    // --dry-run names the grant and why.
    let run = sb.run_in(&["exec", "--dry-run", "--", &make, "test"], &proj, b"");
    run.assert_code(0);
    assert!(
        run.stdout.contains(&venv.display().to_string()) && run.stdout.contains("python3"),
        "{}",
        run.ctx()
    );
    // Nothing of the home beyond the venv: its other files stay unreadable.
    sb.write("home/secret.txt", "s3cret\n");
    let secret = sb.p("home/secret.txt");
    let run = sb.run_in(&["exec", "--", "/bin/cat", &secret], &proj, b"");
    assert_ne!(run.code, Some(0), "{}", run.ctx());
    assert!(!run.stdout.contains("s3cret"), "{}", run.ctx());
}

/// A project under the host's /tmp whose `.env` the starter policy carves
/// out (issue 39): the run keeps the host's /tmp to hold the carve-out, so
/// its HOME and TMPDIR are its own directory rather than `/tmp`; the run
/// says so, and says nothing when there is no `.env`.
#[test]
fn a_carve_out_beneath_tmp_that_changes_home_is_said() {
    let sb = Sandbox::new();
    let dir = tempfile::Builder::new()
        .prefix("capsule-first-hour-env-")
        .tempdir_in("/tmp")
        .expect("tempdir in /tmp");
    let proj = std::fs::canonicalize(dir.path()).expect("canonical");
    let policy = repo_root().join("policy/python-agent.yaml");
    std::fs::copy(&policy, proj.join("agent.yaml")).expect("copy the starter policy");
    let args = [
        "exec",
        "-p",
        "agent.yaml",
        "--",
        "/bin/sh",
        "-c",
        "echo $HOME",
    ];
    let run = sb.run_in(&args, &proj, b"");
    run.assert_code(0);
    assert!(
        !run.stderr.contains("is carved out of the grant"),
        "{}",
        run.ctx()
    );

    std::fs::write(proj.join(".env"), "TOKEN=x\n").expect("write .env");
    let run = sb.run_in(&args, &proj, b"");
    run.assert_code(0);
    let home = run.stdout.trim().to_string();
    assert!(
        run.stderr.contains(&format!(
            "{}/.env is carved out of the grant {} beneath /tmp",
            proj.display(),
            proj.display()
        )) && run
            .stderr
            .contains(&format!("HOME and TMPDIR are {home}, not /tmp")),
        "{}",
        run.ctx()
    );
}

/// The ci-build starter as its comment says to use it (`capsule policy init
/// ci-build` at the checkout's root), with the system's pytest (issue 39):
/// the read-only checkout gets no bytecode and pytest no cache warning.
#[test]
fn the_ci_build_starter_runs_pytest_without_warnings_or_bytecode() {
    let py = "/usr/bin/python3";
    let has_pytest = std::process::Command::new(py)
        .args(["-c", "import pytest"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_pytest {
        skip("the system Python has no pytest (apt-get install python3-pytest)");
        return;
    }
    let sb = Sandbox::visible();
    let proj = sb.mkdir("proj");
    sb.write(
        "proj/tests/test_a.py",
        "import helper\n\ndef test_ok():\n    assert helper.TWO == 2\n",
    );
    sb.write("proj/helper.py", "TWO = 2\n");
    let policy = repo_root().join("policy/ci-build.yaml");
    std::fs::copy(&policy, proj.join("capsule-ci.yaml")).expect("copy the starter");
    let run = sb.run_in(
        &[
            "exec",
            "-p",
            "capsule-ci.yaml",
            "--",
            py,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "tests",
        ],
        &proj,
        b"",
    );
    run.assert_code(0);
    assert!(run.stdout.contains("1 passed"), "{}", run.ctx());
    assert!(!run.stdout.contains("warning"), "{}", run.ctx());
    assert!(!proj.join("__pycache__").exists(), "{}", run.ctx());
    assert!(!proj.join(".pytest_cache").exists(), "{}", run.ctx());
}

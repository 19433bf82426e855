//! Statements of the product contract (docs: /work/shared/design/capsule.md)
//! that an acceptance suite written only from the contract would check, and
//! that no other test file covered.

mod common;

use common::*;
use std::process::Command as StdCommand;

/// `capsule ARGS` run directly (never through `capsule serve`: these are
/// about the command line itself), with the sandbox's clean environment.
fn cli(sb: &Sandbox, args: &[&str]) -> Run {
    let mut c = StdCommand::new(capsule_bin());
    c.args(args)
        .env_clear()
        .env("PATH", TEST_PATH)
        .env("HOME", &sb.home)
        .env("XDG_STATE_HOME", &sb.state)
        .env("XDG_CONFIG_HOME", &sb.config)
        .env("LANG", "C.UTF-8")
        .current_dir(&sb.root);
    for k in ["CAPSULE_NO_NAMESPACES", "CAPSULE_LANDLOCK_ABI_MAX"] {
        if let Ok(v) = std::env::var(k) {
            c.env(k, v);
        }
    }
    let out = c.output().expect("spawn capsule");
    Run {
        args: args.iter().map(|s| s.to_string()).collect(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stdout_raw: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Section 1: a mistyped option is capsule failing (125, as GNU `timeout` and
/// `env` do), not a command named `--polcy` (127), and nothing runs.
#[test]
fn an_unknown_option_before_the_command_is_a_usage_error() {
    let sb = Sandbox::new();
    let marker = sb.p("ran");
    for args in [
        vec!["exec", "--no-such-option", "--", "/usr/bin/touch", &marker],
        vec!["exec", "--polcy", "x.yaml", "--", "/usr/bin/touch", &marker],
        vec!["exec", "--json", "--bogus", "/usr/bin/touch", &marker],
    ] {
        let run = cli(&sb, &args);
        run.assert_code(125);
        assert!(
            run.stderr.contains("unexpected argument"),
            "a usage error naming the option, not `command not found`:{}",
            run.ctx()
        );
        assert!(!sb.path("ran").exists(), "the command ran:{}", run.ctx());
    }
    // The command may still follow without `--`, and options after it are
    // its own (as env and timeout do).
    cli(&sb, &["exec", "--no-audit", "/bin/sh", "-c", "exit 4"]).assert_code(4);
    cli(
        &sb,
        &["exec", "--no-audit", "/bin/sh", "-c", "exit 5", "--json"],
    )
    .assert_code(5);
    cli(
        &sb,
        &["exec", "--no-audit", "--", "/bin/sh", "-c", "exit 6"],
    )
    .assert_code(6);
}

/// The same for `capsule learn`, which takes its command the way `exec` does.
#[test]
fn learn_refuses_an_unknown_option_too() {
    let sb = Sandbox::new();
    let marker = sb.p("ran");
    let run = cli(
        &sb,
        &["learn", "--no-such-option", "--", "/usr/bin/touch", &marker],
    );
    run.assert_code(125);
    assert!(
        run.stderr.contains("unexpected argument"),
        "a usage error naming the option, not `command not found`:{}",
        run.ctx()
    );
    assert!(!sb.path("ran").exists(), "the command ran:{}", run.ctx());
}

/// Section 2: "Every error names the file, line, column and key". A module
/// search path passed from the host (`env.pass: [PYTHONPATH]`) is judged at
/// planning, against the host's value: its refusal names the entry's place
/// in the file too, not only the key.
#[test]
fn a_refused_env_pass_names_the_file_line_and_column() {
    let mut sb = Sandbox::new();
    let out = sb.mkdir("out");
    let pol =
        sb.policy("version: 1\nfilesystem:\n  write: [./out]\nenv:\n  pass: [LANG, PYTHONPATH]\n");
    sb.set_env("PYTHONPATH", &out.to_string_lossy());
    let run = sb.exec_json(&["--policy", &pol], &["/bin/true"]);
    let err = refusal(&run);
    let want = format!("{pol}:5:16: env.pass[1]");
    assert_starts(&err, &want, &run);
    // The same refusal from `check`.
    let mut c = sb.std_command(["check", "--policy", &pol]);
    let out = c.output().expect("spawn capsule check");
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&want), "check: {stderr}");
}

/// Section 2 again, for `mounts:`: an entry the planner refuses (here a
/// relative destination) names its place in the file.
#[test]
fn a_refused_mount_names_the_file_line_and_column() {
    let sb = Sandbox::new();
    sb.mkdir("pack");
    let pol = sb.policy("version: 1\nmounts:\n  - {src: ./pack, dst: relative}\n");
    let run = sb.exec_json(&["--policy", &pol], &["/bin/true"]);
    let err = refusal(&run);
    let want = format!("{pol}:3:5: mounts[0]: destination `relative`");
    assert_starts(&err, &want, &run);
    // A --mount flag has no file: the flag is named instead.
    let run = sb.exec_json(&["--mount", "./pack:relative"], &["/bin/true"]);
    let err = refusal(&run);
    assert!(
        err.starts_with("--mount ./pack:relative: destination"),
        "{err}"
    );
}

/// Section 2 again, for `tools:`: a host tool the run could rewrite is
/// refused, naming the entry's place in the file.
#[test]
fn a_refused_tool_names_the_file_line_and_column() {
    let sb = Sandbox::new();
    sb.write_exec("out/tool.sh", "#!/bin/sh\necho '{}'\n");
    let pol = sb.policy(
        "version: 1\nfilesystem:\n  write: [./out]\ntools:\n  allow:\n    - name: t\n      command: [./out/tool.sh]\n",
    );
    let run = sb.exec_json(&["--policy", &pol], &["/bin/true"]);
    let err = refusal(&run);
    let want = format!("{pol}:6:7: tools.allow[0]");
    assert_starts(&err, &want, &run);
    assert!(err.contains("run could rewrite it"), "{err}");
}

/// Section 1/3: the command runs "as env(1) and bubblewrap do". Their
/// execvp runs an executable file without `#!` (execve: ENOEXEC) with
/// /bin/sh, as POSIX asks; capsule did not (126). An exec the sandbox
/// denies stays 126: that is EACCES, never ENOEXEC.
#[test]
fn an_executable_script_without_a_shebang_runs_with_bin_sh() {
    let sb = Sandbox::new();
    sb.write_exec("bin/plain", "echo \"no shebang $1\"\nexit 7\n");
    let bin = sb.p("bin");
    let run = sb.exec_json(&["--allow-exec", &bin], &[&sb.p("bin/plain"), "arg1"]);
    run.assert_code(7);
    assert_eq!(run.child_stdout(), "no shebang arg1\n", "{}", run.ctx());
    // A write grant is not an exec grant: the sandbox's refusal is no
    // ENOEXEC, so no shell reads the file instead.
    sb.write_exec("rw/plain", "echo ran\n");
    let inner = sb.p("rw/plain");
    let run = sb.exec_json(&["--allow-write", &sb.p("rw")], &["/bin/sh", "-c", &inner]);
    run.assert_code(126);
    assert!(!run.child_stdout().contains("ran"), "{}", run.ctx());
}

/// Section 2: "Unknown keys are errors", also inside a path entry's mapping
/// form (`{path: ..., optional: ...}`): a typo such as `optinal: true` must
/// not be dropped silently (the entry would then be required, or worse, a
/// misspelt key meant to narrow it ignored).
#[test]
fn an_unknown_key_in_a_path_mapping_is_an_error() {
    let sb = Sandbox::new();
    sb.mkdir("data");
    for (text, key) in [
        (
            "version: 1\nfilesystem:\n  read:\n    - {path: ./data, optinal: true}\n",
            "filesystem.read[0]",
        ),
        (
            "{\"version\": 1, \"filesystem\": {\"read\": [\"./data\"], \"deny\": [{\"path\": \"./data/x\", \"optional\": true, \"bogus\": 1}]}}",
            "filesystem.deny[0]",
        ),
    ] {
        let name = if text.starts_with('{') { "p.json" } else { "p.yaml" };
        let pol = sb.policy_named(name, text);
        let mut c = sb.std_command(["check", "--policy", &pol]);
        let out = c.output().expect("spawn capsule check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{text}: {stderr}");
        assert!(stderr.contains(&format!("{pol}:")), "names the file: {stderr}");
        assert!(stderr.contains(key), "names {key}: {stderr}");
    }
    // The mapping form itself still works.
    let pol = sb.policy("version: 1\nfilesystem:\n  read:\n    - {path: ./data, optional: true}\n");
    let out = sb
        .std_command(["check", "--policy", &pol])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Section 1: a bad flag value is refused naming the flag the user typed,
/// not an internal `<policy>: limits...` key that no file holds.
#[test]
fn a_bad_limit_flag_is_named_as_the_flag() {
    let sb = Sandbox::new();
    for (args, want) in [
        (vec!["--max-output", "0"], "--max-output 0: "),
        (vec!["--timeout", "1e10"], "--timeout 10000000000: "),
    ] {
        let run = sb.exec_json(&args, &["/bin/true"]);
        let err = refusal(&run);
        assert!(err.starts_with(want), "want `{want}...`, got `{err}`");
    }
}

/// `capsule check --json` (section 4 names its predictions): a policy it
/// refuses still prints one JSON object, `ok: false` with the reason in
/// `problems`, as `exec --json` prints a refused result; and the reason is
/// on stderr too, where a 125 of every other command says why.
#[test]
fn check_json_prints_one_object_for_a_refused_policy() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nfilesystem:\n  raed: [.]\n");
    let out = sb
        .std_command(["check", "--json", "--policy", &pol])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("check --json printed no JSON object ({e}): {stdout:?}"));
    assert_eq!(v["ok"], false, "{v}");
    let p = v["problems"][0].as_str().unwrap_or_default();
    assert!(p.contains("filesystem.raed: unknown key"), "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("filesystem.raed"));
    // A refusal of this host only (a mount without the view) is on stderr too.
    if std::env::var("CAPSULE_NO_NAMESPACES").is_ok_and(|v| v == "1") {
        sb.mkdir("pack");
        let pol = sb.policy_named(
            "m.yaml",
            "version: 1\nmounts:\n  - {src: ./pack, dst: /pack}\n",
        );
        let out = sb
            .std_command(["check", "--policy", &pol])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("needs the run's own mount namespace"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The error of a refused run (exit 125, `--json`).
fn refusal(run: &Run) -> String {
    run.assert_code(125);
    run.json()["error"].as_str().unwrap_or_default().to_string()
}

/// `err` begins with `want`.
fn assert_starts(err: &str, want: &str, run: &Run) {
    assert!(
        err.starts_with(want),
        "want `{want}...`, got `{err}`{}",
        run.ctx()
    );
}

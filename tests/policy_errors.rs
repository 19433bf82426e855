//! Policy errors (section 2): unknown keys, wrong types and the fail-closed
//! rules exit 125, name file:line:column and the key, and run nothing.

mod common;

use common::*;

/// Run `exec --policy FILE -- touch out/ran` and assert a 125 refusal that
/// ran nothing; returns stderr.
fn refused(sb: &Sandbox, pol: &str) -> String {
    sb.mkdir("out");
    let marker = sb.p("out/ran");
    let run = sb.run(&["exec", "--policy", pol, "--", "/usr/bin/touch", &marker]);
    run.assert_code(125);
    assert!(!sb.path("out/ran").exists(), "the command ran{}", run.ctx());
    assert!(
        !run.stderr.trim().is_empty(),
        "no message on stderr{}",
        run.ctx()
    );
    // `capsule check` agrees.
    let check = sb.run(&["check", "-p", pol]);
    check.assert_code(125);
    run.stderr
}

fn assert_located(stderr: &str, file: &str, line: usize, key: &str) {
    assert!(
        stderr.contains(&format!("{file}:{line}:")),
        "error does not name {file}:{line}:COL\nstderr: {stderr}"
    );
    assert!(
        stderr.contains(key),
        "error does not name the key {key}\nstderr: {stderr}"
    );
}

#[test]
fn unknown_key_names_file_line_column_and_key() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nfilesystem:\n  write: [./out]\n  raed: [./data]\n");
    let err = refused(&sb, &pol);
    assert_located(&err, &pol, 4, "raed");
    assert!(
        err.contains(&format!("{pol}:4:3")),
        "column of `raed` is 3\nstderr: {err}"
    );
    let pol = sb.policy("version: 1\nfilesystem:\n  write: [./out]\nnetwrok:\n  mode: none\n");
    assert_located(&refused(&sb, &pol), &pol, 4, "netwrok");
    let pol = sb.policy("version: 1\nlimits:\n  timeout_seconds: 5\n  max_procs: 3\n");
    assert_located(&refused(&sb, &pol), &pol, 4, "max_procs");
}

#[test]
fn wrong_types_name_the_location() {
    let sb = Sandbox::new();
    let pol = sb.policy("version: 1\nlimits:\n  timeout_seconds: soon\n");
    assert_located(&refused(&sb, &pol), &pol, 3, "timeout_seconds");
    let pol = sb.policy("version: 1\nfilesystem:\n  read: /just/a/string\n");
    assert_located(&refused(&sb, &pol), &pol, 3, "read");
    let pol = sb.policy("version: 1\nnetwork:\n  mode: sometimes\n");
    assert_located(&refused(&sb, &pol), &pol, 3, "mode");
}

#[test]
fn json_policy_errors_are_located_too() {
    let sb = Sandbox::new();
    let pol = sb.policy_named(
        "policy.json",
        "{\n  \"version\": 1,\n  \"filesystem\": {\"read\": []},\n  \"bogus\": 1\n}\n",
    );
    assert_located(&refused(&sb, &pol), &pol, 4, "bogus");
    // And a valid JSON policy works, YAML detected by content without extension.
    sb.mkdir("data");
    let good = sb.policy_named(
        "good.json",
        "{\"version\": 1, \"filesystem\": {\"read\": [\"./data\"]}}",
    );
    sb.run(&["check", "-p", &good]).assert_code(0);
    let good = sb.policy_named(
        "policy-without-extension",
        "version: 1\nfilesystem:\n  read: [./data]\n",
    );
    sb.run(&["check", "-p", &good]).assert_code(0);
    sb.exec_json(&["--policy", &good], &["/bin/true"])
        .assert_code(0);
}

#[test]
fn version_must_be_1() {
    let sb = Sandbox::new();
    refused(&sb, &sb.policy("version: 2\n"));
    refused(&sb, &sb.policy("filesystem:\n  tmp: true\n"));
}

#[test]
fn fail_closed_rules() {
    let sb = Sandbox::new();
    sb.mkdir("data");
    sb.mkdir("elsewhere");
    let cases = [
        "network:\n  mode: proxy\n",
        "network:\n  mode: proxy\n  allow_hosts: []\n",
        "filesystem:\n  write: [/]\n",
        "filesystem:\n  write: [/etc]\n",
        "filesystem:\n  write: [/usr]\n",
        "filesystem:\n  write: [/proc]\n",
        "filesystem:\n  write: [/sys]\n",
        "filesystem:\n  write: [/dev]\n",
        "filesystem:\n  write: [/boot]\n",
        "filesystem:\n  exec: [/]\n",
        "filesystem:\n  exec: [/usr]\n",
        "filesystem:\n  exec: [/etc]\n",
        "filesystem:\n  read: [/proc]\n",
        "filesystem:\n  read: [/sys]\n",
        "filesystem:\n  deny: [./elsewhere]\n",
        "filesystem:\n  read: [./data]\n  deny: [./elsewhere]\n",
        "filesystem:\n  read: [./does-not-exist]\n",
        "limits:\n  timeout_seconds: 0\n",
        "limits:\n  timeout_seconds: -1\n",
    ];
    for body in cases {
        let pol = sb.policy(&format!("version: 1\n{body}"));
        let run = sb.run(&["check", "-p", &pol]);
        assert_eq!(run.code, Some(125), "policy accepted:\n{body}{}", run.ctx());
        let run = sb.exec_json(&["--policy", &pol], &["/bin/true"]);
        assert_eq!(run.code, Some(125), "exec ran with:\n{body}{}", run.ctx());
        assert_eq!(run.json()["termination_reason"], "refused");
    }
    // The same through flags.
    for flags in [
        ["--allow-write", "/etc"],
        ["--allow-read", "/proc"],
        ["--allow-exec", "/usr"],
    ] {
        let run = sb.exec_json(&flags, &["/bin/true"]);
        assert_eq!(run.code, Some(125), "{flags:?}{}", run.ctx());
    }
    // Controls: the fixed forms are accepted.
    for body in [
        "network:\n  mode: unrestricted\n",
        "filesystem:\n  read: [/]\n",
        "filesystem:\n  read: [./data]\n  deny: [./data/x]\n",
        "filesystem:\n  read: [{path: ./does-not-exist, optional: true}]\n",
        "limits:\n  timeout_seconds: 0.5\n",
    ] {
        sb.mkdir("data/x");
        let pol = sb.policy(&format!("version: 1\n{body}"));
        let run = sb.run(&["check", "-p", &pol]);
        assert_eq!(
            run.code,
            Some(0),
            "valid policy rejected:\n{body}{}",
            run.ctx()
        );
    }
}

#[test]
fn relative_paths_resolve_against_the_policy_directory() {
    let sb = Sandbox::new();
    sb.write("conf/data/file.txt", "relative");
    let pol = sb.policy_named(
        "conf/policy.yaml",
        "version: 1\nfilesystem:\n  read: [./data]\n",
    );
    // capsule runs from "/", far from the policy.
    let mut args = vec![
        "exec".to_string(),
        "--json".into(),
        "--policy".into(),
        pol,
        "--".into(),
    ];
    args.extend(probe_argv(&[&["read", &sb.p("conf/data/file.txt")]]));
    let run = sb.run_in(&args, std::path::Path::new("/"), b"");
    run.assert_ran();
    assert_eq!(run.probe(0)["value"], "relative", "{}", run.ctx());
}

//! PYTHONPATH and NODE_PATH (issue 13): accepted in `env.set`/`env.pass` only
//! when every entry lies beneath a read-only grant; a writable entry (a write
//! grant, the workspace output, TMPDIR) would let the sandboxed program plant
//! code that the next interpreter start imports.

mod common;

use common::*;

#[test]
fn pythonpath_beneath_a_read_grant_is_accepted() {
    let sb = Sandbox::new();
    sb.write("lib/capsule_mod_ok.py", "VALUE = 'IMPORTED-OK'\n");
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  read: [{lib}]\nenv:\n  set:\n    PYTHONPATH: {lib}\n",
        lib = sb.p("lib")
    ));
    let run = sb.exec_json(
        &["--policy", &pol],
        &[
            &python(),
            "-c",
            "import capsule_mod_ok; print(capsule_mod_ok.VALUE)",
        ],
    );
    run.assert_code(0);
    assert!(run.child_stdout().contains("IMPORTED-OK"), "{}", run.ctx());
}

fn refused(sb: &Sandbox, pol: &str, extra: &[&str], key: &str) {
    let mut opts = vec!["--policy", pol];
    opts.extend_from_slice(extra);
    let run = sb.exec_json(&opts, &["/bin/true"]);
    assert_eq!(
        run.code,
        Some(125),
        "ESCAPE: a writable module search path was accepted{}",
        run.ctx()
    );
    let err = run.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains(key), "the refusal does not name {key}: {err}");
}

#[test]
fn pythonpath_and_node_path_in_a_writable_place_are_refused() {
    let sb = Sandbox::new();
    sb.mkdir("out");
    let out = sb.p("out");
    for var in ["PYTHONPATH", "NODE_PATH"] {
        let pol = sb.policy(&format!(
            "version: 1\nfilesystem:\n  write: [{out}]\nenv:\n  set:\n    {var}: {out}\n"
        ));
        refused(&sb, &pol, &[], &format!("env.set.{var}"));
        // Read-only in the policy, writable through the command line.
        let pol = sb.policy(&format!(
            "version: 1\nfilesystem:\n  read: [{out}]\nenv:\n  set:\n    {var}: {out}\n"
        ));
        refused(
            &sb,
            &pol,
            &["--allow-write", &out],
            &format!("env.set.{var}"),
        );
    }
    // Outside every grant, relative, or with an empty entry (= the cwd).
    for bad in ["/opt/nowhere", "lib", &format!("{out}::/usr/lib")] {
        let pol = sb.policy(&format!(
            "version: 1\nenv:\n  set:\n    NODE_PATH: \"{bad}\"\n"
        ));
        refused(&sb, &pol, &[], "NODE_PATH");
    }
}

#[test]
fn passed_pythonpath_is_checked_against_the_host_value() {
    let mut sb = Sandbox::new();
    let ws = sb.mkdir("ws");
    sb.set_env("PYTHONPATH", &ws.join("output").to_string_lossy());
    let pol = sb.policy("version: 1\nenv:\n  pass: [PYTHONPATH]\n");
    refused(
        &sb,
        &pol,
        &["--workspace", &ws.to_string_lossy()],
        "env.pass[0]",
    );
}

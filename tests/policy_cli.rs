//! The policy commands and the plan views: `capsule check`, `capsule policy
//! schema` (equal to the shipped policy/schema.json), `capsule policy init`
//! (the shipped starter policies), `--dry-run`, and `capsule doctor`.

mod common;

use common::*;
use serde_json::Value;

const STARTERS: &[&str] = &["python-agent", "ci-build", "read-only-review"];

#[test]
fn schema_command_equals_shipped_schema() {
    let sb = Sandbox::new();
    let run = sb.run(&["policy", "schema"]);
    run.assert_code(0);
    let printed: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("schema is not JSON: {e}{}", run.ctx()));
    let path = repo_root().join("policy/schema.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let shipped: Value = serde_json::from_str(&text).expect("policy/schema.json is JSON");
    assert_eq!(
        printed, shipped,
        "`capsule policy schema` differs from policy/schema.json: regenerate it"
    );
    // It is a schema of the policy: it knows the top-level keys.
    let s = run.stdout.as_str();
    for k in [
        "filesystem",
        "network",
        "env",
        "limits",
        "allow_unix_sockets",
        "max_output_bytes",
    ] {
        assert!(s.contains(k), "schema lacks {k}");
    }
}

#[test]
fn policy_init_prints_the_shipped_starters() {
    let sb = Sandbox::new();
    for name in STARTERS {
        let run = sb.run(&["policy", "init", name]);
        run.assert_code(0);
        let path = repo_root().join(format!("policy/{name}.yaml"));
        let shipped =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            run.stdout,
            shipped,
            "`policy init {name}` differs from {}",
            path.display()
        );
        // The shipped file validates where it lives.
        let check = sb.run(&["check", "-p", &path.to_string_lossy()]);
        assert_eq!(
            check.code,
            Some(0),
            "{name} does not pass `capsule check`{}",
            check.ctx()
        );
    }
    let run = sb.run(&["policy", "init"]);
    run.assert_code(0);
    assert!(run.stdout.contains("version: 1"), "{}", run.ctx());
    let run = sb.run(&["policy", "init", "no-such-starter"]);
    assert_ne!(run.code, Some(0), "unknown starter accepted{}", run.ctx());
}

#[test]
fn python_agent_example_runs() {
    // The README's first command: a Python one-liner under the shipped policy.
    let sb = Sandbox::new();
    let pol = repo_root().join("policy/python-agent.yaml");
    let run = sb.exec_json(
        &["--policy", &pol.to_string_lossy()],
        &[&python(), "-c", "print(6 * 7)"],
    );
    run.assert_code(0);
    assert_eq!(run.child_stdout(), "42\n", "{}", run.ctx());
}

#[test]
fn check_reports_what_this_kernel_enforces() {
    let sb = Sandbox::new();
    sb.mkdir("data");
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [./data]\n");
    let run = sb.run(&["check", "-p", &pol]);
    run.assert_code(0);
    let all = format!("{}{}", run.stdout, run.stderr).to_lowercase();
    assert!(
        all.contains("landlock"),
        "check does not mention Landlock{}",
        run.ctx()
    );
    assert!(
        all.contains("seccomp"),
        "check does not mention seccomp{}",
        run.ctx()
    );
}

#[test]
fn dry_run_lists_grants_and_runs_nothing() {
    let sb = Sandbox::new();
    sb.mkdir("data");
    sb.mkdir("out");
    let marker = sb.p("out/ran");
    let run = sb.run(&[
        "exec",
        "--dry-run",
        "--allow-read",
        &sb.p("data"),
        "--allow-write",
        &sb.p("out"),
        "--",
        "/usr/bin/touch",
        &marker,
    ]);
    run.assert_code(0);
    assert!(
        !sb.path("out/ran").exists(),
        "--dry-run ran the command{}",
        run.ctx()
    );
    assert!(
        run.stdout.contains(&sb.p("data")),
        "read grant not listed{}",
        run.ctx()
    );
    assert!(
        run.stdout.contains(&sb.p("out")),
        "write grant not listed{}",
        run.ctx()
    );
    assert!(
        run.stdout.contains("/usr/bin/touch"),
        "the resolved command not listed{}",
        run.ctx()
    );
    assert!(
        run.stdout.to_lowercase().contains("landlock"),
        "the enforcing layer not named{}",
        run.ctx()
    );
    // --best-effort is accepted (a no-op where everything is enforceable).
    let run = sb.exec_json(&["--best-effort"], &["/bin/true"]);
    run.assert_code(0);
    // What this host cannot give is a problem of the plan, not a failed
    // --dry-run: the contract's exit 0, the refusal named (`check` is the
    // command whose exit status predicts exec's verdict).
    let mut nons = Sandbox::new();
    nons.set_env("CAPSULE_NO_NAMESPACES", "1");
    let elsewhere = format!("{}:/capsule-test-elsewhere", nons.p("."));
    let run = nons.run(&[
        "exec",
        "--dry-run",
        "--json",
        "--mount",
        &elsewhere,
        "--",
        "/bin/true",
    ]);
    run.assert_code(0);
    let j: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("--dry-run --json: {e}{}", run.ctx()));
    assert!(
        j["problems"].to_string().contains("mount namespace"),
        "{}",
        run.ctx()
    );
    // A refused policy is still refused under --dry-run.
    let run = sb.run(&[
        "exec",
        "--dry-run",
        "--allow-write",
        "/etc",
        "--",
        "/bin/true",
    ]);
    run.assert_code(125);
}

#[test]
fn doctor_reports_in_human_and_json_form() {
    let sb = Sandbox::new();
    let run = sb.run(&["doctor"]);
    run.assert_code(0);
    assert!(
        run.stdout.to_lowercase().contains("landlock"),
        "{}",
        run.ctx()
    );
    let run = sb.run(&["doctor", "--json"]);
    run.assert_code(0);
    let j: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("doctor --json: {e}{}", run.ctx()));
    assert!(j.is_object(), "{}", run.ctx());
    let text = run.stdout.to_lowercase();
    for k in ["landlock", "seccomp", "cgroup", "namespace"] {
        assert!(
            text.contains(k),
            "doctor --json says nothing about {k}{}",
            run.ctx()
        );
    }
    // The Landlock ABI it reports is the kernel's.
    let abi = landlock_abi();
    assert!(
        text.contains(&abi.to_string()),
        "doctor does not report ABI {abi}{}",
        run.ctx()
    );
}

#[test]
fn check_and_dry_run_show_the_view_and_the_etc_carve_outs() {
    let shadow = std::path::Path::new("/etc/shadow").exists();
    // With the view: what it gives, and the /etc secrets it covers, by name.
    if view_expected() {
        let sb = Sandbox::new();
        sb.mkdir("pack");
        let pol = sb.policy("version: 1\n");
        let run = sb.run(&["check", "-p", &pol]);
        run.assert_code(0);
        let out = run.stdout.as_str();
        for want in [
            "view ",
            "read-only",
            "private /proc",
            "/proc/sys",
            "/tmp",
            "/dev/shm",
            "devpts",
            "IPC namespace",
            "network namespace",
        ] {
            assert!(
                out.contains(want),
                "check does not show {want:?} of the view{}",
                run.ctx()
            );
        }
        if shadow {
            assert!(
                out.lines()
                    .any(|l| l.contains("/etc/shadow") && l.contains("password hashes")),
                "check does not show the /etc/shadow carve-out{}",
                run.ctx()
            );
        }
        let run = sb.run(&["check", "--json", "-p", &pol]);
        run.assert_code(0);
        let v: Value = serde_json::from_str(run.stdout.trim())
            .unwrap_or_else(|e| panic!("check --json: {e}{}", run.ctx()));
        assert_eq!(v["view"]["read_only_host"], true, "{}", run.ctx());
        if shadow {
            assert!(
                v["view"]["secrets"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|s| s["path"] == "/etc/shadow")),
                "{}",
                run.ctx()
            );
        }
        // --dry-run: the same, with the binds of --mount.
        let mount = format!("{}:/pack", sb.p("pack"));
        let run = sb.run(&["exec", "--dry-run", "--mount", &mount, "--", "/bin/true"]);
        run.assert_code(0);
        assert!(
            run.stdout
                .lines()
                .any(|l| l.contains(&sb.p("pack")) && l.contains("/pack") && l.contains("ro")),
            "--dry-run does not show the bind of {mount}{}",
            run.ctx()
        );
        assert!(run.stdout.contains("private /proc"), "{}", run.ctx());
        let run = sb.run(&["exec", "--dry-run", "--json", "--", "/bin/true"]);
        run.assert_code(0);
        let v: Value = serde_json::from_str(run.stdout.trim())
            .unwrap_or_else(|e| panic!("--dry-run --json: {e}{}", run.ctx()));
        assert_eq!(v["view"]["private_proc"], true, "{}", run.ctx());
    }
    // Without namespaces: no view, and the secrets carved out of the grants.
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    let run = sb.run(&[
        "exec",
        "--dry-run",
        "--allow-read",
        "/etc",
        "--",
        "/bin/true",
    ]);
    run.assert_code(0);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("view") && l.contains("none")),
        "--dry-run does not say there is no view{}",
        run.ctx()
    );
    if shadow {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.trim_start().starts_with("deny /etc/shadow")
                    && l.contains("password hashes")),
            "--dry-run does not show the /etc/shadow carve-out{}",
            run.ctx()
        );
    }
    let run = sb.run(&["exec", "--dry-run", "--json", "--", "/bin/true"]);
    run.assert_code(0);
    let v: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("--dry-run --json: {e}{}", run.ctx()));
    assert!(
        v.get("view").is_some_and(Value::is_null),
        "--dry-run --json does not say there is no view{}",
        run.ctx()
    );
}

/// A limitation is long (the memory watchdog's is ~2000 characters): `check`
/// and `--dry-run` print it as a wrapped paragraph a person can read, every
/// word still there (the JSON keeps it as one string).
#[test]
fn check_and_dry_run_wrap_long_limitations() {
    let mut sb = Sandbox::new();
    sb.env.push(("CAPSULE_NO_CGROUPS".into(), "1".into()));
    let pol = sb.policy("version: 1\nlimits:\n  memory_mb: 256\n");
    let json = sb.run(&["check", "--json", "-p", &pol]);
    json.assert_code(0);
    let v: Value = serde_json::from_str(&json.stdout).expect("check --json");
    let limitation = v["notes"]
        .as_array()
        .and_then(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .find(|n| n.starts_with("limitation: memory_mb"))
        })
        .unwrap_or_else(|| panic!("no memory watchdog limitation{}", json.ctx()))
        .to_string();
    assert!(limitation.len() > 1000, "{limitation}");
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    for args in [
        vec!["check", "-p", &pol],
        vec!["exec", "--dry-run", "-p", &pol, "--", "/bin/true"],
    ] {
        let run = sb.run(&args);
        run.assert_code(0);
        let start = run
            .stdout
            .find("limitation: memory_mb")
            .unwrap_or_else(|| panic!("no limitation{}", run.ctx()));
        let want = words(&limitation);
        let shown = words(&run.stdout[start..]);
        assert_eq!(shown[..want.len()], want[..], "{}", run.ctx());
        // The paragraph: its first line and the indented ones that follow.
        let mut lines = run.stdout[start..].lines();
        let para: Vec<&str> = lines
            .next()
            .into_iter()
            .chain(lines.take_while(|l| l.starts_with("  ")))
            .collect();
        assert!(para.len() > 10, "not wrapped: {para:#?}");
        let long: Vec<&&str> = para.iter().filter(|l| l.chars().count() > 100).collect();
        assert!(
            long.is_empty(),
            "lines over 100 columns: {long:#?}{}",
            run.ctx()
        );
    }
}

/// `doctor`'s gaps and limitations (long on the no-namespace path) continue
/// under their value column instead of running off the terminal.
#[test]
fn doctor_wraps_its_notes_under_the_value_column() {
    let mut sb = Sandbox::new();
    sb.env.push(("CAPSULE_NO_NAMESPACES".into(), "1".into()));
    let run = sb.run(&["doctor"]);
    run.assert_code(0);
    // Each gap or limitation and the lines that continue it (other
    // entries, such as the cgroups line's own note, are not wrapped).
    let mut notes: Vec<&str> = Vec::new();
    let mut in_note = false;
    for l in run.stdout.lines() {
        if l.starts_with("  not enforced    ") || l.starts_with("  limitation      ") {
            in_note = true;
        } else if !(in_note && l.starts_with(&" ".repeat(18))) {
            in_note = false;
        }
        if in_note {
            notes.push(l);
        }
    }
    assert!(
        notes.iter().any(|l| l.starts_with("  not enforced    ")),
        "no gap listed without namespaces{}",
        run.ctx()
    );
    let long: Vec<&&str> = notes.iter().filter(|l| l.chars().count() > 100).collect();
    assert!(long.is_empty(), "{long:#?}{}", run.ctx());
}

/// `check`, `exec --dry-run` and `why` make the run's private TMPDIR for a
/// moment (its Landlock rule needs it) and try the view in a throwaway
/// child, which makes the directories leading to a grant beneath /tmp in it:
/// they remove all of it, as `exec` does.
#[test]
fn check_dry_run_and_why_leave_no_private_tmpdir_behind() {
    let mut sb = Sandbox::new();
    let tmp = sb.mkdir("tmpdir");
    sb.env.push(("TMPDIR".into(), tmp.display().to_string()));
    sb.mkdir("data");
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  read: [{}]\n",
        sb.p("data")
    ));
    for args in [
        vec!["check", "-p", &pol],
        vec!["exec", "--dry-run", "-p", &pol, "--", "/bin/true"],
        vec!["why", "-p", &pol, "--read", "/etc/hosts"],
        vec!["exec", "-p", &pol, "--", "/bin/true"],
    ] {
        let run = sb.run(&args);
        run.assert_code(0);
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{args:?} left {left:?}{}", run.ctx());
    }
}

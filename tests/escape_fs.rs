//! Filesystem escapes (Landlock layer): writes and reads outside grants,
//! mutation of read-only places, deny carve-outs, credential files beneath
//! broad grants, symlink and hardlink tricks, exec from writable places.
//!
//! Each case runs the probe in one fresh sandbox and asserts the attempt
//! failed AND with which errno, next to a positive control that the same
//! operation works where it is granted.

mod common;

use common::*;
use std::fs;
use std::path::Path;

fn fixture() -> Sandbox {
    let sb = Sandbox::visible();
    sb.write("ro/file.txt", "original");
    sb.write("ro/public.txt", "public data");
    sb.mkdir("ro/sub");
    sb.write("rw/mine.txt", "mine");
    sb.mkdir("rw/sub");
    sb.write("outside/secret.txt", "TOP-SECRET");
    sb
}

#[test]
fn writes_outside_grants_are_denied() {
    let sb = fixture();
    // Relative paths in a policy resolve against the policy's directory.
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [./ro]\n  write: [./rw]\n");
    let tmp_target = format!("/tmp/{}", token("escape-write"));
    let run = sb.probe(
        &["--policy", &pol],
        &[
            &["write", &sb.p("rw/new.txt"), "ok"],
            &["write", &sb.p("ro/new.txt"), "bad"],
            &["write", &sb.p("outside/new.txt"), "bad"],
            &["write", &sb.home.join("new.txt").to_string_lossy(), "bad"],
            &["mkdir", &sb.p("ro/newdir")],
            &["mkdir", &sb.p("rw/newdir")],
            &["write", &tmp_target, "bad"],
            &["write", "/usr/capsule-escape-test", "bad"],
            &["write", "/etc/capsule-escape-test", "bad"],
        ],
    );
    // Clean up anything an escape might have created before asserting.
    for p in [
        tmp_target.as_str(),
        "/usr/capsule-escape-test",
        "/etc/capsule-escape-test",
    ] {
        let existed = fs::remove_file(p).is_ok();
        assert!(
            !existed,
            "ESCAPE: the sandbox created {p} on the host{}",
            run.ctx()
        );
    }
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    // With the view its read-only host refuses these (EROFS), else Landlock.
    for i in [1, 2, 3, 4] {
        assert_write_refused(&run.probe(i), &run);
    }
    assert_ok(&run.probe(5), &run);
    if private_tmp(&run) {
        // /tmp is the run's own: the write lands there, never on the host
        // (checked above).
        assert_ok(&run.probe(6), &run);
    } else {
        assert_landlock_refused(&run.probe(6), &run);
    }
    assert_write_refused(&run.probe(7), &run);
    assert_write_refused(&run.probe(8), &run);
    assert_eq!(sb.read("rw/new.txt"), "ok");
    assert!(!sb.path("ro/new.txt").exists());
    assert!(!sb.path("outside/new.txt").exists());
    assert!(!sb.home.join("new.txt").exists());
    assert!(!sb.path("ro/newdir").exists());
}

#[test]
fn reads_outside_grants_are_denied() {
    let sb = fixture();
    sb.write("home/notes.txt", "home notes");
    let run = sb.probe(
        &["--allow-read", &sb.p("ro")],
        &[
            &["read", &sb.p("ro/public.txt")],
            &["read", &sb.p("outside/secret.txt")],
            &["listdir", &sb.p("outside")],
            &["read", &sb.home.join("notes.txt").to_string_lossy()],
            &["listdir", &sb.p("")],
        ],
    );
    run.assert_ran();
    let ok = run.probe(0);
    assert_ok(&ok, &run);
    assert_eq!(ok["value"], "public data");
    // The fixtures lie where the view shows the host: only Landlock refuses.
    for i in [1, 2, 3, 4] {
        assert_landlock_refused(&run.probe(i), &run);
    }
    assert!(
        !run.stdout.contains("TOP-SECRET"),
        "secret leaked{}",
        run.ctx()
    );

    // Positive control: the same read works once granted.
    let run = sb.probe(
        &["--allow-read", &sb.p("outside")],
        &[&["read", &sb.p("outside/secret.txt")]],
    );
    run.assert_ran();
    let v = run.probe(0);
    assert_ok(&v, &run);
    assert_eq!(v["value"], "TOP-SECRET");
}

#[test]
fn without_policy_only_system_and_tmp() {
    let sb = fixture();
    let run = sb.probe(
        &[],
        &[
            &["read", "/etc/passwd"],
            &["read", &sb.p("ro/public.txt")],
            &["write", &sb.p("rw/x"), "x"],
            &["env"],
        ],
    );
    run.assert_ran();
    // /etc/passwd is part of `system: true`: the control that reads work at all.
    assert_ok(&run.probe(0), &run);
    assert_landlock_refused(&run.probe(1), &run);
    assert_write_refused(&run.probe(2), &run);
    let env = run.probe(3)["value"].clone();
    let tmp = env["TMPDIR"].as_str().unwrap_or_default().to_string();
    assert!(!tmp.is_empty(), "TMPDIR not set in the child{}", run.ctx());
}

#[test]
fn read_only_places_resist_overwrite_truncate_delete_rename() {
    let sb = fixture();
    let ro = |r: &str| sb.p(&format!("ro/{r}"));
    let rw = |r: &str| sb.p(&format!("rw/{r}"));
    sb.write("rw/replacement.txt", "evil");
    let run = sb.probe(
        &["--allow-read", &sb.p("ro"), "--allow-write", &sb.p("rw")],
        &[
            &["append", &ro("file.txt"), "evil"],
            &["open_trunc", &ro("file.txt")],
            &["truncate", &ro("file.txt"), "0"],
            &["write", &ro("file.txt"), "evil"],
            &["unlink", &ro("file.txt")],
            &["rename", &ro("file.txt"), &ro("renamed.txt")],
            &["rename", &ro("file.txt"), &rw("stolen.txt")],
            &["rename", &rw("replacement.txt"), &ro("file.txt")],
            &["rmdir", &ro("sub")],
            &["symlink", "/etc/passwd", &ro("link")],
            &["create", &ro("sub/new.txt")],
        ],
    );
    run.assert_ran();
    for i in [0, 1, 2, 3, 4, 5, 8, 9, 10] {
        assert_write_refused(&run.probe(i), &run);
    }
    // Landlock reports a rename across differently-granted places as EXDEV;
    // with the view the two places are two mounts (EXDEV from the kernel,
    // or EROFS from the read-only one).
    for i in [6, 7] {
        assert_errno(&run.probe(i), &["EACCES", "EXDEV"], &run);
    }
    assert_eq!(
        sb.read("ro/file.txt"),
        "original",
        "read-only file changed{}",
        run.ctx()
    );
    assert!(sb.path("ro/sub").is_dir());
    assert!(!sb.path("ro/renamed.txt").exists());
    assert!(!sb.path("rw/stolen.txt").exists());
    assert!(!sb.path("ro/link").exists());

    // Positive control: every one of those works in the writable grant.
    sb.write("rw/file.txt", "original");
    let run = sb.probe(
        &["--allow-read", &sb.p("ro"), "--allow-write", &sb.p("rw")],
        &[
            &["append", &rw("file.txt"), "+more"],
            &["open_trunc", &rw("mine.txt")],
            &["truncate", &rw("file.txt"), "3"],
            &["rename", &rw("file.txt"), &rw("renamed.txt")],
            &["unlink", &rw("renamed.txt")],
            &["rmdir", &rw("sub")],
            &["symlink", "mine.txt", &rw("link")],
            &["create", &rw("created.txt")],
        ],
    );
    run.assert_ran();
    for i in 0..8 {
        assert_ok(&run.probe(i), &run);
    }
    assert!(!sb.path("rw/sub").exists());
    assert!(sb.path("rw/created.txt").exists());
}

#[test]
fn deny_carve_outs_beneath_grants() {
    let sb = Sandbox::visible();
    sb.write("data/pub.txt", "public");
    sb.write("data/secrets/key.txt", "KEY-MATERIAL");
    sb.write("data/secrets/sub/deep.txt", "DEEP");
    sb.write("out/ok/file.txt", "ok");
    sb.write("out/priv/file.txt", "PRIVATE");
    let pol = sb
        .policy("version: 1\nfilesystem:\n  read: [./data]\n  write: [./out]\n  deny: [./data/secrets, ./out/priv]\n");
    let run = sb.probe(
        &["--policy", &pol],
        &[
            &["read", &sb.p("data/pub.txt")],
            &["read", &sb.p("data/secrets/key.txt")],
            &["listdir", &sb.p("data/secrets")],
            &["read", &sb.p("data/secrets/sub/deep.txt")],
            &["write", &sb.p("out/ok/file.txt"), "changed"],
            &["read", &sb.p("out/priv/file.txt")],
            &["write", &sb.p("out/priv/file.txt"), "evil"],
            &["write", &sb.p("out/priv/new.txt"), "evil"],
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    for i in [1, 2, 3, 5, 6, 7] {
        assert_landlock_refused(&run.probe(i), &run);
    }
    assert_ok(&run.probe(4), &run);
    assert!(!run.stdout.contains("KEY-MATERIAL") && !run.stdout.contains("PRIVATE"));
    assert_eq!(sb.read("out/priv/file.txt"), "PRIVATE");
    assert_eq!(sb.read("out/ok/file.txt"), "changed");
}

/// The credential files of section 2, relative to HOME.
const CREDENTIALS: &[&str] = &[
    ".ssh/id_rsa",
    ".aws/credentials",
    ".gnupg/private-keys-v1.d/key",
    ".config/gcloud/credentials.db",
    ".kube/config",
    ".netrc",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".git-credentials",
    ".config/git/credentials",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".terraform.d/credentials.tfrc.json",
    ".vault-token",
    ".password-store/github.gpg",
    ".local/share/keyrings/login.keyring",
    ".config/op/config",
    ".azure/accessTokens.json",
    ".bash_history",
    ".python_history",
];

fn credential_home(sb: &mut Sandbox) {
    for c in CREDENTIALS {
        sb.write(&format!("home/{c}"), &format!("CREDENTIAL {c}"));
    }
    sb.write("home/notes.txt", "just notes");
    sb.write("home/.bashrc", "# rc");
    sb.write("home/.docker/other.json", "{}");
    // capsule's own config and audit log live beneath HOME for this case.
    let cfg = sb.home.join(".config");
    let st = sb.home.join(".local/state");
    // A valid (empty) host config: capsule reads it, the child must not.
    sb.write(
        "home/.config/capsule/config.yaml",
        "# CREDENTIAL capsule config\n{}\n",
    );
    let log = sb.write(
        "home/.local/state/capsule/audit.jsonl",
        "{\"CREDENTIAL\": \"audit\"}\n",
    );
    // capsule appends only to a 0600 file of the caller's own.
    fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    sb.set_env("XDG_CONFIG_HOME", &cfg.to_string_lossy());
    sb.set_env("XDG_STATE_HOME", &st.to_string_lossy());
}

fn cred_ops(sb: &Sandbox) -> Vec<Vec<String>> {
    let h = |r: &str| sb.home.join(r).to_string_lossy().into_owned();
    let mut ops: Vec<Vec<String>> = vec![vec!["read".into(), h("notes.txt")]];
    for c in CREDENTIALS {
        ops.push(vec!["read".into(), h(c)]);
    }
    ops.push(vec!["read".into(), h(".config/capsule/config.yaml")]);
    ops.push(vec!["read".into(), h(".local/state/capsule/audit.jsonl")]);
    ops.push(vec!["listdir".into(), h(".ssh")]);
    ops
}

fn as_refs(ops: &[Vec<String>]) -> Vec<Vec<&str>> {
    ops.iter()
        .map(|o| o.iter().map(|s| s.as_str()).collect())
        .collect()
}

fn assert_creds_hidden(run: &Run, n_creds: usize) {
    run.assert_ran();
    assert_ok(&run.probe(0), run);
    for i in 1..=n_creds {
        assert_landlock_refused(&run.probe(i), run);
    }
    assert!(
        !run.stdout.contains("CREDENTIAL"),
        "a credential leaked{}",
        run.ctx()
    );
}

#[test]
fn credential_files_unreadable_under_home_read_grant() {
    let mut sb = Sandbox::visible();
    credential_home(&mut sb);
    // `~` expands to the invoking user's home (HOME, a fake one here).
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [\"~\"]\n");
    let ops = cred_ops(&sb);
    let refs = as_refs(&ops);
    let slices: Vec<&[&str]> = refs.iter().map(|v| v.as_slice()).collect();
    let run = sb.probe(&["--policy", &pol], &slices);
    assert_creds_hidden(&run, CREDENTIALS.len() + 3);
}

#[test]
fn credential_files_unreadable_and_unwritable_under_home_write_grant() {
    let mut sb = Sandbox::visible();
    credential_home(&mut sb);
    let h = |r: &str| sb.home.join(r).to_string_lossy().into_owned();
    let run = sb.probe(
        &["--allow-write", &h("")],
        &[
            &["read", &h("notes.txt")],
            &["read", &h(".ssh/id_rsa")],
            &["write", &h(".ssh/authorized_keys"), "ssh-ed25519 EVIL"],
            &["append", &h(".aws/credentials"), "EVIL"],
            &["unlink", &h(".netrc")],
            &["rename", &h(".kube"), &h("kube-stolen")],
            &["write", &h(".bashrc"), "# changed"],
            &["read", &h(".docker/other.json")],
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    // Beneath the write grant (writable in the view too): only Landlock.
    for i in [1, 2, 3, 4] {
        assert_landlock_refused(&run.probe(i), &run);
    }
    assert_errno_exactly(&run.probe(5), &["EACCES", "EXDEV"], &run);
    assert_ok(&run.probe(6), &run);
    // All of ~/.docker is a credential location (contract section 2).
    assert_landlock_refused(&run.probe(7), &run);
    assert!(!sb.home.join(".ssh/authorized_keys").exists());
    assert!(sb.home.join(".netrc").exists());
    assert!(sb.home.join(".kube/config").exists());
    assert_eq!(
        sb.read("home/.aws/credentials"),
        "CREDENTIAL .aws/credentials"
    );
}

#[test]
fn credential_files_unreadable_under_root_read_grant() {
    let mut sb = Sandbox::visible();
    credential_home(&mut sb);
    let ops = cred_ops(&sb);
    let refs = as_refs(&ops);
    let slices: Vec<&[&str]> = refs.iter().map(|v| v.as_slice()).collect();
    let run = sb.probe(&["--allow-read", "/"], &slices);
    assert_creds_hidden(&run, CREDENTIALS.len() + 3);
}

#[test]
fn credential_dir_readable_when_named_exactly() {
    let mut sb = Sandbox::visible();
    credential_home(&mut sb);
    let h = |r: &str| sb.home.join(r).to_string_lossy().into_owned();
    let run = sb.probe(
        &["--allow-read", &h(""), "--allow-read", &h(".ssh")],
        &[
            &["read", &h(".ssh/id_rsa")],
            &["read", &h(".aws/credentials")],
        ],
    );
    run.assert_ran();
    let v = run.probe(0);
    assert_ok(&v, &run);
    assert_eq!(v["value"], "CREDENTIAL .ssh/id_rsa");
    assert_landlock_refused(&run.probe(1), &run);
}

/// A command installed under HOME: its install prefix is granted, the
/// credentials beside it are not (`~/.cargo/bin/tool` vs
/// `~/.cargo/credentials.toml`, `~/.local/bin/tool` vs `~/.local/share/keyrings`).
fn install_prefix_case(bin: &str, public: &str, secret: &str) {
    let sb = Sandbox::visible();
    sb.write(&format!("home/{public}"), "PUBLIC-OK");
    sb.write(&format!("home/{secret}"), "CREDENTIAL-TOKEN");
    let h = |r: &str| sb.home.join(r).to_string_lossy().into_owned();
    let tool = sb.write_exec(
        &format!("home/{bin}"),
        &format!(
            "#!/bin/sh\ncat '{}'; echo \" rc=$?\"\ncat '{}'; echo \" rc=$?\"\n",
            h(public),
            h(secret)
        ),
    );
    let tool = tool.to_string_lossy().into_owned();
    let run = sb.exec_json(&[], &[&tool]);
    run.assert_ran();
    let out = run.child_stdout();
    assert!(
        out.contains("PUBLIC-OK"),
        "the install prefix was not granted{}",
        run.ctx()
    );
    assert!(
        !out.contains("CREDENTIAL-TOKEN"),
        "ESCAPE: {secret} readable through the install prefix of {bin}{}",
        run.ctx()
    );
    // --dry-run says what was carved out and why.
    let dry = sb.run(&["exec", "--dry-run", "--", &tool]);
    dry.assert_code(0);
    let line = dry
        .stdout
        .lines()
        .find(|l| {
            l.trim_start()
                .strip_prefix("deny ")
                .and_then(|rest| rest.split("  ").next())
                .is_some_and(|p| std::path::Path::new(&h(secret)).starts_with(p))
        })
        .unwrap_or_else(|| panic!("--dry-run does not list the carve-out{}", dry.ctx()));
    assert!(line.contains("credential"), "{line}");
}

#[test]
fn cargo_install_prefix_does_not_expose_the_registry_token() {
    install_prefix_case(
        ".cargo/bin/tool",
        ".cargo/registry/index.txt",
        ".cargo/credentials.toml",
    );
}

#[test]
fn local_bin_install_prefix_does_not_expose_the_keyring() {
    install_prefix_case(
        ".local/bin/tool",
        ".local/lib/tool/data.txt",
        ".local/share/keyrings/login.keyring",
    );
}

#[test]
fn audit_log_given_on_the_command_line_is_carved_out_of_read_grants() {
    let sb = Sandbox::visible();
    sb.write("logs/audit.jsonl", "");
    std::fs::set_permissions(
        sb.path("logs/audit.jsonl"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    let log = sb.p("logs/audit.jsonl");
    // One run writes a record; the next tries to read the log under a read grant.
    sb.exec_json(&["--audit-log", &log], &["/bin/true"])
        .assert_code(0);
    let run = sb.probe(
        &["--audit-log", &log, "--allow-read", &sb.p("logs")],
        &[&["read", &log]],
    );
    run.assert_ran();
    assert_landlock_refused(&run.probe(0), &run);
}

/// An install tree `app/` with a secret, its `bin/python3` (a link to the
/// host's), and a run (write grant on `dir`) that writes the executable
/// `script` starting with `#!app/bin/python3`: what a hostile build step
/// plants. The script's path.
fn plant_shebang(sb: &Sandbox, dir: &str, script: &str) -> String {
    sb.mkdir("app/bin");
    sb.write("app/secret.txt", "APP-SECRET");
    std::os::unix::fs::symlink(python(), sb.path("app/bin/python3")).expect("symlink");
    sb.mkdir(Path::new(script).parent().unwrap().to_str().unwrap());
    let script = sb.p(script);
    let body = format!(
        "#!{}\nprint('RAN')\nprint(open('{}').read())\n",
        sb.p("app/bin/python3"),
        sb.p("app/secret.txt")
    );
    let plant = sb.exec_json(
        &["--allow-write", &sb.p(dir)],
        &[
            "/bin/sh",
            "-c",
            &format!("printf '%s' \"$0\" > '{script}' && chmod +x '{script}'"),
            &body,
        ],
    );
    plant.assert_code(0);
    script
}

/// `--dry-run` of `script` under `grant dir` grants nothing of `app/` and
/// says why no install prefix was added.
fn dry_run_adds_no_prefix(sb: &Sandbox, grant: &str, dir: &str, script: &str) {
    let dry = sb.run(&["exec", "--dry-run", grant, dir, "--", script]);
    dry.assert_code(0);
    assert!(
        !dry.stdout.contains(&format!("{}  ", sb.p("app"))),
        "{}",
        dry.ctx()
    );
    assert!(
        dry.stdout.contains("no install prefix") && dry.stdout.contains("#! interpreter"),
        "--dry-run does not say what the command added and why{}",
        dry.ctx()
    );
}

/// One run writes `build/run_tests` whose `#!` names an interpreter inside a
/// host install tree it found (a symlink to the system python3 there); the
/// next run of that "test binary" must not be granted the install tree.
#[test]
fn child_written_shebang_adds_no_install_prefix() {
    let sb = Sandbox::visible();
    let work = sb.p("work");
    let script = plant_shebang(&sb, "work", "work/build/run_tests");
    let run = sb.exec_json(&["--allow-write", &work], &[&script]);
    let out = run.child_stdout();
    assert!(
        !out.contains("APP-SECRET"),
        "ESCAPE: a child-written #! line granted its interpreter's install tree{}",
        run.ctx()
    );
    assert!(
        out.contains("RAN"),
        "the interpreter was not granted{}",
        run.ctx()
    );
    dry_run_adds_no_prefix(&sb, "--allow-write", &work, &script);
}

/// The same plant, run the next time under a policy that only READS the
/// directory: what a run wrote there is still the child's content, whichever
/// policy runs it next (issue 11, item 8), so its `#!` line names no install
/// prefix either.
#[test]
fn child_written_shebang_under_a_read_grant_adds_no_install_prefix() {
    let sb = Sandbox::visible();
    let ws = sb.p("ws");
    let script = plant_shebang(&sb, "ws", "ws/run_tests");
    // By absolute path, and as `./run_tests` from that directory (what a CI
    // step does).
    for (prog, cwd) in [
        (script.as_str(), sb.root.clone()),
        ("./run_tests", sb.path("ws")),
    ] {
        let args = ["exec", "--json", "--allow-read", &ws, "--", prog];
        let run = sb.run_in(&args, &cwd, b"");
        let out = run.child_stdout();
        assert!(
            !out.contains("APP-SECRET"),
            "ESCAPE: a #! line written by an earlier run granted its interpreter's install tree{}",
            run.ctx()
        );
        assert!(
            out.contains("RAN"),
            "the interpreter was not granted{}",
            run.ctx()
        );
    }
    dry_run_adds_no_prefix(&sb, "--allow-read", &ws, &script);
}

/// The symlink form of the same plant: an earlier run leaves `ws/cat`, a
/// symlink to a program inside a host install tree (`app/bin/cat`); running
/// it under a read grant must not grant `app/`.
#[test]
fn child_planted_symlink_under_a_read_grant_adds_no_install_prefix() {
    let sb = Sandbox::visible();
    sb.mkdir("app/bin");
    sb.write("app/secret.txt", "APP-SECRET");
    std::fs::copy("/bin/cat", sb.path("app/bin/cat")).expect("copy cat");
    sb.mkdir("ws");
    let ws = sb.p("ws");
    let plant = sb.exec_json(
        &["--allow-write", &ws],
        &["/bin/ln", "-s", &sb.p("app/bin/cat"), &sb.p("ws/cat")],
    );
    plant.assert_code(0);
    let run = sb.exec_json(
        &["--allow-read", &ws],
        &[&sb.p("ws/cat"), &sb.p("app/secret.txt")],
    );
    assert!(
        !run.child_stdout().contains("APP-SECRET"),
        "ESCAPE: a symlink planted by an earlier run granted its target's install tree{}",
        run.ctx()
    );
    // The program itself (the link's target) is still granted: it ran.
    assert!(
        run.json()["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("secret.txt"),
        "the program did not run{}",
        run.ctx()
    );
}

#[test]
fn symlink_escapes_are_denied() {
    let sb = fixture();
    std::os::unix::fs::symlink(sb.path("outside/secret.txt"), sb.path("ro/planted-link")).unwrap();
    std::os::unix::fs::symlink(sb.path("outside"), sb.path("ro/planted-dir")).unwrap();
    let run = sb.probe(
        &["--allow-read", &sb.p("ro"), "--allow-write", &sb.p("rw")],
        &[
            // made inside the sandbox
            &["symlink", &sb.p("outside/secret.txt"), &sb.p("rw/link")],
            &["read", &sb.p("rw/link")],
            &["symlink", &sb.p("outside"), &sb.p("rw/dirlink")],
            &["read", &sb.p("rw/dirlink/secret.txt")],
            &["write", &sb.p("rw/dirlink/new.txt"), "evil"],
            // planted on the host beforehand
            &["read", &sb.p("ro/planted-link")],
            &["read", &sb.p("ro/planted-dir/secret.txt")],
            // writing through a link into a read-only place
            &["symlink", &sb.p("ro/file.txt"), &sb.p("rw/wlink")],
            &["write", &sb.p("rw/wlink"), "evil"],
            // positive control: a link to a granted file works
            &["symlink", &sb.p("ro/public.txt"), &sb.p("rw/goodlink")],
            &["read", &sb.p("rw/goodlink")],
            // the magic links of the granted /proc/self lead nowhere new
            &[
                "read",
                &format!("/proc/self/root{}", sb.p("outside/secret.txt")),
            ],
            &["read", &format!("/proc/self/root{}", sb.p("ro/public.txt"))],
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(0), &run);
    assert_landlock_refused(&run.probe(1), &run);
    assert_ok(&run.probe(2), &run);
    assert_landlock_refused(&run.probe(3), &run);
    assert_write_refused(&run.probe(4), &run);
    assert_landlock_refused(&run.probe(5), &run);
    assert_landlock_refused(&run.probe(6), &run);
    assert_ok(&run.probe(7), &run);
    assert_write_refused(&run.probe(8), &run);
    assert_ok(&run.probe(9), &run);
    assert_eq!(run.probe(10)["value"], "public data");
    assert_landlock_refused(&run.probe(11), &run);
    assert_eq!(run.probe(12)["value"], "public data", "{}", run.ctx());
    assert!(
        !run.stdout.contains("TOP-SECRET"),
        "secret leaked{}",
        run.ctx()
    );
    assert_eq!(sb.read("ro/file.txt"), "original");
    assert!(!sb.path("outside/new.txt").exists());
}

#[test]
fn hardlink_escapes_are_denied() {
    let sb = fixture();
    let run = sb.probe(
        &["--allow-read", &sb.p("ro"), "--allow-write", &sb.p("rw")],
        &[
            // a file outside every grant, linked into the writable dir
            &["link", &sb.p("outside/secret.txt"), &sb.p("rw/hl-secret")],
            &["read", &sb.p("rw/hl-secret")],
            // a read-only file linked into the writable dir, then written
            &["link", &sb.p("ro/file.txt"), &sb.p("rw/hl-ro")],
            &["append", &sb.p("rw/hl-ro"), "evil"],
            // positive control: a link within the writable dir
            &["link", &sb.p("rw/mine.txt"), &sb.p("rw/hl-mine")],
            &["read", &sb.p("rw/hl-mine")],
        ],
    );
    run.assert_ran();
    // Landlock refuses a link that would widen access (EXDEV); the kernel's
    // protected_hardlinks may refuse first (EPERM); plain denial is EACCES.
    assert_errno(&run.probe(0), &["EXDEV", "EACCES", "EPERM"], &run);
    assert_errno(&run.probe(1), &["ENOENT", "EACCES"], &run);
    assert_errno(&run.probe(2), &["EXDEV", "EACCES", "EPERM"], &run);
    assert_errno(&run.probe(3), &["ENOENT", "EACCES"], &run);
    assert_ok(&run.probe(4), &run);
    assert_eq!(run.probe(5)["value"], "mine");
    assert!(!run.stdout.contains("TOP-SECRET"));
    assert_eq!(sb.read("ro/file.txt"), "original");
    assert!(!sb.path("rw/hl-secret").exists());

    // Within one writable place (one mount, also in the view) only Landlock
    // tells a denied file from its neighbours: a link of it is refused.
    sb.write("rw/priv/key.txt", "PRIVATE-KEY");
    let pol = sb.policy("version: 1\nfilesystem:\n  write: [./rw]\n  deny: [./rw/priv]\n");
    let run = sb.probe(
        &["--policy", &pol],
        &[
            &["link", &sb.p("rw/priv/key.txt"), &sb.p("rw/hl-key")],
            &["read", &sb.p("rw/hl-key")],
        ],
    );
    run.assert_ran();
    assert_errno_exactly(&run.probe(0), &["EXDEV", "EACCES"], &run);
    assert_errno_exactly(&run.probe(1), &["ENOENT"], &run);
    assert!(!run.stdout.contains("PRIVATE-KEY"), "{}", run.ctx());
    assert!(!sb.path("rw/hl-key").exists());
}

#[test]
fn exec_from_writable_places_is_denied() {
    let sb = fixture();
    sb.write_exec("bin/ok.sh", "#!/bin/sh\nexit 0\n");
    let sh = "#!/bin/sh\nexit 0\n";
    let run = sb.probe(
        &["--allow-write", &sb.p("rw"), "--allow-exec", &sb.p("bin")],
        &[
            &["write", &sb.p("rw/x.sh"), sh],
            &["chmodx", &sb.p("rw/x.sh")],
            &["exec", &sb.p("rw/x.sh")],
            &["copy", "/bin/true", &sb.p("rw/true")],
            &["chmodx", &sb.p("rw/true")],
            &["exec", &sb.p("rw/true")],
            &["tmp_exec"],
            // positive control: exec from an exec grant (and clone3 fallback)
            &["exec", &sb.p("bin/ok.sh")],
            &["exec", "/bin/true"],
        ],
    );
    run.assert_ran();
    assert_ok(&run.probe(1), &run);
    assert_errno(&run.probe(2), &["EACCES"], &run);
    assert_ok(&run.probe(4), &run);
    assert_errno(&run.probe(5), &["EACCES"], &run);
    assert_errno(&run.probe(6), &["EACCES"], &run);
    let ok = run.probe(7);
    assert_ok(&ok, &run);
    assert_eq!(ok["value"], 0);
    assert_eq!(run.probe(8)["value"], 0);
}

/// Whether the run had a private /tmp (the view): then /tmp writes stay in it.
fn private_tmp(run: &Run) -> bool {
    run.json()["enforcement"]["view"]["private_tmp"] == true
}

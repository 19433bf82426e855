//! What the packages ship besides `capsule exec`: `--version` (version,
//! commit, what the build knows), shell completions and the man page.

mod common;

use common::Sandbox;

const SUBCOMMANDS: [&str; 8] = [
    "exec",
    "serve",
    "check",
    "why",
    "doctor",
    "policy",
    "volume",
    "completions",
];

#[test]
fn version_states_version_commit_and_what_the_build_knows() {
    let sb = Sandbox::new();
    let run = sb.run(&["--version"]);
    run.assert_code(0);
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("capsule {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{}",
        run.ctx()
    );
    let commit = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit line{}", run.ctx()));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "commit {commit:?}"
    );
    assert!(run.stdout.contains("landlock: ABI 1 to "), "{}", run.ctx());
    assert!(
        run.stdout
            .contains(&format!("seccomp: {}", std::env::consts::ARCH)),
        "{}",
        run.ctx()
    );
    let short = sb.run(&["-V"]);
    short.assert_code(0);
    assert_eq!(short.stdout.lines().count(), 1, "{}", short.ctx());
}

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    let sb = Sandbox::new();
    for shell in ["bash", "zsh", "fish"] {
        let run = sb.run(&["completions", shell]);
        run.assert_code(0);
        for sub in SUBCOMMANDS {
            assert!(
                run.stdout.contains(sub),
                "{shell} completions do not name `{sub}`{}",
                run.ctx()
            );
        }
    }
    let bad = sb.run(&["completions", "tcsh"]);
    assert_ne!(bad.code, Some(0), "{}", bad.ctx());
}

#[test]
fn man_page_is_roff_naming_the_subcommands() {
    let sb = Sandbox::new();
    let run = sb.run(&["man"]);
    run.assert_code(0);
    assert!(run.stdout.contains(".TH capsule 1"), "{}", run.ctx());
    for sub in SUBCOMMANDS {
        assert!(run.stdout.contains(sub), "man page lacks `{sub}`");
    }
    // `--version` is several lines: the section keeps them (no fill).
    let version = run.stdout.split("\n.SH VERSION\n").nth(1).unwrap_or("");
    assert!(
        version.starts_with(".nf\n")
            && version.contains("\ntarget: ")
            && version.trim_end().ends_with(".fi"),
        "VERSION section filled into one line:\n{version}"
    );
    let dir = sb.path("man1");
    let run = sb.run(&["man", "--dir", &dir.to_string_lossy()]);
    run.assert_code(0);
    for page in [
        "capsule.1",
        "capsule-exec.1",
        "capsule-why.1",
        "capsule-volume.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap_or_default();
        assert!(text.contains(".TH"), "{page} missing or empty");
    }
}

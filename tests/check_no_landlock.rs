//! `capsule check` and `--dry-run` on a kernel without Landlock (5.10),
//! reproduced here by running capsule under a seccomp filter that makes the
//! landlock_* syscalls fail with ENOSYS (tests/probes/no_landlock.c): the
//! report says "not enforced: <why>", never "enforced by NOT ENFORCED", and
//! `exec` refuses (exit 125) rather than run unconfined.

mod common;

use common::*;
use std::process::{Command, Stdio};

const NO_LANDLOCK_C: &str = include_str!("probes/no_landlock.c");

fn no_landlock_wrapper(sb: &Sandbox) -> Option<std::path::PathBuf> {
    let src = sb.write("nl/no_landlock.c", NO_LANDLOCK_C);
    let out = sb.path("nl/no_landlock");
    for cc in ["gcc", "cc", "clang"] {
        let st = Command::new(cc)
            .args(["-O0", "-o"])
            .arg(&out)
            .arg(&src)
            .env("PATH", TEST_PATH)
            .env("TMPDIR", &sb.root)
            .stdout(Stdio::null())
            .status();
        if matches!(st, Ok(s) if s.success()) {
            return Some(out);
        }
    }
    skip("no working C compiler to build tests/probes/no_landlock.c");
    None
}

#[test]
fn check_without_landlock_says_not_enforced_and_why() {
    let sb = Sandbox::new();
    let Some(wrap) = no_landlock_wrapper(&sb) else {
        return;
    };
    let pol = sb.policy("version: 1\n");
    let bin = capsule_bin();
    let c = sb.std_command([
        bin.as_os_str(),
        "check".as_ref(),
        "-p".as_ref(),
        pol.as_ref(),
    ]);
    // std_command runs capsule: swap the program for the wrapper, argv kept.
    let args: Vec<_> = c.get_args().map(|a| a.to_os_string()).collect();
    let envs: Vec<_> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
        .collect();
    let out = Command::new(&wrap)
        .arg(&bin)
        .args(&args[1..])
        .env_clear()
        .envs(envs)
        .current_dir(&sb.root)
        .output()
        .expect("run capsule under the wrapper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("enforced by NOT ENFORCED"),
        "check prints a contradiction:\n{stdout}"
    );
    assert!(
        stdout.contains("not enforced: this kernel has no Landlock"),
        "check does not say why the filesystem is not enforced:\n{stdout}"
    );
    assert_eq!(out.status.code(), Some(125), "{stdout}");
}

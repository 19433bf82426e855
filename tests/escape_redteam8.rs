//! Red team 8: what the unsandboxed side does later with what a run left
//! (volumes, the Python/serve callers), written as the attack and run
//! against the real binary.
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! through `capsule serve`); a case that needs a shape this host lacks says
//! so and skips. Each case takes a few seconds at most.

mod common;

use std::process::{Command as StdCommand, Stdio};

use common::*;

/// A sandbox whose data directory (and so its volumes) is `ROOT/data`.
fn with_data_home() -> (Sandbox, std::path::PathBuf) {
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    (sb, data.join("capsule/volumes"))
}

/// `capsule volume rm NAME` with the soft descriptor limit at `nofile`, as a
/// login shell's default (1024) or a CI runner's lower one gives it.
fn volume_rm(sb: &Sandbox, name: &str, nofile: u32) -> std::process::Output {
    let mut c = sb.std_command(["volume", "rm", name]);
    let envs: Vec<(std::ffi::OsString, std::ffi::OsString)> = c
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let mut sh = StdCommand::new("/bin/sh");
    sh.arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(c.get_program())
        .args(c.get_args())
        .env_clear()
        .envs(envs)
        .current_dir(&sb.root)
        .stdin(Stdio::null());
    c = sh;
    c.output().expect("run capsule volume rm")
}

/// A volume is the one place a run writes that capsule itself removes later,
/// on the host user's word (`capsule volume rm`), like the run's TMPDIR
/// after each run. The TMPDIR's removal walks iteratively with a bounded
/// number of descriptors and gives a `chmod 000`/`0500` directory its
/// owner's rights back at any depth (`src/supervisor/cleanup.rs`); the
/// volume's used std's `remove_dir_all`, which holds a descriptor per level,
/// and a 256-level bound on restoring modes. A run with the volume mounted
/// read-write leaves a chain of directories deeper than the descriptor limit
/// (and, for a non-root owner, a mode-0500 directory below level 256): `rm`
/// fails with EMFILE (EACCES) and the volume, with what the run wrote in
/// it, stays; `rm -f` cannot remove it either.
#[test]
fn a_run_cannot_make_its_volume_unremovable() {
    let (sb, vols) = with_data_home();
    sb.run(&["volume", "create", "deep"]).assert_code(0);
    let vol = vols.join("deep");
    // Mounted at its own path: the run needs no mount namespace for that.
    let mount = format!("volume:deep:{}:rw", vol.display());
    let script = "import os, sys\n\
                  os.chdir(sys.argv[1])\n\
                  for i in range(700):\n\
                  \x20   os.mkdir('d'); os.chdir('d')\n\
                  open('left-by-the-run', 'w').write('x')\n\
                  os.chdir(sys.argv[1])\n\
                  p = 'd/' * 301\n\
                  os.chmod(p, 0o500)\n\
                  print('planted')\n";
    let vol_s = vol.to_string_lossy().into_owned();
    let r = sb.exec_json(&["--mount", &mount], &[&python(), "-c", script, &vol_s]);
    if r.code == Some(125) {
        skip(&format!(
            "the run could not mount the volume here:{}",
            r.ctx()
        ));
        return;
    }
    assert!(r.child_stdout().contains("planted"), "{}", r.ctx());
    let out = volume_rm(&sb, "deep", 256);
    assert!(
        !vol.exists(),
        "`capsule volume rm` left the volume the run shaped (exit {:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!vols.join(".deep.json").exists(), "its metadata stayed");
}

//! The private TMPDIR is removed after the run whatever the child left in it
//! (issue 11, "Cleanup that the child cannot defeat"): a chain of directories
//! deeper than capsule's descriptor limit, mode-000 directories (the TMPDIR
//! itself included), symlinks pointing out of it at host directories (whose
//! contents and modes must survive), a huge sparse file. What cannot be
//! removed is reported in the result (`left_behind`) and on stderr.
//!
//! Every case runs as the invoking user and as `nobody` (root needed to become
//! it), with the run's namespaces (inside the view the TMPDIR is /tmp; the host
//! side is `$TMPDIR/capsule-RUNID` of capsule's own environment) and without
//! (`CAPSULE_NO_NAMESPACES=1`: the child sees the host path). capsule runs
//! with `ulimit -n 1024`, the usual default soft limit, and a `TMPDIR` of the
//! test's own, which must be empty after the run.

mod proxy_support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use proxy_support::{
    capsule_bin, nobody_bin, runnable_or_skip, shared_tempdir, NetPath, Variant, Who, PYTHON,
    TEST_PATH,
};
use serde_json::Value;

/// One `#[test]` per variant for each case.
macro_rules! matrix {
    ($case:ident) => {
        mod $case {
            use super::*;
            #[test]
            fn invoker_namespaces() {
                run(Variant {
                    who: Who::Invoker,
                    path: NetPath::Netns,
                })
            }
            #[test]
            fn invoker_no_namespaces() {
                run(Variant {
                    who: Who::Invoker,
                    path: NetPath::Fallback,
                })
            }
            #[test]
            fn nobody_namespaces() {
                run(Variant {
                    who: Who::Nobody,
                    path: NetPath::Netns,
                })
            }
            #[test]
            fn nobody_no_namespaces() {
                run(Variant {
                    who: Who::Nobody,
                    path: NetPath::Fallback,
                })
            }
            fn run(v: Variant) {
                if runnable_or_skip(v) {
                    super::$case(v)
                }
            }
        }
    };
}

struct Ran {
    status: i32,
    json: Value,
    stderr: String,
}

impl Ran {
    fn describe(&self) -> String {
        format!(
            "capsule exit {}; result {}; capsule stderr {}",
            self.status, self.json, self.stderr
        )
    }
}

/// `capsule exec --json -- python3 -c SCRIPT ARGS...` as `v` says, with
/// capsule's TMPDIR set to `host_tmp` and at most 1024 open descriptors.
fn exec(v: Variant, host_tmp: &Path, script: &str, args: &[&str]) -> Ran {
    exec_with(v, host_tmp, &[], script, args)
}

/// [`exec`] with capsule options `opts`.
fn exec_with(v: Variant, host_tmp: &Path, opts: &[&str], script: &str, args: &[&str]) -> Ran {
    let home = shared_tempdir("capsule-cleanup-home-");
    let bin = match v.who {
        Who::Invoker => capsule_bin(),
        Who::Nobody => nobody_bin().to_path_buf(),
    };
    let mut full: Vec<String> = vec![];
    if v.who == Who::Nobody {
        full.extend(["runuser", "-u", "nobody", "--"].map(String::from));
    }
    full.extend(["/bin/sh", "-c", "ulimit -n 1024 && exec \"$@\"", "sh"].map(String::from));
    full.extend(["/usr/bin/env", "-i"].map(String::from));
    full.push(format!("PATH={TEST_PATH}"));
    full.push(format!("HOME={}", home.path().display()));
    full.push(format!("XDG_STATE_HOME={}", home.path().display()));
    full.push(format!("XDG_CONFIG_HOME={}", home.path().display()));
    full.push(format!("TMPDIR={}", host_tmp.display()));
    if v.path == NetPath::Fallback {
        full.push("CAPSULE_NO_NAMESPACES=1".into());
    }
    full.push(bin.display().to_string());
    full.extend(["exec", "--json"].map(String::from));
    full.extend(opts.iter().map(|s| s.to_string()));
    full.extend(["--", PYTHON, "-c", script].map(String::from));
    full.extend(args.iter().map(|s| s.to_string()));
    let out = assert_cmd::Command::new(&full[0])
        .args(&full[1..])
        .current_dir(home.path())
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run capsule");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "capsule printed no JSON result ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Ran {
        status: out.status.code().unwrap_or(-1),
        json,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The run did what `script` set up (it printed `expect`), and its TMPDIR is gone
/// from `host_tmp` with nothing reported left behind.
fn assert_removed(r: &Ran, host_tmp: &Path, expect: &str) {
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(
        r.json["stdout"].as_str().unwrap_or_default().trim(),
        expect,
        "the attack did not run as planned: {}",
        r.describe()
    );
    let left: Vec<String> = fs::read_dir(host_tmp)
        .expect("read the host TMPDIR")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.is_empty(),
        "the private TMPDIR was left behind in {}: {left:?}; {}",
        host_tmp.display(),
        r.describe()
    );
    assert!(
        r.json.get("left_behind").is_none(),
        "left_behind reported although removed: {}",
        r.describe()
    );
}

/// 1,500 nested directories, a file at the bottom: more levels than
/// descriptors, the depth at which `remove_dir_all` stopped.
const DEEP: &str = r#"
import os
os.chdir(os.environ["TMPDIR"])
for i in range(1500):
    os.mkdir("d")
    os.chdir("d")
with open("data", "w") as f:
    f.write("the child's data")
print("deep", len(os.getcwd().split("/d")) - 1)
"#;

fn deep_chain_is_removed(v: Variant) {
    let host = shared_tempdir("capsule-cleanup-tmp-");
    let r = exec(v, host.path(), DEEP, &[]);
    assert_removed(&r, host.path(), "deep 1500");
}
matrix!(deep_chain_is_removed);

/// Directories with mode 000 and 0500 holding files, nested, and the TMPDIR
/// itself mode 000 at the end: as an unprivileged user (no CAP_DAC_OVERRIDE)
/// nothing in them can be removed until their modes are fixed.
const LOCKED: &str = r#"
import os
t = os.environ["TMPDIR"]
os.makedirs(t + "/locked/inner/deeper")
for p in ("/locked/f", "/locked/inner/f", "/locked/inner/deeper/f"):
    with open(t + p, "w") as f:
        f.write("the child's data")
os.makedirs(t + "/readonly")
with open(t + "/readonly/f", "w") as f:
    f.write("x")
os.chmod(t + "/readonly", 0o500)
os.chmod(t + "/locked/inner/deeper", 0)
os.chmod(t + "/locked/inner", 0)
os.chmod(t + "/locked", 0)
os.chmod(t, 0)
print("locked")
"#;

fn mode_000_directories_are_removed(v: Variant) {
    let host = shared_tempdir("capsule-cleanup-tmp-");
    let r = exec(v, host.path(), LOCKED, &[]);
    assert_removed(&r, host.path(), "locked");
}
matrix!(mode_000_directories_are_removed);

/// Symlinks to a host directory (and into it) planted in the TMPDIR, some of
/// them inside a mode-000 directory: removing the TMPDIR unlinks them and
/// never touches what they point at.
const LINKS: &str = r#"
import os, sys
t, precious = os.environ["TMPDIR"], sys.argv[1]
os.symlink(precious, t + "/link")
os.symlink(precious + "/locked", t + "/locked-link")
os.symlink(precious + "/keep.txt", t + "/file-link")
os.makedirs(t + "/d/e")
os.symlink(precious, t + "/d/e/up")
os.symlink("../../../../../../../../../../.." + precious, t + "/d/relative")
os.chmod(t + "/d/e", 0)
os.chmod(t + "/d", 0)
print("linked")
"#;

fn symlinks_out_of_the_tmpdir_are_not_followed(v: Variant) {
    let host = shared_tempdir("capsule-cleanup-tmp-");
    // A host directory of the test's (owned by whoever runs capsule).
    let outer = shared_tempdir("capsule-cleanup-precious-");
    let precious = outer.path().join("precious");
    fs::create_dir_all(precious.join("locked")).expect("mkdir");
    fs::write(precious.join("keep.txt"), "keep").expect("write");
    fs::write(precious.join("locked/keep.txt"), "keep").expect("write");
    if v.who == Who::Nobody {
        let uid = nobody_uid();
        for p in [&precious, &precious.join("locked")] {
            std::os::unix::fs::chown(p, Some(uid), None).expect("chown");
        }
    }
    fs::set_permissions(precious.join("locked"), fs::Permissions::from_mode(0o000)).expect("chmod");
    let r = exec(v, host.path(), LINKS, &[&precious.display().to_string()]);
    let locked_mode = fs::metadata(precious.join("locked"))
        .expect("the host directory's locked/ is gone")
        .mode();
    fs::set_permissions(precious.join("locked"), fs::Permissions::from_mode(0o700)).expect("chmod");
    assert_eq!(
        locked_mode & 0o7777,
        0,
        "cleanup changed the mode of a host directory outside the TMPDIR: {}",
        r.describe()
    );
    assert_eq!(
        fs::read_to_string(precious.join("keep.txt")).unwrap_or_default(),
        "keep",
        "cleanup removed a file outside the TMPDIR: {}",
        r.describe()
    );
    assert_eq!(
        fs::read_to_string(precious.join("locked/keep.txt")).unwrap_or_default(),
        "keep",
        "cleanup removed a file outside the TMPDIR: {}",
        r.describe()
    );
    assert_removed(&r, host.path(), "linked");
}
matrix!(symlinks_out_of_the_tmpdir_are_not_followed);

/// A 1 TiB sparse file (a few blocks on disk) beside a mode-000 directory.
const SPARSE: &str = r#"
import os
t = os.environ["TMPDIR"]
with open(t + "/huge", "wb") as f:
    f.seek((1 << 40) - 1)
    f.write(b"x")
os.makedirs(t + "/z")
os.rename(t + "/huge", t + "/z/huge")
os.chmod(t + "/z", 0)
print("sparse", os.stat(t).st_mode & 0o777 != 0)
"#;

fn huge_sparse_file_is_removed(v: Variant) {
    let host = shared_tempdir("capsule-cleanup-tmp-");
    let r = exec(v, host.path(), SPARSE, &[]);
    assert_removed(&r, host.path(), "sparse True");
}
matrix!(huge_sparse_file_is_removed);

/// The child plants files, then waits while the test (root) makes one of
/// them immutable on the host side, as nothing capsule may override: the rest
/// goes, and what stayed is named in the result and on stderr (not only
/// under `-v`).
const STUCK: &str = r#"
import os, sys, time
t, h = os.environ["TMPDIR"], sys.argv[1]
os.makedirs(t + "/keep/sub")
for p in ("/keep/sub/stuck", "/keep/gone", "/gone"):
    with open(t + p, "w") as f:
        f.write("the child's data")
open(h + "/ready", "w").close()
for _ in range(1200):
    if os.path.exists(h + "/go"):
        break
    time.sleep(0.05)
print("planted")
"#;

fn what_stays_is_reported(v: Variant) {
    if !proxy_support::nobody_available() {
        proxy_support::skip("needs root (and a `nobody` user)");
        return;
    }
    let host = shared_tempdir("capsule-cleanup-tmp-");
    let handoff = shared_tempdir("capsule-cleanup-handoff-");
    let h = handoff.path().to_path_buf();
    let host_tmp = host.path().to_path_buf();
    // The test's side: once the child has planted its files, pin one.
    let pin = std::thread::spawn(move || -> Option<std::path::PathBuf> {
        for _ in 0..1200 {
            if h.join("ready").exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let run_dir = fs::read_dir(&host_tmp).ok()?.next()?.ok()?.path();
        let stuck = run_dir.join("keep/sub/stuck");
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&stuck)
            .status()
            .is_ok_and(|s| s.success());
        fs::write(h.join("go"), "").expect("go");
        ok.then_some(stuck)
    });
    let hp = handoff.path().display().to_string();
    let r = exec_with(v, host.path(), &["--allow-write", &hp], STUCK, &[&hp]);
    let stuck = pin.join().expect("pin thread");
    let Some(stuck) = stuck else {
        proxy_support::skip("chattr +i is not supported on the file system of the host's /tmp");
        return;
    };
    let unpin = std::process::Command::new("chattr")
        .arg("-i")
        .arg(&stuck)
        .status();
    assert!(
        unpin.is_ok_and(|s| s.success()),
        "chattr -i {}",
        stuck.display()
    );
    assert_eq!(r.status, 0, "{}", r.describe());
    assert_eq!(r.json["stdout"], "planted\n", "{}", r.describe());
    let run_dir = stuck.parent().unwrap().parent().unwrap().parent().unwrap();
    let left: Vec<String> = r.json["left_behind"]
        .as_array()
        .unwrap_or_else(|| panic!("no left_behind in the result: {}", r.describe()))
        .iter()
        .map(|l| l.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        left,
        [format!("{}: Operation not permitted", stuck.display())],
        "{}",
        r.describe()
    );
    assert!(
        r.stderr.contains("capsule: warning: the private TMPDIR")
            && r.stderr.contains("keep/sub/stuck"),
        "not said on stderr: {}",
        r.describe()
    );
    // Everything else went.
    assert!(!run_dir.join("gone").exists(), "{}", r.describe());
    assert!(!run_dir.join("keep/gone").exists(), "{}", r.describe());
}
matrix!(what_stays_is_reported);

fn nobody_uid() -> u32 {
    let out = std::process::Command::new("id")
        .args(["-u", "nobody"])
        .output()
        .expect("id -u nobody");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("nobody's uid")
}

//! Truncation where neither Landlock's truncate right (ABI 3) nor the run's
//! read-only view exists: no user namespaces (`CAPSULE_NO_NAMESPACES=1`) and
//! Landlock ABI 1 or 2 (`CAPSULE_LANDLOCK_ABI_MAX`; Debian 12's 6.1 has ABI
//! 2, Ubuntu 22.04's 5.15 ABI 1). Landlock then checks only how a file is
//! opened: `truncate(path)` needs no right at all and `open(O_RDONLY |
//! O_TRUNC)` only the read right. The seccomp truncate guard is the layer:
//! the sandboxed command must not shorten a file outside its write grants by
//! either route, and must still write, truncate-on-open and ftruncate inside
//! them. (Without the guard capsule refused these runs unless --best-effort,
//! which made the default policy unusable there.)

mod common;

use common::*;
use serde_json::Value;

const PROBE: &str = r#"
import json, os, sys
out = {}
def t(name, f):
    try:
        f()
        out[name] = "ok"
    except OSError as e:
        out[name] = os.strerror(e.errno)
outside, ro, rw = sys.argv[1:4]
t("truncate_outside", lambda: os.truncate(outside, 0))
t("rdonly_trunc_ro", lambda: os.close(os.open(ro, os.O_RDONLY | os.O_TRUNC)))
t("rdonly_trunc_outside", lambda: os.close(os.open(outside, os.O_RDONLY | os.O_TRUNC)))
t("wronly_trunc_ro", lambda: os.close(os.open(ro, os.O_WRONLY | os.O_TRUNC)))
def rw_work():
    with open(rw, "w") as f:          # O_WRONLY|O_CREAT|O_TRUNC
        f.write("rewritten and long")
    fd = os.open(rw, os.O_RDWR)
    os.ftruncate(fd, 9)
    os.close(fd)
t("rw_write_and_ftruncate", rw_work)
t("truncate_rw_by_path", lambda: os.truncate(rw, 1))
print(json.dumps(out))
"#;

fn fallback(abi: &str) -> Sandbox {
    let mut sb = Sandbox::new();
    sb.set_env("CAPSULE_NO_NAMESPACES", "1");
    sb.set_env("CAPSULE_LANDLOCK_ABI_MAX", abi);
    sb
}

#[test]
fn no_file_outside_a_write_grant_is_shortened_on_landlock_abi_1_and_2_without_namespaces() {
    if landlock_abi() < 1 {
        skip("this kernel has no Landlock");
        return;
    }
    for abi in ["1", "2"] {
        let sb = fallback(abi);
        sb.write("outside/file.txt", "outside content");
        sb.write("ro/file.txt", "read-only content");
        sb.write("rw/file.txt", "old");
        let args = [
            sb.p("outside/file.txt"),
            sb.p("ro/file.txt"),
            sb.p("rw/file.txt"),
        ];
        let run = sb.exec_json(
            &["--allow-read", &sb.p("ro"), "--allow-write", &sb.p("rw")],
            &[&python(), "-c", PROBE, &args[0], &args[1], &args[2]],
        );
        // Runs without --best-effort: the guard is an enforcing layer.
        run.assert_code(0);
        let j = run.json();
        assert_eq!(
            j["enforcement"]["landlock_abi"],
            abi.parse::<u64>().unwrap(),
            "{}",
            run.ctx()
        );
        let out: Value = serde_json::from_str(j["stdout"].as_str().unwrap_or_default().trim())
            .unwrap_or_else(|_| panic!("probe output{}", run.ctx()));
        let denied = |k: &str| {
            let v = out[k].as_str().unwrap_or_default();
            assert!(
                v == "Operation not permitted" || v == "Permission denied",
                "ESCAPE? {k} = {v} (ABI {abi}){}",
                run.ctx()
            );
        };
        denied("truncate_outside");
        denied("rdonly_trunc_ro");
        denied("rdonly_trunc_outside");
        denied("wronly_trunc_ro");
        assert_eq!(
            sb.read("outside/file.txt"),
            "outside content",
            "ESCAPE: truncated"
        );
        assert_eq!(
            sb.read("ro/file.txt"),
            "read-only content",
            "ESCAPE: truncated"
        );
        // Inside the write grant: writing, truncate-on-open and ftruncate work;
        // truncate() by path is the documented price.
        assert_eq!(out["rw_write_and_ftruncate"], "ok", "{}", run.ctx());
        assert_eq!(sb.read("rw/file.txt"), "rewritten", "{}", run.ctx());
        assert_eq!(
            out["truncate_rw_by_path"],
            "Operation not permitted",
            "{}",
            run.ctx()
        );
        let lim = j["enforcement"]["limitations"].to_string();
        assert!(
            lim.contains("truncate protection by seccomp"),
            "{lim}{}",
            run.ctx()
        );
    }
}

#[test]
fn check_predicts_the_guard() {
    if landlock_abi() < 1 {
        skip("this kernel has no Landlock");
        return;
    }
    let sb = fallback("2");
    let pol = sb.policy("version: 1\n");
    let run = sb.run(&["check", "--policy", &pol]);
    run.assert_code(0);
    assert!(
        run.stdout.contains("truncate protection by seccomp"),
        "{}",
        run.stdout
    );
}

/// `open(path, 3 | ...)`: access mode 3 opens for neither reading nor
/// writing (the kernel checks read AND write permission, then hands out a
/// descriptor for ioctls only). Landlock's open hook asks for no right for
/// it, so below ABI 3 without the view `3 | O_TRUNC` empties any file the
/// run's user may write, and at every ABI such a descriptor reaches ioctls
/// (`FS_IOC_SETFLAGS`) on files outside every grant. seccomp refuses access
/// mode 3 for `open`/`openat` in every mode, and `openat2` (whose flags lie
/// behind a pointer) answers ENOSYS, so callers fall back to `openat`.
#[test]
fn open_access_mode_3_is_refused_in_every_mode() {
    let abi = landlock_abi();
    let mut configs: Vec<Option<&str>> = vec![None];
    for a in ["1", "2", "3"] {
        if abi >= a.parse::<i64>().unwrap() {
            configs.push(Some(a));
        }
    }
    for cfg in configs {
        let mut sb = Sandbox::new();
        if let Some(a) = cfg {
            sb.set_env("CAPSULE_NO_NAMESPACES", "1");
            sb.set_env("CAPSULE_LANDLOCK_ABI_MAX", a);
        }
        sb.write("outside/file.txt", "outside content");
        sb.write("outside/control.txt", "control content");
        sb.write("rw/file.txt", "rw content");
        let (outside, rw) = (sb.p("outside/file.txt"), sb.p("rw/file.txt"));
        let trunc = "0o1000"; // O_TRUNC
        let ops: &[&[&str]] = &[
            &["open_mode3", &outside, trunc],
            &["open_mode3", &outside],
            &["open_mode3", &rw],
            &["open_mode3", &rw, "0o2001000"], // O_TRUNC|O_CLOEXEC
            &["open_mode3_setflags", &outside],
            &["openat2", &outside, trunc],
            &["openat2", &rw],
            &["read", &rw],
        ];
        // --allow-read of `outside`'s directory is NOT given: outside every grant.
        let run = sb.probe(&["--allow-write", &sb.p("rw")], ops);
        run.assert_ran();
        let what = format!("(config {cfg:?})");
        for i in 0..5 {
            assert_errno(&run.probe(i), &["EPERM"], &run);
        }
        assert_errno(&run.probe(5), &["ENOSYS"], &run);
        assert_errno(&run.probe(6), &["ENOSYS"], &run);
        assert_eq!(run.probe(7)["value"], "rw content", "{what}{}", run.ctx());
        assert_eq!(
            sb.read("outside/file.txt"),
            "outside content",
            "ESCAPE {what}: emptied through access mode 3"
        );
        assert_eq!(sb.read("rw/file.txt"), "rw content", "{what}");

        // Positive control: on the host, mode 3 | O_TRUNC opens and empties
        // a file the user may write, and openat2 exists.
        let host = sb.host_probe(&[
            &["open_mode3", &sb.p("outside/control.txt"), trunc],
            &["openat2", &rw],
        ]);
        assert_eq!(host[0]["ok"], true, "host control: {host:?}");
        assert_eq!(sb.read("outside/control.txt"), "", "host control");
        assert_eq!(host[1]["ok"], true, "host control: {host:?}");
    }
}

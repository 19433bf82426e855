//! `capsule why`: its answers against the starter policies, and agreement
//! with `exec`: for every filesystem question `why` answers, a confined probe
//! of the same access must succeed exactly when `why` says "allowed".
//!
//! Runs in every pass of scripts/test (root, capsule-test, no namespaces,
//! lowered Landlock ABIs): the expected layers follow what this host gives.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use serde_json::Value;

/// One question: the `why` flag, the path, and the probe op that tries it.
#[derive(Debug, Clone)]
struct Q {
    flag: &'static str,
    path: String,
    op: &'static str,
}

impl Q {
    fn read(p: String) -> Q {
        Q {
            flag: "read",
            path: p,
            op: "read",
        }
    }
    fn list(p: String) -> Q {
        Q {
            flag: "read",
            path: p,
            op: "listdir",
        }
    }
    fn append(p: String) -> Q {
        Q {
            flag: "write",
            path: p,
            op: "append",
        }
    }
    fn create(p: String) -> Q {
        Q {
            flag: "write",
            path: p,
            op: "create",
        }
    }
    fn mkdir(p: String) -> Q {
        Q {
            flag: "write",
            path: p,
            op: "mkdir",
        }
    }
    fn exec(p: String) -> Q {
        Q {
            flag: "exec",
            path: p,
            op: "exec",
        }
    }
    fn truncate(p: String) -> Q {
        Q {
            flag: "truncate",
            path: p,
            op: "truncate",
        }
    }
    fn chmod(p: String) -> Q {
        Q {
            flag: "chmod",
            path: p,
            op: "chmodx",
        }
    }
    fn question(&self) -> String {
        format!("{} {}", self.flag, self.path)
    }
}

/// `capsule why --json -p POLICY ARGS`: (exit code, the JSON).
fn why(sb: &Sandbox, policy: &str, args: &[String]) -> (Option<i32>, Value) {
    let mut all = vec![
        "why".to_string(),
        "--json".into(),
        "-p".into(),
        policy.into(),
    ];
    all.extend(args.iter().cloned());
    let r = sb.run(&all);
    assert!(matches!(r.code, Some(0 | 1)), "why failed:{}", r.ctx());
    (r.code, r.json())
}

/// The answers of `why`, keyed by question.
fn answers(v: &Value) -> BTreeMap<String, Value> {
    v["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| (a["question"].as_str().unwrap().to_string(), a.clone()))
        .collect()
}

/// Ask `why` and try each access in one confined probe; assert they agree.
/// Returns the answers for further checks.
fn agree(sb: &Sandbox, policy: &str, qs: &[Q], ctx: &str) -> BTreeMap<String, Value> {
    agree_with(sb, policy, &[], qs, ctx)
}

/// [`agree`] with further options for both `why` and `exec`.
fn agree_with(
    sb: &Sandbox,
    policy: &str,
    opts: &[&str],
    qs: &[Q],
    ctx: &str,
) -> BTreeMap<String, Value> {
    let mut args: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
    for q in qs {
        args.push(format!("--{}", q.flag));
        args.push(q.path.clone());
    }
    let (_, v) = why(sb, policy, &args);
    let ans = answers(&v);
    let ops: Vec<Vec<&str>> = qs.iter().map(|q| vec![q.op, q.path.as_str()]).collect();
    let refs: Vec<&[&str]> = ops.iter().map(|o| o.as_slice()).collect();
    let mut exec_opts = vec!["-p", policy];
    exec_opts.extend_from_slice(opts);
    let run = sb.probe(&exec_opts, &refs);
    run.assert_ran();
    let probes = run.probes();
    assert_eq!(probes.len(), qs.len(), "probe lines:{}", run.ctx());
    for (q, p) in qs.iter().zip(&probes) {
        let a = &ans[&q.question()];
        let mut did = p["ok"] == true;
        if q.op == "exec" {
            did = did && p["value"] == 0;
        }
        if q.op == "read" && did && a["allowed"] == false {
            // The view covers a secret with /dev/null: it opens, empty.
            did = p["value"] != "";
        }
        assert_eq!(
            a["allowed"] == true,
            did,
            "why and exec disagree on `{}` ({ctx}):\nwhy: {a:#}\nprobe: {p}\nhost: {}",
            q.question(),
            v["host"]
        );
    }
    ans
}

/// The starter policies, with the same answers as exec gives.
#[test]
fn starter_policies_table() {
    let sb = Sandbox::new();
    let init = |name: &str| {
        let r = sb.run(&["policy", "init", name]);
        assert_eq!(r.code, Some(0), "{}", r.ctx());
        sb.policy_named(&format!("{name}.yaml"), &r.stdout)
    };
    sb.write("data.txt", "data");
    sb.write(".env", "TOKEN=1");
    sb.mkdir("out");
    sb.mkdir("build");
    sb.write("scripts/run.sh", "#!/bin/sh\nexit 0\n");
    std::fs::set_permissions(
        sb.path("scripts/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    sb.write("home/.ssh/id_ed25519", "PRIVATE KEY");
    // Granted, but mode 000: the run holds no capabilities, as root too.
    sb.write("locked.txt", "locked");
    std::fs::set_permissions(
        sb.path("locked.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let agent = init("python-agent");
    let ci = init("ci-build");
    let review = init("read-only-review");

    let mut qs = vec![
        Q::read(sb.p("data.txt")),
        Q::read(sb.p("locked.txt")),
        Q::read(sb.p(".env")),
        Q::read(sb.p("home/.ssh/id_ed25519")),
        Q::create(sb.p("out/new.txt")),
        Q::append(sb.p("data.txt")),
        Q::append("/etc/hosts".into()),
        Q::read("/etc/hosts".into()),
        Q::exec(sb.p("scripts/run.sh")),
    ];
    if std::path::Path::new("/etc/shadow").exists() {
        qs.push(Q::read("/etc/shadow".into()));
    }
    let a = agree(&sb, &agent, &qs, "python-agent");
    let expect = |q: &str, allowed: bool, key: Option<&str>, because: Option<&str>| {
        let x = &a[q];
        assert_eq!(x["allowed"], allowed, "{q}: {x:#}");
        if let Some(k) = key {
            assert_eq!(x["key"], k, "{q}: {x:#}");
            assert!(x["line"].is_u64(), "{q}: a policy key has its line: {x:#}");
        }
        if let Some(b) = because {
            assert!(x["because"].as_str().unwrap().contains(b), "{q}: {x:#}");
        }
        if !allowed {
            assert!(
                x["change"].is_string() || x["no_change"].is_string(),
                "{q}: a refusal says what would allow it or why nothing can: {x:#}"
            );
        }
    };
    expect(
        &format!("read {}", sb.p("data.txt")),
        true,
        Some("filesystem.read[0]"),
        None,
    );
    expect(
        &format!("read {}", sb.p(".env")),
        false,
        Some("filesystem.deny[0]"),
        Some("carved out"),
    );
    expect(
        &format!("read {}", sb.p("home/.ssh/id_ed25519")),
        false,
        None,
        Some("~/.ssh is a credential store (SSH keys), carved out beneath the grant of"),
    );
    expect(
        &format!("write {}", sb.p("out/new.txt")),
        true,
        Some("filesystem.write[0]"),
        None,
    );
    expect(
        &format!("write {}", sb.p("data.txt")),
        false,
        Some("filesystem.read[0]"),
        Some("gives only r"),
    );
    assert!(a[&format!("write {}", sb.p("data.txt"))]["change"]
        .as_str()
        .unwrap()
        .contains("filesystem.write"));
    expect("write /etc/hosts", false, None, None);
    expect("read /etc/hosts", true, None, None);
    assert_eq!(a["read /etc/hosts"]["key"], "filesystem.system");
    assert_eq!(a["read /etc/hosts"]["layer"], "landlock");
    expect(
        &format!("exec {}", sb.p("scripts/run.sh")),
        false,
        None,
        Some("gives only r"),
    );
    if let Some(s) = a.get("read /etc/shadow") {
        assert_eq!(s["allowed"], false, "{s:#}");
        let layer = if view_expected() { "view" } else { "landlock" };
        assert_eq!(s["layer"], layer, "{s:#}");
    }
    assert_eq!(
        a[&format!("read {}", sb.p("data.txt"))]["layer"],
        "landlock"
    );

    // ci-build: exec of ./scripts, writes to ./build, the proxy's allowlist.
    let qs = vec![
        Q::exec(sb.p("scripts/run.sh")),
        Q::create(sb.p("build/o.txt")),
        Q::create(sb.p("out/o.txt")),
    ];
    let a = agree(&sb, &ci, &qs, "ci-build");
    assert_eq!(
        a[&format!("exec {}", sb.p("scripts/run.sh"))]["key"],
        "filesystem.exec[1]"
    );
    assert_eq!(a[&format!("write {}", sb.p("out/o.txt"))]["allowed"], false);
    let (code, v) = why(
        &sb,
        &ci,
        &[
            "--connect".into(),
            "pypi.org:443".into(),
            "--connect".into(),
            "evil.example:443".into(),
            "--connect".into(),
            "169.254.169.254:80".into(),
            "--connect".into(),
            "x.githubusercontent.com:443".into(),
        ],
    );
    assert_eq!(code, Some(1));
    let c = answers(&v);
    assert_eq!(c["connect pypi.org:443"]["allowed"], true);
    assert_eq!(c["connect pypi.org:443"]["layer"], "proxy");
    assert_eq!(c["connect pypi.org:443"]["key"], "network.allow_hosts[0]");
    assert!(c["connect pypi.org:443"]["line"].is_u64());
    assert_eq!(
        c["connect x.githubusercontent.com:443"]["key"],
        "network.allow_hosts[6]"
    );
    let evil = &c["connect evil.example:443"];
    assert_eq!(evil["allowed"], false);
    assert!(
        evil["change"]
            .as_str()
            .unwrap()
            .contains("--allow-host evil.example"),
        "{evil:#}"
    );
    let md = &c["connect 169.254.169.254:80"];
    assert_eq!(md["allowed"], false);
    assert!(
        md["no_change"].as_str().unwrap().contains("metadata"),
        "{md:#}"
    );

    // read-only-review: no network, nothing written, env and broker questions.
    let (code, v) = why(
        &sb,
        &review,
        &[
            "--connect".into(),
            "example.com:443".into(),
            "--write".into(),
            sb.p("data.txt"),
            "--env".into(),
            "LANG".into(),
            "--env".into(),
            "LD_PRELOAD".into(),
            "--env".into(),
            "AWS_SECRET_ACCESS_KEY".into(),
            "--tool".into(),
            "search".into(),
            "--model".into(),
            "claude".into(),
            "--signal".into(),
            "1".into(),
        ],
    );
    assert_eq!(code, Some(1));
    let r = answers(&v);
    let net = &r["connect example.com:443"];
    assert_eq!(net["allowed"], false);
    let want = if view_expected() { "netns" } else { "seccomp" };
    assert_eq!(net["layer"], want, "{net:#}");
    assert!(net["change"].as_str().unwrap().contains("mode: proxy"));
    assert_eq!(r["env LANG"]["allowed"], true);
    assert_eq!(r["env LANG"]["key"], "env.pass[0]");
    assert_eq!(r["env LD_PRELOAD"]["allowed"], false);
    assert!(r["env LD_PRELOAD"]["no_change"].is_string());
    assert_eq!(r["env AWS_SECRET_ACCESS_KEY"]["allowed"], false);
    assert_eq!(r["tool search"]["allowed"], false);
    assert_eq!(r["tool search"]["layer"], "broker");
    assert_eq!(r["model claude"]["allowed"], false);
    assert_eq!(r["signal 1"]["allowed"], false);
    let sig = v["host"]["signals"].as_str().unwrap();
    assert_eq!(r["signal 1"]["layer"], sig);
    assert_ne!(sig, "none");
}

/// Human output names the verdict, the key and the change; no question is
/// an error; a bad policy is 125.
#[test]
fn human_output_and_errors() {
    let sb = Sandbox::new();
    sb.write("ro/f.txt", "x");
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [./ro]\n");
    let r = sb.run(&["why", "-p", &pol, "--write", &sb.p("ro/f.txt")]);
    assert_eq!(r.code, Some(1), "{}", r.ctx());
    assert!(r.stdout.contains("refused by Landlock ABI"), "{}", r.ctx());
    assert!(
        r.stdout.contains("filesystem.read[0] (line 3)"),
        "{}",
        r.ctx()
    );
    assert!(r.stdout.contains("to allow add"), "{}", r.ctx());
    let r = sb.run(&["why", "-p", &pol, "--read", &sb.p("ro/f.txt")]);
    assert_eq!(r.code, Some(0), "{}", r.ctx());
    assert!(r.stdout.contains("allowed by"), "{}", r.ctx());
    let r = sb.run(&["why", "-p", &pol]);
    assert_eq!(r.code, Some(125), "{}", r.ctx());
    // A write grant of /etc is refused by every policy: no change can.
    let r = sb.run(&["why", "-p", &pol, "--json", "--write", "/etc/newfile"]);
    let v = r.json();
    assert!(
        v["answers"][0]["no_change"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{}",
        r.ctx()
    );
    let bad = sb.policy_named("bad.yaml", "version: 1\nnope: 1\n");
    let r = sb.run(&["why", "-p", &bad, "--read", "/etc/hosts"]);
    assert_eq!(r.code, Some(125), "{}", r.ctx());
}

/// The tree the property test asks about (relative paths).
const FILES: &[&str] = &[
    "w1/f.txt",
    "w1/sub/g.txt",
    "w2/f.txt",
    "w2/d/h.txt",
    "r1/f.txt",
    "r1/deep/k.txt",
    "home/notes.txt",
    "home/.aws/credentials",
    "outside/f.txt",
];
const SCRIPTS: &[&str] = &["w1/x.sh", "r1/x.sh", "r1/deep/y.sh"];
const DIRS: &[&str] = &[
    "w1",
    "w1/sub",
    "w2/d",
    "r1",
    "r1/deep",
    "home/.aws",
    "outside",
    ".",
];
/// Grant candidates and deny candidates.
const GRANTABLE: &[&str] = &["w1", "w2", "r1", "home", "r1/deep"];
const DENIABLE: &[&str] = &["w1/sub", "r1/deep", "w2/d/h.txt", "r1/f.txt"];

fn tree() -> Sandbox {
    let sb = Sandbox::new();
    for f in FILES {
        sb.write(f, "content");
    }
    for s in SCRIPTS {
        sb.write_exec(s, "#!/bin/sh\nexit 0\n");
    }
    std::os::unix::fs::symlink("../w1/f.txt", sb.path("r1/link")).unwrap();
    sb
}

fn policy_text(grants: &[(usize, u8)], denies: &[usize], root_read: bool, tmp: bool) -> String {
    let mut read = Vec::new();
    let mut write = Vec::new();
    let mut exec = Vec::new();
    if root_read {
        read.push(".".to_string());
    }
    for &(i, kind) in grants {
        let p = format!("./{}", GRANTABLE[i]);
        match kind {
            0 => {}
            1 => read.push(p),
            2 => write.push(p),
            _ => exec.push(p),
        }
    }
    let granted: Vec<String> = read.iter().chain(&write).chain(&exec).cloned().collect();
    let deny: Vec<String> = denies
        .iter()
        .map(|&i| DENIABLE[i])
        .filter(|d| {
            granted
                .iter()
                .any(|g| g == "." || (d.starts_with(&g[2..]) && *d != &g[2..]))
        })
        .map(|d| format!("./{d}"))
        .collect();
    let list = |v: &[String]| format!("[{}]", v.join(", "));
    format!(
        "version: 1\nfilesystem:\n  read: {}\n  write: {}\n  exec: {}\n  deny: {}\n  tmp: {tmp}\n",
        list(&read),
        list(&write),
        list(&exec),
        list(&deny)
    )
}

fn questions(sb: &Sandbox, n: usize) -> Vec<Q> {
    let mut qs = Vec::new();
    for f in FILES {
        qs.push(Q::read(sb.p(f)));
        qs.push(Q::append(sb.p(f)));
        qs.push(Q::truncate(sb.p(f)));
        qs.push(Q::chmod(sb.p(f)));
    }
    for s in SCRIPTS {
        qs.push(Q::exec(sb.p(s)));
    }
    qs.push(Q::read(sb.p("r1/link")));
    // Listing: an expanded directory lists only when its carve-outs are files.
    for d in [
        "w1",
        "w1/sub",
        "w2",
        "w2/d",
        "r1",
        "r1/deep",
        "home",
        "home/.aws",
    ] {
        qs.push(Q::list(sb.p(d)));
    }
    for d in DIRS {
        qs.push(Q::create(sb.p(&format!("{d}/new-{n}"))));
    }
    // The system grants, the secrets of /etc and the host's /tmp.
    qs.push(Q::read("/etc/hosts".into()));
    qs.push(Q::append("/etc/hosts".into()));
    qs.push(Q::exec("/usr/bin/true".into()));
    if std::path::Path::new("/etc/shadow").exists() {
        qs.push(Q::read("/etc/shadow".into()));
    }
    let name = sb.root.file_name().unwrap().to_string_lossy().into_owned();
    qs.push(Q::create(format!("/tmp/{name}-direct-{n}")));
    qs
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    /// Random grants and carve-outs over a fixed tree: `why` says allowed
    /// exactly when the confined probe succeeds.
    #[test]
    fn why_agrees_with_exec(
        grants in proptest::collection::vec((0usize..GRANTABLE.len(), 0u8..4), 1..4),
        denies in proptest::collection::vec(0usize..DENIABLE.len(), 0..3),
        root_read in proptest::bool::weighted(0.25),
        tmp in proptest::bool::weighted(0.75),
    ) {
        let sb = tree();
        let text = policy_text(&grants, &denies, root_read, tmp);
        let pol = sb.policy(&text);
        // A policy `exec` refuses is refused by `why` the same way.
        let check = sb.run(&["check", "-p", &pol]);
        if check.code != Some(0) {
            let r = sb.run(&["why", "-p", &pol, "--read", "/etc/hosts"]);
            prop_assert_eq!(r.code, Some(125), "{}", r.ctx());
            return Ok(());
        }
        let qs = questions(&sb, 0);
        agree(&sb, &pol, &qs, &text);
    }
}

/// A read grant with a write grant beneath it (the starter policies' shape:
/// `read: [.]`, `write: [./out]`): the files of the read grant stay visible
/// next to the write grant, wherever the project lies (directly in the
/// host's /tmp too, where the view rebinds both into the private /tmp).
#[test]
fn read_grant_with_a_write_grant_beneath() {
    // No credential store beneath the grant: a carve-out would keep the host's /tmp.
    let sb = Sandbox::new();
    for f in ["top.txt", "outside/f.txt", "r1/f.txt", "w1/f.txt"] {
        sb.write(f, "content");
    }
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [.]\n  write: [./w1]\n");
    let qs = |n: u32| {
        vec![
            Q::read(sb.p("top.txt")),
            Q::list(sb.p("outside")),
            Q::read(sb.p("outside/f.txt")),
            Q::read(sb.p("r1/f.txt")),
            Q::append(sb.p("w1/f.txt")),
            Q::create(sb.p(&format!("w1/new{n}"))),
            Q::create(sb.p(&format!("outside/new{n}"))),
        ]
    };
    // First without an audit log, before capsule's state directory exists
    // beneath the grant (it is carved out like a credential store once it
    // does, and a carve-out keeps the host's /tmp in the view).
    let a = agree_with(
        &sb,
        &pol,
        &["--no-audit"],
        &qs(0),
        "read . write ./w1, --no-audit",
    );
    assert_eq!(
        a[&format!("read {}", sb.p("outside/f.txt"))]["allowed"],
        true
    );
    assert_eq!(a[&format!("read {}", sb.p("top.txt"))]["allowed"], true);
    assert_eq!(a[&format!("write {}", sb.p("w1/new0"))]["allowed"], true);
    // The audit log (beneath the grant here, made by the first run that
    // writes it) is carved out for why as for exec.
    agree(&sb, &pol, &qs(1), "read . write ./w1, with an audit log");
    let mut log_q = qs(2);
    log_q.push(Q::read(sb.p("state/capsule/audit.jsonl")));
    let a = agree(&sb, &pol, &log_q, "read . write ./w1, the audit log");
    assert_eq!(
        a[&format!("read {}", sb.p("outside/f.txt"))]["allowed"],
        true
    );
    let log = &a[&format!("read {}", sb.p("state/capsule/audit.jsonl"))];
    assert_eq!(log["allowed"], false, "{log:#}");
}

/// Without Landlock (emulated: CAPSULE_LANDLOCK_ABI_MAX=0) and with
/// --best-effort, why and exec still agree: reads are not checked, writes
/// only by the view where there is one.
#[test]
fn no_landlock_best_effort_agrees() {
    let mut sb = tree();
    sb.set_env("CAPSULE_LANDLOCK_ABI_MAX", "0");
    let pol = sb.policy("version: 1\nfilesystem:\n  read: [./r1]\n  write: [./w1]\n");
    let qs = questions(&sb, 9);
    let a = agree_with(
        &sb,
        &pol,
        &["--best-effort"],
        &qs,
        "no Landlock, --best-effort",
    );
    let outside = &a[&format!("read {}", sb.p("outside/f.txt"))];
    if outside["allowed"] == true {
        assert_eq!(outside["layer"], "none", "{outside:#}");
    }
}

/// The run holds no capabilities: as root, a file of another user in a
/// write grant keeps its mode (EPERM), and `why` says so.
#[test]
fn chmod_needs_the_owner() {
    if !is_root() {
        skip("chown to another user needs root");
        return;
    }
    let sb = Sandbox::new();
    sb.write("w1/mine.txt", "x");
    let theirs = sb.write("w1/theirs.txt", "x");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let pol = sb.policy("version: 1\nfilesystem:\n  write: [./w1]\n");
    let qs = vec![
        Q::chmod(sb.p("w1/mine.txt")),
        Q::chmod(sb.p("w1/theirs.txt")),
    ];
    let a = agree_with(&sb, &pol, &["--no-audit"], &qs, "chmod and ownership");
    let t = &a[&format!("chmod {}", sb.p("w1/theirs.txt"))];
    assert_eq!(t["layer"], "host", "{t:#}");
}

/// Grants beneath /dev/shm are bound inside the run's private /dev/shm:
/// `why` and exec agree on them, on the read-only directories leading to
/// them, and on the private /dev/shm around them (without the view, on the
/// host's /dev/shm under Landlock).
#[test]
fn grants_beneath_dev_shm_agree_with_exec() {
    let Ok(dir) = tempfile::Builder::new()
        .prefix("capsule-why-shm.")
        .tempdir_in("/dev/shm")
    else {
        skip("no writable /dev/shm here");
        return;
    };
    let base = dir.path().display().to_string();
    for d in ["a/ro", "a/rw"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    std::fs::write(dir.path().join("a/ro/f"), "ro").unwrap();
    std::fs::write(dir.path().join("a/rw/f"), "rw").unwrap();
    let sb = Sandbox::new();
    let pol = sb.policy(&format!(
        "version: 1\nfilesystem:\n  read: [{base}/a/ro]\n  write: [{base}/a/rw]\n"
    ));
    let private = format!("{base}-private");
    let a = agree_with(
        &sb,
        &pol,
        &["--no-audit"],
        &[
            Q::read(format!("{base}/a/ro/f")),
            Q::append(format!("{base}/a/ro/f")),
            Q::create(format!("{base}/a/ro/new")),
            Q::read(format!("{base}/a/rw/f")),
            Q::append(format!("{base}/a/rw/f")),
            Q::create(format!("{base}/a/rw/new")),
            Q::create(format!("{base}/a/new")),
            Q::create(private.clone()),
        ],
        "grants beneath /dev/shm",
    );
    assert_eq!(a[&format!("read {base}/a/ro/f")]["allowed"], true, "{a:#?}");
    assert_eq!(
        a[&format!("write {base}/a/rw/new")]["allowed"],
        true,
        "{a:#?}"
    );
    assert_eq!(
        a[&format!("write {base}/a/ro/new")]["allowed"],
        false,
        "{a:#?}"
    );
    let _ = std::fs::remove_file(&private);
}

/// A path beneath a mount's destination is judged as its source, in `why`
/// and in `--explain` (which asks `why` about the paths the run named): a
/// read-only mount reads, a read-write one writes, and a volume under a
/// read grant of the data directory stays usable while the other volumes
/// stay carved out. Before: every path of a mount at a new destination was
/// "no grant covers it", and --explain reported refusals that never were.
#[test]
fn mounts_agree_with_exec_at_their_destination() {
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    sb.write("src-ro/f", "ro");
    sb.write("src-rw/f", "rw");
    sb.run(&["volume", "create", "wv-mine"]).assert_code(0);
    sb.run(&["volume", "create", "wv-other"]).assert_code(0);
    let vols = data.join("capsule/volumes");
    std::fs::write(vols.join("wv-mine/seed"), "mine").unwrap();
    std::fs::write(vols.join("wv-other/secret"), "theirs").unwrap();
    let view = view_expected();
    let at = |dst: &str, src: &str| if view { dst.to_string() } else { sb.p(src) };
    let (ro, rw) = (at("/why-ro", "src-ro"), at("/why-rw", "src-rw"));
    let vol = if view {
        "/why-vol".to_string()
    } else {
        vols.join("wv-mine").display().to_string()
    };
    let mounts = [
        format!("{}:{ro}", sb.p("src-ro")),
        format!("{}:{rw}:rw", sb.p("src-rw")),
        format!("volume:wv-mine:{vol}:rw"),
    ];
    let data_s = data.display().to_string();
    let mut opts = vec!["--no-audit", "--allow-read", data_s.as_str()];
    for m in &mounts {
        opts.extend(["--mount", m.as_str()]);
    }
    let pol = sb.policy("version: 1\n");
    let a = agree_with(
        &sb,
        &pol,
        &opts,
        &[
            Q::read(format!("{ro}/f")),
            Q::append(format!("{ro}/f")),
            Q::create(format!("{ro}/new")),
            Q::read(format!("{rw}/f")),
            Q::append(format!("{rw}/f")),
            Q::create(format!("{rw}/new")),
            Q::read(format!("{vol}/seed")),
            Q::create(format!("{vol}/made")),
            Q::read(vols.join("wv-other/secret").display().to_string()),
        ],
        "mounts",
    );
    for (q, allowed) in [
        (format!("read {ro}/f"), true),
        (format!("write {ro}/new"), false),
        (format!("write {rw}/new"), true),
        (format!("write {vol}/made"), true),
        (
            format!("read {}", vols.join("wv-other/secret").display()),
            false,
        ),
    ] {
        assert_eq!(a[&q]["allowed"], allowed, "{q}: {a:#?}");
    }
}

/// A write refused by a read-only `volume:` mount is answered with the
/// change a user can type: `--mount volume:NAME:DST:rw`, not the volume's
/// directory under capsule's data directory (which `--mount` would take as
/// a host path, carved out like every other volume).
#[test]
fn a_read_only_volume_mount_is_changed_by_its_name() {
    if !view_expected() {
        eprintln!("skipped: a volume at another destination needs the view");
        return;
    }
    let mut sb = Sandbox::new();
    let data = sb.mkdir("data");
    sb.set_env("XDG_DATA_HOME", &data.to_string_lossy());
    sb.run(&["volume", "create", "wv-ro"]).assert_code(0);
    let pol = sb.policy("version: 1\n");
    let (_, v) = why(
        &sb,
        &pol,
        &[
            "--mount".into(),
            "volume:wv-ro:/why-vol".into(),
            "--write".into(),
            "/why-vol/made".into(),
        ],
    );
    let a = &answers(&v)["write /why-vol/made"];
    assert_eq!(a["allowed"], false, "{v:#}");
    assert_eq!(
        a["change"],
        "mount it read-write: --mount volume:wv-ro:/why-vol:rw (or read_only: false in mounts:)",
        "{v:#}"
    );
}

/// A write grant beneath a read-only mount's destination is bound at its own
/// path on top of the mount (the view attaches the deeper bind later): a
/// write there reaches the host's granted directory and succeeds. `why` took
/// the deepest *mount* only and judged the path as the mount's source,
/// read-only (EROFS): refused where exec writes. And the other way: a read
/// grant under /tmp, bound read-only over a read-write mount's destination
/// beneath /tmp, is refused to writes that `why` allowed through the mount.
#[test]
fn a_grant_bound_over_a_mount_destination_agrees_with_exec() {
    if !view_expected() {
        eprintln!("skipped: a mount at another destination needs the view");
        return;
    }
    for sb in [Sandbox::visible(), Sandbox::new()] {
        sb.write("src-ro/out/keep", "x");
        sb.write("proj/out/keep", "x");
        sb.write("src-rw/r/keep", "x");
        sb.write("over/r/keep", "x");
        let proj = sb.p("proj");
        let over = sb.p("over");
        let mounts = [
            format!("{}:{proj}", sb.p("src-ro")),
            format!("{}:{over}:rw", sb.p("src-rw")),
        ];
        let out = sb.p("proj/out");
        let r = sb.p("over/r");
        let mut opts = vec!["--no-audit", "--allow-write", out.as_str()];
        opts.extend(["--allow-read", r.as_str()]);
        for m in &mounts {
            opts.extend(["--mount", m.as_str()]);
        }
        let pol = sb.policy("version: 1\n");
        agree_with(
            &sb,
            &pol,
            &opts,
            &[
                Q::create(format!("{proj}/out/new")),
                Q::read(format!("{proj}/out/keep")),
                Q::create(format!("{proj}/new")),
                Q::create(format!("{over}/new")),
                Q::create(format!("{over}/r/new")),
                Q::read(format!("{over}/r/keep")),
            ],
            &format!("grants over mounts in {}", sb.root.display()),
        );
    }
}

/// A symbolic link inside a mount's source is followed in the run's view:
/// an absolute target names a place of the view (a pack built to live at
/// its destination links to `/pack/...`), and `..` inside the mount climbs
/// the view. `why` followed both on the host, where that path is another
/// (ungranted) directory: refused where exec read the file.
#[test]
fn links_inside_a_mount_are_followed_in_the_view() {
    if !view_expected() {
        eprintln!("skipped: a mount at another destination needs the view");
        return;
    }
    let sb = Sandbox::visible();
    sb.write("src/f", "pack");
    sb.write("src/sub/g", "sub");
    // The destination on the host: the same names, not granted.
    sb.write("dst/f", "host");
    sb.write("dst/sub/g", "host");
    let dst = sb.p("dst");
    std::os::unix::fs::symlink(format!("{dst}/f"), sb.path("src/abs")).unwrap();
    std::os::unix::fs::symlink(format!("{dst}/sub"), sb.path("src/absdir")).unwrap();
    std::os::unix::fs::symlink("absdir/../f", sb.path("src/rel")).unwrap();
    let mount = format!("{}:{dst}", sb.p("src"));
    let pol = sb.policy("version: 1\n");
    let a = agree_with(
        &sb,
        &pol,
        &["--no-audit", "--mount", mount.as_str()],
        &[
            Q::read(format!("{dst}/abs")),
            Q::read(format!("{dst}/absdir/g")),
            Q::read(format!("{dst}/rel")),
            Q::read(format!("{dst}/sub/../f")),
            Q::read(format!("{dst}/f")),
            Q::read(sb.p("src/f")),
        ],
        "links inside a mount",
    );
    assert_eq!(a[&format!("read {dst}/abs")]["allowed"], true, "{a:#?}");
}

/// Without namespaces /tmp, /dev/shm and /dev/pts are the host's, shared by
/// every program and run of this user: `why` (and so `--explain` and
/// `learn`) never proposes granting them wholesale; it says what gives the
/// run a private one. A directory of the user's own beneath /tmp is still
/// proposed.
#[test]
fn without_namespaces_the_hosts_shared_places_are_never_proposed() {
    let mut sb = Sandbox::new();
    sb.env.push(("CAPSULE_NO_NAMESPACES".into(), "1".into()));
    let pol = sb.policy("version: 1\n");
    let absent = format!("/tmp/capsule-why-absent-{}/x", std::process::id());
    let own = sb.mkdir("mine");
    let own_file = own.join("x").display().to_string();
    let (_, v) = why(
        &sb,
        &pol,
        &[
            "--write".into(),
            "/dev/shm/sem.x".into(),
            "--write".into(),
            absent.clone(),
            "--write".into(),
            "/dev/pts/ptmx".into(),
            "--write".into(),
            own_file.clone(),
        ],
    );
    let a = answers(&v);
    for (q, place) in [
        ("write /dev/shm/sem.x".to_string(), "/dev/shm"),
        (format!("write {absent}"), "/tmp"),
        ("write /dev/pts/ptmx".to_string(), "/dev/pts"),
    ] {
        let ans = &a[&q];
        if ans["allowed"] == true {
            // A lowered pass may grant it otherwise (e.g. best effort).
            continue;
        }
        assert!(ans["change"].is_null(), "{q}: proposes {}", ans["change"]);
        let why = ans["no_change"].as_str().unwrap_or_default();
        assert!(
            why.contains(&format!("{place} is the host's")) && why.contains("user namespaces"),
            "{q}: {why}"
        );
    }
    let mine = &a[&format!("write {own_file}")];
    assert!(
        mine["change"]
            .as_str()
            .is_some_and(|c| c.contains(&*own.to_string_lossy())),
        "{mine}"
    );
}

/// Nested paths in the run's private places (issue 39): /tmp and /dev/shm
/// are the run's own at any depth, so a directory the run makes there and
/// what it creates in it are its own too. `why` judged a path two levels
/// below the private /tmp against the host's /tmp ("refused", with `/` or
/// the host's directory as the grant to add) while a confined `mkdir
/// /tmp/foo && echo hi > /tmp/foo/bar` succeeded. Asked before the run, of
/// paths the probe then creates in order: both must agree, on the default
/// path and on the no-namespace path (where /tmp and /dev/shm are the
/// host's, under Landlock, and nothing there may be created). With a
/// grant beneath /tmp (the read-only directories leading to it) and
/// without one. `/` is never the change proposed.
#[test]
fn nested_and_created_paths_in_the_private_places_agree_with_exec() {
    let base = format!("capsule-why-nest-{}", std::process::id());
    let shm = std::path::Path::new("/dev/shm").is_dir();
    for no_ns in [false, true] {
        let mut sb = Sandbox::new();
        if no_ns {
            sb.env.push(("CAPSULE_NO_NAMESPACES".into(), "1".into()));
        }
        // A read grant beneath /tmp (when the sandbox lies there): the view
        // binds it inside the private /tmp, behind read-only directories.
        sb.write("granted/f", "x");
        let granted = sb.p("granted");
        let pols = [
            sb.policy("version: 1\n"),
            sb.policy_named(
                "with-grant.yaml",
                &format!("version: 1\nfilesystem:\n  read: [{granted}]\n"),
            ),
        ];
        for (i, pol) in pols.iter().enumerate() {
            let mut qs = Vec::new();
            let mut places = vec!["/tmp".to_string()];
            if shm {
                places.push("/dev/shm".into());
            }
            for place in &places {
                let top = format!("{place}/{base}-{no_ns}-{i}");
                qs.extend([
                    Q::list(place.clone()),
                    Q::mkdir(top.clone()),
                    Q::mkdir(format!("{top}/a")),
                    Q::mkdir(format!("{top}/a/b")),
                    Q::create(format!("{top}/a/b/f")),
                    Q::append(format!("{top}/a/b/f")),
                    Q::read(format!("{top}/a/b/f")),
                    Q::list(format!("{top}/a")),
                    Q::truncate(format!("{top}/a/b/f")),
                ]);
            }
            if i == 1 {
                // Beside the grant: a read-only directory leading to it.
                qs.push(Q::create(sb.p("new-beside")));
                qs.push(Q::read(format!("{granted}/f")));
                qs.push(Q::list(sb.p("")));
            }
            let ctx = format!("nested private paths, no_ns={no_ns}, policy {i}");
            let a = agree_with(&sb, pol, &["--no-audit"], &qs, &ctx);
            for (q, x) in &a {
                let change = x["change"].as_str().unwrap_or_default();
                assert!(
                    !change.contains("\"/\" to")
                        && !change.contains("--allow-write / ")
                        && !change.ends_with("--allow-write /)"),
                    "{q} ({ctx}): proposes the whole host: {x:#}"
                );
            }
            if view_expected() && !no_ns {
                let top = format!("/tmp/{base}-{no_ns}-{i}");
                for q in [
                    format!("write {top}/a/b"),
                    format!("write {top}/a/b/f"),
                    format!("read {top}/a/b/f"),
                ] {
                    assert_eq!(a[&q]["allowed"], true, "{q} ({ctx}): {:#}", a[&q]);
                    assert_eq!(a[&q]["layer"], "view", "{q} ({ctx}): {:#}", a[&q]);
                }
            }
            for place in &places {
                let _ = std::fs::remove_dir_all(format!("{place}/{base}-{no_ns}-{i}"));
            }
        }
    }
}

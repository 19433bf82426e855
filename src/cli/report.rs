//! Human (and JSON) descriptions of a plan: `--dry-run` and `capsule check`.

use serde_json::json;

use crate::kernel::{self, landlock_linux, Probe, LANDLOCK_FS};
use crate::plan::{FsPlan, Plan};
use crate::policy::NetMode;
use crate::sandbox::view::ViewSummary;

/// The filesystem rules Landlock applies: inside the view, /etc whole (its
/// secrets covered by the view) and the private /proc instead of its files.
fn fs_rules(plan: &Plan, view: Option<&ViewSummary>) -> FsPlan {
    match view {
        Some(_) => crate::sandbox::fs_for_view(&plan.fs),
        None => plan.fs.clone(),
    }
}

/// What the run's private /tmp is.
fn tmp_line(plan: &Plan, v: &ViewSummary) -> String {
    match (v.private_tmp, plan.limits.tmp_size_mb, &plan.tmpdir) {
        (true, Some(mb), _) => format!("/tmp: private, a tmpfs of {mb} MiB"),
        (true, None, _) => "/tmp: private, the run's TMPDIR".into(),
        (false, _, Some(_)) => {
            "/tmp: the host's, under Landlock (a grant or the cwd lies beneath it); \
                                the run's TMPDIR at its own path"
                .into()
        }
        (false, _, None) => "/tmp: the host's, under Landlock (filesystem.tmp is off)".into(),
    }
}

fn netns_line(plan: &Plan) -> &'static str {
    let loopback = crate::sandbox::own_loopback(&plan.net, true);
    match (plan.net.mode, loopback) {
        (NetMode::None, true) => {
            "network namespace: the run's own, holding only its loopback (up: TCP and UDP on \
             127.0.0.1/::1 reach the run itself, nothing outside it)"
        }
        (NetMode::None, false) => {
            "network namespace: the run's own, loopback down (network.loopback: false: no IP socket)"
        }
        (NetMode::Proxy, true) => {
            "network namespace: the run's own, holding only its loopback and the proxy's endpoint \
             (TCP and UDP on 127.0.0.1/::1 reach the run itself, or the proxy)"
        }
        (NetMode::Proxy, false) => {
            "network namespace: the run's own, holding only the proxy's endpoint (network.loopback: false)"
        }
        (NetMode::Unrestricted, _) => "no network namespace: network is unrestricted (the host's)",
    }
}

/// What the view gives, for `check` and `--dry-run`: (label, text) lines.
fn view_lines(plan: &Plan, v: &ViewSummary) -> Vec<String> {
    let mut out = vec![
        "read-only host: every mount of the host read-only and nosuid (chmod, chown, utimes, xattrs and \
         truncate outside write grants fail with EROFS, as root too)"
            .to_string(),
    ];
    if v.private_proc {
        let ro: Vec<String> = v
            .proc_read_only
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        out.push(format!(
            "private /proc of the run's pid namespace (hidepid=4: no host process); read-only: {}",
            if ro.is_empty() {
                "-".into()
            } else {
                ro.join(" ")
            }
        ));
    }
    if v.bound_proc {
        out.push(
            "/proc: the container's own, read-only (a fresh procfs is refused here): processes outside the run \
             are listed, their environ, memory and descriptors kept unreadable by Landlock"
                .into(),
        );
    }
    out.push(tmp_line(plan, v));
    if v.private_shm {
        out.push("/dev/shm: private tmpfs (64 MiB, noexec)".into());
    }
    if v.devpts {
        out.push("devpts: a private instance at /dev/pts, with /dev/ptmx".into());
    }
    out.push(
        "IPC namespace: the run's own (the host's SysV IPC and POSIX message queues are invisible)"
            .into(),
    );
    out.push(netns_line(plan).into());
    if v.memfd_noexec {
        out.push("vm.memfd_noexec = 2 in the run's pid namespace".into());
    }
    if v.new_root {
        out.push("new root: a mount destination the host lacks (the host's top-level entries bound read-only)".into());
    }
    for b in &v.binds {
        let mode = if b.read_only { "ro" } else { "rw" };
        if b.src == b.dst {
            out.push(format!("bind {mode} {}", b.dst.display()));
        } else {
            out.push(format!(
                "bind {mode} {} at {}",
                b.src.display(),
                b.dst.display()
            ));
        }
    }
    for (p, what) in &v.secrets {
        out.push(format!(
            "secret {}  — covered, {what}: unreadable even to root unless a grant names it exactly",
            p.display()
        ));
    }
    out
}

/// What the view gives, as JSON (null without the view).
fn view_json(plan: &Plan, view: Option<&ViewSummary>) -> serde_json::Value {
    let Some(v) = view else {
        return serde_json::Value::Null;
    };
    json!({
        "read_only_host": true,
        "private_proc": v.private_proc,
        "bound_proc": v.bound_proc,
        "proc_read_only": v.proc_read_only,
        "private_tmp": v.private_tmp,
        "tmp": tmp_line(plan, v),
        "tmp_size_mb": if v.private_tmp { plan.limits.tmp_size_mb } else { None },
        "private_shm": v.private_shm,
        "devpts": v.devpts,
        "ipc_namespace": true,
        "network_namespace": plan.net.mode != NetMode::Unrestricted,
        "memfd_noexec": v.memfd_noexec,
        "new_root": v.new_root,
        "binds": v.binds.iter().map(|b| json!({
            "src": b.src, "dst": b.dst, "read_only": b.read_only,
        })).collect::<Vec<_>>(),
        "secrets": v.secrets.iter().map(|(p, what)| json!({"path": p, "what": what})).collect::<Vec<_>>(),
    })
}

/// The plan as a JSON value (grants with their origin and enforcing layer,
/// and the run's view when it has one).
/// `namespaces`: whether the run gets its namespaces here (the predicted
/// path, `sandbox::Prediction::path`).
pub fn plan_json(
    plan: &Plan,
    k: &Probe,
    view: Option<&ViewSummary>,
    namespaces: bool,
) -> serde_json::Value {
    let fs = fs_rules(plan, view);
    let fs_layer = if k.landlock_abi > 0 {
        format!("landlock ABI {}", k.landlock_abi)
    } else {
        "not enforced: no Landlock on this kernel".into()
    };
    json!({
        "run_id": plan.run_id,
        "program": plan.program,
        "argv": plan.argv,
        "cwd": plan.cwd,
        "notices": plan.notices.iter().map(|n| n.text.as_str()).collect::<Vec<_>>(),
        "env": plan.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "tmpdir": plan.tmpdir,
        "filesystem": {
            "layer": fs_layer,
            "grants": fs.grants.iter().map(|g| json!({
                "path": g.path, "access": g.access.label(), "origin": g.origin.to_string(),
            })).collect::<Vec<_>>(),
            "deny": fs.deny.iter().map(|d| json!({"path": d.path, "origin": d.origin.to_string()})).collect::<Vec<_>>(),
            "proc_self": fs.proc_self,
            "command_notes": plan.command_notes,
            "notes": plan.fs_notes,
        },
        "network": {
            "mode": plan.net.mode.as_str(),
            "allow_hosts": plan.net.allow_hosts,
            "rules": plan.net.host_rules.iter().map(|(i, r)| json!({
                "index": i, "host": r.host, "methods": r.methods, "paths": r.paths, "git": r.git,
                "max_requests": r.max_requests, "max_upload_bytes": r.max_upload_bytes,
            })).collect::<Vec<_>>(),
            "credentials": plan.net.credentials.iter().map(|c| {
                let (ok, how) = crate::plan::egress::source_resolves(c);
                json!({
                    "name": c.name, "key": c.key, "source": c.source.kind(), "resolves": ok, "detail": how,
                    "hosts": c.hosts, "methods": c.methods, "paths": c.paths,
                    "inject": crate::plan::egress::inject_text(c), "placeholder_env": c.placeholder_env,
                    "allow_plaintext": c.allow_plaintext,
                })
            }).collect::<Vec<_>>(),
            "ca_bundle": plan.fs.ca_bundle.as_ref().map(|b| json!({"file": b.file, "system": b.system})),
            "allow_unix_sockets": plan.net.allow_unix_sockets,
            "loopback_policy": plan.net.loopback,
            // As `enforcement.loopback` will say.
            "loopback": crate::sandbox::own_loopback(&plan.net, namespaces),
            "layer": network_layer(plan, k, namespaces),
            // As `enforcement.network_path` will say.
            "path": (plan.net.mode == NetMode::Proxy).then(|| {
                if namespaces { crate::proxy::ProxyPath::Netns } else { crate::proxy::ProxyPath::LandlockTcpFallback }.as_str()
            }),
        },
        "seccomp": if k.seccomp { seccomp_line(plan) } else { "NOT AVAILABLE".into() },
        "tree_kill": if namespaces { "pid-namespace" } else { "subreaper" },
        "view": view_json(plan, view),
        "limits": {
            "timeout_seconds": plan.limits.timeout.as_secs_f64(),
            "max_output_bytes": plan.limits.max_output_bytes,
            "memory_bytes": plan.limits.memory_bytes,
            "cpu_seconds": plan.limits.cpu_seconds,
            "max_processes": plan.limits.max_processes,
            "max_file_size_bytes": plan.limits.max_file_size_bytes,
            "max_open_files": plan.limits.max_open_files,
        },
        "policy_sha256": plan.policy_sha256,
    })
}

/// What the seccomp program refuses, in one line (the same for `check` and `--dry-run`).
fn seccomp_line(plan: &Plan) -> String {
    format!(
        "syscall allowlist (unknown → ENOSYS, openat2 too: its flags lie behind a pointer), EPERM \
         denials (open/openat with access mode 3 among them), socket filter (socketpair: AF_UNIX {})",
        if plan.net.allow_unix_sockets {
            "any type"
        } else {
            "stream and seqpacket only"
        }
    )
}

fn network_layer(plan: &Plan, k: &Probe, namespaces: bool) -> String {
    let loopback = crate::sandbox::own_loopback(&plan.net, namespaces);
    match plan.net.mode {
        NetMode::None if loopback => {
            "own network namespace with only its loopback (seccomp: TCP and UDP \
                                      sockets only; no IP socket where the run has no namespace)"
                .into()
        }
        NetMode::None => format!(
            "seccomp (no IP sockets){}",
            if k.landlock_tcp() {
                " + Landlock TCP bind/connect denied"
            } else {
                ""
            }
        ),
        NetMode::Proxy => {
            if namespaces && loopback {
                "own network namespace with only its loopback and the proxy endpoint".into()
            } else if namespaces {
                "own network namespace with only the proxy endpoint".into()
            } else {
                crate::sandbox::describe_host_proxy(k)
            }
        }
        NetMode::Unrestricted => "host network (no filtering)".into(),
    }
}

/// Print the plan for humans, with the run's view when it has one.
pub fn print_plan(plan: &Plan, k: &Probe, view: Option<&ViewSummary>, namespaces: bool) {
    if !plan.argv.is_empty() {
        println!(
            "command   {} ({})",
            plan.argv.join(" "),
            plan.program.display()
        );
    }
    println!("cwd       {}", plan.cwd.display());
    for n in &plan.notices {
        println!("note      {}", n.text);
    }
    println!(
        "env       {}",
        plan.env
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    print_filesystem(plan, k, view);
    match view {
        Some(v) => {
            println!(
                "view      the run's own mount, pid, IPC and network namespaces (the kernel's mount machinery; \
                 Landlock's rules above apply on top):"
            );
            for l in view_lines(plan, v) {
                println!("  {l}");
            }
        }
        // Namespaces were there, but no view was planned: the plan was
        // refused (the reason follows below).
        None if namespaces => println!("view      none: the plan is refused here (below)"),
        None => println!(
            "view      none: no namespaces here (no unprivileged user namespaces, the kernel refused them, or \
             CAPSULE_NO_NAMESPACES); the /etc secrets beneath grants are carved out by Landlock (deny lines above)"
        ),
    }
    print_network(plan, k, namespaces);
    println!(
        "seccomp   {}",
        if k.seccomp {
            format!("architecture check, {}", seccomp_line(plan))
        } else {
            "NOT AVAILABLE".into()
        }
    );
    println!(
        "processes own session, no_new_privs, no capabilities, no core dumps; tree killed via {}",
        if namespaces {
            "its own pid namespace"
        } else {
            "a child subreaper"
        }
    );
    print_limits(plan);
}

/// The filesystem rules: grants, carve-outs, notes, and who enforces them.
fn print_filesystem(plan: &Plan, k: &Probe, view: Option<&ViewSummary>) {
    let fs = fs_rules(plan, view);
    let fs_line = if k.landlock_abi > 0 {
        format!(
            "enforced by Landlock ABI {}; anything not listed is denied",
            k.landlock_abi
        )
    } else {
        format!(
            "not enforced: this kernel has no Landlock (it needs Linux {}+ with landlock in lsm=); these are the \
             grants exec would enforce",
            landlock_linux(LANDLOCK_FS)
        )
    };
    println!("filesystem ({fs_line}):");
    for g in &fs.grants {
        println!(
            "  {:<4} {}  — {}",
            g.access.label(),
            g.path.display(),
            g.origin
        );
    }
    if fs.proc_self {
        println!("  r    /proc/self (the child's own)  — filesystem.system");
    }
    for d in &fs.deny {
        println!("  deny {}  — {}", d.path.display(), d.origin);
    }
    for n in plan.command_notes.iter().chain(&plan.fs_notes) {
        println!("  note {n}");
    }
}

/// The network mode and its layer, the allowed hosts, the host tools.
fn print_network(plan: &Plan, k: &Probe, namespaces: bool) {
    println!(
        "network   {} — {}",
        plan.net.mode.as_str(),
        network_layer(plan, k, namespaces)
    );
    for (i, h) in plan.net.allow_hosts.iter().enumerate() {
        match plan.net.host_rules.iter().find(|(j, _)| *j == i) {
            None => println!("  allow host {h}"),
            Some((_, r)) => println!(
                "  allow host {h} — TLS terminated by the proxy: {}{}",
                rules_text(r),
                budgets(r)
            ),
        }
    }
    for c in &plan.net.credentials {
        let (ok, how) = crate::plan::egress::source_resolves(c);
        println!(
            "  credential {} ({}) — from {} ({}: {how}); to {}{}; injected as {}; placeholder in {}",
            c.name,
            c.key,
            c.source.kind(),
            if ok { "resolves" } else { "DOES NOT RESOLVE" },
            c.hosts.join(" "),
            match (&c.methods, &c.paths) {
                (None, None) => String::new(),
                (m, p) => format!(
                    " (methods {}, paths {})",
                    m.as_ref().map_or("any".into(), |m| m.join(" ")),
                    p.as_ref().map_or("any".into(), |p| p.join(" "))
                ),
            },
            crate::plan::egress::inject_text(c),
            if c.placeholder_env.is_empty() { "no variable".into() } else { c.placeholder_env.join(" ") },
        );
    }
    if let Some(b) = &plan.fs.ca_bundle {
        println!(
            "  CA bundle {} (the host's roots and the run's CA; named by SSL_CERT_FILE and the other clients' variables{})",
            b.file.display(),
            b.system.as_ref().map_or(String::new(), |s| format!(", shown at {} in the view", s.display()))
        );
    }
    for t in plan.tools.iter().flat_map(|t| &t.allow) {
        if let Some(argv) = &t.command {
            println!(
                "tool      {}: {} in {} ({}); none of it where the run can write",
                t.name,
                argv.join(" "),
                plan.policy_dir.display(),
                match &t.policy {
                    Some(p) => format!("under policy {p}"),
                    None => "on the host, outside the sandbox".into(),
                }
            );
        }
    }
}

/// A map entry's rules, as `check` prints them: git's, or methods and paths.
fn rules_text(r: &crate::policy::egress::HostRules) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(" ")
        }
    };
    match &r.git {
        Some(g) => format!(
            "git only: fetch {}; push {}",
            list(&g.fetch),
            g.push.as_ref().map_or("none".into(), |p| format!(
                "to {}, branches {}, tags {}, delete {}",
                list(&p.repos),
                list(&p.branches),
                list(&p.tags),
                p.delete
            ))
        ),
        None => format!(
            "methods {}, paths {}",
            r.methods.as_ref().map_or("any".into(), |m| m.join(" ")),
            r.paths.as_ref().map_or("any".into(), |p| p.join(" "))
        ),
    }
}

/// A map entry's budgets, as `check` prints them.
fn budgets(r: &crate::policy::egress::HostRules) -> String {
    let mut s = String::new();
    if let Some(n) = r.max_requests {
        s.push_str(&format!(", at most {n} requests"));
    }
    if let Some(n) = r.max_upload_bytes {
        s.push_str(&format!(", at most {n} bytes uploaded"));
    }
    s
}

/// The limits and how each is enforced.
fn print_limits(plan: &Plan) {
    let l = &plan.limits;
    println!(
        "limits    timeout {}s, output {} bytes/stream",
        l.timeout.as_secs_f64(),
        l.max_output_bytes
    );
    let opt = |name: &str, v: Option<u64>, how: &str| {
        if let Some(v) = v {
            println!("          {name} {v} ({how})");
        }
    };
    // Named and counted as the policy's keys are (`limits.memory_mb`).
    let mib = |v: Option<u64>| v.map(|b| b >> 20);
    opt(
        "memory_mb",
        mib(l.memory_bytes),
        "cgroup where capsule may create one, else RLIMIT_DATA + capsule's memory watchdog (shared memory)",
    );
    // Only the branch that applies to this user (an unprivileged user has
    // no process guard to read about).
    opt(
        "max_processes",
        l.max_processes,
        if nix::unistd::geteuid().is_root() {
            "cgroup pids where capsule may create one, else capsule's process guard (RLIMIT_NPROC does not bind root)"
        } else {
            "cgroup pids where capsule may create one, else RLIMIT_NPROC"
        },
    );
    opt("cpu_seconds", l.cpu_seconds, "RLIMIT_CPU");
    opt(
        "max_file_size_mb",
        mib(l.max_file_size_bytes),
        "RLIMIT_FSIZE",
    );
    opt("max_open_files", l.max_open_files, "RLIMIT_NOFILE");
}

/// `--dry-run`: the plan, and what `exec` would make of it here (the same
/// preparation: what it refuses, the dry run refuses with 125).
/// `exec --dry-run`: the plan, and what `exec` would refuse here (the JSON's
/// `problems`, a "capsule exec refuses this here" line). Exit 0 (contract).
pub fn dry_run(plan: &Plan, json: bool) -> i32 {
    let k = kernel::probe();
    let namespaces;
    let (view, notes, problem) =
        match crate::sandbox::predict(plan, crate::supervisor::spawn::trial) {
            Ok(p) => {
                namespaces = p.path.namespaces;
                let notes: Vec<String> = p
                    .missing
                    .iter()
                    .map(|m| format!("not enforced here: {m}"))
                    .chain(p.limitations.iter().map(|m| format!("limitation: {m}")))
                    .collect();
                (p.view, notes, None)
            }
            Err(e) => {
                namespaces = e.path.namespaces;
                (None, vec![], Some(e.to_string()))
            }
        };
    if json {
        let mut v = plan_json(plan, k, view.as_ref(), namespaces);
        v["notes"] = json!(notes);
        v["problems"] = json!(problem.iter().collect::<Vec<_>>());
        println!("{v}");
    } else {
        print_plan(plan, k, view.as_ref(), namespaces);
        for n in &notes {
            println!("{}", wrap_note(n));
        }
        if let Some(p) = &problem {
            println!("capsule exec refuses this here: {p}");
        }
    }
    // The contract: --dry-run prints the plan and exits 0; `capsule check`
    // is the command whose exit status predicts exec's verdict. A policy
    // that does not even plan was refused before this (125).
    0
}

/// Columns a note of `check`, `--dry-run` and `doctor` is wrapped at.
const NOTE_WIDTH: usize = 100;

/// A note as a paragraph a person can read: a limitation runs to ~2000
/// characters, one line in the JSON but a wall in a terminal. Broken at
/// spaces into lines of at most [`NOTE_WIDTH`] columns (a longer word stays
/// whole), the lines after the first indented by two; every word kept.
pub fn wrap_note(note: &str) -> String {
    labelled("", note, 2)
}

/// `label` then `text` wrapped as [`wrap_note`] does, the lines after the
/// first indented by `indent` (`doctor`'s notes continue under their
/// value column). A short text stays as it is.
pub fn labelled(label: &str, text: &str, indent: usize) -> String {
    let mut out = label.to_string();
    if label.chars().count() + text.chars().count() <= NOTE_WIDTH {
        out.push_str(text);
        return out;
    }
    let mut col = label.chars().count();
    let mut first = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = word.chars().count();
        if !first && col + 1 + len > NOTE_WIDTH {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent));
            col = indent;
        } else if !first {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += len;
        first = false;
    }
    out
}

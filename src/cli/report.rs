//! Human (and JSON) descriptions of a plan: `--dry-run` and `capsule check`.

use serde_json::json;

use crate::kernel::{self, landlock_linux, Probe, LANDLOCK_FS};
use crate::plan::Plan;
use crate::policy::NetMode;

/// The plan as a JSON value (grants with their origin and enforcing layer).
pub fn plan_json(plan: &Plan, k: &Probe) -> serde_json::Value {
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
        "env": plan.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "tmpdir": plan.tmpdir,
        "filesystem": {
            "layer": fs_layer,
            "grants": plan.fs.grants.iter().map(|g| json!({
                "path": g.path, "access": g.access.label(), "origin": g.origin.to_string(),
            })).collect::<Vec<_>>(),
            "deny": plan.fs.deny.iter().map(|d| json!({"path": d.path, "origin": d.origin.to_string()})).collect::<Vec<_>>(),
            "proc_self": plan.fs.proc_self,
            "command_notes": plan.command_notes,
        },
        "network": {
            "mode": plan.net.mode.as_str(),
            "allow_hosts": plan.net.allow_hosts,
            "allow_unix_sockets": plan.net.allow_unix_sockets,
            "layer": network_layer(plan.net.mode, k),
            // As `enforcement.network_path` will say (if clone() grants the namespaces).
            "path": (plan.net.mode == NetMode::Proxy).then(|| {
                if k.namespaces { crate::proxy::ProxyPath::Netns } else { crate::proxy::ProxyPath::LandlockTcpFallback }.as_str()
            }),
        },
        "seccomp": if k.seccomp { "allowlist (unknown syscalls ENOSYS), explicit EPERM denials, socket filter" } else { "NOT AVAILABLE" },
        "tree_kill": if k.namespaces { "pid-namespace" } else { "subreaper" },
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

fn network_layer(mode: NetMode, k: &Probe) -> String {
    match mode {
        NetMode::None => format!(
            "seccomp (no IP sockets){}",
            if k.landlock_tcp() {
                " + Landlock TCP bind/connect denied"
            } else {
                ""
            }
        ),
        NetMode::Proxy => {
            if k.namespaces {
                "own network namespace with only the proxy endpoint".into()
            } else {
                crate::sandbox::describe_host_proxy(k)
            }
        }
        NetMode::Unrestricted => "host network (no filtering)".into(),
    }
}

/// Print the plan for humans.
pub fn print_plan(plan: &Plan, k: &Probe) {
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
    if !plan.argv.is_empty() {
        println!(
            "command   {} ({})",
            plan.argv.join(" "),
            plan.program.display()
        );
    }
    println!("cwd       {}", plan.cwd.display());
    println!(
        "env       {}",
        plan.env
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("filesystem ({fs_line}):");
    for g in &plan.fs.grants {
        println!(
            "  {:<4} {}  — {}",
            g.access.label(),
            g.path.display(),
            g.origin
        );
    }
    if plan.fs.proc_self {
        println!("  r    /proc/self (the child's own)  — filesystem.system");
    }
    for d in &plan.fs.deny {
        println!("  deny {}  — {}", d.path.display(), d.origin);
    }
    for n in &plan.command_notes {
        println!("  note {n}");
    }
    println!(
        "network   {} — {}",
        plan.net.mode.as_str(),
        network_layer(plan.net.mode, k)
    );
    for h in &plan.net.allow_hosts {
        println!("  allow host {h}");
    }
    println!(
        "seccomp   {}",
        if k.seccomp {
            "architecture check, syscall allowlist (unknown → ENOSYS), EPERM denials, socket filter"
        } else {
            "NOT AVAILABLE"
        }
    );
    println!(
        "processes own session, no_new_privs, no capabilities, no core dumps; tree killed via {}",
        if k.namespaces {
            "its own pid namespace"
        } else {
            "a child subreaper"
        }
    );
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
    opt(
        "memory_bytes",
        l.memory_bytes,
        "cgroup where capsule may create one, else RLIMIT_DATA",
    );
    opt(
        "max_processes",
        l.max_processes,
        "cgroup pids where capsule may create one, else RLIMIT_NPROC (as root: capsule's process guard)",
    );
    opt("cpu_seconds", l.cpu_seconds, "RLIMIT_CPU");
    opt("max_file_size_bytes", l.max_file_size_bytes, "RLIMIT_FSIZE");
    opt("max_open_files", l.max_open_files, "RLIMIT_NOFILE");
}

/// `--dry-run`.
pub fn dry_run(plan: &Plan, json: bool) -> i32 {
    let k = kernel::probe();
    if json {
        println!("{}", plan_json(plan, k));
    } else {
        print_plan(plan, k);
    }
    0
}

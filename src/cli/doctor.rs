//! `capsule doctor [--json]`: what this kernel and host give capsule.

use clap::Args;
use serde_json::json;

use super::report::KernelView;
use crate::policy::validate;
use crate::sandbox::cgroup;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DoctorArgs) -> i32 {
    let k = KernelView::probe();
    let uname = nix::sys::utsname::uname().ok();
    let release = uname
        .as_ref()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let arch = std::env::consts::ARCH;
    let root = nix::unistd::geteuid().is_root();
    let v2 = cgroup::v2_mount();
    let cg = cgroup::describe();
    let ok = k.landlock_abi > 0 && k.seccomp;
    let tree = if k.namespaces {
        "pid-namespace"
    } else {
        "subreaper"
    };
    let proxy_mode = if k.namespaces {
        "network namespace holding only the proxy endpoint"
    } else if k.landlock_abi >= 4 {
        "fallback: Landlock TCP port rule + seccomp (cannot pin the address)"
    } else {
        "unavailable (needs user namespaces or Landlock ABI 4)"
    };
    if a.json {
        let v = json!({
            "ok": ok,
            "kernel": release,
            "arch": arch,
            "root": root,
            "landlock_abi": k.landlock_abi,
            "landlock_tcp": k.landlock_abi >= 4,
            "landlock_scopes": k.landlock_abi >= 6,
            "seccomp": k.seccomp,
            "x32_check": arch == "x86_64",
            "user_namespaces": k.namespaces,
            "tree_kill": tree,
            "cgroup_v2": v2.is_some(),
            "cgroup": cg,
            "limits": {
                "memory_mb": "cgroup where capsule may create one beneath its own, else RLIMIT_DATA",
                "max_processes": if root { "cgroup pids (required as root)" } else { "cgroup pids where possible, else RLIMIT_NPROC" },
            },
            "proxy": {
                "available": k.namespaces || k.landlock_abi >= 4,
                "netns": k.namespaces,
                "mode": proxy_mode,
            },
            "refused_env": {
                "prefixes": validate::REFUSED_ENV_PREFIXES,
                "names": validate::REFUSED_ENV_NAMES,
            },
        });
        println!("{v}");
    } else {
        let yes = |b: bool| if b { "yes" } else { "NO" };
        println!(
            "kernel            {release} ({arch}){}",
            if root { ", running as root" } else { "" }
        );
        println!(
            "landlock          {}",
            if k.landlock_abi > 0 {
                format!("ABI {}", k.landlock_abi)
            } else {
                "NOT AVAILABLE (filesystem rules need Linux 5.13+ with Landlock enabled)".into()
            }
        );
        println!(
            "  tcp rules       {} (ABI 4+, Linux 6.7)",
            yes(k.landlock_abi >= 4)
        );
        println!(
            "  scopes          {} (ABI 6+, Linux 6.12: signals, abstract unix sockets)",
            yes(k.landlock_abi >= 6)
        );
        println!("seccomp           {}", yes(k.seccomp));
        println!("x32 check         {}", yes(arch == "x86_64"));
        println!(
            "namespaces        {} (tree kill: {tree})",
            yes(k.namespaces)
        );
        println!("cgroups           {cg}");
        println!("proxy mode        {proxy_mode}");
        let refused: Vec<String> = validate::REFUSED_ENV_PREFIXES
            .iter()
            .map(|p| format!("{p}*"))
            .chain(validate::REFUSED_ENV_NAMES.iter().map(|n| n.to_string()))
            .collect();
        println!("refused env vars  {}", refused.join(" "));
        println!(
            "verdict           {}",
            if ok {
                "capsule can confine programs here"
            } else {
                "capsule cannot fully confine programs here (see NO above)"
            }
        );
    }
    if ok {
        0
    } else {
        1
    }
}

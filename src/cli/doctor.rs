//! `capsule doctor [--json]`: what this kernel and host give capsule.

use clap::Args;
use serde_json::json;

use crate::kernel::{
    landlock_linux, Probe, UsernsBlock, LANDLOCK_FS, LANDLOCK_SCOPES, LANDLOCK_TCP,
};
use crate::policy::validate;
use crate::sandbox::cgroup;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DoctorArgs) -> i32 {
    let k = crate::kernel::probe();
    let uname = nix::sys::utsname::uname().ok();
    let release = uname
        .as_ref()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let arch = std::env::consts::ARCH;
    let root = nix::unistd::geteuid().is_root();
    let v2 = cgroup::v2_mount();
    let cg = cgroup::describe();
    // The same planning `exec` runs, for the default policy and /bin/true:
    // doctor's verdict is exec's.
    let prediction = predict_default();
    let ok = prediction.is_ok();
    let mut advice = advice(k);
    path_advice(k, &prediction, &mut advice);
    // The path exec takes here (the trial child's answer), not only what
    // the sysctls allow.
    let namespaces = match &prediction {
        Ok(p) => p.path.namespaces,
        Err((_, Some(path))) => path.namespaces,
        Err(_) => k.namespaces,
    };
    let tree = if namespaces {
        "pid-namespace"
    } else {
        "subreaper"
    };
    // The network guard, tried as it acts (only where proxy mode would
    // need it: on the host's network).
    let guard = if namespaces || !k.seccomp {
        None
    } else {
        Some(crate::sandbox::net_guard_available())
    };
    if let Some(Err(why)) = &guard {
        advice.push(format!(
            "capsule's network guard cannot run here ({why}): proxy mode on the host's network holds by \
             Landlock's TCP port rule alone (it pins the port, not the address), and a policy with \
             allow_unix_sockets is refused (only the guard refuses listen() there); user namespaces give the \
             run its own network namespace instead"
        ));
    }
    let proxy_mode = if namespaces {
        "network namespace holding only the proxy endpoint".to_string()
    } else {
        format!("fallback: {}", crate::sandbox::describe_host_proxy(k))
    };
    let d = Doctor {
        k,
        release,
        arch,
        root,
        cgroup_v2: v2.is_some(),
        cg,
        prediction,
        ok,
        advice,
        namespaces,
        tree,
        guard,
        proxy_mode,
    };
    if a.json {
        print_json(&d);
    } else {
        print_text(&d);
    }
    if ok {
        0
    } else {
        1
    }
}

/// What doctor found, for printing.
struct Doctor {
    k: &'static Probe,
    release: String,
    arch: &'static str,
    root: bool,
    cgroup_v2: bool,
    cg: String,
    prediction: Result<crate::sandbox::Prediction, (String, Option<crate::sandbox::RunPath>)>,
    ok: bool,
    advice: Vec<String>,
    namespaces: bool,
    tree: &'static str,
    guard: Option<Result<(), String>>,
    proxy_mode: String,
}

/// The prediction for the default policy and /bin/true, as `exec` would plan it.
fn predict_default() -> Result<crate::sandbox::Prediction, (String, Option<crate::sandbox::RunPath>)>
{
    let input = crate::plan::BuildInput {
        loaded: super::exec::default_policy(),
        overrides: crate::plan::build::Overrides::default(),
        argv: vec!["/bin/true".into()],
        best_effort: false,
        run_id: super::exec::new_run_id(),
    };
    crate::plan::build(input)
        .map_err(|e| (e.to_string(), None))
        .and_then(|plan| {
            crate::sandbox::predict(&plan, crate::supervisor::spawn::trial)
                .map_err(|e| (e.to_string(), Some(e.path)))
        })
}

/// What gives back what the kernel refused here (the trial child's answer).
fn path_advice(
    k: &Probe,
    prediction: &Result<crate::sandbox::Prediction, (String, Option<crate::sandbox::RunPath>)>,
    advice: &mut Vec<String>,
) {
    if let Ok(p) = &prediction {
        if k.namespaces && !p.path.namespaces {
            advice.push(
            "the kernel refused the run's namespaces here (see the limitations): in a container, allow \
             unshare of a user namespace (podman's default seccomp profile does; Docker/Kubernetes: a \
             seccomp profile of the runtime default plus the namespaces capsule makes, e.g. \
             seccompProfile: Localhost), or on Ubuntu 23.10+ an AppArmor profile for capsule with `userns,`"
                .to_string(),
        );
        }
        if p.view.as_ref().is_some_and(|v| v.bound_proc) {
            advice.push(
            "a fresh /proc is refused below this container's masked /proc: podman --security-opt \
             unmask=ALL, Docker --security-opt systempaths=unconfined, Kubernetes procMount: Unmasked or a \
             user-namespaced pod (hostUsers: false) gives the run its private /proc"
                .to_string(),
        );
        }
    }
}

/// `doctor --json`: one JSON object.
fn print_json(d: &Doctor) {
    let &Doctor {
        k,
        ref release,
        arch,
        root,
        cgroup_v2,
        ref cg,
        ref prediction,
        ok,
        ref advice,
        namespaces,
        tree,
        ref guard,
        ref proxy_mode,
    } = d;
    let v = json!({
        "ok": ok,
        // The Python backend's `image_digest` is `capsule <version>`.
        "version": env!("CARGO_PKG_VERSION"),
        "kernel": release,
        "arch": arch,
        "root": root,
        "landlock_abi": k.landlock_abi,
        "landlock_tcp": k.landlock_tcp(),
        "landlock_scopes": k.landlock_scopes(),
        "seccomp": k.seccomp,
        "x32_check": arch == "x86_64",
        "user_namespaces": k.namespaces,
        "namespaces": namespaces,
        "tree_kill": tree,
        "cgroup_v2": cgroup_v2,
        "cgroup": cg,
        "limits": {
            "memory_mb": "cgroup where capsule owns one (beneath its own, delegated to it), else RLIMIT_DATA + capsule's memory watchdog (shared memory: smaps_rollup, memfds, private tmpfs; every 100 ms)",
            "max_processes": if root {
                "cgroup pids beneath capsule's cgroup, in its delegated cgroup, or in a delegated systemd scope capsule asks for; else capsule's process guard (seccomp user notification counting the run's tasks)"
            } else {
                "cgroup pids where possible, else RLIMIT_NPROC"
            },
        },
        "proxy": {
            "available": namespaces || k.landlock_tcp() || matches!(guard, Some(Ok(()))),
            "netns": namespaces,
            "guard": matches!(guard, Some(Ok(()))),
            "mode": proxy_mode,
        },
        "default_policy": match &prediction {
            Ok(p) => json!({"runs": true, "missing": p.missing, "limitations": p.limitations,
                            "view": p.view.is_some(),
                            "bound_proc": p.view.as_ref().is_some_and(|v| v.bound_proc),
                            "fallbacks": p.path.fallbacks,
                            "signals": p.signals.as_str()}),
            Err((e, path)) => json!({"runs": false, "refusal": e,
                                     "fallbacks": path.as_ref().map(|p| &p.fallbacks)}),
        },
        "advice": advice,
        "refused_env": {
            "prefixes": validate::REFUSED_ENV_PREFIXES,
            "names": validate::REFUSED_ENV_NAMES,
        },
    });
    println!("{v}");
}

/// `doctor`: one line per fact, the verdict, the advice.
fn print_text(d: &Doctor) {
    let &Doctor {
        k,
        ref release,
        arch,
        root,
        ref cg,
        ref prediction,
        ref advice,
        namespaces,
        tree,
        ref proxy_mode,
        ..
    } = d;
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
            format!(
                "NOT AVAILABLE (filesystem rules need Linux {}+ with Landlock enabled)",
                landlock_linux(LANDLOCK_FS)
            )
        }
    );
    println!(
        "  tcp rules       {} (ABI {LANDLOCK_TCP}+, Linux {})",
        yes(k.landlock_tcp()),
        landlock_linux(LANDLOCK_TCP)
    );
    println!(
        "  scopes          {} (ABI {LANDLOCK_SCOPES}+, Linux {}: signals, abstract unix sockets)",
        yes(k.landlock_scopes()),
        landlock_linux(LANDLOCK_SCOPES)
    );
    println!("seccomp           {}", yes(k.seccomp));
    println!("x32 check         {}", yes(arch == "x86_64"));
    println!(
        "namespaces        {} (tree kill: {tree}){}",
        yes(namespaces),
        if namespaces != k.namespaces {
            " — the host's settings allow them, the kernel refused them (see the limitations below)"
        } else {
            ""
        }
    );
    println!("cgroups           {cg}");
    if !root && !own_cgroup_delegated() {
        println!(
            "                  (these are the cgroups this process sits in; none is delegated to this user, so \
             capsule makes no cgroup for it: its limits are rlimits, as `capsule check` shows)"
        );
    }
    println!("proxy mode        {proxy_mode}");
    let refused: Vec<String> = validate::REFUSED_ENV_PREFIXES
        .iter()
        .map(|p| format!("{p}*"))
        .chain(validate::REFUSED_ENV_NAMES.iter().map(|n| n.to_string()))
        .collect();
    println!("refused env vars  {}", refused.join(" "));
    match &prediction {
        Ok(p) => {
            println!(
                "verdict           the default policy runs confined here{}",
                match &p.view {
                    Some(v) if v.bound_proc => {
                        " (with the run's view of the host; /proc is the container's, bound read-only)"
                    }
                    Some(_) => " (with the run's view of the host)",
                    None => " (no namespaces: no view)",
                }
            );
            println!("  signals         {}", p.signals.describe());
            for m in &p.missing {
                println!("{}", super::report::labelled("  not enforced    ", m, 18));
            }
            for l in &p.limitations {
                println!("{}", super::report::labelled("  limitation      ", l, 18));
            }
        }
        Err((e, path)) => {
            println!("verdict           capsule exec refuses the default policy here: {e}");
            for f in path.iter().flat_map(|p| &p.fallbacks) {
                println!("{}", super::report::labelled("  limitation      ", f, 18));
            }
        }
    }
    for a in advice {
        println!("advice            {a}");
    }
}

/// Concrete steps that would give capsule more on this host.
fn advice(k: &Probe) -> Vec<String> {
    let mut out = Vec::new();
    if k.landlock_abi == 0 {
        match k.landlock_errno {
            Some(nix::errno::Errno::EOPNOTSUPP) => {
                let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
                let lsm = lsm.trim();
                out.push(format!(
                    "Landlock is built into this kernel but not enabled: add it to the lsm= boot parameter, \
                     e.g. lsm=landlock,{} (the active list is \"{lsm}\"), then reboot",
                    if lsm.is_empty() { "lockdown,yama,integrity,apparmor,bpf" } else { lsm }
                ));
            }
            _ => out.push(format!(
                "this kernel has no Landlock: it needs Linux {}+ built with CONFIG_SECURITY_LANDLOCK=y",
                landlock_linux(LANDLOCK_FS)
            )),
        }
    }
    // The view's mount_setattr answered ENOSYS: an old kernel, or a
    // container's seccomp profile.
    if !k.namespaces
        && k.userns_blocked_by.is_empty()
        && !crate::kernel::namespaces_disabled_by_env()
        && !crate::sys::mount_setattr_available()
    {
        out.push(
            "the run's view needs mount_setattr (Linux 5.12+), which this kernel or a seccomp profile refuses \
             (ENOSYS): runs take the no-namespace path"
                .to_string(),
        );
    }
    // What the probe found forbidding user namespaces (nothing as root or
    // with CAPSULE_NO_NAMESPACES).
    for block in &k.userns_blocked_by {
        let line = match block {
            UsernsBlock::MaxUserNamespaces => {
                "user namespaces are disabled: sysctl -w user.max_user_namespaces=15000 gives capsule its \
                 pid, mount, IPC and network namespaces (the view)"
            }
            UsernsBlock::UnprivilegedClone => {
                "unprivileged user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1"
            }
            UsernsBlock::AppArmor => {
                "AppArmor restricts unprivileged user namespaces (Ubuntu 24.04): allow them for capsule with \
                 a profile (/etc/apparmor.d/capsule: `abi <abi/4.0>, include <tunables/global> profile \
                 capsule /path/to/capsule flags=(unconfined) { userns, }`), or sysctl -w \
                 kernel.apparmor_restrict_unprivileged_userns=0"
            }
        };
        out.push(line.to_string());
    }
    out
}

/// Whether this (unprivileged) process's own v2 cgroup is delegated to its
/// user: marked by systemd, or chowned to it. Without that, the cgroup
/// paths `doctor` prints are someone else's (root's session or service).
fn own_cgroup_delegated() -> bool {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let (v2, _) = cgroup::parse_proc_cgroup(&text);
    match (cgroup::v2_mount(), v2) {
        (Some(m), Some(rel)) => {
            let dir = m.join(rel.trim_start_matches('/'));
            cgroup::delegate_marked(&dir)
                || cgroup::chowned_to(&dir, nix::unistd::geteuid().as_raw())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(landlock_errno: Option<nix::errno::Errno>, blocked: Vec<UsernsBlock>) -> Probe {
        Probe {
            landlock_abi: if landlock_errno.is_some() { 0 } else { 7 },
            landlock_errno,
            seccomp: true,
            namespaces: blocked.is_empty(),
            userns_blocked_by: blocked,
            memfd_noexec: false,
            memfd_noexec_known: true,
            root_needs_userns: false,
        }
    }

    #[test]
    fn advice_names_each_setting_that_forbids_user_namespaces() {
        assert!(advice(&host(None, vec![])).is_empty());
        let a = advice(&host(
            None,
            vec![
                UsernsBlock::MaxUserNamespaces,
                UsernsBlock::UnprivilegedClone,
                UsernsBlock::AppArmor,
            ],
        ));
        assert_eq!(a.len(), 3, "{a:?}");
        assert!(
            a[0].contains("sysctl -w user.max_user_namespaces=15000 gives capsule its pid, mount")
        );
        assert!(a[1].contains("sysctl -w kernel.unprivileged_userns_clone=1"));
        assert!(a[2].contains("allow them for capsule with a profile"));
        assert!(a[2].ends_with("or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"));
    }

    #[test]
    fn advice_for_a_kernel_without_landlock_names_the_release() {
        let a = advice(&host(Some(nix::errno::Errno::ENOSYS), vec![]));
        assert_eq!(
            a,
            vec!["this kernel has no Landlock: it needs Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK=y"]
        );
        let a = advice(&host(Some(nix::errno::Errno::EOPNOTSUPP), vec![]));
        assert!(
            a[0].starts_with("Landlock is built into this kernel but not enabled"),
            "{a:?}"
        );
    }
}

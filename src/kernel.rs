//! What this kernel and host allow, probed once per run.
//!
//! The planner, the sandbox layers, `check` and `doctor` ask the same
//! questions; the answers live here so that they agree.

use std::sync::OnceLock;

/// Whether this process may create namespaces for the run: root, or a host
/// that allows unprivileged user namespaces (and `CAPSULE_NO_NAMESPACES` is
/// not set). This reads sysctls; the clone itself can still be refused (an
/// outer seccomp profile, a container without CAP_SYS_ADMIN), and the
/// supervisor then falls back to the no-namespace path and re-plans.
pub fn namespaces_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(probe_namespaces)
}

fn probe_namespaces() -> bool {
    if std::env::var_os("CAPSULE_NO_NAMESPACES").is_some() {
        return false;
    }
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return false;
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return false;
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return false;
    }
    true
}

/// Where the per-pid-namespace `vm.memfd_noexec` sysctl lives (Linux 6.3+);
/// the run's init writes it (`sandbox::view`).
pub const MEMFD_NOEXEC: &std::ffi::CStr = c"/proc/sys/vm/memfd_noexec";

/// Whether the run's init can set `vm.memfd_noexec = 2` in its pid namespace:
/// the sysctl exists (Linux 6.3+) and capsule runs as root (the file is
/// writable by the initial user namespace's root only).
pub fn memfd_noexec_settable() -> bool {
    nix::unistd::geteuid().is_root()
        && MEMFD_NOEXEC
            .to_str()
            .is_ok_and(|p| std::path::Path::new(p).exists())
}

//! What this kernel and host allow, probed once per run.
//!
//! The sandbox layers, `check` and `doctor` ask the same questions; [`probe`]
//! asks the kernel once per process (the first call probes, every later one
//! reads the answers) so that they agree. This file also holds the one table
//! of the Linux release that brought each Landlock ABI
//! ([`landlock_linux`]), which every message naming a kernel reads.

use std::sync::OnceLock;

use nix::errno::Errno;

/// What this kernel and host allow. Obtained through [`probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The kernel's Landlock ABI; 0 when it has none.
    pub landlock_abi: u32,
    /// Why there is no Landlock: ENOSYS (not built) or EOPNOTSUPP (built
    /// but not enabled at boot, `lsm=`). None where there is.
    pub landlock_errno: Option<Errno>,
    /// Whether the kernel can enforce the seccomp program: filter mode is
    /// built in and knows SECCOMP_RET_KILL_PROCESS (Linux 4.14+). ERRNO and
    /// ALLOW, the other actions used, are as old as filter mode itself (3.5).
    pub seccomp: bool,
    /// Whether this process may create namespaces for the run: root, or a
    /// host that allows unprivileged user namespaces (and
    /// `CAPSULE_NO_NAMESPACES` is not set). This reads sysctls; the clone
    /// itself can still be refused (an outer seccomp profile, a container
    /// without CAP_SYS_ADMIN), and the supervisor then falls back to the
    /// no-namespace path and re-plans.
    pub namespaces: bool,
    /// The host settings that forbid unprivileged user namespaces, in the
    /// order `doctor` advises on them (empty as root or with
    /// `CAPSULE_NO_NAMESPACES`: then nothing was read).
    pub userns_blocked_by: Vec<UsernsBlock>,
    /// Whether the run's init can set `vm.memfd_noexec = 2` in its pid
    /// namespace: the sysctl exists (Linux 6.3+) and capsule runs as root
    /// (the file is writable by the initial user namespace's root only).
    pub memfd_noexec: bool,
    /// Whether the kernel has `vm.memfd_noexec`, and so MFD_NOEXEC_SEAL
    /// (Linux 6.3+): the memfd guard's condition where capsule cannot set it.
    pub memfd_noexec_known: bool,
    /// capsule runs as root without CAP_SYS_ADMIN (a container's root with
    /// the runtime's default capabilities): the run's namespaces need a user
    /// namespace of their own, mapping root to itself, as for an
    /// unprivileged user (`supervisor::spawn`).
    pub root_needs_userns: bool,
}

/// A host setting that forbids unprivileged user namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsernsBlock {
    /// `user.max_user_namespaces = 0`.
    MaxUserNamespaces,
    /// `kernel.unprivileged_userns_clone = 0` (Debian's patch).
    UnprivilegedClone,
    /// `kernel.apparmor_restrict_unprivileged_userns = 1` (Ubuntu 24.04).
    AppArmor,
}

/// The probe of this kernel and host, made on the first call.
pub fn probe() -> &'static Probe {
    static PROBE: OnceLock<Probe> = OnceLock::new();
    PROBE.get_or_init(Probe::detect)
}

impl Probe {
    fn detect() -> Probe {
        let landlock = crate::sys::landlock_abi_version();
        let (namespaces, userns_blocked_by) = probe_namespaces();
        // The run's view needs mount_setattr (Linux 5.12): an older kernel
        // (Debian 11's 5.10, which has no Landlock either) takes the
        // no-namespace path rather than failing at the mount.
        let namespaces = namespaces && crate::sys::mount_setattr_available();
        let root = nix::unistd::geteuid().is_root();
        let root_needs_userns = root && !crate::sys::has_effective_cap(CAP_SYS_ADMIN);
        Probe {
            landlock_abi: lowered(
                *landlock.as_ref().unwrap_or(&0),
                std::env::var(LANDLOCK_ABI_MAX_ENV).ok().as_deref(),
            ),
            landlock_errno: landlock.err(),
            // Two syscalls that install nothing (see `sys`).
            seccomp: crate::sys::seccomp_filter_mode_available(),
            namespaces,
            userns_blocked_by,
            // Only the initial user namespace's root may write the sysctl:
            // not a container's root in a user namespace (rootless podman),
            // nor root in the user namespace the run then needs.
            memfd_noexec: root
                && !root_needs_userns
                && memfd_noexec_known()
                && initial_user_namespace(),
            memfd_noexec_known: memfd_noexec_known(),
            root_needs_userns,
        }
    }

    /// Landlock TCP bind/connect rules.
    pub fn landlock_tcp(&self) -> bool {
        self.landlock_abi >= LANDLOCK_TCP
    }

    /// Landlock's signal and abstract-unix-socket scopes.
    pub fn landlock_scopes(&self) -> bool {
        self.landlock_abi >= LANDLOCK_SCOPES
    }
}

/// Environment variable that LOWERS the Landlock ABI capsule uses, to run
/// and test the planning and enforcement of an older kernel on a newer one
/// (`CAPSULE_LANDLOCK_ABI_MAX=4` behaves as Linux 6.7-6.9 would). It can
/// only lower: a value above the kernel's ABI, or one that is not a number,
/// is ignored. Every layer reads the ABI from [`probe`], so the planning
/// refuses or reports what the lowered ABI cannot give, exactly as on such a
/// kernel: it never makes capsule weaker in silence.
pub const LANDLOCK_ABI_MAX_ENV: &str = "CAPSULE_LANDLOCK_ABI_MAX";

/// The kernel's ABI, lowered to `max` when that is a smaller number.
fn lowered(kernel: u32, max: Option<&str>) -> u32 {
    match max.and_then(|m| m.trim().parse::<u32>().ok()) {
        Some(m) if m < kernel => m,
        _ => kernel,
    }
}

/// Whether `CAPSULE_NO_NAMESPACES` (set and not "0" or empty, as
/// capsule's other switches) sends every run down the no-namespace path:
/// the operator's choice, for tests and to emulate hosts without namespaces.
pub fn namespaces_disabled_by_env() -> bool {
    std::env::var_os("CAPSULE_NO_NAMESPACES").is_some_and(|v| !v.is_empty() && v != "0")
}

fn probe_namespaces() -> (bool, Vec<UsernsBlock>) {
    if namespaces_disabled_by_env() {
        return (false, Vec::new());
    }
    if nix::unistd::geteuid().is_root() {
        return (true, Vec::new());
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let blocked: Vec<UsernsBlock> = [
        (
            "/proc/sys/user/max_user_namespaces",
            "0",
            UsernsBlock::MaxUserNamespaces,
        ),
        (
            "/proc/sys/kernel/unprivileged_userns_clone",
            "0",
            UsernsBlock::UnprivilegedClone,
        ),
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
            UsernsBlock::AppArmor,
        ),
    ]
    .into_iter()
    .filter(|(path, forbids, _)| read(path).as_deref() == Some(*forbids))
    .map(|(_, _, block)| block)
    .collect();
    (blocked.is_empty(), blocked)
}

/// linux/capability.h.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether this process is in the initial user namespace (its uid map is
/// the identity over the whole range).
fn initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
}

/// Where the per-pid-namespace `vm.memfd_noexec` sysctl lives (Linux 6.3+);
/// the run's init writes it (`sandbox::view`).
pub const MEMFD_NOEXEC: &std::ffi::CStr = c"/proc/sys/vm/memfd_noexec";

/// Whether this kernel has the `vm.memfd_noexec` sysctl.
fn memfd_noexec_known() -> bool {
    MEMFD_NOEXEC
        .to_str()
        .is_ok_and(|p| std::path::Path::new(p).exists())
}

/// The Landlock ABI of filesystem rules, the first one.
pub const LANDLOCK_FS: u32 = 1;
/// The Landlock ABI of the truncate right.
pub const LANDLOCK_TRUNCATE: u32 = 3;
/// The Landlock ABI of TCP bind/connect rules.
pub const LANDLOCK_TCP: u32 = 4;
/// The Landlock ABI of the signal and abstract-unix-socket scopes.
pub const LANDLOCK_SCOPES: u32 = 6;

/// The first Linux release with each Landlock ABI (ABI 0, none, is listed
/// as ABI 1's; an ABI past the table as the last one's).
pub fn landlock_linux(abi: u32) -> &'static str {
    match abi {
        0 | 1 => "5.13",
        2 => "5.19",
        3 => "6.2",
        4 => "6.7",
        5 => "6.10",
        6 => "6.12",
        7 => "6.15",
        8 => "7.0",
        9 => "7.1",
        _ => "7.2",
    }
}

/// The Linux releases that have exactly Landlock ABI `abi`: "5.13-5.18" for
/// ABI 1 (the release before the next ABI's first; that release must not
/// open a major version).
pub fn landlock_linux_span(abi: u32) -> String {
    let next = landlock_linux(abi + 1);
    let last = match next.split_once('.') {
        Some((major, minor)) => match minor.parse::<u32>() {
            Ok(m) if m > 0 => format!("{major}.{}", m - 1),
            _ => format!("before {next}"),
        },
        None => format!("before {next}"),
    };
    format!("{}-{last}", landlock_linux(abi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_is_made_once_and_sane() {
        let p = probe();
        assert!(std::ptr::eq(p, probe()));
        assert!(p.landlock_abi < 100);
        assert_eq!(p.landlock_errno.is_some(), p.landlock_abi == 0);
        assert!(p.userns_blocked_by.is_empty() || !p.namespaces);
    }

    #[test]
    fn the_abi_override_only_lowers() {
        assert_eq!(lowered(7, None), 7);
        assert_eq!(lowered(7, Some("4")), 4);
        assert_eq!(lowered(7, Some(" 0 ")), 0);
        assert_eq!(lowered(4, Some("7")), 4);
        assert_eq!(lowered(4, Some("-1")), 4);
        assert_eq!(lowered(4, Some("six")), 4);
        assert_eq!(lowered(0, Some("3")), 0);
    }

    #[test]
    fn landlock_table() {
        assert_eq!(landlock_linux(0), "5.13");
        assert_eq!(landlock_linux(LANDLOCK_TCP), "6.7");
        assert_eq!(landlock_linux(LANDLOCK_SCOPES), "6.12");
        assert_eq!(landlock_linux(LANDLOCK_TRUNCATE), "6.2");
        assert_eq!(landlock_linux(99), "7.2");
        assert_eq!(landlock_linux_span(LANDLOCK_FS), "5.13-5.18");
        assert_eq!(landlock_linux_span(2), "5.19-6.1");
        assert_eq!(landlock_linux_span(7), "6.15-before 7.0");
    }
}

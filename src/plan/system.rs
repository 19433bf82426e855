//! What `filesystem.system: true` grants.
//!
//! Enough for a dynamically linked program and a Python or Node
//! interpreter, and no more: read+exec of the system program and library
//! directories; read of the few files under /etc that the loader, libc,
//! TLS and time zones need (not all of /etc: /etc/shadow and friends stay
//! unreadable even when capsule runs as root; inside the run's view all of
//! /etc is granted instead, its secrets covered: `sandbox::view`); a handful of harmless /proc
//! files; the /dev nodes of the contract. The child's own /proc/self is
//! added in the child after fork (it names the child, not the parent).
//! Paths that do not exist on this host are skipped.

use std::path::PathBuf;
use std::sync::Arc;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{Access, FsGrant, Opened, Origin};

/// Directories granted read+exec.
const EXEC_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

/// Files and directories under /etc granted read.
const ETC: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/alternatives",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/debian_version",
    "/etc/lsb-release",
    "/etc/redhat-release",
    "/etc/system-release",
    "/etc/timezone",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/pip.conf",
    "/etc/gitconfig",
    "/etc/npmrc",
    "/etc/magic",
    "/etc/terminfo",
    "/etc/inputrc",
];

/// Read-only /proc files that reveal nothing about other processes.
const PROC: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/version",
    "/proc/loadavg",
    "/proc/filesystems",
];

/// /dev nodes: (path, access).
const DEV: &[(&str, Access)] = &[
    ("/dev/null", Access::WRITE),
    ("/dev/zero", Access::READ),
    ("/dev/full", Access::WRITE),
    ("/dev/random", Access::READ),
    ("/dev/urandom", Access::READ),
    ("/dev/tty", Access::WRITE),
];

/// The system grants that exist on this host.
pub fn grants() -> Vec<FsGrant> {
    let mut out = Vec::with_capacity(EXEC_DIRS.len() + ETC.len() + PROC.len() + DEV.len());
    let mut add = |p: &str, access: Access| {
        // symlink_metadata: /lib -> usr/lib is fine to grant (the rule lands on
        // the target), but a dangling entry is skipped.
        // Opened rather than stat'ed: the same path walk, and Landlock reuses the descriptor.
        if let Ok(fd) = nix::fcntl::open(p, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) {
            out.push(FsGrant {
                opened: Opened(Some(Arc::new(fd))),
                path: PathBuf::from(p),
                access,
                origin: Origin::System,
            });
        }
    };
    for d in EXEC_DIRS {
        // On merged-/usr systems /bin, /lib... are symlinks into /usr: one rule suffices.
        let link = std::fs::read_link(d);
        let into_usr = link
            .as_ref()
            .is_ok_and(|t| t.starts_with("usr/") || t.starts_with("/usr/"));
        // No entry at all (/lib32 on most hosts): nothing to stat either.
        let absent = link
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        if !into_usr && !absent {
            add(d, Access::EXEC);
        }
    }
    for f in ETC {
        add(f, Access::READ);
    }
    for f in PROC {
        add(f, Access::READ);
    }
    for (d, a) in DEV {
        add(d, *a);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn has_the_basics_and_no_shadow() {
        let g = super::grants();
        assert!(g
            .iter()
            .any(|g| g.path.as_os_str() == "/usr" && g.access.exec));
        assert!(g
            .iter()
            .any(|g| g.path.as_os_str() == "/dev/null" && g.access.write));
        assert!(!g
            .iter()
            .any(|g| g.path.as_os_str() == "/etc" || g.path.starts_with("/etc/shadow")));
    }
}

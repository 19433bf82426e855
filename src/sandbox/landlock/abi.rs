//! Which Landlock ABI capsule uses on this kernel, and what the plan needs
//! that it lacks. The kernel's ABI and the Linux release of each ABI are
//! `crate::kernel`'s.

use landlock::ABI;

use crate::kernel::{landlock_linux, LANDLOCK_FS, LANDLOCK_SCOPES, LANDLOCK_TCP};

/// The highest ABI the `landlock` crate (0.4.8) knows. A newer kernel is used
/// at this ABI: rights the crate cannot name cannot be handled.
pub(super) const CRATE_MAX_ABI: u32 = 10;

/// The ABI capsule uses: the kernel's, capped at what the crate knows.
pub(super) fn effective(kernel: u32) -> u32 {
    kernel.min(CRATE_MAX_ABI)
}

/// The crate's ABI value for an effective ABI number.
pub(super) fn to_crate(abi: u32) -> ABI {
    // ABI::from(i32) maps <= 0 to Unsupported and caps above the crate's maximum.
    ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
}

/// What the plan needs that this kernel lacks, one sentence each.
pub(super) fn missing_features(kernel: u32, handle_tcp: bool, scopes: bool) -> Vec<String> {
    let mut missing = Vec::new();
    let mut need = |what: &str, abi: u32| {
        if kernel < abi {
            missing.push(format!(
                "{what} need Landlock ABI {abi} (Linux {}+); this kernel has {}",
                landlock_linux(abi),
                if kernel == 0 {
                    "no Landlock".to_string()
                } else {
                    format!("ABI {kernel}")
                }
            ));
        }
    };
    need("filesystem rules", LANDLOCK_FS);
    if handle_tcp {
        need("TCP bind/connect rules", LANDLOCK_TCP);
    }
    if scopes {
        need("signal and abstract-unix-socket scopes", LANDLOCK_SCOPES);
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crate_max_abi_matches_the_crate() {
        assert_eq!(to_crate(CRATE_MAX_ABI), ABI::from(i32::MAX));
        assert_ne!(to_crate(CRATE_MAX_ABI - 1), ABI::from(i32::MAX));
        assert_eq!(to_crate(0), ABI::Unsupported);
    }

    #[test]
    fn missing_names_feature_and_kernel() {
        assert!(missing_features(7, true, true).is_empty());
        let m = missing_features(0, true, true);
        assert_eq!(m.len(), 3);
        assert!(m[0].contains("ABI 1 (Linux 5.13+)"), "{m:?}");
        assert!(m[0].contains("no Landlock"), "{m:?}");
        let m = missing_features(3, true, false);
        assert_eq!(m.len(), 1);
        assert!(
            m[0].contains("TCP") && m[0].contains("Linux 6.7+") && m[0].contains("ABI 3"),
            "{m:?}"
        );
        let m = missing_features(5, false, true);
        assert!(m.len() == 1 && m[0].contains("Linux 6.12+"), "{m:?}");
    }
}

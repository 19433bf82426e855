//! Which Landlock ABI this kernel offers, and what each feature needs.

use std::sync::OnceLock;

use landlock::ABI;

/// The highest ABI the `landlock` crate (0.4.8) knows. A newer kernel is used
/// at this ABI: rights the crate cannot name cannot be handled.
pub(super) const CRATE_MAX_ABI: u32 = 10;

/// Landlock ABI of the running kernel (0 = unavailable: ENOSYS or EOPNOTSUPP).
/// Asked once per process, then cached.
pub fn kernel_abi() -> u32 {
    static ABI_CACHE: OnceLock<u32> = OnceLock::new();
    *ABI_CACHE.get_or_init(query_kernel_abi)
}

fn query_kernel_abi() -> u32 {
    crate::sys::landlock_abi_version().unwrap_or(0)
}

/// The ABI capsule uses: the kernel's, capped at what the crate knows.
pub(super) fn effective(kernel: u32) -> u32 {
    kernel.min(CRATE_MAX_ABI)
}

/// The crate's ABI value for an effective ABI number.
pub(super) fn to_crate(abi: u32) -> ABI {
    // ABI::from(i32) maps <= 0 to Unsupported and caps above the crate's maximum.
    ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
}

/// First Linux release with each Landlock ABI (index = ABI).
pub(super) fn min_kernel(abi: u32) -> &'static str {
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

/// What the plan needs that this kernel lacks, one sentence each.
pub(super) fn missing_features(kernel: u32, handle_tcp: bool, scopes: bool) -> Vec<String> {
    let mut missing = Vec::new();
    let mut need = |what: &str, abi: u32| {
        if kernel < abi {
            missing.push(format!(
                "{what} need Landlock ABI {abi} (Linux {}+); this kernel has {}",
                min_kernel(abi),
                if kernel == 0 {
                    "no Landlock".to_string()
                } else {
                    format!("ABI {kernel}")
                }
            ));
        }
    };
    need("filesystem rules", 1);
    if handle_tcp {
        need("TCP bind/connect rules", 4);
    }
    if scopes {
        need("signal and abstract-unix-socket scopes", 6);
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

    #[test]
    fn kernel_abi_is_cached_and_sane() {
        let a = kernel_abi();
        assert_eq!(a, kernel_abi());
        assert!(a < 100);
    }
}

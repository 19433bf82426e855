//! What `capsule --version` states: the version, the git commit it was built
//! from (build.rs; "unknown" outside a git checkout), the target it was
//! built for, the highest Landlock ABI this build can use and the seccomp
//! architecture it filters. The running kernel's side is `capsule doctor`.

use std::sync::OnceLock;

/// The git commit of the build (12 hex digits, or "unknown").
pub const COMMIT: &str = env!("CAPSULE_GIT_COMMIT");

/// The target triple of the build.
pub const TARGET: &str = env!("CAPSULE_TARGET");

/// `-V`: one line.
pub fn short() -> &'static str {
    static S: OnceLock<String> = OnceLock::new();
    S.get_or_init(|| format!("{} (commit {COMMIT})", env!("CARGO_PKG_VERSION")))
}

/// `--version`: the version line, then what the build knows.
pub fn long() -> &'static str {
    static S: OnceLock<String> = OnceLock::new();
    S.get_or_init(|| {
        let landlock = landlock::ABI::from(i32::MAX) as i32;
        let linkage = if cfg!(target_feature = "crt-static") {
            "static"
        } else {
            "dynamic"
        };
        format!(
            "{}\ncommit: {COMMIT}\ntarget: {TARGET} ({linkage})\n\
             landlock: ABI 1 to {landlock} (the kernel's is used, capped at {landlock})\n\
             seccomp: {arch} syscall tables\n\
             this kernel: see `capsule doctor`",
            short(),
            arch = std::env::consts::ARCH,
        )
    })
}

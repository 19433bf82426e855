//! Errors of the Landlock layer.

use std::path::PathBuf;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong while building or applying the Landlock ruleset.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The plan needs something this kernel cannot enforce (and `--best-effort` was not given).
    #[error("this kernel cannot enforce the plan: {}; upgrade the kernel or pass --best-effort", .missing.join("; "))]
    Unsupported {
        kernel_abi: u32,
        missing: Vec<String>,
    },

    /// A grant's path (or an entry of a carved directory) could not be opened.
    #[error("open({path}, O_PATH) for a Landlock rule => {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },

    /// fstat/lstat of a rule or deny path failed.
    #[error("stat({path}) for a Landlock rule => {source}")]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A directory above a denied path could not be listed, so the deny cannot be carved out.
    #[error("cannot list {path} to carve out the denied path {deny} => {source}")]
    ListDir {
        path: PathBuf,
        deny: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A denied path goes through a symbolic link (the plan promised canonical paths).
    #[error("denied path {deny} is not canonical: {path} is not a directory (a symbolic link?)")]
    NotCanonical { deny: PathBuf, path: PathBuf },

    /// The `landlock` crate or the kernel refused a step of building or applying the ruleset.
    #[error("Landlock {op} => {source}")]
    Ruleset {
        op: &'static str,
        #[source]
        source: BoxError,
    },
}

impl LandlockError {
    pub(super) fn ruleset(
        op: &'static str,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        LandlockError::Ruleset {
            op,
            source: Box::new(e),
        }
    }
}

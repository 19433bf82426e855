//! The plan: everything a run needs, resolved in the parent before fork.
//!
//! A [`Plan`] is built from a [`crate::policy::LoadedPolicy`] plus the command
//! line. It holds absolute paths, the exact environment, each filesystem
//! grant labelled with where it came from and which layer enforces it, and
//! the limits. `--dry-run` and `capsule check` print it; `supervisor::spawn`
//! turns it into a confined child without further decisions.

pub mod build;
pub mod command;
pub mod egress;
pub mod env;
pub mod mounts;
pub mod notices;
pub mod system;
pub mod tools;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::policy::NetMode;

pub use build::{build, BuildInput, PlanError};
// Defined beneath the plan, in the policy layer, which needs them too
// (validation and path resolution) and must not call up into the planner.
pub use crate::policy::access::Access;
pub use crate::policy::credentials;
pub use crate::policy::resolve::Opened;

/// Where a grant or carve-out came from, for `--dry-run` and errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A policy key, e.g. `filesystem.write[0]`, with its line when known.
    Policy { key: String, line: Option<usize> },
    /// A command-line flag such as `--allow-read`.
    Cli(&'static str),
    /// `filesystem.system: true`.
    System,
    /// The resolved command, its interpreter or its install prefix: why.
    Command(String),
    /// The private $TMPDIR.
    Tmp,
    /// `--workspace`.
    Workspace,
    /// A built-in credential carve-out (section 2): what the path holds.
    Credential(&'static str),
    /// A built-in carve-out of a system secret under /etc: what it holds.
    Secret(&'static str),
    /// The run's CA bundle (hosts the proxy TLS-terminates, contract section 8).
    CaBundle,
}

impl Origin {
    /// A mount's source (`mounts:` or `--mount`): named exactly by the
    /// mount, as the path it exposes.
    pub fn is_mount(&self) -> bool {
        match self {
            Origin::Policy { key, .. } => key.starts_with("mounts["),
            Origin::Cli(flag) => *flag == "--mount",
            _ => false,
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Policy { key, line: Some(l) } => write!(f, "policy {key} (line {l})"),
            Origin::Policy { key, line: None } => write!(f, "policy {key}"),
            Origin::Cli(flag) => write!(f, "command line {flag}"),
            Origin::System => write!(f, "filesystem.system"),
            Origin::Command(why) => write!(f, "the command: {why}"),
            Origin::Tmp => write!(f, "filesystem.tmp"),
            Origin::Workspace => write!(f, "--workspace"),
            Origin::Credential(what) => write!(
                f,
                "built-in credential carve-out ({what}): unreadable beneath every grant unless a grant names it exactly"
            ),
            Origin::Secret(what) => write!(
                f,
                "built-in carve-out of a system secret ({what}): unreadable beneath every grant, even to root, unless \
                 a grant names it exactly"
            ),
            Origin::CaBundle => write!(
                f,
                "the run's CA bundle (the host's roots and the CA of capsule's proxy, for TLS-terminated hosts)"
            ),
        }
    }
}

/// One filesystem grant: an absolute, existing path and its rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsGrant {
    pub path: PathBuf,
    pub access: Access,
    pub origin: Origin,
    /// The path opened (`O_PATH`) while planning, when planning had to look
    /// at it anyway (system grants), so Landlock need not resolve it again.
    pub opened: Opened,
}

/// A path that must stay inaccessible even beneath a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsDeny {
    pub path: PathBuf,
    pub origin: Origin,
}

/// The filesystem part of the plan (enforced by Landlock).
#[derive(Debug, Clone, Default)]
pub struct FsPlan {
    pub grants: Vec<FsGrant>,
    /// Carve-outs (policy `deny` and credential paths that exist beneath a grant).
    pub deny: Vec<FsDeny>,
    /// Grant the child's own /proc/self (read), added in the child after fork.
    pub proc_self: bool,
    /// Binds of the view (`mounts:`, `--mount`): a source seen at a destination.
    pub mounts: Vec<Bind>,
    /// Where the run's CA bundle is written, and the system bundle the view
    /// shows it at (proxy mode with TLS-terminated hosts only).
    pub ca_bundle: Option<CaBundle>,
}

/// The run's CA bundle: the host's roots and the proxy's per-run CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaBundle {
    /// The file capsule writes before the run starts (read-only to the run)
    /// and removes after it; its directory is capsule's, not the run's.
    pub file: PathBuf,
    /// The host's system bundle, which the view shows as `file`.
    pub system: Option<PathBuf>,
}

impl FsPlan {
    /// The grants beneath the host's `/tmp` (not `/tmp` itself, not the
    /// run's TMPDIR `tmpdir`, not a mount's source): the view binds them
    /// again inside its private `/tmp`.
    pub fn grants_beneath_tmp<'a>(
        &'a self,
        tmpdir: Option<&'a Path>,
    ) -> impl Iterator<Item = &'a FsGrant> + 'a {
        let tmp = Path::new("/tmp");
        self.grants
            .iter()
            .filter(|g| !self.mounts.iter().any(|m| m.src == g.path))
            .filter(move |g| {
                g.path.starts_with(tmp)
                    && g.path != tmp
                    && !tmpdir.is_some_and(|t| g.path.starts_with(t))
            })
    }

    /// A carve-out beneath a grant beneath the host's `/tmp`, and that
    /// grant: Landlock rights are inherited along the mount hierarchy, so
    /// inside a private `/tmp` the carve-out would be lost, and the view
    /// keeps the host's `/tmp` instead (see `sandbox::view`).
    pub fn carved_beneath_tmp<'a>(
        &'a self,
        tmpdir: Option<&'a Path>,
    ) -> Option<(&'a FsDeny, &'a FsGrant)> {
        self.grants_beneath_tmp(tmpdir).find_map(|g| {
            self.deny
                .iter()
                .find(|d| d.path.starts_with(&g.path))
                .map(|d| (d, g))
        })
    }
}

/// One bind of the run's view (`mounts:`, `--mount`, and the view's own
/// writable places): the host path `src` seen at `dst` inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub read_only: bool,
}

/// The network part of the plan.
#[derive(Debug, Clone, Default)]
pub struct NetPlan {
    pub mode: NetMode,
    pub allow_hosts: Vec<String>,
    pub allow_unix_sockets: bool,
    /// `network.loopback`: None where the run has a network namespace of its
    /// own, Some(true) required, Some(false) never (see `sandbox::own_loopback`).
    pub loopback: Option<bool>,
    /// Proxy mode: concurrent connections the proxy holds (`network.max_connections`).
    pub max_connections: u32,
    /// The map entries of `allow_hosts`: (index in `allow_hosts`, rules).
    pub host_rules: Vec<(usize, crate::policy::egress::HostRules)>,
    /// `credentials:`, checked, file sources made absolute.
    pub credentials: Vec<CredentialPlan>,
    /// `network.upstream_ca`, absolute.
    pub upstream_ca: Option<PathBuf>,
}

/// One credential as the supervisor reads and the proxy injects it. Holds
/// where the value is, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialPlan {
    pub name: String,
    pub source: crate::policy::egress::SourceForm,
    pub hosts: Vec<String>,
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
    pub inject: crate::policy::egress::InjectForm,
    pub placeholder_env: Vec<String>,
    pub allow_plaintext: bool,
    /// Its key in the policy (`credentials[0]`), or the flag that made it.
    pub key: String,
}

/// Limits, as numbers the kernel takes.
#[derive(Debug, Clone, Default)]
pub struct LimitsPlan {
    pub timeout: Duration,
    pub max_output_bytes: u64,
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub max_processes: Option<u64>,
    pub max_file_size_bytes: Option<u64>,
    pub max_open_files: Option<u64>,
    /// A size limit for the private /tmp (then a tmpfs in the view).
    pub tmp_size_mb: Option<u64>,
}

/// Everything a run needs, decided before fork.
#[derive(Debug, Clone)]
pub struct Plan {
    pub run_id: String,
    /// Absolute path of the program to execve.
    pub program: PathBuf,
    /// argv, argv[0] as the user wrote it.
    pub argv: Vec<String>,
    /// The child's environment, in order (name, value).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The private tmp dir (created by build, removed by the supervisor).
    pub tmpdir: Option<PathBuf>,
    pub fs: FsPlan,
    /// What the command would have added but did not, or did not need to, and why.
    pub command_notes: Vec<String>,
    /// Rights the planner withheld from a grant, and why (a read-only mount
    /// over a writable place gets no exec).
    pub fs_notes: Vec<String>,
    /// What the user must be told (the working directory, skipped grants, ignored settings).
    pub notices: Vec<notices::Notice>,
    pub net: NetPlan,
    pub limits: LimitsPlan,
    pub best_effort: bool,
    pub policy_sha256: String,
    /// Tools and LLM access, served by the broker (`crate::rpc`).
    pub tools: Option<crate::policy::Tools>,
    pub llm: Option<crate::policy::LlmAccess>,
    /// Directory the policy's relative paths resolve against (tool commands and policies).
    pub policy_dir: PathBuf,
    /// The secrets of /etc (`credentials::SYSTEM_SECRETS`) found on this
    /// host while planning, for the carve-outs and the view alike: one
    /// search of /etc per run, not one per user of the list.
    pub etc_secrets: Vec<credentials::Location>,
}

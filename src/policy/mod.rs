//! The policy: the contract's section 2 as plain types.
//!
//! Data flows one way: [`parse`] reads a file into these types (with
//! file:line:column errors), [`validate`] applies the fail-closed rules, and
//! [`resolve`] turns relative and `~` paths into absolute ones. The sandbox
//! layers never see these types directly: `crate::plan` translates them.

pub mod access;
pub mod credentials;
pub mod egress;
pub mod error;
pub mod home;
pub mod hosts;
mod lines;
pub mod parse;
pub mod resolve;
pub mod search_path;
pub mod starter;
pub mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use parse::{load_file, load_str, PolicyError};

/// The policy's JSON Schema (draft 2020-12), pretty-printed with a trailing
/// newline: what `capsule policy schema` prints and `policy/schema.json` holds.
pub fn schema_json() -> String {
    schema_json_of::<Policy>()
}

/// The JSON Schema of `T`, pretty-printed with a final newline, as
/// `capsule schema` prints it and `policy/schema.json`, `schemas/` ship it.
pub fn schema_json_of<T: JsonSchema>() -> String {
    let schema = schemars::schema_for!(T);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

/// A whole policy file, `version: 1`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Policy format version; only `1` exists.
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,
    /// Filesystem grants (Landlock).
    #[serde(default)]
    pub filesystem: Filesystem,
    /// Host paths (or `volume:NAME`) bound at other paths in the run's view
    /// of the host (needs a mount namespace unless `dst` equals `src`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Network access: none, a filtering proxy, or unrestricted.
    #[serde(default)]
    pub network: Network,
    /// The child's environment (built from nothing).
    #[serde(default)]
    pub env: Env,
    /// Wall-clock, output and resource limits.
    #[serde(default)]
    pub limits: Limits,
    /// Host tools the program may call over the RPC fd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Tools>,
    /// LLM calls brokered by the parent (off unless `enabled: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_access: Option<LlmAccess>,
    /// Credentials the proxy injects into requests to their hosts; the run
    /// sees only a per-run placeholder (contract section 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<egress::Credential>,
}

/// Filesystem grants, enforced by Landlock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Filesystem {
    /// Read files and list directories beneath these paths.
    #[serde(default)]
    pub read: Vec<PathEntry>,
    /// Read, create, modify and delete beneath these paths (not execute).
    #[serde(default)]
    pub write: Vec<PathEntry>,
    /// Execute (file or directory); implies read.
    #[serde(default)]
    pub exec: Vec<PathEntry>,
    /// Carve-outs beneath a read/write/exec grant: no access at all.
    #[serde(default)]
    pub deny: Vec<PathEntry>,
    /// Read+exec of the standard system directories, a few /dev nodes, the
    /// command's install prefix and the child's own /proc/self.
    #[serde(default = "yes")]
    pub system: bool,
    /// A private writable $TMPDIR per run, removed afterwards.
    #[serde(default = "yes")]
    pub tmp: bool,
}

impl Default for Filesystem {
    fn default() -> Self {
        Filesystem {
            read: vec![],
            write: vec![],
            exec: vec![],
            deny: vec![],
            system: true,
            tmp: true,
        }
    }
}

fn yes() -> bool {
    true
}

/// One entry of `mounts:`: `src` seen at `dst` inside the sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// A host path (relative to the policy file, `~` expanded) or `volume:NAME`.
    pub src: String,
    /// Where the run sees it: an absolute path.
    pub dst: String,
    /// Read-only (the default) or read-write.
    #[serde(default = "yes")]
    pub read_only: bool,
}

/// A path in a grant: either a plain string, or `{path, optional}`.
///
/// A missing path is an error unless `optional: true` (or the string form
/// ends in `?`, e.g. `~/.cache?`), in which case the grant is skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum PathEntry {
    Plain(String),
    Detailed {
        path: String,
        #[serde(default)]
        optional: bool,
    },
}

impl PathEntry {
    /// The path as written, without a trailing `?` marker.
    pub fn raw(&self) -> &str {
        match self {
            PathEntry::Plain(s) => s.strip_suffix('?').unwrap_or(s),
            PathEntry::Detailed { path, .. } => path,
        }
    }
    /// Whether a missing path is skipped rather than an error.
    pub fn optional(&self) -> bool {
        match self {
            PathEntry::Plain(s) => s.ends_with('?'),
            PathEntry::Detailed { optional, .. } => *optional,
        }
    }
}

impl From<&str> for PathEntry {
    fn from(s: &str) -> Self {
        PathEntry::Plain(s.to_string())
    }
}

/// Network access.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// `none` (default) | `proxy` | `unrestricted`.
    #[serde(default)]
    pub mode: NetMode,
    /// Proxy allowlist: `host`, `*.domain` (subdomains only), optionally `:port`;
    /// or a map `{host, methods, paths, max_requests, max_upload_bytes}`, whose
    /// host the proxy TLS-terminates so that the rules apply (contract section 8).
    #[serde(default)]
    pub allow_hosts: Vec<egress::AllowHost>,
    /// Proxy mode: a PEM file of extra CA certificates the proxy trusts upstream,
    /// beside the host's (relative to the policy's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<PathBuf>,
    /// Allow `socket(AF_UNIX)` and AF_UNIX datagram pairs; stream and seqpacket
    /// `socketpair`s are always allowed.
    #[serde(default)]
    pub allow_unix_sockets: bool,
    /// The run's own loopback (modes `none` and `proxy`): IP sockets that reach
    /// only the run itself (bind, listen and connect on 127.0.0.1/::1 inside
    /// it). Left out: wherever the run has a network namespace of its own;
    /// `true`: required, a run that cannot have one is refused; `false`: no IP
    /// socket in `none` mode and only the proxy in `proxy` mode, even with a
    /// namespace. Ignored in `unrestricted` mode (the host's network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loopback: Option<bool>,
    /// Proxy mode: connections the proxy holds at once for this run (default 256,
    /// 1..=4096); past it a new connection gets a 503 and is counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub max_connections: Option<u32>,
}

impl Network {
    /// `max_connections` when the policy leaves it out.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 256;
    /// The largest `max_connections` accepted (each connection may hold up to
    /// 192 KiB of the supervisor's memory, see `proxy::bounds`: 768 MiB at this cap).
    pub const MAX_MAX_CONNECTIONS: u32 = 4096;

    /// The cap in force.
    pub fn max_connections(&self) -> u32 {
        self.max_connections
            .unwrap_or(Self::DEFAULT_MAX_CONNECTIONS)
    }
}

/// `none`: no IP networking; `proxy`: only capsule's filtering proxy
/// (`allow_hosts` required); `unrestricted`: the host's network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetMode {
    #[default]
    None,
    Proxy,
    Unrestricted,
}

impl NetMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetMode::None => "none",
            NetMode::Proxy => "proxy",
            NetMode::Unrestricted => "unrestricted",
        }
    }
}

impl std::str::FromStr for NetMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(NetMode::None),
            "proxy" => Ok(NetMode::Proxy),
            "unrestricted" => Ok(NetMode::Unrestricted),
            other => Err(format!(
                "unknown network mode '{other}' (none | proxy | unrestricted)"
            )),
        }
    }
}

/// The child's environment, built from nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Env {
    /// Host variables copied in when set.
    #[serde(default)]
    pub pass: Vec<String>,
    /// Variables set to fixed values.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// Resource limits. Absent keys take the defaults below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock limit in seconds (> 0).
    #[serde(default = "Limits::d_timeout")]
    pub timeout_seconds: f64,
    /// Per-stream capture limit in bytes.
    #[serde(default = "Limits::d_output")]
    pub max_output_bytes: u64,
    /// Memory limit in MiB (cgroup memory.max, else RLIMIT_DATA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// CPU time in seconds (RLIMIT_CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// Processes/threads of the run (cgroup pids.max, else RLIMIT_NPROC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// Largest file the run may write, in MiB (RLIMIT_FSIZE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_size_mb: Option<u64>,
    /// Open file descriptors (RLIMIT_NOFILE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_open_files: Option<u64>,
    /// Size of the run's private /tmp in MiB (then a tmpfs in the run's
    /// view; without a limit /tmp is the private TMPDIR on the host's disk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size_mb: Option<u64>,
}

impl Limits {
    fn d_timeout() -> f64 {
        60.0
    }
    fn d_output() -> u64 {
        1_048_576
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_seconds: Self::d_timeout(),
            max_output_bytes: Self::d_output(),
            memory_mb: None,
            cpu_seconds: None,
            max_processes: None,
            max_file_size_mb: None,
            max_open_files: None,
            tmp_size_mb: None,
        }
    }
}

/// Tools the child may ask the parent to run (section 5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tools {
    /// Calls allowed per run (> 0).
    #[serde(default = "Tools::d_max_calls")]
    #[schemars(range(min = 1))]
    pub max_calls: u32,
    /// The allow-listed tools.
    #[serde(default)]
    pub allow: Vec<Tool>,
}

impl Tools {
    fn d_max_calls() -> u32 {
        40
    }
}

/// One allow-listed tool: a host `command`, or `forward: true`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Unique name, `^[a-zA-Z0-9_.-]{1,64}$`.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9_.-]{1,64}$"))]
    pub name: String,
    /// Shown to the program by `tools/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments, shown by `tools/list`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "inputSchema",
        alias = "input_schema"
    )]
    pub input_schema: Option<serde_json::Value>,
    /// argv of a host command: JSON arguments on stdin, result on stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Run the tool command itself under this capsule policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Answered by the program that started capsule, over `--tool-fd`.
    #[serde(default)]
    pub forward: bool,
    /// Wall-clock limit of one call, in seconds (> 0).
    #[serde(default = "Tool::d_timeout")]
    pub timeout_seconds: f64,
}

impl Tool {
    fn d_timeout() -> f64 {
        30.0
    }
}

/// LLM access brokered by the parent (section 5). Default-deny.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmAccess {
    /// Off unless `true`; the host config's ceiling always wins.
    #[serde(default)]
    pub enabled: bool,
    /// `llm/complete` calls per run (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_calls: Option<u32>,
    /// Largest prompt, in characters (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_input_chars: Option<u64>,
    /// Largest completion, in characters (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_chars: Option<u64>,
    /// Absent = any host model; `[]` = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_models: Option<Vec<String>>,
}

/// A policy loaded from somewhere, with what is needed to report on it.
#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    pub policy: Policy,
    /// The file it came from (None: the built-in default).
    pub source: Option<PathBuf>,
    /// Directory that relative paths resolve against.
    pub base_dir: PathBuf,
    /// sha256 of the file's bytes (or of the default policy's JSON).
    pub sha256: String,
    /// Line of each key path (e.g. "filesystem.write[0]") for reports; may be empty.
    pub lines: BTreeMap<String, usize>,
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod schema_tests;

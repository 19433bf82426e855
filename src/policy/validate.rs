//! The fail-closed rules of a policy (contract section 2). Each error names the
//! key and its line; nothing runs when one fails.
//!
//! Rules that need no filesystem live in [`validate`]; grant rules are also
//! exposed as [`check_grant`] so grants added on the command line get the same
//! treatment.

mod egress_checks;

use std::collections::BTreeSet;
use std::path::Path;

use super::error::{PolicyError, Position};
use super::resolve::{expand, ResolvedFs, ResolvedPath};
use super::{LoadedPolicy, NetMode, Network, Policy};

pub use super::hosts::check_allow_host;

/// Which kind of access a grant gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    Read,
    Write,
    Exec,
}

impl GrantKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::Read => "read",
            GrantKind::Write => "write",
            GrantKind::Exec => "exec",
        }
    }
}

pub use super::resolve::NO_WRITE_EXEC;
/// Directories that may never be granted `read` as a whole.
pub const NO_READ: &[&str] = &["/proc", "/sys"];

/// Longest wall-clock limit a policy may ask for (365 days).
pub const MAX_TIMEOUT_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// Environment variables refused in `env.pass` and `env.set`: each makes a
/// program load code or options the policy author did not name. Every name
/// with one of these prefixes...
pub const REFUSED_ENV_PREFIXES: &[&str] = &["LD_"];
/// ...and these names. `capsule doctor --json` prints both (`refused_env`),
/// and the Python package's copy is checked against that.
pub const REFUSED_ENV_NAMES: &[&str] = &[
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "NODE_OPTIONS",
    "BASH_ENV",
    "ENV",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "DOTNET_STARTUP_HOOKS",
];

/// Whether `name` may not appear in `env.pass` or `env.set`.
pub fn is_refused_env(name: &str) -> bool {
    REFUSED_ENV_PREFIXES.iter().any(|p| name.starts_with(p)) || REFUSED_ENV_NAMES.contains(&name)
}

/// A usable environment variable name: non-empty, no `=` and no NUL.
pub fn check_env_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty variable name".into());
    }
    if name.contains('=') || name.contains('\0') {
        return Err(format!(
            "`{}` is not a valid variable name (no `=` or NUL)",
            name.escape_debug()
        ));
    }
    if is_refused_env(name) && !super::search_path::is_search_path(name) {
        return Err(format!(
            "`{name}` is refused: it makes programs load code or options from outside the policy (LD_*, PYTHONPATH, NODE_OPTIONS, ... are never passed)"
        ));
    }
    Ok(())
}

/// A wall-clock limit in seconds: finite, > 0, at most [`MAX_TIMEOUT_SECONDS`].
pub fn check_timeout(secs: f64) -> Result<(), String> {
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("must be a number of seconds > 0 (got {secs})"));
    }
    if secs > MAX_TIMEOUT_SECONDS {
        return Err(format!(
            "must be at most {MAX_TIMEOUT_SECONDS} seconds (365 days), got {secs}"
        ));
    }
    Ok(())
}

/// The rules for one canonical grant path (policy or CLI).
///
/// * `write`/`exec` of exactly `/`, `/etc`, `/proc`, `/sys`, `/dev`, `/usr`,
///   `/boot` is refused, and so is `write`/`exec` of anything beneath `/proc`
///   or `/sys` (kernel and process tunables, never a program's data);
/// * `read` of exactly `/proc` or `/sys` is refused, and so is `read` of a
///   per-process `/proc/PID...` entry (other processes' memory maps, fds and
///   environment); other files beneath, such as `/proc/cpuinfo` or
///   `/sys/fs/cgroup`, may be granted.
pub fn check_grant(path: &Path, kind: GrantKind) -> Result<(), String> {
    let shown = path.display();
    let narrow = "grant a narrower path";
    match kind {
        GrantKind::Write | GrantKind::Exec => {
            if NO_WRITE_EXEC.iter().any(|d| path == Path::new(d)) {
                return Err(format!(
                    "`{}` grant of {shown} is refused: it would hand the program the host's system ({narrow}, e.g. a project or output directory)",
                    kind.as_str()
                ));
            }
            if path.starts_with("/proc") || path.starts_with("/sys") {
                return Err(format!(
                    "`{}` grant of {shown} is refused: nothing beneath /proc or /sys may be written or executed",
                    kind.as_str()
                ));
            }
        }
        GrantKind::Read => {
            if NO_READ.iter().any(|d| path == Path::new(d)) {
                return Err(format!(
                    "`read` grant of {shown} is refused: it exposes every host process and kernel tunable ({narrow}, e.g. /proc/cpuinfo; the program's own /proc/self comes with `system: true`)"
                ));
            }
            if let Ok(rest) = path.strip_prefix("/proc") {
                let first = rest
                    .components()
                    .next()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned());
                if let Some(first) = first {
                    if first.bytes().all(|b| b.is_ascii_digit())
                        || first == "self"
                        || first == "thread-self"
                    {
                        return Err(format!(
                            "`read` grant of {shown} is refused: per-process /proc entries belong to host processes (the program's own /proc/self comes with `system: true`)"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Apply every fail-closed rule to a loaded policy and its resolved grants
/// (pass grants added on the command line in `fs` too, so `deny` may sit
/// beneath them).
pub fn validate(lp: &LoadedPolicy, fs: &ResolvedFs) -> Result<(), PolicyError> {
    let v = Validator { lp };
    let p = &lp.policy;
    if p.version != 1 {
        return Err(v.err(
            "version",
            format!(
                "unsupported version {} (only `version: 1` exists)",
                p.version
            ),
        ));
    }
    v.network(p)?;
    v.filesystem(fs)?;
    v.limits(p)?;
    v.env(p, fs)?;
    v.tools(p)?;
    v.llm(p)?;
    Ok(())
}

struct Validator<'a> {
    lp: &'a LoadedPolicy,
}

impl Validator<'_> {
    fn err(&self, key: &str, message: impl Into<String>) -> PolicyError {
        let at = if key.starts_with("--") {
            Position::default()
        } else {
            self.lp.position_of(key)
        };
        PolicyError::Invalid {
            at,
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn network(&self, p: &Policy) -> Result<(), PolicyError> {
        let n = &p.network;
        if n.mode == NetMode::Proxy && n.allow_hosts.is_empty() {
            return Err(self.err(
                "network.allow_hosts",
                "`mode: proxy` needs a non-empty allow_hosts list; unrestricted egress is only ever `mode: unrestricted`, said explicitly",
            ));
        }
        for (i, h) in n.allow_hosts.iter().enumerate() {
            let key = format!("network.allow_hosts[{i}]");
            match h.rules() {
                None => check_allow_host(h.host()).map_err(|e| self.err(&key, e))?,
                Some(r) => self.host_rules(&key, r)?,
            }
        }
        self.credentials(p)?;
        if let Some(m) = n.max_connections {
            if m == 0 || m > Network::MAX_MAX_CONNECTIONS {
                return Err(self.err(
                    "network.max_connections",
                    format!(
                        "must be 1..={} (concurrent proxy connections; leave it out for {})",
                        Network::MAX_MAX_CONNECTIONS,
                        Network::DEFAULT_MAX_CONNECTIONS
                    ),
                ));
            }
        }
        Ok(())
    }

    fn filesystem(&self, fs: &ResolvedFs) -> Result<(), PolicyError> {
        let sets: [(&[ResolvedPath], GrantKind); 3] = [
            (&fs.read, GrantKind::Read),
            (&fs.write, GrantKind::Write),
            (&fs.exec, GrantKind::Exec),
        ];
        for (list, kind) in sets {
            for g in list {
                check_grant(&g.path, kind).map_err(|e| self.err(&g.key, e))?;
            }
        }
        for d in &fs.deny {
            if !fs.grants().any(|g| d.path.starts_with(&g.path)) {
                return Err(self.err(
                    &d.key,
                    format!(
                        "deny {} is not beneath any read, write or exec grant, so it would deny nothing (a deny carves out of a grant; fix the path or remove it)",
                        d.path.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn limits(&self, p: &Policy) -> Result<(), PolicyError> {
        let l = &p.limits;
        check_timeout(l.timeout_seconds).map_err(|e| self.err("limits.timeout_seconds", e))?;
        if l.max_output_bytes == 0 {
            return Err(self.err("limits.max_output_bytes", "must be > 0"));
        }
        let counts = [
            ("limits.cpu_seconds", l.cpu_seconds),
            ("limits.max_processes", l.max_processes),
            ("limits.max_open_files", l.max_open_files),
        ];
        for (key, val) in counts {
            if val == Some(0) {
                return Err(self.err(key, "must be > 0 (leave the key out for no limit)"));
            }
        }
        for (key, val) in [
            ("limits.memory_mb", l.memory_mb),
            ("limits.max_file_size_mb", l.max_file_size_mb),
            ("limits.tmp_size_mb", l.tmp_size_mb),
        ] {
            match val {
                Some(0) => {
                    return Err(self.err(key, "must be > 0 (leave the key out for no limit)"))
                }
                Some(mb) if mb.checked_mul(1 << 20).is_none() => {
                    return Err(self.err(key, format!("{mb} MiB does not fit in 64 bits of bytes")))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn env(&self, p: &Policy, fs: &ResolvedFs) -> Result<(), PolicyError> {
        for (i, name) in p.env.pass.iter().enumerate() {
            check_env_name(name).map_err(|e| self.err(&format!("env.pass[{i}]"), e))?;
        }
        for (name, value) in &p.env.set {
            let key = format!("env.set.{name}");
            check_env_name(name).map_err(|e| self.err(&key, e))?;
            if value.contains('\0') {
                return Err(self.err(&key, "value contains a NUL byte"));
            }
            // PYTHONPATH/NODE_PATH: every entry read-only in the child. The
            // planner checks again with every grant (workspace, TMPDIR, host
            // values of env.pass).
            if super::search_path::is_search_path(name) {
                let grants: Vec<_> = [
                    (&fs.read, super::access::Access::READ),
                    (&fs.write, super::access::Access::WRITE),
                    (&fs.exec, super::access::Access::EXEC),
                ]
                .iter()
                .flat_map(|(list, a)| list.iter().map(|r| (r.path.clone(), *a)))
                .collect();
                super::search_path::check_search_path_with(value, &grants, false)
                    .map_err(|why| self.err(&key, format!("`{name}` is refused: {why}")))?;
            }
        }
        Ok(())
    }

    fn tools(&self, p: &Policy) -> Result<(), PolicyError> {
        let Some(tools) = &p.tools else { return Ok(()) };
        if tools.max_calls == 0 {
            return Err(self.err(
                "tools.max_calls",
                "must be > 0 (remove the `tools` section to allow none)",
            ));
        }
        let mut names = BTreeSet::new();
        for (i, t) in tools.allow.iter().enumerate() {
            let key = format!("tools.allow[{i}]");
            let valid = !t.name.is_empty()
                && t.name.len() <= 64
                && t.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            if !valid {
                return Err(self.err(
                    &format!("{key}.name"),
                    format!(
                        "`{}`: a tool name is 1-64 of a-z A-Z 0-9 _ . -",
                        t.name.escape_debug()
                    ),
                ));
            }
            if !names.insert(t.name.as_str()) {
                return Err(self.err(
                    &format!("{key}.name"),
                    format!("tool `{}` is listed twice", t.name),
                ));
            }
            match (&t.command, t.forward) {
                (Some(_), true) => {
                    return Err(
                        self.err(&key, "give either `command` or `forward: true`, not both")
                    );
                }
                (None, false) => {
                    return Err(self.err(
                        &key,
                        "a tool needs `command: [argv...]` (run on the host) or `forward: true` (answered over --tool-fd)",
                    ));
                }
                (Some(argv), false) => {
                    if argv.is_empty() || argv[0].is_empty() {
                        return Err(self.err(
                            &format!("{key}.command"),
                            "must be a non-empty argv, e.g. [/usr/bin/python3, tools/search.py]",
                        ));
                    }
                    if argv.iter().any(|a| a.contains('\0')) {
                        return Err(self.err(&format!("{key}.command"), "contains a NUL byte"));
                    }
                }
                (None, true) => {
                    if t.policy.is_some() {
                        return Err(self.err(
                            &format!("{key}.policy"),
                            "`policy` applies to a host `command` only; a forwarded tool runs in the program that started capsule",
                        ));
                    }
                }
            }
            if let Some(pol) = &t.policy {
                let k = format!("{key}.policy");
                let path = expand(pol, &self.lp.base_dir, &super::resolve::invoking_home())
                    .map_err(|e| self.err(&k, e))?;
                if !path.is_file() {
                    return Err(
                        self.err(&k, format!("tool policy {} does not exist", path.display()))
                    );
                }
            }
            check_timeout(t.timeout_seconds)
                .map_err(|e| self.err(&format!("{key}.timeout_seconds"), e))?;
            if let Some(schema) = &t.input_schema {
                if !schema.is_object() {
                    return Err(self.err(
                        &format!("{key}.inputSchema"),
                        "must be a JSON Schema object",
                    ));
                }
            }
        }
        Ok(())
    }

    fn llm(&self, p: &Policy) -> Result<(), PolicyError> {
        let Some(llm) = &p.llm_access else {
            return Ok(());
        };
        let caps = [
            ("llm_access.max_calls", llm.max_calls.map(u64::from)),
            ("llm_access.max_input_chars", llm.max_input_chars),
            ("llm_access.max_output_chars", llm.max_output_chars),
        ];
        for (key, val) in caps {
            if val == Some(0) {
                return Err(self.err(
                    key,
                    "must be > 0 (set `enabled: false` to turn LLM access off)",
                ));
            }
        }
        if let Some(models) = &llm.allowed_models {
            for (i, m) in models.iter().enumerate() {
                if m.trim().is_empty() {
                    return Err(self.err(
                        &format!("llm_access.allowed_models[{i}]"),
                        "empty model name",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;

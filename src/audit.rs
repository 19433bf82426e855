//! The audit record: one sanitized JSON line per run, refusals included.
//!
//! Appended to `--audit-log FILE` or `$XDG_STATE_HOME/capsule/audit.jsonl`
//! (`~/.local/state/capsule/audit.jsonl`), created 0600, opened with
//! O_APPEND and written with a single `write`, so concurrent runs never
//! interleave. No fsync: the record costs microseconds, not milliseconds.
//! It never holds prompts, tool arguments, output, keys or environment values.
//!
//! `--audit-log -` writes the same line to stderr instead, and so does the
//! default when its directory or file cannot be created or written (a
//! container with a read-only root and no writable home, whose logs are
//! collected from stdout and stderr): see [`Dest`].

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::result::{Enforcement, Reason, RunResult, Termination};

#[derive(Debug, Error)]
pub enum AuditError {
    #[error("cannot write the audit log {path}: {source} (use --audit-log FILE or --no-audit)")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The log is not what capsule created: a symbolic link, not a regular
    /// file, another owner, or a mode other than 0600. Never written.
    #[error("refusing the audit log {path}: {why} (capsule writes only a regular 0600 file of your own; move it aside or use --audit-log FILE)")]
    Unsafe { path: PathBuf, why: String },
}

impl AuditError {
    /// Whether the log looks tampered with (refuse the run) rather than
    /// merely unwritable (warn, run without a record).
    pub fn is_unsafe(&self) -> bool {
        matches!(self, AuditError::Unsafe { .. })
    }
}

/// The default audit log path.
pub fn default_path() -> PathBuf {
    state_dir().join("audit.jsonl")
}

/// Where the caller asked the record to go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// No `--audit-log`: [`default_path`]; when it cannot be created or
    /// written, stderr (one notice line first).
    Default(PathBuf),
    /// `--audit-log FILE` (absolute): that file or an error, never elsewhere.
    File(PathBuf),
    /// `--audit-log -`: one JSON line on stderr.
    Stderr,
}

impl Dest {
    /// The destination of `--audit-log ARG` (None: the default).
    pub fn of(arg: Option<&Path>) -> Dest {
        match arg {
            Some(p) if p.as_os_str() == "-" => Dest::Stderr,
            Some(p) => Dest::File(absolute(p)),
            None => Dest::Default(absolute(&default_path())),
        }
    }

    /// The log file, if the record goes to one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Dest::Default(p) | Dest::File(p) => Some(p),
            Dest::Stderr => None,
        }
    }
}

/// An opened destination: the log file, or stderr.
#[derive(Debug)]
pub enum Sink {
    File { path: PathBuf, file: std::fs::File },
    Stderr,
}

/// Open DEST for this run's record ([`open`] for a file). The default log
/// that merely cannot be written (not one that looks tampered with: that
/// stays [`AuditError::Unsafe`]) becomes stderr; the notice to print is
/// returned with it.
pub fn open_dest(dest: &Dest) -> Result<(Sink, Option<String>), AuditError> {
    match dest {
        Dest::Stderr => Ok((Sink::Stderr, None)),
        Dest::File(p) => open(p).map(|file| {
            (
                Sink::File {
                    path: p.clone(),
                    file,
                },
                None,
            )
        }),
        Dest::Default(p) => match open(p) {
            Ok(file) => Ok((
                Sink::File {
                    path: p.clone(),
                    file,
                },
                None,
            )),
            Err(e) if e.is_unsafe() => Err(e),
            Err(e) => Ok((Sink::Stderr, Some(fallback_notice(&e)))),
        },
    }
}

/// The notice printed when the default log falls back to stderr.
pub fn fallback_notice(e: &AuditError) -> String {
    let cause = match e {
        AuditError::Write { path, source } => format!("{}: {source}", path.display()),
        AuditError::Unsafe { path, why } => format!("{}: {why}", path.display()),
    };
    format!("the default audit log cannot be written ({cause}); this run's record goes to stderr as one JSON line (--audit-log FILE or --no-audit to choose)")
}

impl Sink {
    /// Write the record: appended to the file with one write, or one line
    /// on stderr with one write.
    pub fn write(&mut self, record: &Record) -> Result<(), AuditError> {
        match self {
            Sink::File { path, file } => write_record(file, path, record),
            Sink::Stderr => write_stderr(record),
        }
    }
}

/// One record as one line on stderr, in a single write: on a pipe that is
/// atomic up to PIPE_BUF (4096 bytes), so a record that long never
/// interleaves with another writer's line; a longer one (a run with many
/// `--explain` denials: 21 KB measured) may (README, audit log).
pub fn write_stderr(record: &Record) -> Result<(), AuditError> {
    let err = |source| AuditError::Write {
        path: PathBuf::from("-"),
        source,
    };
    let mut line = serde_json::to_vec(record).map_err(|e| err(std::io::Error::other(e)))?;
    line.push(b'\n');
    crate::sys::stdio::write_all(crate::sys::stdio::Own::Stderr, &line).map_err(err)
}

/// `path` made absolute against the current directory (lexically: `..` and
/// `.` removed), so it can be compared with grants.
pub fn absolute(path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `$XDG_STATE_HOME/capsule`, else `~/.local/state/capsule`.
pub fn state_dir() -> PathBuf {
    match std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        Some(p) if p.is_absolute() => p.join("capsule"),
        _ => crate::policy::resolve::invoking_home().join(".local/state/capsule"),
    }
}

/// Proxy counters as they appear in the record.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ProxyCounts {
    pub allowed: u64,
    pub denied: u64,
    pub denied_hosts: Vec<String>,
    /// Connections refused because `network.max_connections` were open.
    pub refused_at_capacity: u64,
}

/// The JSON Schema of one audit line (`capsule schema audit`).
pub fn schema_json() -> String {
    crate::policy::schema_json_of::<Record>()
}

/// One audit line (contract section 6; its JSON Schema is `capsule schema
/// audit`, `schemas/audit.schema.json`).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[schemars(title = "capsule audit record")]
pub struct Record {
    pub time: String,
    pub run_id: String,
    pub agent_id: Option<String>,
    /// completed | failed | timeout | refused
    pub outcome: &'static str,
    /// A fixed code, never free text.
    pub reason: Reason,
    pub exit_code: i32,
    pub duration_seconds: f64,
    pub policy_sha256: String,
    pub enforcement: Enforcement,
    pub tool_calls: u64,
    pub tool_refusals: u64,
    pub tool_refusals_by_reason: serde_json::Value,
    pub llm: serde_json::Value,
    pub proxy: ProxyCounts,
    /// Streaming: capsule's stdout (stderr) reader went away and the run's
    /// stream was closed in turn (as in the result; absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stdout_closed_by_reader: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stderr_closed_by_reader: bool,
    /// `exec --explain`: the refused accesses, as in the result (the proxy's
    /// refused requests to TLS-terminated hosts always).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denials: Option<Vec<serde_json::Value>>,
    /// Credentials the proxy injected, by name, as in the result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials_used: Vec<crate::result::CredentialUsed>,
}

impl Record {
    /// Build the record of a finished (or refused) run.
    pub fn from_result(r: &RunResult, agent_id: Option<&str>, reason: Reason) -> Record {
        let outcome = match r.termination_reason {
            Termination::Exited if r.exit_code == 0 => "completed",
            Termination::Timeout => "timeout",
            Termination::Refused => "refused",
            _ => "failed",
        };
        let usage = r.usage.clone().unwrap_or(serde_json::Value::Null);
        Record {
            time: rfc3339_now(),
            run_id: r.run_id.clone(),
            agent_id: agent_id.map(str::to_string),
            outcome,
            reason,
            exit_code: r.exit_code,
            duration_seconds: r.duration_seconds,
            policy_sha256: r.policy_sha256.clone(),
            enforcement: r.enforcement.clone(),
            tool_calls: r.tool_calls,
            tool_refusals: r.tool_refusals,
            tool_refusals_by_reason: usage
                .get("tool_refusals_by_reason")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({})),
            llm: usage
                .get("llm")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"calls": 0})),
            proxy: ProxyCounts {
                allowed: usage
                    .pointer("/proxy/allowed")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
                denied: usage
                    .pointer("/proxy/denied")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
                denied_hosts: r.denied_hosts.clone(),
                refused_at_capacity: usage
                    .pointer("/proxy/refused_at_capacity")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
            },
            stdout_closed_by_reader: r.stdout_closed_by_reader,
            stderr_closed_by_reader: r.stderr_closed_by_reader,
            denials: r.denials.clone(),
            credentials_used: r.credentials_used.clone(),
        }
    }
}

/// Open (creating it 0600 when missing, with its directory 0700) the audit
/// log for appending: `O_APPEND|O_NOFOLLOW|O_CLOEXEC`. The opened file must be
/// a regular file owned by the caller with mode 0600, else [`AuditError::Unsafe`].
pub fn open(path: &Path) -> Result<std::fs::File, AuditError> {
    use std::os::unix::fs::MetadataExt;
    let err = |source| AuditError::Write {
        path: path.to_path_buf(),
        source,
    };
    let unsafe_ = |why: String| AuditError::Unsafe {
        path: path.to_path_buf(),
        why,
    };
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(err)?;
        }
    }
    // A FIFO or device is refused before open() could block on or trigger it.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_symlink() {
            return Err(unsafe_("it is a symbolic link".into()));
        }
        if !m.file_type().is_file() {
            return Err(unsafe_("it is not a regular file".into()));
        }
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                unsafe_("it is a symbolic link".into())
            } else {
                err(e)
            }
        })?;
    let m = f.metadata().map_err(err)?;
    if !m.file_type().is_file() {
        return Err(unsafe_("it is not a regular file".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        return Err(unsafe_(format!(
            "it is owned by uid {}, not by you (uid {me})",
            m.uid()
        )));
    }
    if m.mode() & 0o7777 != 0o600 {
        return Err(unsafe_(format!(
            "its mode is {:04o}, not 0600",
            m.mode() & 0o7777
        )));
    }
    Ok(f)
}

/// Append one record to an opened log with a single write.
pub fn write_record(f: &mut std::fs::File, path: &Path, record: &Record) -> Result<(), AuditError> {
    let err = |source| AuditError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut line = serde_json::to_vec(record).map_err(|e| err(std::io::Error::other(e)))?;
    line.push(b'\n');
    f.write_all(&line).map_err(err)
}

/// Now, as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(path: &Path, record: &Record) -> Result<(), AuditError> {
        let mut f = open(path)?;
        write_record(&mut f, path, record)
    }

    #[test]
    fn dest_of_the_argument() {
        assert_eq!(Dest::of(Some(Path::new("-"))), Dest::Stderr);
        assert_eq!(
            Dest::of(Some(Path::new("/a/../log"))),
            Dest::File("/log".into())
        );
        assert!(matches!(Dest::of(None), Dest::Default(p) if p.ends_with("capsule/audit.jsonl")));
        assert!(Dest::Stderr.path().is_none());
    }

    #[test]
    fn time_format_is_rfc3339() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'));
    }

    #[test]
    fn append_creates_0600_and_appends_lines() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/audit.jsonl");
        let r = RunResult::not_run("r1".into(), Termination::Refused, 125, "x".into());
        let rec = Record::from_result(&r, Some("agent"), Reason::PolicyInvalid);
        append(&p, &rec).unwrap();
        append(&p, &rec).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.lines().count(), 2);
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(v["outcome"], "refused");
        assert_eq!(v["reason"], "policy_invalid");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn refuses_symlinks_other_modes_and_non_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open(&link).unwrap_err().is_unsafe());
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(open(&target).unwrap_err().is_unsafe());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open(&fifo).unwrap_err().is_unsafe());
        assert!(!open(&dir.path().join("no/such/dir/../x")).is_err_and(|e| e.is_unsafe()));
    }
}

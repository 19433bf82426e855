//! `capsule exec`: load the policy, plan, run, report, audit.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::error_line;
use crate::audit;
use crate::plan::{self, build::Overrides, BuildInput, PlanError};
use crate::policy::{self, LoadedPolicy, NetMode};
use crate::result::{exit, Reason, RunResult, Termination};
use crate::supervisor::{self, ExecOptions, Finished};

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Policy file, YAML or JSON (by extension or content).
    #[arg(short, long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Add a read grant (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<String>,
    /// Add a read+write grant (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<String>,
    /// Add a read+exec grant (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_exec: Vec<String>,
    /// Network mode: none | proxy | unrestricted (overrides the policy).
    #[arg(long, value_name = "MODE", value_parser = net_modes())]
    pub net: Option<NetMode>,
    /// Set KEY=VAL in the child's environment, or pass the host's KEY (repeatable; as env.set / env.pass, same refusals).
    #[arg(short = 'e', long = "env", value_name = "KEY[=VAL]")]
    pub env: Vec<String>,
    /// Add a proxy allowlist entry (repeatable).
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// Give HOST a bearer token from capsule's variable VAR, injected by the proxy; the run's VAR holds only a placeholder (repeatable; implies --allow-host HOST and proxy mode).
    #[arg(long, value_name = "VAR@HOST")]
    pub credential: Vec<String>,
    /// Wall-clock limit in seconds (overrides the policy).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Per-stream capture limit in bytes.
    #[arg(long, value_name = "BYTES")]
    pub max_output: Option<u64>,
    /// Session directory: DIR/scripts (read-only) and DIR/output (read-write, the cwd).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Working directory (must be readable under the policy).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Bind SRC (a host path or volume:NAME) at DST in the child's view (repeatable; ro by default).
    #[arg(long = "mount", value_name = "SRC:DST[:ro|rw]")]
    pub mounts: Vec<String>,
    /// Size of the private /tmp (a tmpfs in the child's view), e.g. 512m or 1g (overrides limits.tmp_size_mb).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_mb)]
    pub tmp_size: Option<u64>,
    /// Capture stdout/stderr and print ONE JSON result object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Inherited fd on which `forward: true` tools are relayed to the caller.
    #[arg(long, value_name = "FD")]
    pub tool_fd: Option<RawFd>,
    /// Recorded in the audit log: ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$
    #[arg(long, value_name = "ID")]
    pub agent_id: Option<String>,
    /// Audit log file, or `-` for one JSON line on stderr (default
    /// $XDG_STATE_HOME/capsule/audit.jsonl; stderr when that cannot be written).
    #[arg(long, value_name = "FILE", conflicts_with = "no_audit")]
    pub audit_log: Option<PathBuf>,
    /// Write no audit record.
    #[arg(long)]
    pub no_audit: bool,
    /// Run even when a requested protection cannot be enforced on this kernel (reported).
    #[arg(long)]
    pub best_effort: bool,
    /// Keep plain pipes even when stdin/stdout is a terminal (no pseudo-terminal for the child).
    #[arg(long)]
    pub no_tty: bool,
    /// After the run, explain every access the sandbox refused (layer, policy key, the change that would allow it): on stderr, and as `denials` in the JSON result and the audit record.
    #[arg(long)]
    pub explain: bool,
    /// Print the resolved plan (every grant and the layer that enforces it) and exit 0.
    #[arg(long)]
    pub dry_run: bool,
    /// The command and its arguments. Its first word may not start with
    /// `-` unless after `--`: a mistyped option is a usage error (125, as
    /// GNU env and timeout do), not a command named `--polcy`. Everything
    /// after the first word belongs to the command.
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// A policy given as text instead of a file (`capsule serve` requests):
    /// relative paths in it resolve against the working directory.
    #[arg(skip)]
    pub policy_text: Option<String>,
}

/// `--net`'s values, listed so that completions and `--help` offer them.
fn net_modes() -> impl clap::builder::TypedValueParser<Value = NetMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["none", "proxy", "unrestricted"])
        .try_map(|s| s.parse::<NetMode>())
}

/// `512m`, `1g`, `64k` or a plain number of MiB, as MiB (at least 1).
fn parse_size_mb(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t.as_str(), "m"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a size such as 512m or 1g"))?;
    let mib = match unit.trim_end_matches(['b', 'i']) {
        "k" => n.div_ceil(1024),
        "m" | "" => n,
        "g" => n.saturating_mul(1024),
        _ => return Err(format!("`{s}`: expected a size such as 512m or 1g")),
    };
    if mib == 0 {
        return Err(format!("`{s}`: must be at least 1m"));
    }
    Ok(mib)
}

/// Whether `id` matches ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$.
pub fn valid_agent_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// A fresh ULID for a run: the time now and 80 random bits straight from
/// getrandom(2). `Ulid::new` draws them from rand's thread RNG, whose seeding
/// and set-up cost ~40 µs of cold start-up per run.
pub fn new_run_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let mut buf = [0u8; 16];
    if !crate::sys::getrandom(&mut buf) {
        return ulid::Ulid::new().to_string();
    }
    ulid::Ulid::from_parts(ms, u128::from_ne_bytes(buf)).to_string()
}

/// Write the run's audit record to DEST (None: `--no-audit`); an invalid
/// agent id is not recorded. A failure to write is reported, not fatal.
pub fn write_audit(
    dest: Option<&audit::Dest>,
    r: &RunResult,
    agent_id: Option<&str>,
    reason: Reason,
) {
    if let Some(d) = dest {
        let rec = audit::Record::from_result(r, agent_id.filter(|id| valid_agent_id(id)), reason);
        match audit::open_dest(d) {
            Ok((mut sink, notice)) => {
                if let Some(n) = notice {
                    error_line(n);
                }
                if let Err(e) = sink.write(&rec) {
                    error_line(&e);
                }
            }
            Err(e) => error_line(&e),
        }
    }
}

/// Whether the child could reach the audit log at `log`: refused when it lies
/// inside a write grant (the policy's, the command line's, the workspace's
/// output or the private TMPDIR) and no carve-out between that grant and the
/// log (capsule's own state directory, a `deny`) keeps the child out of it.
pub fn audit_log_reachable(log: &std::path::Path, plan: &plan::Plan) -> Result<(), String> {
    let canon = match (log.parent(), log.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| log.to_path_buf()),
        _ => log.to_path_buf(),
    };
    for g in plan.fs.grants.iter().filter(|g| g.access.write) {
        if !canon.starts_with(&g.path) {
            continue;
        }
        // A directory carved out strictly between the grant and the log, which
        // no grant names exactly (a grant naming it would hand it back).
        let carved = plan.fs.deny.iter().any(|d| {
            d.path != canon
                && canon.starts_with(&d.path)
                && d.path != g.path
                && d.path.starts_with(&g.path)
                && !plan.fs.grants.iter().any(|o| o.path == d.path)
        });
        if !carved {
            return Err(format!(
                "it lies inside the write grant {} ({}), where the sandboxed program could read, truncate or replace it",
                g.path.display(),
                g.origin
            ));
        }
    }
    Ok(())
}

/// A policy file that cannot be loaded, for the user: a missing file names
/// the command that writes a starter policy.
pub fn policy_load_error(e: &policy::PolicyError) -> String {
    match e {
        policy::PolicyError::Read { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            format!(
                "{e} (write a starter policy with `capsule policy init NAME > FILE`, NAME one of: {})",
                crate::policy::starter::names().join(", ")
            )
        }
        _ => e.to_string(),
    }
}

/// `-e KEY=VAL` sets KEY (over the policy's `env.set`), `-e KEY` passes the
/// host's KEY (as `docker run -e KEY`; unset on the host: not set). Both go
/// into the policy's `env`, so the same refusals apply (`LD_PRELOAD` and its
/// kin, PYTHONPATH outside read-only grants).
pub fn apply_env_flags(env: &mut policy::Env, flags: &[String]) -> Result<(), String> {
    for f in flags {
        let (name, value) = match f.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (f.as_str(), None),
        };
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!(
                "-e {f}: expected KEY=VALUE or KEY (a variable name: letters, digits and _, not starting with a digit)"
            ));
        }
        match value {
            Some(v) => {
                env.pass.retain(|p| p != name);
                env.set.insert(name.to_string(), v.to_string());
            }
            None => {
                env.set.remove(name);
                if !env.pass.iter().any(|p| p == name) {
                    env.pass.push(name.to_string());
                }
            }
        }
    }
    Ok(())
}

/// The policy of a run without `--policy`: `version: 1` with system and tmp.
pub fn default_policy() -> LoadedPolicy {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    match policy::load_str("version: 1\n", "<default policy>", Some(false), &cwd) {
        Ok(lp) => lp,
        Err(_) => LoadedPolicy {
            policy: policy::Policy {
                version: 1,
                ..Default::default()
            },
            source: None,
            base_dir: cwd,
            sha256: String::new(),
            lines: Default::default(),
        },
    }
}

/// The explain request of a run: the policy `why`'s survey reads after the
/// run, and how many `--allow-host` flags there were.
type ExplainInput = Option<(LoadedPolicy, usize)>;

pub fn run(a: ExecArgs) -> i32 {
    tracing::debug!("exec: arguments parsed");
    let run_id = new_run_id();
    let dest = (!a.no_audit).then(|| audit::Dest::of(a.audit_log.as_deref()));
    let (sink, created_log) = match open_audit_sink(dest.as_ref(), &run_id, a.json) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let report = Report {
        run_id,
        json: a.json,
        agent_id: a.agent_id.clone(),
        dest,
        sink: RefCell::new(sink),
    };
    // The log file this run writes (none: stderr, `--no-audit`, or unwritable).
    let audit_path = report.log_path();
    let (loaded, tool_fd) = match load_inputs(&a, &report) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let (dry_run, no_tty) = (a.dry_run, a.no_tty);
    let (plan, explain) = match make_plan(a, loaded, audit_path.clone(), &report) {
        Ok(x) => x,
        Err(code) => return code,
    };
    tracing::debug!("exec: plan built");
    if let Some(p) = &audit_path {
        if let Err(code) = check_audit_log(p, &plan, created_log, &report) {
            return code;
        }
    }
    if dry_run {
        return super::report::dry_run(&plan, report.json);
    }
    run_plan(&plan, tool_fd, no_tty, explain, &report)
}

/// Where a run's result and audit record go, and how: `finish` writes the
/// record, says what the user must see, prints the JSON result, and gives
/// the exit status.
struct Report {
    run_id: String,
    json: bool,
    agent_id: Option<String>,
    dest: Option<audit::Dest>,
    sink: RefCell<Option<audit::Sink>>,
}

impl Report {
    fn log_path(&self) -> Option<PathBuf> {
        match &*self.sink.borrow() {
            Some(audit::Sink::File { path, .. }) => Some(path.clone()),
            _ => None,
        }
    }

    fn finish(&self, f: Finished) -> i32 {
        let r = &f.result;
        if let Some(s) = self.sink.borrow_mut().as_mut() {
            let rec = audit::Record::from_result(
                r,
                self.agent_id.as_deref().filter(|id| valid_agent_id(id)),
                f.reason,
            );
            if let Err(e) = s.write(&rec) {
                // The default log that fails now: the record still goes out.
                if matches!(self.dest, Some(audit::Dest::Default(_))) {
                    error_line(audit::fallback_notice(&e));
                    if let Err(e) = audit::write_stderr(&rec) {
                        error_line(&e);
                    }
                } else {
                    error_line(&e);
                }
            }
        }
        if let Some(err) = &r.error {
            if r.termination_reason != Termination::Exited {
                error_line(err);
            }
        }
        if self.json {
            let _ = r.write_json_line(std::io::stdout().lock());
        } else if r.killed {
            if let Some(k) = &r.kill_reason {
                error_line(format!("killed: {k}"));
            }
        }
        r.exit_code
    }

    fn refuse(&self, reason: Reason, msg: String) -> i32 {
        self.finish(supervisor::refused(&self.run_id, reason, msg))
    }
}

/// The audit log is opened (created 0600) before planning: it then exists,
/// so planning carves it out of every grant, and the record goes to this
/// very file whatever the child does to the path meanwhile. The default
/// log that cannot be written becomes stderr (`audit::open_dest`). Returns
/// the sink and whether this run created the file; an unsafe log refuses
/// the run (its exit status).
fn open_audit_sink(
    dest: Option<&audit::Dest>,
    run_id: &str,
    json: bool,
) -> Result<(Option<audit::Sink>, bool), i32> {
    let Some(d) = dest else {
        return Ok((None, false));
    };
    let created_log = d
        .path()
        .is_some_and(|p| std::fs::symlink_metadata(p).is_err());
    match audit::open_dest(d) {
        Ok((s, notice)) => {
            if let Some(n) = notice {
                error_line(n);
            }
            Ok((Some(s), created_log))
        }
        Err(e) if e.is_unsafe() => {
            let r = RunResult::not_run(
                run_id.to_string(),
                Termination::Refused,
                exit::REFUSED,
                e.to_string(),
            );
            error_line(&e);
            if json {
                let _ = r.write_json_line(std::io::stdout().lock());
            }
            Err(exit::REFUSED)
        }
        Err(e) => {
            error_line(&e);
            Ok((None, created_log))
        }
    }
}

/// The agent id checked, the policy loaded (a request's text, a file, or the
/// default) and `--tool-fd` adopted, in that order; a refusal's exit status.
fn load_inputs(
    a: &ExecArgs,
    report: &Report,
) -> Result<(LoadedPolicy, Option<std::os::fd::OwnedFd>), i32> {
    if let Some(id) = &a.agent_id {
        if !valid_agent_id(id) {
            return Err(report.refuse(
                Reason::InvalidAgentId,
                format!("--agent-id {id:?}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]{{0,127}}$"),
            ));
        }
    }
    let loaded = match (&a.policy_text, &a.policy) {
        (Some(_), Some(p)) => {
            return Err(report.refuse(
                Reason::PolicyInvalid,
                format!(
                    "a request's `policy` and --policy {} both given: give one",
                    p.display()
                ),
            ))
        }
        (Some(text), None) => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
            match policy::load_str(text, "<request policy>", None, &cwd) {
                Ok(lp) => lp,
                Err(e) => return Err(report.refuse(Reason::PolicyInvalid, policy_load_error(&e))),
            }
        }
        (None, Some(p)) => match policy::load_file(p) {
            Ok(lp) => lp,
            Err(e) => return Err(report.refuse(Reason::PolicyInvalid, policy_load_error(&e))),
        },
        (None, None) => default_policy(),
    };
    let tool_fd = match a.tool_fd {
        None => None,
        Some(fd) => {
            if fd < 3 || !crate::sys::fd_is_open(fd) {
                return Err(report.refuse(
                    Reason::BadToolFd,
                    format!("--tool-fd {fd}: not an open inherited descriptor (> 2)"),
                ));
            }
            Some(crate::sys::adopt_fd(fd))
        }
    };
    tracing::debug!("exec: policy loaded");
    Ok((loaded, tool_fd))
}

/// The command-line flags applied to the policy, and the plan built; a
/// refusal's exit status.
fn make_plan(
    a: ExecArgs,
    mut loaded: LoadedPolicy,
    audit_log: Option<PathBuf>,
    report: &Report,
) -> Result<(plan::Plan, ExplainInput), i32> {
    if let Err(e) = apply_env_flags(&mut loaded.policy.env, &a.env) {
        return Err(report.refuse(Reason::PolicyInvalid, e));
    }
    let env_names: Vec<String> = a
        .env
        .iter()
        .map(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k).to_string())
        .collect();
    // --explain asks `why`'s Survey after the run: it needs the policy too.
    let explain = a.explain.then(|| (loaded.clone(), a.allow_host.len()));
    let input = BuildInput {
        loaded,
        overrides: Overrides {
            allow_read: a.allow_read,
            allow_write: a.allow_write,
            allow_exec: a.allow_exec,
            net: a.net,
            allow_hosts: a.allow_host,
            credentials: a.credential,
            timeout: a.timeout,
            max_output: a.max_output,
            workspace: a.workspace,
            cwd: a.cwd,
            mounts: a.mounts,
            tmp_size_mb: a.tmp_size,
            audit_log,
            implied_cwd: a.policy.is_none() && a.policy_text.is_none(),
        },
        argv: a.command,
        best_effort: a.best_effort,
        run_id: report.run_id.clone(),
    };
    match plan::build(input) {
        Ok(p) => Ok((p, explain)),
        Err(PlanError::Command(e)) => {
            let reason = match e.exit_code() {
                exit::NOT_FOUND => Reason::CommandNotFound,
                exit::CANNOT_EXECUTE => Reason::CannotExecute,
                _ => Reason::PolicyInvalid,
            };
            Err(report.finish(Finished::not_run(&report.run_id, reason, e.to_string())))
        }
        Err(e) => {
            let mut msg = e.to_string();
            // A refused variable given on the command line: say so.
            if let Some(n) = env_names.iter().find(|n| {
                msg.contains(&format!("env.set.{n}"))
                    || msg.contains(&format!("variable {n} "))
                    || msg.contains(&format!("`{n}`"))
            }) {
                msg.push_str(&format!(" (given with -e {n})"));
            }
            Err(report.refuse(Reason::PolicyInvalid, msg))
        }
    }
}

/// Never write into a place the child could have prepared: an audit log the
/// run could reach refuses it (and a log this run created is removed).
fn check_audit_log(
    log: &std::path::Path,
    plan: &plan::Plan,
    created_log: bool,
    report: &Report,
) -> Result<(), i32> {
    let Err(why) = audit_log_reachable(log, plan) else {
        return Ok(());
    };
    report.sink.borrow_mut().take();
    if created_log {
        let _ = std::fs::remove_file(log);
    }
    Err(report.refuse(
        Reason::AuditLogUnsafe,
        format!(
            "refusing the audit log {}: {why}; put it outside every write grant (or use --no-audit)",
            log.display()
        ),
    ))
}

/// Run the plan under the supervisor, explain and summarise, and finish.
fn run_plan(
    plan: &plan::Plan,
    tool_fd: Option<std::os::fd::OwnedFd>,
    no_tty: bool,
    explain: ExplainInput,
    report: &Report,
) -> i32 {
    let json = report.json;
    if !json {
        for n in plan.notices.iter().filter(|n| n.on_exec) {
            error_line(format!("note: {}", n.text));
        }
    }
    let opts = ExecOptions {
        json,
        grace: Duration::from_millis(1000),
        tool_fd,
        no_tty,
        observer: explain
            .as_ref()
            .map(|_| crate::guards::observer::Observer::default()),
    };
    let observer = opts.observer.clone();
    let mut f = supervisor::run(plan, opts);
    if let Some((loaded, cli_hosts)) = &explain {
        if f.result.termination_reason != Termination::Refused {
            super::explain::explain(plan, loaded, *cli_hosts, observer.as_ref(), &mut f.result);
        }
    }
    if !json {
        let explained = f.result.denials.is_some();
        for line in streaming_summary(&f.result, plan.limits.max_output_bytes, explained) {
            error_line(line);
        }
        if let Some(d) = &f.result.denials {
            super::explain::print(d, f.result.explain.as_ref());
        }
    }
    report.finish(f)
}

/// What a streaming run must not hide (issue 25), one line each, said on
/// stderr after the run: output dropped at the byte limit, and what
/// capsule itself refused (proxy connections, tool and LLM calls). With
/// `--json` the result carries both (`*_truncated`, `*_bytes`,
/// `denied_hosts`, `usage`). `explained`: the run was `--explain`ed (its
/// refusals are listed next, so the hint to run again with it is not given).
pub fn streaming_summary(r: &RunResult, limit: u64, explained: bool) -> Vec<String> {
    let mut out = Vec::new();
    for (name, cut, total) in [
        ("stdout", r.stdout_truncated, r.stdout_bytes),
        ("stderr", r.stderr_truncated, r.stderr_bytes),
    ] {
        if cut {
            out.push(format!(
                "{name} was cut at the byte limit: {limit} of {total} bytes written, {} dropped \
                 (raise it with --max-output BYTES or limits.max_output_bytes)",
                total.saturating_sub(limit)
            ));
        }
    }
    let mut refused: Vec<String> = Vec::new();
    let usage = r.usage.as_ref();
    let count = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_u64).unwrap_or(0);
    let proxy_denied = count(usage.and_then(|u| u.pointer("/proxy/denied")));
    if proxy_denied > 0 || !r.denied_hosts.is_empty() {
        refused.push(format!(
            "{} proxy connection(s) to hosts not in allow_hosts ({}; allow one with --allow-host HOST)",
            proxy_denied.max(r.denied_hosts.len() as u64),
            r.denied_hosts.join(", ")
        ));
    }
    let at_capacity = count(usage.and_then(|u| u.pointer("/proxy/refused_at_capacity")));
    if at_capacity > 0 {
        refused.push(format!(
            "{at_capacity} proxy connection(s) over network.max_connections"
        ));
    }
    if r.tool_refusals > 0 {
        let by = usage
            .and_then(|u| u.get("tool_refusals_by_reason"))
            .and_then(serde_json::Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        refused.push(format!("{} tool call(s) ({by})", r.tool_refusals));
    }
    let llm_refused: u64 = usage
        .and_then(|u| u.get("llm"))
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with("refused_"))
                .filter_map(|(_, v)| v.as_u64())
                .sum()
        })
        .unwrap_or(0);
    if llm_refused > 0 {
        refused.push(format!("{llm_refused} LLM request(s)"));
    }
    if !refused.is_empty() && explained {
        out.push(format!(
            "the sandbox refused {} during this run; `--json` has the details (denied_hosts, usage)",
            refused.join("; ")
        ));
    } else if !refused.is_empty() {
        out.push(format!(
            "the sandbox refused {} during this run; `--json` has the details (denied_hosts, usage); \
             run again with `capsule exec --explain` to list every refusal, file accesses too, with its layer, \
             policy key and the change that would allow it",
            refused.join("; ")
        ));
    }
    out.extend(super::explain::network_off_line(r));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_ids_are_fresh_ulids_of_now() {
        let (a, b) = (super::new_run_id(), super::new_run_id());
        assert_ne!(a, b);
        let u = ulid::Ulid::from_string(&a).expect("a ULID");
        assert_eq!(a.len(), 26);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(now.abs_diff(u.timestamp_ms()) < 60_000, "{a}");
    }

    #[test]
    fn agent_ids() {
        for ok in ["a", "A1", "agent-1.x_y", &"a".repeat(128)] {
            assert!(super::valid_agent_id(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", &"a".repeat(129), "ä"] {
            assert!(!super::valid_agent_id(bad), "{bad}");
        }
    }
}

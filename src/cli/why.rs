//! `capsule why -p FILE QUESTION...`: would the sandbox allow it, which
//! layer decides here, which policy key, and what change would allow it.
//! The same planning as `exec` (and `check`), and no run: see `crate::why`.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::plan::{self, build::Overrides, BuildInput, Plan};
use crate::policy::{self, LoadedPolicy, NetMode};
use crate::why::{Answer, FsAccess, Survey};

#[derive(Debug, Args)]
#[command(
    after_help = "Each question flag may be repeated. Answers come grouped: read, write, exec, truncate, chmod, connect, request, tool, model, env, signal.\n\
                  A request is asked as 'METHOD URL' (a QUESTION, or --request): e.g. \
                  capsule why -p p.yaml 'POST https://api.github.com/repos/acme/widget/issues'. The answer says \
                  whether TLS is terminated or spliced for its host, which allow_hosts entry allows or refuses its \
                  method and path, and which credential it would carry (by name: why never reads a value). \
                  `connect HOST[:PORT]` is asked as --connect.\n\
                  Exit status: 0 every answer is allowed, 1 at least one is refused, 125 the policy (or this \
                  host) refuses the run."
)]
pub struct WhyArgs {
    /// Policy file (default: the built-in default policy, as `exec`).
    #[arg(short, long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// May the run read PATH (a file, or list a directory)?
    #[arg(long, value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// May the run write PATH (modify it, or create it when it does not exist)?
    #[arg(long, value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// May the run execute PATH?
    #[arg(long, value_name = "PATH")]
    pub exec: Vec<PathBuf>,
    /// May the run truncate PATH?
    #[arg(long, value_name = "PATH")]
    pub truncate: Vec<PathBuf>,
    /// May the run change the mode of PATH?
    #[arg(long, value_name = "PATH")]
    pub chmod: Vec<PathBuf>,
    /// May the run connect to HOST:PORT ([v6]:PORT for IPv6)?
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Vec<String>,
    /// May the run send this HTTP(S) request through the proxy: 'METHOD URL' (repeatable)?
    #[arg(long, value_name = "METHOD URL")]
    pub request: Vec<String>,
    /// Questions as words: 'METHOD URL' (or METHOD URL as two words), `connect HOST[:PORT]`.
    #[arg(value_name = "QUESTION")]
    pub questions: Vec<String>,
    /// May the run call the tool NAME?
    #[arg(long, value_name = "NAME")]
    pub tool: Vec<String>,
    /// May the run ask for the LLM model NAME?
    #[arg(long, value_name = "NAME")]
    pub model: Vec<String>,
    /// Does the run get the environment variable NAME (its value is never shown)?
    #[arg(long, value_name = "NAME")]
    pub env: Vec<String>,
    /// May the run signal the process PID (a process outside the run)?
    #[arg(long, value_name = "PID")]
    pub signal: Vec<i32>,
    /// As `exec --allow-read` (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<String>,
    /// As `exec --allow-write` (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<String>,
    /// As `exec --allow-exec` (repeatable).
    #[arg(long, value_name = "PATH")]
    pub allow_exec: Vec<String>,
    /// As `exec --net`: none | proxy | unrestricted.
    #[arg(long, value_name = "MODE")]
    pub net: Option<NetMode>,
    /// As `exec --allow-host` (repeatable).
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// As exec: a bearer token from capsule's variable VAR for HOST (repeatable).
    #[arg(long, value_name = "VAR@HOST")]
    pub credential: Vec<String>,
    /// As `exec --workspace`.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// As `exec --cwd`.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// As `exec --mount` (repeatable).
    #[arg(long = "mount", value_name = "SRC:DST[:ro|rw]")]
    pub mounts: Vec<String>,
    /// As `exec --audit-log`: the log is carved out of every grant.
    #[arg(long, value_name = "FILE", conflicts_with = "no_audit")]
    pub audit_log: Option<PathBuf>,
    /// As `exec --no-audit`.
    #[arg(long)]
    pub no_audit: bool,
    /// As `exec --best-effort`: answer for a run that accepts missing protections.
    #[arg(long)]
    pub best_effort: bool,
    /// Print one JSON object: {"policy", "host", "answers": [...]}.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: WhyArgs) -> i32 {
    match why(&a) {
        Ok(code) => code,
        Err(msg) => {
            super::error_line(msg);
            125
        }
    }
}

/// Plan as `exec` would, ask, print: 0 when all is allowed, 1 when
/// something is refused; `Err` is the one line of a 125.
fn why(a: &WhyArgs) -> Result<i32, String> {
    let (loaded, plan) = plan_for(a)?;
    let survey = Survey::new(&plan, &loaded, a.allow_host.len())
        .map_err(|e| format!("capsule exec refuses this policy here: {e}"))?;
    let answers = ask(&survey, a)?;
    if a.json {
        let v = serde_json::json!({
            "policy": loaded.source.as_ref().map(|p| p.display().to_string()),
            "host": survey.host_json(),
            "answers": answers.iter().map(Answer::to_json).collect::<Vec<_>>(),
        });
        println!("{v}");
    } else {
        for ans in &answers {
            print!("{}", ans.render());
        }
    }
    Ok(if answers.iter().all(|x| x.allowed) {
        0
    } else {
        1
    })
}

/// The policy and the plan `exec` would build with these flags (its audit
/// log carved out, and refused where the run could reach it, as `exec`).
fn plan_for(a: &WhyArgs) -> Result<(LoadedPolicy, Plan), String> {
    let loaded = match &a.policy {
        Some(p) => policy::load_file(p).map_err(|e| e.to_string())?,
        None => super::exec::default_policy(),
    };
    let overrides = Overrides {
        allow_read: a.allow_read.clone(),
        allow_write: a.allow_write.clone(),
        allow_exec: a.allow_exec.clone(),
        net: a.net,
        allow_hosts: a.allow_host.clone(),
        credentials: a.credential.clone(),
        workspace: a.workspace.clone(),
        cwd: a.cwd.clone(),
        mounts: a.mounts.clone(),
        // As exec: the run's audit log is carved out of every grant.
        audit_log: (!a.no_audit).then(|| {
            a.audit_log
                .clone()
                .unwrap_or_else(crate::audit::default_path)
        }),
        ..Overrides::default()
    };
    let audit_path = overrides.audit_log.clone();
    let input = BuildInput {
        loaded: loaded.clone(),
        overrides,
        argv: vec![],
        best_effort: a.best_effort,
        run_id: super::exec::new_run_id(),
    };
    let plan = plan::build(input).map_err(|e| e.to_string())?;
    if let Some(p) = &audit_path {
        if let Err(why) = super::exec::audit_log_reachable(p, &plan) {
            return Err(format!(
                "capsule exec refuses the audit log {}: {why}; put it outside every write grant (or use --no-audit)",
                p.display()
            ));
        }
    }
    Ok((loaded, plan))
}

/// Each question asked, answered in the documented order.
fn ask(survey: &Survey<'_>, a: &WhyArgs) -> Result<Vec<Answer>, String> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let home = policy::resolve::invoking_home();
    let abs = |p: &Path| -> PathBuf {
        let s = p.to_string_lossy();
        policy::resolve::expand(&s, &here, &home).unwrap_or_else(|_| here.join(p))
    };
    let mut answers: Vec<Answer> = Vec::new();
    for (list, access) in [
        (&a.read, FsAccess::Read),
        (&a.write, FsAccess::Write),
        (&a.exec, FsAccess::Exec),
        (&a.truncate, FsAccess::Truncate),
        (&a.chmod, FsAccess::Chmod),
    ] {
        for p in list {
            answers.push(survey.path(&abs(p), access));
        }
    }
    for c in &a.connect {
        let (h, port) = split_host_port(c).ok_or_else(|| {
            format!("why --connect {c}: expected HOST:PORT (e.g. api.github.com:443, [::1]:8080)")
        })?;
        answers.push(survey.connect(h, port));
    }
    for q in requests(a)? {
        match q {
            Asked::Connect(h, port) => answers.push(survey.connect(&h, port)),
            Asked::Request(r) => answers.push(survey.request(&r)),
        }
    }
    answers.extend(a.tool.iter().map(|t| survey.tool(t)));
    answers.extend(a.model.iter().map(|m| survey.model(m)));
    answers.extend(a.env.iter().map(|e| survey.env(e)));
    answers.extend(a.signal.iter().map(|p| survey.signal(*p)));
    if answers.is_empty() {
        return Err(
            "why: ask something: --read, --write, --exec, --truncate, --chmod PATH, --connect HOST:PORT, 'METHOD URL', \
             --tool, --model, --env NAME or --signal PID"
                .into(),
        );
    }
    Ok(answers)
}

/// A question given as words.
enum Asked {
    Connect(String, u16),
    Request(crate::why::Request),
}

/// The positional questions and `--request`: 'METHOD URL' in one word or
/// two, `connect HOST[:PORT]` (443 by default).
fn requests(a: &WhyArgs) -> Result<Vec<Asked>, String> {
    use crate::why::Request;
    let mut out: Vec<Asked> = a
        .request
        .iter()
        .map(|q| Request::parse(q).map(Asked::Request))
        .collect::<Result<_, _>>()?;
    let mut words = a.questions.iter();
    while let Some(w) = words.next() {
        if w.contains(char::is_whitespace) {
            out.push(Asked::Request(Request::parse(w)?));
            continue;
        }
        let Some(next) = words.next() else {
            return Err(format!(
                "why: `{w}`: ask 'METHOD URL' (e.g. 'GET https://pypi.org/simple/') or `connect HOST[:PORT]`"
            ));
        };
        if w == "connect" {
            let (h, port) = split_host_port(next).unwrap_or((next.as_str(), 443));
            out.push(Asked::Connect(h.to_string(), port));
        } else {
            out.push(Asked::Request(Request::parse(&format!("{w} {next}"))?));
        }
    }
    Ok(out)
}

/// `host:port`, `[v6]:port`.
fn split_host_port(s: &str) -> Option<(&str, u16)> {
    let (h, p) = s.rsplit_once(':')?;
    let port = p.parse().ok()?;
    if h.is_empty() || (h.contains(':') && !h.starts_with('[')) {
        return None;
    }
    Some((h, port))
}

#[cfg(test)]
mod tests {
    use super::split_host_port;

    #[test]
    fn host_port() {
        assert_eq!(split_host_port("a.b:443"), Some(("a.b", 443)));
        assert_eq!(split_host_port("[::1]:80"), Some(("[::1]", 80)));
        assert_eq!(split_host_port("::1:80"), None);
        assert_eq!(split_host_port("a.b"), None);
        assert_eq!(split_host_port(":1"), None);
    }
}

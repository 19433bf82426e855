//! `capsule learn`: run a command confined, with `exec --explain`'s
//! observer on, and write a draft policy that would let it run (see
//! docs/learn.md and `crate::learn`).
//!
//! Each round runs the command under the base policy plus what was learnt
//! so far (never unconfined), answers every refused access with `why`'s
//! Survey, and keeps the grants `learn::judge` accepts. Rounds stop when one
//! learns nothing new or at `--iterations`. The draft is validated with the
//! same loading and planning `exec --policy DRAFT` does before it is
//! written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::guards::observer::Observer;
use crate::learn::{self, Draft, HostGrant, Need, Refused, RuleGrant};
use crate::plan::{self, build::Overrides, BuildInput, Plan};
use crate::policy::{self, LoadedPolicy, NetMode, PathEntry, Policy};
use crate::result::{exit, RunResult, Termination};
use crate::supervisor::{self, ExecOptions};

#[derive(Debug, Args)]
pub struct LearnArgs {
    /// The base policy the command starts from (default: the system grants, the workspace writable, no network).
    #[arg(short, long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Learn hosts too: the run goes through capsule's proxy, and each host it asks for is added to network.allow_hosts.
    #[arg(long)]
    pub learn_hosts: bool,
    /// Write the draft policy to FILE (default: stdout).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The writable workspace added to the base (default: the current directory, when no --policy is given).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Run the command at most N times, each with what was learnt so far, until a run learns nothing new.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub iterations: u32,
    /// Write no audit record of the runs (by default each run is recorded in the default audit log, as `exec` does).
    #[arg(long)]
    pub no_audit: bool,
    /// Wall-clock limit of each run, in seconds (overrides the policy).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// The command and its arguments.
    /// (As `exec`: an unknown option before it is a usage error, not a command.)
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What the rounds learnt so far.
#[derive(Default)]
struct State {
    workspace: Option<String>,
    needs: Vec<Need>,
    hosts: Vec<HostGrant>,
    /// Map entries widened for the requests the proxy refused by rule.
    rules: Vec<RuleGrant>,
    net_notes: Vec<String>,
    refused: Vec<Refused>,
}

impl State {
    fn draft(&self, home: &Path) -> Draft {
        Draft {
            grants: learn::collapse(&self.needs, home),
            hosts: self.hosts.clone(),
            rules: self.rules.clone(),
            net_notes: self.net_notes.clone(),
            workspace: self.workspace.clone(),
        }
    }

    /// What learn's own next round runs with: the draft without the write
    /// grants and the hosts it learnt. The command is untrusted: a write it
    /// asked for (a `~/.bashrc`, another project's files) and a host it
    /// asked for go into the draft for the user to review, never into a run
    /// learn makes by itself; reads and execs are let through so that the
    /// command gets further each round. A learnt host let through was an
    /// exfiltration channel the command chose for itself: round 1 asked to
    /// read files of other projects and to reach its own server, and round
    /// 2, given both, sent the files there before anyone reviewed anything
    /// (red team 8, `learn_lets_no_round_send_what_it_learnt_to_read`).
    fn round_draft(&self, home: &Path) -> Draft {
        let mut d = self.draft(home);
        d.grants
            .retain(|g| g.kind != policy::validate::GrantKind::Write);
        d.hosts.clear();
        // A widened rule is a channel the command chose too (a POST where
        // only GET was allowed): for review, never for learn's own rounds.
        d.rules.clear();
        d.net_notes.clear();
        d
    }
}

/// `capsule learn --help`.
pub const LONG_ABOUT: &str = "Run COMMAND confined (never unconfined: the base policy, by default the system grants, \
the current directory as a writable workspace and no network) with `exec --explain`'s observer on, and write a draft \
policy (YAML, to --output or stdout) that would let the same command run: the base plus a grant for each refused \
access, each with a comment saying which access needed it, collapsed to directories but never to /, $HOME, a \
credential store, an /etc secret or /proc and /sys wholesale. Hosts only with --learn-hosts. What it would not grant \
is listed on stderr with the reason. Runs the command up to --iterations times, each with what was learnt so far. \
Exit status: 0 when the draft was written, 125 when capsule failed (the command's own status is printed). \
See docs/learn.md.";

/// One line of learn's own on stderr.
fn say(msg: impl std::fmt::Display) {
    crate::say!("capsule learn: {msg}");
}

pub fn run(a: LearnArgs) -> i32 {
    match learn(a) {
        Ok(code) => code,
        Err(msg) => {
            say(msg);
            exit::REFUSED
        }
    }
}

fn learn(a: LearnArgs) -> Result<i32, String> {
    let here = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let home = crate::policy::resolve::invoking_home();
    let (base, base_dir, base_name, workspace) = base_policy(&a, &here, &home)?;
    // The draft's directory is opened now, before the command runs: it may
    // lie in the workspace, where the command can plant links.
    let out_dir = a
        .output
        .as_deref()
        .map(|p| DraftDir::open(p, &here))
        .transpose()?;
    let mut st = State {
        workspace,
        ..State::default()
    };
    let mut last_status = None;
    let mut rounds = 0;
    let mut converged = false;
    let mut observed_files = true;
    for round in 1..=a.iterations {
        rounds = round;
        let before = (st.draft(&home).grants, st.hosts.len(), st.rules.clone());
        let text = learn::render(&base, &st.round_draft(&home), &[]);
        let loaded = policy::load_str(&text, "<learn draft>", Some(false), &base_dir)
            .map_err(|e| format!("the draft of round {round} does not load: {e}"))?;
        let (plan, cli_hosts) = plan_round(&a, loaded.clone())?;
        let observer = Observer::default();
        let dumpable = nix::sys::prctl::get_dumpable().unwrap_or(false);
        let f = supervisor::run(
            &plan,
            ExecOptions {
                json: true,
                grace: Duration::from_millis(1000),
                tool_fd: None,
                no_tty: true,
                observer: Some(observer.clone()),
            },
        );
        // The run's init shared this process's memory and made it
        // non-dumpable; the run is over (its tree killed): dumpable again,
        // as a fresh capsule, or the next round's child could not have its
        // user namespace's id maps written (EACCES) and would take the
        // no-namespace path.
        if dumpable {
            let _ = nix::sys::prctl::set_dumpable(true);
        }
        let r = f.result;
        let dest = (!a.no_audit).then(|| crate::audit::Dest::of(None));
        super::exec::write_audit(dest.as_ref(), &r, None, f.reason);
        replay(&r);
        if r.termination_reason == Termination::Refused {
            return Err(r.error.unwrap_or_else(|| "the run was refused".into()));
        }
        last_status = Some(r.exit_code);
        let files = study(&plan, &loaded, cli_hosts, &observer, &r, &a, &home, &mut st);
        observed_files &= files;
        let after = (st.draft(&home).grants, st.hosts.len(), st.rules.clone());
        if before == after {
            converged = true;
            break;
        }
    }
    learn::dedup_refused(&mut st.refused);
    let draft = st.draft(&home);
    let header = header(&a, &base_name, rounds, converged);
    let text = learn::render(&base, &draft, &header);
    // The draft must load and plan as `exec --policy DRAFT` will.
    let loaded = policy::load_str(&text, "<learn draft>", Some(false), &base_dir)
        .map_err(|e| format!("the draft does not load (not written): {e}"))?;
    plan::build(BuildInput {
        loaded,
        overrides: Overrides::default(),
        argv: a.command.clone(),
        best_effort: false,
        run_id: super::exec::new_run_id(),
    })
    .map_err(|e| format!("the draft does not plan (not written): {e}"))?;
    let dest = write_draft(a.output.as_deref(), out_dir.as_ref(), &text)?;
    report(
        &st,
        &draft,
        &dest,
        rounds,
        converged,
        observed_files,
        last_status,
    );
    Ok(0)
}

/// The base policy (relative paths made absolute), the directory paths
/// resolve against, and its name for the draft's header.
fn base_policy(
    a: &LearnArgs,
    here: &Path,
    home: &Path,
) -> Result<(Policy, PathBuf, String, Option<String>), String> {
    let (mut p, dir, name) = match &a.policy {
        Some(f) => {
            let lp = policy::load_file(f).map_err(|e| super::exec::policy_load_error(&e))?;
            let dir = lp.base_dir.clone();
            (
                learn::absolute_base(lp.policy, &dir),
                dir,
                f.display().to_string(),
            )
        }
        None => (
            Policy {
                version: 1,
                ..Default::default()
            },
            here.to_path_buf(),
            "the default (system grants, the workspace writable, no network)".to_string(),
        ),
    };
    // The workspace: --workspace, or without --policy the current directory.
    let ws = match (&a.workspace, &a.policy) {
        (Some(w), _) => Some(
            std::fs::canonicalize(w).map_err(|e| format!("--workspace {}: {e}", w.display()))?,
        ),
        (None, None) => Some(here.to_path_buf()),
        (None, Some(_)) => None,
    };
    let mut added = None;
    if let Some(ws) = ws {
        match workspace_refused(&ws, home) {
            None => {
                let s = ws.display().to_string();
                if !p.filesystem.write.iter().any(|e| e.raw() == s) {
                    p.filesystem.write.push(PathEntry::Plain(s.clone()));
                    added = Some(s);
                }
            }
            Some(why) => say(format!(
                "note: {} is not made the writable workspace ({why}); everything the command needs \
                 is learnt instead (pick one with --workspace DIR)",
                ws.display()
            )),
        }
    }
    Ok((p, dir, name, added))
}

/// Why `ws` cannot be the writable workspace: what learn never grants, the
/// temporary directory, a world-writable place.
fn workspace_refused(ws: &Path, home: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(why) = learn::never(ws, policy::validate::GrantKind::Write, home) {
        return Some(why);
    }
    let tmp = std::env::temp_dir();
    let tmp = std::fs::canonicalize(&tmp).unwrap_or(tmp);
    if tmp.starts_with(ws) {
        return Some("it is or holds the temporary directory".into());
    }
    if std::fs::metadata(ws).is_ok_and(|m| m.permissions().mode() & 0o002 != 0) {
        return Some("it is world-writable".into());
    }
    None
}

/// Write the draft to `-o FILE` (through the directory opened before the
/// rounds) or to stdout; returns where it went.
fn write_draft(
    output: Option<&Path>,
    dir: Option<&DraftDir>,
    text: &str,
) -> Result<String, String> {
    match (output, dir) {
        (Some(p), Some(dir)) => {
            dir.write(text)
                .map_err(|e| format!("writing {}: {e}", p.display()))?;
            Ok(p.display().to_string())
        }
        _ => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| format!("writing the draft to stdout: {e}"))?;
            Ok("stdout".to_string())
        }
    }
}

/// Where `-o FILE` goes: FILE's directory, opened before the first round,
/// and FILE's name in it.
///
/// The command may write where the draft goes (`-o draft.yaml` in the
/// workspace): it planted `draft.yaml` as a link to a file of the user's
/// (`~/.bashrc`), or swapped a directory on the way for a link, and a
/// plain write followed it (red team 8,
/// `learn_writes_its_draft_through_no_link_the_command_planted`). So the
/// draft is written to a new file (`O_EXCL|O_NOFOLLOW`) in the directory
/// opened before the command ran, renamed over the name (which replaces a
/// link, never follows it), and only while that path still names the same
/// directory.
struct DraftDir {
    dir: std::os::fd::OwnedFd,
    path: PathBuf,
    name: std::ffi::OsString,
}

impl DraftDir {
    fn open(p: &Path, here: &Path) -> Result<DraftDir, String> {
        use nix::fcntl::OFlag;
        let name = p
            .file_name()
            .ok_or_else(|| format!("-o {}: not a file name", p.display()))?
            .to_owned();
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => here.join(d),
            _ => here.to_path_buf(),
        };
        // As for a grant: never through a link an earlier run could have
        // planted in a directory this user can write.
        let (path, _) = crate::policy::resolve::follow(&parent)
            .map_err(|e| format!("-o {}: {}: {e}", p.display(), parent.display()))?;
        let dir = nix::fcntl::open(
            &path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| format!("-o {}: {}: {}", p.display(), path.display(), e.desc()))?;
        Ok(DraftDir { dir, path, name })
    }

    fn write(&self, text: &str) -> std::io::Result<()> {
        use nix::fcntl::{openat, renameat, OFlag};
        use nix::sys::stat::{fstat, stat, Mode};
        use std::io::Write;
        let same = |a: &nix::sys::stat::FileStat, b: &nix::sys::stat::FileStat| {
            a.st_dev == b.st_dev && a.st_ino == b.st_ino
        };
        let changed = || {
            std::io::Error::other(format!(
                "{} is no longer the directory it was when learn started (a link or another \
                 directory was put in its place while the command ran); the draft was not written",
                self.path.display()
            ))
        };
        let held = fstat(&self.dir)?;
        if !stat(&self.path).is_ok_and(|now| same(&now, &held)) {
            return Err(changed());
        }
        let mut tmp = std::ffi::OsString::from(".");
        tmp.push(&self.name);
        tmp.push(format!(".capsule-learn-{}", std::process::id()));
        // Whatever the command left under that name goes (unlinked, never
        // followed), so that it cannot keep the draft from being written.
        let _ = nix::unistd::unlinkat(
            &self.dir,
            tmp.as_os_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        let fd = openat(
            &self.dir,
            tmp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )?;
        let wrote = std::fs::File::from(fd)
            .write_all(text.as_bytes())
            .and_then(|()| {
                if stat(&self.path).is_ok_and(|now| same(&now, &held)) {
                    Ok(())
                } else {
                    Err(changed())
                }
            })
            .and_then(|()| {
                renameat(&self.dir, tmp.as_os_str(), &self.dir, self.name.as_os_str())
                    .map_err(std::io::Error::from)
            });
        if wrote.is_err() {
            let _ = nix::unistd::unlinkat(
                &self.dir,
                tmp.as_os_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        wrote
    }
}

/// The plan of one round: the draft so far, and in place of network mode
/// none the proxy (refusing every host but those learnt, so that the hosts
/// the command asks for are seen). Returns the plan and how many
/// allowlist entries the command line added.
fn plan_round(a: &LearnArgs, loaded: LoadedPolicy) -> Result<(Plan, usize), String> {
    let net = &loaded.policy.network;
    let (mode, extra) = match net.mode {
        NetMode::Unrestricted => (None, vec![]),
        _ if net.allow_hosts.is_empty() => (
            Some(NetMode::Proxy),
            vec![learn::PLACEHOLDER_HOST.to_string()],
        ),
        _ => (Some(NetMode::Proxy), vec![]),
    };
    let cli_hosts = extra.len();
    let plan = plan::build(BuildInput {
        loaded,
        overrides: Overrides {
            net: mode,
            allow_hosts: extra,
            timeout: a.timeout,
            ..Overrides::default()
        },
        argv: a.command.clone(),
        best_effort: false,
        run_id: super::exec::new_run_id(),
    })
    .map_err(|e| e.to_string())?;
    Ok((plan, cli_hosts))
}

/// The command's own output, on stderr (stdout carries the draft).
fn replay(r: &RunResult) {
    crate::sys::stdio::err_text(&r.stdout);
    crate::sys::stdio::err_text(&r.stderr);
}

/// Answer what one round was refused; learn what may be granted. Returns
/// whether file accesses were observed.
#[allow(clippy::too_many_arguments)]
fn study(
    plan: &Plan,
    loaded: &LoadedPolicy,
    cli_hosts: usize,
    observer: &Observer,
    r: &RunResult,
    a: &LearnArgs,
    home: &Path,
    st: &mut State,
) -> bool {
    let survey = match super::explain::survey_for(plan, loaded, cli_hosts, r) {
        Ok(s) => s,
        Err(e) => {
            say(format!("the survey: {e}"));
            return false;
        }
    };
    let files = study_files(&survey, observer, home, st);
    named_paths(&survey, a, home, st);
    study_hosts(&survey, r, a.learn_hosts, st);
    study_rules(&survey, r, a.learn_hosts, st);
    study_broker(r, st);
    files
}

/// The observed file accesses the run was refused, and its refused signals.
fn study_files(
    survey: &crate::why::Survey<'_>,
    observer: &Observer,
    home: &Path,
    st: &mut State,
) -> bool {
    let seen = observer.seen.lock().unwrap_or_else(|p| p.into_inner());
    let files = seen.active;
    if !files {
        say(format!(
            "file accesses were not observed ({}): nothing is learnt for files",
            seen.why_not.as_deref().unwrap_or("unknown")
        ));
    }
    for (path, access, present, comm, call) in seen.accesses_by() {
        let answer = survey.observed(&path, access, present);
        if answer.allowed {
            continue;
        }
        let by = format!("{comm} ({call} {})", path.display());
        match learn::judge(&answer, &path, access, &by, home) {
            Ok(n) => {
                if !st.needs.contains(&n) {
                    st.needs.push(n)
                }
            }
            Err(refused) if refused.reason.is_empty() => {}
            Err(refused) => st.refused.push(refused),
        }
    }
    for pid in &seen.signals {
        let answer = survey.signal(*pid);
        st.refused.push(Refused {
            what: format!("process {pid}"),
            access: "signal".into(),
            reason: answer.no_change.unwrap_or_else(|| "outside the run".into()),
        });
    }
    if seen.dropped > 0 {
        st.refused.push(Refused {
            what: format!("{} more file accesses", seen.dropped),
            access: "any".into(),
            reason: "past the observer's bound: not checked".into(),
        });
    }
    files
}

/// The `host:port` pairs the proxy refused for `host` (`usage.proxy.
/// denied_targets`): a draft allows the port the run used, not every port.
/// None when the proxy kept no pair for it (past its bound).
fn denied_ports(r: &RunResult, host: &str) -> Vec<u16> {
    let targets = r
        .usage
        .as_ref()
        .and_then(|u| u.pointer("/proxy/denied_targets"))
        .and_then(serde_json::Value::as_array);
    let mut ports: Vec<u16> = targets
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .filter_map(|t| {
            let (h, p) = t.rsplit_once(':')?;
            (h == host).then(|| p.parse().ok()).flatten()
        })
        .collect();
    ports.dedup();
    ports
}

/// The hosts the proxy refused: learnt with `--learn-hosts` (as `host:port`
/// for each port the run used), else reported.
fn study_hosts(survey: &crate::why::Survey<'_>, r: &RunResult, learn_hosts: bool, st: &mut State) {
    for host in &r.denied_hosts {
        if host == learn::PLACEHOLDER_HOST {
            continue;
        }
        let ports = denied_ports(r, host);
        let answer = survey.connect(host, ports.first().copied().unwrap_or(443));
        let refuse = |reason: String| Refused {
            what: host.clone(),
            access: "connect".into(),
            reason,
        };
        if !learn_hosts {
            st.refused
                .push(refuse("not learnt (pass --learn-hosts)".into()));
        } else if let Some(why) = learn::internal_host(host) {
            st.refused.push(refuse(why));
        } else if let Some(why) = answer.no_change.clone() {
            st.refused.push(refuse(why));
        } else {
            let entries: Vec<String> = if ports.is_empty() {
                vec![host.clone()]
            } else {
                ports.iter().map(|p| format!("{host}:{p}")).collect()
            };
            for entry in entries {
                if !st.hosts.iter().any(|h| h.host == entry) {
                    st.hosts.push(HostGrant {
                        host: entry,
                        why: "reached by: the command, through capsule's proxy while learning"
                            .into(),
                    });
                }
            }
        }
    }
}

/// The requests the proxy refused at a TLS-terminated host (`denials` with a
/// `kind`): with `--learn-hosts`, a `rule` refusal widens its map entry by
/// `why`'s smallest change (the method, the refused path itself); a
/// `credential_misuse`, a spent budget or an ambiguous path is never learnt,
/// and said so in the draft and on stderr.
fn study_rules(survey: &crate::why::Survey<'_>, r: &RunResult, learn_hosts: bool, st: &mut State) {
    let denials = r.denials.as_deref().unwrap_or_default();
    for d in denials.iter().filter(|d| d.get("kind").is_some()) {
        let field = |k: &str| {
            d.get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (kind, question, key) = (field("kind"), field("question"), field("key"));
        let refuse = |reason: String| Refused {
            what: question.clone(),
            access: "request".into(),
            reason,
        };
        let note = match kind.as_str() {
            "rule" if !learn_hosts => {
                st.refused.push(refuse("not learnt (pass --learn-hosts)".into()));
                continue;
            }
            "rule" => match survey.refusal_answer(d) {
                Some(a) if !a.allowed => match a.request.and_then(|f| f.rule_change) {
                    Some(c) => {
                        RuleGrant::add(&mut st.rules, &c, question.clone());
                        continue;
                    }
                    None => a.no_change.unwrap_or_else(|| format!("{key}: no widening allows it")),
                },
                _ => format!(
                    "{key}: its method and path are allowed, so the proxy refused something else (a Host header \
                     naming another host)"
                ),
            },
            "credential_misuse" => format!(
                "{key}: the request carried the credential's placeholder where it is not bound; learn never \
                 widens a credential's binding (review it yourself)"
            ),
            "budget" => format!("{key}: its budget is spent; learn never raises a budget"),
            _ => continue,
        };
        let text = format!("not learnt: {question}: {note}");
        if !st.net_notes.contains(&text) {
            st.net_notes.push(text);
        }
        st.refused.push(refuse(note));
    }
}

/// The broker's refusals (tools, models): never learnt, reported.
fn study_broker(r: &RunResult, st: &mut State) {
    let list = |k: &str| -> Vec<String> {
        r.usage
            .as_ref()
            .and_then(|u| u.get(k))
            .and_then(serde_json::Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for t in list("refused_tools") {
        st.refused.push(Refused {
            what: t,
            access: "tool".into(),
            reason: "not learnt: a tool needs a host command only you can give (tools.allow)"
                .into(),
        });
    }
    for m in list("refused_models") {
        st.refused.push(Refused {
            what: m,
            access: "model".into(),
            reason: "not learnt: add it to llm_access.allowed_models yourself".into(),
        });
    }
}

/// The paths the command line names (its words, and the words of a shell
/// `-c` script, `--opt=PATH` too) that exist here and that the run may not
/// read: a program often stat()s a path before it opens it (pip's
/// `--find-links DIR`, a compiler's `-I DIR`), and the observer does not see
/// stat(), so a path hidden by the view would never be opened.
fn named_paths(survey: &crate::why::Survey<'_>, a: &LearnArgs, home: &Path, st: &mut State) {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let words = a
        .command
        .iter()
        .skip(1)
        .flat_map(|w| w.split_whitespace())
        .take(512);
    for w in words {
        let w = w.trim_matches(|c| c == '"' || c == '\'' || c == ';');
        let w = w.split_once('=').map_or(w, |(_, v)| v);
        let w = w.strip_prefix("-I").unwrap_or(w);
        if !(w.starts_with('/') || w.starts_with("./") || w.starts_with("../")) || w.len() > 4096 {
            continue;
        }
        let p = here.join(w);
        if std::fs::symlink_metadata(&p).is_err() {
            continue;
        }
        let answer = survey.path(&p, crate::why::FsAccess::Read);
        if answer.allowed {
            continue;
        }
        let by = format!("the command line ({w})");
        match learn::judge(&answer, &p, crate::why::FsAccess::Read, &by, home) {
            Ok(n) if !st.needs.contains(&n) => st.needs.push(n),
            Ok(_) => {}
            Err(r) if r.reason.is_empty() => {}
            Err(r) => st.refused.push(r),
        }
    }
}

fn header(a: &LearnArgs, base: &str, rounds: u32, converged: bool) -> Vec<String> {
    let cmd = a.command.join(" ");
    let mut h = vec![
        format!("A draft policy written by `capsule learn` for: {cmd}"),
        format!("Base: {base}."),
        "Each learnt entry says which access needed it. Review every grant before you use it."
            .into(),
    ];
    if !converged {
        h.push(format!(
            "Not converged after {rounds} run(s): run `capsule learn --policy THIS_FILE -- ...` again."
        ));
    }
    h
}

fn report(
    st: &State,
    draft: &Draft,
    dest: &str,
    rounds: u32,
    converged: bool,
    files: bool,
    status: Option<i32>,
) {
    for r in &st.refused {
        say(format!(
            "not granted: {} {}: {}",
            r.access,
            super::explain::shown(&r.what),
            super::explain::shown(&r.reason)
        ));
    }
    if !files {
        say(
            "file accesses were not observed on this host: the draft holds no file grant learnt from the run",
        );
    }
    let state = if converged {
        "converged"
    } else {
        "not converged: learn again with --policy DRAFT"
    };
    say(format!(
        "draft written to {dest}: {} new grant(s), {} new host(s), {} widened host rule(s), {} refused; \
         {rounds} run(s), {state}; \
         the command's last exit status: {}",
        draft.grants.len(),
        draft.hosts.len(),
        draft.rules.len(),
        st.refused.len(),
        status.map_or("none".to_string(), |s| s.to_string())
    ));
}

//! Building the plan from a loaded policy and the command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use super::command::{self, CommandError};
use super::credentials;

use super::env::{self, EnvError};
use super::{system, Access, FsDeny, FsGrant, FsPlan, LimitsPlan, NetPlan, Opened, Origin, Plan};
use crate::policy::resolve::{self, ResolvedPath};
use crate::policy::validate::{self, GrantKind};
use crate::policy::{LoadedPolicy, NetMode, PolicyError};

#[derive(Debug, Error)]
pub enum PlanError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("{flag} {path}: {why}")]
    Flag {
        flag: &'static str,
        path: String,
        why: String,
    },
    #[error("--cwd {0}: not readable under the policy (add it, or a parent, to filesystem.read)")]
    CwdNotGranted(PathBuf),
    #[error("--cwd {path}: {source}")]
    Cwd {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "--net proxy: name the hosts the command may reach with --allow-host HOST (repeatable; `*.example.org` \
         for subdomains), or in the policy's network.allow_hosts; unrestricted egress is only ever --net unrestricted"
    )]
    ProxyWithoutHosts,
    #[error("--workspace {path}: {parent} does not exist (capsule creates DIR, DIR/scripts and DIR/output, not the directories above DIR; check the path, or mkdir -p it first)")]
    WorkspaceParent { path: PathBuf, parent: PathBuf },
    #[error("--timeout {0}: must be a number of seconds > 0")]
    Timeout(f64),
    #[error("--timeout {0}: must be at most {max} seconds (365 days)", max = crate::policy::validate::MAX_TIMEOUT_SECONDS)]
    TimeoutTooLong(f64),
    #[error("--max-output {0}: must be > 0 (bytes per stream)")]
    MaxOutput(u64),
    #[error(transparent)]
    Mount(#[from] super::mounts::MountError),
    #[error("{key}: {why}")]
    Credential { key: String, why: String },
    #[error(transparent)]
    Tool(#[from] super::tools::Refusal),
    #[error("{0}")]
    ExecOverWrite(String),
    /// A refusal of an entry the policy file holds, with its place there
    /// (`FILE:LINE:COL: `), as every policy error names it (section 2).
    #[error("{at}{inner}")]
    Located {
        at: crate::policy::error::Position,
        inner: Box<PlanError>,
    },
    #[error("cannot create capsule's own directory {dir}, which lies in a place the run may write (it must exist to be kept from the run): {source}; create it (mode 0700) or narrow the write grant")]
    OwnDir {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// What the command line adds to the policy.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub allow_read: Vec<String>,
    pub allow_write: Vec<String>,
    pub allow_exec: Vec<String>,
    pub net: Option<NetMode>,
    pub allow_hosts: Vec<String>,
    /// `--credential VAR@HOST`, as written.
    pub credentials: Vec<String>,
    pub timeout: Option<f64>,
    pub max_output: Option<u64>,
    pub workspace: Option<PathBuf>,
    pub cwd: Option<PathBuf>,
    /// `--mount SRC:DST[:ro|rw]`, as written.
    pub mounts: Vec<String>,
    /// `--tmp-size`, in MiB.
    pub tmp_size_mb: Option<u64>,
    /// The run's audit log (carved out of every grant like a credential).
    pub audit_log: Option<PathBuf>,
    /// No `--policy`: grant the current directory read-only (`plan::notices`).
    pub implied_cwd: bool,
}

/// Everything `build` needs.
#[derive(Debug, Clone)]
pub struct BuildInput {
    pub loaded: LoadedPolicy,
    pub overrides: Overrides,
    pub argv: Vec<String>,
    pub best_effort: bool,
    pub run_id: String,
}

/// Resolve, validate and plan. Creates nothing on disk except the
/// workspace's `scripts/` and `output/` directories when missing.
pub fn build(input: BuildInput) -> Result<Plan, PlanError> {
    let BuildInput {
        mut loaded,
        overrides: ov,
        argv,
        best_effort,
        run_id,
    } = input;
    // Each path `follow` walks is looked at once in this plan (never across plans).
    let _walk = resolve::WalkPass::begin();
    let home = resolve::invoking_home();
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));

    apply_overrides(&mut loaded, &ov)?;
    let mut resolved = resolve::resolve_fs(&loaded, &home)?;
    grants_from_flags(&mut resolved, &ov, &here, &home)?;
    let cwd_refused = implied_cwd(&mut resolved, &ov, &here, &home);
    validate::validate(&loaded, &resolved)?;
    tracing::debug!("plan: policy resolved and validated");
    let mut notices = super::notices::policy_notices(&loaded, &home, loaded.policy.network.mode);
    let policy = &loaded.policy;

    let mut grants = policy_grants(&resolved);
    let (mounts, mount_grants) = super::mounts::resolve(&loaded, &ov.mounts, &here, &home)?;
    grants.extend(mount_grants);
    let tmpdir = private_tmp(policy, &run_id, &mut grants);
    let ws_output = workspace(&ov, &here, &mut grants)?;
    let cwd = cwd(&ov, &here, &grants, ws_output.as_ref(), tmpdir.as_ref())?;
    // The working directory fell back: say so, and why.
    let fallback = (ov.cwd.is_none() && ov.workspace.is_none() && cwd != here).then(|| {
        let why = cwd_refused
            .clone()
            .unwrap_or_else(|| super::notices::policy_does_not_grant(&loaded, &here));
        notices.push(super::notices::cwd_fallback(&here, &cwd, &why));
        (here.clone(), why)
    });

    // Every writable place is known now: a read-only mount over one gets no exec.
    let fs_notes = super::mounts::withhold_exec(&mut grants, &mounts);
    system_grants(policy, &mut grants)?;
    let host_path = std::env::var("PATH").ok();
    let (cmd, command_notes, creds) = command(
        policy,
        &argv,
        host_path.as_deref(),
        &cwd,
        &home,
        fallback.as_ref(),
        &mut grants,
    )?;

    tracing::debug!("plan: command and system grants");
    own_dirs(&creds, &grants)?;
    let mut deny = carve_outs(&resolved, &ov, creds, &grants);
    let found_secrets = credentials::existing(&credentials::system_secrets(), |_| true);
    etc_secrets(&grants, &found_secrets, &mut deny);
    host_proc(&grants, &mut deny);
    tracing::debug!("plan: carve-outs");
    let env = environment(
        policy,
        host_path.as_deref(),
        ws_output.as_ref(),
        tmpdir.as_ref(),
        &grants,
        &mounts,
    )
    .map_err(|e| locate_env_error(&loaded, e))?;
    let tools = host_tools(&loaded, &grants, host_path.as_deref())?;
    let (net, ca_bundle) = egress_net(&loaded, &mut grants, &deny, host_path.as_deref(), &run_id)?;
    let fs = FsPlan {
        grants,
        deny,
        proc_self: policy.filesystem.system,
        mounts,
        ca_bundle,
    };
    if let Some(n) = super::notices::host_tmp_kept(&fs, tmpdir.as_deref()) {
        notices.push(n);
    }
    Ok(Plan {
        run_id,
        program: cmd.program,
        argv,
        env,
        cwd,
        tmpdir,
        command_notes,
        fs_notes,
        notices,
        fs,
        net,
        limits: limits(policy, &ov),
        best_effort,
        policy_sha256: loaded.sha256.clone(),
        tools,
        llm: policy.llm_access.clone(),
        policy_dir: loaded.base_dir.clone(),
        etc_secrets: found_secrets,
    })
}

/// The network plan, its credentials' sources checked against what the run
/// can reach, and the run's CA bundle (its read grant added).
fn egress_net(
    loaded: &LoadedPolicy,
    grants: &mut Vec<super::FsGrant>,
    deny: &[FsDeny],
    host_path: Option<&str>,
    run_id: &str,
) -> Result<(NetPlan, Option<super::CaBundle>), PlanError> {
    let mut net = net(&loaded.policy, &loaded.base_dir);
    super::egress::check_sources(
        &mut net.credentials,
        grants,
        deny,
        &loaded.base_dir,
        host_path,
    )
    .map_err(|(key, why)| PlanError::Credential { key, why })?;
    let ca_bundle = super::egress::ca_bundle(&net, run_id, grants);
    Ok((net, ca_bundle))
}

/// The network plan: the policy's, as overridden.
fn net(policy: &crate::policy::Policy, base: &Path) -> NetPlan {
    let n = &policy.network;
    NetPlan {
        mode: n.mode,
        allow_hosts: n.allow_hosts.iter().map(|h| h.host().to_string()).collect(),
        allow_unix_sockets: n.allow_unix_sockets,
        loopback: n.loopback,
        max_connections: n.max_connections(),
        host_rules: (n.allow_hosts.iter().enumerate())
            .filter_map(|(i, h)| h.rules().map(|r| (i, r.clone())))
            .collect(),
        credentials: super::egress::credentials(policy, base),
        upstream_ca: n.upstream_ca.as_ref().map(|p| base.join(p)),
    }
}

/// The limits: the policy's, as overridden (`--tmp-size` here).
fn limits(policy: &crate::policy::Policy, ov: &Overrides) -> LimitsPlan {
    let l = &policy.limits;
    let mib = |v: u64| v.saturating_mul(1024 * 1024);
    LimitsPlan {
        timeout: Duration::from_secs_f64(l.timeout_seconds),
        max_output_bytes: l.max_output_bytes,
        memory_bytes: l.memory_mb.map(mib),
        cpu_seconds: l.cpu_seconds,
        max_processes: l.max_processes,
        max_file_size_bytes: l.max_file_size_mb.map(mib),
        tmp_size_mb: ov.tmp_size_mb.or(l.tmp_size_mb),
        max_open_files: l.max_open_files,
    }
}

/// Command-line overrides go into the policy first, so the same
/// fail-closed rules apply to them.
fn apply_overrides(loaded: &mut LoadedPolicy, ov: &Overrides) -> Result<(), PlanError> {
    if let Some(mode) = ov.net {
        loaded.policy.network.mode = mode;
        if mode == NetMode::Proxy
            && loaded.policy.network.allow_hosts.is_empty()
            && ov.allow_hosts.is_empty()
            && ov.credentials.is_empty()
        {
            return Err(PlanError::ProxyWithoutHosts);
        }
    }
    loaded
        .policy
        .network
        .allow_hosts
        .extend(ov.allow_hosts.iter().map(|h| h.as_str().into()));
    for c in &ov.credentials {
        super::egress::apply_flag(&mut loaded.policy, c, ov.net.is_some()).map_err(|why| {
            PlanError::Flag {
                flag: "--credential",
                path: c.clone(),
                why,
            }
        })?;
    }
    if let Some(t) = ov.timeout {
        if !(t > 0.0 && t.is_finite()) {
            return Err(PlanError::Timeout(t));
        }
        if t > crate::policy::validate::MAX_TIMEOUT_SECONDS {
            return Err(PlanError::TimeoutTooLong(t));
        }
        loaded.policy.limits.timeout_seconds = t;
    }
    if let Some(m) = ov.max_output {
        if m == 0 {
            return Err(PlanError::MaxOutput(m));
        }
        loaded.policy.limits.max_output_bytes = m;
    }
    Ok(())
}

/// `--allow-read`, `--allow-write`, `--allow-exec`: resolved against
/// capsule's cwd, with the checks policy grants get.
fn grants_from_flags(
    resolved: &mut resolve::ResolvedFs,
    ov: &Overrides,
    here: &Path,
    home: &Path,
) -> Result<(), PlanError> {
    for (flag, list, kind) in [
        ("--allow-read", &ov.allow_read, GrantKind::Read),
        ("--allow-write", &ov.allow_write, GrantKind::Write),
        ("--allow-exec", &ov.allow_exec, GrantKind::Exec),
    ] {
        for raw in list {
            // A flag has no `?` form: a missing path is named as such.
            let mut r = resolve::resolve_one(raw, here, home, flag, true)?.ok_or_else(|| {
                PlanError::Flag {
                    flag,
                    path: raw.clone(),
                    why: format!(
                        "does not exist{}; create it first{}",
                        if raw.starts_with(['/', '~']) {
                            String::new()
                        } else {
                            format!(" ({})", here.join(raw).display())
                        },
                        if kind == GrantKind::Read {
                            ""
                        } else {
                            " (mkdir -p)"
                        }
                    ),
                }
            })?;
            r.flag = Some(flag);
            validate::check_grant(&r.path, kind).map_err(|why| PlanError::Flag {
                flag,
                path: raw.clone(),
                why,
            })?;
            match kind {
                GrantKind::Read => resolved.read.push(r),
                GrantKind::Write => resolved.write.push(r),
                GrantKind::Exec => resolved.exec.push(r),
            }
        }
    }
    Ok(())
}

/// Without a policy file, the current directory (issue 25; `notices`):
/// granted read-only, or why not.
fn implied_cwd(
    resolved: &mut resolve::ResolvedFs,
    ov: &Overrides,
    here: &Path,
    home: &Path,
) -> Option<String> {
    let mut cwd_refused: Option<String> = None;
    if ov.implied_cwd && ov.cwd.is_none() && ov.workspace.is_none() {
        let covered = resolved
            .read
            .iter()
            .chain(&resolved.write)
            .chain(&resolved.exec)
            .any(|r| here.starts_with(&r.path));
        match super::notices::implied_cwd_grant(here, home, covered) {
            Ok(Some(r)) => resolved.read.push(r),
            Ok(None) => {}
            Err(why) => cwd_refused = Some(why),
        }
    }
    cwd_refused
}

/// The policy's (and the flags') grants, with their origin.
fn policy_grants(resolved: &resolve::ResolvedFs) -> Vec<FsGrant> {
    let mut grants: Vec<FsGrant> = Vec::new();
    let from_policy = |r: &ResolvedPath, access: Access| FsGrant {
        opened: r.opened.clone(),
        path: r.path.clone(),
        access,
        origin: match r.flag {
            Some(flag) => Origin::Cli(flag),
            None => Origin::Policy {
                key: r.key.clone(),
                line: r.line,
            },
        },
    };
    grants.extend(resolved.read.iter().map(|r| from_policy(r, Access::READ)));
    grants.extend(resolved.write.iter().map(|r| from_policy(r, Access::WRITE)));
    grants.extend(resolved.exec.iter().map(|r| from_policy(r, Access::EXEC)));
    grants
}

/// The private tmp dir (created by the supervisor just before spawn).
fn private_tmp(
    policy: &crate::policy::Policy,
    run_id: &str,
    grants: &mut Vec<FsGrant>,
) -> Option<PathBuf> {
    let tmpdir = policy
        .filesystem
        .tmp
        .then(|| std::env::temp_dir().join(format!("capsule-{run_id}")));
    if let Some(t) = &tmpdir {
        grants.push(FsGrant {
            opened: Opened::NONE,
            path: t.clone(),
            access: Access::WRITE,
            origin: Origin::Tmp,
        });
    }
    tmpdir
}

/// The workspace: scripts/ read-only (+exec, it is the host's code),
/// output/ read-write. Its output directory.
fn workspace(
    ov: &Overrides,
    here: &Path,
    grants: &mut Vec<FsGrant>,
) -> Result<Option<PathBuf>, PlanError> {
    let mut ws_output = None;
    if let Some(ws) = &ov.workspace {
        let ws = absolute(here, ws);
        // Never a tree of typos (`/typo/ws` created `/typo` as root).
        if let Some(parent) = ws.parent().filter(|p| !p.is_dir()) {
            return Err(PlanError::WorkspaceParent {
                path: ws.clone(),
                parent: parent.to_path_buf(),
            });
        }
        let (scripts, output) = (ws.join("scripts"), ws.join("output"));
        for d in [&scripts, &output] {
            std::fs::create_dir_all(d).map_err(|source| PlanError::Workspace {
                path: d.clone(),
                source,
            })?;
        }
        // Through no link a run may have planted (`resolve::follow`): a run
        // that could write the workspace's parent could have replaced
        // `scripts` with a link to anywhere.
        let canon = |p: &Path| match resolve::follow(p) {
            Ok((c, _)) => Ok(c),
            Err(resolve::FollowError::Io(source)) => Err(PlanError::Workspace {
                path: p.to_path_buf(),
                source,
            }),
            Err(e) => Err(PlanError::Workspace {
                path: p.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            }),
        };
        let (scripts, output) = (canon(&scripts)?, canon(&output)?);
        grants.push(FsGrant {
            opened: Opened::NONE,
            path: scripts,
            access: Access::EXEC,
            origin: Origin::Workspace,
        });
        grants.push(FsGrant {
            opened: Opened::NONE,
            path: output.clone(),
            access: Access::WRITE,
            origin: Origin::Workspace,
        });
        ws_output = Some(output);
    }
    Ok(ws_output)
}

/// The working directory: `--cwd`, the workspace's output, capsule's own
/// when readable, else the private tmp dir, else `/`.
fn cwd(
    ov: &Overrides,
    here: &Path,
    grants: &[FsGrant],
    ws_output: Option<&PathBuf>,
    tmpdir: Option<&PathBuf>,
) -> Result<PathBuf, PlanError> {
    let readable = |p: &Path, grants: &[FsGrant]| {
        grants
            .iter()
            .any(|g| p.starts_with(&g.path) && g.access.read)
    };
    let cwd = if let Some(c) = &ov.cwd {
        let c = std::fs::canonicalize(absolute(here, c)).map_err(|source| PlanError::Cwd {
            path: c.clone(),
            source,
        })?;
        if !readable(&c, grants) {
            return Err(PlanError::CwdNotGranted(c));
        }
        c
    } else if let Some(o) = ws_output {
        o.clone()
    } else if readable(here, grants) {
        here.to_path_buf()
    } else if let Some(t) = tmpdir {
        t.clone()
    } else {
        PathBuf::from("/")
    };
    Ok(cwd)
}

/// `filesystem.system`: its grants, never around a place the run can write.
fn system_grants(
    policy: &crate::policy::Policy,
    grants: &mut Vec<FsGrant>,
) -> Result<(), PlanError> {
    if policy.filesystem.system {
        grants.extend(system::grants());
        // Its read+exec of /usr, /lib... must not cover a place the run can
        // write: a program written there would execute (root can grant
        // /usr/local/x). Refused rather than silently weakened.
        let sys_exec: Vec<PathBuf> = grants
            .iter()
            .filter(|g| g.origin == Origin::System && g.access.exec)
            .filter_map(|g| std::fs::canonicalize(&g.path).ok())
            .collect();
        for (w, o) in super::tools::writable_places(grants) {
            if let Some(x) = sys_exec.iter().find(|x| w.starts_with(x)) {
                return Err(PlanError::ExecOverWrite(format!(
                "{} ({o}) is writable, and filesystem.system grants read+exec of {} around it: a program the \
                 run wrote there could be executed (grant a place outside {} instead)",
                w.display(),
                x.display(),
                x.display()
            )));
            }
        }
    }

    Ok(())
}

/// The command, resolved on the host, and the grants it needs: its files
/// and (with `filesystem.system`) its install prefixes; with what was
/// skipped and why.
fn command(
    policy: &crate::policy::Policy,
    argv: &[String],
    host_path: Option<&str>,
    cwd: &Path,
    home: &Path,
    fallback: Option<&(PathBuf, String)>,
    grants: &mut Vec<FsGrant>,
) -> Result<
    (
        command::ResolvedCommand,
        Vec<String>,
        Vec<credentials::Location>,
    ),
    PlanError,
> {
    // known now: content there adds no prefix (see `command`). It is looked
    // up on the PATH the child gets (the policy's `env.set.PATH`, else
    // capsule's own), as env(1), bubblewrap and Docker do: a program found
    // on another PATH than the child's runs under a name that its own
    // lookups (an interpreter finding its prefix through argv[0] and PATH)
    // resolve to something else.
    let child_path = policy
        .env
        .set
        .get("PATH")
        .map(String::as_str)
        .or(host_path)
        .filter(|p| !p.is_empty());
    let writable: Vec<PathBuf> = grants
        .iter()
        .filter(|g| g.access.write)
        .map(|g| g.path.clone())
        .collect();
    // Every grant of this policy but the system's: content under them may
    // have been written by an earlier run under another policy.
    let granted: Vec<PathBuf> = grants
        .iter()
        .filter(|g| g.origin != Origin::System)
        .map(|g| g.path.clone())
        .collect();
    let ctx = command::Context {
        path_env: child_path.unwrap_or(env::DEFAULT_PATH),
        cwd,
        home,
        writable: &writable,
        granted: &granted,
    };
    // `capsule check` plans without a command.
    let cmd = match argv.first() {
        Some(name) => command::resolve(name, &ctx)
            .map_err(|e| super::notices::command_not_found(e, cwd, fallback))?,
        None => command::ResolvedCommand::default(),
    };
    let mut command_notes = cmd.skipped.clone();
    let creds = credentials::patterns(home, &[]);
    for f in &cmd.files {
        add_command_path(f, false, grants, &writable, &creds, &mut command_notes);
    }
    if policy.filesystem.system {
        for p in &cmd.prefixes {
            add_command_path(p, true, grants, &writable, &creds, &mut command_notes);
        }
        // The interpreters the command may start by name (a Makefile's
        // `python3` from a virtualenv on PATH), granted as the command's own.
        let covered = |d: &Path| {
            grants
                .iter()
                .any(|g| g.access.exec && d.starts_with(&g.path))
        };
        let found = command::path_interpreters(&ctx, covered);
        command_notes.extend(found.skipped.iter().cloned());
        for p in found.files.iter().chain(&found.prefixes) {
            add_command_path(p, true, grants, &writable, &creds, &mut command_notes);
        }
    }
    Ok((cmd, command_notes, creds))
}

/// Grant `a` (a file or prefix of the command) exec, unless a grant covers
/// it already or it may not be granted: then a note says why.
fn add_command_path(
    a: &command::Added,
    prefix: bool,
    grants: &mut Vec<FsGrant>,
    writable: &[PathBuf],
    creds: &[credentials::Location],
    command_notes: &mut Vec<String>,
) {
    if let Some(g) = grants
        .iter()
        .find(|g| g.access.exec && a.path.starts_with(&g.path))
    {
        if !prefix {
            command_notes.push(format!(
                "{} ({}) needs no grant: {} ({}) covers it",
                a.path.display(),
                a.why,
                g.path.display(),
                g.origin
            ));
        }
        return;
    }
    // The checks policy grants get, no credential location, and nothing
    // that holds a place the run can write (exec would cover it).
    let holds_writable = writable.iter().find(|w| w.starts_with(&a.path));
    let refused = validate::check_grant(&a.path, GrantKind::Exec)
        .err()
        .or_else(|| {
            holds_writable.map(|w| {
                format!(
                "it holds {}, which the run can write (a program written there could be executed)",
                w.display()
            )
            })
        })
        .or_else(|| {
            a.path
                .ancestors()
                .any(|p| credentials::is_credential(creds, p))
                .then(|| "it is a credential location".to_string())
        });
    if let Some(why) = refused {
        command_notes.push(format!(
            "{} ({}) is not granted: {why}",
            a.path.display(),
            a.why
        ));
        return;
    }
    grants.push(FsGrant {
        opened: Opened::NONE,
        path: a.path.clone(),
        access: Access::EXEC,
        origin: Origin::Command(a.why.clone()),
    });
}

/// capsule's own directories the run could create (they do not exist yet,
/// beneath a write grant): made now, so that they are carved out.
fn own_dirs(creds: &[credentials::Location], grants: &[FsGrant]) -> Result<(), PlanError> {
    let writable = credentials::strictly_beneath_any(
        grants
            .iter()
            .filter(|g| g.access.write)
            .map(|g| g.path.as_path()),
    );
    match credentials::make_own_dirs(creds, writable)
        .into_iter()
        .next()
    {
        Some((dir, source)) => Err(PlanError::OwnDir { dir, source }),
        None => Ok(()),
    }
}

/// Carve-outs: the policy's, and credential paths beneath a broader grant
/// (`creds`: the credential list the command step made, from which the run's
/// own audit log is added here).
fn carve_outs(
    resolved: &resolve::ResolvedFs,
    ov: &Overrides,
    creds: Vec<credentials::Location>,
    grants: &[FsGrant],
) -> Vec<FsDeny> {
    // Carve-outs: the policy's, and credential paths beneath a broader grant.
    let mut deny: Vec<FsDeny> = resolved
        .deny
        .iter()
        .map(|r| FsDeny {
            path: r.path.clone(),
            origin: Origin::Policy {
                key: r.key.clone(),
                line: r.line,
            },
        })
        .collect();
    let mut extra = Vec::new();
    if let Some(log) = &ov.audit_log {
        extra.push((log.clone(), "capsule's audit log of this run"));
    }
    let creds = credentials::with_extra(creds, &extra);
    // Strictly beneath a grant; a grant naming the path exactly keeps it.
    let beneath = credentials::strictly_beneath_any(grants.iter().map(|g| g.path.as_path()));
    for cred in credentials::existing(&creds, &beneath) {
        if !grants.iter().any(|g| g.path == cred.path) {
            deny.push(FsDeny {
                path: cred.path,
                origin: Origin::Credential(cred.what),
            });
        }
    }
    deny
}

/// The secrets of /etc (those `found` on the host), carved out like the credentials.
fn etc_secrets(grants: &[FsGrant], found: &[credentials::Location], deny: &mut Vec<FsDeny>) {
    // Strictly beneath a grant; a grant naming the path exactly keeps it.
    let beneath = credentials::strictly_beneath_any(grants.iter().map(|g| g.path.as_path()));
    // The secrets of /etc, the same way: a grant of /etc or / (or the
    // system grant of /etc/ssl) never includes them. Inside the view the
    // view covers them instead (`sandbox::fs_for_view`). A secret reached
    // through a linked directory is carved out where it lies (Landlock
    // refuses a deny through a symlink, and grants are canonical).
    for secret in found.iter().filter(|s| beneath(&s.path)).cloned() {
        let path = match (secret.path.parent(), secret.path.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(dir)
                .map(|d| d.join(name))
                .unwrap_or(secret.path),
            _ => secret.path,
        };
        if !beneath(&path)
            || grants.iter().any(|g| g.path == path)
            || deny.iter().any(|d| d.path == path)
        {
            continue;
        }
        // The carve-out lists the directory above the secret, and one this
        // user cannot list (/etc/sssd is 0711 on some hosts) would fail the
        // run: skipped, as the host keeps such a secret from this user
        // itself (its own mode); said in the log if it does not.
        if path.parent().is_none_or(|d| std::fs::read_dir(d).is_err()) {
            if std::fs::File::open(&path).is_ok() {
                tracing::warn!(secret = %path.display(),
                "readable, in a directory this user cannot list: not carved out");
            }
            continue;
        }
        deny.push(FsDeny {
            path,
            origin: Origin::Secret(secret.what),
        });
    }
}

/// An environment refusal of an entry written in the policy file names its
/// place there (`FILE:LINE:COL: env.pass[1]: ...`), as every policy error
/// does; an entry a flag added (`-e`) keeps the plain message.
fn locate_env_error(loaded: &LoadedPolicy, e: PlanError) -> PlanError {
    match e {
        PlanError::Env(e) if loaded.source.is_some() && loaded.lines.contains_key(&e.key) => {
            PlanError::Policy(PolicyError::Invalid {
                at: loaded.position_of(&e.key),
                message: format!("`{}` is refused: {}", e.name, e.why),
                key: e.key,
            })
        }
        e => e,
    }
}

/// The host's /proc, carved out of a grant of `/` like a secret: a read
/// grant of /proc is refused (section 2: every host process's command line
/// and status), and one of `/` must not give it by the back door where the
/// run has no view (the view's /proc is private: there the carve-out is
/// dropped, as the view covers /etc's secrets itself).
fn host_proc(grants: &[FsGrant], deny: &mut Vec<FsDeny>) {
    let proc = Path::new("/proc");
    if grants
        .iter()
        .any(|g| proc.starts_with(&g.path) && g.path != proc)
        && !deny.iter().any(|d| d.path == proc)
    {
        deny.push(FsDeny {
            path: proc.to_path_buf(),
            origin: Origin::Secret("the host's processes"),
        });
    }
}

/// The child's environment, built from nothing (`env`).
fn environment(
    policy: &crate::policy::Policy,
    host_path: Option<&str>,
    ws_output: Option<&PathBuf>,
    tmpdir: Option<&PathBuf>,
    grants: &[FsGrant],
    mounts: &[super::Bind],
) -> Result<Vec<(String, String)>, PlanError> {
    let home_dir = ws_output
        .or(tmpdir)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/nonexistent".to_string());
    let tmp_s = tmpdir.map(|p| p.to_string_lossy().into_owned());
    // A mount's destination is a place in the child too: read-only ones may
    // hold PYTHONPATH (/pack for a pack mounted there), read-write ones not.
    let access: Vec<(PathBuf, Access)> = grants
        .iter()
        .map(|g| (g.path.clone(), g.access))
        .chain(mounts.iter().map(|m| {
            let a = if m.read_only {
                Access::READ
            } else {
                Access::WRITE
            };
            (m.dst.clone(), a)
        }))
        .collect();
    let env = env::build(
        &policy.env,
        host_path,
        &home_dir,
        tmp_s.as_deref(),
        &[],
        &access,
    )?;

    Ok(env)
}

/// Host tools: none may run code or policy the run can write.
fn host_tools(
    loaded: &LoadedPolicy,
    grants: &[FsGrant],
    host_path: Option<&str>,
) -> Result<Option<crate::policy::Tools>, PlanError> {
    let policy = &loaded.policy;
    let mut tools = policy.tools.clone();
    let writable_places = super::tools::writable_places(grants);
    super::tools::check(
        &mut tools,
        &loaded.base_dir,
        &writable_places,
        host_path,
        std::env::var_os("HOME").map(PathBuf::from).as_deref(),
    )
    .map_err(|r| {
        if loaded.source.is_some() && loaded.lines.contains_key(&r.key) {
            PlanError::Located {
                at: loaded.position_of(&r.key),
                inner: Box::new(PlanError::Tool(r)),
            }
        } else {
            PlanError::Tool(r)
        }
    })?;

    Ok(tools)
}

fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

//! `capsule man`: the man page (roff) on stdout, or with `--dir DIR` one page
//! per command (capsule.1, capsule-exec.1, ...) written into DIR.
//!
//! Read it with `capsule man | man -l -`. Besides clap's NAME, SYNOPSIS,
//! DESCRIPTION, OPTIONS and SUBCOMMANDS, `capsule.1` and `capsule-exec.1`
//! carry EXAMPLES, EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO. No page
//! names one that is not shipped (`capsule help` has no page: it is left out).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory};

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write capsule.1 and a page per subcommand (capsule-exec.1, ...) into DIR instead.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The sections clap does not write, in roff.
const EXTRA: &str = r#".SH EXAMPLES
.TP
\fBcapsule doctor\fR
What this kernel gives: Landlock ABI, seccomp, namespaces, cgroups, the proxy.
.TP
\fBcd project && capsule exec \-\- python3 agent.py\fR
Without \fB\-\-policy\fR: the system directories, a private /tmp, no network, and the current directory read\-only as the working directory (never \fB/\fR, your home or the temp directory: then the run says so on stderr).
.TP
\fBcapsule exec \-\-allow\-read . \-\-allow\-write ./out \-\-timeout 10 \-\- make test\fR
Grants on the command line (each path must exist: \fBmkdir out\fR first), a wall\-clock limit (exit 124 when it strikes).
.TP
\fBcapsule exec \-\-net proxy \-\-allow\-host pypi.org \-\-allow\-host files.pythonhosted.org \-\-allow\-write . \-\- pip download requests\fR
Network only through capsule's filtering proxy, to the hosts named; the current directory writable for the download (read\-only without \fB\-\-allow\-write .\fR).
.TP
\fBcapsule exec \-e CI=true \-e LANG \-\- /usr/bin/env\fR
Set a variable, or pass the host's by name (the same refusals as \fBenv.set\fR/\fBenv.pass\fR).
.TP
\fBcapsule policy init python\-agent > agent.yaml && capsule check \-p agent.yaml\fR
Start from a shipped policy (python\-agent, ci\-build, read\-only\-review) and see what this kernel will enforce.
.TP
\fBcapsule exec \-p agent.yaml \-\-json \-\- python3 agent.py\fR
One JSON result object on stdout (exit code, output, what was enforced, what was refused).
.TP
\fBcapsule exec \-p agent.yaml \-\-dry\-run \-\- python3 agent.py\fR
The resolved plan: every grant with the layer that enforces it and where it comes from; nothing runs.
.SH "EXIT STATUS"
.TP
\fIthe command's own\fR
It ran and exited (output cut at the byte limit does not change it: capsule says so on stderr).
.TP
124
The wall\-clock limit killed it (SIGTERM, 1 s grace, SIGKILL of the whole tree).
.TP
125
capsule refused or failed and nothing ran: a bad policy or argument, a protection this kernel cannot enforce (unless \fB\-\-best\-effort\fR), an invalid \fB\-\-agent\-id\fR.
.TP
126
The command exists but cannot be executed, including an exec the sandbox denies.
.TP
127
The command was not found.
.TP
128+N
Signal N ended it, or capsule received SIGINT, SIGTERM, SIGHUP or SIGQUIT, forwarded it and ended the run.
.PP
\fBcheck\fR exits 0 or 125; \fBdoctor\fR 0, or 1 when this kernel cannot run capsule's default policy.
.SH ENVIRONMENT
.TP
\fBHOME\fR, \fBXDG_STATE_HOME\fR, \fBXDG_DATA_HOME\fR, \fBXDG_CONFIG_HOME\fR
Where the audit log, the volumes and the host's LLM configuration are (FILES). None of them reaches the child, whose environment is built from nothing: PATH, HOME and TMPDIR of its own, LANG, and what the policy's \fBenv\fR or \fB\-e\fR names.
.TP
\fBTMPDIR\fR
Where each run's private temporary directory is made (default /tmp).
.TP
\fBCAPSULE_LLM_*\fR
Override the host's LLM configuration; the key stays in capsule, never in the sandbox.
.TP
\fBCAPSULE_NO_NAMESPACES=1\fR
Behave as on a host without user namespaces (no view; the fallback layers), for testing that path.
.TP
\fBCAPSULE_NO_CGROUPS=1\fR, \fBCAPSULE_NO_SYSTEMD_SCOPE=1\fR
Make no cgroup and ask systemd for none; or only skip asking systemd for a delegated scope.
.TP
\fBCAPSULE_LANDLOCK_ABI_MAX=N\fR
Use Landlock ABI N at most, to plan and enforce as an older kernel would.
.TP
\fBRUST_LOG\fR
Log filter for capsule's own messages on stderr (as \fB\-v\fR, \fB\-vv\fR).
.SH FILES
.TP
\fI$XDG_STATE_HOME/capsule/audit.jsonl\fR (default \fI~/.local/state/capsule/audit.jsonl\fR)
The audit log: one JSON line per run (\fB\-\-audit\-log\fR, \fB\-\-no\-audit\fR). Never readable by a run.
.TP
\fI$XDG_DATA_HOME/capsule/volumes/NAME\fR (default \fI~/.local/share/capsule/volumes\fR)
Named volumes (\fBcapsule volume\fR), usable as \fB\-\-mount volume:NAME:DST\fR.
.TP
\fI$XDG_CONFIG_HOME/capsule/config.yaml\fR (default \fI~/.config/capsule/config.yaml\fR)
The host's LLM provider and ceiling, read only when a policy enables \fBllm_access\fR.
.TP
\fIshare/man/man1/capsule*.1\fR, \fIshare/bash\-completion/completions/capsule\fR, \fIshare/zsh/site\-functions/_capsule\fR, \fIshare/fish/vendor_completions.d/capsule.fish\fR
Installed beside \fIbin/capsule\fR by the wheel. Bash loads the completions when bash\-completion is installed and the environment's \fIbin\fR is on PATH; otherwise \fBsource <(capsule completions bash)\fR in \fI~/.bashrc\fR.
.SH "SEE ALSO"
\fBcapsule\-exec\fR(1), \fBcapsule\-serve\fR(1), \fBcapsule\-check\fR(1), \fBcapsule\-doctor\fR(1), \fBcapsule\-policy\fR(1), \fBcapsule\-volume\fR(1), \fBlandlock\fR(7), \fBseccomp\fR(2), \fBtimeout\fR(1), \fBbwrap\fR(1)
"#;

/// One page: clap's sections (without the `help` subcommand) and, for the
/// main page and `exec`'s, the extra sections.
fn render(cmd: clap::Command, extra: bool, w: &mut dyn Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if extra {
        w.write_all(EXTRA.as_bytes())?;
    }
    if cmd.get_version().is_some() {
        // `--version` is several lines (commit, target, Landlock, seccomp):
        // kept as lines, not filled into one.
        let mut v = Vec::new();
        man.render_version_section(&mut v)?;
        let v = String::from_utf8_lossy(&v);
        match v.split_once(".SH VERSION\n") {
            Some((head, body)) => write!(w, "{head}.SH VERSION\n.nf\n{}\n.fi\n", body.trim_end())?,
            None => w.write_all(v.as_bytes())?,
        }
    }
    Ok(())
}

fn write_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let extra = name == "capsule" || name == "capsule-exec";
    let mut f = std::fs::File::create(dir.join(format!("{name}.1")))?;
    render(cmd.clone(), extra, &mut f)?;
    f.flush()
}

fn command() -> clap::Command {
    let mut cmd = super::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

pub fn run(a: ManArgs) -> i32 {
    let cmd = command();
    let done = match &a.dir {
        None => render(cmd, true, &mut std::io::stdout().lock()),
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| write_pages(&cmd, dir)),
    };
    match done {
        Ok(()) => 0,
        Err(e) => {
            let place = a
                .dir
                .as_ref()
                .map_or("stdout".into(), |d| d.display().to_string());
            super::error_line(format!("man: cannot write the man page to {place}: {e}"));
            1
        }
    }
}

//! The `capsule` command line (contract section 1).
//!
//! Each subcommand lives in its own file; every typed error is turned into
//! one clear line on stderr (`capsule: ...`) and an exit status here, at the
//! edge. Logs go through `tracing` (`-v`, `-vv`, or `RUST_LOG`).

mod check;
mod completions;
mod doctor;
mod exec;
mod explain;
mod learn;
mod man;
mod policy_cmd;
mod report;
mod rpc_cmd;
mod schema;
mod serve;
mod version;
mod volume;
mod why;

use clap::{Parser, Subcommand};

/// A kernel-native capability sandbox for AI agents and CI jobs.
#[derive(Debug, Parser)]
#[command(
    name = "capsule",
    version = version::short(),
    long_version = version::long(),
    about,
    propagate_version = true
)]
pub(crate) struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG also works.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
enum Command {
    /// Run COMMAND confined by a policy.
    Exec(exec::ExecArgs),
    /// A long-lived parent: one `exec` per request line (JSON on stdin/stdout), each in a fresh process.
    #[command(long_about = serve::LONG_ABOUT)]
    Serve(serve::ServeArgs),
    /// Validate a policy and show what this kernel will enforce (exit 0 or 125).
    Check(check::CheckArgs),
    /// Would the policy allow an access here? Verdict, layer, key, and the change that would allow it.
    Why(why::WhyArgs),
    /// Run COMMAND confined, watch what it was refused, and write a draft policy that lets it run.
    #[command(long_about = learn::LONG_ABOUT)]
    Learn(learn::LearnArgs),
    /// Report Landlock ABI, seccomp, user namespaces, cgroups, proxy support.
    Doctor(doctor::DoctorArgs),
    /// Policy helpers: the JSON Schema and starter policies.
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCmd),
    /// Inside a sandbox: call the parent's RPC broker (METHOD and JSON params).
    Rpc(rpc_cmd::RpcArgs),
    /// Print the JSON Schema of a policy, the `--json` result or an audit record.
    Schema(schema::SchemaArgs),
    /// Named directories capsule owns, usable as mount sources (like `docker volume`).
    #[command(subcommand)]
    Volume(volume::VolumeCmd),
    /// Print the shell completion script for SHELL.
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff).
    Man(man::ManArgs),
}

/// Entry point of the binary; returns the process exit status.
pub fn main() -> i32 {
    crate::sys::ensure_std_fds();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => crate::result::exit::REFUSED,
            };
            let _ = e.print();
            if code != 0 {
                exec_usage_refusal(&e, &argv, &|| {});
            }
            return code;
        }
    };
    init_logging(cli.verbose);
    if !matches!(&cli.command, Command::Exec(a) if !a.dry_run)
        && !matches!(cli.command, Command::Serve(_))
    {
        crate::sys::default_sigpipe();
    }
    match cli.command {
        Command::Exec(a) => exec::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Check(a) => check::run(a),
        Command::Why(a) => why::run(a),
        Command::Learn(a) => learn::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Policy(c) => policy_cmd::run(c),
        Command::Rpc(a) => rpc_cmd::run(a),
        Command::Schema(a) => schema::run(a),
        Command::Volume(c) => volume::run(c),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => man::run(a),
    }
}

/// One step of `capsule serve`, in its own forked process: exactly
/// `capsule exec ARGS` (the same parsing, refusals, planning, run, result
/// and audit record), with the request's policy text when it gave one.
/// `cli` is [`cli_command`], built once by the server before it forks (the
/// same parser `capsule exec` uses; building it is most of clap's cost).
/// `json_mode` is called when that parsing finds `--json`, before the run.
pub(crate) fn exec_step(
    cli: &mut clap::Command,
    args: &[String],
    policy_text: Option<String>,
    json_mode: &dyn Fn(),
) -> i32 {
    use clap::FromArgMatches;
    let argv: Vec<std::ffi::OsString> = ["capsule", "exec"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned())
        .map(std::ffi::OsString::from)
        .collect();
    let parsed = match cli.try_get_matches_from_mut(&argv) {
        Ok(mut m) => Cli::from_arg_matches_mut(&mut m).map_err(|e| e.format(cli)),
        Err(e) => Err(e),
    };
    match parsed {
        Ok(Cli {
            command: Command::Exec(mut a),
            ..
        }) => {
            a.policy_text = policy_text;
            if a.json {
                // Before anything is written: the server then keeps the
                // result line whole.
                json_mode();
            }
            exec::run(a)
        }
        Ok(_) => crate::result::exit::REFUSED,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => crate::result::exit::REFUSED,
            };
            let _ = e.print();
            if code != 0 {
                exec_usage_refusal(&e, &argv, json_mode);
            }
            code
        }
    }
}

/// capsule's whole command-line parser, built (for `capsule serve`, once).
pub(crate) fn cli_command() -> clap::Command {
    use clap::CommandFactory;
    let mut c = Cli::command();
    c.build();
    c
}

/// `capsule exec` with unusable arguments is a refusal like any other: it
/// is audited, and with `--json` it prints one result object.
/// `json_mode` is called before that object is written (no run follows: it
/// is the step's only output).
fn exec_usage_refusal(e: &clap::Error, argv: &[std::ffi::OsString], json_mode: &dyn Fn()) {
    let args: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .collect();
    if args.first().map(String::as_str) != Some("exec") {
        return;
    }
    let value_of = |flag: &str| -> Option<String> {
        let eq = format!("{flag}=");
        args.iter().enumerate().find_map(|(i, a)| {
            if a == flag {
                args.get(i + 1).cloned()
            } else {
                a.strip_prefix(&eq).map(str::to_string)
            }
        })
    };
    let detail = e.to_string();
    let first = detail
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    let r = crate::result::RunResult::not_run(
        exec::new_run_id(),
        crate::result::Termination::Refused,
        crate::result::exit::REFUSED,
        first,
    );
    let dest = (!args.iter().any(|a| a == "--no-audit")).then(|| {
        crate::audit::Dest::of(
            value_of("--audit-log")
                .map(std::path::PathBuf::from)
                .as_deref(),
        )
    });
    exec::write_audit(
        dest.as_ref(),
        &r,
        value_of("--agent-id").as_deref(),
        crate::result::Reason::UsageError,
    );
    if args.iter().any(|a| a == "--json") {
        json_mode();
        let _ = r.write_json_line(std::io::stdout().lock());
    }
}

fn init_logging(verbose: u8) {
    let env = std::env::var("RUST_LOG").ok();
    if verbose == 0 && env.is_none() {
        return;
    }
    let default = match verbose {
        0 => "warn",
        1 => "capsule=info",
        _ => "capsule=debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_new(env.as_deref().unwrap_or(default))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A closed stderr loses log lines, never the run (issue 37).
        .with_writer(|| crate::sys::stdio::SoftStderr)
        .log_internal_errors(false)
        .with_target(false)
        .try_init();
}

/// Print one error line for the user.
pub(crate) fn error_line(msg: impl std::fmt::Display) {
    crate::say!("capsule: {msg}");
}

//! Run one host process for a tool: its own process group, JSON on stdin,
//! bounded stdout/stderr, a timeout, and the whole group killed at the end
//! (at expiry, on error, or when the request is dropped).

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// Host variables a tool process inherits; nothing else (in particular no
/// provider key) reaches a tool, whose output goes back to the sandbox.
const PASSED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
];

/// What a nested `capsule exec` (a tool with `policy:`) also gets, so that it
/// reads the same host configuration as this capsule: the config directory
/// and the CAPSULE_LLM_* overrides. Not the provider key: a tool's own
/// sandbox must not spend LLM calls outside this run's caps.
pub const NESTED_CAPSULE_ENV: &[&str] = &[
    "XDG_CONFIG_HOME",
    "CAPSULE_LLM_PROVIDER",
    "CAPSULE_LLM_BASE_URL",
    "CAPSULE_LLM_MODEL",
    "CAPSULE_LLM_API_KEY_ENV",
];

/// stderr kept for an error message; the rest is drained and dropped.
const MAX_STDERR: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("did not finish within {0:?}")]
    Timeout(Duration),
    #[error("wrote more than {0} bytes to stdout")]
    OutputTooLarge(usize),
    #[error("i/o with the tool process: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug)]
pub struct ProcessOutput {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Kills the process group when dropped (request aborted, timeout, done).
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (group already empty) is the normal case after a clean exit.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Run `argv` in `cwd` with `input` on stdin. The environment is
/// [`PASSED_ENV`] plus `extra_env`, each copied from capsule's own when set.
pub async fn run(
    argv: &[String],
    cwd: &Path,
    input: &[u8],
    timeout: Duration,
    max_stdout: usize,
    extra_env: &[&str],
) -> Result<ProcessOutput, ProcessError> {
    let (program, args) = argv.split_first().ok_or_else(|| ProcessError::Spawn {
        program: String::new(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
    })?;
    let program_path = resolve_program(program, cwd);
    let mut cmd = Command::new(&program_path);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for k in PASSED_ENV.iter().chain(extra_env) {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().map_err(|source| ProcessError::Spawn {
        program: program.clone(),
        source,
    })?;
    let guard = GroupGuard(
        child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw),
    );
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();

    let work = async {
        let feed = async move {
            if let Some(mut s) = stdin {
                // A tool that ignores stdin closes the pipe early: not an error.
                let _ = s.write_all(input).await;
                let _ = s.shutdown().await;
            }
            Ok::<(), ProcessError>(())
        };
        let out = async {
            match stdout {
                Some(r) => read_bounded(r, max_stdout).await,
                None => Ok(Vec::new()),
            }
        };
        let err = async {
            match stderr {
                Some(r) => Ok(read_keep_prefix(r, MAX_STDERR).await),
                None => Ok(Vec::new()),
            }
        };
        let ((), stdout, stderr) = tokio::try_join!(feed, out, err)?;
        let status = child.wait().await?;
        Ok::<_, ProcessError>(ProcessOutput {
            status,
            stdout,
            stderr,
        })
    };
    let result = match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(ProcessError::Timeout(timeout)),
    };
    // Kill whatever is left of the group (grandchildren, or everything on
    // timeout/overflow), then reap the leader.
    drop(guard);
    let _ = child.start_kill();
    let _ = child.wait().await;
    result
}

/// A relative program path with a slash resolves against `cwd` (the policy's
/// directory); a bare name is looked up on PATH by the OS.
fn resolve_program(program: &str, cwd: &Path) -> std::path::PathBuf {
    let p = Path::new(program);
    if p.is_relative() && program.contains('/') {
        cwd.join(p)
    } else {
        p.to_path_buf()
    }
}

async fn read_bounded<R: AsyncRead + Unpin>(mut r: R, max: usize) -> Result<Vec<u8>, ProcessError> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok(buf);
        }
        if buf.len() + n > max {
            return Err(ProcessError::OutputTooLarge(max));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn read_keep_prefix<R: AsyncRead + Unpin>(mut r: R, max: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 8 * 1024];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return buf,
            Ok(n) => {
                let room = max.saturating_sub(buf.len()).min(n);
                buf.extend_from_slice(&chunk[..room]);
            }
        }
    }
}

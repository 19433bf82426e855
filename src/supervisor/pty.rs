//! The user's terminal: the child never holds it.
//!
//! When capsule's stdin or stdout is a terminal (and neither `--json` nor
//! `--no-tty`), the child gets a pseudo-terminal of its own, as `ssh -t` or
//! `script` give one: capsule keeps the master, the slave is the child's
//! controlling terminal and, per descriptor, its stdio:
//! * fd 0 is the slave when capsule's stdin is a terminal (else capsule's
//!   stdin as for pipes: an anonymous pipe inherited, `data | capsule exec
//!   -- cmd`, anything else relayed through a pipe, see [`file_stdin`]);
//! * fds 1 and 2 are the slave when capsule's stdout is a terminal (else the
//!   capture pipes). There stderr merges into stdout, as with `ssh -t`: the
//!   pty has one output stream, which goes to capsule's stdout and counts as
//!   stdout towards `max_output_bytes`. When only stdin is a terminal, the
//!   pty's output (the echo of what the user types, and what the child
//!   writes to /dev/tty) goes to capsule's stderr and counts as stderr.
//!
//! While the run lasts, the user's terminal (capsule's stdin) is in raw
//! mode: every key, ^C and ^Z included, is passed to the child's terminal,
//! whose own line discipline and signals apply inside the run. Window-size
//! changes (SIGWINCH to capsule) are copied onto the pty; the kernel then
//! signals the child. The user's settings come back: on every exit path
//! (a guard), at once when capsule gets SIGTERM or SIGHUP (the run may go
//! on for its grace period), and, if capsule dies without doing it (even
//! SIGKILL), from a watchdog process (`sys::term`).
//!
//! Whatever the child does to its terminal (stty raw -echo, a new window
//! size, input pushed with TIOCSTI were it allowed) stays on the pty.
//!
//! Started in the background of the user's shell, capsule leaves the
//! terminal's modes alone (changing them would stop it with SIGTTOU): the
//! child still gets the pty and its output, but no keyboard.
//!
//! With `--json` or `--no-tty`, output stays on the capture pipes; when
//! capsule's stdin is a terminal there, the child reads it through a pipe
//! that capsule fills while it is in the foreground (the terminal keeps the
//! user's settings: cooked, line by line), never the terminal itself.
//!
//! Known limits: a capsule stopped from outside (SIGSTOP, or SIGTSTP, which
//! it does not catch) leaves the terminal raw until it is continued; one
//! started in the background does not take the keyboard when brought to the
//! foreground later. (^Z typed on the keyboard goes to the child's terminal,
//! where the command, leading an orphaned process group, is not stopped.)

use std::io::IsTerminal;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::termios::{self, SetArg, SpecialCharacterIndices};
use thiserror::Error;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;

use super::capture::{Captured, Sink, TRUNCATION_MARKER};
use crate::sandbox::child::ChildSpec;
use crate::sys::stdio::{self, Own};
use crate::sys::term;

#[derive(Debug, Error)]
pub enum PtyError {
    #[error(
        "cannot give the run a pseudo-terminal ({what}: {errno}); \
         run with --no-tty to use pipes instead"
    )]
    Pty { what: &'static str, errno: Errno },
    #[error("cannot relay capsule's terminal stdin through a pipe: {0}")]
    StdinPipe(Errno),
}

fn pty_err(what: &'static str) -> impl Fn(Errno) -> PtyError {
    move |errno| PtyError::Pty { what, errno }
}

/// How the child's stdio relates to the user's terminal.
pub enum Terminal {
    /// capsule's stdin is not a terminal and no pty is wanted: as before.
    Plain,
    /// capsule's stdin is a terminal but no pty is wanted (`--json`,
    /// `--no-tty`), or it is a file, device or socket (see [`file_stdin`]): the
    /// child reads it through this pipe.
    StdinPipe {
        child_end: Option<OwnedFd>,
        ours: Option<OwnedFd>,
        terminal: bool,
    },
    /// The run's own pseudo-terminal.
    Pty(Pty),
}

pub struct Pty {
    master: OwnedFd,
    slave: Option<OwnedFd>,
    /// The slave is the child's stdin (capsule's stdin is a terminal).
    stdin: bool,
    /// Else, capsule's stdin when it is a file or device, through a pipe
    /// (the child's end, and ours to fill; see [`file_stdin`]).
    stdin_pipe: Option<(Option<OwnedFd>, Option<OwnedFd>)>,
    /// The slave is the child's stdout and stderr (capsule's stdout is a terminal).
    stdout: bool,
    /// The user's terminal whose size the pty follows.
    size_source: OwnedFd,
    /// The user's terminal in raw mode (when the keyboard is relayed).
    host: Option<Arc<HostTerminal>>,
}

impl Terminal {
    /// Decide from capsule's own stdio and flags, and prepare: open the pty,
    /// copy the user's settings and window size onto it, switch the user's
    /// terminal to raw mode. Call before the run's child exists (the
    /// terminal watchdog must be a child capsule had before the run).
    pub fn open(json: bool, no_tty: bool) -> Result<Terminal, PtyError> {
        let in_tty = std::io::stdin().is_terminal();
        let out_tty = std::io::stdout().is_terminal();
        if json || no_tty || !(in_tty || out_tty) {
            if !in_tty {
                return Ok(match file_stdin()? {
                    Some((r, w)) => Terminal::StdinPipe {
                        child_end: Some(r),
                        ours: w,
                        terminal: false,
                    },
                    None => Terminal::Plain,
                });
            }
            let (r, w) =
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(PtyError::StdinPipe)?;
            return Ok(Terminal::StdinPipe {
                child_end: Some(r),
                ours: Some(w),
                terminal: true,
            });
        }
        let stdin_pipe = if in_tty {
            None
        } else {
            file_stdin()?.map(|(r, w)| (Some(r), w))
        };
        let user = if in_tty {
            std::io::stdin().as_fd().try_clone_to_owned()
        } else {
            std::io::stdout().as_fd().try_clone_to_owned()
        }
        .map_err(|e| PtyError::Pty {
            what: "dup of the terminal",
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
        })?;
        let (master, slave) = term::open_pty().map_err(pty_err("opening /dev/ptmx"))?;
        // The child starts with the user's settings (erase key, speed...) and size.
        let settings = termios::tcgetattr(&user).map_err(pty_err("reading the terminal"))?;
        termios::tcsetattr(&slave, SetArg::TCSANOW, &settings)
            .map_err(pty_err("setting up the pty"))?;
        if let Ok(ws) = term::window_size(user.as_fd()) {
            let _ = term::set_window_size(master.as_fd(), &ws);
        }
        // A job in the background of the user's shell leaves the terminal
        // alone (changing its modes would stop capsule with SIGTTOU, as it
        // stops any terminal program there): the child still gets the pty,
        // but no keyboard.
        let host = if in_tty && term::in_foreground(user.as_fd()) {
            Some(HostTerminal::enter_raw(&user, settings)?)
        } else {
            None
        };
        Ok(Terminal::Pty(Pty {
            master,
            slave: Some(slave),
            stdin: in_tty,
            stdin_pipe,
            stdout: out_tty,
            size_source: user,
            host,
        }))
    }

    /// With a pty, the child gets the user's `TERM` (as `ssh -t` sends it),
    /// unless the policy already set one: full-screen programs need it.
    pub fn add_env(&self, env: &mut Vec<(String, String)>) {
        if !matches!(self, Terminal::Pty(_)) || env.iter().any(|(k, _)| k == "TERM") {
            return;
        }
        if let Ok(t) = std::env::var("TERM") {
            let sane = !t.is_empty()
                && t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b));
            if sane {
                env.push(("TERM".into(), t));
            }
        }
    }

    /// Point the child's stdio (and controlling terminal) at the pty or the
    /// stdin pipe. The descriptors stay valid until [`close_child_ends`].
    pub fn apply(&self, spec: &mut ChildSpec) {
        match self {
            Terminal::Plain => {}
            Terminal::StdinPipe { child_end, .. } => {
                spec.stdin_r = child_end.as_ref().map(AsRawFd::as_raw_fd);
            }
            Terminal::Pty(p) => {
                let Some(slave) = p.slave.as_ref().map(AsRawFd::as_raw_fd) else {
                    return;
                };
                spec.ctty = Some(slave);
                if p.stdin {
                    spec.stdin_r = Some(slave);
                } else if let Some((Some(r), _)) = &p.stdin_pipe {
                    spec.stdin_r = Some(r.as_raw_fd());
                }
                if p.stdout {
                    spec.stdout_w = Some(slave);
                    spec.stderr_w = Some(slave);
                }
            }
        }
    }

    /// The supervisor's copies of the child's ends go once the child has its
    /// own: end-of-file (EIO on the master) must mean the run is gone.
    pub fn close_child_ends(&mut self) {
        match self {
            Terminal::Plain => {}
            Terminal::StdinPipe { child_end, .. } => drop(child_end.take()),
            Terminal::Pty(p) => {
                drop(p.slave.take());
                if let Some((r, _)) = &mut p.stdin_pipe {
                    drop(r.take());
                }
            }
        }
    }

    /// Start relaying (inside the supervisor's runtime).
    pub fn start(self, limit: u64) -> Relay {
        let mut relay = Relay {
            output: None,
            run_over: Arc::new(AtomicBool::new(false)),
            others: Vec::new(),
            host: None,
        };
        match self {
            Terminal::Plain => {}
            Terminal::StdinPipe { ours, terminal, .. } => {
                if let Some(w) = ours {
                    feed_stdin_pipe(w, terminal);
                }
            }
            Terminal::Pty(mut p) => {
                if let Some((_, Some(w))) = p.stdin_pipe.take() {
                    feed_stdin_pipe(w, false);
                }
                let master = match term::async_fd_rw(p.master) {
                    Ok(m) => Arc::new(m),
                    Err(e) => {
                        tracing::warn!("cannot watch the pty: {e}");
                        return relay;
                    }
                };
                let sink = if p.stdout { Sink::Stdout } else { Sink::Stderr };
                // Set when capsule's own stream went away (see `pump`): every
                // task lets go of the master, whose last close hangs up the run's pty.
                let (gone_tx, gone) = tokio::sync::watch::channel(false);
                relay.output = Some((
                    sink,
                    tokio::spawn(pump(
                        master.clone(),
                        sink,
                        limit,
                        relay.run_over.clone(),
                        gone_tx,
                    )),
                ));
                relay.others.push(tokio::spawn(until_gone(
                    follow_size(p.size_source, master.clone()),
                    gone.clone(),
                )));
                if let Some(host) = &p.host {
                    match host.tty.try_clone().map(term::watch_tty) {
                        Ok(Ok(keys)) => relay
                            .others
                            .push(tokio::spawn(until_gone(keys_in(keys, master), gone))),
                        Ok(Err(e)) | Err(e) => tracing::warn!("cannot relay the keyboard: {e}"),
                    }
                    relay
                        .others
                        .push(tokio::spawn(restore_on_signal(host.clone())));
                }
                relay.host = p.host;
            }
        }
        relay
    }
}

/// The relay tasks of a run.
pub struct Relay {
    output: Option<(Sink, JoinHandle<Captured>)>,
    /// Set once the run is gone: from then on EIO on the master is the end.
    run_over: Arc<AtomicBool>,
    others: Vec<JoinHandle<()>>,
    host: Option<Arc<HostTerminal>>,
}

impl Relay {
    /// After the child is gone: drain the pty's output (bounded by `drain`),
    /// stop relaying, give the user's terminal back, and count the pty's
    /// output into the stream it went to.
    pub async fn finish(self, drain: Duration, stdout: &mut Captured, stderr: &mut Captured) {
        self.run_over.store(true, Ordering::SeqCst);
        for t in &self.others {
            t.abort();
        }
        if let Some((sink, task)) = self.output {
            let got = tokio::time::timeout(drain, task)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            let into = if sink == Sink::Stdout { stdout } else { stderr };
            into.total += got.total;
            into.truncated |= got.truncated;
            into.closed |= got.closed;
        }
        if let Some(h) = self.host {
            h.restore();
        }
    }
}

/// The user's terminal, switched to raw mode for the run and restored once.
pub struct HostTerminal {
    tty: OwnedFd,
    saved: libc::termios,
    restored: AtomicBool,
    watchdog: Mutex<Option<OwnedFd>>,
}

impl HostTerminal {
    fn enter_raw(tty: &OwnedFd, saved: termios::Termios) -> Result<Arc<HostTerminal>, PtyError> {
        let tty = tty.try_clone().map_err(|e| PtyError::Pty {
            what: "dup of the terminal",
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
        })?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        // Reads of the terminal return at once, with or without input: the
        // relay never blocks on it, and capsule need not set O_NONBLOCK on
        // an open file description it shares with the user's shell.
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 0;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        let saved_raw: libc::termios = saved.into();
        let watchdog = match term::spawn_terminal_watchdog(tty.as_fd(), saved_raw) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(
                    "no terminal watchdog ({e}): if capsule is SIGKILLed, run `stty sane`"
                );
                None
            }
        };
        let host = Arc::new(HostTerminal {
            tty,
            saved: saved_raw,
            restored: AtomicBool::new(false),
            watchdog: Mutex::new(watchdog),
        });
        termios::tcsetattr(&host.tty, SetArg::TCSANOW, &raw)
            .map_err(pty_err("switching the terminal to raw mode"))?;
        Ok(host)
    }

    /// Put the user's settings back (once; later calls do nothing).
    pub fn restore(&self) {
        if self.restored.swap(true, Ordering::SeqCst) {
            return;
        }
        let saved = termios::Termios::from(self.saved);
        if let Err(e) = termios::tcsetattr(&self.tty, SetArg::TCSANOW, &saved) {
            tracing::warn!("could not restore the terminal's settings: {e}");
        }
        if let Some(w) = self.watchdog.lock().ok().and_then(|mut w| w.take()) {
            term::dismiss_terminal_watchdog(w);
        }
    }
}

impl Drop for HostTerminal {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The pty's output to capsule's stdout or stderr, counted as that stream:
/// at most `limit` bytes pass, then the truncation marker, and the rest is
/// read and dropped so the child never blocks. Ends when no process of the
/// run holds the slave any more (EIO), or when capsule's own stream goes
/// away (its terminal hung up, its reader gone: EIO, EPIPE): then, as a
/// terminal that closes does to its session, the run's pty is hung up (the
/// master's last close: SIGHUP to the run's session, EIO on its writes),
/// rather than read on into nothing until the wall-clock limit.
async fn pump(
    master: Arc<AsyncFd<OwnedFd>>,
    sink: Sink,
    limit: u64,
    run_over: Arc<AtomicBool>,
    gone_tx: tokio::sync::watch::Sender<bool>,
) -> Captured {
    let mut out = Captured::default();
    let mut gone = gone_tx.subscribe();
    // A pty hands out a few KiB per read; one write to capsule's stdout per
    // read (a round trip to tokio's blocking pool each) held the child to
    // about 2 MB/s. The writer task batches whatever has piled up meanwhile,
    // while this loop goes on draining the pty.
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(32);
    let writer = tokio::spawn(write_out(rx, sink, gone_tx));
    let mut buf = vec![0u8; 64 * 1024];
    let mut kept: u64 = 0;
    loop {
        let read = tokio::select! {
            r = master.async_io(Interest::READABLE, |fd| {
                nix::unistd::read(fd, &mut buf).map_err(std::io::Error::from)
            }) => r,
            _ = until_set(&mut gone) => {
                out.closed = true;
                break;
            }
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // EIO: no process holds the slave now. The end once the run is
            // gone; before, the child may still open /dev/tty again.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                if run_over.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(_) => break,
        };
        out.total += n as u64;
        if out.truncated {
            continue;
        }
        let take = n.min(limit.saturating_sub(kept) as usize);
        kept += take as u64;
        if take > 0 {
            let _ = tx.send(buf[..take].to_vec()).await;
        }
        if take < n {
            out.truncated = true;
            // A terminal stream: carriage returns too (the user's terminal may be raw).
            let marker = TRUNCATION_MARKER.replace('\n', "\r\n");
            let _ = tx.send(marker.into_bytes()).await;
        }
    }
    drop(tx);
    let _ = writer.await;
    out
}

/// Resolves once `gone` is set; never when its sender is dropped unset.
async fn until_set(gone: &mut tokio::sync::watch::Receiver<bool>) {
    if gone.wait_for(|g| *g).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Run `task` until capsule's own output stream is gone (see [`pump`]).
async fn until_gone(
    task: impl std::future::Future<Output = ()>,
    mut gone: tokio::sync::watch::Receiver<bool>,
) {
    tokio::select! {
        _ = task => {}
        _ = until_set(&mut gone) => {}
    }
}

/// Write the pty's output to capsule's stdout or stderr, in batches of what
/// has arrived. When capsule's stream is gone (EPIPE, or EIO from a terminal
/// that hung up), say so on `gone`; after any failure, keep taking chunks so
/// the reading side never blocks.
async fn write_out(
    mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    sink: Sink,
    gone: tokio::sync::watch::Sender<bool>,
) {
    let to = match sink {
        Sink::Stderr => Own::Stderr,
        _ => Own::Stdout,
    };
    let mut ok = true;
    while let Some(mut batch) = rx.recv().await {
        while batch.len() < (1 << 20) {
            match rx.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if !ok {
            continue;
        }
        let written = tokio::task::spawn_blocking(move || stdio::write_all(to, &batch))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = written {
            ok = false;
            if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::EIO)) {
                let _ = gone.send(true);
            } else {
                tracing::debug!("capsule's own {to:?} failed: {e}; the run's output is dropped");
            }
        }
    }
}

/// Keys from the user's terminal (raw, VMIN=0) to the pty.
async fn keys_in(keys: AsyncFd<OwnedFd>, master: Arc<AsyncFd<OwnedFd>>) {
    let mut buf = [0u8; 4096];
    loop {
        let n = match keys
            .async_io(Interest::READABLE, |fd| {
                match nix::unistd::read(fd, &mut buf) {
                    // VMIN=0: nothing to read (or a hangup, which SIGHUP reports).
                    Ok(0) => Err(std::io::ErrorKind::WouldBlock.into()),
                    r => r.map_err(std::io::Error::from),
                }
            })
            .await
        {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let mut data = &buf[..n];
        while !data.is_empty() {
            match master
                .async_io(Interest::WRITABLE, |fd| {
                    nix::unistd::write(fd, data).map_err(std::io::Error::from)
                })
                .await
            {
                Ok(w) => data = &data[w..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }
}

/// SIGWINCH to capsule: copy the user's window size onto the pty.
async fn follow_size(source: OwnedFd, master: Arc<AsyncFd<OwnedFd>>) {
    let Ok(mut winch) = signal(SignalKind::window_change()) else {
        tracing::warn!("cannot watch SIGWINCH: the run's window size stays fixed");
        return;
    };
    // A resize between the pty's creation and now would be lost otherwise.
    if let Ok(ws) = term::window_size(source.as_fd()) {
        let _ = term::set_window_size(master.get_ref().as_fd(), &ws);
    }
    while winch.recv().await.is_some() {
        if let Ok(ws) = term::window_size(source.as_fd()) {
            let _ = term::set_window_size(master.get_ref().as_fd(), &ws);
        }
    }
}

/// SIGTERM or SIGHUP to capsule: the user's terminal comes back now, not
/// after the run's grace period (the signal is also forwarded to the run).
async fn restore_on_signal(host: Arc<HostTerminal>) {
    let (Ok(mut t), Ok(mut h)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    tokio::select! {
        _ = t.recv() => {}
        _ = h.recv() => {}
    }
    host.restore();
}

/// capsule's stdin when it is anything but an anonymous pipe or a
/// terminal: a pipe for the child instead (its read end, and the write end
/// for [`feed_stdin_pipe`]; none for a character device of /dev/null's
/// numbers, which reads as empty). The run gets stdin's bytes, never the
/// object:
/// - a regular file, a directory, a device, a named FIFO (`/dev/null`:
///   `capsule serve`'s steps, a CI job's stdin) lies on the host's writable
///   mount, outside the view's read-only clone and outside every Landlock
///   hook: the child could change its mode, times and xattrs with
///   `fchmod`/`futimens`/`fsetxattr` (as root: `fchmod(0, 0)` of the host's
///   /dev/null);
/// - a socket lives in the host's network namespace whatever the run's
///   `network.mode` (issue 37): on a connected one the run could write to
///   the peer past capture and the `--json` framing (inetd, socat: the
///   client would read a forged result first), on a listening one `accept`
///   the host's connections (systemd socket activation with `Accept=no`),
///   on a UDP one `sendto` any address.
///
/// The child reads the same bytes; it cannot seek them, and capsule may
/// read ahead of what it consumed. An anonymous pipe (`data | capsule exec`)
/// is handed on: it has no name, no owner worth changing and no network.
fn file_stdin() -> Result<Option<(OwnedFd, Option<OwnedFd>)>, PtyError> {
    use nix::sys::stat::{fstat, SFlag};
    let Ok(st) = fstat(std::io::stdin().as_fd()) else {
        return Ok(None);
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    // An anonymous pipe has no inode on a file system; a named FIFO
    // (`< /run/fifo`) does, so it is relayed too. Without /proc to tell,
    // relayed as well.
    let anonymous = || {
        std::fs::read_link("/proc/self/fd/0")
            .is_ok_and(|l| l.as_os_str().as_encoded_bytes().starts_with(b"pipe:["))
    };
    if kind == SFlag::S_IFIFO && anonymous() {
        return Ok(None);
    }
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(PtyError::StdinPipe)?;
    let null = kind == SFlag::S_IFCHR && st.st_rdev == nix::sys::stat::makedev(1, 3);
    Ok(Some((r, if null { None } else { Some(w) })))
}

/// Copy capsule's stdin into the child's stdin pipe from a thread of its
/// own: `--json`/`--no-tty` with a terminal stdin (`terminal`: blocking
/// reads of a cooked terminal, only while capsule is in the foreground), or
/// a file, device or socket stdin ([`file_stdin`]). The thread ends with
/// end-of-file, with the child's end closed, or with capsule.
fn feed_stdin_pipe(w: OwnedFd, terminal: bool) {
    let spawned = std::thread::Builder::new()
        .name("capsule-stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut buf = vec![0u8; 65536];
            loop {
                // A read in the background of the user's shell would stop
                // all of capsule (SIGTTIN): wait for the foreground.
                if terminal && !term::in_foreground(stdin.as_fd()) {
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
                let n = match nix::unistd::read(stdin.as_fd(), &mut buf) {
                    Ok(0) => return,
                    Ok(n) => n,
                    Err(Errno::EINTR) => continue,
                    // A non-blocking description (a socketpair from Node's
                    // child_process, say): wait for data, not end-of-file.
                    Err(Errno::EAGAIN) => {
                        let mut p = [nix::poll::PollFd::new(
                            stdin.as_fd(),
                            nix::poll::PollFlags::POLLIN,
                        )];
                        match nix::poll::poll(&mut p, nix::poll::PollTimeout::NONE) {
                            Ok(_) | Err(Errno::EINTR) => continue,
                            Err(_) => return,
                        }
                    }
                    Err(_) => return,
                };
                let mut data = &buf[..n];
                while !data.is_empty() {
                    match nix::unistd::write(&w, data) {
                        Ok(k) => data = &data[k..],
                        Err(Errno::EINTR) => {}
                        Err(_) => return,
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot relay stdin: {e}");
    }
}

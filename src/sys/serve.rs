//! What `capsule serve` needs from the kernel: a plain fork of the
//! single-threaded server for each step.

use nix::errno::Errno;

/// Which side of [`fork_step`] the caller is on.
pub enum Forked {
    /// The new process (one thread, a copy of the server's memory).
    Child,
    /// The server; the step's pid.
    Parent(libc::pid_t),
}

/// `fork()` for the server of `capsule serve`. The caller must be
/// single-threaded (the server never starts a thread or an async runtime),
/// so the child may allocate and run ordinary Rust code: no lock can be held
/// by a thread that does not exist in the child.
pub fn fork_step() -> Result<Forked, Errno> {
    debug_assert_eq!(
        thread_count(),
        Some(1),
        "capsule serve forks from one thread only"
    );
    // SAFETY: the server is single-threaded (checked in debug builds, and
    // `serve::run` refuses to start with more than one thread), so the
    // child's copy of every lock and allocator state is consistent.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child.as_raw())),
    }
}

/// The number of threads of this process (from /proc/self/stat), if known.
pub fn thread_count() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 20 (num_threads), counted after the command name's closing ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(17)?.parse().ok()
}

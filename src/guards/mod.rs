//! The guards: what capsule decides for the run, call by call (see
//! docs/guards.md, whose sections map to these files one to one).
//!
//! Some protections cannot be written as a fixed seccomp program because
//! the answer depends on something BPF cannot read (a pointer, a path, the
//! state of the run). For those the command stage installs one more small
//! seccomp program (`sandbox::seccomp::signals`, with the other filters)
//! and sends its listener to the supervisor, where one thread
//! ([`notify_loop`]) answers every notified call, handing it to its part:
//!
//! * [`signals`]: kill and friends only to a process of the run;
//! * [`network`]: connect/listen made by capsule on the caller's socket;
//! * [`processes`]: `max_processes` without a cgroup;
//! * [`memfd`]: no executable memfd;
//! * [`metadata`]: chmod/chown/utime/setxattr only beneath a write grant;
//! * [`observer`]: `exec --explain`'s path observer (records, never decides).
//!
//! What they share: [`judge`] (is this pid of the run), [`procfs`] (the
//! `/proc` fields and the caller's memory they read), [`notify_loop`] (the
//! thread, the dispatch and the CPU budget).

pub mod judge;
pub mod memfd;
pub mod metadata;
pub mod network;
pub mod notify_loop;
pub mod observer;
pub mod processes;
pub mod procfs;
pub mod signals;

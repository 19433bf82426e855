//! The network namespace of a finished run, handed to `capsule serve` so
//! that the kernel tears them down in batches.
//!
//! A network namespace is torn down by a kernel worker once its last
//! reference is gone (`cleanup_net`). Part of that work is per batch, not
//! per namespace: it walks the whole TCP established hash (262,144 buckets
//! on a 24 GiB host), waits for RCU and unregisters the loopbacks together.
//! On our 2-CPU VM (perf, 200 warm steps of `/bin/true`, two interleaved
//! rounds each) the kernel workers' CPU per step went from 1.13–1.21 ms to
//! 0.91–1.02 ms, and the hash walks' from 0.15 to 0.07 ms.
//!
//! A cold `capsule exec` gives its reference up when the run ends, as
//! before. A step of `capsule serve` ([`want`]) opens init's namespace
//! (`/proc/PID/ns/net`) right after the clone, before init is told to go
//! (later init makes the shared memory non-dumpable, and an unprivileged
//! capsule could no longer open it), and hands the descriptor to the server
//! with its report; the server closes them sixteen at a time, or a second
//! after the oldest (docs/serve.md). Nothing can enter a held namespace: no
//! process is left in it and only the server has the descriptor (close-on-
//! exec; every step closes the server's descriptors). It only lives a
//! little longer. Where the open fails the run is the same and the
//! namespace goes when the run ends.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static WANTED: AtomicBool = AtomicBool::new(false);
static HELD: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// Keep the network namespace of this process's run for [`take`]
/// (`capsule serve`'s step process, which runs one run).
pub fn want() {
    WANTED.store(true, Ordering::Relaxed);
}

/// After the clone of a run's init in a network namespace of its own: hold
/// that namespace, when [`want`]ed. A run re-planned on another path
/// replaces what an earlier attempt held.
pub(crate) fn keep(init: libc::pid_t) {
    if !WANTED.load(Ordering::Relaxed) {
        return;
    }
    let path = format!("/proc/{init}/ns/net");
    let fd = match std::fs::File::open(&path) {
        Ok(f) => Some(OwnedFd::from(f)),
        Err(e) => {
            tracing::debug!("{path}: {e}; the run's network namespace goes when it ends");
            None
        }
    };
    if let Ok(mut held) = HELD.lock() {
        *held = fd;
    }
}

/// The namespace held for this process's run, if any.
pub fn take() -> Option<OwnedFd> {
    HELD.lock().ok().and_then(|mut h| h.take())
}

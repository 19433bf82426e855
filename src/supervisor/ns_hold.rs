//! Namespaces of a finished run that a `capsule serve` step keeps a little
//! longer, so that the kernel tears them down off the caller's wait.
//!
//! **Network** ([`NET`]): handed to `capsule serve`, which closes them in
//! batches. A network namespace is torn down by a kernel worker once its
//! last reference is gone (`cleanup_net`). Part of that work is per batch,
//! not per namespace: it walks the whole TCP established hash (262,144
//! buckets on a 24 GiB host), waits for RCU and unregisters the loopbacks
//! together. On our 2-CPU VM (perf, 200 warm steps of `/bin/true`, two
//! interleaved rounds each) the kernel workers' CPU per step went from
//! 1.13–1.21 ms to 0.91–1.02 ms, and the hash walks' from 0.15 to 0.07 ms.
//! The step hands the descriptor to the server with its report; the server
//! closes them sixteen at a time, or a second after the oldest
//! (docs/serve.md).
//!
//! **Mount** ([`MNT`]): dropped by the step itself right after its report.
//! A run's init is the last process in its mount namespace: when it exits,
//! the kernel unmounts the whole view there and waits for an expedited RCU
//! grace period (`namespace_unlock`) before init is gone and the step can
//! report. Held, that teardown happens when the step lets go, while the
//! server answers.
//!
//! A cold `capsule exec` gives its references up when the run ends, as
//! before. A step of `capsule serve` ([`Hold::want`]) opens init's namespaces
//! (`/proc/PID/ns/net`, `/proc/PID/ns/mnt`) right after the clone, before
//! init is told to go (later init makes the shared memory non-dumpable, and
//! an unprivileged capsule could no longer open them). Nothing can enter a
//! held namespace: no process is left in it and only capsule has the
//! descriptor (close-on-exec; every step closes the server's descriptors).
//! It only lives a little longer. Where the open fails the run is the same
//! and the namespace goes when the run ends.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// One kind of namespace a step may hold.
pub struct Hold {
    /// Its name under `/proc/PID/ns/`.
    kind: &'static str,
    wanted: AtomicBool,
    held: Mutex<Option<OwnedFd>>,
}

/// The run's network namespace, for the server (closed in batches).
pub static NET: Hold = Hold::new("net");
/// The run's mount namespace, dropped by the step after its report.
pub static MNT: Hold = Hold::new("mnt");

impl Hold {
    const fn new(kind: &'static str) -> Hold {
        Hold {
            kind,
            wanted: AtomicBool::new(false),
            held: Mutex::new(None),
        }
    }

    /// Keep this namespace of this process's run for [`Hold::take`]
    /// (`capsule serve`'s step process, which runs one run).
    pub fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    /// After the clone of a run's init in a namespace of this kind of its
    /// own: hold it, when [`Hold::want`]ed. A run re-planned on another path
    /// replaces what an earlier attempt held.
    pub(crate) fn keep(&self, init: libc::pid_t) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        let path = format!("/proc/{init}/ns/{}", self.kind);
        let fd = match std::fs::File::open(&path) {
            Ok(f) => Some(OwnedFd::from(f)),
            Err(e) => {
                tracing::debug!("{path}: {e}; the run's namespace goes when it ends");
                None
            }
        };
        if let Ok(mut held) = self.held.lock() {
            *held = fd;
        }
    }

    /// The namespace held for this process's run, if any.
    pub fn take(&self) -> Option<OwnedFd> {
        self.held.lock().ok().and_then(|mut h| h.take())
    }
}

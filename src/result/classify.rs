//! From how the run ended to its verdict: reason, termination, exit code.
//!
//! The supervisor observes facts ([`Ending`]: a set-up failure the child
//! reported, a signal capsule received, the wall-clock limit, a failed
//! execve, a wait status); [`classify`] judges them, as a pure function
//! tested apart from any process. The first fact in that order wins: a
//! child that failed to confine itself is a refusal whatever came after,
//! and a run capsule ended (signal, timeout) is reported as ended by
//! capsule whatever the command made of it.

use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;

use super::{Reason, RunResult, Termination};
use crate::sys::channel::Stage;

/// What the supervisor saw of the run's end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ending {
    /// The child reported that a set-up step failed: nothing ran.
    pub setup_failed: Option<(Stage, Errno)>,
    /// capsule received this termination signal and ended the run.
    pub stop_signal: Option<i32>,
    /// The wall-clock limit was reached and the run was ended.
    pub timed_out: bool,
    /// The guards spent this CPU budget on the run's calls; the run was killed.
    pub guard_budget: Option<Duration>,
    /// The command's execve failed with this errno.
    pub exec_failed: Option<Errno>,
    /// The command's raw wait status, when it was reported.
    pub status: Option<i32>,
    /// The CPU time the command itself had used when it ended (its
    /// parent in the run read it before reaping it), when known.
    pub cpu_time: Option<Duration>,
}

/// What the verdict's messages name.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The command (for an execve error).
    pub program: &'a Path,
    /// The wall-clock limit (for a timeout).
    pub timeout: Duration,
    /// SIGTERM → SIGKILL grace (for a stop signal).
    pub grace: Duration,
    /// `limits.cpu_seconds` (RLIMIT_CPU, soft = hard), if set.
    pub cpu_seconds: Option<u64>,
}

/// The kill_reason of a run the CPU limit ended.
pub const CPU_LIMIT_REACHED: &str = "CPU time limit reached (limits.cpu_seconds)";

/// Whether RLIMIT_CPU's SIGKILL is what ended a command that used `used` of
/// CPU under a limit of `limit` seconds (soft = hard: the kernel sends SIGKILL,
/// never SIGXCPU, once the process's own user + system time reaches it). Its
/// own time, read from the clock the kernel checks: a process below the
/// limit was killed by someone else, and one at the limit was killed by the
/// kernel at that very tick. A tick of slack (10 ms) allows for a kernel
/// whose sample of the zombie differs from the one the check used.
pub fn cpu_limit_reached(used: Option<Duration>, limit: Option<u64>) -> bool {
    const SLACK: Duration = Duration::from_millis(10);
    match (used, limit) {
        (Some(used), Some(limit)) => used + SLACK >= Duration::from_secs(limit),
        _ => false,
    }
}

/// The judgement on one run, as it goes into the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub reason: Reason,
    pub termination: Termination,
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub killed: bool,
    pub kill_reason: Option<String>,
    pub error: Option<String>,
}

impl Verdict {
    /// The verdict of `reason` with its own exit code (0 when the child's).
    fn of(reason: Reason) -> Verdict {
        Verdict {
            reason,
            termination: reason.termination(),
            exit_code: reason.exit_code().unwrap_or(0),
            signal: None,
            killed: false,
            kill_reason: None,
            error: None,
        }
    }

    /// Ended by signal `sig`: exit 128+N, as a shell reports it.
    fn signaled(reason: Reason, sig: i32) -> Verdict {
        Verdict {
            signal: Some(sig),
            exit_code: 128 + sig,
            ..Verdict::of(reason)
        }
    }

    /// Write the verdict into `r` (and `success`, which follows from it);
    /// returns the audit reason.
    pub fn apply(self, r: &mut RunResult) -> Reason {
        r.termination_reason = self.termination;
        r.exit_code = self.exit_code;
        r.signal = self.signal;
        r.killed = self.killed;
        r.kill_reason = self.kill_reason;
        r.error = self.error;
        r.success = r.termination_reason == Termination::Exited && r.exit_code == 0 && !r.killed;
        self.reason
    }
}

/// Judge how the run ended. `oom_killed` is asked only when SIGKILL ended
/// the command (it reads the memory cgroup's counters).
pub fn classify(e: &Ending, ctx: &Context<'_>, oom_killed: impl FnOnce() -> bool) -> Verdict {
    if let Some((stage, errno)) = e.setup_failed {
        return Verdict {
            error: Some(format!(
                "confining the child failed while {}: {}",
                stage.describe(),
                errno.desc()
            )),
            ..Verdict::of(Reason::SetupFailed)
        };
    }
    if let Some(sig) = e.stop_signal {
        // The run was ended (forwarded, then the tree SIGKILLed after the
        // grace), whatever the child made of it.
        return Verdict {
            killed: true,
            kill_reason: Some(format!(
                "{}: capsule received it; forwarded to the run, the process tree killed after {}s",
                nix::sys::signal::Signal::try_from(sig)
                    .map(|s| s.as_str())
                    .unwrap_or("a signal"),
                ctx.grace.as_secs_f64()
            )),
            ..Verdict::signaled(Reason::Signaled, sig)
        };
    }
    if let Some(budget) = e.guard_budget {
        return Verdict {
            killed: true,
            kill_reason: Some(format!(
                "the guards' CPU budget of {}s reached: capsule's time serving the run's checked system calls \
                 (signal, process, network and memfd guards), at most a tenth of limits.timeout_seconds and \
                 no more than limits.cpu_seconds; the process tree was killed",
                budget.as_secs_f64()
            )),
            ..Verdict::signaled(Reason::GuardBudget, libc::SIGKILL)
        };
    }
    if e.timed_out {
        return Verdict {
            killed: true,
            kill_reason: Some(format!(
                "timeout: wall-clock limit of {}s reached (limits.timeout_seconds / --timeout)",
                ctx.timeout.as_secs_f64()
            )),
            ..Verdict::of(Reason::Timeout)
        };
    }
    if let Some(errno) = e.exec_failed {
        let (reason, why) = match errno {
            Errno::ENOENT => (Reason::CommandNotFound, errno.desc()),
            Errno::EACCES | Errno::EPERM => (
                Reason::CannotExecute,
                "permission denied (the sandbox or the file mode forbids executing it)",
            ),
            e => (Reason::CannotExecute, e.desc()),
        };
        return Verdict {
            error: Some(format!("execve({}): {why}", ctx.program.display())),
            ..Verdict::of(reason)
        };
    }
    match e.status {
        Some(st) if libc::WIFEXITED(st) => {
            let code = libc::WEXITSTATUS(st);
            let reason = if code == 0 {
                Reason::ExitZero
            } else {
                Reason::ExitNonzero
            };
            Verdict {
                exit_code: code,
                ..Verdict::of(reason)
            }
        }
        Some(st) if libc::WIFSIGNALED(st) => by_signal(libc::WTERMSIG(st), e, ctx, oom_killed),
        _ => Verdict {
            error: Some("the sandboxed process tree ended without reporting a status".into()),
            ..Verdict::of(Reason::LostChild)
        },
    }
}

/// The verdict on a command a signal ended: a limit's kill (the CPU limit,
/// the memory cgroup's OOM killer) or a plain signal.
fn by_signal(
    sig: i32,
    e: &Ending,
    ctx: &Context<'_>,
    oom_killed: impl FnOnce() -> bool,
) -> Verdict {
    // The command's own CPU time says it first: the OOM counters are the
    // whole cgroup's, and a process at the CPU limit is killed by the kernel
    // at once.
    if sig == libc::SIGKILL && cpu_limit_reached(e.cpu_time, ctx.cpu_seconds) {
        Verdict {
            killed: true,
            kill_reason: Some(CPU_LIMIT_REACHED.into()),
            ..Verdict::signaled(Reason::CpuLimit, sig)
        }
    } else if sig == libc::SIGKILL && oom_killed() {
        Verdict {
            killed: true,
            kill_reason: Some("memory limit reached (limits.memory_mb)".into()),
            ..Verdict::signaled(Reason::MemoryLimit, sig)
        }
    } else {
        Verdict::signaled(Reason::Signaled, sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::exit;

    fn ctx() -> Context<'static> {
        Context {
            program: Path::new("/bin/prog"),
            timeout: Duration::from_millis(1500),
            grace: Duration::from_secs(1),
            cpu_seconds: Some(2),
        }
    }

    /// A wait status: exited with `code`.
    fn exited(code: i32) -> Option<i32> {
        Some((code & 0xff) << 8)
    }

    /// A wait status: killed by `sig`.
    fn killed_by(sig: i32) -> Option<i32> {
        Some(sig & 0x7f)
    }

    fn judge(e: Ending) -> Verdict {
        classify(&e, &ctx(), || panic!("asked about the OOM killer"))
    }

    fn result_of(v: Verdict) -> (RunResult, Reason) {
        let mut r = RunResult::new("r".into(), Termination::Exited, 0);
        let reason = v.apply(&mut r);
        (r, reason)
    }

    #[test]
    fn exit_status_is_passed_through() {
        let (r, reason) = result_of(judge(Ending {
            status: exited(0),
            ..Ending::default()
        }));
        assert_eq!(reason, Reason::ExitZero);
        assert_eq!(r.termination_reason, Termination::Exited);
        assert_eq!(
            (r.exit_code, r.signal, r.killed, r.success),
            (0, None, false, true)
        );
        assert!(r.error.is_none() && r.kill_reason.is_none());

        let (r, reason) = result_of(judge(Ending {
            status: exited(3),
            ..Ending::default()
        }));
        assert_eq!(reason, Reason::ExitNonzero);
        assert_eq!(r.termination_reason, Termination::Exited);
        assert_eq!((r.exit_code, r.success), (3, false));
    }

    #[test]
    fn a_spent_guard_budget_is_a_kill_that_names_it() {
        let v = judge(Ending {
            guard_budget: Some(Duration::from_secs(2)),
            timed_out: true,
            status: killed_by(libc::SIGKILL),
            ..Ending::default()
        });
        assert_eq!(v.reason, Reason::GuardBudget);
        assert_eq!(v.termination, Termination::Signaled);
        assert_eq!((v.exit_code, v.signal, v.killed), (137, Some(9), true));
        let why = v.kill_reason.unwrap_or_default();
        assert!(why.contains("guards' CPU budget of 2s"), "{why}");
        // A signal to capsule still comes first.
        let v = judge(Ending {
            guard_budget: Some(Duration::from_secs(2)),
            stop_signal: Some(libc::SIGTERM),
            ..Ending::default()
        });
        assert_eq!(v.reason, Reason::Signaled);
    }

    #[test]
    fn a_signal_is_128_plus_n_and_oom_is_asked_only_for_sigkill() {
        let v = judge(Ending {
            status: killed_by(libc::SIGSEGV),
            ..Ending::default()
        });
        assert_eq!(v.reason, Reason::Signaled);
        assert_eq!(v.termination, Termination::Signaled);
        assert_eq!((v.exit_code, v.signal, v.killed), (139, Some(11), false));

        let e = Ending {
            status: killed_by(libc::SIGKILL),
            ..Ending::default()
        };
        let v = classify(&e, &ctx(), || false);
        assert_eq!(
            (v.reason, v.exit_code, v.killed),
            (Reason::Signaled, 137, false)
        );
        let (r, reason) = result_of(classify(&e, &ctx(), || true));
        assert_eq!(reason, Reason::MemoryLimit);
        assert_eq!(r.termination_reason, Termination::Signaled);
        assert_eq!((r.exit_code, r.signal, r.killed), (137, Some(9), true));
        assert_eq!(
            r.kill_reason.as_deref(),
            Some("memory limit reached (limits.memory_mb)")
        );
        assert!(!r.success);
    }

    /// SIGKILL with the command's own CPU time at `cpu_seconds` (2 s here)
    /// is the CPU limit, before the OOM counters are asked; below it, or
    /// with another signal, or with no time known, it is not.
    #[test]
    fn a_sigkill_at_cpu_seconds_is_the_cpu_limit() {
        let at = |sig: i32, cpu_ms: Option<u64>| Ending {
            status: killed_by(sig),
            cpu_time: cpu_ms.map(Duration::from_millis),
            ..Ending::default()
        };
        let (r, reason) = result_of(classify(&at(libc::SIGKILL, Some(2000)), &ctx(), || true));
        assert_eq!(reason, Reason::CpuLimit);
        assert_eq!(r.termination_reason, Termination::Signaled);
        assert_eq!(
            (r.exit_code, r.signal, r.killed, r.success),
            (137, Some(9), true, false)
        );
        assert_eq!(
            r.kill_reason.as_deref(),
            Some("CPU time limit reached (limits.cpu_seconds)")
        );
        assert_eq!(
            classify(&at(libc::SIGKILL, Some(1995)), &ctx(), || false).reason,
            Reason::CpuLimit
        );
        for (cpu_ms, oom, want) in [
            (Some(1500), false, Reason::Signaled),
            (Some(1500), true, Reason::MemoryLimit),
            (None, false, Reason::Signaled),
            (Some(0), false, Reason::Signaled),
        ] {
            let v = classify(&at(libc::SIGKILL, cpu_ms), &ctx(), || oom);
            assert_eq!(v.reason, want, "{cpu_ms:?} {oom}");
            assert_eq!(v.killed, want != Reason::Signaled, "{cpu_ms:?} {oom}");
        }
        // Not SIGKILL (SIGXCPU only comes at a soft limit below the hard one,
        // which capsule never sets): the signal it is.
        let v = judge(at(libc::SIGXCPU, Some(5000)));
        assert_eq!((v.reason, v.killed), (Reason::Signaled, false));
        // No cpu_seconds: no CPU limit.
        let none = Context {
            cpu_seconds: None,
            ..ctx()
        };
        let v = classify(&at(libc::SIGKILL, Some(5000)), &none, || false);
        assert_eq!((v.reason, v.killed), (Reason::Signaled, false));
        // capsule's own kills come first.
        let v = judge(Ending {
            timed_out: true,
            ..at(libc::SIGKILL, Some(5000))
        });
        assert_eq!(v.reason, Reason::Timeout);
    }

    #[test]
    fn timeout_is_124_and_names_the_limit() {
        let (r, reason) = result_of(judge(Ending {
            timed_out: true,
            status: killed_by(libc::SIGKILL),
            ..Ending::default()
        }));
        assert_eq!(reason, Reason::Timeout);
        assert_eq!(r.termination_reason, Termination::Timeout);
        assert_eq!(
            (r.exit_code, r.signal, r.killed),
            (exit::TIMEOUT, None, true)
        );
        assert_eq!(
            r.kill_reason.as_deref(),
            Some("timeout: wall-clock limit of 1.5s reached (limits.timeout_seconds / --timeout)")
        );
    }

    #[test]
    fn a_stop_signal_wins_over_the_timeout_and_the_status() {
        let (r, reason) = result_of(judge(Ending {
            stop_signal: Some(libc::SIGTERM),
            timed_out: true,
            status: exited(0),
            ..Ending::default()
        }));
        assert_eq!(reason, Reason::Signaled);
        assert_eq!(r.termination_reason, Termination::Signaled);
        assert_eq!((r.exit_code, r.signal, r.killed), (143, Some(15), true));
        assert_eq!(
            r.kill_reason.as_deref(),
            Some("SIGTERM: capsule received it; forwarded to the run, the process tree killed after 1s")
        );
        assert!(!r.success);
    }

    #[test]
    fn a_setup_failure_is_a_refusal_whatever_followed() {
        let (r, reason) = result_of(judge(Ending {
            setup_failed: Some((Stage::Landlock, Errno::EPERM)),
            stop_signal: Some(libc::SIGINT),
            timed_out: true,
            guard_budget: Some(Duration::from_secs(1)),
            exec_failed: Some(Errno::ENOENT),
            status: exited(0),
            cpu_time: Some(Duration::from_secs(5)),
        }));
        assert_eq!(reason, Reason::SetupFailed);
        assert_eq!(r.termination_reason, Termination::Refused);
        assert_eq!(
            (r.exit_code, r.killed, r.success),
            (exit::REFUSED, false, false)
        );
        assert_eq!(
            r.error.as_deref(),
            Some("confining the child failed while applying the Landlock ruleset: Operation not permitted")
        );
    }

    #[test]
    fn exec_failures_are_127_or_126() {
        let failed = |errno| {
            judge(Ending {
                exec_failed: Some(errno),
                status: exited(127),
                ..Ending::default()
            })
        };
        let v = failed(Errno::ENOENT);
        assert_eq!(
            (v.reason, v.termination),
            (Reason::CommandNotFound, Termination::Error)
        );
        assert_eq!(v.exit_code, exit::NOT_FOUND);
        assert_eq!(
            v.error.as_deref(),
            Some("execve(/bin/prog): No such file or directory")
        );
        for errno in [Errno::EACCES, Errno::EPERM] {
            let v = failed(errno);
            assert_eq!(
                (v.reason, v.exit_code),
                (Reason::CannotExecute, exit::CANNOT_EXECUTE)
            );
            assert_eq!(
                v.error.as_deref(),
                Some("execve(/bin/prog): permission denied (the sandbox or the file mode forbids executing it)")
            );
        }
        let v = failed(Errno::ENOEXEC);
        assert_eq!((v.reason, v.exit_code), (Reason::CannotExecute, 126));
        assert_eq!(
            v.error.as_deref(),
            Some("execve(/bin/prog): Exec format error")
        );
    }

    #[test]
    fn no_status_is_a_lost_child() {
        let (r, reason) = result_of(judge(Ending::default()));
        assert_eq!(reason, Reason::LostChild);
        assert_eq!(r.termination_reason, Termination::Error);
        assert_eq!((r.exit_code, r.success), (exit::REFUSED, false));
        assert!(r.error.is_some());
    }

    /// Whatever the facts, the verdict agrees with its reason's mapping.
    #[test]
    fn every_verdict_agrees_with_its_reason() {
        let statuses = [None, exited(0), exited(1), killed_by(9), killed_by(15)];
        let errnos = [None, Some(Errno::ENOENT), Some(Errno::EACCES)];
        for status in statuses {
            for exec_failed in errnos {
                for timed_out in [false, true] {
                    for stop_signal in [None, Some(libc::SIGHUP)] {
                        for (oom, guard_budget) in [
                            (false, None),
                            (true, None),
                            (false, Some(Duration::from_secs(1))),
                        ] {
                            for cpu_time in [None, Some(Duration::from_secs(9))] {
                                let e = Ending {
                                    setup_failed: None,
                                    stop_signal,
                                    timed_out,
                                    guard_budget,
                                    exec_failed,
                                    status,
                                    cpu_time,
                                };
                                let v = classify(&e, &ctx(), || oom);
                                assert_eq!(v.termination, v.reason.termination(), "{e:?}");
                                if let Some(code) = v.reason.exit_code() {
                                    assert_eq!(v.exit_code, code, "{e:?}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

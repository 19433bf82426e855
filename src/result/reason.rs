//! Why a run ended, as one fixed code: the audit record's `reason`.
//!
//! Every way a run can end, refusals included, is one [`Reason`]. Each
//! reason maps to the result's coarser `termination_reason` ([`Termination`])
//! and, when the code does not come from the child, to capsule's exit status:
//! this file is the one place that says so. The strings are part of the
//! audit contract and never change.

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use super::{exit, Termination};

/// Declares [`Reason`] with its string, keeping [`Reason::ALL`] and
/// [`Reason::as_str`] complete by construction.
macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident = $code:literal,)*) => {
        /// Why a run ended: a fixed code, never free text.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[$doc])* $variant,)*
        }

        impl Reason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];

            /// The code as written in the audit record.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $code,)*
                }
            }
        }
    };
}

reasons! {
    // The command ran.
    /// It exited 0.
    ExitZero = "exit_zero",
    /// It exited with another status.
    ExitNonzero = "exit_nonzero",
    /// A signal ended it, or capsule received SIGINT/SIGTERM/SIGHUP/SIGQUIT
    /// and ended the run.
    Signaled = "signaled",
    /// The memory cgroup's OOM killer ended it (`limits.memory_mb`).
    MemoryLimit = "memory_limit",
    /// RLIMIT_CPU's SIGKILL ended it (`limits.cpu_seconds`): its own CPU
    /// time had reached the limit.
    CpuLimit = "cpu_limit",
    /// The wall-clock limit was reached.
    Timeout = "timeout",
    /// The guards spent their CPU budget serving the run's checked calls
    /// (`guards::notify_loop::cpu_budget`): the run was killed.
    GuardBudget = "guard_budget",
    // The command could not start, or vanished.
    /// execve found no such file.
    CommandNotFound = "command_not_found",
    /// execve refused the file (permission, format...).
    CannotExecute = "cannot_execute",
    /// The process tree ended without reporting a status.
    LostChild = "lost_child",
    // Refused: nothing ran.
    /// The child could not confine itself, or the supervisor could not set up the run.
    SetupFailed = "setup_failed",
    /// The proxy or the RPC broker could not start.
    ServiceUnavailable = "service_unavailable",
    /// A protection the policy asks for cannot be enforced on this host.
    ProtectionUnavailable = "protection_unavailable",
    /// The policy (or the command line's additions to it) is invalid.
    PolicyInvalid = "policy_invalid",
    /// `--agent-id` does not match its pattern.
    InvalidAgentId = "invalid_agent_id",
    /// `--tool-fd` is not an open inherited descriptor.
    BadToolFd = "bad_tool_fd",
    /// The audit log lies where the sandboxed program could reach it.
    AuditLogUnsafe = "audit_log_unsafe",
    /// The command line could not be parsed.
    UsageError = "usage_error",
}

impl Reason {
    /// The result's `termination_reason` for this reason.
    pub const fn termination(self) -> Termination {
        match self {
            Reason::ExitZero | Reason::ExitNonzero => Termination::Exited,
            Reason::Signaled | Reason::MemoryLimit | Reason::CpuLimit | Reason::GuardBudget => {
                Termination::Signaled
            }
            Reason::Timeout => Termination::Timeout,
            Reason::CommandNotFound | Reason::CannotExecute | Reason::LostChild => {
                Termination::Error
            }
            Reason::SetupFailed
            | Reason::ServiceUnavailable
            | Reason::ProtectionUnavailable
            | Reason::PolicyInvalid
            | Reason::InvalidAgentId
            | Reason::BadToolFd
            | Reason::AuditLogUnsafe
            | Reason::UsageError => Termination::Refused,
        }
    }

    /// capsule's exit status for this reason, or None when it is the
    /// child's own (its exit status, or 128+N for signal N).
    pub const fn exit_code(self) -> Option<i32> {
        match self {
            Reason::ExitZero => Some(0),
            Reason::ExitNonzero
            | Reason::Signaled
            | Reason::MemoryLimit
            | Reason::CpuLimit
            | Reason::GuardBudget => None,
            Reason::Timeout => Some(exit::TIMEOUT),
            Reason::CommandNotFound => Some(exit::NOT_FOUND),
            Reason::CannotExecute => Some(exit::CANNOT_EXECUTE),
            // Nothing reported a status: as if nothing had run.
            Reason::LostChild => Some(exit::REFUSED),
            Reason::SetupFailed
            | Reason::ServiceUnavailable
            | Reason::ProtectionUnavailable
            | Reason::PolicyInvalid
            | Reason::InvalidAgentId
            | Reason::BadToolFd
            | Reason::AuditLogUnsafe
            | Reason::UsageError => Some(exit::REFUSED),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is no reason code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown reason code {0:?}")]
pub struct UnknownReason(pub String);

impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(s: &str) -> Result<Reason, UnknownReason> {
        Reason::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownReason(s.to_string()))
    }
}

impl schemars::JsonSchema for Reason {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Reason".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let codes: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        schemars::json_schema!({
            "description": "Why the run ended: a fixed code, never free text.",
            "type": "string",
            "enum": codes,
        })
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_unique_and_round_trips() {
        let mut seen = std::collections::HashSet::new();
        for &r in Reason::ALL {
            assert!(seen.insert(r.as_str()), "{} used twice", r.as_str());
            assert_eq!(r.as_str().parse::<Reason>(), Ok(r));
            assert_eq!(r.to_string(), r.as_str());
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        assert!("exited".parse::<Reason>().is_err());
    }

    /// The codes the audit records of capsule 0.1 carry: none may change.
    #[test]
    fn codes_are_the_published_ones() {
        let codes: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            codes,
            [
                "exit_zero",
                "exit_nonzero",
                "signaled",
                "memory_limit",
                // Added when a kill by cpu_seconds became one of capsule's.
                "cpu_limit",
                "timeout",
                // Added with the guards' CPU budget (issue 20).
                "guard_budget",
                "command_not_found",
                "cannot_execute",
                "lost_child",
                "setup_failed",
                "service_unavailable",
                "protection_unavailable",
                "policy_invalid",
                "invalid_agent_id",
                "bad_tool_fd",
                "audit_log_unsafe",
                "usage_error",
            ]
        );
        // Each is a fixed snake_case code, never free text.
        for c in codes {
            assert!(
                c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{c}"
            );
        }
    }

    #[test]
    fn refusals_exit_125_and_the_rest_as_documented() {
        for &r in Reason::ALL {
            if r.termination() == Termination::Refused {
                assert_eq!(r.exit_code(), Some(exit::REFUSED), "{r}");
            }
        }
        assert_eq!(Reason::Timeout.termination(), Termination::Timeout);
        assert_eq!(Reason::Timeout.exit_code(), Some(124));
        assert_eq!(Reason::CommandNotFound.exit_code(), Some(127));
        assert_eq!(Reason::CannotExecute.exit_code(), Some(126));
        assert_eq!(Reason::ExitZero.termination(), Termination::Exited);
        assert_eq!(Reason::MemoryLimit.termination(), Termination::Signaled);
        assert_eq!(Reason::CpuLimit.termination(), Termination::Signaled);
        assert_eq!(Reason::CpuLimit.exit_code(), None);
        assert_eq!(Reason::GuardBudget.termination(), Termination::Signaled);
        assert_eq!(Reason::GuardBudget.exit_code(), None);
        assert_eq!(Reason::LostChild.termination(), Termination::Error);
    }
}

//! What the Landlock layer will enforce, for `--dry-run`, `check` and the result.

use std::fmt;
use std::path::PathBuf;

use crate::plan::{Access, Origin};

/// How a rule came about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleKind {
    /// The grant's own path.
    Grant,
    /// An entry of a directory expanded around a denied path beneath `grant`.
    CarveOut { grant: PathBuf },
    /// Listing only (ReadDir) of a directory expanded around denied files beneath `grant`.
    ListOnly { grant: PathBuf },
    /// The child's own /proc/self, added after fork.
    ProcSelf,
}

/// One Landlock rule: a path, what it gives, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleLine {
    pub path: PathBuf,
    pub access: Access,
    pub kind: RuleKind,
    pub origin: Origin,
}

/// A denied path that was carved out of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyLine {
    pub path: PathBuf,
    pub origin: Origin,
    /// The grant it was carved out of.
    pub grant: PathBuf,
}

/// A grant dropped because it lies inside a denied path (deny = no access at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedGrant {
    pub path: PathBuf,
    pub access: Access,
    pub origin: Origin,
    pub deny: PathBuf,
    pub deny_origin: Origin,
}

/// What `prepare` built, and what it could not.
#[derive(Debug, Clone, Default)]
#[cfg_attr(
    not(test),
    allow(
        dead_code,
        reason = "exec reads abi, missing and rules, `why` the carve-outs; the tests read the rest"
    )
)]
pub struct Report {
    /// The ABI the ruleset uses: the kernel's, capped at what the crate knows (0 = none).
    pub abi: u32,
    /// Filesystem rights are enforced.
    pub fs: bool,
    /// TCP bind/connect rules are enforced.
    pub tcp: bool,
    /// The requested scopes (signal, abstract unix sockets) are enforced.
    pub scopes: bool,
    /// Which scopes: "signals", "abstract unix sockets".
    pub scoped: Vec<&'static str>,
    /// What the plan asked for and this kernel lacks (only non-empty with best effort).
    pub missing: Vec<String>,
    /// One line per rule, in the order added.
    pub rules: Vec<RuleLine>,
    /// Carve-outs that took effect.
    pub denied: Vec<DenyLine>,
    /// Grants dropped because they lie inside a denied path.
    pub dropped: Vec<DroppedGrant>,
    /// TCP ports the child may connect to (when `tcp`).
    pub connect_ports: Vec<u16>,
}

impl fmt::Display for RuleLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            RuleKind::ListOnly { .. } => write!(f, "list {}", self.path.display())?,
            _ => write!(f, "{} {}", self.access.label(), self.path.display())?,
        }
        match &self.kind {
            RuleKind::Grant => write!(f, " — {}", self.origin),
            RuleKind::CarveOut { grant } | RuleKind::ListOnly { grant } => {
                write!(
                    f,
                    " — {} (part of {}, around denied paths)",
                    self.origin,
                    grant.display()
                )
            }
            RuleKind::ProcSelf => write!(f, " — the child's own /proc/self"),
        }
    }
}

impl Report {
    /// One human line per rule, deny and dropped grant, each naming the enforcing layer.
    #[cfg(test)]
    pub fn lines(&self) -> Vec<String> {
        let layer = if self.fs {
            format!("Landlock ABI {}", self.abi)
        } else {
            "NOT ENFORCED (no Landlock)".to_string()
        };
        let mut out = Vec::with_capacity(self.rules.len() + self.denied.len() + 2);
        for r in &self.rules {
            out.push(format!("{r} — {layer}"));
        }
        for d in &self.denied {
            out.push(format!(
                "deny {} — {} (carved out of {}) — {layer}",
                d.path.display(),
                d.origin,
                d.grant.display()
            ));
        }
        for d in &self.dropped {
            out.push(format!(
                "dropped {} {} — {}: inside denied {} ({})",
                d.access.label(),
                d.path.display(),
                d.origin,
                d.deny.display(),
                d.deny_origin
            ));
        }
        if self.tcp {
            out.push(format!(
                "tcp: bind denied, connect only to ports {:?} — {layer}",
                self.connect_ports
            ));
        }
        if self.scopes {
            out.push(format!(
                "scopes: {} confined to the sandbox — {layer}",
                self.scoped.join(" and ")
            ));
        }
        for m in &self.missing {
            out.push(format!("missing: {m}"));
        }
        out
    }
}

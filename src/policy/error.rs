//! The one error type of the policy layer.
//!
//! Every variant renders as ONE line: `FILE:LINE:COL: KEY: what is wrong (what to do)`.
//! Parts that are not known (a CLI flag has no file, a default policy no line) are left out.

use std::fmt;

/// Where in a policy something is: file, 1-based line and column, each when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// The file as the user named it (or a label such as `--allow-read`).
    pub file: Option<String>,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl fmt::Display for Position {
    /// `file:line:col: `, `file:line: `, `file: ` or nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut any = false;
        if let Some(file) = &self.file {
            write!(f, "{file}")?;
            any = true;
        }
        if let Some(line) = self.line {
            write!(f, "{}{line}", if any { ":" } else { "line " })?;
            any = true;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        if any {
            f.write_str(": ")?;
        }
        Ok(())
    }
}

/// A policy that cannot be used. Nothing runs (exit 125).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("{file}: cannot read policy file: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Not valid YAML/JSON, an unknown key, a wrong type, a missing key.
    #[error("{at}{key}: {message}")]
    Syntax {
        at: Position,
        key: String,
        message: String,
    },
    /// A path in a grant that cannot be resolved (missing, unreadable, bad `~`).
    #[error("{at}{key}: {message}")]
    Path {
        at: Position,
        key: String,
        message: String,
    },
    /// Well-formed, but breaks one of the fail-closed rules.
    #[error("{at}{key}: {message}")]
    Invalid {
        at: Position,
        key: String,
        message: String,
    },
}

/// Make `s` safe to show on one line (no control characters from a hostile file).
pub(crate) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line_with_all_parts() {
        let e = PolicyError::Syntax {
            at: Position {
                file: Some("agent.yaml".into()),
                line: Some(7),
                column: Some(5),
            },
            key: "filesystem.wirte".into(),
            message: "unknown key".into(),
        };
        assert_eq!(
            e.to_string(),
            "agent.yaml:7:5: filesystem.wirte: unknown key"
        );
        let e = PolicyError::Path {
            at: Position {
                file: Some("--allow-read".into()),
                ..Default::default()
            },
            key: "/x".into(),
            message: "does not exist".into(),
        };
        assert_eq!(e.to_string(), "--allow-read: /x: does not exist");
    }

    #[test]
    fn one_line_strips_controls() {
        assert_eq!(one_line("a\nb\t\x1b[31mc"), "a b [31mc");
    }
}

//! The filesystem rights a grant gives, in the contract's terms (used by
//! validation and by the planner alike).

/// Filesystem access rights a grant gives, in the contract's terms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Access {
    /// Read files, list directories.
    pub read: bool,
    /// Create, modify, delete, rename beneath (implies read in policies).
    pub write: bool,
    /// Execute files (implies read).
    pub exec: bool,
}

impl Access {
    pub const READ: Access = Access {
        read: true,
        write: false,
        exec: false,
    };
    pub const WRITE: Access = Access {
        read: true,
        write: true,
        exec: false,
    };
    pub const EXEC: Access = Access {
        read: true,
        write: false,
        exec: true,
    };
    pub fn is_empty(self) -> bool {
        !(self.read || self.write || self.exec)
    }
    /// "r", "rw", "rx", "rwx"
    pub fn label(self) -> String {
        let mut s = String::new();
        if self.read {
            s.push('r')
        }
        if self.write {
            s.push('w')
        }
        if self.exec {
            s.push('x')
        }
        if s.is_empty() {
            s.push('-')
        }
        s
    }
}

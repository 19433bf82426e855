//! Landlock: the filesystem (and TCP) layer. OWNED BY: landlock helper.

//! seccomp: the syscall layer. OWNED BY: seccomp helper.

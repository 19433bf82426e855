//! The sandbox layers, applied by the child to itself before exec.
pub mod landlock;
pub mod seccomp;

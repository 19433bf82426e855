//! capsule: a kernel-native capability sandbox for AI agents and CI jobs.
//!
//! The data flows one way, and the modules show it:
//!
//! * [`policy`] — the policy file's types, parsing, validation, path resolution;
//! * [`plan`] — everything resolved before fork (grants with their origin, env, limits);
//! * [`kernel`] — what this kernel and host allow, probed once per run;
//! * [`sandbox`] — the layers the child applies to itself (Landlock, seccomp,
//!   namespaces, rlimits, capabilities) and `sandbox::child`, the code that
//!   runs between fork and exec;
//! * [`supervisor`] — the unsandboxed parent: spawn, stdio capture, timeout,
//!   tree kill;
//! * [`result`] — what a run reports: the JSON result, the reason code and
//!   exit status of every way a run ends, and the judgement of how it ended;
//! * [`proxy`] — the filtering egress proxy of `network.mode: proxy`;
//! * [`rpc`] — the tool and LLM broker served over the child's RPC fd;
//! * [`audit`] — the one-line audit record of every run;
//! * [`volume`] — named directories capsule owns (`capsule volume`, `volume:NAME` mounts);
//! * [`cli`] — the `capsule` command line, turning typed errors into exit codes.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod audit;
pub mod cli;
pub mod kernel;
pub mod plan;
pub mod policy;
pub mod proxy;
pub mod result;
pub mod rpc;
pub mod sandbox;
pub mod supervisor;
// Every unsafe block of capsule lives here, each with its SAFETY line.
#[allow(unsafe_code)]
pub mod sys;
pub mod volume;

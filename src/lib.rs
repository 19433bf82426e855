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
//! * [`guards`] — the supervisor's answers to the run's notified system calls
//!   (signals, network, processes, memfd, metadata: docs/guards.md);
//! * [`result`] — what a run reports: the JSON result, the reason code and
//!   exit status of every way a run ends, and the judgement of how it ended;
//! * [`proxy`] — the filtering egress proxy of `network.mode: proxy`;
//! * [`rpc`] — the tool and LLM broker served over the child's RPC fd;
//! * [`audit`] — the one-line audit record of every run;
//! * [`volume`] — named directories capsule owns (`capsule volume`, `volume:NAME` mounts);
//! * [`learn`] — `capsule learn`: from a run's refusals to a draft policy;
//! * [`cli`] — the `capsule` command line, turning typed errors into exit codes.
//!
//! The one public item is [`cli::main`], which the binary calls; no other
//! crate links this one (the tests run the binary). Every other module is
//! `pub(crate)`, so `cargo doc` shows this map and the entry point, and
//! `cargo doc --document-private-items` the modules themselves.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
// The map above links the crate-private modules: plain names in `cargo doc`,
// links with `--document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

pub(crate) mod audit;
pub mod cli;
pub(crate) mod guards;
pub(crate) mod kernel;
pub(crate) mod learn;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod proxy;
pub(crate) mod result;
pub(crate) mod rpc;
pub(crate) mod sandbox;
pub(crate) mod supervisor;
// Every unsafe block of capsule lives here, each with its SAFETY line.
#[allow(unsafe_code)]
pub(crate) mod sys;
pub(crate) mod volume;
pub(crate) mod why;

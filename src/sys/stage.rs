//! The unsafe edges of the child stages (`sandbox::child`): creating a stage
//! on its own stack in the supervisor's address space, turning the clone
//! argument back into the leaked spec, and the final `execve`.
//!
//! The stages themselves are safe Rust ([`child::init_main`],
//! [`child::command_main`]) that follow the CLONE_VM rules stated in
//! `sandbox::child`; only the entry points here need `unsafe`.

use std::ffi::{c_int, c_void};

use crate::sandbox::child::{self, ChildSpec};

/// Which stage a clone starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Pid 1 of the run's pid namespace.
    Init,
    /// The command's pre-exec stage.
    Command,
    /// The keeper between capsule and the command where there is no pid
    /// namespace.
    Keeper,
}

extern "C" fn init_entry(arg: *mut c_void) -> c_int {
    // SAFETY: `clone_stage` passes a pointer made from a `&'static ChildSpec`
    // (leaked by the supervisor, never written after the clone).
    let spec: &'static ChildSpec = unsafe { &*(arg as *const ChildSpec) };
    child::init_main(spec)
}

extern "C" fn keeper_entry(arg: *mut c_void) -> c_int {
    // SAFETY: as in `init_entry`.
    let spec: &'static ChildSpec = unsafe { &*(arg as *const ChildSpec) };
    child::keeper_main(spec)
}

extern "C" fn command_entry(arg: *mut c_void) -> c_int {
    // SAFETY: as in `init_entry`.
    let spec: &'static ChildSpec = unsafe { &*(arg as *const ChildSpec) };
    child::command_main(spec)
}

/// `clone(flags | CLONE_VM | SIGCHLD)` of a stage on `stack`, reading `spec`.
/// `stack` must not be in use by another live stage (each stage has its own:
/// `spec.command_stack` for the command stage).
pub fn clone_stage(
    flags: c_int,
    stack: super::StageStack,
    entry: Entry,
    spec: &'static ChildSpec,
) -> Result<libc::pid_t, i32> {
    let f = match entry {
        Entry::Init => init_entry as extern "C" fn(*mut c_void) -> c_int,
        Entry::Command => command_entry,
        Entry::Keeper => keeper_entry,
    };
    let arg = (spec as *const ChildSpec).cast_mut().cast::<c_void>();
    // SAFETY: both entries run the stages of `sandbox::child`, which follow
    // the CLONE_VM rules (raw system calls only, no allocation, no
    // thread-locals, no panic); `spec` is 'static and nobody writes it any
    // more (it is shared, read-only, with the supervisor); `stack` is a
    // leaked stage stack (a `StageStack` is only made by `leaked_stack`) used
    // by this stage only.
    unsafe { super::clone_on_stack(flags | libc::CLONE_VM, stack.0, f, arg) }
}

/// `execve` of the spec's program; only returns, with the errno, on failure.
pub fn exec(spec: &ChildSpec) -> i32 {
    // SAFETY: `ChildSpec::seal` built both pointer arrays NULL-terminated,
    // pointing into the spec's own CStrings, which live as long as the spec.
    unsafe {
        super::raw::execve(
            &spec.program,
            spec.argv_ptrs.as_ptr(),
            spec.envp_ptrs.as_ptr(),
        )
    }
}

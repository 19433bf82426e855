//! The unsafe edges of the child stages (`sandbox::child`): creating a stage
//! on its own stack in the supervisor's address space, turning the clone
//! argument back into the leaked spec, and the final `execve`.
//!
//! The stages themselves are safe Rust (`sandbox::child::init_main`,
//! `command_main`, `keeper_main`) that follow the CLONE_VM rules stated in
//! `sandbox::child`; only the entry points here need `unsafe`. sys/ knows
//! nobody above it: the stages come in through [`Stages`], which the
//! child's spec implements.

use std::ffi::{c_char, c_int, c_void, CStr};

/// What a stage runs: the spec the supervisor prepared before the clone
/// (`sandbox::child::ChildSpec`), with the stages' entry points.
pub trait Stages: 'static {
    /// Pid 1 of the run's pid namespace.
    fn init_main(&'static self) -> c_int;
    /// The keeper between capsule and the command.
    fn keeper_main(&'static self) -> c_int;
    /// The command's pre-exec stage.
    fn command_main(&'static self) -> c_int;
    /// The program to execute, and its argv and envp: NULL-terminated
    /// pointer arrays into strings the spec owns and never changes.
    fn exec_args(&self) -> (&CStr, &[*const c_char], &[*const c_char]);
    /// The same run through the shell when execve says ENOEXEC (a file
    /// without `#!`): `/bin/sh PROGRAM ARGS...`, the argv NULL-terminated
    /// into strings the spec owns, as execvp(3) does (POSIX).
    fn sh_fallback_args(&self) -> &[*const c_char];
}

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

extern "C" fn init_entry<S: Stages>(arg: *mut c_void) -> c_int {
    // SAFETY: `clone_stage::<S>` passes a pointer made from a `&'static S`
    // (leaked by the supervisor, never written after the clone).
    let spec: &'static S = unsafe { &*(arg as *const S) };
    spec.init_main()
}

extern "C" fn keeper_entry<S: Stages>(arg: *mut c_void) -> c_int {
    // SAFETY: as in `init_entry`.
    let spec: &'static S = unsafe { &*(arg as *const S) };
    spec.keeper_main()
}

extern "C" fn command_entry<S: Stages>(arg: *mut c_void) -> c_int {
    // SAFETY: as in `init_entry`.
    let spec: &'static S = unsafe { &*(arg as *const S) };
    spec.command_main()
}

/// The entry function of `entry` and its argument, `spec`.
fn entry_and_arg<S: Stages>(
    entry: Entry,
    spec: &'static S,
) -> (extern "C" fn(*mut c_void) -> c_int, *mut c_void) {
    let f = match entry {
        Entry::Init => init_entry::<S> as extern "C" fn(*mut c_void) -> c_int,
        Entry::Command => command_entry::<S>,
        Entry::Keeper => keeper_entry::<S>,
    };
    (f, (spec as *const S).cast_mut().cast::<c_void>())
}

/// `clone(flags | CLONE_VM | SIGCHLD)` of a stage on `stack`, reading `spec`.
/// `stack` must not be in use by another live stage (each stage has its own:
/// `spec.command_stack` for the command stage).
pub fn clone_stage<S: Stages>(
    flags: c_int,
    stack: super::StageStack,
    entry: Entry,
    spec: &'static S,
) -> Result<libc::pid_t, i32> {
    let (f, arg) = entry_and_arg(entry, spec);
    // SAFETY: both entries run the stages of `sandbox::child`, which follow
    // the CLONE_VM rules (raw system calls only, no allocation, no
    // thread-locals, no panic); `spec` is 'static and nobody writes it any
    // more (it is shared, read-only, with the supervisor); `stack` is a
    // leaked stage stack (a `StageStack` is only made by `leaked_stack`) used
    // by this stage only.
    unsafe { super::clone_on_stack(flags | libc::CLONE_VM, stack.0, f, arg) }
}

/// As [`clone_stage`], born in the cgroup of the directory `cgroup`
/// (`clone3` with `CLONE_INTO_CGROUP`); an error when clone3 cannot do it,
/// and then nothing was created.
pub fn clone_stage_into_cgroup<S: Stages>(
    flags: c_int,
    stack: super::StageStack,
    cgroup: std::os::fd::RawFd,
    entry: Entry,
    spec: &'static S,
) -> Result<libc::pid_t, i32> {
    let (f, arg) = entry_and_arg(entry, spec);
    // SAFETY: as in `clone_stage`.
    unsafe { super::clone3_into_cgroup(flags, stack, Some(cgroup), f, arg) }
}

/// `execve` of the spec's program; only returns, with the errno, on failure.
/// A file the kernel does not know how to run (ENOEXEC: no `#!`, no known
/// binary format) is run by `/bin/sh` instead, as execvp(3) does, so the
/// command starts as under env(1) and bubblewrap. Only ENOEXEC: a refused
/// exec (Landlock, a noexec mount, the mode) is EACCES and stays refused,
/// and the shell is itself an exec the sandbox checks.
pub fn exec<S: Stages>(spec: &S) -> i32 {
    let (program, argv, envp) = spec.exec_args();
    if argv.last() != Some(&std::ptr::null()) || envp.last() != Some(&std::ptr::null()) {
        return libc::EINVAL;
    }
    // SAFETY: both pointer arrays are NULL-terminated (checked above) and
    // point into the spec's own CStrings, which live as long as the spec
    // (`Stages::exec_args`; `ChildSpec::seal` built them).
    let err = unsafe { super::raw::execve(program, argv.as_ptr(), envp.as_ptr()) };
    let sh_argv = spec.sh_fallback_args();
    if err != libc::ENOEXEC || sh_argv.len() < 3 || sh_argv.last() != Some(&std::ptr::null()) {
        return err;
    }
    // SAFETY: as above; `sh_argv` is NULL-terminated (checked above) and
    // points into the spec's own CStrings (`ChildSpec::seal`).
    let _ = unsafe { super::raw::execve(c"/bin/sh", sh_argv.as_ptr(), envp.as_ptr()) };
    // The shell could not be started either: the program's own error.
    err
}

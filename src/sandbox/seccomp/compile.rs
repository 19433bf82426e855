//! The generator: turns the declarative tables (`allowlist.rs`, `deny.rs`,
//! `sockets.rs`) into ONE compact classic-BPF program.
//!
//! Why capsule assembles this program itself: loading a seccomp filter is not
//! free. The kernel checks, converts and JITs every program it is given, about
//! 0.1 ms per filter plus ~0.8 µs per instruction on the 2-core VMs capsule is
//! measured on (`strace -T` on `capsule exec -- /bin/true`). seccompiler lays
//! rules out linearly, ~5 instructions per syscall, so the three filters
//! capsule used to stack (arch 8, allowlist 1525, deny 369 instructions) cost
//! ~1.7 ms per run, against a start-up budget of ~0.5 ms for everything
//! (`performance.md`). This one program made the same decisions in 105 to
//! 116 instructions on x86_64 and loaded in ~0.17 ms; with the chmod,
//! execveat, IPC and other-process rules it has 122 to 172 (the most without
//! IPC and pid namespaces of the child's own, which need the most checks),
//! ~0.05 ms more at the rate above. Its binary search runs ~7 compares per
//! syscall instead of a linear scan.
//!
//! The program:
//!
//! 1. the architecture check (`arch.rs`): foreign ABI or x32 → KILL_PROCESS;
//! 2. a balanced binary search (`if nr >= k`) over the *decision intervals*
//!    of the syscall number: consecutive numbers with the same outcome
//!    (ALLOW, EPERM, ENOSYS, or "check this syscall's arguments") are one
//!    interval; numbers no table mentions fail with ENOSYS;
//! 3. one small block per argument-checked syscall (`ArgCheck`, see `arg_check.rs`);
//! 4. the shared `return` instructions.
//!
//! Jumps only go forward (as classic BPF requires), conditional jumps reach
//! at most 255 instructions; the assembler checks both and fails the build
//! otherwise. Decisions match the three stacked filters exactly: the tests
//! compile those with seccompiler and compare (`oracle.rs`, `equivalence.rs`).

use std::collections::BTreeMap;

use super::arg_check::ArgCheck;
use super::bpf::{
    arg_high, arg_low, jump, ret_errno, stmt, SockFilter, JA, JEQ_K, JGE_K, JSET_K, LD_W_ABS,
    RET_ALLOW, RET_K,
};
use super::table::Arch;
use super::{allowlist, arch, deny, SeccompOptions};

/// What happens to one syscall number (before argument checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// `return` this seccomp value.
    Return(u32),
    /// Run argument check number `i` (an index into the checks).
    Check(usize),
}

const RET_EPERM: u32 = ret_errno(libc::EPERM);
const RET_ENOSYS: u32 = ret_errno(libc::ENOSYS);

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(
        "seccomp: the generated program needs a jump of {distance} instructions at instruction \
         {at}; classic BPF conditional jumps reach at most 255"
    )]
    JumpTooFar { at: usize, distance: usize },
    #[error("seccomp: the generated program jumps backwards at instruction {at}")]
    JumpBackwards { at: usize },
    #[error("seccomp: the generated program jumps to a place never emitted, at instruction {at}")]
    Unbound { at: usize },
}

/// The compiled program and what it was made of (for the summary).
pub(super) struct Compiled {
    pub program: Vec<SockFilter>,
    /// Syscalls allowed (with or without argument checks).
    pub allowed: usize,
    /// Decision intervals the binary search distinguishes.
    pub intervals: usize,
}

/// The decision for every syscall number the tables mention; every other
/// number fails with ENOSYS. Denial (EPERM) wins over the allowlist, as the
/// deny filter installed last did; an argument check passes to the
/// allowlist's answer and refuses with EPERM.
fn decisions(
    arch: Arch,
    opts: &SeccompOptions,
    checks: &[(u32, ArgCheck, u32)],
) -> BTreeMap<u32, Decision> {
    let mut map = BTreeMap::new();
    for nr in allowlist::ALLOWED.iter().filter_map(|n| nr_u32(arch, n)) {
        map.insert(nr, Decision::Return(RET_ALLOW));
    }
    for (_, names) in deny::denied(opts) {
        for nr in names.iter().filter_map(|n| nr_u32(arch, n)) {
            map.insert(nr, Decision::Return(RET_EPERM));
        }
    }
    for (i, (nr, _, _)) in checks.iter().enumerate() {
        map.insert(*nr, Decision::Check(i));
    }
    map
}

fn nr_u32(arch: Arch, name: &str) -> Option<u32> {
    arch.nr(name).and_then(|nr| u32::try_from(nr).ok())
}

/// Merges the per-number decisions into intervals covering 0..=u32::MAX:
/// `(first number, decision)`, sorted, neighbours always different.
fn intervals(map: &BTreeMap<u32, Decision>) -> Vec<(u32, Decision)> {
    let default = Decision::Return(RET_ENOSYS);
    // Where a decision starts: each mapped number, and the number after it
    // when that one is unmapped (back to the default).
    let mut points: Vec<(u32, Decision)> = vec![(0, default)];
    for (&nr, &d) in map {
        points.push((nr, d));
        match nr.checked_add(1) {
            Some(next) if !map.contains_key(&next) => points.push((next, default)),
            _ => {}
        }
    }
    let mut out: Vec<(u32, Decision)> = Vec::new();
    for (start, d) in points {
        // The same start twice (only 0: the default, then number 0): the later wins.
        if out.last().is_some_and(|&(s, _)| s == start) {
            out.pop();
        }
        // Merge into the previous interval when the decision is the same.
        if out.last().map(|&(_, prev)| prev) != Some(d) {
            out.push((start, d));
        }
    }
    out
}

/// A place in the program, bound once the instruction it names is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label(usize);

enum Insn {
    Plain(SockFilter),
    /// A conditional jump to labels, resolved into offsets at the end.
    Jump {
        code: u16,
        k: u32,
        jt: Label,
        jf: Label,
    },
    /// `ja` to a label.
    Always(Label),
}

/// Where a label points.
#[derive(Debug, Clone, Copy)]
enum Place {
    Unbound,
    At(usize),
    /// Wherever another label points.
    Same(Label),
}

/// A tiny assembler: instructions with symbolic forward jumps.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Place>,
    /// One shared `return` per value, emitted at the end.
    returns: Vec<(u32, Label)>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.labels.push(Place::Unbound);
        Label(self.labels.len() - 1)
    }

    /// A label for instruction `at`.
    fn at(&mut self, at: usize) -> Label {
        let l = self.label();
        self.labels[l.0] = Place::At(at);
        l
    }

    /// A label for the next instruction emitted.
    fn here(&mut self) -> Label {
        self.at(self.insns.len())
    }

    /// Makes `l` point wherever `to` does.
    fn alias(&mut self, l: Label, to: Label) {
        self.labels[l.0] = Place::Same(to);
    }

    fn resolve(&self, mut l: Label) -> Option<usize> {
        // An alias points at a block or a return label, never back at a check entry: this ends.
        loop {
            match self.labels[l.0] {
                Place::Unbound => return None,
                Place::At(at) => return Some(at),
                Place::Same(to) => l = to,
            }
        }
    }

    fn ret(&mut self, value: u32) -> Label {
        if let Some(&(_, l)) = self.returns.iter().find(|(v, _)| *v == value) {
            return l;
        }
        let l = self.label();
        self.returns.push((value, l));
        l
    }

    fn push(&mut self, insn: Insn) -> usize {
        self.insns.push(insn);
        self.insns.len() - 1
    }

    /// Sets the targets of the conditional jump at `at`.
    fn patch(&mut self, at: usize, t: Label, f: Label) {
        if let Insn::Jump { jt, jf, .. } = &mut self.insns[at] {
            *jt = t;
            *jf = f;
        }
    }

    fn finish(mut self) -> Result<Vec<SockFilter>, CompileError> {
        for (value, l) in std::mem::take(&mut self.returns) {
            self.labels[l.0] = Place::At(self.insns.len());
            self.insns.push(Insn::Plain(stmt(RET_K, value)));
        }
        let offset = |at: usize, l: Label| -> Result<usize, CompileError> {
            let target = self.resolve(l).ok_or(CompileError::Unbound { at })?;
            target
                .checked_sub(at + 1)
                .ok_or(CompileError::JumpBackwards { at })
        };
        let short = |at: usize, l: Label| -> Result<u8, CompileError> {
            let d = offset(at, l)?;
            u8::try_from(d).map_err(|_| CompileError::JumpTooFar { at, distance: d })
        };
        self.insns
            .iter()
            .enumerate()
            .map(|(at, insn)| {
                Ok(match *insn {
                    Insn::Plain(f) => f,
                    Insn::Jump { code, k, jt, jf } => jump(code, k, short(at, jt)?, short(at, jf)?),
                    Insn::Always(l) => {
                        let d = offset(at, l)?;
                        let k = u32::try_from(d)
                            .map_err(|_| CompileError::JumpTooFar { at, distance: d })?;
                        stmt(JA, k)
                    }
                })
            })
            .collect()
    }

    /// Emits the binary search over `iv` (non-empty); returns its entry.
    /// `leaf` gives the label of an interval's decision.
    fn search(
        &mut self,
        iv: &[(u32, Decision)],
        leaf: &dyn Fn(&mut Asm, Decision) -> Label,
    ) -> Label {
        if iv.len() == 1 {
            return leaf(self, iv[0].1);
        }
        let entry = self.here();
        let mid = iv.len() / 2;
        let placeholder = entry;
        let at = self.push(Insn::Jump {
            code: JGE_K,
            k: iv[mid].0,
            jt: placeholder,
            jf: placeholder,
        });
        let below = self.search(&iv[..mid], leaf);
        let above = self.search(&iv[mid..], leaf);
        self.patch(at, above, below);
        entry
    }

    /// Emits `check`; returns its entry. `loaded` is the argument already in A.
    fn check(&mut self, check: &ArgCheck, pass: Label, deny: Label, loaded: Option<u8>) -> Label {
        match check {
            ArgCheck::Pass => pass,
            ArgCheck::Deny => deny,
            ArgCheck::Match {
                arg,
                arms,
                otherwise,
            } => {
                if arms.iter().all(|(values, _)| values.is_empty()) {
                    return self.check(otherwise, pass, deny, loaded);
                }
                let entry = self.here();
                if loaded != Some(*arg) {
                    self.push(Insn::Plain(stmt(LD_W_ABS, arg_low(*arg))));
                }
                // The compare chain: each value jumps to its arm, a miss falls
                // through to the next compare; the last miss goes to `otherwise`.
                let mut compares: Vec<(usize, usize)> = Vec::new(); // (instruction, arm)
                for (arm, (values, _)) in arms.iter().enumerate() {
                    for &v in values {
                        let at = self.push(Insn::Jump {
                            code: JEQ_K,
                            k: v,
                            jt: entry,
                            jf: entry,
                        });
                        compares.push((at, arm));
                    }
                }
                let targets: Vec<Label> = arms
                    .iter()
                    .map(|(_, sub)| self.check(sub, pass, deny, Some(*arg)))
                    .collect();
                let other = self.check(otherwise, pass, deny, Some(*arg));
                for (i, &(at, arm)) in compares.iter().enumerate() {
                    let miss = if i + 1 == compares.len() {
                        other
                    } else {
                        self.at(at + 1)
                    };
                    self.patch(at, targets[arm], miss);
                }
                entry
            }
            ArgCheck::AnyBit {
                arg,
                mask,
                then,
                otherwise,
            } => {
                let entry = self.here();
                if loaded != Some(*arg) {
                    self.push(Insn::Plain(stmt(LD_W_ABS, arg_low(*arg))));
                }
                let at = self.push(Insn::Jump {
                    code: JSET_K,
                    k: *mask,
                    jt: entry,
                    jf: entry,
                });
                let t = self.check(then, pass, deny, Some(*arg));
                let f = self.check(otherwise, pass, deny, Some(*arg));
                self.patch(at, t, f);
                entry
            }
            ArgCheck::Null {
                arg,
                then,
                otherwise,
            } => {
                // A = low word; if 0, A = high word; both 0: `then`.
                let entry = self.here();
                if loaded != Some(*arg) {
                    self.push(Insn::Plain(stmt(LD_W_ABS, arg_low(*arg))));
                }
                let low = self.push(Insn::Jump {
                    code: JEQ_K,
                    k: 0,
                    jt: entry,
                    jf: entry,
                });
                self.push(Insn::Plain(stmt(LD_W_ABS, arg_high(*arg))));
                let high = self.push(Insn::Jump {
                    code: JEQ_K,
                    k: 0,
                    jt: entry,
                    jf: entry,
                });
                // A holds either word now: the branches load what they need.
                let t = self.check(then, pass, deny, None);
                let f = self.check(otherwise, pass, deny, None);
                let next = self.at(low + 1);
                self.patch(low, next, f);
                self.patch(high, t, f);
                entry
            }
        }
    }
}

/// Builds the program for `arch` and `opts`.
pub(super) fn compile(arch: Arch, opts: &SeccompOptions) -> Result<Compiled, CompileError> {
    // (number, check, what the check's Pass returns: the allowlist's answer).
    let allowed: Vec<u32> = allowlist::ALLOWED
        .iter()
        .filter_map(|n| nr_u32(arch, n))
        .collect();
    let checks: Vec<(u32, ArgCheck, u32)> = deny::arg_checks(opts)
        .into_iter()
        .filter_map(|(name, check)| {
            let nr = nr_u32(arch, name)?;
            let pass = if allowed.contains(&nr) {
                RET_ALLOW
            } else {
                RET_ENOSYS
            };
            Some((nr, check, pass))
        })
        .collect();
    let iv = intervals(&decisions(arch, opts, &checks));

    let mut asm = Asm::default();
    for insn in arch::prologue(arch) {
        asm.push(Insn::Plain(insn));
    }
    // The prologue ends with A = nr, falling through to the search's root.
    let check_entries: Vec<Label> = checks.iter().map(|_| asm.label()).collect();
    let leaf = |asm: &mut Asm, d: Decision| match d {
        Decision::Return(v) => asm.ret(v),
        Decision::Check(i) => check_entries[i],
    };
    let root = asm.search(&iv, &leaf);
    if iv.len() == 1 {
        // No compare was emitted: jump to the one decision.
        asm.push(Insn::Always(root));
    }
    for (&entry, (_, check, pass)) in check_entries.iter().zip(&checks) {
        let pass = asm.ret(*pass);
        let deny = asm.ret(RET_EPERM);
        let block = asm.check(check, pass, deny, None);
        asm.alias(entry, block);
    }
    Ok(Compiled {
        program: asm.finish()?,
        allowed: allowed.len(),
        intervals: iv.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_merge_neighbours_and_cover_everything() {
        let mut m = BTreeMap::new();
        for nr in [0, 1, 2, 5, 6] {
            m.insert(nr, Decision::Return(RET_ALLOW));
        }
        m.insert(3, Decision::Return(RET_EPERM));
        m.insert(7, Decision::Check(0));
        m.insert(u32::MAX, Decision::Return(RET_ALLOW));
        let iv = intervals(&m);
        assert_eq!(
            iv,
            vec![
                (0, Decision::Return(RET_ALLOW)),
                (3, Decision::Return(RET_EPERM)),
                (4, Decision::Return(RET_ENOSYS)),
                (5, Decision::Return(RET_ALLOW)),
                (7, Decision::Check(0)),
                (8, Decision::Return(RET_ENOSYS)),
                (u32::MAX, Decision::Return(RET_ALLOW)),
            ]
        );
        assert!(intervals(&BTreeMap::new()) == vec![(0, Decision::Return(RET_ENOSYS))]);
    }

    #[test]
    fn a_long_check_chain_fails_instead_of_wrapping_offsets() {
        let values: Vec<u32> = (0..300).collect();
        let mut asm = Asm::default();
        let pass = asm.ret(RET_ALLOW);
        let deny = asm.ret(RET_EPERM);
        asm.check(
            &ArgCheck::one_of(0, &values, ArgCheck::Deny, ArgCheck::Pass),
            pass,
            deny,
            None,
        );
        assert!(matches!(asm.finish(), Err(CompileError::JumpTooFar { .. })));
    }
}

//! The judge: whether a process, thread or process group is of the run.
//! The signal part asks it for every target, the process part for every
//! task it counts.
//!
//! Who is "of the run": the command stage made a session of its own
//! (setsid) before it was filtered, so the run's processes are exactly the
//! descendants of the command — the members of the command's session, and of
//! sessions its descendants made. Since a process can only join a session by
//! being forked inside it, and a process group lives in one session:
//! * a process in the command's session is of the run (while the command's
//!   pid is still the command's: checked by its start time);
//! * a process in capsule's own session is not (tool processes, the
//!   terminal watchdog, whatever capsule's caller started);
//! * otherwise the parent chain decides: reaching the command means of the
//!   run; reaching pid 1 or another process outside means not. Without a pid
//!   namespace the keeper between capsule and the command
//!   (`sandbox::child::keeper_main`) is the run's child subreaper, so a
//!   daemon of the run whose parent exited is reparented to it: every child
//!   of the keeper is of the run (it makes none but the command), the keeper
//!   itself is not (while its pid is the keeper's: checked by its start
//!   time). Should the keeper be gone, capsule (a child subreaper too)
//!   inherits them: a child of capsule that is
//!   not the command, not one capsule had before the run, and in a session of
//!   its own counts as of the run when it carries the run's marks —
//!   no_new_privs and at least as many seccomp filters as the command
//!   (capsule's own plus the run's two). A host process meeting all of that
//!   (an orphan of a tool, in a session of its own, running under two more
//!   seccomp filters than capsule) is the one case this cannot tell apart.
//! * kill(-pgid) and F_SETOWN(-pgid): the group's leader, or when it has
//!   exited any member, decides for the whole group (one session).
//!
//! The walk is bounded: at most [`MAX_HOPS`] `/proc/PID/stat` reads up the
//! parent chain, and for a process group whose leader has exited a scan of
//! at most [`MAX_SCAN`](super::procfs::MAX_SCAN) `/proc` entries.

use super::procfs::{ProcFs, Procs};

/// The longest parent chain walked for one call.
pub const MAX_HOPS: usize = 1024;

type Pid = libc::pid_t;

/// What the guard knows about the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub supervisor: Pid,
    pub supervisor_session: Pid,
    /// The command and its start time.
    pub child: Pid,
    pub child_start: u64,
    /// The keeper (no pid namespace: capsule's child, the command's parent)
    /// and its start time.
    pub keeper: Option<(Pid, u64)>,
    /// Children capsule had before the run: never of the run.
    pub inherited: Vec<Pid>,
    /// The fewest seccomp filters a process of the run can have.
    pub tree_filters: u32,
}

impl Tree {
    /// The run of `child` (the command, not yet reaped), under `keeper`
    /// when there is one. None when `/proc` does not show this process as
    /// itself (another pid namespace's /proc): then no decision could be sound.
    pub fn for_run(child: Pid, keeper: Option<Pid>, inherited: &[Pid]) -> Option<Tree> {
        let me = nix::unistd::getpid().as_raw();
        let own = std::fs::read_link("/proc/self").ok()?;
        if own.to_str()?.parse::<Pid>().ok()? != me {
            return None;
        }
        let procs = ProcFs;
        let child_start = procs.stat(child)?.start;
        let keeper = match keeper {
            Some(k) => Some((k, procs.stat(k)?.start)),
            None => None,
        };
        let filters = procs.status(me)?.seccomp_filters.unwrap_or(0);
        Some(Tree {
            supervisor: me,
            supervisor_session: nix::unistd::getsid(None).ok()?.as_raw(),
            child,
            child_start,
            keeper,
            inherited: inherited.to_vec(),
            tree_filters: filters + 2,
        })
    }
}

/// Decides notifications for one run.
pub struct Judge<'a, P: Procs> {
    pub tree: &'a Tree,
    pub procs: P,
}

impl<P: Procs> Judge<'_, P> {
    /// Whether the command still holds its pid (alive or not yet reaped).
    fn child_is_ours(&self) -> bool {
        self.procs
            .stat(self.tree.child)
            .is_some_and(|s| s.start == self.tree.child_start)
    }

    /// Whether the process (or thread) `target` belongs to the run.
    pub fn in_tree(&self, target: Pid) -> bool {
        let t = self.tree;
        if target <= 0 || target == t.supervisor || t.keeper.is_some_and(|(k, _)| k == target) {
            return false;
        }
        let mut cur = target;
        let Some(mut st) = self.procs.stat(cur) else {
            return false;
        };
        for _ in 0..MAX_HOPS {
            if cur == t.child {
                return st.start == t.child_start;
            }
            if st.session == t.child {
                return self.child_is_ours();
            }
            if st.session == t.supervisor_session {
                return false;
            }
            if let Some((keeper, start)) = t.keeper {
                if st.ppid == keeper {
                    return self.procs.stat(keeper).is_some_and(|k| k.start == start);
                }
            }
            if st.ppid == t.supervisor {
                return self.orphan_of_run(cur);
            }
            if st.ppid <= 1 {
                return false;
            }
            match self.procs.stat(st.ppid) {
                Some(parent) => {
                    cur = st.ppid;
                    st = parent;
                }
                // The parent just exited: `cur` is being reparented; look again.
                None => match self.procs.stat(cur) {
                    Some(again) if again.ppid != st.ppid => st = again,
                    _ => return false,
                },
            }
        }
        false
    }

    /// A child of capsule that is not the command and not in the command's
    /// session: of the run only if it carries the run's marks.
    fn orphan_of_run(&self, pid: Pid) -> bool {
        if self.tree.inherited.contains(&pid) {
            return false;
        }
        self.procs.status(pid).is_some_and(|s| {
            s.no_new_privs
                && s.seccomp_filters
                    .is_some_and(|n| n >= self.tree.tree_filters)
        })
    }

    /// Whether process group `pgid` is the run's; None: no such group.
    pub fn group_in_tree(&self, pgid: Pid) -> Option<bool> {
        if pgid <= 0 {
            return Some(false);
        }
        // A group is named after the process that made it, and while the
        // group lives no other process can get that pid: a live process with
        // that pid is the maker, and the group lives in a session it was in.
        if self.procs.stat(pgid).is_some() {
            return Some(self.in_tree(pgid));
        }
        self.procs.group_member(pgid).map(|m| self.in_tree(m))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::guards::procfs::{Stat, Status};
    use std::collections::BTreeMap;

    /// A process table: pid -> (ppid, pgrp, session, start, nnp, filters).
    pub(in crate::guards) struct Table(pub BTreeMap<Pid, (Pid, Pid, Pid, u64, bool, u32)>);
    impl Procs for Table {
        fn stat(&self, pid: Pid) -> Option<Stat> {
            self.0
                .get(&pid)
                .map(|&(ppid, pgrp, session, start, _, _)| Stat {
                    ppid,
                    pgrp,
                    session,
                    start,
                })
        }
        fn status(&self, pid: Pid) -> Option<Status> {
            self.0.get(&pid).map(|&(_, _, _, _, nnp, n)| Status {
                no_new_privs: nnp,
                seccomp_filters: Some(n),
            })
        }
        fn group_member(&self, pgid: Pid) -> Option<Pid> {
            self.0
                .iter()
                .find(|(_, v)| v.1 == pgid)
                .map(|(pid, _)| *pid)
        }
    }

    pub(in crate::guards) const SUP: Pid = 100;
    pub(in crate::guards) const SUP_SID: Pid = 90;
    pub(in crate::guards) const CHILD: Pid = 200;

    pub(in crate::guards) fn tree() -> Tree {
        Tree {
            supervisor: SUP,
            supervisor_session: SUP_SID,
            child: CHILD,
            child_start: 5000,
            keeper: None,
            inherited: vec![150],
            tree_filters: 3,
        }
    }

    const KEEPER: Pid = 110;

    /// The no-namespace path: capsule (100) -> keeper (110) -> command (200);
    /// the run's orphans are the keeper's children.
    #[test]
    fn under_a_keeper_its_children_are_the_run_and_it_is_not() {
        let t = Tree {
            keeper: Some((KEEPER, 4000)),
            ..tree()
        };
        let mut h = host();
        h.0.insert(KEEPER, (SUP, SUP_SID, SUP_SID, 4000, false, 1));
        h.0.insert(CHILD, (KEEPER, CHILD, CHILD, 5000, true, 3));
        // A setsid'd orphan of the run, reparented to the keeper, and its child.
        h.0.insert(210, (KEEPER, 210, 210, 5010, true, 3));
        h.0.insert(211, (210, 210, 210, 5011, true, 3));
        // Even without the run's marks (the keeper makes no other child).
        h.0.insert(212, (KEEPER, 212, 212, 5012, false, 0));
        let j = judge(&t, h);
        for pid in [CHILD, 201, 202, 203, 210, 211, 212] {
            assert!(j.in_tree(pid), "{pid} is of the run");
        }
        for pid in [KEEPER, SUP, 90, 150, 300, 301, 400, 500] {
            assert!(!j.in_tree(pid), "{pid} is not of the run");
        }
        assert_eq!(j.group_in_tree(SUP_SID), Some(false));
        // The keeper's pid reused by another process: its children are not the run's.
        let mut h = host();
        h.0.insert(KEEPER, (1, KEEPER, KEEPER, 9999, false, 0));
        h.0.insert(210, (KEEPER, 210, 210, 5010, true, 3));
        let j = judge(&t, h);
        assert!(!j.in_tree(210));
    }

    /// A host with capsule (100) in the caller's session 90, the command 200
    /// in its own session, and processes around them.
    pub(in crate::guards) fn host() -> Table {
        let mut t = BTreeMap::new();
        t.insert(1, (0, 1, 1, 1, false, 0));
        t.insert(90, (1, 90, 90, 10, false, 1)); // the shell that ran capsule
        t.insert(SUP, (90, 90, SUP_SID, 20, false, 1));
        t.insert(150, (SUP, 150, 150, 30, false, 1)); // inherited, own session
        t.insert(CHILD, (SUP, CHILD, CHILD, 5000, true, 3));
        t.insert(201, (CHILD, CHILD, CHILD, 5001, true, 3)); // child of the command
        t.insert(202, (201, 202, 202, 5002, true, 3)); // setsid'd grandchild
        t.insert(203, (202, 202, 202, 5003, true, 4)); // in 202's session
        t.insert(204, (SUP, 204, 204, 5004, true, 3)); // daemon reparented to capsule
        t.insert(205, (204, 205, 205, 5005, true, 3)); // its child, own session
        t.insert(206, (SUP, CHILD, CHILD, 5006, true, 3)); // orphan in the command's session
        t.insert(300, (SUP, 300, SUP_SID, 6000, false, 1)); // a tool process
        t.insert(301, (SUP, 301, 301, 6001, false, 1)); // a tool's setsid'd orphan
        t.insert(302, (SUP, 302, 302, 6002, true, 2)); // same, NNP but fewer filters
        t.insert(400, (1, 400, 400, 7000, false, 0)); // a host daemon
        t.insert(401, (400, 400, 400, 7001, true, 5)); // its NNP child with filters
        t.insert(500, (1, 500, 500, 7500, true, 3)); // reparented to init, run-like marks
        Table(t)
    }

    pub(in crate::guards) fn judge(t: &Tree, p: Table) -> Judge<'_, Table> {
        Judge { tree: t, procs: p }
    }

    #[test]
    fn the_run_and_only_the_run_is_in_the_tree() {
        let t = tree();
        let j = judge(&t, host());
        for pid in [CHILD, 201, 202, 203, 204, 205, 206] {
            assert!(j.in_tree(pid), "{pid} is of the run");
        }
        for pid in [0, -1, 1, 90, SUP, 150, 300, 301, 302, 400, 401, 500, 999] {
            assert!(!j.in_tree(pid), "{pid} is not of the run");
        }
    }

    #[test]
    fn a_reused_command_pid_is_not_the_command() {
        let t = tree();
        let mut h = host();
        // The command exited and was reaped; its pid now names a host process.
        h.0.insert(CHILD, (1, CHILD, CHILD, 9999, false, 0));
        let j = judge(&t, h);
        assert!(!j.in_tree(CHILD));
        // Its old session is no longer trusted either.
        assert!(!j.in_tree(201));
        assert!(!j.in_tree(206));
    }

    #[test]
    fn groups() {
        let t = tree();
        let j = judge(&t, host());
        assert_eq!(j.group_in_tree(CHILD), Some(true));
        assert_eq!(j.group_in_tree(202), Some(true));
        assert_eq!(j.group_in_tree(SUP_SID), Some(false));
        assert_eq!(j.group_in_tree(400), Some(false));
        assert_eq!(j.group_in_tree(777), None);
        // A group whose leader exited: a member decides.
        let mut h = host();
        h.0.remove(&202);
        h.0.insert(203, (SUP, 202, 202, 5003, true, 4));
        let j = judge(&t, h);
        assert_eq!(j.group_in_tree(202), Some(true));
        let mut h = host();
        h.0.remove(&400);
        h.0.insert(401, (1, 400, 400, 7001, true, 5));
        let j = judge(&t, h);
        assert_eq!(j.group_in_tree(400), Some(false));
    }

    #[test]
    fn a_looping_or_vanishing_chain_is_refused() {
        let t = tree();
        let mut h = host();
        // A cycle (impossible in a kernel, possible across pid reuse reads).
        h.0.insert(600, (601, 600, 600, 1, false, 0));
        h.0.insert(601, (600, 601, 601, 1, false, 0));
        // A parent that vanished, the child not yet reparented.
        h.0.insert(602, (603, 602, 602, 1, true, 3));
        let j = judge(&t, h);
        assert!(!j.in_tree(600));
        assert!(!j.in_tree(602));
    }
}

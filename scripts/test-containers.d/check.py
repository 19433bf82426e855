#!/usr/bin/env python3
"""Judge one container shape's log (scripts/test-containers.d/in-container.sh).

    check.py SHAPE LOG [--seconds N] [--podman-rc N]

Each check prints PASS, FAIL or EXPECTED (a protection this shape cannot
give, NAMED here with the reason and the remedy, and reported by capsule: a
pass) and the last line is `SHAPE <shape> N passed, N failed (...)`.

EXPECT is the target of issue 19: what each shape must give. A protection
that is given where this table says the shape cannot give it fails too
("better than expected"): the table is then out of date and must say so.
"""
import json
import re
import sys

MASKED_PROC = (
    "the container runtime masks parts of /proc (kcore, keys, sysrq-trigger...) with locked "
    "mounts, so the kernel refuses a fresh procfs below them; given back by podman "
    "--security-opt unmask=ALL, Docker --security-opt systempaths=unconfined, Kubernetes "
    "procMount: Unmasked, or a user-namespaced pod"
)
NO_USERNS = (
    "RuntimeDefault refuses unshare, mount and namespace flags to clone (clone3: ENOSYS), so "
    "capsule takes its no-namespace path; given back by the Localhost profile "
    "examples/kubernetes/capsule-seccomp.json"
)

# The protections of the view, each with the words capsule's missing or
# limitations must use when it is not given (None: nothing to report, e.g.
# the network namespace under `network: none`, where seccomp refuses IP
# sockets with or without it).
PROTECTIONS = {
    "view": ("read-only view",),
    "read_only_host": ("read-only view",),
    "private_proc": ("/proc",),
    "private_tmp": ("/tmp",),
    "private_shm": ("/dev/shm",),
    "devpts": ("/dev/pts", "pseudo-terminal"),
    "netns": None,
    "pid_namespace": ("pid namespace",),
}

FULL_VIEW_BUT_PROC = {
    "runs": True,
    "not_given": {"private_proc": MASKED_PROC},
    # A descendant reads its own /proc/self "as far as it can be given".
    "proc_self": True,
}
EXPECT = {
    "pod-restricted": {"uid": 65534, **FULL_VIEW_BUT_PROC},
    "pod-localhost": {"uid": 65534, **FULL_VIEW_BUT_PROC},
    "root-default": {"uid": 0, **FULL_VIEW_BUT_PROC},
    "rootless": {"uid": 0, **FULL_VIEW_BUT_PROC},
    "pod-runtimedefault": {
        "uid": 65534,
        "runs": True,
        # (the pid namespace's tree kill is given by capsule's keeper)
        "not_given": {p: NO_USERNS for p in PROTECTIONS if p != "pid_namespace"},
        # Without a pid namespace a descendant cannot read its own /proc/self
        # (issue 19 item 3); capsule says so in enforcement.missing.
        "proc_self": False,
        "no_network_guard": (
            "RuntimeDefault allows pidfd_getfd only with CAP_SYS_PTRACE, so capsule's network guard "
            "cannot take the run's socket: proxy mode holds by Landlock's TCP port rule (the port "
            "pinned, not the address) and allow_unix_sockets is refused; given back by the Localhost "
            "profile examples/kubernetes/capsule-seccomp.json"
        ),
    },
}


class Judge:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.lines = []

    def ok(self, name, detail=""):
        self.passed += 1
        self.lines.append(f"  PASS     {name}{': ' + detail if detail else ''}")

    def expected(self, name, detail):
        self.passed += 1
        self.lines.append(f"  EXPECTED {name}: not given here: {detail}")

    def fail(self, name, detail):
        self.failed += 1
        self.lines.append(f"  FAIL     {name}: {detail}")

    def check(self, cond, name, good, bad):
        if cond:
            self.ok(name, good)
        else:
            self.fail(name, bad)


def parse(log):
    rec, tests, manifest = {}, {}, None
    cur = None
    for line in log.splitlines():
        m = re.match(r"^@@(\w+) rc=(-?\d+) (.*)$", line)
        if m and cur is None:
            name, rc, rest = m.group(1), int(m.group(2)), m.group(3)
            dec = json.JSONDecoder()
            try:
                out, end = dec.raw_decode(rest)
                err = json.loads(rest[end:].strip() or '""')
            except ValueError:
                out, err = {"unparsed": rest}, ""
            rec[name] = {"rc": rc, "out": out, "err": err}
            continue
        m = re.match(r"^@@(id|home|startup) (.*)$", line)
        if m and cur is None:
            rec[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^@@test-begin (\S+)", line)
        if m:
            cur = m.group(1)
            tests[cur] = {"lines": [], "rc": None}
            continue
        m = re.match(r"^@@test-end (\S+) rc=(-?\d+)", line)
        if m and cur:
            tests[cur]["rc"] = int(m.group(2))
            cur = None
            continue
        if line.startswith("@@manifest-begin"):
            manifest = {"lines": [], "rc": None}
            cur = "@manifest"
            continue
        m = re.match(r"^@@manifest-end rc=(-?\d+)", line)
        if m and manifest is not None:
            manifest["rc"] = int(m.group(1))
            cur = None
            continue
        if line.startswith("@@done"):
            rec["done"] = True
        if cur == "@manifest":
            manifest["lines"].append(line)
        elif cur:
            tests[cur]["lines"].append(line)
    return rec, tests, manifest


def declared(words, texts):
    return any(w in t for w in words for t in texts)


def audit_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and '"run_id"' in line and '"outcome"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def main(argv):
    shape, path = argv[0], argv[1]
    seconds = argv[argv.index("--seconds") + 1] if "--seconds" in argv else "?"
    podman_rc = int(argv[argv.index("--podman-rc") + 1]) if "--podman-rc" in argv else 0
    exp = EXPECT[shape]
    log = open(path, errors="replace").read()
    rec, tests, manifest = parse(log)
    j = Judge()
    tag = f"[{shape}] "

    if not rec.get("done"):
        tail = "\n".join(log.splitlines()[-5:])
        j.fail(tag + "container", f"the shape did not finish (podman rc={podman_rc}): {tail}")
    uid = re.search(r"uid=(\d+)", rec.get("id", ""))
    j.check(uid and int(uid.group(1)) == exp["uid"], tag + "user",
            f"uid {exp['uid']}", f"expected uid {exp['uid']}, got {rec.get('id')}")

    ex = rec.get("exec", {"rc": -1, "out": {}, "err": ""})
    doc = rec.get("doctor", {"out": {}})["out"]
    chk = rec.get("check", {"out": {}})["out"]
    dry = rec.get("dryrun", {"out": {}})["out"]
    enf = ex["out"].get("enforcement") or {}
    view = enf.get("view")
    ran = ex["rc"] == 0 and ex["out"].get("stdout", "").strip() == "ok"
    err1 = (ex["err"] or "").strip().splitlines()[-1:] or [""]
    if exp["runs"]:
        j.check(ran, tag + "exec runs the default policy", "exit 0",
                f"exit {ex['rc']}: {err1[0]}")
    else:
        j.check(ex["rc"] == 125 and err1[0], tag + "exec refuses with the reason", err1[0],
                f"exit {ex['rc']}: {err1[0]}")
    dp = doc.get("default_policy") or {}
    j.check(dp.get("runs") == ran, tag + "doctor predicts whether exec runs",
            f"runs={dp.get('runs')}", f"doctor says runs={dp.get('runs')}, exec {'ran' if ran else 'did not run'}")
    j.check(chk.get("ok") == ran, tag + "check predicts whether exec runs",
            f"ok={chk.get('ok')}", f"check says ok={chk.get('ok')} problems={chk.get('problems')}, exec {'ran' if ran else 'did not run'}")
    if ran:
        for who, v in (("doctor", dp.get("view")), ("check", chk.get("view") is not None),
                       ("exec --dry-run", dry.get("view") is not None)):
            j.check(bool(v) == (view is not None), tag + f"{who} predicts the view",
                    f"view={view is not None}", f"{who} says view={bool(v)}, exec view={view is not None}")
        if view is not None and dry.get("view"):
            diff = {k: (dry["view"][k], view[k]) for k in view
                    if k in dry["view"] and isinstance(view[k], bool) and dry["view"][k] != view[k]}
            j.check(not diff, tag + "exec --dry-run predicts each part of the view", "",
                    f"(dry-run, exec) differ: {diff}")
        kills = {"doctor": doc.get("tree_kill"), "check": chk.get("tree_kill"),
                 "dry-run": dry.get("tree_kill"), "exec": enf.get("tree_kill")}
        j.check(len(set(kills.values())) == 1, tag + "tree_kill predicted", str(kills["exec"]),
                f"differs: {kills}")
        miss_exec = sorted(enf.get("missing") or [])
        miss_doc = sorted(dp.get("missing") or [])
        j.check(miss_exec == miss_doc, tag + "doctor predicts enforcement.missing",
                f"{len(miss_exec)} items", f"doctor {miss_doc} vs exec {miss_exec}")
        lim_exec = enf.get("limitations")
        if lim_exec is not None:
            j.check(sorted(lim_exec) == sorted(dp.get("limitations") or []),
                    tag + "doctor predicts enforcement.limitations", f"{len(lim_exec)} items",
                    f"doctor {dp.get('limitations')} vs exec {lim_exec}")

        # Each protection: given, or not given as named here AND reported.
        said = (enf.get("missing") or []) + (enf.get("limitations") or []) \
            + (dp.get("missing") or []) + (dp.get("limitations") or [])
        given = {
            "view": view is not None,
            "read_only_host": bool(view and view.get("read_only_host")),
            "private_proc": bool(view and view.get("private_proc")),
            "private_tmp": bool(view and view.get("private_tmp")),
            "private_shm": bool(view and view.get("private_shm")),
            "devpts": bool(view and view.get("devpts")),
            "netns": bool(enf.get("netns")),
            # What the pid namespace gave the run's tree (killed whole when
            # capsule dies): without one, capsule's keeper gives it, unless
            # capsule says a setsid'd descendant can outlive it.
            "pid_namespace": enf.get("tree_kill") == "pid-namespace"
            or not declared(("setsid'd descendant",), said),
        }
        for p, words in PROTECTIONS.items():
            why = exp["not_given"].get(p)
            name = tag + p
            if given[p] and why is None:
                j.ok(name, "given")
            elif given[p]:
                j.fail(name, f"given, better than this shape's expectation ({why}): update EXPECT")
            elif why is None:
                j.fail(name, f"not given, where this shape must give it; capsule says: "
                             f"{[s for s in said if words and declared(words, [s])] or 'nothing'}")
            elif words is None or declared(words, said):
                j.expected(name, why)
            else:
                j.fail(name, f"not given and not reported by capsule (silently weaker): {why}")

    # Credentials (issue 38): injected by the proxy, never in the run or in
    # anything capsule printed.
    cr = rec.get("credential", {"rc": -1, "out": {}, "err": ""})
    out = cr["out"].get("stdout", "")
    used = [c.get("name") for c in cr["out"].get("credentials_used") or []]
    leaked = "ct-cred-4711" in json.dumps(cr)
    j.check(cr["rc"] == 0 and '"auth_ok": true' in out and "placeholder=True" in out
            and used == ["ct"] and not leaked,
            tag + "credential injected by the proxy (run holds a placeholder)", "",
            f"exit {cr['rc']}, stdout {out[-200:]!r}, credentials_used {used}, value in capsule's output: "
            f"{leaked}: {cr['err'][-300:]}")

    # Network mode proxy: exec --dry-run predicts the path exec takes.
    dp_ = rec.get("dryrun_proxy", {"out": {}})["out"]
    xp = rec.get("exec_proxy", {"rc": -1, "out": {}, "err": ""})
    want = (dp_.get("network") or {}).get("path")
    got = (xp["out"].get("enforcement") or {}).get("network_path")
    j.check(xp["rc"] == 0 and want == got, tag + "exec --dry-run predicts the proxy's path",
            str(got), f"exec exit {xp['rc']} took {got!r}, --dry-run said {want!r}: {xp['err'][-300:]}")
    dnet = (doc.get("proxy") or {}).get("netns")
    j.check(dnet == (got == "netns"), tag + "doctor predicts the proxy's network namespace",
            f"netns={dnet}", f"doctor says netns={dnet}, exec took {got!r}")
    if got and got != "netns":
        # On the pod's own network: capsule's network guard makes every
        # connect itself (the proxy's address pinned), or its absence is
        # named in the result, predicted by doctor, and expected here.
        lims = (xp["out"].get("enforcement") or {}).get("limitations") or []
        guard = not any("without capsule's network guard" in l for l in lims)
        dguard = (doc.get("proxy") or {}).get("guard")
        j.check(dguard == guard, tag + "doctor predicts capsule's network guard",
                f"guard={dguard}", f"doctor says guard={dguard}, exec {'used' if guard else 'lacked'} it")
        why = exp.get("no_network_guard")
        name = tag + "network guard (the proxy's address pinned)"
        if guard and why is None:
            j.ok(name, "given")
        elif guard:
            j.fail(name, f"given, better than this shape's expectation ({why}): update EXPECT")
        elif why is None:
            j.fail(name, f"not given, where this shape must give it: {lims}")
        elif "pidfd_getfd" in json.dumps(lims) and "pidfd_getfd" in json.dumps(doc.get("advice")):
            j.expected(name, why)
        else:
            j.fail(name, f"not given and the reason not named by capsule: {lims}")

    # The pod's own processes, outside capsule: the Localhost profile gives
    # capsule its namespaces through clone only, never unshare (EPERM = 1).
    if shape in ("pod-localhost", "pod-runtimedefault"):
        uo = rec.get("userns_outside", {"rc": -1, "out": {}, "err": ""})["out"]
        j.check(uo.get("rc") == -1 and uo.get("errno") == 1,
                tag + "unshare(CLONE_NEWUSER) outside capsule", "EPERM",
                f"the profile lets any process of the pod make a user namespace by unshare: {uo}")

    pe = rec.get("proc_environ", {"rc": -1, "out": {}, "err": ""})
    leaked = "ct-secret-4711" in json.dumps(pe["out"])
    j.check(not leaked and pe["rc"] == 0, tag + "/proc/<pid>/environ of the agent host beside the run",
            "unreadable", "READABLE: ESCAPE" if leaked else f"capsule exit {pe['rc']}: {pe['err'][-200:]}")
    ps = rec.get("proc_self", {"rc": -1, "out": {}, "err": ""})
    self_ok = "self-ok" in (ps["out"].get("stdout") or "")
    if exp["proc_self"]:
        j.check(self_ok, tag + "a descendant reads its own /proc/self", "",
                f"exit {ps['rc']}: {(ps['out'].get('stderr') or ps['err'])[-300:]}")
    elif self_ok:
        j.fail(tag + "a descendant reads its own /proc/self", "given, better than expected: update EXPECT")
    else:
        said = " ".join((ps["out"].get("enforcement") or {}).get("missing") or [])
        if "/proc/self" in said:
            j.expected(tag + "a descendant reads its own /proc/self",
                       "no pid namespace, no procfs of the run's own (enforcement.missing says so)")
        else:
            j.fail(tag + "a descendant reads its own /proc/self", "not given and not reported")

    # The audit record where the home is not writable (a pod), and `-`.
    for name, what in (("audit_default", "the default audit record"),
                       ("audit_stderr", "--audit-log -")):
        a = rec.get(name, {"rc": -1, "out": {}, "err": ""})
        rid = a["out"].get("run_id")
        lines = [x for x in audit_lines(a["err"]) if x.get("run_id") == rid]
        ok_run = a["rc"] == 0 or (not exp["runs"] and a["rc"] == 125)
        err_lines = [x for x in a["err"].splitlines() if x.startswith("capsule:") and "audit" in x]
        if name == "audit_stderr" or rec.get("home") == "unwritable":
            j.check(ok_run and len(lines) == 1, tag + what + f" (home {rec.get('home')})",
                    "one JSON line on stderr",
                    f"exit {a['rc']}, {len(lines)} records on stderr: {a['err'][-300:]}")
        else:
            j.check(ok_run and not err_lines, tag + what + f" (home {rec.get('home')})",
                    "written to the state directory", f"exit {a['rc']}: {err_lines}")

    # The manifest's own agent step.
    if manifest is not None:
        text = "\n".join(manifest["lines"])
        recs = [x for x in audit_lines(text) if x.get("agent_id") == "agent-step"]
        good = manifest["rc"] == 0 and "step ok" in text and "READABLE" not in text \
            and re.search(r"^denied[^\n]* /etc/shadow", text, re.M) and len(recs) == 1
        j.check(good, tag + "examples/kubernetes/capsule-pod.yaml's agent step",
                "ran confined; its audit record is in the pod's log",
                f"rc={manifest['rc']}, audit records {len(recs)}: {text[-600:]}")

    # capsule's own test binaries, as the shape's user.
    tp = tf = 0
    for name, t in tests.items():
        text = "\n".join(t["lines"])
        res = re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed", text)
        skips = sorted(set(re.findall(r"^SKIP: (.*)$", text, re.M)))
        # Host controls this container already refuses (tests/common's
        # container_refuses): capsule's denial held, its layer is unproven.
        notes = sorted(set(re.findall(r"^CONTAINER: host control `(\S+)` already fails with (\w+)",
                                      text, re.M)))
        if notes:
            j.lines.append(f"  NOTE     {tag}tests/{name}: the container itself refuses "
                           + ", ".join(f"{op} ({e})" for op, e in notes))
        failed = re.findall(r"^test (\S+) \.\.\. FAILED", text, re.M)
        if not res:
            tf += 1
            j.fail(tag + f"tests/{name}", f"no result (rc={t['rc']}): {text[-400:]}")
            continue
        p, f = int(res[-1][0]), int(res[-1][1])
        tp += p
        tf += f
        note = f"{p} passed, {f} failed" + (f", skips: {skips}" if skips else "")
        if f:
            j.lines.append(f"  FAIL     {tag}tests/{name}: {note}: {failed}")
        else:
            j.lines.append(f"  PASS     {tag}tests/{name}: {note}")
    missing_tests = [t for t in tests if tests[t]["rc"] is None]
    if missing_tests:
        j.fail(tag + "tests", f"did not finish: {missing_tests}")

    print("\n".join(j.lines))
    summary = ("exec: exit %s, " % ex["rc"] if not ran else "") + (
               f"view={'yes' if view is not None else 'no'}"
               f" proc={'private' if view and view.get('private_proc') else 'not private'}"
               f" netns={'yes' if enf.get('netns') else 'no'} tree_kill={enf.get('tree_kill')}"
               f" | start-up {rec.get('startup', '?').replace('median_ms=', '').split()[0]} ms"
               f" | checks {j.passed}/{j.passed + j.failed}, tests {tp}/{tp + tf} | {seconds}s")
    print(f"SHAPE {shape} {j.passed + tp} passed, {j.failed + tf} failed ({summary})")


if __name__ == "__main__":
    main(sys.argv[1:])

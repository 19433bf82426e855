#!/usr/bin/env python3
"""The checks scripts/kernel-matrix runs inside each guest, once per user.

Every check prints one line `@@CHECK {json}` (id, status, rc, note, seconds) on
stdout, after a human-readable block with the command and its output. Statuses:

  pass     ran confined / the escape was blocked (note: by what, as the child saw it)
  refused  capsule refused to run (exit 125); note = its message
  ESCAPE   the escape worked: checked from OUTSIDE the sandbox where possible
  fail     anything else (crash, unexpected exit, a workload that broke)
  info     a measurement, never a verdict (doctor's landlock line, ...)

Escape and workload checks run with the default flags first; when capsule
refuses them, the same check runs again with --best-effort as `ID[be]`.
"""
import argparse
import ctypes  # noqa: F401  (imported here so a broken python fails early, not in a child)
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

CAPSULE = os.environ.get("KM_CAPSULE", "/opt/capsule/bin/capsule")
SRC = os.environ.get("KM_SRC", "/opt/capsule/src")
ARGS = None


def log(*a):
    print(*a, flush=True)


def emit(cid, status, rc=None, note="", secs=None, **extra):
    rec = {"id": cid, "status": status, "rc": rc, "note": " ".join(str(note).split())[:600]}
    if secs is not None:
        rec["seconds"] = round(secs, 2)
    rec.update(extra)
    log("@@CHECK " + json.dumps(rec, sort_keys=True))
    return rec


def run(argv, timeout=90, env=None, cwd=None, quiet=False):
    """Run argv; return (rc, stdout, stderr, seconds). rc is 'timeout' on timeout."""
    t0 = time.monotonic()
    e = dict(os.environ)
    if env:
        e.update(env)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                           timeout=timeout, env=e, cwd=cwd, stdin=subprocess.DEVNULL)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as ex:
        rc = "timeout"
        out = ex.stdout.decode(errors="replace") if isinstance(ex.stdout, bytes) else (ex.stdout or "")
        err = ex.stderr.decode(errors="replace") if isinstance(ex.stderr, bytes) else (ex.stderr or "")
    secs = time.monotonic() - t0
    if not quiet:
        log("$ " + " ".join(argv if len(" ".join(argv)) < 400 else argv[:6] + ["..."]))
        for name, s in (("stdout", out), ("stderr", err)):
            s = s.rstrip()
            if s:
                lines = s.splitlines()
                if len(lines) > 40:
                    lines = lines[:20] + ["... (%d lines)" % len(lines)] + lines[-15:]
                log("  [%s] " % name + "\n  [%s] ".join(lines) % tuple([name] * (len(lines) - 1)))
        log("  -> rc=%s (%.2fs)" % (rc, secs))
    return rc, out, err, secs


def first_error(err, out=""):
    """Why capsule refused: the JSON result's `error`, else the first line of its stderr
    that says why (warnings, such as --best-effort's "not enforced", come last)."""
    res = parse_result(out) if out else None
    if res and res.get("error"):
        return "capsule: " + res["error"]
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    lines = [ln for ln in lines if "warning" not in ln] + [ln for ln in lines if "warning" in ln]
    for ln in lines:
        if re.search(r"error|refus|cannot|need|not supported|denied|failed", ln, re.I):
            return ln
    return lines[0] if lines else ""


def parse_result(out):
    """capsule exec --json prints one JSON object on stdout."""
    for ln in reversed(out.splitlines()):
        ln = ln.strip()
        if ln.startswith("{"):
            try:
                return json.loads(ln)
            except ValueError:
                pass
    return None


def enforcement_note(res):
    if not res:
        return ""
    e = res.get("enforcement") or {}
    parts = ["landlock_abi=%s" % e.get("landlock_abi"), "tree_kill=%s" % e.get("tree_kill")]
    if e.get("limits"):
        parts.append("limits=%s" % json.dumps(e.get("limits"), sort_keys=True, separators=(",", ":")))
    if e.get("missing"):
        parts.append("missing=%s" % json.dumps(e.get("missing"), separators=(",", ":")))
    return " ".join(parts)


def capsule_exec(flags, cmd, best_effort=False, cwd=None, env=None, timeout=90):
    argv = [CAPSULE, "exec", "--no-audit", "--json", "--timeout", "60"]
    if best_effort:
        argv.append("--best-effort")
    return run(argv + flags + ["--"] + cmd, timeout=timeout, cwd=cwd, env=env)


# ------------------------------------------------------------------ checks


def check_doctor():
    rc, out, err, secs = run([CAPSULE, "doctor"])
    ll = re.search(r"^landlock\s+(.*)$", out, re.M)
    verdict = re.search(r"^verdict\s+(.*)$", out, re.M)
    ns = re.search(r"^namespaces\s+(.*)$", out, re.M)
    cg = re.search(r"^cgroups\s+(.*)$", out, re.M)
    note = "landlock: %s; namespaces: %s; verdict: %s" % (
        ll.group(1) if ll else "?", ns.group(1) if ns else "?", verdict.group(1) if verdict else first_error(err))
    # doctor's verdict is exec's on the default policy: "the default policy
    # runs confined here" or "capsule exec refuses the default policy here: ..."
    # (older binaries: "capsule can confine programs here" / "cannot").
    v = verdict.group(1) if verdict else ""
    ok = rc == 0 and bool(verdict) and ("runs confined" in v or "can confine" in v) and "cannot" not in v
    says_cannot = bool(verdict) and ("cannot" in v or "refuses" in v)   # doctor exits 1 then: a verdict, not a crash
    emit("doctor", "pass" if ok else ("refused" if rc in (0, 125) or says_cannot else "fail"), rc, note, secs,
         landlock=(ll.group(1) if ll else None), cgroups=(cg.group(1) if cg else None))


def project_dir(name, policy):
    d = os.path.join(ARGS.work, "proj-" + name)
    shutil.rmtree(d, ignore_errors=True)
    for sub in ("out", "build", "scripts"):
        os.makedirs(os.path.join(d, sub))
    shutil.copy(policy, os.path.join(d, "capsule.yaml"))
    with open(os.path.join(d, "agent.py"), "w") as f:
        f.write("open('out/result.txt', 'w').write('ok')\nprint('agent ok')\n")
    with open(os.path.join(d, ".env"), "w") as f:
        f.write("TOKEN=SECRET-ENV\n")
    return d


def policies():
    return sorted(p for p in os.listdir(os.path.join(SRC, "policy")) if p.endswith(".yaml"))


def check_policies():
    for p in policies():
        name = p[:-5]
        d = project_dir(name, os.path.join(SRC, "policy", p))
        rc, out, err, secs = run([CAPSULE, "check", "-p", "capsule.yaml"], cwd=d)
        bad = [ln.strip() for ln in (out + err).splitlines() if re.search(r"NOT ENFORCED|missing|limitation", ln, re.I)]
        tail = [ln.strip() for ln in out.splitlines() if ln.strip()][-1:]
        if rc != 0:
            note = first_error(err) or "; ".join(bad + tail)[:250]
        else:
            note = "; ".join(bad)[:250] if bad else "valid, fully enforced"
        emit("check:" + name, {0: "pass", 125: "refused"}.get(rc, "fail"), rc, note, secs)


def classify_exec(cid, rc, out, err, secs, ok_pred=None, extra_note=""):
    res = parse_result(out)
    if rc == 125:
        return emit(cid, "refused", rc, first_error(err, out), secs)
    if rc == 0 and res is not None and res.get("exit_code") == 0 and (ok_pred is None or ok_pred(res)):
        return emit(cid, "pass", rc, (extra_note + " " + enforcement_note(res)).strip(), secs)
    child = ""
    if res:
        child = "child exit=%s stderr=%s" % (res.get("exit_code"), (res.get("stderr") or "")[-200:])
    return emit(cid, "fail", rc, (child or first_error(err, out) or "no result") + " " + enforcement_note(res), secs)


def with_be(cid, fn):
    """Run fn(best_effort) as cid; when capsule refuses it, again as cid[be]."""
    rec = fn(False)
    if rec and rec["status"] == "refused":
        rec2 = fn(True)
        if rec2:
            rec2["id"] = cid + "[be]"
            log("@@CHECK " + json.dumps(rec2, sort_keys=True))
    return rec


def check_exec_default():
    def f(be):
        rc, out, err, secs = capsule_exec([], ["/bin/true"], best_effort=be)
        return classify_exec("exec-default", rc, out, err, secs) if not be else quiet_classify(rc, out, err, secs)
    with_be("exec-default", f)

    def g(be):
        rc, out, err, secs = capsule_exec([], ["/bin/true"], best_effort=be, env={"CAPSULE_NO_NAMESPACES": "1"})
        return classify_exec("exec-no-namespaces", rc, out, err, secs) if not be else quiet_classify(rc, out, err, secs)
    with_be("exec-no-namespaces", g)


def quiet_classify(rc, out, err, secs):
    """classify_exec without printing: the caller re-emits it under another id."""
    res = parse_result(out)
    if rc == 125:
        return {"id": "", "status": "refused", "rc": rc, "note": first_error(err, out)[:600], "seconds": round(secs, 2)}
    if rc == 0 and res is not None and res.get("exit_code") == 0:
        return {"id": "", "status": "pass", "rc": rc, "note": enforcement_note(res), "seconds": round(secs, 2)}
    child = "child exit=%s stderr=%s" % (res.get("exit_code"), (res.get("stderr") or "")[-200:]) if res else ""
    return {"id": "", "status": "fail", "rc": rc, "note": " ".join((child or first_error(err, out) or "no result").split())[:600],
            "seconds": round(secs, 2)}


STARTER_CMDS = {
    "python-agent": ["/usr/bin/python3", "agent.py"],
    "ci-build": ["/bin/sh", "-c", "cat capsule.yaml > build/artifact && echo built"],
    "read-only-review": ["/bin/sh", "-c", "cat capsule.yaml > /dev/null && ls > /dev/null && echo reviewed"],
}


def check_starters():
    for p in policies():
        name = p[:-5]
        cmd = STARTER_CMDS.get(name, ["/bin/true"])

        def f(be, name=name, cmd=cmd, p=p):
            d = project_dir(name, os.path.join(SRC, "policy", p))
            rc, out, err, secs = capsule_exec(["-p", "capsule.yaml"], cmd, best_effort=be, cwd=d)
            if be:
                return quiet_classify(rc, out, err, secs)
            return classify_exec("policy:" + name, rc, out, err, secs)
        with_be("policy:" + name, f)


# ---- escapes: the attempt runs in the sandbox, the verdict is read outside

CHILD_PRELUDE = r"""
import errno, os, sys
def blocked(what, e):
    print("BLOCKED %s %s" % (what, errno.errorcode.get(e.errno, e.errno) if getattr(e, 'errno', None) else type(e).__name__))
"""


def escape(cid, flags, child_src, truth, setup=None, extra_env=None):
    """truth(result_json, child_stdout) -> (escaped: bool, note)."""
    def f(be):
        if setup:
            setup()
        rc, out, err, secs = capsule_exec(flags, ["/usr/bin/python3", "-c", CHILD_PRELUDE + child_src],
                                          best_effort=be, env=extra_env)
        res = parse_result(out)
        if rc == 125:
            rec = {"status": "refused", "rc": rc, "note": first_error(err, out)}
        elif res is None:
            rec = {"status": "fail", "rc": rc, "note": "no JSON result: " + first_error(err)}
        else:
            child_out = res.get("stdout") or ""
            escaped, note = truth(res, child_out)
            child_err = (res.get("stderr") or "").strip().splitlines()
            if escaped:
                rec = {"status": "ESCAPE", "rc": rc, "note": note}
            elif "BLOCKED" in child_out or res.get("exit_code") == 0:
                rec = {"status": "pass", "rc": rc, "note": note + " " + " ".join(
                    ln for ln in child_out.splitlines() if ln.startswith("BLOCKED"))}
            else:
                rec = {"status": "fail", "rc": rc, "note": "child exit=%s %s" % (
                    res.get("exit_code"), child_err[-1] if child_err else "")}
            rec["note"] = (rec["note"] + " | " + enforcement_note(res)).strip(" |")
        rec["note"] = " ".join(rec["note"].split())[:600]
        rec["seconds"] = round(secs, 2)
        rec["id"] = cid
        if not be:
            log("@@CHECK " + json.dumps(rec, sort_keys=True))
        return rec
    with_be(cid, f)


def check_escapes():
    w = ARGS.work
    victim = os.path.join(w, "victim")
    home = os.environ.get("HOME", "/root")

    def fresh():
        shutil.rmtree(victim, ignore_errors=True)
        os.makedirs(os.path.join(victim, "ro"))
        os.makedirs(os.path.join(w, "out"), exist_ok=True)
        for n in ("file.txt", "trunc.txt", "ro/trunc.txt", "ro/otrunc.txt"):
            with open(os.path.join(victim, n), "w") as fh:
                fh.write("original content\n")

    def content(n):
        try:
            with open(os.path.join(victim, n)) as fh:
                return fh.read()
        except OSError as e:
            return "<%s>" % e.strerror

    # 1. write outside every grant (a write grant elsewhere exists)
    escape("esc-write-outside", ["--allow-write", os.path.join(w, "out")], r"""
for p, m in ((%r, 'w'), (%r, 'w')):
    try:
        open(p, m).write('pwned\n'); print('WROTE', p)
    except OSError as e:
        blocked('write', e)
""" % (os.path.join(victim, "file.txt"), os.path.join(victim, "new.txt")),
           lambda res, o: (content("file.txt") != "original content\n" or os.path.exists(os.path.join(victim, "new.txt")),
                           "file.txt=%r new.txt exists=%s" % (content("file.txt")[:20], os.path.exists(os.path.join(victim, "new.txt")))),
           setup=fresh)

    # 2. truncate() of a file with no grant at all
    escape("esc-truncate-nogrant", [], r"""
try:
    os.truncate(%r, 0); print('TRUNCATED')
except OSError as e:
    blocked('truncate', e)
""" % os.path.join(victim, "trunc.txt"),
           lambda res, o: (content("trunc.txt") == "", "size after=%d" % len(content("trunc.txt"))), setup=fresh)

    # 3. O_TRUNC and truncate() under a read-only grant
    escape("esc-truncate-readonly", ["--allow-read", os.path.join(victim, "ro")], r"""
try:
    os.close(os.open(%r, os.O_RDONLY | os.O_TRUNC)); print('OPENED O_TRUNC')
except OSError as e:
    blocked('open(O_RDONLY|O_TRUNC)', e)
try:
    os.truncate(%r, 0); print('TRUNCATED')
except OSError as e:
    blocked('truncate', e)
""" % (os.path.join(victim, "ro/otrunc.txt"), os.path.join(victim, "ro/trunc.txt")),
           lambda res, o: (content("ro/otrunc.txt") == "" or content("ro/trunc.txt") == "",
                           "sizes after: O_TRUNC=%d truncate=%d" % (len(content("ro/otrunc.txt")), len(content("ro/trunc.txt")))),
           setup=fresh)

    # 4. a credential store under a read grant (~/.ssh is always hidden)
    ssh = os.path.join(home, ".ssh")

    def mkssh():
        os.makedirs(ssh, exist_ok=True)
        with open(os.path.join(ssh, "id_ed25519"), "w") as fh:
            fh.write("SECRET-KEY-MATERIAL\n")
        os.chmod(os.path.join(ssh, "id_ed25519"), 0o600)
    escape("esc-read-ssh", ["--allow-read", home], r"""
try:
    print('READ', open(%r).read())
except OSError as e:
    blocked('read', e)
try:
    print('LS', os.listdir(%r))
except OSError as e:
    blocked('listdir', e)
""" % (os.path.join(ssh, "id_ed25519"), ssh),
           lambda res, o: ("SECRET-KEY-MATERIAL" in o, "secret %s" % ("READ" if "SECRET-KEY-MATERIAL" in o else "not read")),
           setup=mkssh)

    # 5. network sockets (created only, never connected). With the run's own
    # loopback (its own network namespace: enforcement.loopback) TCP and UDP
    # sockets exist and reach only the run; anything else created is an escape.
    def net_truth(res, o):
        made = o.split("CREATED ", 1)[1].split()[0].split(",") if "CREATED " in o else []
        own = {"inet/tcp", "inet/udp", "inet6/tcp"} if (res.get("enforcement") or {}).get("loopback") else set()
        bad = [m for m in made if m not in own]
        note = ("created: " + ",".join(made)) if made else ""
        if made and not bad:
            note += " (the run's own loopback)"
        return bool(bad), note

    escape("esc-net-socket", [], r"""
import socket
ok = []
for fam, typ, name in ((socket.AF_INET, socket.SOCK_STREAM, 'inet/tcp'), (socket.AF_INET, socket.SOCK_DGRAM, 'inet/udp'),
                       (socket.AF_INET6, socket.SOCK_STREAM, 'inet6/tcp'), (socket.AF_PACKET if hasattr(socket, 'AF_PACKET') else 17, socket.SOCK_RAW, 'packet')):
    try:
        s = socket.socket(fam, typ); s.close(); ok.append(name)
    except OSError as e:
        blocked(name, e)
print('CREATED ' + ','.join(ok) if ok else 'NONE CREATED')
""", net_truth)

    # 6. a signal to a process outside the sandbox (same user)
    holder = {}

    def spawn():
        holder["p"] = subprocess.Popen(["/bin/sleep", "300"])

    def sig_truth(res, o):
        p = holder["p"]
        time.sleep(0.2)
        dead = p.poll() is not None
        if not dead:
            p.kill()
        p.wait()
        return dead, "host process %s" % ("KILLED" if dead else "survived")

    def esc_signal(be):
        spawn()
        src = r"""
try:
    os.kill(%d, 9); print('SENT')
except OSError as e:
    blocked('kill', e)
""" % holder["p"].pid
        return src
    # the pid is only known after spawn: build the check by hand
    def sig_check(cid, env=None):

        def f(be):
            src = esc_signal(be)
            rc, out, err, secs = capsule_exec([], ["/usr/bin/python3", "-c", CHILD_PRELUDE + src], best_effort=be,
                                              env=env)
            res = parse_result(out)
            if rc == 125 or res is None:
                holder["p"].kill()
                holder["p"].wait()
                st = "refused" if rc == 125 else "fail"
                rec = {"status": st, "rc": rc, "note": first_error(err, out)}
            else:
                escaped, note = sig_truth(res, res.get("stdout") or "")
                rec = {"status": "ESCAPE" if escaped else "pass", "rc": rc,
                       "note": note + " " + " ".join(ln for ln in (res.get("stdout") or "").splitlines() if ln.startswith("BLOCKED"))
                       + " | " + enforcement_note(res)}
            rec.update(id=cid, seconds=round(secs, 2))
            rec["note"] = " ".join(rec["note"].split())[:600]
            if not be:
                log("@@CHECK " + json.dumps(rec, sort_keys=True))
            return rec
        with_be(cid, f)
    sig_check("esc-signal-host")
    # the fallback without namespaces (CAPSULE_NO_NAMESPACES=1): host pids are visible
    sig_check("esc-signal-host-nons", {"CAPSULE_NO_NAMESPACES": "1"})

    # 7. a nested user namespace (kernel attack surface) from inside
    escape("esc-nested-userns", [], r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) == 0:
    print('UNSHARED')
else:
    e = ctypes.get_errno(); print('BLOCKED unshare(CLONE_NEWUSER) %s' % errno.errorcode.get(e, e))
""", lambda res, o: ("UNSHARED" in o, ""))

    # 8. exec of a binary outside the exec grants
    def mkbin():
        fresh()
        shutil.copy("/bin/true", os.path.join(victim, "mytrue"))
        os.chmod(os.path.join(victim, "mytrue"), 0o755)
    escape("esc-exec-outside", ["--allow-read", victim], r"""
try:
    os.execv(%r, ['mytrue'])
except OSError as e:
    blocked('execve', e)
""" % os.path.join(victim, "mytrue"), lambda res, o: ("BLOCKED" not in o and res.get("exit_code") == 0,
                                                       "exec'd" if "BLOCKED" not in o else ""), setup=mkbin)


def check_rename():
    """Renames/links between two directories of one write grant (EXDEV before Landlock ABI 2)."""
    d = os.path.join(ARGS.work, "mv")

    def f(be):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "a"))
        os.makedirs(os.path.join(d, "b"))
        open(os.path.join(d, "a", "f"), "w").write("x")
        rc, out, err, secs = capsule_exec(["--allow-write", d], ["/usr/bin/python3", "-c", CHILD_PRELUDE + r"""
try:
    os.rename(%r, %r); print('RENAMED')
except OSError as e:
    blocked('rename', e)
try:
    os.link(%r, %r); print('LINKED')
except OSError as e:
    blocked('link', e)
""" % (os.path.join(d, "a", "f"), os.path.join(d, "b", "f"), os.path.join(d, "b", "f"), os.path.join(d, "a", "g"))],
            best_effort=be)
        res = parse_result(out)
        if rc == 125 or res is None:
            rec = {"status": "refused" if rc == 125 else "fail", "rc": rc, "note": first_error(err, out)}
        else:
            o = res.get("stdout") or ""
            ok = "RENAMED" in o and "LINKED" in o
            rec = {"status": "pass" if ok else "fail", "rc": rc,
                   "note": " ".join(ln for ln in o.splitlines()) + " | " + enforcement_note(res)}
        rec.update(id="rename-in-grant", seconds=round(secs, 2))
        rec["note"] = " ".join(rec["note"].split())[:600]
        if not be:
            log("@@CHECK " + json.dumps(rec, sort_keys=True))
        return rec
    with_be("rename-in-grant", f)


def cgroup_state(scope, procs=False):
    def rd(n):
        try:
            with open(os.path.join(scope, n)) as fh:
                return fh.read().strip()
        except OSError as e:
            return "<%s>" % e.strerror
    kids = sorted(e for e in os.listdir(scope) if os.path.isdir(os.path.join(scope, e))) if os.path.isdir(scope) else []
    st = {"subtree_control": rd("cgroup.subtree_control"), "type": rd("cgroup.type"), "children": kids}
    if procs:
        st["procs"] = rd("cgroup.procs").split()
    return st


# ---- cgroup limits where capsule owns a cgroup (scenarios `session` and `scope`)

PYTHON_AGENT = os.path.join(SRC, "policy", "python-agent.yaml")   # max_processes: 64
FORK_BOMB = r"""
import errno, os, time
pids, err = [], None
for i in range(1000):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode.get(e.errno, e.errno)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
print("FORKED %d STOPPED %s" % (len(pids), err))
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
"""


def fake_systemd_run_calls():
    """The calls of the guest's stand-in for systemd-run (guest-init.sh, scenario `session`)."""
    try:
        with open("/run/km/systemd-run.log") as fh:
            return [json.loads(ln) for ln in fh if ln.strip()]
    except OSError:
        return []


def check_fork_bomb():
    """A fork bomb under python-agent.yaml (max_processes 64) stops at the limit."""
    def f(be):
        d = project_dir("forkbomb", PYTHON_AGENT)
        rc, out, err, secs = capsule_exec(["-p", "capsule.yaml"], ["/usr/bin/python3", "-c", FORK_BOMB],
                                          best_effort=be, cwd=d, env={"RUST_LOG": "capsule=debug"})
        res = parse_result(out)
        if rc == 125 or res is None:
            rec = {"status": "refused" if rc == 125 else "fail", "rc": rc, "note": first_error(err, out)}
        else:
            o = res.get("stdout") or ""
            m = re.search(r"FORKED (\d+) STOPPED (\S+)", o)
            held = bool(m) and m.group(2) == "EAGAIN" and int(m.group(1)) < 64
            # A cgroup v2 of its own: the run is born in it (clone3 with
            # CLONE_INTO_CGROUP, Linux 5.7+), not moved into it afterwards.
            limits = (res.get("enforcement") or {}).get("limits") or {}
            if held and limits.get("max_processes") == "cgroup-v2" and "born in its cgroup" not in err:
                held = False
                m = None
                res = dict(res, stderr="the run was moved into its v2 cgroup, not born in it (clone3)")
            rec = {"status": "pass" if held else "fail", "rc": rc,
                   "note": "%s | %s" % (m.group(0) if m else "child exit=%s %s" % (
                       res.get("exit_code"), (res.get("stderr") or "")[-200:]), enforcement_note(res))}
        rec.update(id="fork-bomb", seconds=round(secs, 2))
        rec["note"] = " ".join(rec["note"].split())[:600]
        if not be:
            log("@@CHECK " + json.dumps(rec, sort_keys=True))
        return rec
    with_be("fork-bomb", f)


def check_systemd_scope():
    """Scenario `session`, root: capsule asks (the stand-in for) systemd for a delegated scope."""
    d = project_dir("scope", PYTHON_AGENT)
    n0 = len(fake_systemd_run_calls())
    src = "import sys; print('to-stdout', sys.argv[1]); print('to-stderr', file=sys.stderr); sys.exit(7)"
    arg = "$HOME ${PATH} $$"
    rc, out, err, secs = run([CAPSULE, "exec", "--no-audit", "-p", "capsule.yaml", "--",
                              "/usr/bin/python3", "-c", src, arg], cwd=d)
    calls = fake_systemd_run_calls()[n0:]
    argv = calls[0].get("argv", []) if calls else []
    scope = calls[0].get("scope") if calls else None
    after = cgroup_state(scope, procs=True) if scope else None
    problems = []
    if rc != 7:
        problems.append("exit %s, not the command's 7" % rc)
    if out != "to-stdout %s\n" % arg:
        problems.append("stdout %r" % out[:80])
    if "to-stderr" not in err:
        problems.append("stderr %r" % err[:80])
    if len(calls) != 1 or not scope:
        problems.append("%d systemd-run calls (%s)" % (len(calls), calls[-1].get("error", "") if calls else ""))
    for want in ("--scope", "--property=Delegate=yes", "--slice=user-0.slice"):
        if want not in argv:
            problems.append("no %s in %s" % (want, " ".join(argv)))
    if after and (after["children"] or after["procs"] or after["subtree_control"]):
        problems.append("scope left as %s" % json.dumps(after, sort_keys=True))
    emit("systemd-scope", "fail" if problems else "pass", rc,
         "; ".join(problems) if problems else "rc 7, stdout/stderr passed through, args verbatim; systemd-run %s; "
         "the scope left empty: %s" % (" ".join(argv[1:9]), json.dumps(after, sort_keys=True)), secs)

    # systemd-run fails (D-Bus unreachable): capsule decides as without it:
    # no cgroup, so the process guard (seccomp user notification) holds
    # max_processes for root, and no cgroup is touched.
    env = {"KM_FAKE_SYSTEMD_RUN": "fail"}
    rc, out, err, secs = capsule_exec(["-p", "capsule.yaml"], ["/usr/bin/python3", "-c", "print('ran')"],
                                      cwd=d, env=env)
    res = parse_result(out) or {}
    limits = (res.get("enforcement") or {}).get("limits") or {}
    ok = (rc == 0 and res.get("exit_code") == 0 and res.get("stdout") == "ran\n"
          and limits.get("max_processes") == "seccomp-notify")
    emit("systemd-scope-unavailable", "pass" if ok else "fail", rc,
         "process guard: %s" % (enforcement_note(res) if res else first_error(err, out)), secs)


def check_delegated_shared():
    """Scenario `scope`, root: capsule started in a delegated scope it shares with the checker may not take
    it: no cgroup of its own, so the process guard holds max_processes."""
    d = project_dir("shared", PYTHON_AGENT)
    rc, out, err, secs = run(["/opt/capsule/bin/capsule", "exec", "--no-audit", "--json", "-p", "capsule.yaml",
                              "--", "/usr/bin/python3", "-c", "print('ran')"], cwd=d)
    res = parse_result(out) or {}
    limits = (res.get("enforcement") or {}).get("limits") or {}
    ok = rc == 0 and res.get("stdout") == "ran\n" and limits.get("max_processes") == "seccomp-notify"
    emit("delegated-shared", "pass" if ok else "fail", rc,
         "the shared scope is not taken; the process guard holds max_processes: " + enforcement_note(res) if ok else
         "expected a run under the process guard: " + (first_error(err, out) or enforcement_note(res)), secs)


def check_cgroup_limits():
    if ARGS.scenario not in ("session", "scope"):
        return
    check_fork_bomb()
    if os.geteuid() == 0 and ARGS.scenario == "session":
        check_systemd_scope()
    if os.geteuid() == 0 and ARGS.scenario == "scope":
        check_delegated_shared()


def made_scopes(parent, before):
    """Scopes the stand-ins for systemd made beside the user's cgroup during the checks."""
    now = cgroup_state(parent)["children"]
    return [c for c in now if c not in before["children"] and c.startswith("capsule-")]


def check_cgroups_left(before, pbefore):
    """capsule changed no cgroup it did not create; each scope systemd gave it is left empty, as found."""
    parent = os.path.dirname(ARGS.scope)
    made = made_scopes(parent, pbefore)
    dirty = {}
    for c in made:
        p = os.path.join(parent, c)
        st = cgroup_state(p, procs=True)
        if st["children"] or st["procs"] or st["subtree_control"]:
            dirty[c] = st
        # as systemd removes an empty scope (--collect); leftovers first
        for k in st["children"]:
            try:
                os.rmdir(os.path.join(p, k))
            except OSError:
                pass
        try:
            os.rmdir(p)
        except OSError:
            pass
    after, pafter = cgroup_state(ARGS.scope), cgroup_state(parent)
    changed = before != after or pbefore != pafter
    note = "own cgroup before=%s after=%s; parent before=%s after=%s" % tuple(
        json.dumps(x, sort_keys=True) for x in (before, after, pbefore, pafter))
    if not changed:
        note = "own cgroup and its parent unchanged: %s, %s" % (json.dumps(after, sort_keys=True),
                                                                json.dumps(pafter, sort_keys=True))
    if made:
        note += "; %d delegated scope(s) systemd made for capsule, %s" % (
            len(made), "all left empty and as found" if not dirty else "NOT left empty: %s" % json.dumps(dirty))
    emit("cgroup-untouched", "fail" if changed or dirty else "pass", None, note)


def check_tests():
    d = ARGS.tests
    if not d or not os.path.isdir(d):
        return
    env = {"CAPSULE_BIN": CAPSULE, "CAPSULE_TEST_ROOT": SRC, "RUST_BACKTRACE": "0"}
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if not os.access(path, os.X_OK):
            continue
        short = re.sub(r"-[0-9a-f]{16}$", "", name)
        rc, out, err, secs = run([path, "--test-threads=2"], timeout=ARGS.test_timeout, env=env, cwd=SRC)
        counts = re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", out)
        failed = re.findall(r"^test (\S+) \.\.\. FAILED", out, re.M)
        if counts:
            p, fl, ig = (sum(int(c[i]) for c in counts) for i in range(3))
            note = "%d passed, %d failed, %d ignored" % (p, fl, ig)
            if failed:
                note += ": " + " ".join(failed)
                # the first failure's message (the tests print what capsule said)
                m = re.search(r"^---- (\S+) stdout ----\n(?:.*\n){0,3}?.*panicked at [^\n]*\n((?:.*\n){1,12})", out, re.M)
                if m:
                    lines = [ln.strip() for ln in m.group(2).splitlines() if ln.strip()]
                    keep = lines[:1] + [ln for ln in lines[1:] if re.match(r"(exit|stderr|left|right):", ln)][:3]
                    note += " | first: %s: %s" % (m.group(1), " / ".join(keep)[:400])
        else:
            note = "no summary (rc=%s) %s" % (rc, first_error(err))
        emit("test:" + short, "pass" if rc == 0 else "fail", rc, note, secs)


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--user", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--scenario", default="plain")
    ap.add_argument("--scope", default="")
    ap.add_argument("--tests", default="")
    ap.add_argument("--test-timeout", type=int, default=600)
    ap.add_argument("--only", default="")
    ARGS = ap.parse_args()
    os.makedirs(ARGS.work, exist_ok=True)
    os.chdir(ARGS.work)
    before = cgroup_state(ARGS.scope) if ARGS.scope else None
    pbefore = cgroup_state(os.path.dirname(ARGS.scope)) if ARGS.scope else None
    if ARGS.scope:
        with open("/proc/self/cgroup") as fh:
            emit("session-cgroup", "info", None, fh.read().strip() + " " + json.dumps(before, sort_keys=True))
    steps = [("doctor", check_doctor), ("check", check_policies), ("exec", check_exec_default),
             ("policy", check_starters), ("escape", check_escapes), ("rename", check_rename),
             ("cgroup", check_cgroup_limits), ("tests", check_tests)]
    for name, fn in steps:
        if ARGS.only and name not in ARGS.only.split(","):
            continue
        try:
            fn()
        except Exception as e:  # a broken check is a failed check, never a silent one
            emit("error:" + name, "fail", None, "%s: %s" % (type(e).__name__, e))
    if ARGS.scope:
        check_cgroups_left(before, pbefore)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())

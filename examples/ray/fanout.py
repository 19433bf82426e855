"""Fan a few hundred agent steps out over Ray, each confined by capsule.

    python examples/ray/fanout.py            # a laptop: ray.init() starts Ray here
    RAY_ADDRESS=auto python examples/ray/fanout.py   # a cluster (or ray://head:10001)

Every step is a Python code string, as an agent would produce. Most do
honest work; every tenth misbehaves in one of four ways: it loops forever
(the wall-clock limit ends it: exit 124), fork-bombs (the pids limit stops
it), reads a host secret (/etc/shadow: denied, or an empty stand-in), or
tries the network (refused: the step has none). The summary table shows
each kind's outcome, and that every step ran confined on a capsule node.

On a laptop the local Ray node advertises the ``capsule`` resource only when
``capsule doctor`` / ``capsule check`` say capsule confines here; on a
cluster, start each node with it:

    ray start --address=HEAD:6379 --resources="$(python -m capsule_sandbox.ray resources)"

CAPSULE_RAY_EXAMPLE_STEPS sets the number of steps (default 300).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections import Counter, defaultdict

import ray

from capsule_sandbox import SandboxConfig
from capsule_sandbox import ray as capsule_ray

STEPS = int(os.environ.get("CAPSULE_RAY_EXAMPLE_STEPS", "300"))
# The steps' base policy (a capsule policy, version 1): at most 32 processes.
POLICY = {"version": 1, "limits": {"max_processes": 32}}
CONFIG = SandboxConfig(timeout_seconds=3, memory_mb=256)

HONEST = """
import os
text = "the quick brown fox jumps over the lazy dog " * {n}
words = len(text.split())
secrets = [k for k in os.environ if any(s in k.upper() for s in ("KEY", "TOKEN", "SECRET", "PASSWORD"))]
print(words, "env-clean" if not secrets else "env-LEAK " + ",".join(secrets))
"""
LOOP = "while True:\n    pass\n"
FORK_BOMB = """
import os, sys, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as e:
        print("fork refused after", n, "children:", e.strerror)
        sys.exit(3)
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
"""
SECRET = """
import sys
try:
    data = open("/etc/shadow").read()
except OSError as e:
    print("denied:", e.strerror)
    sys.exit(5)
print("read", len(data), "bytes", "with root's hash" if "root:" in data else "(no secret in it)")
sys.exit(6 if "root:" in data else 5)
"""
NETWORK = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3)
except OSError as e:
    print("refused:", e.strerror or e)
    sys.exit(4)
print("CONNECTED")
"""


def plan(port: int) -> list[tuple[str, str]]:
    kinds = ["timeout", "pids limit", "denied", "network refused"]
    steps = []
    for i in range(STEPS):
        kind = kinds[(i // 10) % 4] if i % 10 == 9 else "ok"
        code = {
            "ok": HONEST.format(n=i + 1),
            "timeout": LOOP,
            "pids limit": FORK_BOMB,
            "denied": SECRET,
            "network refused": NETWORK.format(port=port),
        }[kind]
        steps.append((kind, code))
    return steps


def outcome(kind: str, r: capsule_ray.StepResult) -> bool:
    """Did the step end as its kind should?"""
    if kind == "ok":
        return r.success and r.stdout.strip().endswith("env-clean")
    if kind == "timeout":
        return r.termination_reason == "timeout" and r.exit_code == 124
    if kind == "pids limit":
        return r.exit_code == 3 and "fork refused" in r.stdout
    if kind == "denied":
        return r.exit_code == 5
    return r.exit_code == 4  # network refused


def main() -> int:
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # a cluster: its nodes advertise `capsule` themselves
    else:
        resources = capsule_ray.node_resources(policy=POLICY, config=CONFIG)
        if not resources:
            check = capsule_ray.node_check(CONFIG, policy=POLICY)
            print(f"capsule cannot confine steps on this machine: {check.reason}", file=sys.stderr)
            return 2
        ray.init(resources=resources, include_dashboard=False)
    if not ray.cluster_resources().get(capsule_ray.RESOURCE):
        print("no node of this Ray cluster advertises the 'capsule' resource "
              "(start nodes with --resources=\"$(python -m capsule_sandbox.ray resources)\")", file=sys.stderr)
        return 2

    # A listener on this machine's loopback: no step may reach it.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    steps = plan(listener.getsockname()[1])

    start = time.monotonic()
    refs = [capsule_ray.submit(code, CONFIG, policy=POLICY, agent_id="fanout") for _kind, code in steps]
    results = ray.get(refs)
    elapsed = time.monotonic() - start
    try:
        listener.accept()
        reached = True
    except BlockingIOError:
        reached = False

    rows: dict[str, Counter] = defaultdict(Counter)
    as_expected: Counter = Counter()
    nodes: Counter = Counter()
    confined = 0
    for (kind, _code), r in zip(steps, results):
        rows[kind][f"{r.termination_reason} {r.exit_code}"] += 1
        as_expected[kind] += outcome(kind, r)
        nodes[r.node_id[:8]] += 1
        enf = r.enforcement
        confined += bool(enf.get("seccomp") and enf.get("landlock_abi", 0) > 0)

    print(f"{'kind':<16} {'steps':>5} {'as expected':>11}  outcomes (termination_reason exit_code)")
    for kind in ["ok", "timeout", "pids limit", "denied", "network refused"]:
        total = sum(rows[kind].values())
        detail = ", ".join(f"{k} x{n}" for k, n in sorted(rows[kind].items()))
        print(f"{kind:<16} {total:>5} {as_expected[kind]:>11}  {detail}")
    print()
    abi = max(r.enforcement.get("landlock_abi", 0) for r in results)
    verdict = "all" if confined == len(results) else f"ONLY {confined} of"
    print(f"{verdict} {len(results)} steps confined (seccomp + Landlock ABI {abi}) "
          f"on {len(nodes)} node(s): {dict(nodes)}")
    print(f"{len(results)} steps in {elapsed:.1f}s ({len(results) / elapsed:.1f} steps/s); "
          f"the loopback listener was {'REACHED' if reached else 'not reached'}")
    ray.shutdown()
    ok = confined == len(results) and not reached and sum(as_expected.values()) == len(results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

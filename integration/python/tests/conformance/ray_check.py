"""capsule_sandbox.ray on a local multi-node Ray cluster (issue 22).

Run inside the Ray venv (ray pinned, from PyPI) by tests/test_ray.py; each
test here is reported there under its own name. The cluster: a head node that
advertises ``capsule`` (its ``node_resources`` passed) and a second node whose
``node_resources`` found no capsule (``{}``), both with CPUs, small object
stores, no dashboard, Ray's temp dir in this user's TMPDIR.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from capsule_sandbox import SandboxConfig, SandboxResult
from capsule_sandbox import ray as cray

BIN = os.environ["CAPSULE_BIN"]
SECRET_VALUE = f"host-secret-{uuid.uuid4().hex}"
KEY = f"sk-ray-node-key-{uuid.uuid4().hex[:8]}"
# The steps' base policy: the fork bomb meets the pids limit, not memory.
BASE = {"version": 1, "limits": {"max_processes": 32}}
MB = 1 << 20


class _FakeLLM(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", "0")))
        _FakeLLM.seen.append(self.headers.get("authorization", ""))
        body = json.dumps({
            "model": "fake-model",
            "choices": [{"message": {"role": "assistant", "content": "hello from the node"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _ray_tmpdir() -> str:
    # Unix socket paths (<dir>/ray/session_<date>_<pid>/sockets/plasma_store)
    # must stay under 108 bytes: a short private dir, or TMPDIR itself when
    # TMPDIR is already long (the unprivileged pass's stage).
    base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="r", dir=base) if len(base) <= 30 else base


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The host of both nodes: a secret file, a secret variable, the LLM
    config with its key (all in the environment the nodes inherit)."""
    secret_dir = tmp_path_factory.mktemp("host-secret")
    secret = secret_dir / "secret.txt"
    secret.write_text(SECRET_VALUE)
    secret.chmod(0o600)
    llm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeLLM)
    threading.Thread(target=llm.serve_forever, daemon=True).start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    accepted = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    saved = dict(os.environ)
    ray_tmp = _ray_tmpdir()
    os.environ.update({
        "CAPSULE_RAY_HOST_SECRET": SECRET_VALUE,
        "CAPSULE_LLM_PROVIDER": "openai-compatible",
        "CAPSULE_LLM_BASE_URL": f"http://127.0.0.1:{llm.server_address[1]}/v1",
        "CAPSULE_LLM_MODEL": "fake-model",
        "CAPSULE_LLM_API_KEY_ENV": "CAPSULE_RAY_TEST_KEY",
        "CAPSULE_RAY_TEST_KEY": KEY,
        "XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("xdg-config")),
        "RAY_TMPDIR": ray_tmp,
    })
    yield {"secret": str(secret), "port": listener.getsockname()[1], "accepted": accepted}
    os.environ.clear()
    os.environ.update(saved)
    listener.close()
    llm.shutdown()
    if ray_tmp != tempfile.gettempdir():
        shutil.rmtree(ray_tmp, ignore_errors=True)  # Ray's session logs


@pytest.fixture(scope="module")
def cluster(env):
    capsule_node = cray.node_resources(policy=BASE, binary=BIN, slots=2)
    assert capsule_node == {cray.RESOURCE: 2.0}, "capsule's doctor/check refused this node"
    # The second node's own check finds no capsule binary: it advertises nothing.
    plain_node = cray.node_resources(policy=BASE, binary="/nonexistent/capsule")
    assert plain_node == {}
    c = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=2, resources=capsule_node, object_store_memory=80 * MB, include_dashboard=False),
    )
    plain = c.add_node(num_cpus=2, resources=plain_node, object_store_memory=80 * MB)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2, nodes
    capsule_ids = [i for i, n in nodes.items() if n["Resources"].get(cray.RESOURCE)]
    assert len(capsule_ids) == 1, nodes
    yield {"capsule_node": capsule_ids[0], "plain_node": plain.node_id, "cluster": c}
    ray.shutdown()
    c.shutdown()


def _cgroups_named(run_ids: set[str]) -> list[str]:
    found = []
    wanted = {r.lower() for r in run_ids}
    for top, dirs, _files in os.walk("/sys/fs/cgroup"):
        for d in dirs:
            low = d.lower()
            if low.startswith("capsule-") and any(r in low for r in wanted):
                found.append(os.path.join(top, d))
    return found


def _procs_with(*needles: str) -> list[int]:
    """Host pids whose command line holds every needle (a step's command
    line names its script, <worker dir>/step-<id>-*/scripts/<id>.py)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as h:
                cmdline = h.read()
        except OSError:
            continue
        if all(n.encode() in cmdline for n in needles):
            found.append(int(entry))
    return found


def _step_procs() -> list[int]:
    return _procs_with(os.path.join(tempfile.gettempdir(), "capsule-ray-"), "/step-", "/scripts/")


def _step_code(kind: str, i: int, env: dict, marker: str) -> str:
    head = f"# {marker}\nimport os, sys\n"
    if kind == "loop":
        return head + "while True:\n    pass\n"
    if kind == "forkbomb":
        return head + (
            "import time\nn = 0\n"
            "while True:\n"
            "    try:\n        pid = os.fork()\n"
            "    except OSError as e:\n        print('fork refused after', n, e); sys.exit(3)\n"
            "    if pid == 0:\n        time.sleep(60); os._exit(0)\n"
            "    n += 1\n"
        )
    if kind == "secret":
        return head + f"print(open({env['secret']!r}).read())\n"
    if kind == "network":
        return head + (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {env['port']}), timeout=3)\n"
            "    print('CONNECTED')\n"
            "except OSError as e:\n"
            "    print('refused:', e); sys.exit(4)\n"
        )
    # A well-behaved step that also looks for the host's secrets.
    return head + (
        f"leak = [k for k, v in os.environ.items() if {SECRET_VALUE!r} in v or {KEY!r} in v]\n"
        "try:\n"
        f"    open({env['secret']!r}).read(); leak.append('file')\n"
        "except OSError:\n"
        "    pass\n"
        f"print('step', {i}, 'leak', leak)\n"
    )


def test_200_steps_confined_placed_and_misbehaviour_contained(cluster, env):
    marker = f"ray-step-{uuid.uuid4().hex}"
    kinds = ["loop", "forkbomb", "secret", "network"]
    plan = []
    for i in range(200):
        kind = kinds[(i // 10) % 4] if i % 10 == 9 else "ok"  # 20 misbehaving, 5 of each
        plan.append(kind)
    config = SandboxConfig(timeout_seconds=2.5)
    t0 = time.monotonic()
    refs = [cray.submit(_step_code(k, i, env, marker), config, policy=BASE, binary=BIN) for i, k in enumerate(plan)]
    results = ray.get(refs, timeout=600)
    elapsed = time.monotonic() - t0
    print(f"200 steps through Ray in {elapsed:.1f}s: {Counter(r.termination_reason for r in results)}")
    assert all(isinstance(r, cray.StepResult) and isinstance(r, SandboxResult) for r in results)
    for i, (kind, r) in enumerate(zip(plan, results)):
        where = f"step {i} ({kind}): {r.termination_reason} exit {r.exit_code} out={r.stdout!r} err={r.stderr[-500:]!r}"
        assert r.node_id == cluster["capsule_node"], f"placed on {r.node_id}: {where}"
        assert r.enforcement.get("seccomp") is True and r.enforcement.get("landlock_abi", 0) > 0, where
        # (`missing` lists what this host cannot add beyond the policy's
        # needs, e.g. the private /proc without namespaces: never required.)
        assert r.audit.get("run_id") == r.run_id and r.audit.get("agent_id") == "ray-step", where
        assert SECRET_VALUE not in r.stdout + r.stderr and KEY not in r.stdout + r.stderr, where
        if kind == "ok":
            assert r.success and r.stdout == f"step {i} leak []\n", where
        elif kind == "loop":
            assert r.termination_reason == "timeout" and r.exit_code == 124 and r.killed, where
        elif kind == "forkbomb":
            assert r.exit_code == 3 and "fork refused" in r.stdout, where
            assert r.enforcement["limits"].get("max_processes"), where
        elif kind == "secret":
            assert not r.success and ("PermissionError" in r.stderr or "No such file" in r.stderr), where
        elif kind == "network":
            assert r.exit_code == 4 and "refused:" in r.stdout, where
    assert env["accepted"] == [], "a step reached the host's loopback listener"
    # Nothing of a step is left: processes, capsule's TMPDIRs, its cgroups,
    # the steps' workspaces and audit files in the workers' directories.
    deadline = time.monotonic() + 10
    while _step_procs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _step_procs() == [], "a step's process outlived its step"
    run_ids = {r.run_id for r in results}
    tmp = tempfile.gettempdir()
    assert [p for p in (os.path.join(tmp, f"capsule-{rid}") for rid in run_ids) if os.path.exists(p)] == []
    # A serve step moves a TMPDIR of empty entries aside and removes it right
    # after it reports (docs/serve.md): gone soon after too.
    def aside():
        return [p for p in (os.path.join(tmp, f".capsule-{rid}.removing") for rid in run_ids) if os.path.exists(p)]
    while aside() and time.monotonic() < deadline + 10:
        time.sleep(0.05)
    assert aside() == [], aside()
    assert _cgroups_named(run_ids) == []
    # The live workers' directories (capsule-ray-<pid>-*): there must be some,
    # with workspaces in them, or the checks below would check nothing.
    roots = [r for r in Path(tmp).glob("capsule-ray-*") if os.path.exists(f"/proc/{r.name.split('-')[2]}")]
    workspaces = [ws for r in roots for ws in r.glob("step-*")]
    assert workspaces, f"no live worker's step workspace in {tmp}: the checks below would check nothing"
    leftovers = [str(p) for r in roots for p in r.glob("*") if p.name.startswith(("audit-", "policy-"))]
    assert leftovers == [], leftovers
    # A worker keeps emptied workspaces for its next steps: nothing of a step in them.
    for ws in workspaces:
        assert sorted(os.listdir(ws)) == ["output", "scripts"], ws
        assert os.listdir(ws / "output") == [] and os.listdir(ws / "scripts") == ["capsule_sandbox"], ws


def test_a_refusal_raises_capsule_refused_distinct_from_ray_errors(cluster):
    # A read grant of a path that does not exist: capsule refuses (125).
    ref = cray.submit("print(1)", policy={"version": 1, "filesystem": {"read": ["/nonexistent/capsule-ray"]}},
                      binary=BIN)
    with pytest.raises(cray.CapsuleRefused) as info:
        ray.get(ref)
    err = info.value
    assert isinstance(err, ray.exceptions.RayTaskError)
    assert err.result is not None and err.result.exit_code == 125 and err.result.termination_reason == "refused"
    assert err.node_id == cluster["capsule_node"]
    assert "nonexistent/capsule-ray" in str(err)

    @ray.remote(resources={cray.RESOURCE: 1})
    def broken():
        raise ValueError("a plain task failure")

    with pytest.raises(ray.exceptions.RayTaskError) as other:
        ray.get(broken.remote())
    assert not isinstance(other.value, cray.CapsuleRefused)


def test_a_node_where_capsule_cannot_confine_refuses_the_step(cluster):
    # Placed on the capsule node, but the step's own re-check at run time
    # finds no capsule: it refuses, and runs nothing unconfined.
    marker = f"unconfined-{uuid.uuid4().hex}"
    ref = cray.submit(f"open('/tmp/{marker}', 'w')", binary="/nonexistent/capsule")
    with pytest.raises(cray.CapsuleUnavailable) as info:
        ray.get(ref)
    assert isinstance(info.value, cray.CapsuleRefused)
    assert "cannot confine" in str(info.value)
    assert not os.path.exists(f"/tmp/{marker}")


def test_steps_never_go_to_the_node_without_the_resource(cluster):
    # The plain node is alive and takes ordinary tasks...
    @ray.remote(num_cpus=1)
    def where():
        return ray.get_runtime_context().get_node_id()

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    there = NodeAffinitySchedulingStrategy(cluster["plain_node"], soft=False)
    assert ray.get(where.options(scheduling_strategy=there).remote(), timeout=120) == cluster["plain_node"]
    # ...but a step asked to go there cannot be placed (it needs `capsule`).
    ref = cray.submit("print(1)", binary=BIN, ray_options={
        "scheduling_strategy": NodeAffinitySchedulingStrategy(cluster["plain_node"], soft=False)})
    ready, _ = ray.wait([ref], timeout=5)
    if ready:  # Ray may fail it as unschedulable; it must not have run
        with pytest.raises(ray.exceptions.RayError):
            ray.get(ref)
    else:
        ray.cancel(ref, force=True)


def _tool_lookup(word: str) -> dict:
    """A Python tool: runs in the Ray worker on the node, outside the sandbox."""
    # (the worker imports this module afresh: compare the key's prefix, not KEY)
    return {"word": word, "len": len(word), "tool_sees_key": os.environ.get("CAPSULE_RAY_TEST_KEY", "")[:16]}


def test_keys_stay_on_the_node_while_llm_and_tool_calls_work(cluster):
    code = (
        "import os\n"
        "from capsule_sandbox import client\n"
        "r = client.complete([{'role': 'user', 'content': 'hi'}])\n"
        "print('llm:', r['message']['content'])\n"
        "t = client.call_tool('lookup', word='capsule')\n"
        "print('tool:', t)\n"
        f"print('key-visible' if any({KEY!r} in v for v in os.environ.values()) else 'key-hidden')\n"
        "print('CAPSULE_RAY_TEST_KEY' in os.environ, 'CAPSULE_RAY_HOST_SECRET' in os.environ)\n"
    )
    _FakeLLM.seen.clear()
    config = SandboxConfig(timeout_seconds=30, tool_allowlist=["lookup"])
    policy = {"version": 1, "llm_access": {"enabled": True, "max_calls": 2}}
    r = ray.get(cray.submit(code, config, policy=policy, tools={"lookup": _tool_lookup}, binary=BIN))
    assert r.success, r.stderr
    assert r.node_id == cluster["capsule_node"]
    lines = r.stdout.splitlines()
    assert lines[0] == "llm: hello from the node", r.stdout
    assert "'word': 'capsule'" in lines[1] and f"'tool_sees_key': '{KEY[:16]}'" in lines[1], r.stdout
    assert lines[2:] == ["key-hidden", "False False"], r.stdout
    assert r.llm_calls == 1 and r.tool_calls == 1, r
    assert _FakeLLM.seen == [f"Bearer {KEY}"], "the node's broker did not call the provider with the node's key"
    assert KEY not in json.dumps(r.audit)


def test_a_session_actor_keeps_its_workspace_across_steps_and_removes_it(cluster):
    session = cray.CapsuleSession.remote("ray-agent", SandboxConfig(timeout_seconds=20), binary=BIN)
    ws = ray.get(session.workspace.remote())
    assert ray.get(session.node_id.remote()) == cluster["capsule_node"]
    first = ray.get(session.execute.remote("open('state.txt', 'w').write('42')\nprint('wrote')"))
    assert first.success and first.stdout == "wrote\n", first.stderr
    second = ray.get(session.execute.remote(
        "import os, sys\n"
        "print(open('state.txt').read())\n"
        "try:\n    open(os.path.join(os.path.dirname(sys.argv[0]), 'x.py'), 'w')\n"
        "except OSError:\n    print('scripts read-only')\n"))
    assert second.success and second.stdout == "42\nscripts read-only\n", second.stderr
    assert second.audit.get("run_id") == second.run_id
    assert ray.get(session.read_output.remote("state.txt")) == b"42"
    assert ray.get(session.run.remote(["/bin/sh", "-c", "cat state.txt"])).stdout == "42"
    assert os.path.isdir(ws)
    assert ray.get(session.close.remote()) == []
    assert not os.path.exists(ws)
    ray.kill(session)


def _wait_gone(path: str, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not os.path.exists(path)


@pytest.mark.parametrize("how", ["ray.kill", "SIGKILL"])
def test_a_dead_session_actor_leaves_nothing(cluster, how):
    session = cray.CapsuleSession.remote("ray-agent", SandboxConfig(timeout_seconds=60), binary=BIN)
    ws = ray.get(session.workspace.remote())
    pid = ray.get(session.pid.remote())
    assert ray.get(session.execute.remote("open('f', 'w').write('x')")).success
    marker = os.path.join(ws, "scripts", "")  # in the step's command line
    busy = session.execute.remote("import time\ntime.sleep(50)")
    deadline = time.monotonic() + 20
    while not _procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _procs_with(marker), "the in-flight step never started"
    if how == "ray.kill":
        ray.kill(session)
    else:
        os.kill(pid, signal.SIGKILL)
    # The in-flight step ends as an error either way: usually Ray reports the
    # dead actor; but a force kill makes Ray end the worker's children first
    # (capsule serve among them), and the step's call may then answer, as a
    # result saying its server ended, before the worker itself is gone.
    try:
        late = ray.get(busy, timeout=60)
    except ray.exceptions.RayError:
        pass
    else:
        assert not late.success and late.termination_reason == "error", late
        assert "ended before the step answered" in (late.error or ""), late
    assert _wait_gone(ws), f"the session's workspace {ws} outlived its actor ({how})"
    deadline = time.monotonic() + 20
    while _procs_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _procs_with(marker) == [], "the in-flight step outlived its actor"


def test_the_node_resources_command_prints_json(cluster):
    env = dict(os.environ, CAPSULE_BIN=BIN)
    done = subprocess.run([sys.executable, "-m", "capsule_sandbox.ray", "resources", "--slots", "3"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and json.loads(done.stdout) == {"capsule": 3.0}, done.stderr
    env["CAPSULE_BIN"] = "/nonexistent/capsule"
    done = subprocess.run([sys.executable, "-m", "capsule_sandbox.ray", "resources"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0 and json.loads(done.stdout) == {}, done.stderr
    assert "not advertising" in done.stderr


def test_a_step_sees_nothing_of_the_steps_before_it(cluster):
    # Workers reuse emptied workspaces: what one step leaves in output/ (a
    # file, a directory it made unreadable, a symlink) is gone for the next.
    code = (
        "import os\n"
        "seen = sorted(os.listdir('.'))\n"
        "open('left.txt', 'w').write('x')\n"
        "os.makedirs('d/e'); os.chmod('d', 0)\n"
        "os.symlink('/etc/passwd', 'link')\n"
        "print(seen)\n"
    )
    results = [ray.get(cray.submit(code, binary=BIN)) for _ in range(8)]
    for r in results:
        assert r.success and r.stdout == "[]\n", (r.stdout, r.stderr)

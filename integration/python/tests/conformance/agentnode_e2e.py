"""agentnode-sdk's PUBLIC install and run paths, unmodified, on CapsuleBackend.

Run inside an agentnode conformance venv (agentnode-sdk from PyPI, plus the
``openai`` client agentnode's host LLM broker uses) by
tests/test_conformance_agentnode.py, for the pinned release and the latest.

What it drives, all agentnode's own code:

* ``agentnode_sdk.installer.install_package`` installs two community packs,
  a toolpack and an agent, each a tarball served by a loopback HTTP server
  this test runs, with its real sha256: agentnode downloads, verifies the
  hash, extracts, and builds each into a capsule volume (``capsule volume``
  + ``capsule exec --mount``), never on the host;
* ``agentnode_sdk.runtimes.agent_runner.run_agent(slug, entry=<the lockfile
  entry install_package wrote>)`` (on releases where that takes a private
  decision, ``agentnode_sdk.run_tool(slug)``, which calls it; see
  ``_run_agent``) with agentnode's own agent-sandbox switch on
  (``AGENTNODE_AGENT_SANDBOX=1``): the agent runs under capsule with the
  volume at ``/pack``; its allowed tool call goes through agentnode's
  allowlisted RPC to ``run_tool``, which runs the toolpack in its own
  capsule; its LLM call goes through agentnode's host broker (the ``openai``
  client, pointed at a fake provider on loopback) with the key held on the
  host.

Then it checks, from outside, what the agent reported and what the host saw:
no host env or key inside, a host file outside every grant unreadable, a live
loopback listener never reached, no process of the run left, and the volumes
gone after ``capsule volume rm``.
"""

from __future__ import annotations

import hashlib
import http.server
import inspect
import io
import json
import os
import socket
import subprocess
import tarfile
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
from agentnode_sdk.installer import install_package, read_lockfile
from agentnode_sdk.runtimes.agent_runner import run_agent
from agentnode_sdk.sandbox import sandbox_volume_name, set_default_backend

from capsule_sandbox import CapsuleBackend

BIN = os.environ["CAPSULE_BIN"]
TOOL_SLUG = "capsule-demo-tool"
AGENT_SLUG = "capsule-demo-agent"
VERSION = "0.1.0"

TOOL = '''
import os


def double(x=0, **kwargs):
    import capsule_demo_tool
    return {
        "doubled": int(x) * 2,
        "pythonpath": os.environ.get("PYTHONPATH"),
        "module": capsule_demo_tool.__file__,
        "key_visible": "OPENAI_API_KEY" in os.environ,
    }
'''

# The agent: everything it can try from inside, reported back as its result.
# Constants (ports, paths, the run's marker) are baked in at pack time, so the
# run goes through run_agent with no extra arguments.
AGENT = '''
import errno
import os
import socket
import subprocess
import sys

SECRET_FILE = {secret_file!r}
LISTEN_PORT = {listen_port}
LLM_PORT = {llm_port}
MARKER = {marker!r}
KEY = {key!r}


def _err(exc):
    return errno.errorcode.get(getattr(exc, "errno", None) or 0, type(exc).__name__)


def run(ctx, **kwargs):
    import capsule_demo_agent
    r = {{"goal": ctx.goal}}
    r["pythonpath"] = os.environ.get("PYTHONPATH")
    r["module"] = capsule_demo_agent.__file__
    r["pack"] = sorted(os.listdir("/pack"))
    r["key_env"] = sorted(k for k, v in os.environ.items() if KEY in v or k == "OPENAI_API_KEY")
    r["env_names"] = sorted(os.environ)
    try:
        with open(SECRET_FILE, encoding="utf-8") as handle:
            r["secret_file"] = "READ:" + handle.read()
    except OSError as exc:
        r["secret_file"] = _err(exc)
    for name, port in (("listener", LISTEN_PORT), ("llm_direct", LLM_PORT)):
        try:
            socket.create_connection(("127.0.0.1", port), 3).close()
            r[name] = "CONNECTED"
        except OSError as exc:
            r[name] = _err(exc)
    try:
        r["tool"] = ctx.run_tool("capsule-demo-tool", "double", x=21)
    except Exception as exc:
        r["tool"] = "refused: " + str(exc)
    try:
        ctx.run_tool("not-allowed-pack", x=1)
        r["tool_not_allowed"] = "CALLED"
    except Exception as exc:
        r["tool_not_allowed"] = "refused: " + str(exc)
    try:
        r["llm"] = ctx.call_llm([{{"role": "user", "content": "ping " + MARKER}}])
    except Exception as exc:
        r["llm"] = "error: " + str(exc)
    # A detached grandchild in a new session, carrying the run's marker: it
    # must not outlive the run. Newer agentnode wrappers block spawning at the
    # Python level (their own "defense in depth, not the boundary"): then the
    # agent does what a determined one would, fork + exec through libc.
    argv = [sys.executable, "-c", "import time; time.sleep(120)", MARKER]
    try:
        child = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r["spawned"] = {{"how": "subprocess", "pid": child.pid}}
    except PermissionError as exc:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        args = [a.encode() for a in argv]
        c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        pid = libc.fork()
        if pid == 0:
            libc.setsid()
            libc.execv(args[0], c_argv)
            libc._exit(127)
        r["spawned"] = {{"how": "libc", "pid": pid, "python_guard": str(exc)}}
    # It is running (exec'd, the marker in its command line) when the agent returns.
    import time
    for _ in range(50):
        try:
            with open("/proc/%d/cmdline" % r["spawned"]["pid"], "rb") as handle:
                if MARKER.encode() in handle.read():
                    r["spawned"]["alive"] = True
                    break
        except OSError:
            pass
        time.sleep(0.05)
    return r
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "{name}"
version = "{version}"
[tool.setuptools]
packages = ["{package}"]
'''


def _tarball(root: Path, name: str, package: str, module: str, source: str) -> bytes:
    """A community pack as agentnode's registry serves it: a .tar.gz of the
    source tree under one top directory."""
    src = root / f"{name}-{VERSION}"
    (src / package).mkdir(parents=True)
    (src / package / "__init__.py").write_text("")
    (src / package / f"{module}.py").write_text(source)
    (src / "pyproject.toml").write_text(PYPROJECT.format(name=name, version=VERSION, package=package))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(src, arcname=src.name)
    return buf.getvalue()


class _Loopback:
    """One loopback HTTP server: ``GET /artifacts/NAME`` serves a pack tarball;
    ``POST /v1/chat/completions`` is a fake OpenAI provider that records what
    reached it (the host broker's request, with the host's key)."""

    def __init__(self) -> None:
        self.artifacts: dict[str, bytes] = {}
        self.downloads: list[str] = []
        self.llm_requests: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                body = outer.artifacts.get(name)
                if not self.path.startswith("/artifacts/") or body is None:
                    self.send_error(404)
                    return
                outer.downloads.append(name)
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404)
                    return
                request = json.loads(raw or b"{}")
                outer.llm_requests.append({"authorization": self.headers.get("Authorization"), "body": request})
                reply = json.dumps({
                    "id": "chatcmpl-capsule", "object": "chat.completion", "created": int(time.time()),
                    "model": request.get("model", "gpt-4o-mini"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "pong from the fake provider"}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/artifacts/{name}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _cmdlines() -> dict[int, str]:
    """Every visible process's command line (NULs as spaces), by pid."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                out[int(entry)] = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
    return out


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry))
    return kids


def _run_agent_private_params() -> list[str]:
    """The private parameters this release's ``run_agent`` requires (0.24:
    ``_host_policy_decision``, which ``run_tool`` makes); none in 0.12."""
    params = inspect.signature(run_agent).parameters
    return [n for n, p in params.items() if n.startswith("_") and p.default is inspect.Parameter.empty]


def _run_agent(slug: str):
    """agentnode's ``run_agent(slug, entry=<lockfile entry>)`` where it is a
    public call (0.12); where it takes a private host-policy decision (0.24),
    through ``run_tool``, the public call that reaches it (answering yes if
    agentnode's guard prompts, as a user would; the test prints whether it
    did)."""
    private = _run_agent_private_params()
    if not private:
        return run_agent(slug, entry=read_lockfile()["packages"][slug])
    from agentnode_sdk import run_tool

    asked = []

    def confirm(slug_, tool_name, decision, entry):
        asked.append((slug_, tuple(getattr(decision, "action_types", ()) or ())))
        return True

    result = run_tool(slug, confirmation_callback=confirm)
    print(f"NOTE: run_agent needs {private}: ran through run_tool; confirmations asked: {asked}")
    return result


def _volume(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BIN, "volume", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A private agentnode home, lockfile and capsule data dir; the host
    secrets; the loopback servers. Everything is torn down after."""
    marker = f"capsule-an-{uuid.uuid4().hex[:12]}"
    key = f"sk-{marker}-host-only"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # capsule's volumes live here
    monkeypatch.setenv("AGENTNODE_LOCKFILE", str(tmp_path / "agentnode.lock"))
    monkeypatch.setenv("AGENTNODE_AGENT_SANDBOX", "1")  # agentnode's own switch
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("CAPSULE_CONFORMANCE_SECRET", marker)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    # Outside every grant and outside /tmp (the run's /tmp is its own).
    secret_dir = Path("/var/tmp") / marker
    secret_dir.mkdir(mode=0o755)
    secret = secret_dir / "secret.txt"
    secret.write_text(f"host secret {marker}")
    secret.chmod(0o644)
    server = _Loopback()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    wheels = os.environ.get("CAPSULE_CONFORMANCE_WHEELS")
    assert wheels, "the outer test provides a local wheel directory (setuptools, wheel) for pip's build"
    backend = CapsuleBackend(BIN, audit_log=False, pip_find_links=wheels)
    set_default_backend(backend)
    state = {
        "marker": marker, "key": key, "secret": secret, "server": server, "listener": listener,
        "backend": backend, "tmp": tmp_path, "volumes": [],
    }
    try:
        yield state
    finally:
        set_default_backend(None)
        for vol in state["volumes"]:
            _volume("rm", "-f", vol)
        backend.close()
        listener.close()
        server.close()
        secret.unlink()
        secret_dir.rmdir()


def test_install_package_then_run_agent_in_capsule(world):
    server, marker, key = world["server"], world["marker"], world["key"]
    listener = world["listener"]
    tmp = world["tmp"]
    tool_tar = _tarball(tmp / "src", TOOL_SLUG, "capsule_demo_tool", "tool", TOOL)
    agent_tar = _tarball(tmp / "src", AGENT_SLUG, "capsule_demo_agent", "agent", AGENT.format(
        secret_file=str(world["secret"]), listen_port=listener.getsockname()[1], llm_port=server.port,
        marker=marker, key=key))
    server.artifacts = {"tool.tar.gz": tool_tar, "agent.tar.gz": agent_tar}
    agent_config = {
        "entrypoint": "capsule_demo_agent.agent:run",
        "goal": "conformance",
        "llm_access": {"enabled": True, "max_calls": 2},
        "tool_access": {"allowed_packages": [TOOL_SLUG]},
        "limits": {"max_tool_calls": 3, "max_runtime_seconds": 120},
    }

    # run_tool (the way in on 0.24) runs nothing below agentnode's minimum
    # trust, "verified" at the lowest; run_agent itself (0.12) takes "unverified".
    agent_trust = "verified" if _run_agent_private_params() else "unverified"

    # -- agentnode's installer: download, hash, extract, build in capsule ------------
    def install_both():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no publisher signature": a local pack has none
            tool = install_package(
                slug=TOOL_SLUG, version=VERSION, artifact_url=server.url("tool.tar.gz"),
                artifact_hash="sha256:" + hashlib.sha256(tool_tar).hexdigest(),
                # "verified": a community tier (sandbox-required, never the host) that
                # agentnode's default run policy lets run_tool call.
                entrypoint="capsule_demo_tool.tool:double", package_type="toolpack", trust_level="verified",
                permissions={"network_level": "none"},
                # a declared action type, so agentnode's guard need not ask a human
                tools=[{"name": "double", "entrypoint": "capsule_demo_tool.tool:double", "action_type": "compute"}],
            )
            agent = install_package(
                slug=AGENT_SLUG, version=VERSION, artifact_url=server.url("agent.tar.gz"),
                artifact_hash="sha256:" + hashlib.sha256(agent_tar).hexdigest(),
                entrypoint=agent_config["entrypoint"], package_type="agent", trust_level=agent_trust,
                permissions={"network_level": "none"}, agent=agent_config,
            )
        return tool, agent

    if not world["backend"].check_available().doctor.get("default_policy", {}).get("view"):
        # No private view (no user namespaces, or CAPSULE_NO_NAMESPACES=1):
        # capsule cannot put the source at /src, so agentnode's build must
        # fail closed, through agentnode's own exception, with nothing built.
        from agentnode_sdk.sandbox import SandboxRequiredError as AgentnodeRequired

        with pytest.raises(AgentnodeRequired, match="namespace"):
            install_both()
        assert TOOL_SLUG not in read_lockfile()["packages"]
        # The backend creates the build's volume before capsule refuses the
        # run, and agentnode removes it only after a run that failed: it may
        # be there, but empty.
        for vol in _volume("ls", "-q").stdout.split():
            world["volumes"].append(vol)
            assert not os.listdir(json.loads(_volume("inspect", vol).stdout)[0]["Mountpoint"]), vol
        print("NOTE: capsule has no private view here: checked that agentnode's install fails closed")
        return
    done_tool, done_agent = install_both()
    assert done_tool.get("installed") and done_agent.get("installed"), (done_tool, done_agent)
    assert server.downloads == ["tool.tar.gz", "agent.tar.gz"]
    packages = read_lockfile()["packages"]
    volumes = {}
    for slug, tar, trust in ((TOOL_SLUG, tool_tar, "verified"), (AGENT_SLUG, agent_tar, agent_trust)):
        entry = packages[slug]
        digest = "sha256:" + hashlib.sha256(tar).hexdigest()
        assert entry["artifact_hash"] == digest and entry["trust_level"] == trust
        assert entry.get("sandboxed") is True, entry
        vol = sandbox_volume_name(slug, VERSION, digest)
        assert entry["sandbox_volume"] == vol
        world["volumes"].append(vol)
        volumes[slug] = vol
        insp = _volume("inspect", vol)
        assert insp.returncode == 0, insp.stderr
        assert json.loads(insp.stdout)[0]["Name"] == vol

    # -- agentnode's run_agent, sandbox switch on ------------------------------------
    before = set(_children_of(os.getpid()))
    result = _run_agent(AGENT_SLUG)
    assert result.success, result.error
    assert result.mode_used == "agent_sandbox"
    r = result.result
    print(json.dumps(r, indent=1, sort_keys=True))

    # The pack, from the volume, through PYTHONPATH=/pack.
    assert r["goal"] == "conformance"
    assert r["pythonpath"] == "/pack"
    assert r["module"] == "/pack/capsule_demo_agent/__init__.py"
    assert "capsule_demo_agent" in r["pack"]

    # Tools through agentnode's allowlisted RPC: the allowed one ran (in its
    # own capsule, from its own volume), the other was refused host-side.
    tool = r["tool"]
    assert isinstance(tool, dict) and tool["success"], tool
    assert tool["mode_used"] == "sandbox"
    assert tool["result"]["doubled"] == 42 and tool["result"]["pythonpath"] == "/pack"
    assert tool["result"]["module"] == "/pack/capsule_demo_tool/__init__.py"
    assert tool["result"]["key_visible"] is False
    assert r["tool_not_allowed"].startswith("refused:") and "allowlist" in r["tool_not_allowed"]

    # The LLM call reached agentnode's host broker, which called the provider
    # with the host's key; the agent got the completion, never the key.
    assert isinstance(r["llm"], dict) and r["llm"].get("content") == "pong from the fake provider", r["llm"]
    assert len(server.llm_requests) == 1
    seen = server.llm_requests[0]
    assert seen["authorization"] == f"Bearer {key}"
    assert seen["body"]["messages"] == [{"role": "user", "content": f"ping {marker}"}]

    # No host env, no key, no host file, no egress.
    assert r["key_env"] == [], r["key_env"]
    assert "CAPSULE_CONFORMANCE_SECRET" not in r["env_names"] and "OPENAI_BASE_URL" not in r["env_names"]
    assert r["secret_file"] == "EACCES", r["secret_file"]  # Landlock: outside every grant
    for name in ("listener", "llm_direct"):
        assert r[name] in ("EPERM", "EACCES", "ECONNREFUSED", "ENETUNREACH"), (name, r[name])
    listener.setblocking(False)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever reached the live listener
    assert len(server.llm_requests) == 1  # and the agent never reached the provider itself

    # No process of the run left: the detached grandchild (it did start), the
    # capsule processes of this backend, children of this test process.
    assert r["spawned"].get("alive") is True, r["spawned"]
    deadline = time.monotonic() + 5
    while True:
        left = {p: c for p, c in _cmdlines().items() if marker in c or world["backend"]._dir in c}
        left = {p: c for p, c in left.items() if p != os.getpid()}
        kids = set(_children_of(os.getpid())) - before
        if (not left and not kids) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes of the run survived it: {left}"
    assert not kids, f"children of the test process survived the run: {kids}"

    # capsule volume rm: the volumes are gone.
    for vol in volumes.values():
        assert _volume("rm", vol).returncode == 0
        assert _volume("inspect", vol).returncode != 0
        assert vol not in _volume("ls").stdout
    assert not any((world["tmp"] / "data").rglob(next(iter(volumes.values()))))

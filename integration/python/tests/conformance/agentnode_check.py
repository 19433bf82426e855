"""agentnode-sdk's own code driving CapsuleBackend (the pinned release and the latest).

Run inside the agentnode conformance venv by tests/test_conformance_agentnode.py:
the backend contract, through agentnode's own types, fail-closed gate,
ProcessSpec/MountSpec, agent wrapper and RPC host. agentnode's public
install + ``run_agent`` path end to end is agentnode_e2e.py.
"""

from __future__ import annotations

import inspect
import os
import socket
import sys

import pytest
from agentnode_sdk.sandbox import (
    SandboxBackend,
    enforce_sandbox_policy,
    get_default_backend,
    set_default_backend,
)
from agentnode_sdk.sandbox import SandboxRequiredError as AgentnodeRequired
from agentnode_sdk.sandbox.agent_container_wrapper import WRAPPER_SOURCE
from agentnode_sdk.sandbox.agent_rpc import AgentRpcHost
from agentnode_sdk.sandbox.agent_session import AgentSandboxSession
from agentnode_sdk.sandbox.types import MountSpec as AnMount
from agentnode_sdk.sandbox.types import ProcessSpec as AnSpec
from agentnode_sdk.sandbox.types import SandboxAvailability as AnAvailability

from capsule_sandbox import CapsuleBackend, SandboxRequiredError

BIN = os.environ["CAPSULE_BIN"]

AGENT = '''
import sys
print('agent interpreter:', sys.executable, sys.version.split()[0], sys.path, file=sys.stderr)
import os, socket

def run(ctx, **kwargs):
    report = {"goal": ctx.goal.upper(), "kwargs": kwargs}
    report["host_secret_env"] = os.environ.get("CAPSULE_CONFORMANCE_SECRET")
    try:
        open(os.environ.get("SECRET_FILE_HINT", "/nonexistent"), encoding="utf-8").read()
        report["host_file"] = "READ"
    except OSError:
        report["host_file"] = "denied"
    try:
        socket.create_connection(("127.0.0.1", int(kwargs.get("port", 9))), 2)
        report["net"] = "CONNECTED"
    except OSError:
        report["net"] = "blocked"
    try:
        ctx.run_tool("not-allowed-pack", x=1)
        report["tool"] = "CALLED"
    except Exception as exc:
        report["tool"] = "refused"
    return report
'''


def _gate(trust_level: str) -> None:
    """agentnode's own run-path gate, called as this release takes it: 0.24
    adds a required ``host_policy=`` (the host-trust snapshot ``run_tool``
    reads with ``config.read_host_trust_policy_snapshot``)."""
    if "host_policy" in inspect.signature(enforce_sandbox_policy).parameters:
        from agentnode_sdk.config import read_host_trust_policy_snapshot

        enforce_sandbox_policy(trust_level, host_policy=read_host_trust_policy_snapshot())
    else:
        enforce_sandbox_policy(trust_level)


@pytest.fixture
def backend(tmp_path):
    b = CapsuleBackend(BIN, audit_log=False)
    set_default_backend(b)
    yield b
    set_default_backend(None)
    b.close()


def test_contract_types_and_fail_closed_gate(backend):
    assert isinstance(backend, SandboxBackend)
    assert issubclass(SandboxRequiredError, AgentnodeRequired)
    avail = backend.check_available()
    assert isinstance(avail, AnAvailability) and avail.available, avail.reason
    assert avail.backend == BIN and avail.daemon_ok and avail.image_available and avail.image_digest
    assert get_default_backend() is backend
    _gate("unverified")  # agentnode's own gate: a sandbox is available
    gone = CapsuleBackend("/nonexistent/capsule")
    set_default_backend(gone)
    with pytest.raises(AgentnodeRequired):
        _gate("unverified")


def test_contract_run_process_with_agentnode_specs(backend):
    spec = backend.build_process_spec(["python", "-c", "import sys; print(sys.stdin.read()[::-1])"], network="none")
    assert backend.run_process(spec, input_text="abc", timeout=30)[:2] == (0, "cba\n")
    rc, out, err = backend.run_process(AnSpec(command=["sleep", "30"]), timeout=1)
    assert rc == -1  # what agentnode's run paths check
    rc, _, _ = backend.run_process(AnSpec(command=["sh", "-c", "exit 124"]), timeout=30)
    assert rc == 124
    try:
        backend.run_process(AnSpec(command=["true"], limits={"pids": "0"}), timeout=30)
    except AgentnodeRequired as exc:  # agentnode's own except clause
        assert "max_processes" in str(exc)
    else:
        raise AssertionError("a refused spec ran")


def test_contract_agent_session_with_agentnode_rpc_host(backend, tmp_path):
    """agentnode's real wrapper and RPC host over a capsule session, with the
    pack granted in place and found through the cwd (a host-path spec, beside
    the volume at /pack that agentnode_e2e.py drives)."""
    pack = tmp_path / "pack"
    (pack / "capsule_demo_agent").mkdir(parents=True)
    (pack / "capsule_demo_agent" / "__init__.py").write_text("")
    (pack / "capsule_demo_agent" / "agent.py").write_text(AGENT)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    os.environ["CAPSULE_CONFORMANCE_SECRET"] = "do-not-leak"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    spec = AnSpec(
        command=["python", "-c", WRAPPER_SOURCE],
        network="none",
        mounts=[AnMount(src=str(pack), dst=str(pack), read_only=True)],
        env={"SECRET_FILE_HINT": str(secret)},
        interactive=True,
    )
    spec.cwd = str(pack)  # capsule extension: the wrapper imports from its cwd
    session = backend.open_agent_session(spec)
    assert isinstance(session, AgentSandboxSession)
    host = AgentRpcHost(allowed_packages=[], max_tool_calls=5, llm_broker=None)
    try:
        out = host.run(session, init={"entrypoint": "capsule_demo_agent.agent:run", "goal": "hello",
                                      "kwargs": {"port": listener.getsockname()[1]}}, timeout=60)
    finally:
        session.close()
        listener.close()
    result = out["result"]
    assert result.get("ok"), result
    value = result["value"]
    assert value["goal"] == "HELLO" and value["host_secret_env"] is None
    assert value["host_file"] == "denied" and value["net"] == "blocked" and value["tool"] == "refused"


def test_contract_refused_agent_spec_is_clear(backend):
    spec = AnSpec(command=["python", "-c", WRAPPER_SOURCE], limits={"pids": "0"}, interactive=True)
    with pytest.raises(AgentnodeRequired, match="refused"):
        backend.open_agent_session(spec)

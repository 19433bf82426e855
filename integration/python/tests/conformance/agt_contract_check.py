"""AGT's provider contract, driven with the installed AGT packages (agt-sandbox 5.0.0).

Run inside the AGT conformance venv by tests/test_conformance_agt.py.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from agent_os.policies import PolicyDocument
from agent_sandbox.code_scanner import SandboxCodeViolation
from agent_sandbox.sandbox_provider import (
    ExecutionHandle,
    ExecutionStatus,
    SandboxConfig,
    SandboxProvider,
    SandboxResult,
    SessionHandle,
    SessionStatus,
)

import capsule_sandbox
from capsule_sandbox import CapsuleSandboxProvider


@pytest.fixture
def provider(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return CapsuleSandboxProvider(os.environ["CAPSULE_BIN"], workspace_root=root, audit_log=False)


def _policy(rules=(), action="allow", **extra):
    doc = {"name": "conformance", "version": "1", "rules": list(rules), "defaults": {"action": action}}
    doc.update(extra)
    return PolicyDocument.model_validate(doc)


def test_is_an_agt_provider_with_agt_types(provider):
    assert isinstance(provider, SandboxProvider)
    assert capsule_sandbox.SessionStatus is SessionStatus
    assert capsule_sandbox.ExecutionStatus is ExecutionStatus
    h = provider.create_session("agt-1", config=SandboxConfig(timeout_seconds=20))
    assert isinstance(h, SessionHandle) and h.status == SessionStatus.READY
    ex = provider.execute_code("agt-1", h.session_id, "print('hello')")
    assert isinstance(ex, ExecutionHandle) and isinstance(ex.result, SandboxResult)
    assert ex.status == ExecutionStatus.COMPLETED and ex.result.stdout == "hello\n"
    provider.destroy_session("agt-1", h.session_id)
    assert provider.get_session_status("agt-1", h.session_id) == SessionStatus.DESTROYED


def test_agt_async_defaults_work(provider):
    async def flow():
        h = await provider.create_session_async("agt-2", None, SandboxConfig(timeout_seconds=20))
        ex = await provider.execute_code_async("agt-2", h.session_id, "print(2 + 2)")
        await provider.destroy_session_async("agt-2", h.session_id)
        return ex

    assert asyncio.run(flow()).result.stdout == "4\n"


def test_policy_deny_refuses_before_anything_runs(provider):
    deny = _policy(
        rules=[{"name": "no-exec", "condition": {"field": "action", "operator": "eq", "value": "execute"},
                "action": "deny", "message": "execution is not allowed here"}],
    )
    h = provider.create_session("agt-3", deny)  # 5.0.0 positional policy
    with pytest.raises(PermissionError, match="execution is not allowed here"):
        provider.execute_code("agt-3", h.session_id, "open('ran', 'w').write('1')")
    assert not os.path.exists(os.path.join(h.workspace, "output", "ran"))
    provider.destroy_session("agt-3", h.session_id)


def test_policy_default_deny_is_applied(provider):
    h = provider.create_session("agt-4", policy=_policy(action="deny"))
    with pytest.raises(PermissionError):
        provider.execute_code("agt-4", h.session_id, "print(1)")
    provider.destroy_session("agt-4", h.session_id)


def test_policy_allow_runs_with_policy_limits(provider):
    h = provider.create_session("agt-5", policy=_policy(defaults={"action": "allow", "timeout_seconds": 7}))
    ex = provider.execute_code("agt-5", h.session_id, "print('allowed')")
    assert ex.result.success and ex.result.stdout == "allowed\n"
    provider.destroy_session("agt-5", h.session_id)


def test_agt_code_scanner_is_applied(provider):
    h = provider.create_session("agt-6")
    with pytest.raises(SandboxCodeViolation):
        provider.execute_code("agt-6", h.session_id, "import subprocess\nsubprocess.run(['id'])")
    provider.destroy_session("agt-6", h.session_id)


def test_result_conventions(provider):
    h = provider.create_session("agt-7")
    ex = provider.execute_code("agt-7", h.session_id, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert ex.result.exit_code == -15 and ex.status == ExecutionStatus.FAILED
    ex = provider.execute_code("agt-7", h.session_id, "import os, json; print(json.loads(os.environ['NONO_CONTEXT'])['k'])",
                               context={"k": "v"})
    assert ex.result.stdout == "v\n"
    unknown = provider.get_execution_status("agt-7", h.session_id, "nope")
    base = SandboxProvider.get_execution_status(provider, "agt-7", h.session_id, "nope")
    assert (unknown.status, unknown.result) == (base.status, base.result)
    r = provider.run("agt-7", [])
    assert isinstance(r, SandboxResult) and not r.success and r.exit_code == -1
    r = provider.run("agt-7", ["cat", "missing-file"])
    assert isinstance(r, SandboxResult) and not r.success
    provider.destroy_session("agt-7", h.session_id)
    r = provider.run("agt-7", ["sh", "-c", "sleep 5"], SandboxConfig(timeout_seconds=1))
    assert r.killed and r.exit_code == 124 and "timeout" in r.kill_reason


def test_stricter_than_agt_network_enabled_needs_an_allowlist(provider):
    with pytest.raises(ValueError, match="unrestricted"):
        provider.create_session("agt-8", config=SandboxConfig(network_enabled=True))
    h = provider.create_session("agt-8", policy=_policy(network_allowlist=["pypi.org"]))
    provider.destroy_session("agt-8", h.session_id)

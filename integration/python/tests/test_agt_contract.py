"""The Agent Governance Toolkit's provider contract, with or without AGT installed
(issue 13). tests/test_conformance_agt.py drives the real AGT packages."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from capsule_sandbox import CapsuleSandboxProvider, ExecutionStatus, SandboxConfig

OK = "print('ran')"


def _scripts(provider, handle):
    d = os.path.join(handle.workspace, "scripts")
    return sorted(f for f in os.listdir(d) if f.endswith(".py"))


class HostSession:
    """A governance host session (AGT's AdapterRuntimeSession shape)."""

    def __init__(self, decision):
        self.decision = decision
        self.calls = []

    def evaluate_pre_tool_call(self, *, tool_name, args, call_id):
        self.calls.append((tool_name, dict(args)))
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision


def _evaluation(allowed, *, transform=None, verdict=None, message=""):
    return SimpleNamespace(
        is_allowed=lambda: allowed,
        transform=transform,
        verdict=verdict or ("allow" if allowed else "deny"),
        message=message,
        reason_code="rc",
    )


def test_governance_allow_runs_and_sees_the_code(provider):
    gate = HostSession(_evaluation(True))
    h = provider.create_session("gov", runtime=gate)
    ex = provider.execute_code("gov", h.session_id, OK, context={"task": "t1"})
    assert ex.result.success and ex.result.stdout == "ran\n"
    assert gate.calls[0][0] == "sandbox_execute"
    assert gate.calls[0][1]["code"] == OK and gate.calls[0][1]["task"] == "t1"
    provider.destroy_session("gov", h.session_id)


@pytest.mark.parametrize(
    "decision, match",
    [
        (_evaluation(False, message="no way"), "no way"),
        (_evaluation(True, transform={"path": "code", "value": "print(2)"}, verdict="transform"), "transform"),
        (_evaluation(True, verdict="escalate"), "escalate"),
        (SimpleNamespace(allowed=False, reason="legacy deny"), "legacy deny"),
        ("yes", "not understood"),
        (None, "no verdict"),
        (RuntimeError("engine down"), "engine down"),
    ],
)
def test_governance_refusals_happen_before_anything_runs(provider, audit_log, decision, match):
    h = provider.create_session("gov", runtime=HostSession(decision))
    before = audit_log.read_text() if audit_log.exists() else ""
    with pytest.raises(PermissionError, match=match):
        provider.execute_code("gov", h.session_id, "open('ran', 'w').write('1')")
    assert _scripts(provider, h) == [], "code was written for a refused execution"
    assert not os.path.exists(os.path.join(h.workspace, "output", "ran"))
    after = audit_log.read_text() if audit_log.exists() else ""
    assert after == before, "capsule ran for a refused execution"
    provider.destroy_session("gov", h.session_id)


def test_host_session_given_positionally_is_still_the_gate(provider):
    h = provider.create_session("gov", HostSession(_evaluation(False, message="positional no")))
    with pytest.raises(PermissionError, match="positional no"):
        provider.execute_code("gov", h.session_id, OK)
    provider.destroy_session("gov", h.session_id)


def test_unknown_runtime_shape_refuses_the_session(provider, tmp_path):
    with pytest.raises(TypeError, match="not understood"):
        provider.create_session("gov", runtime=object())
    assert os.listdir(tmp_path / "workspaces") == []


def test_runtime_with_pre_tool_call_method(provider):
    class Verdicts:
        def pre_tool_call(self, *, tool_name, args, call_id):
            return SimpleNamespace(verdict="deny", allowed=False, reason="pre_tool_call said no")

    h = provider.create_session("gov", runtime=Verdicts())
    with pytest.raises(PermissionError, match="pre_tool_call said no"):
        provider.execute_code("gov", h.session_id, OK)
    provider.destroy_session("gov", h.session_id)


def test_both_create_session_shapes(provider):
    cfg = SandboxConfig(timeout_seconds=7)
    # 5.0.0: create_session(agent_id, policy=None, config=None), positional too.
    for h in (
        provider.create_session("shape", None, cfg),
        provider.create_session("shape", policy=None, config=cfg),
        provider.create_session("shape", cfg),
        provider.create_session("shape", runtime=None, config=cfg),
    ):
        ex = provider.execute_code("shape", h.session_id, OK)
        assert ex.result.success
        provider.destroy_session("shape", h.session_id)


def test_foreign_config_objects_are_accepted(provider):
    agt_like = SimpleNamespace(
        timeout_seconds=9.0, memory_mb=256, cpu_limit=1.0, network_enabled=False, read_only_fs=True,
        env_vars={"GREETING": "hi"}, input_dir=None, output_dir=None, runtime=None,
        output_max_bytes=1000, ring=None,
    )
    h = provider.create_session("cfg", config=agt_like)
    ex = provider.execute_code("cfg", h.session_id, "import os; print(os.environ['GREETING'])")
    assert ex.result.stdout == "hi\n"
    provider.destroy_session("cfg", h.session_id)
    h = provider.create_session("cfg", config={"timeout_seconds": 5})
    provider.destroy_session("cfg", h.session_id)
    with pytest.raises(TypeError):
        provider.create_session("cfg", config=SimpleNamespace(foo=1, network_enabled=False))
    with pytest.raises(TypeError):
        provider.create_session("cfg", config={"timeout_seconds": 5, "bogus": 1})
    # capsule stays stricter than AGT: network_enabled alone is not unrestricted egress.
    with pytest.raises(ValueError, match="unrestricted"):
        provider.create_session("cfg", config=SimpleNamespace(timeout_seconds=5, network_enabled=True))


def test_policy_without_agt_engine_is_refused_not_ungated(provider):
    try:
        import agent_os.policies.evaluator  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("AGT's policy engine is importable here (test_conformance_agt covers it)")
    policy = SimpleNamespace(name="p", rules=[], defaults=SimpleNamespace())
    with pytest.raises(ValueError, match="ungated"):
        provider.create_session("pol", policy)
    with pytest.raises(ValueError, match="ungated"):
        provider.create_session("pol", policy=policy)


def test_signal_death_is_minus_n(provider):
    h = provider.create_session("sig")
    ex = provider.execute_code("sig", h.session_id, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    r = ex.result
    assert r.exit_code == -9 and r.signal == 9 and r.termination_reason == "signaled"
    assert not r.success and not r.killed
    provider.destroy_session("sig", h.session_id)


@pytest.mark.parametrize("code", [124, 125])
def test_child_exit_124_125_is_just_an_exit_code(provider, code):
    h = provider.create_session("exit")
    ex = provider.execute_code("exit", h.session_id, f"import sys; sys.exit({code})")
    r = ex.result
    assert r.exit_code == code
    assert r.termination_reason == "exited"
    assert r.killed is False and r.kill_reason == ""
    assert r.error == ""
    provider.destroy_session("exit", h.session_id)


def test_context_in_both_variables(provider):
    h = provider.create_session("ctx")
    code = "import os; print(os.environ['CAPSULE_CONTEXT'] == os.environ['NONO_CONTEXT']); print(os.environ['NONO_CONTEXT'])"
    ex = provider.execute_code("ctx", h.session_id, code, context={"k": [1, 2]})
    first, second = ex.result.stdout.splitlines()
    assert first == "True" and json.loads(second) == {"k": [1, 2]}
    provider.destroy_session("ctx", h.session_id)
    with pytest.raises(ValueError):
        SandboxConfig(env_vars={"NONO_CONTEXT": "{}"})


def test_run_empty_and_unavailable_return_failed_results(provider, tmp_path):
    r = provider.run("a", [])
    assert r.success is False and r.exit_code == -1 and "empty" in r.stderr
    gone = CapsuleSandboxProvider(str(tmp_path / "no-such-capsule"), workspace_root=tmp_path)
    assert not gone.is_available()
    r = gone.run("a", ["true"])
    assert r.success is False and r.exit_code == -1 and "unavailable" in r.stderr


def test_run_without_session_id_reuses_the_live_session(provider):
    h = provider.create_session("reuse")
    provider.execute_code("reuse", h.session_id, "open('mark', 'w').write('from-session')")
    r = provider.run("reuse", ["cat", "mark"])
    assert r.success and r.stdout == "from-session", r.stderr
    provider.destroy_session("reuse", h.session_id)
    r = provider.run("reuse", ["cat", "mark"])
    assert not r.success  # a throwaway workspace now


def test_execution_status_of_unknown_id(provider):
    h = provider.create_session("st")
    handle = provider.get_execution_status("st", h.session_id, "nope")
    assert handle.status is ExecutionStatus.COMPLETED and handle.result is None
    provider.destroy_session("st", h.session_id)


def test_static_scan_refuses_subprocess_code(provider, make_provider):
    h = provider.create_session("scan")
    with pytest.raises(PermissionError):
        provider.execute_code("scan", h.session_id, "import subprocess as sp\nsp.run(['id'])")
    with pytest.raises(PermissionError):
        provider.execute_code("scan", h.session_id, "from os import system\nsystem('id')")
    assert _scripts(provider, h) == []
    provider.destroy_session("scan", h.session_id)
    lax = make_provider(static_scan=False)
    h = lax.create_session("scan")
    ex = lax.execute_code("scan", h.session_id, "import subprocess\nprint(subprocess.run(['true']).returncode)")
    assert ex.result.stdout == "0\n", ex.result.stderr
    lax.destroy_session("scan", h.session_id)

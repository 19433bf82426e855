"""AGT main's governance runtime, through AGT main's own nono provider and
through capsule's, side by side (issue 22, item 3).

Run by tests/test_agt_main_runtime.py with ``-p agt_main_plugin`` in a venv
holding ``agent-control-specification==0.3.1b1`` (the native ACS runtime)
and AGT main's provider files (vendored, ``agt_main/``).

The upstream provider is driven as AGT main's own unit tests drive it
(``tests/test_nono_sandbox.py``): its ``_nono_module`` replaced by a fake
that records what would run, since nono itself is not installed here. The
same runtime -- a real ``AgentControl`` on the native engine with a Python
policy, or a stub shaped like AGT's test runtimes -- goes to both providers;
they must reach the same verdict with the same exception type and message,
and ask the runtime the same question. capsule runs the code for real.
"""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest
from agent_control_specification import (
    AgentControl,
    ApprovalOutcome,
    Decision,
    EnforcementMode,
    InterventionPoint,
    InterventionPointResult,
    Verdict,
)
from agent_sandbox.nono_sandbox_provider import provider as nono_mod
from agent_sandbox.sandbox_provider import ExecutionStatus, SandboxConfig, SandboxProvider, SessionStatus

import capsule_sandbox
from capsule_sandbox import CapsuleSandboxProvider

AGENT = "agt-main"
CODE = "print('ran')"

MANIFEST = """agent_control_specification_version: 0.3.1-beta
metadata:
  name: capsule-sandbox-gate
tools:
  sandbox_execute: {}
policies:
  sandbox_policy:
    type: custom
    adapter: capsule_conformance
intervention_points:
  pre_tool_call:
    policy_target_kind: tool_args
    policy_target: "$.tool_call.args"
    tool_name_from: "$.tool_call.name"
    policy:
      id: sandbox_policy
"""


class CodePolicy:
    """The manifest's custom policy: decides on the code about to run."""

    def evaluate(self, invocation):
        code = invocation["input"]["policy_target"]["value"]["code"]
        if "crash" in code:
            raise RuntimeError("policy engine crashed")
        if "forbidden" in code:
            return {"decision": "deny", "reason": "forbidden_code", "message": "that code is not allowed"}
        if "ask" in code:
            return {"decision": "escalate", "reason": "needs_human"}
        if "warn" in code:
            return {"decision": "warn", "reason": "noted"}
        if "rewrite" in code:
            return {"decision": "transform", "reason": "rewritten", "transform": {"path": "$policy_target.code", "value": "pass"}}
        return {"decision": "allow"}


def control(resolver=None):
    return AgentControl.from_native(MANIFEST, None, CodePolicy(), approval_resolver=resolver)


class StubRuntime:
    """Shaped like the runtimes in AGT main's tests/test_nono_sandbox.py."""

    manifest = None

    def __init__(self, decision, reason=None, message=None, error=None):
        self.decision, self.reason, self.message, self.error = decision, reason, message, error

    async def evaluate_intervention_point(self, intervention_point, snapshot, mode=None):
        if self.error is not None:
            raise self.error
        return InterventionPointResult(
            verdict=Verdict(decision=Decision(self.decision), reason=self.reason, message=self.message)
        )

    def close(self):
        return None


class Recording:
    """Passes every call through to a runtime and records it."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    async def evaluate_intervention_point(self, intervention_point, snapshot, mode=None):
        self.calls.append((intervention_point, snapshot, mode))
        return await self.inner.evaluate_intervention_point(intervention_point, snapshot, mode)

    async def enforce(self, intervention_point, result, mode, **kwargs):
        return await self.inner.enforce(intervention_point, result, mode, **kwargs)


# -- the two providers ---------------------------------------------------------------


class _Caps:
    def allow_path(self, path, mode):
        pass

    def block_network(self):
        pass

    def proxy_only(self, proxy):
        pass


class FakeNono:
    """Stand-in for ``nono_py``, as in AGT main's unit tests: records commands."""

    AccessMode = SimpleNamespace(READ="READ", WRITE="WRITE", READ_WRITE="READ_WRITE")
    CapabilitySet = _Caps

    def __init__(self):
        self.commands = []

    def is_supported(self):
        return True

    def support_info(self):
        return SimpleNamespace(details="fake", is_supported=True)

    def sandboxed_exec(self, caps, command, cwd=None, timeout_secs=None, env=None, inherit_env=False):
        self.commands.append(list(command))
        return SimpleNamespace(stdout=b"ran\n", stderr=b"", exit_code=0)


class Upstream:
    name = "AGT main's nono provider"

    def __init__(self, monkeypatch, tmp_path):
        self.nono = FakeNono()
        monkeypatch.setattr(nono_mod, "_nono_module", self.nono)
        self.provider = nono_mod.NonoSandboxProvider()

    def ran_nothing(self, handle):
        return self.nono.commands == []


class Capsule:
    name = "capsule"

    def __init__(self, monkeypatch, tmp_path, **kwargs):
        root = tmp_path / "capsule-ws"
        root.mkdir(exist_ok=True)
        self.provider = CapsuleSandboxProvider(os.environ["CAPSULE_BIN"], workspace_root=root, audit_log=False, **kwargs)

    def ran_nothing(self, handle):
        scripts = os.path.join(handle.workspace, "scripts")
        return not [f for f in os.listdir(scripts) if f.endswith(".py")]


def sync_call(provider, handle, code):
    return provider.execute_code(handle.agent_id, handle.session_id, code)


def loop_call(provider, handle, code):
    """A synchronous callback running inside an async host's event loop."""

    async def inside():
        return provider.execute_code(handle.agent_id, handle.session_id, code)

    return asyncio.run(inside())


def async_call(provider, handle, code):
    async def caller():
        return await provider.execute_code_async(handle.agent_id, handle.session_id, code)

    return asyncio.run(caller())


def outcome(side, runtime, code=CODE, call=sync_call):
    handle = side.provider.create_session(AGENT, runtime=runtime, config=SandboxConfig(timeout_seconds=30))
    try:
        ex = call(side.provider, handle, code)
        return ("ran", ex.status, ex.result.exit_code, ex.result.stdout)
    except Exception as exc:  # noqa: BLE001 - the outcome compared
        assert side.ran_nothing(handle), f"{side.name} ran code it refused"
        return ("refused", type(exc), str(exc))
    finally:
        side.provider.destroy_session(handle.agent_id, handle.session_id)


def refused_kind(exc_type):
    return "PermissionError" if issubclass(exc_type, PermissionError) else exc_type.__name__


def both(monkeypatch, tmp_path, runtime_factory, code=CODE, call=sync_call):
    results = []
    for side in (Upstream(monkeypatch, tmp_path), Capsule(monkeypatch, tmp_path)):
        got = outcome(side, runtime_factory(), code, call)
        if got[0] == "refused":
            got = ("refused", refused_kind(got[1]), got[2])
        results.append(got)
    return results


# -- tests ------------------------------------------------------------------------------


def test_capsule_is_a_provider_of_agt_main(tmp_path, monkeypatch):
    capsule = Capsule(monkeypatch, tmp_path).provider
    assert isinstance(capsule, SandboxProvider)
    assert issubclass(capsule_sandbox.SandboxConfig, SandboxConfig)
    h = capsule.create_session(AGENT, runtime=control(), config=SandboxConfig(timeout_seconds=20))
    assert h.status == SessionStatus.READY
    ex = capsule.execute_code(AGENT, h.session_id, CODE)
    assert ex.status == ExecutionStatus.COMPLETED and ex.result.stdout == "ran\n", ex.result.stderr
    capsule.destroy_session(AGENT, h.session_id)


ALLOW = ("ran", ExecutionStatus.COMPLETED, 0, "ran\n")


def _approve(point, result):
    return ApprovalOutcome.ALLOW


def _refuse(point, result):
    return ApprovalOutcome.DENY


@pytest.mark.parametrize(
    "runtime, code, expected",
    [
        # The native engine with a policy on the code.
        (control, CODE, ALLOW),
        (control, "print('ran')  # warn", ALLOW),
        (control, "print('ran')  # forbidden", ("refused", "PermissionError", "Governance denied: that code is not allowed")),
        (control, "print('ran')  # rewrite",
         ("refused", "PermissionError",
          "Governance returned a transform verdict, which the sandbox cannot apply to code it is about to execute")),
        # escalate: the runtime's approval path (none, approved, refused).
        (control, "print('ran')  # ask", ("refused", "PermissionError", "Governance denied: approval_denied")),
        (lambda: control(_approve), "print('ran')  # ask", ALLOW),
        (lambda: control(_refuse), "print('ran')  # ask", ("refused", "PermissionError", "Governance denied: approval_denied")),
        # The engine fails closed when the policy raises: an error verdict.
        (control, "print('ran')  # crash", "deny-runtime-error"),
        # Stub runtimes, as AGT main's own tests write them.
        (lambda: StubRuntime("allow"), CODE, ALLOW),
        (lambda: StubRuntime("deny", "sandbox_denied", "nope"), CODE, ("refused", "PermissionError", "Governance denied: nope")),
        (lambda: StubRuntime("deny", "sandbox_denied"), CODE, ("refused", "PermissionError", "Governance denied: sandbox_denied")),
        (lambda: StubRuntime("escalate", "needs_human"), CODE, ("refused", "PermissionError", "Governance denied: approval_failed")),
    ],
)
def test_upstream_and_capsule_reach_the_same_verdict(monkeypatch, tmp_path, runtime, code, expected):
    upstream, capsule = both(monkeypatch, tmp_path, runtime, code)
    assert capsule == upstream
    if expected == "deny-runtime-error":
        assert upstream[:2] == ("refused", "PermissionError") and "Governance denied: " in upstream[2], upstream
    else:
        assert upstream == expected


def test_a_runtime_that_raises_refuses_in_both_capsule_naming_the_error(monkeypatch, tmp_path):
    def failing():
        return StubRuntime("allow", error=ConnectionError("policy service unreachable"))

    upstream, capsule = both(monkeypatch, tmp_path, failing)
    # Upstream lets the runtime's own exception through; capsule refuses as a
    # governance denial (a PermissionError) that names it. Neither runs anything.
    assert upstream == ("refused", "ConnectionError", "policy service unreachable")
    assert capsule == (
        "refused",
        "PermissionError",
        "Governance denied: the governance runtime failed (ConnectionError: policy service unreachable)",
    )


def test_a_runtime_that_never_answers_is_refused_by_capsule(monkeypatch, tmp_path):
    class Hangs(StubRuntime):
        async def evaluate_intervention_point(self, intervention_point, snapshot, mode=None):
            await asyncio.sleep(120)

    # (Upstream would wait for ever: its host session has no bound here.)
    side = Capsule(monkeypatch, tmp_path, governance_timeout_seconds=1)
    got = outcome(side, Hangs("allow"))
    assert got[2] == "Governance denied: the governance runtime did not answer within 1s", got


def test_both_ask_the_runtime_the_same_question(monkeypatch, tmp_path):
    asked = []
    for side in (Upstream(monkeypatch, tmp_path), Capsule(monkeypatch, tmp_path)):
        runtime = Recording(control())
        assert outcome(side, runtime, CODE) == ALLOW
        ((point, snapshot, mode),) = runtime.calls
        assert point is InterventionPoint.PRE_TOOL_CALL, side.name
        assert mode is EnforcementMode.ENFORCE, side.name
        env = snapshot["envelope"]
        assert env["timestamp"] and env["session"]["started_at"] and snapshot["tool_call"]["id"]
        env["timestamp"] = env["session"]["started_at"] = env["session"]["id"] = snapshot["tool_call"]["id"] = "-"
        asked.append(snapshot)
    assert asked[0] == asked[1]
    assert asked[1]["tool_call"]["args"] == {"agent_id": AGENT, "action": "execute", "code": CODE}


@pytest.mark.parametrize("call", [sync_call, loop_call, async_call], ids=["sync", "inside-event-loop", "async"])
def test_callers_sync_inside_a_running_loop_and_async(monkeypatch, tmp_path, call):
    assert both(monkeypatch, tmp_path, control, CODE, call) == [ALLOW, ALLOW]
    denied = ("refused", "PermissionError", "Governance denied: that code is not allowed")
    assert both(monkeypatch, tmp_path, control, "print('ran')  # forbidden", call) == [denied, denied]

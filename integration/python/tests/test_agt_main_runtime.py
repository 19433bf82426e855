"""AGT main's governance runtime (issue 22, item 3).

AGT's main branch passes an AgentControl runtime -- an object with an async
``evaluate_intervention_point(intervention_point, snapshot, mode)`` -- to
``create_session(agent_id, *, runtime=..., config=...)``. Its nono provider
wraps it in a host session (``agent_control_specification.HostSession``) and
asks ``pre_tool_call(tool_name="sandbox_execute", ...)`` before running code:
a transform or a verdict that does not permit raises ``PermissionError``.

The first part here drives capsule's provider with runtimes written the way
AGT's own tests write them, without AGT installed (these run in every pass:
root, capsule-test, the installed wheel). The second part runs
``conformance/agt_main_check.py`` in a venv with AGT main's upstream files
(vendored, ``conformance/agt_main/``) and the pinned
``agent-control-specification`` from PyPI: the same verdicts through the
upstream nono provider and through capsule, compared.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import re
import time
from enum import Enum
from types import SimpleNamespace

import pytest

from _conformance import CONFORMANCE, HERE, run_pytest, venv

OK = "print('ran')"
WRITES = "open('ran', 'w').write('1')"


def _result(decision, *, reason=None, message=None, transform=None):
    return SimpleNamespace(
        verdict=SimpleNamespace(decision=decision, reason=reason, message=message, transform=transform)
    )


class Runtime:
    """An AgentControl-shaped runtime: records every evaluation."""

    def __init__(self, answer, *, enforce=None):
        self.answer = answer
        self.calls = []
        if enforce is not None:
            self.enforce = enforce

    async def evaluate_intervention_point(self, intervention_point, snapshot, mode=None):
        self.calls.append((intervention_point, snapshot, mode))
        answer = self.answer
        if callable(answer):
            answer = answer()
            if asyncio.iscoroutine(answer):
                answer = await answer
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _nothing_ran(h, audit_log, before):
    scripts = os.path.join(h.workspace, "scripts")
    assert sorted(f for f in os.listdir(scripts) if f.endswith(".py")) == [], "code was written"
    assert not os.path.exists(os.path.join(h.workspace, "output", "ran"))
    after = audit_log.read_text() if audit_log.exists() else ""
    assert after == before, "capsule ran for a refused execution"


def _refused(provider, audit_log, runtime, match, *, code=WRITES, exc=PermissionError):
    h = provider.create_session("gov-main", runtime=runtime)
    before = audit_log.read_text() if audit_log.exists() else ""
    try:
        with pytest.raises(exc, match=match) as info:
            provider.execute_code("gov-main", h.session_id, code)
        _nothing_ran(h, audit_log, before)
        return info.value
    finally:
        provider.destroy_session("gov-main", h.session_id)


# -- allow ------------------------------------------------------------------------


def test_allow_runs_and_the_runtime_sees_upstreams_snapshot(provider):
    runtime = Runtime(_result("allow"))
    h = provider.create_session("gov-main", runtime=runtime)
    ex = provider.execute_code("gov-main", h.session_id, OK, context={"task": "t1"})
    assert ex.result.success and ex.result.stdout == "ran\n", ex.result.stderr
    ((point, snapshot, mode),) = runtime.calls
    assert point == "pre_tool_call" and mode == "enforce"
    call = snapshot["tool_call"]
    assert call["name"] == "sandbox_execute" and re.fullmatch(r"[0-9a-f]{8}", call["id"])
    assert call["args"] == {"agent_id": "gov-main", "action": "execute", "code": OK, "task": "t1"}
    env = snapshot["envelope"]
    assert env["agent"] == {"id": "gov-main", "version": "1.0.0", "name": "gov-main"}
    assert env["session"]["id"] == h.session_id and env["session"]["started_at"]
    assert env["intervention_point"] == "pre_tool_call" and env["timestamp"]
    assert env["budgets"] == {"tool_call_count": 0, "token_count": 0, "elapsed_seconds": 0.0, "cost_usd": 0.0}
    provider.destroy_session("gov-main", h.session_id)


class Decision(str, Enum):
    ALLOW = "allow"
    WARN = "warn"


@pytest.mark.parametrize("decision", ["warn", Decision.ALLOW, Decision.WARN])
def test_warn_permits_as_upstream(provider, decision):
    # Decision.permits upstream: allow, warn (and transform, refused below).
    h = provider.create_session("gov-main", runtime=Runtime(_result(decision)))
    assert provider.execute_code("gov-main", h.session_id, OK).result.stdout == "ran\n"
    provider.destroy_session("gov-main", h.session_id)


def test_context_cannot_forge_what_the_policy_sees(provider):
    runtime = Runtime(_result("allow"))
    h = provider.create_session("gov-main", runtime=runtime)
    provider.execute_code("gov-main", h.session_id, OK, context={"code": "pass", "agent_id": "x", "k": 1})
    args = runtime.calls[0][1]["tool_call"]["args"]
    assert args == {"agent_id": "gov-main", "action": "execute", "code": OK, "k": 1}
    provider.destroy_session("gov-main", h.session_id)


def test_a_synchronous_evaluate_intervention_point_is_understood(provider):
    class Sync:
        def evaluate_intervention_point(self, intervention_point, snapshot, mode):
            return _result("deny", reason="sync_rule")

    with pytest.raises(PermissionError, match="Governance denied: sync_rule"):
        provider.run_once("gov-main", OK, runtime=Sync())


# -- deny ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, match",
    [
        (_result("deny", reason="sandbox_denied", message="nope"), r"^Governance denied: nope$"),
        (_result("deny", reason="sandbox_denied"), r"^Governance denied: sandbox_denied$"),
        # An escalation with no approval path (no enforce()): upstream's host
        # session fails it closed as approval_failed; its message, if any, wins.
        (_result("escalate", reason="needs_human"), r"^Governance denied: approval_failed$"),
        (_result("escalate", reason="needs_human", message="ask"), r"^Governance denied: ask$"),
        (_result("deny", reason="runtime_error:policy_failed"), "runtime_error:policy_failed"),
        (_result("transform", transform={"path": "$.code", "value": "pass"}),
         r"^Governance returned a transform verdict, which the sandbox cannot apply to code it is about to execute$"),
        (_result("allowed"), "not permit|not understood"),
        (_result("ALLOW!"), "not permit|not understood"),
    ],
)
def test_deny_refuses_before_anything_runs(provider, audit_log, answer, match):
    err = _refused(provider, audit_log, Runtime(answer), match)
    assert type(err).__name__ == "GovernanceError" and isinstance(err, PermissionError)


class AgentControlBlocked(Exception):
    """Named as agent_control_specification's (capsule does not import it)."""


class AgentControlSuspended(Exception):
    pass


def test_escalation_goes_to_the_runtimes_approval_path(provider, audit_log):
    approved = []

    async def approve(point, result, mode):
        approved.append((point, mode))

    runtime = Runtime(_result("escalate", reason="needs_human", message="ask first"), enforce=approve)
    h = provider.create_session("gov-main", runtime=runtime)
    assert provider.execute_code("gov-main", h.session_id, OK).result.stdout == "ran\n"
    assert approved == [("pre_tool_call", "enforce")]
    provider.destroy_session("gov-main", h.session_id)

    async def block(point, result, mode):
        raise AgentControlBlocked("no")

    async def suspend(point, result, mode):
        raise AgentControlSuspended("later")

    async def broken(point, result, mode):
        raise KeyError("resolver bug")

    for enforce, match in [
        (block, r"^Governance denied: approval_denied$"),
        (suspend, r"^Governance denied: needs_human$"),
        (broken, r"^Governance denied: approval_failed$"),
    ]:
        _refused(provider, audit_log, Runtime(_result("escalate", reason="needs_human"), enforce=enforce), match)


def test_an_approval_that_never_comes_is_a_deny(make_provider, audit_log):
    async def hang(point, result, mode):
        await asyncio.sleep(60)

    provider = make_provider(governance_approval_timeout_seconds=0.5)
    start = time.monotonic()
    _refused(provider, audit_log, Runtime(_result("escalate", reason="needs_human"), enforce=hang),
             r"^Governance denied: runtime_error:approval_timeout$")
    assert time.monotonic() - start < 20


# -- error: fail closed --------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, match",
    [
        (RuntimeError("engine down"), r"governance runtime failed \(RuntimeError: engine down\)"),
        (asyncio.CancelledError(), r"governance runtime failed \(CancelledError"),
        (None, "no verdict"),
        ("allow", "no verdict"),
        (SimpleNamespace(verdict=None), "no verdict"),
        (SimpleNamespace(verdict=SimpleNamespace(decision=None)), "no verdict"),
    ],
)
def test_a_failing_runtime_fails_closed(provider, audit_log, answer, match):
    err = _refused(provider, audit_log, Runtime(answer), match)
    assert str(err).startswith("Governance denied: ")


def test_a_runtime_that_does_not_answer_is_a_deny(make_provider, audit_log):
    async def forever():
        await asyncio.sleep(60)

    def blocks():  # synchronous: the event loop itself is stuck
        time.sleep(5)
        return _result("allow")

    provider = make_provider(governance_timeout_seconds=0.5)
    for answer in (forever, blocks):
        start = time.monotonic()
        _refused(provider, audit_log, Runtime(answer), r"did not answer within 0\.5s")
        assert time.monotonic() - start < 4


def test_governance_timeouts_are_validated(make_provider):
    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises((TypeError, ValueError)):
            make_provider(governance_timeout_seconds=bad)


# -- callers: sync, inside a running event loop, async --------------------------------


def test_called_from_sync_code_and_from_a_running_event_loop(provider, audit_log):
    var = contextvars.ContextVar("trace", default="none")
    seen = []

    def answer():
        seen.append(var.get())
        return _result("allow")

    h = provider.create_session("gov-main", runtime=Runtime(answer))
    deny = provider.create_session("gov-main", runtime=Runtime(_result("deny", message="no")))

    var.set("sync-caller")
    assert provider.execute_code("gov-main", h.session_id, OK).result.stdout == "ran\n"

    async def inside_a_loop():
        var.set("loop-caller")
        # A synchronous framework callback running on the loop's thread.
        ex = provider.execute_code("gov-main", h.session_id, OK)
        with pytest.raises(PermissionError, match="^Governance denied: no$"):
            provider.execute_code("gov-main", deny.session_id, OK)
        return ex

    assert asyncio.run(inside_a_loop()).result.stdout == "ran\n"

    async def async_caller():
        var.set("async-caller")
        ex = await provider.execute_code_async("gov-main", h.session_id, OK)
        with pytest.raises(PermissionError, match="^Governance denied: no$"):
            await provider.execute_code_async("gov-main", deny.session_id, OK)
        return ex

    assert asyncio.run(async_caller()).result.stdout == "ran\n"
    # The runtime runs with the caller's context (trace ids, tenant...).
    assert seen == ["sync-caller", "loop-caller", "async-caller"]
    provider.destroy_session("gov-main", h.session_id)
    provider.destroy_session("gov-main", deny.session_id)


def test_runtime_and_policy_together_are_refused(provider):
    with pytest.raises(ValueError, match="not both"):
        provider.create_session("gov-main", SimpleNamespace(rules=[]), runtime=Runtime(_result("allow")))


# -- through AGT main's upstream provider file ------------------------------------------

# agent_control_specification, pinned: what AGT main's pyproject names
# (policy-engine/sdk/python, 0.3.1b1); its HostSession module is not in that
# release, so it comes vendored with the nono provider (conformance/agt_main/).
AGT_MAIN_REQUIREMENTS = ["agent-control-specification==0.3.1b1"]


def test_agt_main_upstream_provider_and_capsule_agree(capsule_bin):
    python = venv("agt-main", AGT_MAIN_REQUIREMENTS)
    done = run_pytest(
        python,
        ["-p", "agt_main_plugin", "--rootdir", str(HERE), str(CONFORMANCE / "agt_main_check.py")],
        capsule_bin=capsule_bin,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary) and "skipped" not in summary and "failed" not in summary, out[-6000:]

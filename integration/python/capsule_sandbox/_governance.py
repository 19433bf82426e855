"""The governance gate ``execute_code`` applies before anything runs.

Shapes understood (everything else is refused, never skipped):

* a host session answering ``evaluate_pre_tool_call(tool_name=, args=,
  call_id=)`` (AGT's ``AdapterRuntimeSession``) or ``pre_tool_call(...)``;
* an AgentControl runtime answering ``evaluate_intervention_point(
  intervention_point, snapshot, mode)``, async or not (AGT main's): asked at
  ``pre_tool_call`` for a ``sandbox_execute`` call with the snapshot AGT main's
  host session (``agent_control_specification.HostSession``) builds, an
  ``escalate`` resolved through the runtime's ``enforce`` (its approval path)
  as that host session does; a runtime that raises or does not answer within
  the provider's ``governance_timeout_seconds`` refuses (see ``RuntimeGate``);
* a stateless runtime answering ``evaluate(intervention_point, snapshot)``
  (AGT's ``AgtRuntime``): wrapped in AGT's own host session, so it needs
  ``agt.policies.session`` importable, else the session is refused;
* an AGT 5.0.0 policy document (``create_session(agent_id, policy)``):
  evaluated with AGT's ``PolicyEvaluator``; refused when AGT's policy engine
  is not importable (AGT 5.0.0's own provider would run ungated then).

A verdict is allowed only when it says so in a shape understood here: a
``transform`` verdict is refused (the gate cannot rewrite code it is about
to run), so is ``escalate``, an exception, or anything unrecognised. An
AgentControl result (``result.verdict.decision``) permits on ``allow`` and
``warn`` only, and is refused with AGT main's own messages.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import threading
import uuid
from datetime import datetime, timezone
from enum import Enum
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Optional, Tuple

from capsule_sandbox import _agt


class GovernanceError(PermissionError):
    """The governance gate refused (or could not evaluate) an execution."""


_ALLOW_WORDS = ("allow", "allowed", "permit", "permitted")


def _word(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, Enum):
        value = value.value
    return str(value).strip().lower()


# AGT main (agent_control_specification): Decision.permits is allow, warn and
# transform; a transform is refused here (see TRANSFORM_REFUSED).
_PERMITS = ("allow", "warn")
_REFUSES = ("deny", "escalate")
TRANSFORM_REFUSED = (
    "Governance returned a transform verdict, which the sandbox cannot apply "
    "to code it is about to execute"
)


def _acs_verdict(result: Any) -> Any:
    """``result.verdict`` when ``result`` is shaped like an AgentControl
    ``InterventionPointResult`` (its verdict has a ``decision``), else None."""
    found = getattr(result, "verdict", None)
    return found if found is not None and hasattr(found, "decision") else None


def enforce_result(result: Any) -> None:
    """Raise, as AGT main's nono provider does, unless an AgentControl result
    permits execution: ``PermissionError("Governance denied: <message or
    reason>")``, or its transform message. Any other shape is refused too."""
    found = _acs_verdict(result)
    kind = _word(getattr(found, "decision", None))
    if not kind:
        raise GovernanceError("Governance denied: the governance runtime returned no verdict")
    if kind == "transform":
        raise GovernanceError(TRANSFORM_REFUSED)
    if kind in _PERMITS and getattr(found, "transform", None) is None:
        return
    if kind in _PERMITS:  # a permitting verdict that still carries a rewrite
        raise GovernanceError(TRANSFORM_REFUSED)
    if kind in _REFUSES:
        reason = getattr(found, "message", None) or getattr(found, "reason", None) or kind
        raise GovernanceError(f"Governance denied: {reason}")
    raise GovernanceError(f"Governance denied: governance verdict {kind!r} is not understood")


def verdict(decision: Any) -> Tuple[bool, str]:
    """``(allowed, reason)`` for a verdict object; unknown shapes are not allowed."""
    if decision is None:
        return False, "the governance runtime returned no verdict"
    kind = _word(getattr(decision, "verdict", None))
    transform = getattr(decision, "transform", None)
    reason = (
        getattr(decision, "message", None)
        or getattr(decision, "reason_code", None)
        or getattr(decision, "reason", None)
        or kind
        or "denied"
    )
    if transform is not None or kind == "transform":
        return False, (
            "governance returned a transform verdict, which the sandbox cannot apply "
            "to code it is about to execute"
        )
    allowed: Any = None
    is_allowed = getattr(decision, "is_allowed", None)
    if callable(is_allowed):
        allowed = is_allowed()
    elif isinstance(getattr(decision, "allowed", None), bool):
        allowed = decision.allowed
    elif isinstance(decision, bool):
        allowed = decision
    elif kind is not None:
        allowed = kind in _ALLOW_WORDS
    if not isinstance(allowed, bool):
        return False, f"governance verdict of type {type(decision).__name__} is not understood"
    if allowed and kind is not None and kind not in _ALLOW_WORDS:
        return False, f"governance verdict {kind!r} does not permit execution"
    return allowed, str(reason)


def _failed(what: str, exc: BaseException) -> GovernanceError:
    return GovernanceError(f"Governance denied: the {what} failed ({type(exc).__name__}: {exc})")


class Gate:
    """One session's gate: ``check(agent_id, code, context)`` raises on refusal."""

    def __init__(self, ask: Callable[[dict[str, Any]], Any], what: str) -> None:
        self._ask = ask
        self.what = what

    def check(self, agent_id: str, code: str, context: Optional[Mapping[str, Any]]) -> None:
        args: dict[str, Any] = {"agent_id": agent_id, "action": "execute", "code": code}
        if context:
            args.update(context)
        try:
            decision = self._ask(args)
        except Exception as exc:  # noqa: BLE001 - an evaluation failure refuses
            raise _failed(self.what, exc) from exc
        if _acs_verdict(decision) is not None:  # AGT main's HostSession given as the runtime
            enforce_result(decision)
            return
        allowed, reason = verdict(decision)
        if not allowed:
            raise GovernanceError(f"Governance denied: {reason}")


class _NoAnswer(Exception):
    """The runtime did not answer in time."""


def _await(call: Callable[[], Any], timeout: float) -> Any:
    """``call()`` -- a coroutine function's call or a plain one -- run to
    completion on a worker thread with its own event loop, in a copy of the
    caller's context (trace ids and the like reach the runtime).

    A worker thread whether or not an event loop runs on the caller's thread:
    driving a running loop from inside itself would deadlock (AGT main's
    ``run_sync`` hands that case to a thread too), and only a thread can be
    given up on when the runtime blocks without awaiting. Raises ``_NoAnswer``
    after ``timeout`` seconds; a thread stuck in synchronous code is a daemon
    and ends with the process.
    """
    outcome: dict[str, Any] = {}

    async def main() -> Any:
        value = call()
        if not inspect.isawaitable(value):
            return value
        task = asyncio.ensure_future(value)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            task.cancel()
            raise _NoAnswer()
        return task.result()

    def runner() -> None:
        try:
            outcome["value"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            outcome["error"] = exc

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(runner,), name="capsule-governance", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise _NoAnswer()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds, else ``TypeError``/``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return float(value)


class RuntimeGate(Gate):
    """AGT main's gate over an AgentControl runtime.

    Asks as AGT main's nono provider does through its host session
    (``agent_control_specification.HostSession(runtime, agent_id=,
    session_id=).pre_tool_call(tool_name="sandbox_execute", args=, call_id=)``):
    intervention point ``pre_tool_call``, mode ``enforce``, the snapshot
    ``{"tool_call": {"name", "args", "id"}, "envelope": {agent, session,
    intervention_point, timestamp, budgets}}`` with the counters at zero (the
    provider records none). ``args`` is ``agent_id``, ``action="execute"`` and
    ``code``, plus the execution's context -- which, unlike upstream, cannot
    replace those three: the policy sees the code that runs.

    An ``escalate`` goes to the runtime's ``enforce`` (its approval resolver),
    bounded by ``approval_timeout`` seconds, folded as the host session does:
    returned -> allow; ``AgentControlSuspended`` -> still escalated (denied);
    ``AgentControlBlocked`` -> deny ``approval_denied``; no ``enforce`` or any
    other error -> deny ``approval_failed``; the timeout -> deny
    ``runtime_error:approval_timeout``. Stricter than upstream, the evaluation
    itself is bounded (``timeout``), and a runtime that raises is refused as
    ``GovernanceError`` naming the error (upstream lets it propagate).
    """

    def __init__(self, runtime: Any, agent_id: str, session_id: str, *, timeout: float, approval_timeout: float) -> None:
        # Gate's interface (check, what); not its one-call ask.
        self.what = "governance runtime"
        self._runtime = runtime
        self._agent_id = agent_id
        self._session_id = session_id
        self._started_at = _utc_now()
        self._timeout = timeout
        self._approval_timeout = approval_timeout

    def snapshot(self, args: dict[str, Any], call_id: str) -> dict[str, Any]:
        return {
            "tool_call": {"name": "sandbox_execute", "args": args, "id": call_id},
            "envelope": {
                "agent": {"id": self._agent_id, "version": "1.0.0", "name": self._agent_id},
                "session": {"id": self._session_id, "started_at": self._started_at},
                "intervention_point": "pre_tool_call",
                "timestamp": _utc_now(),
                "budgets": {"tool_call_count": 0, "token_count": 0, "elapsed_seconds": 0.0, "cost_usd": 0.0},
            },
        }

    def check(self, agent_id: str, code: str, context: Optional[Mapping[str, Any]]) -> None:
        args: dict[str, Any] = {"agent_id": agent_id, "action": "execute", "code": code}
        for key, value in (context or {}).items():
            args.setdefault(key, value)
        point, mode = _agt.acs_pre_tool_call()
        snapshot = self.snapshot(args, uuid.uuid4().hex[:8])
        evaluate = self._runtime.evaluate_intervention_point
        try:
            result = _await(lambda: evaluate(point, snapshot, mode), self._timeout)
        except _NoAnswer:
            raise GovernanceError(
                f"Governance denied: the governance runtime did not answer within {self._timeout:g}s"
            ) from None
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - fail closed
            raise _failed(self.what, exc) from exc
        if _word(getattr(_acs_verdict(result), "decision", None)) == "escalate":
            result = self._resolve_escalation(point, result, mode)
        enforce_result(result)

    def _resolve_escalation(self, point: Any, result: Any, mode: Any) -> Any:
        escalated = result.verdict

        def decided(kind: str, reason: Any) -> Any:
            message = getattr(escalated, "message", None)
            return SimpleNamespace(verdict=SimpleNamespace(decision=kind, reason=reason, message=message, transform=None))

        enforce = getattr(self._runtime, "enforce", None)
        if not callable(enforce):
            return decided("deny", "approval_failed")
        try:
            _await(lambda: enforce(point, result, mode), self._approval_timeout)
        except _NoAnswer:
            return decided("deny", "runtime_error:approval_timeout")
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - a broken resolver never permits
            names = {klass.__name__ for klass in type(exc).__mro__}
            if "AgentControlSuspended" in names:
                return result
            if "AgentControlBlocked" in names:
                return decided("deny", "approval_denied")
            return decided("deny", "approval_failed")
        return decided("allow", getattr(escalated, "reason", None))


def _pre_tool_call(method: Callable[..., Any]) -> Callable[[dict[str, Any]], Any]:
    def ask(args: dict[str, Any]) -> Any:
        return method(tool_name="sandbox_execute", args=args, call_id=uuid.uuid4().hex[:8])

    return ask


def build(
    runtime: Any,
    policy: Any,
    agent_id: str,
    session_id: str,
    *,
    timeout: float = 60.0,
    approval_timeout: float = 300.0,
) -> Optional[Gate]:
    """The gate for a session, or None when neither a runtime nor a policy was given.

    ``timeout`` bounds an AgentControl runtime's evaluation, ``approval_timeout``
    its approval path (seconds). Raises ``TypeError``/``ValueError`` (refusing
    the session) for a runtime or policy this module cannot evaluate.
    """
    if runtime is None and policy is not None and any(
        callable(getattr(policy, name, None))
        for name in ("evaluate_pre_tool_call", "pre_tool_call", "evaluate_intervention_point")
    ):
        runtime, policy = policy, None  # a runtime given where 5.0.0 puts the policy
    if runtime is not None and policy is not None:
        raise ValueError("give a governance runtime or a policy, not both")
    if runtime is not None:
        for name in ("evaluate_pre_tool_call", "pre_tool_call"):
            method = getattr(runtime, name, None)
            if callable(method):
                return Gate(_pre_tool_call(method), f"governance runtime's {name}")
        if callable(getattr(runtime, "evaluate_intervention_point", None)):
            return RuntimeGate(runtime, agent_id, session_id, timeout=timeout, approval_timeout=approval_timeout)
        if callable(getattr(runtime, "evaluate", None)):
            try:
                session = _agt.agt_runtime_session(runtime, agent_id, session_id)
            except ImportError as exc:
                raise ValueError(
                    "a governance runtime was given, but AGT's host session "
                    "(agt.policies.session.AdapterRuntimeSession) is not importable to "
                    "evaluate it; refusing to create an ungated session"
                ) from exc
            return Gate(_pre_tool_call(session.evaluate_pre_tool_call), "governance runtime")
        raise TypeError(
            f"governance runtime of type {type(runtime).__name__} is not understood (it has "
            "no evaluate_pre_tool_call, pre_tool_call, evaluate_intervention_point or evaluate); "
            "refusing to create an ungated session"
        )
    if policy is not None:
        evaluate = getattr(policy, "evaluate", None)
        if callable(evaluate) and not hasattr(policy, "rules"):
            return Gate(evaluate, "policy evaluator")
        try:
            evaluator = _agt.agt_policy_evaluator(policy)
        except ImportError as exc:
            raise ValueError(
                "a governance policy was given, but AGT's policy engine "
                "(agent_os.policies.evaluator) is not importable to evaluate it; "
                "refusing to create an ungated session"
            ) from exc
        return Gate(evaluator.evaluate, "policy evaluation")
    return None


def policy_config_overrides(policy: Any) -> dict[str, Any]:
    """SandboxConfig fields an AGT 5.0.0 policy document sets (duck-typed):
    ``defaults.timeout_seconds / max_cpu / max_memory_mb / network_default``,
    ``network_allowlist``, ``sandbox_mounts.input_dir / output_dir``."""
    out: dict[str, Any] = {}
    if policy is None:
        return out
    defaults = getattr(policy, "defaults", None)
    if defaults is not None:
        timeout = getattr(defaults, "timeout_seconds", None)
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            out["timeout_seconds"] = float(timeout)
        cpu = getattr(defaults, "max_cpu", None)
        if isinstance(cpu, (int, float)) and not isinstance(cpu, bool):
            out["cpu_limit"] = float(cpu)
        memory = getattr(defaults, "max_memory_mb", None)
        if isinstance(memory, int) and not isinstance(memory, bool):
            out["memory_mb"] = memory
        if _word(getattr(defaults, "network_default", None)) == "allow":
            out["network_enabled"] = True
            out["network_default"] = "allow"
    hosts = [str(h) for h in (getattr(policy, "network_allowlist", None) or [])]
    if hosts:
        out["network_enabled"] = True
        out["network_allowlist"] = hosts
    mounts = getattr(policy, "sandbox_mounts", None)
    if mounts is not None:
        for key in ("input_dir", "output_dir"):
            value = mounts.get(key) if isinstance(mounts, Mapping) else getattr(mounts, key, None)
            if value:
                out[key] = str(value)
    return out

"""The governance gate ``execute_code`` applies before anything runs.

Shapes understood (everything else is refused, never skipped):

* a host session answering ``evaluate_pre_tool_call(tool_name=, args=,
  call_id=)`` (AGT's ``AdapterRuntimeSession``) or ``pre_tool_call(...)``;
* a stateless runtime answering ``evaluate(intervention_point, snapshot)``
  (AGT's ``AgtRuntime``): wrapped in AGT's own host session, so it needs
  ``agt.policies.session`` importable, else the session is refused;
* an AGT 5.0.0 policy document (``create_session(agent_id, policy)``):
  evaluated with AGT's ``PolicyEvaluator``; refused when AGT's policy engine
  is not importable (AGT 5.0.0's own provider would run ungated then).

A verdict is allowed only when it says so in a shape understood here: a
``transform`` verdict is refused (the gate cannot rewrite code it is about
to run), so is ``escalate``, an exception, or anything unrecognised.
"""

from __future__ import annotations

import uuid
from enum import Enum
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
            raise GovernanceError(f"Governance denied: the {self.what} failed ({type(exc).__name__}: {exc})") from exc
        allowed, reason = verdict(decision)
        if not allowed:
            raise GovernanceError(f"Governance denied: {reason}")


def _pre_tool_call(method: Callable[..., Any]) -> Callable[[dict[str, Any]], Any]:
    def ask(args: dict[str, Any]) -> Any:
        return method(tool_name="sandbox_execute", args=args, call_id=uuid.uuid4().hex[:8])

    return ask


def build(runtime: Any, policy: Any, agent_id: str, session_id: str) -> Optional[Gate]:
    """The gate for a session, or None when neither a runtime nor a policy was given.

    Raises ``TypeError``/``ValueError`` (refusing the session) for a runtime or
    policy this module cannot evaluate.
    """
    if runtime is None and policy is not None and any(
        callable(getattr(policy, name, None)) for name in ("evaluate_pre_tool_call", "pre_tool_call")
    ):
        runtime, policy = policy, None  # a host session given where 5.0.0 puts the policy
    if runtime is not None and policy is not None:
        raise ValueError("give a governance runtime or a policy, not both")
    if runtime is not None:
        for name in ("evaluate_pre_tool_call", "pre_tool_call"):
            method = getattr(runtime, name, None)
            if callable(method):
                return Gate(_pre_tool_call(method), f"governance runtime's {name}")
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
            "no evaluate_pre_tool_call, pre_tool_call or evaluate); refusing to create an "
            "ungated session"
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

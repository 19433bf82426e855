"""The Agent Governance Toolkit (AGT), when it is importable.

capsule_sandbox never requires AGT. When ``agent_sandbox`` (PyPI:
``agt-sandbox``) imports, the provider subclasses its ``SandboxProvider``,
the value types subclass its dataclasses (and reuse its enums), and
``execute_code`` applies AGT's own static code scan. Set
``CAPSULE_SANDBOX_AGT=0`` to ignore an installed AGT.

Nothing here copies AGT code: it imports the installed package.
"""

from __future__ import annotations

import functools
import os
import warnings
from types import ModuleType
from typing import Any, Callable, Optional, Tuple


def _ignored() -> bool:
    return os.environ.get("CAPSULE_SANDBOX_AGT", "1").strip().lower() in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=None)
def agt_types() -> Optional[ModuleType]:
    """``agent_sandbox.sandbox_provider`` or None."""
    if _ignored():
        return None
    try:
        with warnings.catch_warnings():
            # agt-sandbox 5.0.0 warns at import that it is deprecated in favour
            # of the consolidated package; that is AGT's business, not the caller's.
            warnings.simplefilter("ignore", DeprecationWarning)
            from agent_sandbox import sandbox_provider  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - any import failure means "absent"
        return None
    return sandbox_provider


def agt_code_scanner() -> Optional[Callable[[str], None]]:
    """AGT's ``enforce_no_subprocess_execution`` when AGT is importable."""
    if agt_types() is None:
        return None
    try:
        from agent_sandbox.code_scanner import enforce_no_subprocess_execution  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001
        return None
    return enforce_no_subprocess_execution  # type: ignore[no-any-return]


def agt_policy_evaluator(policy: Any) -> Any:
    """AGT 5.0.0's ``PolicyEvaluator(policies=[policy])``; raises when AGT's
    policy engine is not importable (the caller refuses: never ungated)."""
    from agent_os.policies.evaluator import PolicyEvaluator  # type: ignore[import-not-found]

    return PolicyEvaluator(policies=[policy])


def agt_runtime_session(runtime: Any, agent_id: str, session_id: str) -> Any:
    """AGT's host session (``agt.policies.session.AdapterRuntimeSession``)
    over a stateless runtime; raises ImportError when AGT lacks it."""
    from agt.policies.session import AdapterRuntimeSession  # type: ignore[import-not-found]

    return AdapterRuntimeSession(runtime, agent_id=agent_id, session_id=session_id)


@functools.lru_cache(maxsize=None)
def acs_pre_tool_call() -> Tuple[Any, Any]:
    """``(InterventionPoint.PRE_TOOL_CALL, EnforcementMode.ENFORCE)`` from AGT
    main's ``agent_control_specification`` when importable, else the plain
    strings (both are str enums: equal either way)."""
    if not _ignored():
        try:
            from agent_control_specification import EnforcementMode, InterventionPoint  # type: ignore[import-not-found]

            return InterventionPoint.PRE_TOOL_CALL, EnforcementMode.ENFORCE
        except Exception:  # noqa: BLE001 - absent or broken: the strings
            pass
    return "pre_tool_call", "enforce"

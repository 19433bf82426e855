"""capsule_sandbox: Python integration for the capsule sandbox.

Host side (needs the ``capsule`` binary, never raises at import):

* :class:`CapsuleSandboxProvider` with :class:`SandboxConfig`,
  :class:`SandboxResult`, :class:`SessionHandle`, :class:`ExecutionHandle`,
  :class:`SessionStatus`, :class:`ExecutionStatus` -- the session-style
  SandboxProvider contract;
* :class:`CapsuleBackend` with :class:`ProcessSpec` -- agentnode's ``SandboxBackend``
  contract.

Inside the sandbox: :mod:`capsule_sandbox.client` (``call_tool``,
``complete``, ``ping``, ``list_tools``, ``CapsuleRpcError``).
"""

from capsule_sandbox.backend import (
    CapsuleAgentSession,
    CapsuleBackend,
    EgressSpec,
    MountSpec,
    Outcome,
    ProcessSpec,
    SandboxAvailability,
    SandboxRequiredError,
)
from capsule_sandbox._toolspec import child_settable
from capsule_sandbox.client import CapsuleRpcError
from capsule_sandbox.provider import (
    CapsuleSandboxProvider,
    SessionNotFoundError,
    is_python_interpreter,
)
from capsule_sandbox.types import (
    ExecutionHandle,
    ExecutionStatus,
    SandboxConfig,
    SandboxResult,
    SessionHandle,
    SessionStatus,
)

__version__ = "0.1.0"

__all__ = [
    "CapsuleAgentSession",
    "CapsuleBackend",
    "CapsuleRpcError",
    "CapsuleSandboxProvider",
    "EgressSpec",
    "ExecutionHandle",
    "ExecutionStatus",
    "MountSpec",
    "Outcome",
    "ProcessSpec",
    "SandboxAvailability",
    "SandboxConfig",
    "SandboxRequiredError",
    "SandboxResult",
    "SessionHandle",
    "SessionNotFoundError",
    "SessionStatus",
    "child_settable",
    "is_python_interpreter",
]

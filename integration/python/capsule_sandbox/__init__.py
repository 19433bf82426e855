"""capsule_sandbox: Python integration for the capsule sandbox.

Host side (needs the ``capsule`` binary, never raises at import):

* :class:`CapsuleSandboxProvider` with :class:`SandboxConfig`,
  :class:`SandboxResult`, :class:`SessionHandle`, :class:`ExecutionHandle`,
  :class:`SessionStatus`, :class:`ExecutionStatus` -- the session-style
  SandboxProvider contract;
* :class:`CapsuleBackend` with :class:`ProcessSpec` -- agentnode's ``SandboxBackend``
  contract;
* :class:`Credential` and :class:`HostRule` -- secrets capsule's proxy injects
  (the run sees a placeholder) and HTTPS host rules (``docs/credentials.md``).

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
from capsule_sandbox.credentials import Credential, HostRule
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

from capsule_sandbox._binary import package_version as _package_version

__version__ = _package_version()  # Cargo.toml is the one source (maturin copies it)

__all__ = [
    "CapsuleAgentSession",
    "CapsuleBackend",
    "CapsuleRpcError",
    "Credential",
    "CapsuleSandboxProvider",
    "EgressSpec",
    "ExecutionHandle",
    "ExecutionStatus",
    "HostRule",
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

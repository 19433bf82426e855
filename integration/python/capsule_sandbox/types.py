"""Public value types of the session-style provider.

The names, fields and defaults follow the SandboxProvider contract used by
agent governance toolkits (``SandboxConfig``, ``SandboxResult``,
``SessionHandle``, ``ExecutionHandle``, ``SessionStatus``,
``ExecutionStatus``), extended with what capsule reports (truncation flags,
termination reason, counters).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from capsule_sandbox import _validate
from capsule_sandbox._agt import agt_types
from capsule_sandbox.credentials import coerce_credentials, coerce_host

_AGT = agt_types()

if _AGT is not None:
    # The Agent Governance Toolkit is importable: capsule's values ARE its
    # values (same enums, subclasses of its dataclasses), so AGT callers that
    # check isinstance() or compare enum members keep working.
    SessionStatus = _AGT.SessionStatus
    ExecutionStatus = _AGT.ExecutionStatus
    _ConfigBase: Any = _AGT.SandboxConfig
    _ResultBase: Any = _AGT.SandboxResult
    _SessionBase: Any = _AGT.SessionHandle
    _ExecutionBase: Any = _AGT.ExecutionHandle
else:

    class SessionStatus(str, Enum):  # type: ignore[no-redef]
        """Lifecycle state of a sandbox session."""

        PROVISIONING = "provisioning"
        READY = "ready"
        EXECUTING = "executing"
        DESTROYING = "destroying"
        DESTROYED = "destroyed"
        FAILED = "failed"

    class ExecutionStatus(str, Enum):  # type: ignore[no-redef]
        """State of one execution within a session."""

        PENDING = "pending"
        RUNNING = "running"
        COMPLETED = "completed"
        CANCELLED = "cancelled"
        FAILED = "failed"

    _ConfigBase = object
    _ResultBase = object
    _SessionBase = object
    _ExecutionBase = object


@dataclass
class SandboxConfig(_ConfigBase):
    """What a session (or a one-off ``run``) may do; mapped onto a capsule policy.

    Validated when constructed (fail closed, before anything runs):

    * ``network_enabled`` with an empty ``network_allowlist`` needs
      ``network_default="allow"`` (unrestricted egress is never implicit);
    * ``input_dir`` / ``output_dir`` may not be protected system directories;
    * ``env_vars`` may not set loader/interpreter hooks (``LD_*``,
      ``PYTHONPATH``, ...) nor the variables capsule itself provides.

    ``tool_max_calls`` and ``tool_timeout_seconds`` are capsule extensions
    (``tools.max_calls`` and each forwarded tool's ``timeout_seconds``), and
    so are ``credentials`` (:class:`~capsule_sandbox.credentials.Credential`,
    or mappings of its fields: secrets the proxy injects, the run sees a
    placeholder; they turn on proxy mode and allow their hosts),
    ``upstream_ca`` (a PEM file of extra roots the proxy trusts upstream) and
    :class:`~capsule_sandbox.credentials.HostRule` entries (or mappings) in
    ``network_allowlist`` (TLS terminated, methods/paths/budgets apply).
    """

    timeout_seconds: float = 60.0
    memory_mb: int | None = 512
    cpu_limit: float | None = 1.0
    network_enabled: bool = False
    read_only_fs: bool = True
    env_vars: dict[str, str] = field(default_factory=dict)
    input_dir: str | None = None
    output_dir: str | None = None
    runtime: str | None = None
    output_max_bytes: int = 1_048_576
    ring: Any = None  # accepted for compatibility; capsule has no rings
    network_allowlist: list[str] = field(default_factory=list)
    network_default: str = "deny"
    tool_allowlist: list[str] = field(default_factory=list)
    tool_max_calls: int = 40
    tool_timeout_seconds: float = 30.0
    credentials: list[Any] = field(default_factory=list)
    upstream_ca: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` if this config must be refused."""
        if not (isinstance(self.timeout_seconds, (int, float)) and self.timeout_seconds > 0):
            raise ValueError("timeout_seconds must be a number > 0")
        if self.memory_mb is not None and int(self.memory_mb) <= 0:
            raise ValueError("memory_mb must be > 0 (or None for no limit)")
        if self.cpu_limit is not None and float(self.cpu_limit) <= 0:
            raise ValueError("cpu_limit must be > 0 (or None for no limit)")
        if int(self.output_max_bytes) <= 0:
            raise ValueError("output_max_bytes must be > 0")
        if int(self.tool_max_calls) <= 0:
            raise ValueError("tool_max_calls must be > 0")
        if not float(self.tool_timeout_seconds) > 0:
            raise ValueError("tool_timeout_seconds must be > 0")
        if self.network_default not in ("allow", "deny"):
            raise ValueError(
                f"network_default must be 'allow' or 'deny', not {self.network_default!r}"
            )
        for host in self.network_allowlist:
            coerce_host(host)
        creds = coerce_credentials(self.credentials)
        if creds and self.network_enabled and not self.network_allowlist:
            raise ValueError(
                "credentials need capsule's proxy, and network_enabled=True without a "
                "network_allowlist is unrestricted egress (never through the proxy); give "
                "network_allowlist, or leave network_enabled False: credentials alone turn "
                "on the proxy to their hosts"
            )
        if self.network_enabled and not self.network_allowlist:
            if self.network_default != "allow":
                raise ValueError(
                    "network_enabled=True without a network_allowlist would grant "
                    "unrestricted egress; refusing. Give network_allowlist (egress "
                    "through capsule's filtering proxy) or set network_default='allow' "
                    "to ask for unrestricted networking explicitly."
                )
        _validate.env_vars(self.env_vars)
        if self.input_dir is not None:
            _validate.mount_path(self.input_dir, "input_dir", write=False)
        if self.output_dir is not None:
            _validate.mount_path(self.output_dir, "output_dir", write=True)
        for name in self.tool_allowlist:
            _validate.tool_name(name)


@dataclass
class SandboxResult(_ResultBase):
    """Result of one execution (capsule's ``--json`` result, section 4).

    ``exit_code`` follows the provider contract: the program's exit status, or
    ``-N`` when signal N ended it (capsule's own CLI reports ``128+N``; the
    signal number is also in ``signal``), ``124`` when capsule's wall-clock
    limit killed it (``killed``/``termination_reason="timeout"``), ``125``
    for a refusal (``termination_reason="refused"``). Whether a run timed out
    or was refused is read from capsule's JSON result, never from the exit
    status the child chose. ``cleanup_failures`` lists what a sessionless
    ``run()`` could not remove of its throwaway workspace.
    """

    success: bool
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    duration_seconds: float = 0.0
    killed: bool = False
    kill_reason: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    termination_reason: str = ""
    signal: int | None = None
    run_id: str = ""
    error: str = ""
    tool_calls: int = 0
    tool_refusals: int = 0
    llm_calls: int = 0
    denied_hosts: list[str] = field(default_factory=list)
    #: With ``explain=True`` (``capsule exec --explain``): every access the
    #: sandbox refused, each ``capsule why``'s answer as a dict (``question``,
    #: ``layer``, ``key``, ``because``, ``change`` or ``no_change``, ...).
    denials: list[dict[str, Any]] = field(default_factory=list)
    enforcement: dict[str, Any] = field(default_factory=dict)
    cleanup_failures: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class SessionHandle(_SessionBase):
    """Returned by ``create_session``: identifies a live session."""

    agent_id: str
    session_id: str
    status: SessionStatus = SessionStatus.READY
    workspace: str = ""


@dataclass
class ExecutionHandle(_ExecutionBase):
    """Returned by ``execute_code``: one execution and its result."""

    execution_id: str
    agent_id: str
    session_id: str
    status: ExecutionStatus = ExecutionStatus.COMPLETED
    result: SandboxResult | None = None


_CONFIG_FIELDS = tuple(f.name for f in fields(SandboxConfig))


def coerce_config(value: Any) -> SandboxConfig:
    """capsule's ``SandboxConfig`` for ``value``: None (the defaults), a
    ``SandboxConfig`` (validated again), AGT's ``SandboxConfig``, any object
    with some of its fields (others keep their defaults), or a mapping of them
    (an unknown key is a ``TypeError``)."""
    if value is None:
        return SandboxConfig()
    if isinstance(value, SandboxConfig):
        value.validate()
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(_CONFIG_FIELDS))
        if unknown:
            raise TypeError(f"unknown SandboxConfig field(s): {', '.join(unknown)}")
        return SandboxConfig(**value)
    items = {name: getattr(value, name) for name in _CONFIG_FIELDS if hasattr(value, name)}
    if "timeout_seconds" not in items:
        raise TypeError(
            f"config must be a SandboxConfig (capsule's or AGT's) or have its fields; "
            f"got {type(value).__name__}"
        )
    for name in ("env_vars",):
        if name in items and items[name] is not None:
            items[name] = dict(items[name])
    for name in ("network_allowlist", "tool_allowlist", "credentials"):
        if name in items:
            items[name] = list(items[name] or [])
    return SandboxConfig(**items)

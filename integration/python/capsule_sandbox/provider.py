"""``CapsuleSandboxProvider``: the session-style SandboxProvider on capsule.

A *session* is a host workspace directory::

    <workspace>/
      policy-<execution>.json   generated per execution (not visible inside)
      scripts/                  read-only inside: submitted code + the client
        capsule_sandbox/        in-sandbox copy of capsule_sandbox.client
      output/                   read-write inside, the cwd; kept across executions

Each execution is one fresh ``capsule exec --json --workspace <workspace>
--policy <file> [--tool-fd N] --agent-id <agent> -- <interpreter>
<workspace>/scripts/<execution>.py``; nothing but ``output/`` (and the
configured ``output_dir``) survives from one execution to the next.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import threading
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from capsule_sandbox import _agt, _governance, _policy, _scan, _validate
from capsule_sandbox._binary import Availability, AvailabilityCache
from capsule_sandbox._cleanup import remove_tree_logged
from capsule_sandbox._exec import CapsuleRun
from capsule_sandbox._serve import ServeClient, ServeRun
from capsule_sandbox._governance import GovernanceError
from capsule_sandbox.types import (
    ExecutionHandle,
    ExecutionStatus,
    SandboxConfig,
    SandboxResult,
    SessionHandle,
    SessionStatus,
    coerce_config,
)

_AGT = _agt.agt_types()
# With AGT importable, the provider IS one of its SandboxProviders.
_ProviderBase: Any = _AGT.SandboxProvider if _AGT is not None else object

logger = logging.getLogger("capsule_sandbox")

_PYTHON_RE = re.compile(r"^(?:py|python|pypy)\d*(?:\.\d+)*$", re.IGNORECASE)
_KEEP_FINISHED = 256

_IN_SANDBOX_INIT = '''"""In-sandbox copy of capsule_sandbox: only the RPC client lives here."""
from capsule_sandbox.client import (  # noqa: F401
    CapsuleClient,
    CapsuleRpcError,
    call_tool,
    complete,
    list_tools,
    ping,
)
'''


class SessionNotFoundError(RuntimeError):
    """No live session with this agent_id and session_id."""


def _looks_like_config(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "timeout_seconds" in value or "network_enabled" in value
    return hasattr(value, "timeout_seconds") and hasattr(value, "network_enabled")


def is_python_interpreter(path: str) -> bool:
    """Whether ``path`` names a Python interpreter (python, python3.11, pypy3...)."""
    return bool(_PYTHON_RE.match(Path(path).name))


def _resolve_interpreter(interpreter: str | os.PathLike[str] | None) -> str:
    if interpreter is None:
        if not sys.executable:
            raise ValueError("sys.executable is empty: give interpreter= explicitly")
        return os.path.abspath(sys.executable)
    raw = os.fspath(interpreter)
    found = raw if os.sep in raw else shutil.which(raw)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ValueError(f"interpreter {raw!r} not found or not executable on the host")
    return os.path.abspath(found)


class _Session:
    def __init__(
        self,
        agent_id: str,
        session_id: str,
        config: SandboxConfig,
        workspace: Path,
        gate: _governance.Gate | None,
    ) -> None:
        self.agent_id = agent_id
        self.session_id = session_id
        self.config = config
        self.workspace = workspace
        self.gate = gate
        self.status = SessionStatus.READY
        self.running: dict[str, CapsuleRun | ServeRun] = {}
        self.finished: OrderedDict[str, ExecutionHandle] = OrderedDict()
        # The session's warm parent (`capsule serve`), started by its first step.
        self.warm = session_id != "ephemeral"
        self.serve: ServeClient | None = None
        self.serve_lock = threading.Lock()

    def serve_client(self, binary: str) -> ServeClient:
        """The session's live `capsule serve`; a new one when it died."""
        with self.serve_lock:
            if self.serve is None or not self.serve.alive:
                if self.serve is not None:
                    self.serve.close()
                self.serve = ServeClient(binary)
            return self.serve

    def close_serve(self) -> None:
        with self.serve_lock:
            serve, self.serve = self.serve, None
        if serve is not None:
            serve.close()


class CapsuleSandboxProvider(_ProviderBase):  # type: ignore[misc]
    """SandboxProvider backed by the ``capsule`` binary.

    Parameters
    ----------
    binary:
        Path (or name on PATH) of ``capsule``; default ``$CAPSULE_BIN``, then PATH.
    tools:
        ``{"name": callable}``: Python tools offered to sessions whose
        ``SandboxConfig.tool_allowlist`` names them, served over ``--tool-fd``
        and called with the tool's arguments as keyword arguments; the return
        value must be JSON-serialisable.
    policy:
        Base policy (a dict, or a JSON file) that every generated policy starts
        from; ``SandboxConfig`` fields override it.
    interpreter:
        Python used by ``execute_code``; resolved on the host now (default
        ``sys.executable``).
    workspace_root:
        Where session workspaces are created (default: the system temp dir).
    audit_log:
        ``None``: capsule's default audit log; a path: ``--audit-log PATH``;
        ``False``: ``--no-audit``.
    static_scan:
        Before ``execute_code`` runs code, refuse it when a static scan finds
        process-spawning calls (AGT's ``enforce_no_subprocess_execution`` when
        AGT is importable, else capsule's counterpart), as AGT's own provider
        does. A guardrail in front of the sandbox, not a sandbox layer: the
        sandbox confines whatever the code starts anyway. Default True.
    explain:
        Run with ``capsule exec --explain``: a result carries ``denials``
        (every access the sandbox refused, with the layer, the policy key and
        the change that would allow it) and a failed result's ``error`` names
        the first one. Off by default: it observes every file the code opens
        (a round trip to capsule per open), which slows file-heavy code.
    governance_timeout_seconds:
        How long ``execute_code`` waits for an AgentControl runtime's verdict
        (AGT main's ``runtime=``) before refusing the execution (default 60).
    governance_approval_timeout_seconds:
        How long it waits for that runtime's approval path on an ``escalate``
        verdict before refusing (default 300, AGT main's own default).

    When the Agent Governance Toolkit is importable, this class is a subclass
    of its ``SandboxProvider`` and its results are (subclasses of) AGT's own
    dataclasses.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        policy: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        interpreter: str | os.PathLike[str] | None = None,
        workspace_root: str | os.PathLike[str] | None = None,
        audit_log: str | os.PathLike[str] | bool | None = None,
        static_scan: bool = True,
        explain: bool = False,
        governance_timeout_seconds: float = 60.0,
        governance_approval_timeout_seconds: float = 300.0,
    ) -> None:
        self._governance_timeout = _governance.seconds("governance_timeout_seconds", governance_timeout_seconds)
        self._approval_timeout = _governance.seconds(
            "governance_approval_timeout_seconds", governance_approval_timeout_seconds
        )
        self._static_scan = bool(static_scan)
        self._explain = bool(explain)
        self.cleanup_failures: dict[tuple[str, str], list[str]] = {}
        self._availability = AvailabilityCache(binary)
        self._tools: dict[str, Callable[..., Any]] = {}
        for name, func in (tools or {}).items():
            _validate.tool_name(name)
            if not callable(func):
                raise TypeError(f"tool {name!r} is not callable")
            self._tools[name] = func
        self._base_policy = _policy.load_base_policy(policy)
        self._interpreter = _resolve_interpreter(interpreter)
        self._workspace_root = os.fspath(workspace_root) if workspace_root is not None else None
        self._audit_log = audit_log
        self._lock = threading.RLock()
        self._sessions: dict[tuple[str, str], _Session] = {}
        # Sessions send their steps to one warm `capsule serve` each (False:
        # a fresh `capsule exec` per step, as for sessionless runs).
        self.warm_sessions = os.environ.get("CAPSULE_SANDBOX_WARM", "1") != "0"

    # -- availability -----------------------------------------------------------

    def availability(self, refresh: bool = False) -> Availability:
        """Binary path, doctor report and the reason capsule is unusable (if so)."""
        return self._availability.get(refresh)

    def is_available(self) -> bool:
        return self._availability.get().available

    @property
    def unavailable_reason(self) -> str:
        """Why ``is_available()`` is False ("" when it is True)."""
        return self._availability.get().reason

    @property
    def interpreter(self) -> str:
        return self._interpreter

    def _require_binary(self) -> str:
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise RuntimeError(f"capsule unavailable: {avail.reason or 'unknown reason'}")
        return avail.binary

    # -- sessions ---------------------------------------------------------------

    def create_session(
        self,
        agent_id: str,
        *args: Any,
        policy: Any | None = None,
        runtime: Any | None = None,
        config: Any | None = None,
    ) -> SessionHandle:
        """Create a session workspace.

        Both AGT shapes: ``create_session(agent_id, policy=None, config=None)``
        (agt-sandbox 5.0.0; ``policy`` a governance policy document) and
        ``create_session(agent_id, *, runtime=None, config=None)`` (a governance
        runtime or host session). A positional argument that looks like a
        config (has ``timeout_seconds``) is the config, any other the policy.
        ``config`` is capsule's ``SandboxConfig``, AGT's, or any object (or
        mapping) with its fields.
        """
        if len(args) > 2:
            raise TypeError("create_session() takes agent_id, policy and config")
        for extra in args:
            if extra is None:
                continue
            if _looks_like_config(extra) and config is None:
                config = extra
            elif policy is None and not _looks_like_config(extra):
                policy = extra
            else:
                raise TypeError(f"create_session(): cannot place positional argument {type(extra).__name__}")
        _validate.agent_id(agent_id)
        config = self._config_with_policy(coerce_config(config), policy)
        # Build once now so every refusal happens before anything is created.
        _policy.build(config, base=self._base_policy, python_tools=self._tools)
        self._require_binary()

        session_id = uuid.uuid4().hex[:12]
        gate = _governance.build(
            runtime,
            policy,
            agent_id,
            session_id,
            timeout=self._governance_timeout,
            approval_timeout=self._approval_timeout,
        )
        workspace = Path(
            tempfile.mkdtemp(prefix=f"capsule-{agent_id}-{session_id}-", dir=self._workspace_root)
        )
        try:
            self._install_workspace(workspace)
        except OSError:
            remove_tree_logged(workspace, "workspace")
            raise
        session = _Session(agent_id, session_id, config, workspace, gate)
        with self._lock:
            self._sessions[(agent_id, session_id)] = session
        logger.info("capsule session created: agent=%s session=%s", agent_id, session_id)
        return SessionHandle(agent_id, session_id, SessionStatus.READY, str(workspace))

    @staticmethod
    def _config_with_policy(config: SandboxConfig, policy: Any) -> SandboxConfig:
        """Apply what an AGT 5.0.0 policy document says about the sandbox."""
        if policy is None:
            return config
        overrides = _governance.policy_config_overrides(policy)
        policy_tools = getattr(policy, "tool_allowlist", None)
        if policy_tools:
            allowed = {str(t) for t in policy_tools}
            # A policy's (non-empty) allowlist bounds the config's: a tool
            # needs both. An empty one does not restrict (AGT's semantics).
            overrides["tool_allowlist"] = [t for t in config.tool_allowlist if t in allowed]
        if not overrides:
            return config
        return dataclasses.replace(config, **overrides)

    @staticmethod
    def _install_workspace(workspace: Path) -> None:
        os.chmod(workspace, 0o700)
        scripts = workspace / "scripts"
        (workspace / "output").mkdir()
        package = scripts / "capsule_sandbox"
        package.mkdir(parents=True)
        client_src = Path(__file__).with_name("client.py")
        shutil.copyfile(client_src, package / "client.py")
        (package / "__init__.py").write_text(_IN_SANDBOX_INIT, encoding="utf-8")

    def _session(self, agent_id: str, session_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get((agent_id, session_id))
        if session is None or session.status in (SessionStatus.DESTROYING, SessionStatus.DESTROYED):
            raise SessionNotFoundError(
                f"no active session {session_id!r} for agent {agent_id!r}; call create_session() first"
            )
        return session

    def get_session_status(self, agent_id: str, session_id: str) -> SessionStatus:
        with self._lock:
            session = self._sessions.get((agent_id, session_id))
            if session is None:
                return SessionStatus.DESTROYED
            if session.status is SessionStatus.READY and session.running:
                return SessionStatus.EXECUTING
            return session.status

    def destroy_session(self, agent_id: str, session_id: str) -> None:
        """Cancel running executions and remove the workspace. Idempotent, never raises.

        What could not be removed is logged and kept in
        ``cleanup_failures[(agent_id, session_id)]``; the session is destroyed
        either way.
        """
        with self._lock:
            session = self._sessions.get((agent_id, session_id))
            if session is None or session.status is not SessionStatus.READY:
                return
            session.status = SessionStatus.DESTROYING
            running = list(session.running.values())
        try:
            for run in running:
                run.cancel()
        except Exception:  # noqa: BLE001 - destroy never raises
            logger.exception("cancelling executions of session %s failed", session_id)
        try:
            session.close_serve()
        except Exception:  # noqa: BLE001 - destroy never raises
            logger.exception("stopping capsule serve of session %s failed", session_id)
        left = remove_tree_logged(session.workspace, "workspace")
        with self._lock:
            session.status = SessionStatus.DESTROYED
            self._sessions.pop((agent_id, session_id), None)
            if left:
                self.cleanup_failures[(agent_id, session_id)] = left
        logger.info("capsule session destroyed: agent=%s session=%s", agent_id, session_id)

    # -- executions -------------------------------------------------------------

    def execute_code(
        self,
        agent_id: str,
        session_id: str,
        code: str,
        *,
        context: Mapping[str, Any] | None = None,
        execution_id: str | None = None,
    ) -> ExecutionHandle:
        """Run ``code`` with the session's Python in a fresh sandbox.

        Before anything runs: the session's governance gate (deny, transform,
        an unknown verdict or a failing runtime raise ``PermissionError``), then
        the static scan (``static_scan``). ``context`` reaches the code as JSON
        in ``$CAPSULE_CONTEXT`` and ``$NONO_CONTEXT``.
        ``execution_id`` may be chosen by the caller (so another thread can
        ``cancel_execution`` it); by default a random one is used.
        """
        session = self._session(agent_id, session_id)
        if not isinstance(code, str):
            raise TypeError("code must be a str")
        if not is_python_interpreter(self._interpreter):
            raise ValueError(
                f"execute_code runs Python only; the interpreter is {self._interpreter!r}. "
                "Use run() with an explicit command for other languages."
            )
        if session.gate is not None:
            session.gate.check(agent_id, code, context)
        if self._static_scan:
            _scan.enforce(code)
        eid = _validate.execution_id(execution_id) if execution_id else uuid.uuid4().hex[:12]
        script = session.workspace / "scripts" / f"{eid}.py"
        if script.exists() or eid in session.running:
            raise ValueError(f"execution_id {eid!r} already used in this session")
        script.write_text(code, encoding="utf-8")
        result = self._execute(session, eid, [self._interpreter, str(script)], context=context)
        if result.termination_reason == "cancelled":
            status = ExecutionStatus.CANCELLED
        elif result.success:
            status = ExecutionStatus.COMPLETED
        else:
            status = ExecutionStatus.FAILED
        handle = ExecutionHandle(eid, agent_id, session_id, status, result)
        with self._lock:
            session.finished[eid] = handle
            while len(session.finished) > _KEEP_FINISHED:
                session.finished.popitem(last=False)
        return handle

    def run(
        self,
        agent_id: str,
        command: Sequence[str] | str,
        config: Any | None = None,
        *,
        session_id: str | None = None,
    ) -> SandboxResult:
        """Run a command (argv list, or a string split with shlex) in a fresh sandbox.

        With ``session_id`` (also accepted as the third positional argument,
        the contract's ``run(agent_id, command, session_id)``: a string there
        is a session id), in that session's workspace and config (``config``
        must then be None). Without it, in the agent's live session when it has
        one and no ``config`` is given (as AGT's providers do), otherwise in a
        throwaway workspace built from ``config``, removed afterwards (what
        could not be removed is in ``cleanup_failures``). An empty command, or
        capsule unavailable, is a failed result (``exit_code=-1``), not an
        exception.
        """
        if isinstance(config, str) and session_id is None:
            # The contract's positional form, run(agent_id, command, session_id):
            # a config is never a string, a session id always is.
            config, session_id = None, config
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in (command or [])]
        if not argv:
            return SandboxResult(success=False, exit_code=-1, stderr="empty command", error="empty command")
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            reason = f"capsule unavailable: {avail.reason or 'unknown reason'}"
            return SandboxResult(success=False, exit_code=-1, stderr=reason, error=reason)
        if session_id is not None:
            session = self._session(agent_id, session_id)
            if config is not None:
                raise ValueError("run(): config applies to sessionless runs only; the session has its own")
            return self._execute(session, uuid.uuid4().hex[:12], argv, context=None)
        if config is None:
            live = self._live_session(agent_id)
            if live is not None:
                return self._execute(live, uuid.uuid4().hex[:12], argv, context=None)
        _validate.agent_id(agent_id)
        config = coerce_config(config)
        _policy.build(config, base=self._base_policy, python_tools=self._tools)
        workspace = Path(tempfile.mkdtemp(prefix=f"capsule-{agent_id}-run-", dir=self._workspace_root))
        result: SandboxResult | None = None
        try:
            self._install_workspace(workspace)
            ephemeral = _Session(agent_id, "ephemeral", config, workspace, None)
            result = self._execute(ephemeral, uuid.uuid4().hex[:12], argv, context=None)
            return result
        finally:
            left = remove_tree_logged(workspace, "throwaway workspace")
            if left and result is not None:
                result.cleanup_failures = left

    def _live_session(self, agent_id: str) -> _Session | None:
        with self._lock:
            for (aid, _sid), session in self._sessions.items():
                if aid == agent_id and session.status is SessionStatus.READY:
                    return session
        return None

    def run_once(
        self,
        agent_id: str,
        code: str,
        config: Any | None = None,
        *,
        context: Mapping[str, Any] | None = None,
        runtime: Any | None = None,
        policy: Any | None = None,
    ) -> ExecutionHandle:
        """create_session + execute_code + destroy_session in one call (the
        cleanup never raises; what it left is in ``cleanup_failures``).
        ``config`` may be given by keyword (AGT) or positionally (the
        contract's ``run_once(agent_id, code, config)``)."""
        handle = self.create_session(agent_id, policy=policy, runtime=runtime, config=config)
        try:
            return self.execute_code(agent_id, handle.session_id, code, context=context)
        finally:
            self.destroy_session(agent_id, handle.session_id)

    def running_executions(self, agent_id: str, session_id: str) -> list[str]:
        """Ids of this session's executions that are running now."""
        with self._lock:
            session = self._sessions.get((agent_id, session_id))
            return list(session.running) if session is not None else []

    def get_execution_status(self, agent_id: str, session_id: str, execution_id: str) -> ExecutionHandle:
        """The execution's handle. An unknown id answers as AGT's base provider
        does: a handle with status ``COMPLETED`` and no result."""
        with self._lock:
            session = self._sessions.get((agent_id, session_id))
            if session is not None:
                if execution_id in session.running:
                    return ExecutionHandle(execution_id, agent_id, session_id, ExecutionStatus.RUNNING)
                if execution_id in session.finished:
                    return session.finished[execution_id]
        return ExecutionHandle(execution_id, agent_id, session_id, ExecutionStatus.COMPLETED)

    def cancel_execution(self, agent_id: str, session_id: str, execution_id: str) -> bool:
        """Kill a running execution's capsule (which kills its process tree).

        True if it was running and is now stopped; False if unknown or finished.
        """
        with self._lock:
            session = self._sessions.get((agent_id, session_id))
            run = session.running.get(execution_id) if session is not None else None
        if run is None:
            return False
        return run.cancel()

    def _execute(
        self,
        session: _Session,
        eid: str,
        command: list[str],
        *,
        context: Mapping[str, Any] | None,
    ) -> SandboxResult:
        binary = self._require_binary()
        policy = _policy.build(
            session.config,
            base=self._base_policy,
            python_tools=self._tools,
            context=context,
        )
        flags = ["--json", "--workspace", str(session.workspace), "--agent-id", session.agent_id]
        if self._audit_log is False:
            flags.append("--no-audit")
        elif self._audit_log not in (None, True):
            flags += ["--audit-log", os.fspath(self._audit_log)]  # type: ignore[arg-type]
        if self._explain:
            flags.append("--explain")
        forward = _policy.has_forward_tools(policy)
        policy_path: str | None = None
        run: CapsuleRun | ServeRun
        if session.warm and self.warm_sessions and not forward:
            # The session's warm parent: no policy file, no exec of capsule.
            # (Forwarded tools need an inherited descriptor: a fresh exec.)
            run = ServeRun(
                lambda: session.serve_client(binary),
                flags,
                command,
                policy_text=_policy.dumps(policy),
                cwd=str(session.workspace),
                timeout_seconds=session.config.timeout_seconds,
            )
        else:
            policy_path = _policy.write(policy, str(session.workspace / f"policy-{eid}.json"))
            tools = None
            if forward:
                tools = {n: f for n, f in self._tools.items() if n in session.config.tool_allowlist}
            run = CapsuleRun(
                [binary, "exec", *flags, "--policy", policy_path],
                command,
                timeout_seconds=session.config.timeout_seconds,
                tools=tools,
                tool_timeout_seconds=session.config.tool_timeout_seconds,
            )
        with self._lock:
            if session.status is not SessionStatus.READY:
                raise SessionNotFoundError(f"session {session.session_id!r} is being destroyed")
            session.running[eid] = run
        try:
            return run.run()
        finally:
            with self._lock:
                session.running.pop(eid, None)
            if policy_path is not None:
                try:
                    os.unlink(policy_path)
                except OSError:
                    pass

    # -- async twins --------------------------------------------------------------

    async def create_session_async(
        self,
        agent_id: str,
        policy: Any | None = None,
        config: Any | None = None,
        *,
        runtime: Any | None = None,
    ) -> SessionHandle:
        return await asyncio.to_thread(
            self.create_session, agent_id, policy=policy, runtime=runtime, config=config
        )

    async def execute_code_async(
        self,
        agent_id: str,
        session_id: str,
        code: str,
        *,
        context: Mapping[str, Any] | None = None,
        execution_id: str | None = None,
    ) -> ExecutionHandle:
        return await asyncio.to_thread(
            self.execute_code, agent_id, session_id, code, context=context, execution_id=execution_id
        )

    async def run_async(
        self,
        agent_id: str,
        command: Sequence[str] | str,
        config: Any | None = None,
        *,
        session_id: str | None = None,
    ) -> SandboxResult:
        return await asyncio.to_thread(self.run, agent_id, command, config, session_id=session_id)

    async def run_once_async(
        self,
        agent_id: str,
        code: str,
        config: Any | None = None,
        *,
        context: Mapping[str, Any] | None = None,
        runtime: Any | None = None,
        policy: Any | None = None,
    ) -> ExecutionHandle:
        return await asyncio.to_thread(
            self.run_once, agent_id, code, config=config, context=context, runtime=runtime, policy=policy
        )

    async def destroy_session_async(self, agent_id: str, session_id: str) -> None:
        await asyncio.to_thread(self.destroy_session, agent_id, session_id)

    async def get_session_status_async(self, agent_id: str, session_id: str) -> SessionStatus:
        return await asyncio.to_thread(self.get_session_status, agent_id, session_id)

    async def cancel_execution_async(self, agent_id: str, session_id: str, execution_id: str) -> bool:
        return await asyncio.to_thread(self.cancel_execution, agent_id, session_id, execution_id)

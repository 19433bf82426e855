"""smolagents: a remote Python executor whose interpreter is confined by capsule.

``CapsuleExecutor`` is a smolagents ``RemotePythonExecutor``, as its
``DockerExecutor`` is, with a ``capsule exec`` session in place of the
container's Jupyter kernel. ``CodeAgent`` takes it through its own
``executor=`` argument (no patch to smolagents)::

    from smolagents import CodeAgent
    from capsule_sandbox.smolagents import CapsuleExecutor

    agent = CodeAgent(tools=[], model=model, executor=CapsuleExecutor())
    # instead of CodeAgent(tools=[], model=model, executor_type="docker")

One long-lived interpreter (``_smol_kernel.py``, standard library only)
runs confined for the executor's life: the variables a code action defines
survive into the next, as in the Docker executor's kernel. Its cwd and only
write grant is ``work_dir`` (default: a temporary directory, removed by
``cleanup()``); no network unless ``network_allowlist`` names hosts (reached
through capsule's filtering proxy). ``send_tools``/``send_variables`` and the
final answer (``FinalAnswerException``) work as for the Docker executor,
through smolagents' own ``RemotePythonExecutor``. An error in the code is
smolagents' ``AgentError`` with the traceback; a step over ``timeout``
seconds is an ``AgentError`` too, and ends the interpreter (its variables
are lost; the next step starts a fresh one, and says so).
"""

from __future__ import annotations

import io
import os
import queue
import re
import shutil
import sys
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.tools import get_tools_definition_code
from smolagents.utils import AgentError

from capsule_sandbox import _policy, _validate
from capsule_sandbox.credentials import coerce_credentials, host_policy
from capsule_sandbox._binary import AvailabilityCache
from capsule_sandbox._cleanup import remove_tree
from capsule_sandbox.backend import CapsuleAgentSession
from capsule_sandbox.types import SandboxConfig

_KERNEL = Path(__file__).with_name("_smol_kernel.py")
_START_SECONDS = 30.0
# What the host holds of the interpreter's answers: a line over _MAX_LINE
# bytes is dropped (the step fails, saying so), and at most _MAX_QUEUED lines
# wait to be read (then the interpreter blocks on its pipe): the confined
# code can write anything on that pipe, the host's memory stays bounded.
_MAX_LINE = 4 << 20
_MAX_QUEUED = 8
_OVERSIZE = b'{"capsule_oversize": true}\n'


class _BoundedSession(CapsuleAgentSession):
    """``CapsuleAgentSession`` with bounded lines and a bounded queue."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_lines":  # the base class makes an unbounded one before its reader starts
            value = queue.Queue(_MAX_QUEUED)
        super().__setattr__(name, value)

    def _pump_out(self) -> None:
        assert self._proc.stdout is not None
        # The pipe is unbuffered (bufsize=0): readline on it reads a byte per
        # system call. Buffered, a 4 MiB line takes ms, not ~10 s.
        stream = io.BufferedReader(self._proc.stdout, 1 << 16)  # type: ignore[arg-type]
        while True:
            line = stream.readline(_MAX_LINE + 1)
            if not line:
                break
            if len(line) > _MAX_LINE or not line.endswith(b"\n"):
                if len(line) > _MAX_LINE:
                    while line and not line.endswith(b"\n"):  # skip the rest of it
                        line = stream.readline(1 << 16)
                    line = _OVERSIZE
            self._lines.put(line)
        self._lines.put(None)


class CapsuleExecutor(RemotePythonExecutor):
    """smolagents' remote executor on a confined, long-lived interpreter.

    Args:
        additional_imports: packages the code may import (smolagents'
            ``additional_authorized_imports``); capsule installs nothing
            (no network by default): they must be importable by ``python``.
        logger: smolagents' ``AgentLogger`` (default: a new one, INFO).
        allow_pickle: as ``RemotePythonExecutor``'s.
        work_dir: the interpreter's cwd and only writable directory.
        timeout: seconds one code action may take (default 60).
        session_timeout: seconds the interpreter may live (capsule's
            wall-clock limit for the whole session; default 3600).
        python: the interpreter (default this process's).
        policy: a base capsule policy (dict or JSON file).
        network_allowlist: hosts reachable through capsule's proxy (strings,
            or ``HostRule``s: TLS terminated, methods/paths/budgets apply).
        credentials: ``Credential``s the proxy injects (the interpreter sees
            placeholders); they turn on the proxy to their hosts.
        upstream_ca: a PEM file of extra roots the proxy trusts upstream.
        memory_mb: the interpreter's memory limit (default 1024).
        env_vars: environment variables set inside.
        binary: the capsule binary (default ``$CAPSULE_BIN``, the wheel's, PATH).
        audit_log: a path, or False for no audit record.
    """

    def __init__(
        self,
        additional_imports: Sequence[str] = (),
        logger: Optional[AgentLogger] = None,
        allow_pickle: bool = False,
        *,
        work_dir: Union[str, os.PathLike[str], None] = None,
        timeout: float = 60.0,
        session_timeout: float = 3600.0,
        python: Union[str, os.PathLike[str], None] = None,
        policy: Union[Mapping[str, Any], str, os.PathLike[str], None] = None,
        network_allowlist: Sequence[Any] = (),
        memory_mb: Optional[int] = 1024,
        env_vars: Optional[Mapping[str, str]] = None,
        credentials: Sequence[Any] = (),
        upstream_ca: Union[str, os.PathLike[str], None] = None,
        binary: Union[str, os.PathLike[str], None] = None,
        audit_log: Union[str, os.PathLike[str], bool, None] = None,
    ) -> None:
        if timeout <= 0 or session_timeout <= 0:
            raise ValueError("timeout and session_timeout must be positive")
        super().__init__(list(additional_imports), logger or AgentLogger(level=LogLevel.INFO), allow_pickle)
        self.timeout = float(timeout)
        self.session_timeout = float(session_timeout)
        self._python = os.path.abspath(os.fspath(python)) if python is not None else os.path.abspath(sys.executable)
        self._base_policy = _policy.load_base_policy(policy)
        self._network_allowlist = [host_policy(h) for h in network_allowlist]
        self._credentials = coerce_credentials(credentials)
        self._upstream_ca = os.path.abspath(os.fspath(upstream_ca)) if upstream_ca is not None else None
        self._memory_mb = memory_mb
        self._env_vars = dict(env_vars or {})
        self._audit_log = audit_log
        self._availability = AvailabilityCache(binary)
        # Private: the kernel (read-only inside) and the policy (never inside).
        self._private = Path(tempfile.mkdtemp(prefix="capsule-smolagents-"))
        shutil.copyfile(_KERNEL, self._private / "kernel.py")
        self._owns_work_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="capsule-smolagents-work-")) if work_dir is None \
            else Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._session: Optional[CapsuleAgentSession] = None
        # An executor dropped without cleanup(): its interpreter and private
        # directories go when it is collected, or at exit.
        self._live: list = [None]
        self._finalizer = weakref.finalize(self, _finish, self._live, self._private,
                                           self.work_dir if self._owns_work_dir else None)
        self._lost_state = False
        self._missing: set[str] = set()
        self._soften = False
        self._tools: dict[str, Any] = {}
        self._start()
        self.installed_packages = self.install_packages(list(additional_imports))
        self.logger.log(f"capsule interpreter is running in {self.work_dir}", level=LogLevel.INFO)

    # -- the interpreter -----------------------------------------------------------

    def _argv(self) -> list[str]:
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise RuntimeError(f"capsule unavailable: {avail.reason or 'unknown reason'}")
        config = SandboxConfig(
            timeout_seconds=self.session_timeout,
            memory_mb=self._memory_mb,
            cpu_limit=None,
            network_enabled=bool(self._network_allowlist),
            network_allowlist=list(self._network_allowlist),
            output_dir=str(self.work_dir.resolve()),
            env_vars=dict(self._env_vars),
            credentials=list(self._credentials),
            upstream_ca=self._upstream_ca,
            # The session's stdout is its channel: no byte limit on it
            # (the kernel bounds each step's logs itself).
            output_max_bytes=1 << 40,
        )
        policy = _policy.build(config, base=self._base_policy, python_tools={})
        policy.setdefault("filesystem", {}).setdefault("read", []).append(str(self._private / "kernel.py"))
        path = _policy.write(policy, str(self._private / "policy.json"))
        _validate.mount_path(str(self.work_dir), "work_dir", write=True)
        argv = [avail.binary, "exec", "--policy", path, "--cwd", str(self.work_dir.resolve()), "--no-tty"]
        if self._audit_log is False:
            argv.append("--no-audit")
        elif self._audit_log not in (None, True):
            argv += ["--audit-log", os.fspath(self._audit_log)]  # type: ignore[arg-type]
        return argv + ["--", self._python, "-u", str(self._private / "kernel.py")]

    def _start(self) -> None:
        session = _BoundedSession(self._argv())
        try:
            hello = session.recv(_START_SECONDS)
        except TimeoutError:
            hello = None
        if not hello or not hello.get("ready"):
            session.close(1.0)
            raise RuntimeError(
                f"the capsule interpreter did not start (exit {session.returncode}): {session.stderr.strip()[-1500:]}"
            )
        self._session = session
        self._live[0] = session

    def _stop(self) -> None:
        session, self._session = self._session, None
        self._live[0] = None
        if session is not None:
            session.close(2.0)

    # -- RemotePythonExecutor ------------------------------------------------------

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        notice = ""
        if self._session is None or self._session.returncode is not None:
            self._stop()
            self._start()
            if self._tools:  # the tools (final_answer too) come back; the variables do not
                tools_code = get_tools_definition_code(self._tools)
                if tools_code:
                    self._session_run(_soften_imports(tools_code, self._missing))
            if self._lost_state:
                notice = "[the confined interpreter was restarted: variables from earlier steps are gone]\n"
                self._lost_state = False
        if self._soften and self._missing:
            code = _soften_imports(code, self._missing)
        output = self._session_run(code)
        if notice:
            output.logs = notice + output.logs
        return output

    def _session_run(self, code: str) -> CodeOutput:
        session = self._session
        assert session is not None
        rid = uuid.uuid4().hex
        try:
            session.send({"id": rid, "code": code})
        except RuntimeError as exc:
            self._lost_state = True
            self._stop()
            raise AgentError(f"the confined interpreter is gone: {exc}", self.logger) from None
        while True:
            try:
                reply = session.recv(self.timeout)
            except TimeoutError:
                self._lost_state = True
                self._stop()
                raise AgentError(
                    f"Code execution timed out after {self.timeout:g} seconds; the confined interpreter was "
                    "stopped (its variables are lost)", self.logger) from None
            if reply is None:
                self._lost_state = True
                status = session.returncode
                tail = session.stderr.strip()[-1500:]
                self._stop()
                raise AgentError(
                    f"the confined interpreter ended during the step (exit {status}; killed by a limit, or the "
                    f"code exited): {tail}", self.logger)
            if reply.get("capsule_oversize"):
                raise AgentError(f"the step's answer was longer than {_MAX_LINE} bytes: dropped", self.logger)
            if reply.get("id") == rid:
                break
        logs = str(reply.get("logs") or "")
        error = reply.get("error")
        if isinstance(error, dict):
            if error.get("ename") == self.FINAL_ANSWER_EXCEPTION:
                value = self._deserialize_final_answer(str(error.get("evalue", "")), self.allow_pickle)
                return CodeOutput(output=value, logs=logs, is_final_answer=True)
            trace = "".join(str(t) for t in (error.get("traceback") or [])) \
                or f"{error.get('ename')}: {error.get('evalue')}"
            raise AgentError((f"Execution logs:\n{logs}\n" if logs else "") + trace, self.logger)
        return CodeOutput(output=reply.get("result"), logs=logs, is_final_answer=False)

    def send_tools(self, tools: dict[str, Any]) -> None:
        """smolagents' own ``send_tools``; the tool definitions' top-level
        imports of packages the interpreter lacks are made optional (the
        Docker executor pip-installs them, e.g. numpy and pillow for the
        final answer's serialiser, which uses them only when present)."""
        self._soften = True
        try:
            super().send_tools(tools)
        finally:
            self._soften = False
        self._tools = dict(tools)

    def _patch_final_answer_with_exception(self, final_answer_tool: Any) -> None:
        """smolagents' patch, once per tool: ``CodeAgent.run`` sends the tools
        at every run, and patching an already patched tool again (smolagents
        1.26.0, any remote executor) takes the source of the patched
        ``forward`` as the original, whose closure variable is then undefined
        in the interpreter (NameError: allow_pickle_setting)."""
        if "_forward" in vars(type(final_answer_tool)):
            return
        super()._patch_final_answer_with_exception(final_answer_tool)

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """capsule installs nothing (the interpreter has no network by
        default): checks which packages the confined interpreter can import,
        and logs the others."""
        names = sorted({_IMPORT_NAMES.get(p, p).split(".")[0] for p in additional_imports
                        if p and p != "*" and not p.endswith(".*")})
        if not names:
            return list(additional_imports)
        probe = (
            "import importlib.util as _u\n"
            f"print(' '.join(n for n in {names!r} if _u.find_spec(n) is None))"
        )
        out = self.run_code_raise_errors(probe)
        missing = out.logs.split()
        self._missing.update(missing)
        if missing:
            self.logger.log(
                f"capsule does not install packages: {' '.join(missing)} cannot be imported by {self._python} "
                "(install them into that environment)", level=LogLevel.INFO)
        return list(additional_imports)

    def cleanup(self) -> None:
        """Stop the interpreter; remove the private directory, and the work dir
        when the executor made it."""
        self._stop()
        self._finalizer()

    def delete(self) -> None:
        self.cleanup()

    def __enter__(self) -> "CapsuleExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()


def _finish(live: list, private: Path, work_dir: Optional[Path]) -> None:
    session, live[0] = live[0], None
    if session is not None:
        session.close(2.0)
    remove_tree(str(private))
    if work_dir is not None:
        remove_tree(str(work_dir))


_IMPORT_NAMES = {"pillow": "PIL", "Pillow": "PIL", "beautifulsoup4": "bs4", "scikit-learn": "sklearn"}
_TOP_IMPORT = re.compile(r"^(?:import|from)\s+([A-Za-z_]\w*)")


def _soften_imports(code: str, missing: set[str]) -> str:
    """Wrap the top-level ``import X`` / ``from X import ...`` lines of the
    missing packages in ``try/except ImportError``."""
    out = []
    for line in code.split("\n"):
        m = _TOP_IMPORT.match(line)
        if m and m.group(1) in missing:
            out += ["try:", f"    {line}", "except ImportError:", "    pass"]
        else:
            out.append(line)
    return "\n".join(out)


__all__ = ["CapsuleExecutor"]

"""capsule as the per-step sandbox of Ray tasks (``pip install capsule-sandbox[ray]``).

Three pieces:

* :func:`node_resources` -- what a node advertises to Ray: ``{"capsule": N}``
  only when that node's own ``capsule doctor --json`` says capsule confines
  there and ``capsule check`` accepts the step policy; ``{}`` otherwise. Pass
  it to ``ray start --resources``, ``ray.init(resources=...)`` or
  ``Cluster.add_node(resources=...)`` (``python -m capsule_sandbox.ray
  resources`` prints it as JSON for ``ray start``).
* :data:`run_step` (a Ray remote function) and :func:`submit` -- one confined
  step on whichever node Ray places it. Every step requests one unit of the
  ``capsule`` resource, so it is placed only on such nodes, and re-checks at
  run time (the worker's own doctor probe; capsule itself refuses, exit 125,
  what the node cannot enforce): a step never runs unconfined. The result is
  the provider's :class:`~capsule_sandbox.types.SandboxResult` (a
  :class:`StepResult`, adding the node id and the run's audit record); a
  timeout is a result (124), a refusal raises :class:`CapsuleRefused`, which
  ``ray.get`` re-raises as that type (Ray's error is a subclass of it), so
  ``except CapsuleRefused`` tells it from Ray's own failures.
* :class:`CapsuleSession` (a Ray actor) -- an AGT-style provider session
  (workspace; ``scripts/`` read-only, ``output/`` writable and kept across
  steps) on one node for a multi-step agent, destroyed with the actor
  (``close()``, ``ray.kill``, or the actor's process dying).

Keys stay on the node: LLM and tool calls from inside a step go over capsule's
RPC pipe to the capsule parent on the node (its LLM broker reads the node's
host config: ``$XDG_CONFIG_HOME/capsule/config.yaml`` or ``CAPSULE_LLM_*`` in
the environment Ray's worker inherited), and Python tools given as ``tools=``
run in the Ray worker on that node. The step's environment is built from
nothing, as for every capsule run.

Everything a worker makes lives under one directory per worker process
(``capsule-ray-<pid>-*`` in the temp dir): a step's audit and policy files are
removed after the step and its workspace emptied for the worker's next step
(removed whole when the step changed it or was interrupted), a session's
workspace goes when the session ends, and a small reaper process (detached,
holding a pipe from the worker) removes the whole directory when the worker
dies, ``kill -9`` included.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

try:
    import ray
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "capsule_sandbox.ray needs Ray: pip install 'capsule-sandbox[ray]' (or pip install ray)"
    ) from exc

from capsule_sandbox import _policy, _validate
from capsule_sandbox._binary import Availability, AvailabilityCache
from capsule_sandbox._cleanup import remove_tree_logged
from capsule_sandbox._exec import CapsuleRun
from capsule_sandbox._serve import ServeClient, ServeRun
from capsule_sandbox.provider import CapsuleSandboxProvider, _resolve_interpreter
from capsule_sandbox.types import SandboxConfig, SandboxResult, coerce_config

logger = logging.getLogger("capsule_sandbox.ray")

#: The custom resource a node advertises when capsule confines there.
RESOURCE = "capsule"

__all__ = [
    "RESOURCE",
    "CapsuleRefused",
    "CapsuleSession",
    "CapsuleUnavailable",
    "NodeCheck",
    "StepResult",
    "node_check",
    "node_resources",
    "run_step",
    "submit",
]


class CapsuleRefused(RuntimeError):
    """capsule refused to run the step (exit 125, ``termination_reason
    "refused"``): the policy asks for what this node cannot enforce, or the
    step could not be confined here. Nothing of the step ran unconfined.

    ``result`` is the step's result (``None`` when no run was attempted) and
    ``node_id`` the Ray node it was refused on. ``ray.get`` raises Ray's
    ``RayTaskError`` as a subclass of this class, so ``except CapsuleRefused``
    catches it and ``except ray.exceptions.RayError`` still sees Ray's own.
    """

    def __init__(self, message: str, result: SandboxResult | None = None, node_id: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.result = result
        self.node_id = node_id

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.result, self.node_id))

    def __str__(self) -> str:
        return self.message


class CapsuleUnavailable(CapsuleRefused):
    """capsule cannot confine anything on this node (no binary, or its
    doctor reports no Landlock/seccomp): the step was not started."""


@dataclass
class StepResult(SandboxResult):
    """The provider's result of one step, plus where it ran.

    ``node_id`` is the Ray node (``ray.get_runtime_context().get_node_id()``),
    ``audit`` the run's audit record (capsule's one JSON line: outcome,
    enforcement, counters; never output, arguments or keys), ``{}`` when the
    audit log was turned off.
    """

    node_id: str = ""
    audit: dict[str, Any] = field(default_factory=dict)


# -- which nodes may run steps ------------------------------------------------------


@dataclass(frozen=True)
class NodeCheck:
    """Whether capsule can run the step policy on this node, and why not."""

    ok: bool
    reason: str
    binary: str | None = None
    doctor: dict[str, Any] = field(default_factory=dict)


def _build_policy(
    config: Any,
    policy: Mapping[str, Any] | str | os.PathLike[str] | None,
    tools: Mapping[str, Callable[..., Any]] | None,
    context: Mapping[str, Any] | None = None,
) -> tuple[SandboxConfig, dict[str, Any]]:
    cfg = coerce_config(config)
    base = _policy.load_base_policy(policy)
    return cfg, _policy.build(cfg, base=base, python_tools=dict(tools or {}), context=context)


def node_check(
    config: Any = None,
    *,
    policy: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    binary: str | os.PathLike[str] | None = None,
) -> NodeCheck:
    """Run this node's ``capsule doctor --json``, then ``capsule check`` on
    the policy a step with ``config`` (a ``SandboxConfig`` or its fields) and
    base ``policy`` gets. Never raises for an unusable node: ``ok`` is False
    and ``reason`` says why."""
    avail = AvailabilityCache(binary).get()
    if not avail.available or avail.binary is None:
        return NodeCheck(False, avail.reason or "capsule unavailable", avail.binary, dict(avail.doctor))
    try:
        _cfg, built = _build_policy(config, policy, tools)
    except (TypeError, ValueError, OSError) as exc:
        return NodeCheck(False, f"the step policy is refused before any node: {exc}", avail.binary, dict(avail.doctor))
    with tempfile.TemporaryDirectory(prefix="capsule-ray-check-") as tmp:
        path = _policy.write(built, os.path.join(tmp, "policy.json"))
        try:
            done = subprocess.run(
                [avail.binary, "check", "--policy", path],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return NodeCheck(False, f"could not run capsule check: {exc}", avail.binary, dict(avail.doctor))
    if done.returncode != 0:
        err = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        why = err[-1] if err else f"exit {done.returncode}"
        return NodeCheck(False, f"capsule check refuses the step policy here: {why}", avail.binary, dict(avail.doctor))
    return NodeCheck(True, "", avail.binary, dict(avail.doctor))


def node_resources(
    config: Any = None,
    *,
    policy: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    binary: str | os.PathLike[str] | None = None,
    slots: float | None = None,
) -> dict[str, float]:
    """The custom resources this node should advertise to Ray:
    ``{"capsule": slots}`` (default: the node's CPU count) when
    :func:`node_check` passes, else ``{}`` (the reason is logged), so no step
    is ever placed here."""
    check = node_check(config, policy=policy, tools=tools, binary=binary)
    if not check.ok:
        logger.warning("this node does not advertise %r to Ray: %s", RESOURCE, check.reason)
        return {}
    amount = float(slots) if slots is not None else float(os.cpu_count() or 1)
    if amount <= 0:
        raise ValueError("slots must be > 0")
    return {RESOURCE: amount}


# -- the worker side ------------------------------------------------------------------

_REAPER = r"""
import os, signal, sys, time
root, rfd, pkg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if os.fork():
    os._exit(0)
os.setsid()
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
try:
    while os.read(rfd, 4096):
        pass
except OSError:
    pass
sys.path.insert(0, pkg)
from capsule_sandbox._cleanup import remove_tree
for _ in range(20):
    if not os.path.lexists(root) or not remove_tree(root):
        break
    time.sleep(0.5)
"""


class _WorkerRoot:
    """One private directory per worker process, removed by a reaper when the
    process ends however it ends."""

    def __init__(self, parent: str | None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=f"capsule-ray-{os.getpid()}-", dir=parent))
        os.chmod(self.path, 0o700)
        rfd, self._wfd = os.pipe()  # both O_CLOEXEC: no capsule child holds the write end
        try:
            pkg = str(Path(__file__).resolve().parent.parent)
            # The reaper forks and its parent exits: it is nobody's child
            # here, so Ray's clean-up of a dead worker's children spares it.
            subprocess.run(
                [sys.executable, "-c", _REAPER, str(self.path), str(rfd), pkg],
                pass_fds=(rfd,),
                stdin=subprocess.DEVNULL,
                check=True,
                timeout=30,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1"},
            )
        finally:
            os.close(rfd)
        atexit.register(self.remove)

    def remove(self) -> None:
        remove_tree_logged(self.path, "Ray worker directory")


_roots: dict[str | None, _WorkerRoot] = {}
_roots_lock = threading.Lock()


def _worker_root(parent: str | None) -> _WorkerRoot:
    with _roots_lock:
        root = _roots.get(parent)
        if root is None or not root.path.exists():
            root = _roots[parent] = _WorkerRoot(parent)
        return root


def _node_id() -> str:
    if not ray.is_initialized():  # outside Ray (a local call): asking would start Ray
        return ""
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (tests, a local call)
        return ""


def _read_audit(path: Path, run_id: str) -> dict[str, Any]:
    """The record of ``run_id`` in the audit file ``path`` ({} if absent)."""
    if not run_id:
        return {}
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - (1 << 20)))
            lines = handle.read().splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("run_id") == run_id:
            return record
    return {}


def _step_result(result: SandboxResult, node_id: str, audit: dict[str, Any]) -> StepResult:
    values = {name: getattr(result, name) for name in SandboxResult.__dataclass_fields__}
    return StepResult(**values, node_id=node_id, audit=audit)


def _judge(result: StepResult) -> StepResult:
    """Raise for a refusal; refuse a result that does not show confinement."""
    if result.termination_reason == "refused":
        raise CapsuleRefused(
            f"capsule refused the step on node {result.node_id or '?'}: {result.error or result.stderr.strip()}",
            result,
            result.node_id,
        )
    if result.termination_reason in ("exited", "signaled", "timeout"):
        enf = result.enforcement or {}
        if not (enf.get("seccomp") and int(enf.get("landlock_abi") or 0) > 0):
            raise CapsuleRefused(
                f"the step's result does not show capsule's confinement (enforcement {enf!r}); refusing it",
                result,
                result.node_id,
            )
    return result


class _Runner:
    """A worker's step runner: its doctor probe, its warm ``capsule serve``,
    its private directory."""

    def __init__(self, binary: str | None, workspace_root: str | None) -> None:
        self._availability = AvailabilityCache(binary)
        self._workspace_root = workspace_root
        self._serve: ServeClient | None = None
        self._lock = threading.Lock()
        # Step workspaces ready for the next step: (path, output/'s mode).
        self._free: list[tuple[Path, int]] = []

    def _take_workspace(self, root: _WorkerRoot) -> tuple[Path, int]:
        with self._lock:
            while self._free:
                ws, mode = self._free.pop()
                if ws.parent == root.path and ws.is_dir():
                    return ws, mode
        ws = Path(tempfile.mkdtemp(prefix="step-", dir=root.path))
        CapsuleSandboxProvider._install_workspace(ws)
        return ws, os.lstat(ws / "output").st_mode

    def _give_back(self, ws: Path, mode: int, script: Path | None) -> None:
        """Empty the workspace for the next step, or remove it.

        A step can write only in ``output/`` (``scripts/`` and the
        workspace's top are read-only in its view): ``output/`` is removed
        and made again, always, even when the step left it empty: the step
        could set the directory's own user xattrs and times (Landlock has no
        hook for them, and output/ is inside its write grant), which an
        emptied but kept ``output/`` would hand to the next step; a fresh
        inode is also outside the Landlock rules of any process of the step
        that could still be ending. A workspace whose layout or
        ``output/`` mode changed is removed whole. Nothing of a step reaches
        the next one."""
        try:
            if script is not None:
                script.unlink(missing_ok=True)
            out = ws / "output"
            st = os.lstat(out)
            if st.st_mode != mode or sorted(os.listdir(ws)) != ["output", "scripts"] or os.listdir(
                ws / "scripts"
            ) != ["capsule_sandbox"]:
                raise OSError("the workspace changed")
            if remove_tree_logged(out, "step output"):
                raise OSError("output/ could not be removed")
            out.mkdir()
            if os.lstat(out).st_mode != mode:
                raise OSError("output/ mode")
        except OSError:
            remove_tree_logged(ws, "step workspace")
            return
        with self._lock:
            if len(self._free) < 64:
                self._free.append((ws, mode))
                return
        remove_tree_logged(ws, "step workspace")

    def require(self) -> Availability:
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise CapsuleUnavailable(
                f"capsule cannot confine steps on node {_node_id() or '?'}: {avail.reason or 'unavailable'}; "
                f"the step was not run (start this node with capsule_sandbox.ray.node_resources(), "
                f"which advertises no {RESOURCE!r} resource here)",
                None,
                _node_id(),
            )
        return avail

    def serve(self, binary: str) -> ServeClient:
        with self._lock:
            if self._serve is None or not self._serve.alive:
                if self._serve is not None:
                    self._serve.close()
                self._serve = ServeClient(binary)
            return self._serve

    def run(
        self,
        command: str | Sequence[str],
        *,
        config: Any,
        policy: Mapping[str, Any] | str | os.PathLike[str] | None,
        tools: Mapping[str, Callable[..., Any]] | None,
        agent_id: str,
        interpreter: str | None,
        context: Mapping[str, Any] | None,
        audit_log: str | os.PathLike[str] | bool | None,
    ) -> StepResult:
        binary = self.require().binary
        assert binary is not None
        _validate.agent_id(agent_id)
        for name in tools or {}:
            _validate.tool_name(name)
        cfg, built = _build_policy(config, policy, tools, context)
        root = _worker_root(self._workspace_root)
        eid = uuid.uuid4().hex[:12]
        workspace, out_mode = self._take_workspace(root)
        audit_path: Path | None = None
        policy_path: str | None = None
        script: Path | None = None
        recycle = True
        try:
            if isinstance(command, str):
                script = workspace / "scripts" / f"{eid}.py"
                script.write_text(command, encoding="utf-8")
                argv = [_resolve_interpreter(interpreter), str(script)]
            else:
                argv = [str(a) for a in command]
                if not argv:
                    raise ValueError("empty command")
            flags = ["--json", "--workspace", str(workspace), "--agent-id", agent_id]
            if audit_log is False:
                flags.append("--no-audit")
            elif audit_log in (None, True):
                audit_path = root.path / f"audit-{eid}.jsonl"
                flags += ["--audit-log", str(audit_path)]
            else:
                audit_path = Path(os.fspath(audit_log))  # type: ignore[arg-type]
                flags += ["--audit-log", str(audit_path)]
            run: CapsuleRun | ServeRun
            if _policy.has_forward_tools(built):
                # Python tools are relayed over an inherited descriptor: a
                # fresh `capsule exec` (outside the workspace: not in its view).
                policy_path = _policy.write(built, str(root.path / f"policy-{eid}.json"))
                allowed = {n: f for n, f in (tools or {}).items() if n in cfg.tool_allowlist}
                run = CapsuleRun(
                    [binary, "exec", *flags, "--policy", policy_path],
                    argv,
                    timeout_seconds=cfg.timeout_seconds,
                    tools=allowed,
                    tool_timeout_seconds=cfg.tool_timeout_seconds,
                )
            else:
                run = ServeRun(
                    lambda: self.serve(binary),
                    flags,
                    argv,
                    policy_text=_policy.dumps(built),
                    cwd=str(workspace),
                    timeout_seconds=cfg.timeout_seconds,
                )
            try:
                result = run.run()
            except BaseException:
                run.cancel()  # ray.cancel() interrupts the task: stop the step too
                recycle = False  # (it may still be ending: never reuse its workspace)
                raise
            audit = _read_audit(audit_path, result.run_id) if audit_path is not None else {}
            return _step_result(result, _node_id(), audit)
        finally:
            if recycle:
                self._give_back(workspace, out_mode, script)
            else:
                remove_tree_logged(workspace, "step workspace")
            for path in (policy_path, str(audit_path) if audit_path and audit_log in (None, True) else None):
                if path:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass


_runners: dict[tuple[str | None, str | None], _Runner] = {}
_runners_lock = threading.Lock()


def _runner(binary: str | os.PathLike[str] | None, workspace_root: str | os.PathLike[str] | None) -> _Runner:
    key = (os.fspath(binary) if binary is not None else None, os.fspath(workspace_root) if workspace_root else None)
    with _runners_lock:
        runner = _runners.get(key)
        if runner is None:
            runner = _runners[key] = _Runner(*key)
        return runner


def _run_step(
    command: str | Sequence[str],
    config: Any = None,
    *,
    policy: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    agent_id: str = "ray-step",
    context: Mapping[str, Any] | None = None,
    interpreter: str | None = None,
    binary: str | os.PathLike[str] | None = None,
    workspace_root: str | os.PathLike[str] | None = None,
    audit_log: str | os.PathLike[str] | bool | None = None,
) -> StepResult:
    """One confined step on this node (the body of :data:`run_step`).

    ``command``: a ``str`` is Python code, run with ``interpreter`` (default:
    the worker's Python) as the provider's ``execute_code`` does; a list is
    an argv, as the provider's ``run``. ``config``: a ``SandboxConfig`` (or
    AGT's, or a mapping of its fields); ``policy``: the base policy (dict or
    JSON file on the node); ``tools``: Python tools (named in
    ``config.tool_allowlist``) run in this worker; ``context`` reaches the
    code as ``$CAPSULE_CONTEXT``. ``audit_log``: None keeps the record only
    in the result (``audit``), a path appends it to that file on the node as
    well, False writes none.
    """
    result = _runner(binary, workspace_root).run(
        command,
        config=config,
        policy=policy,
        tools=tools,
        agent_id=agent_id,
        interpreter=interpreter,
        context=context,
        audit_log=audit_log,
    )
    return _judge(result)


#: ``run_step.remote(code_or_argv, config=None, *, policy=..., tools=..., ...)``:
#: one confined step where Ray places it (only nodes advertising ``capsule``).
#: Not retried by default (a step may have effects); ``.options(...)`` as usual.
run_step = ray.remote(num_cpus=1, resources={RESOURCE: 1}, max_retries=0)(_run_step)


def submit(
    command: str | Sequence[str],
    config: Any = None,
    *,
    ray_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """``run_step.options(**ray_options).remote(command, config, **kwargs)``:
    the ``ObjectRef`` of one confined step. ``ray.get`` gives its
    :class:`StepResult` or raises :class:`CapsuleRefused`."""
    remote = run_step.options(**dict(ray_options)) if ray_options else run_step
    return remote.remote(command, config, **kwargs)


# -- sessions -------------------------------------------------------------------------


#: The most bytes :meth:`CapsuleSession.read_output` reads unless told otherwise.
READ_OUTPUT_MAX = 256 << 20


class _SessionImpl:
    """The body of the :class:`CapsuleSession` actor."""

    def __init__(
        self,
        agent_id: str = "ray-agent",
        config: Any = None,
        *,
        policy: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        interpreter: str | None = None,
        binary: str | os.PathLike[str] | None = None,
        workspace_root: str | os.PathLike[str] | None = None,
        audit_log: str | os.PathLike[str] | bool | None = None,
        runtime: Any = None,
        static_scan: bool = False,
    ) -> None:
        root_parent = os.fspath(workspace_root) if workspace_root else None
        _runner(binary, root_parent).require()
        self._root = _worker_root(root_parent)
        self._own_audit = audit_log in (None, True)
        self._audit_path: Path | None = None
        if self._own_audit:
            self._audit_path = self._root.path / f"audit-session-{uuid.uuid4().hex[:12]}.jsonl"
        elif audit_log is not False:
            self._audit_path = Path(os.fspath(audit_log))  # type: ignore[arg-type]
        self.agent_id = agent_id
        self._provider = CapsuleSandboxProvider(
            binary,
            tools=tools,
            policy=policy,
            interpreter=interpreter,
            workspace_root=self._root.path,
            audit_log=False if audit_log is False else self._audit_path,
            static_scan=static_scan,
        )
        self._handle = self._provider.create_session(agent_id, config=config, runtime=runtime)
        self.session_id = self._handle.session_id
        self._closed = False

    def _finish(self, result: SandboxResult | None) -> StepResult:
        if result is None:
            raise RuntimeError("the session's step produced no result")
        audit = _read_audit(self._audit_path, result.run_id) if self._audit_path is not None else {}
        return _judge(_step_result(result, _node_id(), audit))

    def execute(self, code: str, context: Mapping[str, Any] | None = None) -> StepResult:
        """Run Python ``code`` as the session's next step."""
        handle = self._provider.execute_code(self.agent_id, self.session_id, code, context=context)
        return self._finish(handle.result)

    def run(self, command: Sequence[str] | str) -> StepResult:
        """Run an argv (or a shell-split string) in the session's workspace."""
        return self._finish(self._provider.run(self.agent_id, command, session_id=self.session_id))

    def workspace(self) -> str:
        """The session's workspace on its node (``scripts/``, ``output/``)."""
        return self._handle.workspace

    def node_id(self) -> str:
        return _node_id()

    def pid(self) -> int:
        return os.getpid()

    def read_output(self, name: str, max_bytes: int = READ_OUTPUT_MAX) -> bytes:
        """A file the steps wrote in ``output/`` (a relative path inside it).

        The steps shaped it, and one may still be running: links inside
        ``output/`` are resolved first, then the resolved path is opened one
        component at a time from ``output/``'s descriptor, none of them
        followed as a link (a directory swapped for a link to a host
        directory between the check and the open fails instead of reading
        the host's file). Only a regular file is read (a FIFO would block
        the actor for good; it is opened non-blocking and checked through
        its descriptor), and at most ``max_bytes`` (a sparse file can say
        terabytes on a few blocks of disk): a larger one raises ValueError.
        """
        out = Path(self._handle.workspace, "output").resolve()
        path = (out / name).resolve()
        if out not in path.parents:
            raise ValueError(f"{name!r} is not inside output/")
        parts = path.relative_to(out).parts
        dfd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                os.close(dfd)
                dfd = nfd
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{name!r} in output/ is not a regular file")
            if st.st_size > max_bytes:
                raise ValueError(f"{name!r} in output/ has {st.st_size} bytes, more than max_bytes={max_bytes}")
            data = handle.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise ValueError(f"{name!r} in output/ has more than max_bytes={max_bytes} bytes")
            return data

    def close(self) -> list[str]:
        """Destroy the session (its workspace, its capsule serve); idempotent.
        Returns what could not be removed."""
        if self._closed:
            return []
        self._closed = True
        self._provider.destroy_session(self.agent_id, self.session_id)
        left = list(self._provider.cleanup_failures.get((self.agent_id, self.session_id), []))
        if self._own_audit and self._audit_path is not None:
            try:
                os.unlink(self._audit_path)
            except OSError:
                pass
        return left

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finaliser never raises
            pass


#: ``CapsuleSession.remote(agent_id, config, *, policy=..., tools=..., runtime=...)``:
#: an actor holding one provider session on one capsule node; methods
#: ``execute(code)``, ``run(argv)``, ``read_output(name)``, ``workspace()``,
#: ``node_id()``, ``close()``. No restart (a restarted session would lose its
#: workspace silently); the workspace goes with the actor.
CapsuleSession = ray.remote(num_cpus=0, resources={RESOURCE: 1}, max_restarts=0)(_SessionImpl)


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m capsule_sandbox.ray",
        description="What this node advertises to Ray: `ray start --resources \"$(python -m capsule_sandbox.ray resources)\"`",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    res = sub.add_parser("resources", help="print the node's custom resources as JSON ({} when capsule cannot confine here)")
    res.add_argument("--policy", help="base policy (JSON file) the steps run with")
    res.add_argument("--slots", type=float, help="concurrent steps (default: CPU count)")
    res.add_argument("--binary", help="the capsule binary (default: $CAPSULE_BIN, the wheel's, PATH)")
    args = parser.parse_args(argv)
    check = node_check(policy=args.policy, binary=args.binary)
    if not check.ok:
        print(f"capsule_sandbox.ray: not advertising {RESOURCE!r}: {check.reason}", file=sys.stderr)
        print("{}")
        return 0
    print(json.dumps(node_resources(policy=args.policy, binary=args.binary, slots=args.slots)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())

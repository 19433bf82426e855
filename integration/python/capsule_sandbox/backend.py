"""``CapsuleBackend``: an agentnode-style sandbox backend on capsule.

Frameworks that plug an isolation backend with ``set_default_backend()`` call
``check_available()``, ``wrap_command(spec)``, ``run_process(spec,
input_text, timeout)`` and ``open_agent_session(spec)`` with a
``ProcessSpec``. This module defines a compatible ``ProcessSpec`` (the
upstream field names, plus ``allow_hosts``, ``read_only_mounts`` and ``cwd``)
and reads any object with those attributes, so an upstream spec works too.

Network modes: ``none`` -> capsule ``none``; ``restricted`` and ``egress`` ->
``proxy`` with the spec's ``allow_hosts`` (or ``egress.allowed_domains``),
refused when that list is empty; ``default``/``unrestricted`` -> capsule
``unrestricted`` (asked for explicitly). Any other value is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping

from capsule_sandbox import _policy, _validate
from capsule_sandbox._binary import AvailabilityCache

try:  # pragma: no cover - only when agentnode is installed
    from agentnode_sdk.sandbox.backend import SandboxBackend as _Base  # type: ignore
except Exception:  # noqa: BLE001 - optional, any import failure means "absent"
    _Base = object


class SandboxRequiredError(RuntimeError):
    """Isolation was asked for and cannot be given: refuse, never run unsandboxed."""


@dataclass(frozen=True)
class SandboxAvailability:
    """Result of ``check_available()`` (agentnode's field names)."""

    available: bool
    backend: str
    reason: str
    executable_path: str | None = None
    landlock_abi: int = 0
    doctor: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class MountSpec:
    """A host directory granted to the process. capsule cannot remap paths, so
    ``dst`` must equal ``src`` (or be empty)."""

    src: str
    dst: str = ""
    read_only: bool = True


@dataclass(frozen=True)
class EgressSpec:
    """Upstream's egress handle; capsule only uses ``allowed_domains``."""

    network_name: str = ""
    proxy_url: str = ""
    allowed_domains: tuple[str, ...] = ()


@dataclass
class ProcessSpec:
    """A request to run a command in isolation."""

    command: list[str]
    network: str = "none"  # none | restricted | egress | default
    allow_hosts: list[str] = field(default_factory=list)
    read_only_mounts: list[str] = field(default_factory=list)
    mounts: list[MountSpec] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    cwd: str | None = None
    clean_home: bool = True
    interactive: bool = False
    name: str | None = None
    egress: EgressSpec | None = None


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def _mebibytes(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(1, int(value))
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ValueError(f"unreadable memory limit {value!r} (use e.g. 512, '512m', '2g')")
    number, unit = float(match.group(1)), match.group(2).lower()
    factor = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]
    if unit == "" and not str(value).strip().lower().endswith("b"):
        factor = 1  # a bare number is MiB, like memory_mb; "…b" is bytes
    return max(1, int(number * factor))


def spec_to_policy(spec: Any) -> dict[str, Any]:
    """The capsule policy for a ProcessSpec-like object. Raises on refusal."""
    network = getattr(spec, "network", "none") or "none"
    hosts = list(getattr(spec, "allow_hosts", None) or [])
    egress = getattr(spec, "egress", None)
    if egress is not None:
        hosts += [h for h in getattr(egress, "allowed_domains", ()) or () if h not in hosts]
    net: dict[str, Any]
    if network == "none":
        net = {"mode": "none"}
    elif network in ("restricted", "egress"):
        if not hosts:
            raise SandboxRequiredError(
                f"network={network!r} needs allow_hosts: capsule never turns a restricted "
                "network into unrestricted egress"
            )
        for host in hosts:
            _validate.host_entry(host)
        net = {"mode": "proxy", "allow_hosts": hosts}
    elif network in ("default", "unrestricted"):
        net = {"mode": "unrestricted"}
    else:
        raise SandboxRequiredError(f"unknown network mode {network!r}; refusing (fail closed)")

    read: list[str] = []
    write: list[str] = []
    for path in getattr(spec, "read_only_mounts", None) or []:
        read.append(_validate.mount_path(path, "read_only_mounts", write=False))
    for mount in getattr(spec, "mounts", None) or []:
        src = getattr(mount, "src", None)
        dst = getattr(mount, "dst", "") or ""
        if dst and os.path.normpath(dst) != os.path.normpath(str(src)):
            raise SandboxRequiredError(
                f"mount {src!r} -> {dst!r}: capsule grants host paths in place and cannot "
                "remap them; use dst == src"
            )
        read_only = bool(getattr(mount, "read_only", True))
        resolved = _validate.mount_path(src, "mounts", write=not read_only)
        (read if read_only else write).append(resolved)

    env = dict(getattr(spec, "env", None) or {})
    _validate.env_vars(env)

    limits_in: Mapping[str, Any] = getattr(spec, "limits", None) or {}
    limits: dict[str, Any] = {}
    for key, value in limits_in.items():
        if key in ("memory", "memory_mb", "mem"):
            limits["memory_mb"] = _mebibytes(value)
        elif key in ("timeout", "timeout_seconds"):
            limits["timeout_seconds"] = float(value)
        elif key in ("cpu_seconds", "cpu_time"):
            limits["cpu_seconds"] = int(value)
        elif key in ("pids", "pids_limit", "max_processes"):
            limits["max_processes"] = int(value)
        elif key in ("nofile", "max_open_files"):
            limits["max_open_files"] = int(value)
        elif key in ("max_output_bytes", "output_max_bytes"):
            limits["max_output_bytes"] = int(value)
        elif key in ("max_file_size_mb", "fsize_mb"):
            limits["max_file_size_mb"] = int(value)
        # Docker-only knobs (cpus, tmp_size, home_size) have no capsule meaning.

    policy: dict[str, Any] = {
        "version": 1,
        "filesystem": {"read": read, "write": write},
        "network": net,
        "env": {"set": env},
        "limits": limits,
    }
    return policy


def _exit_reason(code: int) -> str:
    if code == 124:
        return "timeout"
    if code == 125:
        return "refused"
    if code > 128:
        return "signaled"
    return "exited"


class Outcome(tuple):  # type: ignore[type-arg]
    """``(exit_code, stdout, stderr)`` that also says why the run stopped.

    ``exit_code`` is None when capsule killed the process (timeout);
    ``native_status`` is capsule's own exit status.
    """

    def __new__(cls, exit_code: int | None, stdout: str, stderr: str, *, reason: str = "exited",
                native_status: int | None = None, platform: str = "capsule") -> "Outcome":
        made = super().__new__(cls, (exit_code, stdout, stderr))
        made._reason = reason  # type: ignore[attr-defined]
        made._native = native_status  # type: ignore[attr-defined]
        made._platform = platform  # type: ignore[attr-defined]
        return made

    @property
    def exit_code(self) -> int | None:
        return self[0]  # type: ignore[no-any-return]

    @property
    def stdout(self) -> str:
        return self[1]  # type: ignore[no-any-return]

    @property
    def stderr(self) -> str:
        return self[2]  # type: ignore[no-any-return]

    @property
    def reason(self) -> str:
        return self._reason  # type: ignore[attr-defined,no-any-return]

    @property
    def native_status(self) -> int | None:
        return self._native  # type: ignore[attr-defined,no-any-return]

    @property
    def platform(self) -> str:
        return self._platform  # type: ignore[attr-defined,no-any-return]


class CapsuleAgentSession:
    """A long-lived sandboxed process spoken to in JSON lines over its stdio."""

    def __init__(self, argv: list[str], cwd: str | None = None) -> None:
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=None,
            bufsize=0,
        )
        self._lines: "queue.Queue[bytes | None]" = queue.Queue()
        self._stderr = bytearray()
        self._wlock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._pump_out, daemon=True, name="capsule-session-out").start()
        threading.Thread(target=self._pump_err, daemon=True, name="capsule-session-err").start()

    def _pump_out(self) -> None:
        assert self._proc.stdout is not None
        for line in iter(self._proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def _pump_err(self) -> None:
        assert self._proc.stderr is not None
        for chunk in iter(lambda: self._proc.stderr.read(4096), b""):  # type: ignore[union-attr]
            if len(self._stderr) < 1_048_576:
                self._stderr += chunk

    @property
    def stderr(self) -> str:
        """What the process (and capsule) wrote on stderr so far (first MiB)."""
        return self._stderr.decode("utf-8", "replace")

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one message as a JSON line to the process's stdin."""
        if self._closed:
            raise RuntimeError("session is closed")
        data = json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
        assert self._proc.stdin is not None
        with self._wlock:
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                raise RuntimeError(f"sandboxed process is gone: {exc}") from None

    def recv(self, timeout: float) -> dict[str, Any] | None:
        """Next JSON line from stdout; None at EOF; TimeoutError when none comes.

        Lines that are not JSON objects are skipped.
        """
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no message within {timeout}s") from None
            if line is None:
                self._lines.put(None)  # stay at EOF for later calls
                return None
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value

    def close(self, timeout: float = 5.0) -> None:
        """Close stdin, then stop capsule (and with it the sandboxed tree)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            try:
                self._proc.wait(3.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> "CapsuleAgentSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CapsuleBackend(_Base):  # type: ignore[misc]
    """agentnode-style backend: each process is one ``capsule exec``.

    ``wrap_command`` writes the spec's policy to a private, content-addressed
    JSON file (0600, in a directory removed with the backend) and returns the
    argv; running that argv is the caller's business.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        agent_id: str = "agentnode",
        audit_log: str | os.PathLike[str] | bool | None = None,
    ) -> None:
        self._availability = AvailabilityCache(binary)
        self._agent_id = _validate.agent_id(agent_id)
        self._audit_log = audit_log
        self._dir = tempfile.mkdtemp(prefix="capsule-backend-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)

    # -- detection ----------------------------------------------------------------

    def check_available(self, force: bool = False) -> SandboxAvailability:
        avail = self._availability.get(refresh=force)
        from capsule_sandbox._binary import landlock_abi

        return SandboxAvailability(
            available=avail.available,
            backend="capsule",
            reason=avail.reason,
            executable_path=avail.binary,
            landlock_abi=landlock_abi(avail.doctor) if avail.doctor else 0,
            doctor=dict(avail.doctor),
        )

    def explain_unavailable(self) -> str:
        avail = self.check_available()
        return "" if avail.available else (avail.reason or "capsule unavailable")

    def build_process_spec(
        self,
        command: list[str],
        *,
        network: str = "none",
        mounts: list[MountSpec] | None = None,
        env: dict[str, str] | None = None,
        limits: dict[str, Any] | None = None,
        clean_home: bool = True,
        interactive: bool = False,
        allow_hosts: list[str] | None = None,
        read_only_mounts: list[str] | None = None,
        cwd: str | None = None,
    ) -> ProcessSpec:
        return ProcessSpec(
            command=list(command),
            network=network,
            allow_hosts=list(allow_hosts or []),
            read_only_mounts=list(read_only_mounts or []),
            mounts=list(mounts or []),
            env=dict(env or {}),
            limits=dict(limits or {}),
            cwd=cwd,
            clean_home=clean_home,
            interactive=interactive,
        )

    # -- argv ---------------------------------------------------------------------

    def wrap_command(self, spec: Any, *, json_result: bool = False, timeout: float | None = None) -> list[str]:
        """The argv that runs ``spec.command`` under capsule (nothing is run)."""
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise SandboxRequiredError(f"capsule unavailable: {avail.reason}; refusing to run unsandboxed")
        command = [str(a) for a in (getattr(spec, "command", None) or [])]
        if not command:
            raise ValueError("ProcessSpec.command is empty")
        policy = spec_to_policy(spec)
        if timeout is not None:
            policy["limits"]["timeout_seconds"] = float(timeout)
        blob = json.dumps(policy, sort_keys=True).encode("utf-8")
        path = os.path.join(self._dir, f"policy-{hashlib.sha256(blob).hexdigest()[:24]}.json")
        if not os.path.exists(path):
            _policy.write(policy, path)
        argv = [avail.binary, "exec", "--policy", path, "--agent-id", self._agent_id]
        if json_result:
            argv.append("--json")
        cwd = getattr(spec, "cwd", None)
        if cwd:
            argv += ["--cwd", os.path.abspath(cwd)]
        if self._audit_log is False:
            argv.append("--no-audit")
        elif self._audit_log not in (None, True):
            argv += ["--audit-log", os.fspath(self._audit_log)]  # type: ignore[arg-type]
        return argv + ["--", *command]

    # -- running ------------------------------------------------------------------

    def run_process(self, spec: Any, input_text: str | None = None, timeout: float = 120.0) -> Outcome:
        """One-shot sandboxed run: ``(exit_code, stdout, stderr)`` as an :class:`Outcome`.

        capsule enforces ``timeout`` (killing the whole tree; exit 124 ->
        ``reason="timeout"``, ``exit_code`` None). stdin gets ``input_text``.
        """
        argv = self.wrap_command(spec, timeout=timeout)
        try:
            done = subprocess.run(
                argv,
                input=(input_text or "").encode("utf-8"),
                capture_output=True,
                timeout=float(timeout) + 30.0,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return Outcome(
                None,
                (exc.stdout or b"").decode("utf-8", "replace"),
                (exc.stderr or b"").decode("utf-8", "replace"),
                reason="timeout",
                native_status=None,
            )
        out = done.stdout.decode("utf-8", "replace")
        err = done.stderr.decode("utf-8", "replace")
        code = done.returncode if done.returncode >= 0 else 128 - done.returncode
        reason = _exit_reason(code)
        return Outcome(None if reason == "timeout" else code, out, err, reason=reason, native_status=code)

    def open_agent_session(self, spec: Any) -> CapsuleAgentSession:
        """Start ``spec.command`` under capsule and talk to it over stdin/stdout."""
        return CapsuleAgentSession(self.wrap_command(spec))

    def close(self) -> None:
        """Remove the backend's policy directory."""
        self._finalizer()

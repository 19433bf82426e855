"""One ``capsule exec --json`` run: start, wait, cancel, parse the result."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from capsule_sandbox._tools import ToolServer
from capsule_sandbox.types import SandboxResult

logger = logging.getLogger("capsule_sandbox")

# How long capsule may overrun its own wall-clock limit before we kill it.
_BACKSTOP_SECONDS = 30.0
_TERM_GRACE_SECONDS = 3.0


class CapsuleRun:
    """A started (or startable) capsule process, cancellable from any thread."""

    def __init__(
        self,
        argv_before_command: Sequence[str],
        command: Sequence[str],
        *,
        timeout_seconds: float,
        tools: Mapping[str, Callable[..., Any]] | None,
        tool_timeout_seconds: float | None = None,
    ) -> None:
        self._tool_timeout = tool_timeout_seconds
        self._argv_head = list(argv_before_command)
        self._command = list(command)
        self._timeout = float(timeout_seconds)
        self._tools = dict(tools) if tools else None
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.cancelled = False

    def cancel(self) -> bool:
        """Stop the run (SIGTERM, then SIGKILL). True if it was still running."""
        with self._lock:
            self.cancelled = True
            proc = self._proc
        if proc is None:
            return True  # cancelled before start: it will not start
        if proc.poll() is not None:
            return False
        _stop(proc)
        return True

    def run(self) -> SandboxResult:
        server = ToolServer(self._tools, self._tool_timeout) if self._tools else None
        argv = list(self._argv_head)
        pass_fds: tuple[int, ...] = ()
        if server is not None:
            argv += ["--tool-fd", str(server.child_fd)]
            pass_fds = (server.child_fd,)
        argv += ["--", *self._command]
        start = time.monotonic()
        with self._lock:
            if self.cancelled:
                if server is not None:
                    server.stop()
                return _cancelled_result(None, b"", b"", 0.0)
            try:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=pass_fds,
                    close_fds=True,
                )
            except OSError as exc:
                if server is not None:
                    server.stop()
                return SandboxResult(
                    success=False,
                    exit_code=125,
                    stderr=f"could not start capsule: {exc}",
                    termination_reason="error",
                    error=str(exc),
                )
            proc = self._proc
        if server is not None:
            server.release_child_end()
            server.start()
        try:
            try:
                out, err = proc.communicate(timeout=self._timeout + _BACKSTOP_SECONDS)
            except subprocess.TimeoutExpired:
                logger.warning("capsule overran its own timeout; killing it")
                _stop(proc)
                out, err = proc.communicate()
        finally:
            if server is not None:
                server.stop()
        duration = time.monotonic() - start
        if self.cancelled:
            return _cancelled_result(proc.returncode, out, err, duration)
        return parse_result(out, err, proc.returncode, duration, self._timeout)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(_TERM_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
    except OSError:
        pass


def _exit_code_of(returncode: int | None) -> int:
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


def _cancelled_result(returncode: int | None, out: bytes, err: bytes, duration: float) -> SandboxResult:
    parsed = _load(out)
    result = _from_json(parsed, duration) if parsed is not None else SandboxResult(success=False)
    result.success = False
    result.killed = True
    result.kill_reason = "cancelled by cancel_execution"
    result.termination_reason = "cancelled"
    if parsed is None:
        result.exit_code = _exit_code_of(returncode) if returncode is not None else 137
        result.duration_seconds = round(duration, 4)
        result.stderr = err.decode("utf-8", "replace")
    return result


def _load(out: bytes) -> dict[str, Any] | None:
    text = out.decode("utf-8", "replace").strip()
    if not text:
        return None
    # Lines end at "\n" only: str.splitlines() would also split at U+2028,
    # U+0085 and others, which JSON carries unescaped inside a string.
    candidates = [text] + [line for line in reversed(text.split("\n")) if line.strip().startswith("{")]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _from_json(doc: dict[str, Any], duration: float) -> SandboxResult:
    exit_code = _int(doc.get("exit_code"), -1)
    killed = bool(doc.get("killed"))
    kill_reason = doc.get("kill_reason") or ""
    reason = str(doc.get("termination_reason") or "")
    sig = doc.get("signal") if isinstance(doc.get("signal"), int) else None
    # Timeout and refusal come from capsule's termination_reason only: a child
    # that exits 124 or 125 has just that exit code. A kill by a limit
    # (limits.memory_mb, limits.cpu_seconds: SIGKILL with killed and a
    # kill_reason naming the limit) is capsule's verdict too, taken as is: the
    # signal alone does not say who sent it (RLIMIT_CPU is set soft = hard,
    # so the kernel never sends SIGXCPU, only SIGKILL).
    if reason == "timeout":
        killed = True
        kill_reason = kill_reason or "wall-clock limit (limits.timeout_seconds) exceeded"
    if reason == "signaled" and sig:
        exit_code = -sig  # the provider contract's convention (capsule's CLI: 128+N)
    error = str(doc.get("error") or "")
    stderr = str(doc.get("stderr") or "")
    if reason == "refused" and error and error not in stderr:
        stderr = (stderr + "\n" if stderr else "") + f"capsule refused: {error}"
    denials = [d for d in doc.get("denials") or [] if isinstance(d, dict)]
    success = bool(doc.get("success")) and exit_code == 0 and not killed
    if denials and not success:
        # The provider's error names the first refusal (issue 21).
        first = describe_denial(denials[0])
        error = f"{error} ({first})" if error else first
    dur = doc.get("duration_seconds")
    return SandboxResult(
        success=success,
        exit_code=exit_code,
        stdout=str(doc.get("stdout") or ""),
        stderr=stderr,
        duration_seconds=float(dur) if isinstance(dur, (int, float)) else round(duration, 4),
        killed=killed,
        kill_reason=str(kill_reason),
        stdout_truncated=bool(doc.get("stdout_truncated")),
        stderr_truncated=bool(doc.get("stderr_truncated")),
        stdout_bytes=_int(doc.get("stdout_bytes")),
        stderr_bytes=_int(doc.get("stderr_bytes")),
        termination_reason=reason,
        signal=sig,
        run_id=str(doc.get("run_id") or ""),
        error=error,
        tool_calls=_int(doc.get("tool_calls")),
        tool_refusals=_int(doc.get("tool_refusals")),
        llm_calls=_int(doc.get("llm_calls")),
        denied_hosts=[str(h) for h in doc.get("denied_hosts") or [] if isinstance(h, str)],
        denials=denials,
        enforcement=dict(doc.get("enforcement") or {}),
        raw=doc,
    )


def describe_denial(d: dict[str, Any]) -> str:
    """One line for a denial of ``capsule exec --explain``: what, who, the fix."""
    text = f"the sandbox refused {d.get('question', '?')} ({d.get('layer_detail') or d.get('layer') or '?'})"
    if d.get("key"):
        text += f", key {d['key']}"
    if d.get("change"):
        text += f"; to allow: {d['change']}"
    elif d.get("no_change"):
        text += f"; no policy change allows it: {d['no_change']}"
    return text


def parse_result(out: bytes, err: bytes, returncode: int | None, duration: float, timeout: float) -> SandboxResult:
    """The SandboxResult for capsule's stdout (one JSON object) and exit status."""
    doc = _load(out)
    if doc is None:
        # No result object: capsule itself failed (or was killed by our
        # backstop). Nothing here says the child timed out or was refused.
        code = _exit_code_of(returncode)
        capsule_err = err.decode("utf-8", "replace").strip()
        return SandboxResult(
            success=False,
            exit_code=code,
            stderr=f"capsule exited {code} without a JSON result"
            + (f": {capsule_err[-2000:]}" if capsule_err else ""),
            duration_seconds=round(duration, 4),
            termination_reason="error",
            error="no JSON result on capsule's stdout",
        )
    result = _from_json(doc, duration)
    if returncode is not None and returncode != result.exit_code and returncode >= 0:
        logger.debug("capsule exit %s differs from result exit_code %s", returncode, result.exit_code)
    return result


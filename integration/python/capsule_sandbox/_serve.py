"""A session's warm parent: one ``capsule serve`` process, one request per step.

``capsule serve`` (docs/serve.md) forks a fresh ``capsule exec`` for each
request line, planned afresh and confined exactly as ``capsule exec`` is; it
saves the exec of capsule itself per step and the policy file. A server that
dies fails the steps it was running (an error result, never a step left
running: each step dies with it); the next step starts a new server.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import threading
import time
from typing import Any, Sequence

from capsule_sandbox._exec import _cancelled_result, _from_json, parse_result
from capsule_sandbox.types import SandboxResult

logger = logging.getLogger("capsule_sandbox")

_BACKSTOP_SECONDS = 30.0
_CANCEL_GRACE_SECONDS = 5.0


class ServeDied(RuntimeError):
    """The ``capsule serve`` process ended before answering."""


class _Waiter:
    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = False
        self.response: dict[str, Any] | None = None


class ServeClient:
    """One ``capsule serve`` process; thread-safe; steps may overlap.

    There is no reader thread: a thread waiting for its response reads the
    server's stdout itself (one reader at a time, handing the others their
    responses), so a step costs no thread switch in Python.
    """

    def __init__(self, binary: str) -> None:
        self._binary = binary
        self._cv = threading.Condition()
        self._waiters: dict[str, _Waiter] = {}
        self._reading = False
        self._buf = bytearray()
        self._proc = subprocess.Popen(
            [binary, "serve", "--max-parallel", "64"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            bufsize=0,
        )
        assert self._proc.stdout is not None
        self._fd = self._proc.stdout.fileno()
        self._dead = False
        self._closing = False

    @property
    def alive(self) -> bool:
        return not self._dead and not self._closing and self._proc.poll() is None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _pump(self, timeout: float) -> None:
        """Read what the server sent within TIMEOUT and hand out the responses
        (called with the condition released, by the one reading thread)."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        if not poller.poll(max(0, int(timeout * 1000))):
            return
        try:
            chunk = os.read(self._fd, 1 << 16)
        except OSError:
            chunk = b""
        with self._cv:
            if not chunk:
                self._dead = True
                for waiter in self._waiters.values():
                    waiter.done = True
                self._waiters.clear()
                return
            # A bytearray grows in place, and only the new chunk is searched
            # for the end of a line: a step chooses how long its response
            # line is (its output, escaped), and appending to ``bytes`` and
            # splitting the whole buffer per chunk was quadratic in it (red
            # team 8: a 48 MiB line held the reader for ~25 s).
            scan = len(self._buf)
            self._buf += chunk
            lines = []
            while (nl := self._buf.find(b"\n", scan)) >= 0:
                lines.append(bytes(self._buf[:nl]))
                del self._buf[: nl + 1]
                scan = 0
            for line in lines:
                try:
                    resp = json.loads(line)
                except ValueError:
                    logger.warning("capsule serve sent a line that is not JSON: %r", line[:200])
                    continue
                rid = resp.get("id") if isinstance(resp, dict) else None
                waiter = self._waiters.pop(str(rid), None) if rid is not None else None
                if waiter is None:
                    if isinstance(resp, dict) and resp.get("error"):
                        logger.warning("capsule serve: %s", resp.get("error"))
                    continue
                waiter.response = resp
                waiter.done = True

    def wait(self, waiter: _Waiter, timeout: float) -> bool:
        """Wait up to TIMEOUT for WAITER's response (or the server's end)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not waiter.done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if self._dead:
                    return True
                if self._reading:
                    self._cv.wait(remaining)
                    continue
                self._reading = True
                self._cv.release()
                try:
                    self._pump(remaining)
                finally:
                    self._cv.acquire()
                    self._reading = False
                    self._cv.notify_all()
        return True

    def _send(self, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
        with self._cv:
            if self._dead:
                raise ServeDied("capsule serve is not running")
            stdin = self._proc.stdin
            assert stdin is not None
            try:
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError) as exc:
                self._dead = True
                raise ServeDied(f"capsule serve is not running: {exc}") from exc

    def submit(self, rid: str, request: dict[str, Any]) -> _Waiter:
        waiter = _Waiter()
        with self._cv:
            if self._dead or self._closing:
                raise ServeDied("capsule serve is not running")
            self._waiters[rid] = waiter
        try:
            self._send({"id": rid, **request})
        except ServeDied:
            with self._cv:
                self._waiters.pop(rid, None)
            raise
        return waiter

    def cancel(self, rid: str) -> None:
        try:
            self._send({"id": rid, "op": "cancel"})
        except ServeDied:
            pass

    def close(self) -> None:
        """End the server: closing its stdin lets running steps finish first
        (a waiting thread still gets its response); a server still there
        after the grace is killed (its steps with it)."""
        with self._cv:
            self._closing = True
            stdin = self._proc.stdin
        try:
            if stdin is not None:
                stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(_CANCEL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with self._cv:
            # Let a reading thread take what the server wrote before it ended.
            self._cv.wait_for(lambda: not self._reading, _CANCEL_GRACE_SECONDS)
            self._dead = True
            for waiter in self._waiters.values():
                waiter.done = True
            self._waiters.clear()
            self._cv.notify_all()


class ServeRun:
    """One step through a ``ServeClient``: the ``CapsuleRun`` interface."""

    _counter = 0
    _counter_lock = threading.Lock()

    def __init__(
        self,
        client_for: Any,
        args_before_command: Sequence[str],
        command: Sequence[str],
        *,
        policy_text: str,
        cwd: str,
        timeout_seconds: float,
    ) -> None:
        self._client_for = client_for  # () -> ServeClient (a live one)
        self._args = [*args_before_command, "--", *command]
        self._policy = policy_text
        self._cwd = cwd
        self._timeout = float(timeout_seconds)
        self._lock = threading.Lock()
        self._client: ServeClient | None = None
        self._rid: str | None = None
        self._done = False
        self.cancelled = False

    def cancel(self) -> bool:
        with self._lock:
            self.cancelled = True
            client, rid, done = self._client, self._rid, self._done
        if done:
            return False
        if client is not None and rid is not None:
            client.cancel(rid)
        return True

    def run(self) -> SandboxResult:
        with ServeRun._counter_lock:
            ServeRun._counter += 1
            rid = f"{os.getpid()}-{ServeRun._counter}"
        start = time.monotonic()
        request = {
            "args": self._args,
            "policy": self._policy,
            "cwd": self._cwd,
            # The step's capsule sees this process's environment now, as a
            # fresh `capsule exec` would.
            "env": dict(os.environ),
            "clear_env": True,
        }
        with self._lock:
            if self.cancelled:
                return _cancelled_result(None, b"", b"", 0.0)
            try:
                client = self._client_for()
                waiter = client.submit(rid, request)
            except (ServeDied, OSError) as exc:
                return _error(f"could not start a step in capsule serve: {exc}", time.monotonic() - start)
            self._client, self._rid = client, rid
        try:
            if not client.wait(waiter, self._timeout + _BACKSTOP_SECONDS):
                logger.warning("capsule overran its own timeout; cancelling the step")
                client.cancel(rid)
                if not client.wait(waiter, _CANCEL_GRACE_SECONDS):
                    # Ending the server ends the step (and the session's
                    # other steps); the next step starts a new server.
                    client.close()
        finally:
            with self._lock:
                self._done = True
        duration = time.monotonic() - start
        resp = waiter.response
        if resp is None:
            return _error(
                f"capsule serve (pid {client.pid}) ended before the step answered: the step was stopped with it",
                duration,
            )
        return _result_of(resp, duration, self._timeout, self.cancelled)


def _error(msg: str, duration: float) -> SandboxResult:
    return SandboxResult(
        success=False,
        exit_code=125,
        stderr=msg,
        duration_seconds=round(duration, 4),
        termination_reason="error",
        error=msg,
    )


def _result_of(resp: dict[str, Any], duration: float, timeout: float, cancelled: bool) -> SandboxResult:
    code = resp.get("exit_code")
    stderr = str(resp.get("stderr") or "").encode()
    if not isinstance(code, int):
        return _error(f"capsule serve refused the step: {resp.get('error')}", duration)
    doc = resp.get("result")
    if cancelled:
        out = json.dumps(doc).encode() if isinstance(doc, dict) else b""
        return _cancelled_result(code, out, stderr, duration)
    if isinstance(doc, dict):
        return _from_json(doc, duration)
    stdout = str(resp.get("stdout") or "").encode()
    if resp.get("error") and not stderr:
        stderr = str(resp["error"]).encode()
    return parse_result(stdout, stderr, code, duration, timeout)

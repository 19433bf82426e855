"""Serving Python callables as capsule ``forward: true`` tools over ``--tool-fd``.

capsule enforces the allowlist, ``max_calls`` and each tool's timeout before a
request reaches us. This side checks the arguments against what the tool
declares (``_toolspec``: unknown keys, host-chosen defaults and partial
bindings, wrong basic types are ``bad_request``), answers a failing tool with
a generic text (the exception, which may name host paths, is logged here,
never sent), and does not leave a call running past its timeout: a call still
running at its deadline gets ``TimeoutError`` raised in its thread, and
``stop()`` waits for every call thread (a tool blocked inside a C call that
never returns is the one case Python cannot interrupt; it is logged). The framing is capsule's: one
JSON-RPC 2.0 message a line, requests ``tools/call`` with
``{"name", "arguments"}``, answered by id with an MCP tool result.
"""

from __future__ import annotations

import json
import logging
import socket
import ctypes
import threading
import time
from typing import Any, Callable, Mapping, Optional

from capsule_sandbox._toolspec import ToolSpec

logger = logging.getLogger("capsule_sandbox.tools")

_MAX_LINE = 16 * 1024 * 1024


def _result(value: Any) -> dict[str, Any]:
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": value,
        "isError": False,
    }


class _Interrupted(BaseException):
    """Raised inside a tool call that outlived its timeout (not an Exception,
    so a tool's ``except Exception`` does not swallow it)."""


def _interrupt(thread: threading.Thread) -> None:
    ident = thread.ident
    if ident is None or not thread.is_alive():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Interrupted))


def _failure(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


class ToolServer:
    """Answers forwarded tool calls on one end of a socketpair, on threads."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]], timeout_seconds: Optional[float] = None) -> None:
        self._tools = dict(tools)
        self._specs = {name: ToolSpec(func) for name, func in self._tools.items()}
        self._timeout = float(timeout_seconds) if timeout_seconds else None
        self._calls: dict[threading.Thread, float] = {}  # call thread -> deadline
        self._calls_lock = threading.Lock()
        self._reaper: Optional[threading.Thread] = None
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._ours.set_inheritable(False)
        self._theirs.set_inheritable(True)
        self._wlock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="capsule-tool-fd", daemon=True)
        self.calls = 0

    @property
    def child_fd(self) -> int:
        """The descriptor to pass to capsule (``pass_fds`` + ``--tool-fd``)."""
        return self._theirs.fileno()

    def start(self) -> None:
        self._thread.start()
        if self._timeout is not None:
            self._reaper = threading.Thread(target=self._reap, name="capsule-reaper-tools", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        """Interrupt calls that outlive their timeout (capsule already answered
        the child with a timeout error)."""
        while not self._closed:
            now = time.monotonic()
            with self._calls_lock:
                late = [t for t, deadline in self._calls.items() if deadline <= now and t.is_alive()]
            for thread in late:
                _interrupt(thread)
            time.sleep(0.05)

    def live_calls(self) -> list[threading.Thread]:
        """Call threads still running."""
        with self._calls_lock:
            return [t for t in self._calls if t.is_alive()]

    def release_child_end(self) -> None:
        """Close our copy of capsule's end once capsule has inherited it."""
        try:
            self._theirs.close()
        except OSError:
            pass

    def stop(self, timeout: float = 5.0) -> None:
        self.release_child_end()
        try:
            self._ours.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout)
        # The run is over: no call may go on. Interrupt what is left and wait.
        deadline = time.monotonic() + timeout
        for thread in self.live_calls():
            _interrupt(thread)
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(0.05)
                if thread.is_alive():
                    _interrupt(thread)
        left = self.live_calls()
        if left:
            logger.warning(
                "%d python tool call(s) still running after the run ended (blocked outside "
                "Python code, which cannot be interrupted): %s",
                len(left),
                ", ".join(t.name for t in left),
            )
        self._closed = True
        try:
            self._ours.close()
        except OSError:
            pass

    # -- serving -------------------------------------------------------------

    def _serve(self) -> None:
        try:
            reader = self._ours.makefile("rb")
        except OSError:
            return
        try:
            while True:
                try:
                    line = reader.readline(_MAX_LINE + 1)
                except (OSError, ValueError):
                    return
                if not line:
                    return
                if len(line) > _MAX_LINE and not line.endswith(b"\n"):
                    self._send({"jsonrpc": "2.0", "id": None, "error": {"code": -32004, "message": "message too large"}})
                    # Skip the rest of the oversized line.
                    while line and not line.endswith(b"\n"):
                        line = reader.readline(_MAX_LINE)
                    continue
                self._handle_line(line)
        finally:
            try:
                reader.close()
            except OSError:
                pass

    def _handle_line(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self._send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
            return
        if not isinstance(message, dict):
            self._send({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid request"}})
            return
        if "method" not in message:
            return  # a response or notification echo: nothing to answer
        ident = message.get("id")
        method = message.get("method")
        if method == "ping":
            self._reply(ident, {})
            return
        if method != "tools/call":
            self._error(ident, -32601, f"unknown method {method!r}")
            return
        params = message.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            self._error(ident, -32602, "tools/call needs params {name, arguments}")
            return
        name = params["name"]
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            self._error(ident, -32602, "arguments must be an object")
            return
        func = self._tools.get(name)
        if func is None:
            self._error(ident, -32602, f"unknown tool {name!r}", reason="not_allowed")
            return
        problem = self._specs[name].check(arguments)
        if problem is not None:
            self._error(ident, -32602, f"{name}: {problem}")
            return
        self.calls += 1
        # One daemon thread a call: capsule bounds calls per run (max_calls).
        thread = threading.Thread(
            target=self._call,
            args=(ident, name, func, arguments),
            name=f"capsule-tool-{name}",
            daemon=True,
        )
        with self._calls_lock:
            self._calls = {t: d for t, d in self._calls.items() if t.is_alive()}
            grace = 0.5
            self._calls[thread] = time.monotonic() + (self._timeout + grace if self._timeout else float("inf"))
        thread.start()

    def _call(self, ident: Any, name: str, func: Callable[..., Any], arguments: dict[str, Any]) -> None:
        try:
            value = func(**arguments)
        except BaseException as exc:  # noqa: BLE001 - the tool's failure is a result, not a crash
            if isinstance(exc, _Interrupted):
                logger.warning("python tool %s was interrupted at its timeout", name)
                return
            if not isinstance(exc, Exception):
                raise
            # The detail (which may name host paths) stays on the host.
            logger.warning("python tool %s failed", name, exc_info=True)
            self._reply(ident, _failure(f"tool {name!r} failed"))
            return
        try:
            result = _result(value)
        except (TypeError, ValueError) as exc:
            result = _failure(f"{name} returned a value that is not JSON: {exc}")
        self._reply(ident, result)

    def _reply(self, ident: Any, result: dict[str, Any]) -> None:
        self._send({"jsonrpc": "2.0", "id": ident, "result": result})

    def _error(self, ident: Any, code: int, message: str, *, reason: str = "bad_request") -> None:
        self._send({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message, "data": {"reason": reason}}})

    def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        with self._wlock:
            if self._closed:
                return
            try:
                self._ours.sendall(data)
            except OSError:
                pass  # capsule is gone; nothing left to answer

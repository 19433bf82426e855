"""In-sandbox client for capsule's RPC pipe (contract section 5).

Standard library only, and self-contained: the host-side provider copies this
single file into each session's read-only ``scripts/`` directory, so a
sandboxed script can ``from capsule_sandbox.client import call_tool`` without
PYTHONPATH (which capsule refuses).

The pipe is a connected stream socket at file descriptor ``$CAPSULE_RPC_FD``
speaking newline-delimited JSON-RPC 2.0 (one message a line, at most 1 MiB).
A :class:`CapsuleClient` may be shared by many threads: request ids are
multiplexed and answers are matched by id. Whichever waiting thread holds the
"reader" role reads answers and hands other threads theirs, so a
single-threaded caller never pays for a thread switch.

Module-level helpers (:func:`ping`, :func:`call_tool`, :func:`complete`,
:func:`list_tools`) use one lazily-created default client.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import threading
from typing import Any, Dict, List, Optional

__all__ = [
    "CapsuleClient",
    "CapsuleRpcError",
    "MAX_LINE_BYTES",
    "call_tool",
    "complete",
    "default_client",
    "list_tools",
    "ping",
]

#: Largest request line capsule accepts (contract section 5).
MAX_LINE_BYTES = 1024 * 1024

# JSON-RPC error code -> reason, for errors whose ``data.reason`` is missing.
_CODE_REASONS = {
    -32700: "bad_request",
    -32600: "bad_request",
    -32601: "bad_request",
    -32602: "bad_request",
    -32001: "not_allowed",
    -32002: "limit_reached",
    -32003: "tool_failed",
    -32004: "input_too_large",
}


class CapsuleRpcError(Exception):
    """A call the parent answered with an error, or that could not be made.

    ``reason`` is one of the contract's reasons (``not_allowed``,
    ``limit_reached``, ``input_too_large``, ``output_too_large``,
    ``model_not_allowed``, ``provider_error``, ``tool_failed``, ``timeout``,
    ``bad_request``) or, for client-side failures, ``unavailable`` (no pipe)
    and ``connection_closed`` (the parent closed it).
    """

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        code: Optional[int] = None,
        data: Any = None,
    ) -> None:
        super().__init__(reason, message)
        self.reason = reason
        self.message = message
        self.code = code
        self.data = data

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


_PLAIN_METHOD = re.compile(r"[A-Za-z0-9_/.-]{1,64}")


class _Slot:
    __slots__ = ("done", "message")

    def __init__(self) -> None:
        self.done = False
        self.message: Optional[Dict[str, Any]] = None


class CapsuleClient:
    """A JSON-RPC client over capsule's pipe. Thread-safe."""

    def __init__(self, fd: Optional[int] = None) -> None:
        if fd is None:
            raw = os.environ.get("CAPSULE_RPC_FD")
            if raw is None or raw.strip() == "":
                raise CapsuleRpcError(
                    "unavailable",
                    "CAPSULE_RPC_FD is not set: this program is not running under "
                    "capsule with tools or llm_access in its policy",
                )
            try:
                fd = int(raw)
            except ValueError:
                raise CapsuleRpcError(
                    "unavailable", f"CAPSULE_RPC_FD is not a file descriptor: {raw!r}"
                ) from None
        try:
            self._sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise CapsuleRpcError(
                "unavailable", f"fd {fd} is not a usable socket: {exc}"
            ) from None
        self._reader = self._sock.makefile("rb")
        self._ids = itertools.count(1)
        self._wlock = threading.Lock()
        self._cv = threading.Condition()
        self._pending: Dict[int, _Slot] = {}
        self._reading = False
        self._broken: Optional[str] = None

    # -- public API ---------------------------------------------------------

    def request(self, method: str, params: Optional[Dict[str, Any]] = None) -> Any:
        """Send one request and return its ``result``; raise on an error."""
        ident = next(self._ids)
        if params is None and _PLAIN_METHOD.fullmatch(method):
            # The hot path (ping, tools/list): no JSON encoder needed.
            line = b'{"jsonrpc":"2.0","id":%d,"method":"%s"}\n' % (ident, method.encode("ascii"))
        else:
            message: Dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
            if params is not None:
                message["params"] = params
            line = (
                json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
                + b"\n"
            )
            if len(line) > MAX_LINE_BYTES:
                raise CapsuleRpcError(
                    "input_too_large",
                    f"request is {len(line)} bytes; the pipe takes at most "
                    f"{MAX_LINE_BYTES} bytes a line",
                    code=-32004,
                )
        slot = _Slot()
        with self._cv:
            if self._broken is not None:
                raise CapsuleRpcError("connection_closed", self._broken)
            self._pending[ident] = slot
        try:
            with self._wlock:
                self._sock.sendall(line)
        except OSError as exc:
            with self._cv:
                self._pending.pop(ident, None)
            raise CapsuleRpcError("connection_closed", f"send failed: {exc}") from None
        answer = self._await(ident, slot)
        return _unwrap(answer)

    def ping(self) -> Dict[str, Any]:
        """Round trip to the parent; returns ``{}``."""
        result = self.request("ping")
        return result if isinstance(result, dict) else {}

    def list_tools(self) -> List[Dict[str, Any]]:
        """The tools this run may call: ``[{"name", "description", "inputSchema"}]``."""
        result = self.request("tools/list")
        tools = result.get("tools", []) if isinstance(result, dict) else []
        return list(tools)

    def call_tool(self, name: str, /, **arguments: Any) -> Any:
        """Call an allow-listed tool; return its JSON value, else its text.

        Raises :class:`CapsuleRpcError` on a refusal or error, and with reason
        ``tool_failed`` when the tool ran but failed (``isError: true``).
        """
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        if not isinstance(result, dict):
            return result
        text = _text_of(result)
        if result.get("isError"):
            raise CapsuleRpcError("tool_failed", text or f"tool {name!r} failed")
        structured = result.get("structuredContent")
        if structured is not None:
            return structured
        return text

    def complete(
        self, messages: List[Dict[str, Any]], max_tokens: Optional[int] = None
    ) -> Dict[str, Any]:
        """Ask the parent's LLM broker; returns the whole result dict
        (``message``, ``model``, ``finish_reason``, ``usage``)."""
        params: Dict[str, Any] = {"messages": messages}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        result = self.request("llm/complete", params)
        return result if isinstance(result, dict) else {"result": result}

    def close(self) -> None:
        with self._cv:
            if self._broken is None:
                self._broken = "client closed"
            self._cv.notify_all()
        try:
            self._reader.close()
        finally:
            self._sock.close()

    # -- reading ------------------------------------------------------------

    def _await(self, ident: int, slot: _Slot) -> Dict[str, Any]:
        with self._cv:
            while True:
                if slot.done:
                    return self._take(ident, slot)
                if self._broken is not None:
                    self._pending.pop(ident, None)
                    raise CapsuleRpcError("connection_closed", self._broken)
                if not self._reading:
                    self._reading = True
                    break
                self._cv.wait()
        # This thread is the reader until its own answer arrives.
        try:
            while True:
                raw = self._reader.readline()
                if not raw:
                    raise EOFError("the parent closed the RPC pipe")
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue  # not ours to answer; skip the garbled line
                with self._cv:
                    self._deliver(message)
                    if slot.done:
                        self._reading = False
                        if len(self._pending) > 1:
                            # Another thread waits: it takes over reading.
                            self._cv.notify_all()
                        return self._take(ident, slot)
                    self._cv.notify_all()
        except (OSError, EOFError, ValueError) as exc:
            with self._cv:
                self._reading = False
                self._broken = str(exc) or type(exc).__name__
                self._pending.pop(ident, None)
                self._cv.notify_all()
            raise CapsuleRpcError("connection_closed", str(exc)) from None

    def _deliver(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        target = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if target is not None:
            target.message = message
            target.done = True

    def _take(self, ident: int, slot: _Slot) -> Dict[str, Any]:
        self._pending.pop(ident, None)
        assert slot.message is not None
        return slot.message


def _unwrap(answer: Dict[str, Any]) -> Any:
    error = answer.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise CapsuleRpcError("bad_request", str(error))
        code = error.get("code")
        data = error.get("data")
        reason = None
        if isinstance(data, dict):
            reason = data.get("reason")
        if not isinstance(reason, str):
            reason = _CODE_REASONS.get(code, "bad_request")  # type: ignore[arg-type]
        raise CapsuleRpcError(
            reason, str(error.get("message", "")), code=code, data=data
        )
    return answer.get("result")


def _text_of(result: Dict[str, Any]) -> Optional[str]:
    content = result.get("content")
    if not isinstance(content, list):
        return None
    texts = [
        item.get("text", "")
        for item in content
        if isinstance(item, dict) and item.get("type") == "text"
    ]
    if not texts:
        return None
    return "".join(str(t) for t in texts)


_default: Optional[CapsuleClient] = None
_default_lock = threading.Lock()


def default_client() -> CapsuleClient:
    """The process-wide client on ``$CAPSULE_RPC_FD`` (created on first use)."""
    global _default
    client = _default
    if client is not None:  # the common case: no lock per call
        return client
    with _default_lock:
        if _default is None:
            _default = CapsuleClient()
        return _default


def ping() -> Dict[str, Any]:
    """Round trip to the parent; returns ``{}``."""
    return default_client().ping()


def list_tools() -> List[Dict[str, Any]]:
    """The tools this run may call."""
    return default_client().list_tools()


def call_tool(name: str, /, **arguments: Any) -> Any:
    """Call an allow-listed tool with keyword arguments; see
    :meth:`CapsuleClient.call_tool`."""
    return default_client().call_tool(name, **arguments)


def complete(
    messages: List[Dict[str, Any]], max_tokens: Optional[int] = None
) -> Dict[str, Any]:
    """LLM completion through the parent's broker; see
    :meth:`CapsuleClient.complete`."""
    return default_client().complete(messages, max_tokens=max_tokens)

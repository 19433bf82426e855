"""Python tools served over --tool-fd, called from inside the sandbox."""

from __future__ import annotations

import threading

import pytest

from capsule_sandbox import SandboxConfig

_CALL = """
import json
from capsule_sandbox.client import call_tool, CapsuleRpcError
def attempt(name, **kw):
    try:
        return {"ok": call_tool(name, **kw)}
    except CapsuleRpcError as e:
        return {"err": e.reason, "msg": e.message}
"""


class Recorder:
    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        with self.lock:
            self.calls.append(("add", a, b))
        return a + b

    def secret(self) -> str:
        with self.lock:
            self.calls.append(("secret",))
        return "should never run"

    def lookup(self, key: str) -> dict:
        with self.lock:
            self.calls.append(("lookup", key))
        return {"key": key, "values": [1, 2, 3], "found": True}

    def broken(self) -> None:
        raise ValueError("tool exploded on purpose")

    def text(self) -> str:
        return "plain text answer"


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def tool_provider(make_provider, recorder):
    return make_provider(
        tools={
            "add": recorder.add,
            "secret": recorder.secret,
            "lookup": recorder.lookup,
            "broken": recorder.broken,
            "text": recorder.text,
        }
    )


def _run(provider, code, **cfg):
    import json

    ex = provider.run_once("tool-agent", _CALL + code, config=SandboxConfig(**cfg))
    assert ex.result is not None
    lines = [json.loads(l) for l in ex.result.stdout.splitlines() if l.startswith(("{", "["))]
    return ex.result, lines


def test_allowed_tool_is_called(tool_provider, recorder):
    result, out = _run(
        tool_provider,
        "print(json.dumps(attempt('add', a=2, b=3)))\nprint(json.dumps(attempt('lookup', key='k1')))\n"
        "print(json.dumps(attempt('text')))",
        tool_allowlist=["add", "lookup", "text"],
    )
    assert result.success, result.stderr
    assert out[0] == {"ok": 5}
    assert out[1] == {"ok": {"key": "k1", "values": [1, 2, 3], "found": True}}
    assert out[2] == {"ok": "plain text answer"}
    assert ("add", 2, 3) in recorder.calls and ("lookup", "k1") in recorder.calls
    assert result.tool_calls == 3


def test_tool_not_allowed(tool_provider, recorder):
    result, out = _run(
        tool_provider,
        "print(json.dumps(attempt('secret')))\nprint(json.dumps(attempt('no_such_tool')))",
        tool_allowlist=["add"],
    )
    assert result.success, result.stderr
    assert out[0]["err"] in ("not_allowed", "bad_request")
    assert out[1]["err"] in ("not_allowed", "bad_request")
    assert not any(c[0] == "secret" for c in recorder.calls)
    assert result.tool_refusals >= 2


def test_tool_call_limit(tool_provider, recorder):
    result, out = _run(
        tool_provider,
        "for i in range(4):\n    print(json.dumps(attempt('add', a=i, b=1)))",
        tool_allowlist=["add"],
        tool_max_calls=2,
    )
    assert result.success, result.stderr
    assert out[0] == {"ok": 1} and out[1] == {"ok": 2}
    assert out[2]["err"] == "limit_reached" and out[3]["err"] == "limit_reached"
    assert len([c for c in recorder.calls if c[0] == "add"]) == 2


def test_failing_tool_is_tool_failed_with_a_generic_text(tool_provider, caplog):
    with caplog.at_level("WARNING", logger="capsule_sandbox.tools"):
        result, out = _run(tool_provider, "print(json.dumps(attempt('broken')))", tool_allowlist=["broken"])
    assert result.success, result.stderr
    assert out[0]["err"] == "tool_failed"
    # The exception text (host paths, secrets) stays on the host, in the log.
    assert "tool exploded on purpose" not in out[0]["msg"]
    assert "ValueError" not in out[0]["msg"]
    assert "tool exploded on purpose" in caplog.text


def test_missing_arguments_are_bad_request(tool_provider, recorder):
    result, out = _run(tool_provider, "print(json.dumps(attempt('add', a=1)))", tool_allowlist=["add"])
    assert out[0]["err"] == "bad_request", out
    assert "missing" in out[0]["msg"]
    assert not recorder.calls


def test_list_tools_and_concurrent_calls(tool_provider, recorder):
    code = (
        "from capsule_sandbox.client import list_tools, ping, call_tool\n"
        "import threading\n"
        "names = sorted(t['name'] for t in list_tools())\n"
        "print(json.dumps(names))\n"
        "errors = []\n"
        "def worker():\n"
        "    try:\n"
        "        for _ in range(200):\n"
        "            assert ping() == {}\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "threads = [threading.Thread(target=worker) for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "results = []\n"
        "def adder(i):\n"
        "    results.append((i, call_tool('add', a=i, b=i)))\n"
        "ts = [threading.Thread(target=adder, args=(i,)) for i in range(5)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print(json.dumps({'errors': errors, 'ok': all(r == 2 * i for i, r in results), 'n': len(results)}))\n"
    )
    result, out = _run(tool_provider, code, tool_allowlist=["add", "lookup"])
    assert result.success, result.stderr
    assert out[0] == ["add", "lookup"]
    assert out[1] == {"errors": [], "ok": True, "n": 5}


def test_no_tools_means_no_rpc_calls(make_provider):
    provider = make_provider()
    ex = provider.run_once("tool-agent", _CALL + "print(json.dumps(attempt('add', a=1, b=2)))")
    assert ex.result.success, ex.result.stderr
    assert '"err"' in ex.result.stdout

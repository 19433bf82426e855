"""Python tools take only what they declare from the child (issue 11, item 9)."""

from __future__ import annotations

import functools
import json
import threading
import time

import pytest

from capsule_sandbox import SandboxConfig, child_settable

_CALL = """
import json
from capsule_sandbox.client import call_tool, list_tools, CapsuleRpcError
def attempt(name, **kw):
    try:
        return {"ok": call_tool(name, **kw)}
    except CapsuleRpcError as e:
        return {"err": e.reason, "msg": e.message}
"""


class Host:
    def __init__(self):
        self.calls = []

    def convert(self, value: int, base: int = 10) -> str:
        """Format an integer in a base the host chose."""
        self.calls.append(("convert", value, base))
        return format(value, "b" if base == 2 else "d")

    def read_file(self, fname: str, root: str = "/srv/data") -> str:
        self.calls.append(("read_file", fname, root))
        return f"{root}/{fname}"

    def write(self, path: str, readonly: bool = True) -> str:
        self.calls.append(("write", path, readonly))
        return "read-only" if readonly else "WROTE"

    def kinds(self, s: str, i: int, f: float, b: bool, items: list, obj: dict) -> str:
        self.calls.append(("kinds",))
        return "ok"

    def leaky(self, x: str) -> None:
        raise RuntimeError("cannot open /home/alice/.ssh/id_rsa for tenant 42")


@pytest.fixture
def host():
    return Host()


def _run(provider, code, tools):
    ex = provider.run_once(
        "hard-agent", _CALL + code, config=SandboxConfig(tool_allowlist=tools, tool_timeout_seconds=1.0)
    )
    out = [json.loads(line) for line in ex.result.stdout.splitlines() if line.startswith(("{", "["))]
    return ex.result, out


def test_defaults_partials_and_flags_are_not_child_settable(make_provider, host):
    provider = make_provider(
        tools={
            "convert": host.convert,
            "read_file": functools.partial(host.read_file, root="/srv/tenant-a"),
            "write": host.write,
        }
    )
    code = (
        "print(json.dumps(attempt('convert', value=5, base=2)))\n"
        "print(json.dumps(attempt('read_file', fname='x', root='/')))\n"
        "print(json.dumps(attempt('write', path='p', readonly=False)))\n"
        "print(json.dumps(attempt('convert', value=5)))\n"
        "print(json.dumps(attempt('read_file', fname='x')))\n"
        "print(json.dumps(attempt('convert', value=5, extra=1)))\n"
    )
    result, out = _run(provider, code, ["convert", "read_file", "write"])
    assert result.success, result.stderr
    for refused in out[:3] + out[5:]:
        assert refused.get("err") == "bad_request", out
        assert "unknown argument" in refused["msg"]
    assert out[3] == {"ok": "5"}
    assert out[4] == {"ok": "/srv/tenant-a/x"}
    assert host.calls == [("convert", 5, 10), ("read_file", "x", "/srv/tenant-a")]


def test_published_schema_lists_only_settable_parameters(make_provider, host):
    provider = make_provider(
        tools={"convert": host.convert, "read_file": functools.partial(host.read_file, root="/r")}
    )
    result, out = _run(provider, "print(json.dumps(sorted(list_tools(), key=lambda t: t['name'])))", ["convert", "read_file"])
    assert result.success, result.stderr
    schemas = {t["name"]: t["inputSchema"] for t in out[0]}
    assert schemas["convert"]["properties"] == {"value": {"type": "integer"}}
    assert schemas["convert"]["additionalProperties"] is False
    assert schemas["convert"]["required"] == ["value"]
    assert set(schemas["read_file"]["properties"]) == {"fname"}


def test_opt_in_makes_a_default_settable(make_provider, host):
    provider = make_provider(
        tools={
            "convert": child_settable("base")(host.convert),
            "read_file": child_settable("root")(functools.partial(host.read_file, root="/r")),
        }
    )
    code = (
        "print(json.dumps(attempt('convert', value=5, base=2)))\n"
        "print(json.dumps(attempt('read_file', fname='n', root='/other')))\n"
    )
    result, out = _run(provider, code, ["convert", "read_file"])
    assert out == [{"ok": "101"}, {"ok": "/other/n"}], result.stderr


def test_basic_types_are_checked(make_provider, host):
    provider = make_provider(tools={"kinds": host.kinds, "convert": host.convert})
    good = "dict(s='a', i=1, f=1, b=True, items=[], obj={})"
    bad = [
        "dict(s=1, i=1, f=1.0, b=True, items=[], obj={})",
        "dict(s='a', i=True, f=1.0, b=True, items=[], obj={})",
        "dict(s='a', i=1.5, f=1.0, b=True, items=[], obj={})",
        "dict(s='a', i=1, f='1', b=True, items=[], obj={})",
        "dict(s='a', i=1, f=1.0, b=1, items=[], obj={})",
        "dict(s='a', i=1, f=1.0, b=True, items={}, obj={})",
        "dict(s='a', i=1, f=1.0, b=True, items=[], obj=[])",
        "dict(s=None, i=1, f=1.0, b=True, items=[], obj={})",
    ]
    code = f"print(json.dumps(attempt('kinds', **{good})))\n" + "".join(
        f"print(json.dumps(attempt('kinds', **{b})))\n" for b in bad
    )
    result, out = _run(provider, code, ["kinds"])
    assert result.success, result.stderr
    assert out[0] == {"ok": "ok"}
    assert all(o.get("err") == "bad_request" for o in out[1:]), out
    assert host.calls == [("kinds",)]


def test_tool_exception_detail_stays_on_the_host(make_provider, host, caplog):
    provider = make_provider(tools={"leaky": host.leaky})
    with caplog.at_level("WARNING", logger="capsule_sandbox.tools"):
        result, out = _run(provider, "print(json.dumps(attempt('leaky', x='a')))", ["leaky"])
    assert out[0]["err"] == "tool_failed"
    assert "alice" not in json.dumps(out) and "RuntimeError" not in json.dumps(out)
    assert "/home/alice/.ssh/id_rsa" in caplog.text


def _tool_threads():
    return [t for t in threading.enumerate() if t.name.startswith("capsule-tool-") and t.name != "capsule-tool-fd"]


def test_timed_out_call_leaves_no_thread(make_provider):
    state = {"spins": 0}

    def spin(n: int) -> int:
        while True:  # pure Python: interruptible
            state["spins"] += 1

    def naps(n: int) -> int:
        for _ in range(100000):  # short sleeps: interruptible between them
            time.sleep(0.01)
        return n

    provider = make_provider(tools={"spin": spin, "naps": naps})
    code = "print(json.dumps(attempt('spin', n=1)))\nprint(json.dumps(attempt('naps', n=1)))\n"
    result, out = _run(provider, code, ["spin", "naps"])
    assert result.success, result.stderr
    assert [o.get("err") for o in out] == ["timeout", "timeout"], out
    deadline = time.monotonic() + 5
    while _tool_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tool_threads() == [], "a tool call outlived its run"
    spins = state["spins"]
    time.sleep(0.2)
    assert state["spins"] == spins, "the timed-out tool is still running"

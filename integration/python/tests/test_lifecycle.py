"""Session lifecycle, statuses, output persistence, failures, context."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from capsule_sandbox import (
    ExecutionStatus,
    SandboxConfig,
    SessionNotFoundError,
    SessionStatus,
)
from _helpers import wait_for_file


def test_create_execute_destroy(provider):
    handle = provider.create_session("agent-1")
    assert handle.status is SessionStatus.READY
    assert provider.get_session_status("agent-1", handle.session_id) is SessionStatus.READY
    workspace = Path(handle.workspace)
    assert (workspace / "scripts").is_dir() and (workspace / "output").is_dir()

    ex = provider.execute_code("agent-1", handle.session_id, "print('hello from capsule')")
    assert ex.status is ExecutionStatus.COMPLETED
    assert ex.result is not None
    assert ex.result.success is True
    assert ex.result.exit_code == 0
    assert ex.result.stdout == "hello from capsule\n"
    assert ex.result.killed is False
    assert ex.result.duration_seconds > 0
    assert ex.execution_id and ex.agent_id == "agent-1" and ex.session_id == handle.session_id

    provider.destroy_session("agent-1", handle.session_id)
    assert provider.get_session_status("agent-1", handle.session_id) is SessionStatus.DESTROYED
    assert not workspace.exists()
    provider.destroy_session("agent-1", handle.session_id)  # idempotent
    with pytest.raises(SessionNotFoundError):
        provider.execute_code("agent-1", handle.session_id, "print(1)")


def test_unknown_session(provider):
    assert provider.get_session_status("agent-1", "nope") is SessionStatus.DESTROYED
    with pytest.raises(SessionNotFoundError):
        provider.execute_code("agent-1", "nope", "print(1)")
    with pytest.raises(SessionNotFoundError):
        provider.run("agent-1", ["/bin/true"], session_id="nope")
    provider.destroy_session("agent-1", "nope")  # no error
    assert provider.cancel_execution("agent-1", "nope", "x") is False


def test_session_belongs_to_its_agent(provider):
    handle = provider.create_session("owner")
    try:
        with pytest.raises(SessionNotFoundError):
            provider.execute_code("intruder", handle.session_id, "print(1)")
        provider.destroy_session("intruder", handle.session_id)
        assert provider.get_session_status("owner", handle.session_id) is SessionStatus.READY
    finally:
        provider.destroy_session("owner", handle.session_id)


def test_status_executing_while_running(provider):
    handle = provider.create_session("agent-1")
    marker = Path(handle.workspace) / "output" / "started"
    done = {}

    def work():
        done["h"] = provider.execute_code(
            "agent-1",
            handle.session_id,
            "import time\nopen('started','w').write('1')\ntime.sleep(1.5)\n",
        )

    thread = threading.Thread(target=work)
    thread.start()
    try:
        assert wait_for_file(str(marker)), "execution never started"
        assert provider.get_session_status("agent-1", handle.session_id) is SessionStatus.EXECUTING
        thread.join(30)
        assert done["h"].status is ExecutionStatus.COMPLETED
        assert provider.get_session_status("agent-1", handle.session_id) is SessionStatus.READY
        got = provider.get_execution_status("agent-1", handle.session_id, done["h"].execution_id)
        assert got.status is ExecutionStatus.COMPLETED
    finally:
        thread.join(30)
        provider.destroy_session("agent-1", handle.session_id)


def test_output_dir_persists_across_executions_and_is_removed(provider):
    handle = provider.create_session("agent-1")
    sid = handle.session_id
    first = provider.execute_code("agent-1", sid, "open('state.txt','w').write('42')")
    assert first.result.success, first.result.stderr
    second = provider.execute_code(
        "agent-1", sid, "import os\nprint(open('state.txt').read(), os.getcwd())"
    )
    assert second.result.success, second.result.stderr
    value, cwd = second.result.stdout.split()
    assert value == "42"
    assert os.path.realpath(cwd) == os.path.realpath(os.path.join(handle.workspace, "output"))
    assert (Path(handle.workspace) / "output" / "state.txt").read_text() == "42"
    provider.destroy_session("agent-1", sid)
    assert not Path(handle.workspace).exists()


def test_scripts_dir_is_read_only_inside(provider):
    handle = provider.create_session("agent-1")
    try:
        code = (
            "import os, sys\n"
            "target = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'evil.py')\n"
            "try:\n"
            "    open(target, 'w').write('x')\n"
            "except OSError as e:\n"
            "    print('denied', e.errno)\n"
            "else:\n"
            "    print('WROTE')\n"
        )
        ex = provider.execute_code("agent-1", handle.session_id, code)
        assert ex.result.stdout.startswith("denied"), ex.result
        assert not (Path(handle.workspace) / "scripts" / "evil.py").exists()
    finally:
        provider.destroy_session("agent-1", handle.session_id)


def test_non_zero_exit_is_failure(provider):
    ex = provider.run_once("agent-1", "import sys\nprint('bye')\nsys.exit(3)")
    assert ex.status is ExecutionStatus.FAILED
    assert ex.result.success is False
    assert ex.result.exit_code == 3
    assert ex.result.killed is False
    assert ex.result.stdout == "bye\n"

    ex = provider.run_once("agent-1", "raise RuntimeError('boom')")
    assert ex.result.success is False
    assert ex.result.exit_code == 1
    assert "RuntimeError: boom" in ex.result.stderr


def test_context_reaches_code_as_json(provider):
    context = {"task": "summarise", "n": 3, "nested": {"ok": True}}
    code = "import os, json\nprint(json.dumps(json.loads(os.environ['CAPSULE_CONTEXT']), sort_keys=True))"
    ex = provider.run_once("agent-1", code, context=context)
    assert ex.result.success, ex.result.stderr
    assert json.loads(ex.result.stdout) == context
    with pytest.raises(TypeError):
        provider.run_once("agent-1", "print(1)", context={"x": object()})


def test_env_vars_reach_code_and_host_env_does_not(provider, monkeypatch):
    monkeypatch.setenv("HOST_SECRET_FOR_TEST", "hunter2")
    cfg = SandboxConfig(env_vars={"GREETING": "hi"})
    code = "import os\nprint(os.environ.get('GREETING'), os.environ.get('HOST_SECRET_FOR_TEST'))"
    ex = provider.run_once("agent-1", code, config=cfg)
    assert ex.result.stdout.split() == ["hi", "None"]


def test_input_dir_read_only_output_dir_writable(provider, tmp_path):
    inp = tmp_path / "in"
    out = tmp_path / "out"
    inp.mkdir()
    (inp / "data.txt").write_text("payload")
    cfg = SandboxConfig(input_dir=str(inp), output_dir=str(out))
    code = (
        "import os\n"
        "data = open(os.path.join(os.environ['CAPSULE_INPUT_DIR'], 'data.txt')).read()\n"
        "open(os.path.join(os.environ['CAPSULE_OUTPUT_DIR'], 'result.txt'), 'w').write(data.upper())\n"
        "try:\n"
        "    open(os.path.join(os.environ['CAPSULE_INPUT_DIR'], 'x.txt'), 'w').write('x')\n"
        "    print('WROTE-INPUT')\n"
        "except OSError:\n"
        "    print('input read-only')\n"
    )
    ex = provider.run_once("agent-1", code, config=cfg)
    assert ex.result.success, ex.result.stderr
    assert ex.result.stdout.strip() == "input read-only"
    assert (out / "result.txt").read_text() == "PAYLOAD"
    assert not (inp / "x.txt").exists()


def test_ungranted_host_file_is_unreadable(provider, tmp_path):
    secret = tmp_path / "not-granted" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("top secret")
    code = (
        f"try:\n    print(open({str(secret)!r}).read())\n"
        "except OSError as e:\n    print('denied', e.errno)\n"
    )
    ex = provider.run_once("agent-1", code)
    assert ex.result.stdout.startswith("denied"), ex.result
    assert "top secret" not in ex.result.stdout


def test_run_command_ephemeral_and_in_session(provider):
    result = provider.run("agent-1", ["echo", "plain", "command"])
    assert result.success and result.stdout == "plain command\n"
    result = provider.run("agent-1", "sh -c 'exit 7'")
    assert result.success is False and result.exit_code == 7

    handle = provider.create_session("agent-1")
    try:
        provider.execute_code("agent-1", handle.session_id, "open('f.txt','w').write('from code')")
        result = provider.run("agent-1", ["cat", "f.txt"], session_id=handle.session_id)
        assert result.stdout == "from code"
    finally:
        provider.destroy_session("agent-1", handle.session_id)


def test_the_contracts_positional_forms(provider):
    """Section 7 writes ``run(agent_id, command, session_id=None)`` and
    ``run_once(agent_id, code, config)``: a caller written from it passes
    them positionally; AGT's keyword forms keep working (above)."""
    once = provider.run_once("agent-1", "import os; print(os.environ['K'])", SandboxConfig(env_vars={"K": "v"}))
    assert once.result.success and once.result.stdout == "v\n", once.result
    handle = provider.create_session("agent-1", SandboxConfig(timeout_seconds=20))
    try:
        provider.execute_code("agent-1", handle.session_id, "open('g.txt','w').write('kept')")
        result = provider.run("agent-1", ["cat", "g.txt"], handle.session_id)
        assert result.success and result.stdout == "kept", result
        with pytest.raises(SessionNotFoundError):
            provider.run("agent-1", ["/bin/true"], "no-such-session")
    finally:
        provider.destroy_session("agent-1", handle.session_id)


def test_async_twins(provider):
    import asyncio

    async def main():
        handle = await provider.create_session_async("agent-async")
        ex = await provider.execute_code_async("agent-async", handle.session_id, "print(6*7)")
        status = await provider.get_session_status_async("agent-async", handle.session_id)
        await provider.destroy_session_async("agent-async", handle.session_id)
        once = await provider.run_once_async("agent-async", "print('once')")
        res = await provider.run_async("agent-async", ["echo", "r"])
        return ex, status, once, res

    ex, status, once, res = asyncio.run(main())
    assert ex.result.stdout == "42\n"
    assert status is SessionStatus.READY
    assert once.result.stdout == "once\n"
    assert res.stdout == "r\n"


def test_execute_code_refuses_non_python_interpreter(make_provider):
    provider = make_provider(interpreter="/bin/sh")
    handle = provider.create_session("agent-1")
    try:
        with pytest.raises(ValueError, match="Python"):
            provider.execute_code("agent-1", handle.session_id, "echo hi")
        assert provider.run("agent-1", ["/bin/sh", "-c", "echo via run"], session_id=handle.session_id).stdout == "via run\n"
    finally:
        provider.destroy_session("agent-1", handle.session_id)


def test_audit_record_carries_agent_id(provider, audit_log):
    provider.run_once("audited-agent", "print(1)")
    deadline = time.monotonic() + 5
    while not audit_log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = [json.loads(l) for l in audit_log.read_text().splitlines() if l.strip()]
    assert any(rec.get("agent_id") == "audited-agent" for rec in lines)


def test_result_line_holding_a_line_separator_is_still_read():
    # The result object is found on its own line when something else shares
    # capsule's stdout; a child's output holding U+2028 or U+0085 (which
    # str.splitlines() also splits on, JSON does not escape) stays in one line.
    from capsule_sandbox._exec import parse_result

    doc = {"exit_code": 0, "success": True, "stdout": "a\u2028b\x85c\u2029d", "termination_reason": "exited"}
    out = b"a stray line\n" + json.dumps(doc, ensure_ascii=False).encode() + b"\n"
    result = parse_result(out, b"", 0, 0.1, 5.0)
    assert result.error == "" and result.success is True
    assert result.stdout == "a\u2028b\x85c\u2029d"

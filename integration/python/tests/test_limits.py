"""Timeout, truncation and cancellation: killed runs leave no process behind.

Processes are found on the host by a unique marker in their argv, which works
whether or not capsule gives the run its own pid namespace.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from capsule_sandbox import ExecutionStatus, SandboxConfig
from _helpers import procs_with_marker, wait_for_file, wait_no_marker


@pytest.fixture
def provider(make_provider):
    """These tests start process trees on purpose: without the static scan
    (which refuses subprocess calls before the sandbox ever sees them)."""
    return make_provider(static_scan=False)


def _marker() -> str:
    return f"capsule-test-{uuid.uuid4().hex}"


def _spawn_and_hang(marker: str) -> str:
    """Code that starts a child and a grandchild, both carrying ``marker`` in
    their argv, waits until the grandchild runs, writes ``started``, hangs."""
    grandchild = "import time; open('gc-ready', 'w').write('1'); time.sleep(300)"
    child = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {grandchild!r}, sys.argv[1]]); time.sleep(300)"
    )
    return (
        "import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}, {marker!r}])\n"
        "deadline = time.time() + 20\n"
        "while not os.path.exists('gc-ready') and time.time() < deadline:\n"
        "    time.sleep(0.02)\n"
        "open('started', 'w').write('1')\n"
        "time.sleep(300)\n"
    )


def test_timeout_kills_the_tree(provider):
    handle = provider.create_session("agent-1", config=SandboxConfig(timeout_seconds=2))
    marker = _marker()
    try:
        started = time.monotonic()
        ex = provider.execute_code("agent-1", handle.session_id, _spawn_and_hang(marker))
        elapsed = time.monotonic() - started
        result = ex.result
        assert result.killed is True
        assert result.exit_code == 124
        assert result.success is False
        assert "timeout" in result.kill_reason.lower()
        assert ex.status is ExecutionStatus.FAILED
        assert elapsed < 20
        assert (Path(handle.workspace) / "output" / "started").exists(), result.stderr
        assert wait_no_marker(marker) == [], "processes survived the timeout"
    finally:
        provider.destroy_session("agent-1", handle.session_id)


def test_two_million_bytes_are_truncated_with_marker(provider):
    ex = provider.run_once("agent-1", "import sys\nsys.stdout.write('x' * 2_000_000)\nsys.stdout.flush()")
    result = ex.result
    assert result.success, result.stderr
    assert result.stdout_truncated is True
    assert result.stderr_truncated is False
    assert result.stdout_bytes == 2_000_000
    marker = "\n[...output truncated at byte limit]\n"
    assert result.stdout.endswith(marker)
    assert result.stdout[: -len(marker)] == "x" * 1_048_576


def test_output_max_bytes_is_applied(provider):
    cfg = SandboxConfig(output_max_bytes=1000)
    ex = provider.run_once("agent-1", "print('y' * 5000)", config=cfg)
    assert ex.result.stdout_truncated is True
    assert ex.result.stdout.startswith("y" * 1000 + "\n[...output truncated")


def test_cancel_execution_kills_the_run(provider):
    handle = provider.create_session("agent-1")
    box = {}
    marker = _marker()

    def work():
        box["h"] = provider.execute_code(
            "agent-1", handle.session_id, _spawn_and_hang(marker), execution_id="slow-1"
        )

    thread = threading.Thread(target=work)
    started = time.monotonic()
    thread.start()
    try:
        assert wait_for_file(str(Path(handle.workspace) / "output" / "started"))
        assert provider.running_executions("agent-1", handle.session_id) == ["slow-1"]
        status = provider.get_execution_status("agent-1", handle.session_id, "slow-1").status
        assert status is ExecutionStatus.RUNNING
        assert len(procs_with_marker(marker)) >= 2
        assert provider.cancel_execution("agent-1", handle.session_id, "slow-1") is True
        thread.join(30)
        assert not thread.is_alive()
        assert time.monotonic() - started < 30
        ex = box["h"]
        assert ex.status is ExecutionStatus.CANCELLED
        assert ex.result.killed is True and ex.result.success is False
        assert "cancel" in ex.result.kill_reason
        assert wait_no_marker(marker) == [], "processes survived cancel_execution"
        assert provider.cancel_execution("agent-1", handle.session_id, "slow-1") is False
        after = provider.execute_code("agent-1", handle.session_id, "print('after')")
        assert after.result.stdout == "after\n"
    finally:
        thread.join(30)
        provider.destroy_session("agent-1", handle.session_id)


def test_destroy_session_stops_running_execution(provider):
    handle = provider.create_session("agent-1")
    box = {}
    marker = _marker()
    thread = threading.Thread(
        target=lambda: box.setdefault(
            "h", provider.execute_code("agent-1", handle.session_id, _spawn_and_hang(marker))
        )
    )
    thread.start()
    try:
        assert wait_for_file(str(Path(handle.workspace) / "output" / "started"))
        assert len(procs_with_marker(marker)) >= 2
        provider.destroy_session("agent-1", handle.session_id)
        thread.join(30)
        assert box["h"].status is ExecutionStatus.CANCELLED
        assert wait_no_marker(marker) == []
        assert not Path(handle.workspace).exists()
    finally:
        thread.join(30)


def test_cpu_limit_kill_is_reported_as_killed(provider):
    # cpu_limit * timeout_seconds = limits.cpu_seconds: 1 s of CPU.
    cfg = SandboxConfig(timeout_seconds=10, cpu_limit=0.1)
    started = time.monotonic()
    result = provider.run_once("agent-1", "while True: pass", config=cfg).result
    assert time.monotonic() - started < 8, "the CPU limit, not the timeout, must end it"
    assert result.killed is True, result
    assert result.success is False
    assert result.kill_reason == "CPU time limit reached (limits.cpu_seconds)"
    assert result.termination_reason == "signaled"
    assert result.signal == 9 and result.exit_code == -9


def test_a_sigkill_below_the_cpu_limit_is_not_a_kill_by_capsule(provider):
    cfg = SandboxConfig(timeout_seconds=10, cpu_limit=0.1)
    result = provider.run_once("agent-1", "import os\nos.kill(os.getpid(), 9)", config=cfg).result
    assert result.termination_reason == "signaled"
    assert result.signal == 9 and result.exit_code == -9
    assert result.killed is False and result.kill_reason == ""
    assert result.success is False


def test_the_provider_takes_capsules_verdict_on_a_signal():
    # No guess from the signal number: SIGXCPU (which capsule's soft = hard
    # RLIMIT_CPU never sends) is the command's own business, and a SIGKILL is
    # a kill by a limit only when capsule says so.
    from capsule_sandbox._exec import parse_result

    def parsed(**doc):
        base = {"termination_reason": "signaled", "success": False, "killed": False, "kill_reason": None}
        return parse_result(json.dumps({**base, **doc}).encode(), b"", 0, 0.1, 5.0)

    xcpu = parsed(signal=24, exit_code=152)
    assert (xcpu.killed, xcpu.kill_reason, xcpu.exit_code) == (False, "", -24)
    cpu = parsed(signal=9, exit_code=137, killed=True, kill_reason="CPU time limit reached (limits.cpu_seconds)")
    assert (cpu.killed, cpu.kill_reason, cpu.success) == (True, "CPU time limit reached (limits.cpu_seconds)", False)

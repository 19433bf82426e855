"""Timeout, truncation and cancellation: killed runs leave no process behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from capsule_sandbox import ExecutionStatus, SandboxConfig
from _helpers import wait_for_file, wait_gone

_SPAWN_AND_HANG = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "import os\n"
    "open('pids', 'w').write(f'{os.getpid()} {child.pid}')\n"
    "time.sleep(300)\n"
)


def _pids(workspace: str) -> list[int]:
    return [int(p) for p in (Path(workspace) / "output" / "pids").read_text().split()]


def test_timeout_kills_the_tree(provider):
    handle = provider.create_session("agent-1", config=SandboxConfig(timeout_seconds=2))
    try:
        started = time.monotonic()
        ex = provider.execute_code("agent-1", handle.session_id, _SPAWN_AND_HANG)
        elapsed = time.monotonic() - started
        result = ex.result
        assert result.killed is True
        assert result.exit_code == 124
        assert result.success is False
        assert "timeout" in result.kill_reason.lower()
        assert ex.status is ExecutionStatus.FAILED
        assert elapsed < 20
        pids = _pids(handle.workspace)
        assert len(pids) == 2
        for pid in pids:
            assert wait_gone(pid), f"process {pid} survived the timeout"
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

    def work():
        box["h"] = provider.execute_code("agent-1", handle.session_id, _SPAWN_AND_HANG, execution_id="slow-1")

    thread = threading.Thread(target=work)
    started = time.monotonic()
    thread.start()
    try:
        assert wait_for_file(str(Path(handle.workspace) / "output" / "pids"))
        assert provider.running_executions("agent-1", handle.session_id) == ["slow-1"]
        assert provider.get_execution_status("agent-1", handle.session_id, "slow-1").status is ExecutionStatus.RUNNING
        pids = _pids(handle.workspace)
        assert provider.cancel_execution("agent-1", handle.session_id, "slow-1") is True
        thread.join(30)
        assert not thread.is_alive()
        assert time.monotonic() - started < 30
        ex = box["h"]
        assert ex.status is ExecutionStatus.CANCELLED
        assert ex.result.killed is True and ex.result.success is False
        assert "cancel" in ex.result.kill_reason
        for pid in pids:
            assert wait_gone(pid), f"process {pid} survived cancel_execution"
        assert provider.cancel_execution("agent-1", handle.session_id, "slow-1") is False
        # the session is still usable
        assert provider.execute_code("agent-1", handle.session_id, "print('after')").result.stdout == "after\n"
    finally:
        thread.join(30)
        provider.destroy_session("agent-1", handle.session_id)


def test_destroy_session_stops_running_execution(provider):
    handle = provider.create_session("agent-1")
    box = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("h", provider.execute_code("agent-1", handle.session_id, _SPAWN_AND_HANG))
    )
    thread.start()
    try:
        assert wait_for_file(str(Path(handle.workspace) / "output" / "pids"))
        pids = _pids(handle.workspace)
        provider.destroy_session("agent-1", handle.session_id)
        thread.join(30)
        assert box["h"].status is ExecutionStatus.CANCELLED
        for pid in pids:
            assert wait_gone(pid)
        assert not Path(handle.workspace).exists()
    finally:
        thread.join(30)

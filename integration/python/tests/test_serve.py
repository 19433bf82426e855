"""Sessions send their steps to one warm ``capsule serve`` (issue 23): one
server for many steps, no policy file per step, the same results, and a
server that dies fails the steps it ran (never leaves one running) while the
next step starts a new server."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from pathlib import Path

from _helpers import procs_with_marker, wait_gone, wait_no_marker


def _session(provider, agent="agent-serve"):
    handle = provider.create_session(agent)
    return handle.session_id, provider._sessions[(agent, handle.session_id)]


def test_a_session_uses_one_warm_server_for_its_steps(provider, audit_log):
    sid, session = _session(provider)
    try:
        first = provider.run("agent-serve", ["/bin/echo", "one"], session_id=sid)
        assert first.success, first.stderr
        assert first.stdout == "one\n"
        server = session.serve
        assert server is not None and server.alive, "the session started no capsule serve"
        pid = server.pid
        for i in range(3):
            r = provider.execute_code("agent-serve", sid, f"print({i})")
            assert r.result.success, r.result.stderr
            assert r.result.stdout == f"{i}\n"
        assert session.serve.pid == pid, "a new server per step"
        # No policy file per step in the workspace.
        assert not list(Path(session.workspace).glob("policy-*.json"))
        # Every step is its own run, with its audit record.
        runs = [line for line in audit_log.read_text().splitlines() if "agent-serve" in line]
        assert len(runs) == 4, runs
        # The step failing is a result, not an error of the server.
        bad = provider.run("agent-serve", ["/bin/sh", "-c", "exit 3"], session_id=sid)
        assert bad.exit_code == 3 and not bad.success
    finally:
        provider.destroy_session("agent-serve", sid)
    assert wait_gone(pid), "destroy_session left capsule serve running"


def test_a_killed_server_fails_its_step_and_the_next_step_starts_a_new_one(provider):
    sid, session = _session(provider)
    marker = f"serve-crash-{uuid.uuid4().hex}"
    try:
        assert provider.run("agent-serve", ["/bin/true"], session_id=sid).success
        server = session.serve
        got = {}

        def step():
            got["r"] = provider.run(
                "agent-serve",
                ["/bin/sh", "-c", "sleep 60; true", marker],
                session_id=sid,
            )

        t = threading.Thread(target=step)
        t.start()
        deadline_pids = []
        for _ in range(200):
            deadline_pids = procs_with_marker(marker)
            if deadline_pids:
                break
            threading.Event().wait(0.05)
        assert deadline_pids, "the step never started"
        os.kill(server.pid, signal.SIGKILL)
        t.join(30)
        assert not t.is_alive(), "the step did not end with its server"
        r = got["r"]
        assert not r.success and r.termination_reason == "error", r
        assert "capsule serve" in r.error, r.error
        assert wait_no_marker(marker, 10.0) == [], "a step outlived its server"
        again = provider.run("agent-serve", ["/bin/echo", "again"], session_id=sid)
        assert again.success and again.stdout == "again\n", again.stderr
        assert session.serve.pid != server.pid
    finally:
        provider.destroy_session("agent-serve", sid)


def test_cancel_through_the_server(provider):
    sid, _session_obj = _session(provider)
    marker = f"serve-cancel-{uuid.uuid4().hex}"
    try:
        done = {}

        def step():
            done["h"] = provider.execute_code(
                "agent-serve",
                sid,
                f"import time\n# {marker}\ntime.sleep(60)\n",
                execution_id="slow1",
            )

        t = threading.Thread(target=step)
        t.start()
        for _ in range(200):
            if "slow1" in provider.running_executions("agent-serve", sid) and procs_with_marker("slow1.py"):
                break
            threading.Event().wait(0.05)
        assert provider.cancel_execution("agent-serve", sid, "slow1")
        t.join(30)
        assert not t.is_alive()
        assert done["h"].result.termination_reason == "cancelled", done["h"].result
    finally:
        provider.destroy_session("agent-serve", sid)


def test_concurrent_steps_of_one_session_each_get_their_own_result(provider):
    sid, session = _session(provider)
    try:
        results = {}

        def step(i):
            results[i] = provider.run(
                "agent-serve", ["/bin/sh", "-c", f"sleep 0.{3 - i % 3}; echo {i}"], session_id=sid
            )

        threads = [threading.Thread(target=step, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == list(range(6))
        for i, r in results.items():
            assert r.success and r.stdout == f"{i}\n", (i, r.stdout, r.stderr)
        assert session.serve is not None and session.serve.alive
    finally:
        provider.destroy_session("agent-serve", sid)


def test_the_backend_sends_its_runs_to_one_warm_server(capsule_bin, audit_log):
    from capsule_sandbox.backend import CapsuleBackend, ProcessSpec

    backend = CapsuleBackend(binary=capsule_bin, agent_id="serve-test", audit_log=str(audit_log))
    try:
        first = backend.run_process(ProcessSpec(command=["/bin/cat"]), input_text="fed", timeout=30)
        assert first.exit_code == 0 and first.stdout == "fed", first
        server = backend._serve
        assert server is not None and server.alive
        second = backend.run_process(ProcessSpec(command=["/bin/sh", "-c", "exit 4"]), timeout=30)
        assert second.exit_code == 4, second
        assert backend._serve is server, "a new server per run"
        os.kill(server.pid, signal.SIGKILL)
        assert wait_gone(server.pid)
        again = backend.run_process(ProcessSpec(command=["/bin/echo", "again"]), timeout=30)
        assert again.exit_code == 0 and again.stdout == "again\n", again
    finally:
        backend.close()
    assert wait_gone(server.pid)

"""Red team 9: what a sandboxed program's output can do to the Python side
that reads it."""

from __future__ import annotations

import sys

import pytest

from capsule_sandbox import CapsuleBackend, ProcessSpec


@pytest.fixture
def backend(capsule_bin, audit_log):
    b = CapsuleBackend(capsule_bin, agent_id="agentnode-rt9", audit_log=audit_log)
    yield b
    b.close()


def test_a_deeply_nested_line_does_not_break_the_sessions_reader(backend):
    """An agent session reads the program's stdout line by line and skips
    "lines that are not JSON objects" (``except ValueError``). But Python's
    json raises RecursionError, not ValueError, on a line nested deeper than
    its recursion limit: one line of 50,000 ``[`` (100 KB, well inside the
    output limit) made ``recv`` raise RecursionError into the host
    framework's loop instead of skipping it, and the session's messages
    after it were never read."""
    agent = (
        "import sys, json\n"
        "sys.stdout.write('[' * 50000 + ']' * 50000 + '\\n')\n"
        "print(json.dumps({'after': 1}), flush=True)\n"
        "sys.stdin.read()\n"
    )
    session = backend.open_agent_session(ProcessSpec(command=[sys.executable, "-c", agent], interactive=True))
    try:
        assert session.recv(timeout=30) == {"after": 1}
    finally:
        session.close()

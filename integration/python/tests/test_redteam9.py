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


def test_code_too_deep_to_scan_is_a_scan_refusal(provider):
    """The static scan parses and walks the submitted code on the host,
    recursively: code nested deeper than Python's recursion limit (an
    attribute chain of 900 links, 2.7 KB) made ``execute_code`` raise
    RecursionError (MemoryError for 100,000 unary minus signs) into the
    host framework, which catches the scan's ``PermissionError``, not those.
    A scan that cannot read the code refuses it, as a finding."""
    h = provider.create_session("deep")
    try:
        for code in ["x" + ".a" * 900, "-" * 100000 + "1"]:
            with pytest.raises(PermissionError):
                provider.execute_code("deep", h.session_id, code)
    finally:
        provider.destroy_session("deep", h.session_id)

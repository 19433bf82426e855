"""Unavailability is reported, never raised at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, env_extra: dict) -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE_ROOT), **env_extra}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


_PROBE = """
import json
import capsule_sandbox
from capsule_sandbox import CapsuleSandboxProvider, CapsuleBackend
p = CapsuleSandboxProvider(BINARY)
out = {"available": p.is_available(), "reason": p.unavailable_reason}
try:
    h = p.create_session("agent-1")
    out["create"] = "ok"
    p.destroy_session("agent-1", h.session_id)   # no workspace left behind
except RuntimeError as e:
    out["create"] = "RuntimeError: " + str(e)
b = CapsuleBackend(BINARY)
a = b.check_available()
out["backend_available"] = a.available
out["backend_reason"] = a.reason
print(json.dumps(out))
"""


def test_missing_binary_reported_not_raised():
    out = _python(_PROBE.replace("BINARY", "None"), {"CAPSULE_BIN": "/nonexistent/capsule"})
    assert out["available"] is False
    assert "/nonexistent/capsule" in out["reason"]
    assert out["create"].startswith("RuntimeError: capsule unavailable")
    assert out["backend_available"] is False and out["backend_reason"]


def test_binary_not_on_path_reported(tmp_path):
    from capsule_sandbox._binary import bundled_binary

    out = _python(_PROBE.replace("BINARY", "None"), {"TMPDIR": str(tmp_path)})
    if bundled_binary() is not None:
        # Installed from the wheel: its own binary is found without PATH.
        assert out["available"] is True, out["reason"]
        # ... and the session it made is gone (scripts/test left these in /tmp).
        assert not list(tmp_path.glob("capsule-agent-1-*")), list(tmp_path.iterdir())
        return
    assert out["available"] is False
    assert "not found" in out["reason"]


def test_binary_whose_doctor_fails_is_unavailable(tmp_path):
    fake = tmp_path / "capsule"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    out = _python(_PROBE.replace("BINARY", repr(str(fake))), {})
    assert out["available"] is False
    assert "doctor" in out["reason"]


def test_kernel_without_landlock_is_unavailable(tmp_path):
    fake = tmp_path / "capsule"
    fake.write_text('#!/bin/sh\necho \'{"landlock_abi": 0, "seccomp": true}\'\n')
    fake.chmod(0o755)
    out = _python(_PROBE.replace("BINARY", repr(str(fake))), {})
    assert out["available"] is False and "Landlock" in out["reason"]


def test_real_binary_is_available(capsule_bin):
    from capsule_sandbox import CapsuleSandboxProvider

    provider = CapsuleSandboxProvider(capsule_bin)
    assert provider.is_available(), provider.unavailable_reason
    assert provider.unavailable_reason == ""
    assert provider.availability().doctor

"""The README's example runs end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_demo.py"


def test_agent_demo_runs(capsule_bin, tmp_path):
    env = dict(os.environ, CAPSULE_BIN=capsule_bin, XDG_STATE_HOME=str(tmp_path))
    done = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "report written" in done.stdout
    assert "word_count" in done.stdout

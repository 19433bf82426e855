"""CrewAI, installed from PyPI (pinned), with capsule's code interpreter tool
(issue 48).

crewai 1.15.30 no longer ships crewai-tools' Docker ``CodeInterpreterTool``
(``Agent(allow_code_execution=True)`` is deprecated there), so there is no
upstream test to point at capsule's: ``tests/conformance/crewai_check.py``
checks the Docker mode's arguments and answers, the confinement, and a
``Crew`` whose agent, driven by a scripted local ``BaseLLM``, uses the tool
end to end.

crewai's install is ~1 GB and ~4 minutes per user, so this runs only with
``CAPSULE_CONFORMANCE_CREWAI=1`` (then, under
``CAPSULE_CONFORMANCE_REQUIRED=1``, a venv that cannot be built fails it);
otherwise it skips, saying so.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from _conformance import (
    CONFORMANCE,
    CREWAI_PINNED,
    CREWAI_REQUIREMENTS,
    check_example,
    example,
    run_example,
    run_pytest,
    venv,
)


@pytest.fixture(scope="module")
def crewai_python():
    if os.environ.get("CAPSULE_CONFORMANCE_CREWAI", "") != "1":
        reason = (f"crewai=={CREWAI_PINNED} installs ~1 GB in ~4 minutes per user: "
                  "set CAPSULE_CONFORMANCE_CREWAI=1 to test capsule_sandbox.crewai against it")
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    return venv(f"crewai-{CREWAI_PINNED}", CREWAI_REQUIREMENTS)


def test_crewai_pinned_version_is_the_one_installed(crewai_python):
    done = subprocess.run(
        [str(crewai_python), "-c", "import importlib.metadata as m; print(m.version('crewai'))"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == CREWAI_PINNED


def test_crewai_code_interpreter_conformance(crewai_python, capsule_bin, tmp_path):
    done = run_pytest(crewai_python, [str(CONFORMANCE / "crewai_check.py")], capsule_bin=capsule_bin, cwd=tmp_path,
                      env={"CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "5 passed" in summary and "skipped" not in summary and "failed" not in summary, out[-6000:]


def test_the_example_runs(capsule_bin, crewai_python, tmp_path):
    """examples/code-executors/crewai_agent.py: the task runs, every escape fails."""
    check_example(run_example(crewai_python, example("crewai_agent.py"), capsule_bin=capsule_bin, cwd=tmp_path))

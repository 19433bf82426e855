"""smolagents, installed from PyPI (pinned), with capsule's remote Python
executor in place of its Docker one (issue 48).

Builds (once, cached) a virtualenv with ``smolagents==1.26.0`` (and docker,
numpy, which smolagents' own executor tests import), then runs, inside it,
``tests/conformance/smolagents_check.py``: smolagents' own
``CommonDockerExecutorIntegration`` checks (from the sdist's
``tests/test_remote_executors.py``, unmodified) on
``capsule_sandbox.smolagents.CapsuleExecutor``, and capsule's checks of
state between steps, errors, timeouts, confinement and a ``CodeAgent``
driven by a scripted local model.
"""

from __future__ import annotations

import subprocess

import pytest

from _conformance import (
    CONFORMANCE,
    SMOLAGENTS_PINNED,
    SMOLAGENTS_REQUIREMENTS,
    check_example,
    example,
    run_example,
    run_pytest,
    sdist,
    venv,
)


@pytest.fixture(scope="module")
def smolagents_python():
    return venv(f"smolagents-{SMOLAGENTS_PINNED}", SMOLAGENTS_REQUIREMENTS)


def test_smolagents_pinned_version_is_the_one_installed(smolagents_python):
    done = subprocess.run(
        [str(smolagents_python), "-c", "import importlib.metadata as m; print(m.version('smolagents'))"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == SMOLAGENTS_PINNED


def test_smolagents_executor_conformance(smolagents_python, capsule_bin, tmp_path):
    src = sdist(smolagents_python, f"smolagents=={SMOLAGENTS_PINNED}", "smolagents")
    tests = src / "tests"
    assert (tests / "test_remote_executors.py").exists(), f"the smolagents sdist has no {tests}/test_remote_executors.py"
    done = run_pytest(
        smolagents_python,
        [str(CONFORMANCE / "smolagents_check.py")],
        capsule_bin=capsule_bin,
        env={"SMOLAGENTS_TESTS": str(tests)},
        cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = done.stdout.strip().splitlines()[-1]
    # 9 of smolagents' own (CommonDockerExecutorIntegration), 12 of capsule's.
    assert "21 passed" in summary and "skipped" not in summary and "failed" not in summary, out[-6000:]


def test_the_example_runs(capsule_bin, smolagents_python, tmp_path):
    """examples/code-executors/smolagents_agent.py: the task runs, every escape fails."""
    check_example(run_example(smolagents_python, example("smolagents_agent.py"), capsule_bin=capsule_bin, cwd=tmp_path))

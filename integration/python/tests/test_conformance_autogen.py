"""AutoGen, installed from PyPI (pinned), with capsule's code executor in
place of its Docker one (issue 48).

Builds (once, cached) a virtualenv with autogen-agentchat, -core and -ext
==0.7.5 (and pytest-asyncio, aiofiles for AutoGen's own tests), then runs,
inside it:

* autogen-ext's own ``tests/code_executors/test_docker_commandline_code_executor.py``
  (from the autogen-ext sdist, unmodified), with
  ``tests/conformance/autogen_docker_plugin.py`` putting
  ``capsule_sandbox.autogen.CapsuleCommandLineCodeExecutor`` where
  ``DockerCommandLineCodeExecutor`` was: the 15 tests that are not about
  container-only features (``extra_hosts``, ``init_command``) must pass;
* ``tests/conformance/autogen_check.py``: confinement, shell blocks, exit
  codes, functions, the policy arguments, and ``CodeExecutorAgent`` driven by
  AutoGen's own ``ReplayChatCompletionClient``, end to end.
"""

from __future__ import annotations

import subprocess

import pytest

from _conformance import (
    AUTOGEN_PINNED,
    AUTOGEN_REQUIREMENTS,
    CONFORMANCE,
    check_example,
    example,
    run_example,
    run_pytest,
    sdist,
    venv,
)


@pytest.fixture(scope="module")
def autogen_python():
    return venv(f"autogen-{AUTOGEN_PINNED}", AUTOGEN_REQUIREMENTS)


def _check(done, expect_passed: int):
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = done.stdout.strip().splitlines()[-1]  # stderr may end with a warning
    assert f"{expect_passed} passed" in summary and "skipped" not in summary and "failed" not in summary, \
        out[-6000:]


def test_autogen_pinned_versions_are_the_ones_installed(autogen_python):
    names = ["autogen-agentchat", "autogen-core", "autogen-ext"]
    done = subprocess.run(
        [str(autogen_python), "-c",
         "import sys, importlib.metadata as m; print(' '.join(m.version(n) for n in sys.argv[1:]))", *names],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [AUTOGEN_PINNED] * len(names), done.stdout


def test_autogen_shipped_docker_executor_tests_with_capsule(autogen_python, capsule_bin, tmp_path):
    src = sdist(autogen_python, f"autogen-ext=={AUTOGEN_PINNED}", "autogen_ext")
    test = src / "tests" / "code_executors" / "test_docker_commandline_code_executor.py"
    assert test.exists(), f"autogen-ext's sdist has no {test}"
    # test_deprecated_warning runs with work_dir="." (the cwd): a fresh one.
    done = run_pytest(
        autogen_python,
        ["-p", "autogen_docker_plugin", "--rootdir", str(src), "-k", "not extra_args", str(test)],
        capsule_bin=capsule_bin,
        cwd=tmp_path,
    )
    _check(done, 15)


def test_autogen_executor_conformance(autogen_python, capsule_bin, tmp_path):
    done = run_pytest(autogen_python, [str(CONFORMANCE / "autogen_check.py")], capsule_bin=capsule_bin, cwd=tmp_path)
    _check(done, 13)


def test_the_example_runs(capsule_bin, autogen_python, tmp_path):
    """examples/code-executors/autogen_agent.py: the task runs, every escape fails."""
    check_example(run_example(autogen_python, example("autogen_agent.py"), capsule_bin=capsule_bin, cwd=tmp_path))

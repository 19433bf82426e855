"""agentnode-sdk, installed from PyPI (pinned), with CapsuleBackend as its
default backend (issue 13). Runs, inside a cached venv:

* tests/conformance/agentnode_check.py: the backend contract through
  agentnode's own fail-closed gate, types, ProcessSpec/MountSpec, agent
  wrapper and RPC host;
* tests/conformance/agentnode_e2e.py: agentnode's PUBLIC path, unmodified:
  ``install_package`` of two local community packs (served on loopback, real
  hashes) builds each into a capsule volume, then ``run_agent`` with
  agentnode's own ``AGENTNODE_AGENT_SANDBOX=1`` runs the agent in capsule,
  its tool call through agentnode's allowlisted RPC and its LLM call through
  agentnode's host broker (to a fake provider on loopback).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from _conformance import AGENTNODE_PINNED, CONFORMANCE, _skip, agentnode_requirements, run_pytest, venv


@pytest.fixture(scope="module")
def an_python():
    return venv(f"agentnode-{AGENTNODE_PINNED}", agentnode_requirements(AGENTNODE_PINNED))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """setuptools and wheel, for pip's build inside capsule (offline: the
    backend's ``pip_find_links``)."""
    dest = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(dest),
         "setuptools>=61", "wheel"],
        capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        _skip(f"cannot fetch setuptools/wheel for the offline build: {done.stderr.strip()[-500:]}")
    return dest


def _check(done, expect_passed: int):
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert f"{expect_passed} passed" in summary and "skipped" not in summary, out[-6000:]


def test_agentnode_backend_contract(an_python, capsule_bin):
    done = run_pytest(an_python, [str(CONFORMANCE / "agentnode_check.py"), "-k", "contract"], capsule_bin=capsule_bin)
    _check(done, 4)


def test_agentnode_install_package_then_run_agent(an_python, capsule_bin, wheels):
    done = run_pytest(an_python, ["-s", str(CONFORMANCE / "agentnode_e2e.py")], capsule_bin=capsule_bin,
                      env={"CAPSULE_CONFORMANCE_WHEELS": str(wheels)})
    _check(done, 1)

"""The Agent Governance Toolkit, installed from PyPI (pinned), with capsule in
place of nono (issue 13).

Builds (once, cached) a virtualenv with ``agt-sandbox==5.0.0`` and the two
AGT packages it pulls in, pinned as well (agent-governance-toolkit-core and
-cli ==5.0.0), then runs, inside it:

* AGT's own shipped ``tests/test_nono_integration.py`` (from the agt-sandbox
  sdist, unmodified), with ``tests/conformance/agt_nono_plugin.py`` putting
  capsule's provider where nono's was: all 4 must pass;
* ``tests/conformance/agt_contract_check.py``: the provider contract against
  AGT's installed types, policy engine and code scanner;
* capsule's own AGT contract tests (test_agt_contract.py) with AGT importable.
"""

from __future__ import annotations

import subprocess

import pytest

from _conformance import AGT_PINNED, AGT_REQUIREMENTS, CONFORMANCE, HERE, run_pytest, sdist, venv


@pytest.fixture(scope="module")
def agt_python():
    return venv(f"agt-{AGT_PINNED}", AGT_REQUIREMENTS)


def _check(done, expect_passed: int):
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert f"{expect_passed} passed" in summary and "skipped" not in summary, out[-6000:]


def test_agt_pinned_versions_are_the_ones_installed(agt_python):
    names = [r.split("==")[0] for r in AGT_REQUIREMENTS]
    done = subprocess.run(
        [str(agt_python), "-c",
         "import sys, importlib.metadata as m; print(' '.join(m.version(n) for n in sys.argv[1:]))", *names],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [AGT_PINNED] * len(names), (names, done.stdout)


def test_agt_shipped_nono_integration_test_with_capsule(agt_python, capsule_bin):
    src = sdist(agt_python, f"agt-sandbox=={AGT_PINNED}", "agt_sandbox")
    test = src / "tests" / "test_nono_integration.py"
    assert test.exists(), f"AGT's sdist has no {test}"
    done = run_pytest(agt_python, ["-p", "agt_nono_plugin", "--rootdir", str(src), str(test)], capsule_bin=capsule_bin)
    _check(done, 4)


def test_agt_provider_contract(agt_python, capsule_bin):
    done = run_pytest(agt_python, [str(CONFORMANCE / "agt_contract_check.py")], capsule_bin=capsule_bin)
    _check(done, 8)


def test_capsule_agt_contract_with_agt_importable(agt_python, capsule_bin):
    done = run_pytest(
        agt_python,
        ["--rootdir", str(HERE), str(HERE / "test_agt_contract.py"), str(HERE / "test_lifecycle.py")],
        capsule_bin=capsule_bin,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert " passed" in out

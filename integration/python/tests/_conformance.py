"""Virtualenvs with the real, pinned framework packages, for the conformance tests.

Each venv is built once and cached under ``$CAPSULE_CONFORMANCE_DIR`` (default:
the system temp dir), in a directory keyed by the requirements and the user,
so the unprivileged pass builds its own. A package that cannot be installed
(no registry, no wheel for this Python) skips the test with pip's reason,
except under ``CAPSULE_CONFORMANCE_REQUIRED=1`` (``.ci/run`` sets it): then
the test FAILS with that reason, so CI never passes with conformance
skipped. A venv built with ``optional=True`` (the latest agentnode release,
tested "if it installs") skips either way.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# The framework releases the conformance suite drives (issue 13).
AGENTNODE_PINNED = "0.12.0"
AGENTNODE_LATEST = "0.24.1"  # the newest agentnode-sdk on PyPI when last checked
AGT_PINNED = "5.0.0"
# agt-sandbox 5.0.0 asks for agent-governance-toolkit-cli>=4.1,<6 (and that
# for -core>=4.1,<6): pinned too, so a later 5.x cannot change what is tested.
AGT_REQUIREMENTS = [
    f"agt-sandbox=={AGT_PINNED}",
    f"agent-governance-toolkit-core=={AGT_PINNED}",
    f"agent-governance-toolkit-cli=={AGT_PINNED}",
]
# AutoGen (issue 48): capsule's CodeExecutor against the pinned AutoGen, and
# autogen-ext's own Docker executor tests (its sdist) pointed at it; those
# tests use pytest-asyncio and aiofiles (pinned too).
AUTOGEN_PINNED = "0.7.5"
AUTOGEN_REQUIREMENTS = [
    f"autogen-agentchat=={AUTOGEN_PINNED}",
    f"autogen-core=={AUTOGEN_PINNED}",
    f"autogen-ext=={AUTOGEN_PINNED}",
    "pytest-asyncio==1.5.0",
    "aiofiles==25.1.0",
]
# smolagents (issue 48): capsule's remote Python executor against the pinned
# release, and smolagents' own remote-executor checks from its sdist: that test
# file imports docker (its Docker executor's client) and runs numpy code.
SMOLAGENTS_PINNED = "1.26.0"
SMOLAGENTS_REQUIREMENTS = [f"smolagents=={SMOLAGENTS_PINNED}", "docker==7.2.0", "numpy==2.4.6"]

# CrewAI (issue 48): crewai 1.x dropped crewai-tools' CodeInterpreterTool;
# capsule's tool is a crewai BaseTool, tested against the pinned crewai. Its
# install is ~1 GB and ~4 minutes per user (lancedb, pyarrow, onnxruntime,
# chromadb...), so it runs only with CAPSULE_CONFORMANCE_CREWAI=1.
CREWAI_PINNED = "1.15.30"
CREWAI_REQUIREMENTS = [f"crewai=={CREWAI_PINNED}"]

# agentnode's host LLM broker calls the provider through the ``openai``
# client (not an agentnode dependency); the e2e test points it at a fake
# provider on loopback.
OPENAI_CLIENT = "openai==3.57.0"


# agentnode's installer extracts a pack with ``tarfile.extractall(...,
# filter="data")``: extraction filters came with Python 3.11.4 (and 3.12),
# and Debian 12's python3.11 (3.11.2) has none, so ``install_package``
# raises TypeError there before it builds anything. On such a Python the
# venv gets CPython 3.12's tarfile from PyPI (backports.tarfile) as
# ``tarfile``, through a .pth file: agentnode itself is not touched.
TARFILE_BACKPORT = "backports.tarfile==1.2.0"
_TARFILE_PTH = (
    "import sys, tarfile; hasattr(tarfile, 'data_filter') or "
    "sys.modules.__setitem__('tarfile', __import__('backports.tarfile', fromlist=['tarfile']))\n"
)


def required() -> bool:
    """Whether a conformance environment that cannot be built fails the test
    (CI: ``CAPSULE_CONFORMANCE_REQUIRED=1``) rather than skipping it."""
    return os.environ.get("CAPSULE_CONFORMANCE_REQUIRED", "") == "1"


def agentnode_requirements(version: str) -> list[str]:
    reqs = [f"agentnode-sdk=={version}", OPENAI_CLIENT]
    if not hasattr(tarfile, "data_filter"):
        reqs.append(TARFILE_BACKPORT)
    return reqs


def _package_root() -> Path:
    """Where ``capsule_sandbox`` is imported from: the source tree, or the
    installed wheel's site-packages when scripts/test runs the suite against
    it (the conformance venvs get it on PYTHONPATH either way)."""
    import capsule_sandbox

    return Path(capsule_sandbox.__file__).resolve().parent.parent


PACKAGE_ROOT = _package_root()
CONFORMANCE = HERE / "conformance"
_PIP_TIMEOUT = 900


def _base() -> Path:
    return Path(os.environ.get("CAPSULE_CONFORMANCE_DIR") or tempfile.gettempdir())


def _skip(msg: str, *, optional: bool = False) -> None:
    if required() and not optional:
        pytest.fail(f"CAPSULE_CONFORMANCE_REQUIRED=1, and the conformance environment cannot be built: {msg}",
                    pytrace=False)
    print(f"SKIP: {msg}")
    pytest.skip(msg)


def venv(name: str, requirements: list[str], *, optional: bool = False) -> Path:
    """A venv with ``requirements`` installed (cached); its python's path.

    ``optional``: a venv that cannot be built skips the test even under
    ``CAPSULE_CONFORMANCE_REQUIRED=1``."""
    key = hashlib.sha256("\n".join([sys.version, *requirements]).encode()).hexdigest()[:12]
    root = _base() / f"capsule-conformance-{name}-{os.geteuid()}-{key}"
    python = root / "bin" / "python"
    ok = root / ".capsule-ok"
    lock_path = _base() / f"capsule-conformance-{name}-{os.geteuid()}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ok.exists() and python.exists():
            return python
        done = subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], capture_output=True, text=True)
        if done.returncode != 0:
            _skip(f"cannot create a venv with {sys.executable}: {done.stderr.strip()[-500:]}", optional=optional)
        try:
            done = subprocess.run(
                [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "pytest", *requirements],
                capture_output=True,
                text=True,
                timeout=_PIP_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            _skip(f"pip install {' '.join(requirements)} took over {_PIP_TIMEOUT}s", optional=optional)
        if done.returncode != 0:
            _skip(f"pip install {' '.join(requirements)} failed: {(done.stderr or done.stdout).strip()[-800:]}",
                  optional=optional)
        if TARFILE_BACKPORT in requirements:
            print(f"NOTE: {sys.executable} has no tarfile extraction filters; the {name} venv uses {TARFILE_BACKPORT}")
            site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            Path(site, "capsule-conformance-tarfile.pth").write_text(_TARFILE_PTH)
        ok.write_text("\n".join(requirements) + "\n")
    return python


def sdist(python: Path, requirement: str, name: str, *, optional: bool = False) -> Path:
    """The unpacked source distribution of ``requirement`` (for tests it ships
    that its wheel does not), fetched with pip next to the venv."""
    dest = python.parent.parent / "sdist"
    marker = dest / ".capsule-ok"
    if not marker.exists():
        dest.mkdir(exist_ok=True)
        done = subprocess.run(
            [str(python), "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
             "--no-binary", requirement.split("==")[0], "-d", str(dest), requirement],
            capture_output=True,
            text=True,
            timeout=_PIP_TIMEOUT,
        )
        if done.returncode != 0:
            _skip(f"pip download {requirement} (sdist) failed: {(done.stderr or done.stdout).strip()[-800:]}",
                  optional=optional)
        for archive in dest.glob("*.tar.gz"):
            with tarfile.open(archive) as tar:
                tar.extractall(dest, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(dest)
        marker.write_text(requirement + "\n")
    found = sorted(p for p in dest.iterdir() if p.is_dir() and p.name.startswith(name))
    if not found:
        _skip(f"the {requirement} sdist has no {name}* directory", optional=optional)
    return found[0]


def run_pytest(python: Path, args: list[str], *, capsule_bin: str, env: dict | None = None, cwd: Path | None = None,
               timeout: float = 900) -> subprocess.CompletedProcess:
    """pytest inside the venv, with capsule_sandbox and tests/conformance importable."""
    full = dict(os.environ)
    full.update(env or {})
    full["CAPSULE_BIN"] = capsule_bin
    full["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), str(CONFORMANCE)])
    full["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=str(cwd or tempfile.gettempdir()),
        timeout=timeout,
    )


def example(name: str) -> Path:
    """``examples/code-executors/NAME`` of the checkout (or of
    ``$CAPSULE_TEST_ROOT``); skips when this copy of the tests has none."""
    roots = [HERE.parents[2]]
    if os.environ.get("CAPSULE_TEST_ROOT"):
        roots.insert(0, Path(os.environ["CAPSULE_TEST_ROOT"]))
    for root in roots:
        candidate = root / "examples" / "code-executors" / name
        if candidate.is_file():
            return candidate
    msg = f"examples/code-executors/{name} is not in this copy of the tests"
    print(f"SKIP: {msg}")
    pytest.skip(msg)


def run_example(python: Path, path: Path, *, capsule_bin: str, cwd: Path) -> subprocess.CompletedProcess:
    """An example as a user runs it: the venv's python, capsule_sandbox importable."""
    env = dict(os.environ, CAPSULE_BIN=capsule_bin, PYTHONPATH=str(PACKAGE_ROOT), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([str(python), str(path)], capture_output=True, text=True, env=env, cwd=str(cwd),
                          timeout=600)


def check_example(done: subprocess.CompletedProcess) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    for row in ("task ", "read home ", "write outside ", "network "):
        assert any(line.startswith(row) for line in done.stdout.splitlines()), done.stdout
    assert done.stdout.rstrip().endswith("all escapes failed, the task ran"), done.stdout

"""Fixtures: the real capsule binary, or a clear failure.

The binary is ``$CAPSULE_BIN``, else the debug build under ``<repo>/target``
(``scripts/capsule-path debug``), else (tests run against an installed
wheel) the binary installed with the package, else PATH. A missing
binary, or one whose ``capsule doctor --json`` does not report a working
Landlock + seccomp, FAILS the tests that need it: a sandbox test suite that
skips when the sandbox is absent proves nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent
REPO = HERE.parents[2]
sys.path.insert(0, str(PACKAGE_ROOT))

from capsule_sandbox import CapsuleSandboxProvider  # noqa: E402
from capsule_sandbox._binary import find_binary, probe  # noqa: E402


def _binary_path() -> str:
    if os.environ.get("CAPSULE_BIN"):
        return os.environ["CAPSULE_BIN"]
    # .cargo/config.toml builds for the host triple: target/<triple>/debug/capsule.
    found = sorted((REPO / "target").glob("*/debug/capsule"))
    if found:
        return str(found[0])
    installed, _ = find_binary()  # the wheel's binary, else PATH
    return installed or str(REPO / "target" / "<host triple>" / "debug" / "capsule")


@pytest.fixture(scope="session")
def capsule_bin() -> str:
    path = _binary_path()
    if not os.path.isfile(path):
        pytest.fail(
            f"capsule binary not found at {path}: build it (cargo build; scripts/capsule-path debug "
            "prints where it lands), install the wheel (scripts/build-wheel), or set CAPSULE_BIN",
            pytrace=False,
        )
    avail = probe(path)
    if not avail.available:
        pytest.fail(
            f"capsule at {path} is not usable: {avail.reason} "
            "(a stub binary, or a kernel without Landlock/seccomp)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def doctor(capsule_bin: str) -> dict:
    return probe(capsule_bin).doctor


@pytest.fixture
def audit_log(tmp_path_factory) -> Path:
    # Outside tmp_path: tests grant tmp_path to the sandbox, and capsule
    # refuses an audit log inside a write grant (the child could rewrite it).
    return tmp_path_factory.mktemp("audit") / "audit.jsonl"


@pytest.fixture
def provider(capsule_bin: str, audit_log: Path, tmp_path: Path) -> CapsuleSandboxProvider:
    root = tmp_path / "workspaces"
    root.mkdir()
    return CapsuleSandboxProvider(capsule_bin, workspace_root=root, audit_log=audit_log)


@pytest.fixture
def make_provider(capsule_bin: str, audit_log: Path, tmp_path: Path):
    root = tmp_path / "workspaces-custom"
    root.mkdir()

    def make(**kwargs):
        kwargs.setdefault("workspace_root", root)
        kwargs.setdefault("audit_log", audit_log)
        return CapsuleSandboxProvider(capsule_bin, **kwargs)

    return make


"""Finding the ``capsule`` binary and asking it what this kernel enforces.

Nothing here raises: a missing binary or a kernel without Landlock/seccomp is
reported as an :class:`Availability` with a reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_DOCTOR_TIMEOUT = 20.0


@dataclass(frozen=True)
class Availability:
    """Whether capsule can sandbox on this host, and why not."""

    available: bool
    reason: str
    binary: str | None = None
    doctor: dict[str, Any] = field(default_factory=dict)


DIST_NAME = "capsule-sandbox"


def _installed_distribution() -> Any:
    """This package's installed distribution, or None when it runs from a
    source checkout (or another copy shadows the installed one)."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        dist = metadata.distribution(DIST_NAME)
    except metadata.PackageNotFoundError:
        return None
    try:
        mine = Path(__file__).resolve().parent
        theirs = Path(str(dist.locate_file("capsule_sandbox/__init__.py"))).resolve().parent
    except (OSError, TypeError, ValueError):
        return None
    return dist if mine == theirs else None


def bundled_binary() -> str | None:
    """The ``capsule`` binary installed with this package (the wheel puts it
    in the environment's scripts directory, e.g. ``.venv/bin/capsule``), or
    None when this package is not installed from a wheel that carries it."""
    dist = _installed_distribution()
    if dist is None:
        return None
    candidates: list[Path] = []
    for entry in dist.files or ():
        if entry.name == "capsule" and "capsule_sandbox" not in entry.parts:
            candidates.append(Path(str(dist.locate_file(entry))))
    # Without a RECORD: the scripts directory of this interpreter's scheme,
    # then of the user scheme (pip install --user).
    schemes = [None, f"{os.name}_user"]
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if scripts:
            candidates.append(Path(scripts) / "capsule")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def package_version() -> str:
    """This package's version: the installed distribution's (maturin takes it
    from Cargo.toml), else, in a source checkout, the crate's Cargo.toml."""
    dist = _installed_distribution()
    if dist is not None:
        return str(dist.version)
    cargo = Path(__file__).resolve().parents[3] / "Cargo.toml"
    try:
        text = cargo.read_text(encoding="utf-8")
    except OSError:
        return "0+unknown"
    m = re.search(r'^\[package\][^\[]*?^version\s*=\s*"([^"]+)"', text, re.M | re.S)
    return m.group(1) if m else "0+unknown"


def find_binary(explicit: str | os.PathLike[str] | None = None) -> tuple[str | None, str]:
    """(absolute path, "") or (None, why), looked up in this order: the explicit
    path, ``$CAPSULE_BIN``, the binary installed with this package, PATH."""
    if explicit is not None:
        candidate = os.fspath(explicit)
        source = "binary argument"
    elif os.environ.get("CAPSULE_BIN"):
        candidate = os.environ["CAPSULE_BIN"]
        source = "$CAPSULE_BIN"
    else:
        bundled = bundled_binary()
        if bundled is not None:
            return bundled, ""
        found = shutil.which("capsule")
        if found is None:
            return None, (
                "capsule binary not found (no binary argument, $CAPSULE_BIN unset, "
                "none installed with the capsule-sandbox package, not on PATH)"
            )
        return os.path.abspath(found), ""
    if os.sep not in candidate:
        found = shutil.which(candidate)
        if found is None:
            return None, f"{source} {candidate!r} not found on PATH"
        candidate = found
    candidate = os.path.abspath(candidate)
    if not os.path.isfile(candidate):
        return None, f"{source} {candidate!r} does not exist"
    if not os.access(candidate, os.X_OK):
        return None, f"{source} {candidate!r} is not executable"
    return candidate, ""


def _lookup(doc: dict[str, Any], *paths: tuple[str, ...]) -> Any:
    for path in paths:
        node: Any = doc
        for key in path:
            if isinstance(node, dict) and key in node:
                node = node[key]
            else:
                node = None
                break
        if node is not None:
            return node
    return None


def landlock_abi(doctor: dict[str, Any]) -> int:
    value = _lookup(doctor, ("landlock_abi",), ("landlock", "abi"), ("enforcement", "landlock_abi"))
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, int) else 0


def seccomp_ok(doctor: dict[str, Any]) -> bool:
    value = _lookup(doctor, ("seccomp",), ("enforcement", "seccomp"))
    if isinstance(value, dict):
        value = _lookup(value, ("available",), ("supported",), ("ok",))
    return value is True


def proxy_ok(doctor: dict[str, Any]) -> bool | None:
    """Whether capsule says proxy mode works here (None: it does not say)."""
    value = _lookup(doctor, ("proxy",), ("proxy_support",), ("network", "proxy"))
    if isinstance(value, dict):
        value = _lookup(value, ("available",), ("supported",), ("ok",))
    return value if isinstance(value, bool) else None


def probe(binary: str) -> Availability:
    """Run ``capsule doctor --json`` and judge it."""
    try:
        done = subprocess.run(
            [binary, "doctor", "--json"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_DOCTOR_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Availability(False, f"could not run '{binary} doctor --json': {exc}", binary)
    text = done.stdout.decode("utf-8", "replace").strip()
    try:
        doctor = json.loads(text)
    except ValueError:
        doctor = None
    if not isinstance(doctor, dict):
        err = done.stderr.decode("utf-8", "replace").strip()[:300]
        return Availability(
            False,
            f"'{binary} doctor --json' exited {done.returncode} without a JSON report"
            + (f": {err}" if err else ""),
            binary,
        )
    if landlock_abi(doctor) <= 0:
        return Availability(False, "kernel has no Landlock (landlock_abi 0)", binary, doctor)
    if not seccomp_ok(doctor):
        return Availability(False, "kernel has no usable seccomp filter", binary, doctor)
    return Availability(True, "", binary, doctor)


class AvailabilityCache:
    """Probe once, on first use, thread-safely."""

    def __init__(self, explicit: str | os.PathLike[str] | None) -> None:
        self._explicit = explicit
        self._lock = threading.Lock()
        self._value: Availability | None = None

    def get(self, refresh: bool = False) -> Availability:
        with self._lock:
            if self._value is None or refresh:
                binary, why = find_binary(self._explicit)
                self._value = Availability(False, why) if binary is None else probe(binary)
            return self._value

"""Finding the ``capsule`` binary and asking it what this kernel enforces.

Nothing here raises: a missing binary or a kernel without Landlock/seccomp is
reported as an :class:`Availability` with a reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

_DOCTOR_TIMEOUT = 20.0


@dataclass(frozen=True)
class Availability:
    """Whether capsule can sandbox on this host, and why not."""

    available: bool
    reason: str
    binary: str | None = None
    doctor: dict[str, Any] = field(default_factory=dict)


def find_binary(explicit: str | os.PathLike[str] | None = None) -> tuple[str | None, str]:
    """(absolute path, "") or (None, why): explicit path, ``$CAPSULE_BIN``, PATH."""
    if explicit is not None:
        candidate = os.fspath(explicit)
        source = "binary argument"
    elif os.environ.get("CAPSULE_BIN"):
        candidate = os.environ["CAPSULE_BIN"]
        source = "$CAPSULE_BIN"
    else:
        found = shutil.which("capsule")
        if found is None:
            return None, "capsule binary not found (no binary argument, $CAPSULE_BIN unset, not on PATH)"
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

"""Shared test helpers."""

from __future__ import annotations

import os
import time


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    """Wait until pid is gone (or a zombie); True if it went."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def wait_for_file(path: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.02)
    return False


def procs_with_marker(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (works across pid namespaces)."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if needle in cmdline and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def wait_no_marker(marker: str, seconds: float = 5.0) -> list[int]:
    """Wait until no live process carries ``marker``; return the survivors."""
    deadline = time.monotonic() + seconds
    while True:
        left = procs_with_marker(marker)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)

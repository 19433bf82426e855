"""The package as a user gets it: one version, and (from the wheel) its own
capsule binary, man pages and completions, found with no environment variable.

scripts/test runs this suite twice: from the source tree, and against the
wheel installed into a fresh virtualenv (``CAPSULE_TEST_INSTALLED=1``, no
PYTHONPATH, ``CAPSULE_BIN`` unset). Each branch asserts what must hold there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import capsule_sandbox
from capsule_sandbox import CapsuleSandboxProvider
from capsule_sandbox._binary import bundled_binary, find_binary, package_version

INSTALLED = os.environ.get("CAPSULE_TEST_INSTALLED") == "1"


def _cargo_version() -> str:
    import re

    text = (Path(__file__).resolve().parents[3] / "Cargo.toml").read_text()
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    assert m, "no version in Cargo.toml"
    return m.group(1)


def test_version_is_the_crates(capsule_bin):
    assert capsule_sandbox.__version__ == package_version()
    out = subprocess.run([capsule_bin, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    # "capsule 0.1.0 (commit ...)": the binary and the package agree.
    assert out.stdout.split()[1] == capsule_sandbox.__version__, out.stdout


@pytest.mark.skipif(INSTALLED, reason="the source tree's Cargo.toml is not beside an installed package")
def test_source_checkout_uses_cargo_toml_and_bundles_nothing():
    assert capsule_sandbox.__version__ == _cargo_version()
    assert bundled_binary() is None


@pytest.mark.skipif(not INSTALLED, reason="runs against the installed wheel (scripts/test)")
def test_installed_wheel_finds_its_own_binary(monkeypatch):
    prefix = Path(sys.prefix).resolve()
    assert Path(capsule_sandbox.__file__).resolve().is_relative_to(prefix), (
        f"capsule_sandbox imported from {capsule_sandbox.__file__}, not the venv {prefix}"
    )
    monkeypatch.delenv("CAPSULE_BIN", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    bundled = bundled_binary()
    assert bundled is not None, "the wheel's capsule binary is not found"
    assert Path(bundled).resolve().is_relative_to(prefix), bundled
    assert find_binary() == (bundled, "")
    provider = CapsuleSandboxProvider()
    assert provider.is_available(), provider.unavailable_reason
    assert provider.availability().binary == bundled
    # The explicit argument and $CAPSULE_BIN still come first.
    monkeypatch.setenv("CAPSULE_BIN", "/nonexistent/capsule")
    assert find_binary()[0] is None
    assert find_binary(bundled) == (bundled, "")


@pytest.mark.skipif(not INSTALLED, reason="runs against the installed wheel (scripts/test)")
def test_installed_wheel_ships_man_pages_and_completions():
    share = Path(sys.prefix) / "share"
    for rel, needle in [
        ("man/man1/capsule.1", ".TH capsule 1"),
        ("man/man1/capsule-volume.1", ".TH"),
        ("bash-completion/completions/capsule", "complete"),
        ("zsh/site-functions/_capsule", "#compdef capsule"),
        ("fish/vendor_completions.d/capsule.fish", "complete -c capsule"),
    ]:
        path = share / rel
        assert path.is_file(), f"{path} not installed"
        assert needle in path.read_text(), f"{path} lacks {needle!r}"


def _readme_link_line() -> str:
    """The README's line that puts capsule (and only capsule) on PATH."""
    root = Path(os.environ.get("CAPSULE_TEST_ROOT") or Path(__file__).resolve().parents[3])
    lines = [
        ln.strip()
        for ln in (root / "README.md").read_text(encoding="utf-8").splitlines()
        if ln.startswith("    mkdir -p ~/.local/bin")
    ]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.skipif(not INSTALLED, reason="runs against the installed wheel (scripts/test)")
def test_the_readme_link_line_exposes_capsule_man_and_completion_but_not_the_venv(tmp_path):
    """The README's install line, then its link line (issue 39): `capsule` runs
    by name from ~/.local/bin, `man capsule` finds the wheel's page (man-db maps
    ~/.local/bin to ~/.local/share/man), bash-completion's own loader (2.11 on
    Debian 12) finds the completion by name, and `python3` stays the user's:
    the virtualenv's bin/ is not on PATH."""
    import shutil

    home = tmp_path / "home"
    home.mkdir()
    line = _readme_link_line().replace("~/.venvs/capsule", sys.prefix).replace("~/", f"{home}/")
    env = {"PATH": f"{home}/.local/bin:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    done = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(["capsule", "--version"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith("capsule "), done.stdout + done.stderr
    py = subprocess.run(["sh", "-c", "command -v python3"], env=env, capture_output=True, text=True, timeout=30)
    assert not py.stdout.strip().startswith(sys.prefix), py.stdout
    if shutil.which("man") is None:
        pytest.skip("no man(1) on this machine (apt-get install man-db)")
    where = subprocess.run(["man", "-w", "capsule"], env=env, capture_output=True, text=True, timeout=30)
    assert where.returncode == 0, where.stderr
    # man-db prints the link's target: the wheel's page, found through the link.
    page_path = Path(sys.prefix) / "share" / "man" / "man1" / "capsule.1"
    assert Path(where.stdout.strip()).resolve() == page_path.resolve(), where.stdout
    assert (home / ".local/share/man/man1/capsule.1").resolve() == page_path.resolve()
    page = Path(where.stdout.strip()).read_text()
    assert ".SH EXAMPLES" in page and '.SH "EXIT STATUS"' in page and "capsule\\-help" not in page
    loader = Path("/usr/share/bash-completion/bash_completion")
    if not loader.is_file():
        pytest.skip("no bash-completion on this machine (apt-get install bash-completion)")
    probe = f". {loader}; __load_completion capsule && complete -p capsule"
    comp = subprocess.run(["bash", "-c", probe], env=env, capture_output=True, text=True, timeout=30)
    assert comp.returncode == 0 and "capsule" in comp.stdout, comp.stdout + comp.stderr

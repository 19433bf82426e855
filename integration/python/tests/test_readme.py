"""Every shell command in the two READMEs is run by a test.

The commands are read from the READMEs themselves: the lines of ```sh blocks,
and indented lines that start like a command. Those that use the installed
``capsule`` (or the package) run here, as written, in a scratch directory,
with the README's install paths swapped for the binary and interpreter under
test. The others are listed in ``RUN_ELSEWHERE`` with the test or script
that runs them. A README command in neither place fails the test, so a new
or changed command cannot go unrun.

scripts/test runs this file from the source tree and again against the
installed wheel (then ``CAPSULE_TEST_ROOT`` holds a copy of the READMEs and
``policy/``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("CAPSULE_TEST_ROOT") or Path(__file__).resolve().parents[3])
READMES = [ROOT / "README.md", ROOT / "integration" / "python" / "README.md"]

# The install locations the READMEs use, swapped for what is under test.
VENV_CAPSULE = "~/.venvs/capsule/bin/capsule"
VENV_PYTHON = "/tmp/capsule-venv/bin/python"

# Commands that this file does not run, and what runs them.
RUN_ELSEWHERE = {
    "scripts/build-wheel /tmp/wheels && python3 -m venv ~/.venvs/capsule && "
    "~/.venvs/capsule/bin/pip install /tmp/wheels/capsule_sandbox-*.whl": "scripts/test, section 2b (the same "
    "three steps into its scratch dir)",
    "scripts/build-wheel /tmp/wheels && python3 -m venv /tmp/capsule-venv && "
    "/tmp/capsule-venv/bin/pip install /tmp/wheels/capsule_sandbox-*.whl": "scripts/test, section 2b",
    "cargo install --locked --path . && capsule exec --policy policy/python-agent.yaml -- /usr/bin/python3 "
    "-c 'print(\"hello from the sandbox\")'": "scripts/test, section 2b (cargo install --debug into a scratch "
    "root, then this run)",
    "capsule exec --allow-read ~/.cargo --allow-exec ~/.cargo/bin --allow-exec ~/.rustup/toolchains --allow-read "
    "~/.rustup --allow-write ./target --allow-exec ./target -e CARGO_HOME=$HOME/.cargo -e RUSTUP_HOME=$HOME/.rustup "
    "-- cargo test --locked": "tests/first_hour.rs, the_readme_cargo_step_runs_without_a_policy (it needs the "
    "user's rustup toolchain, which this test's scratch HOME has not)",
    "scripts/bench warm": "by hand (a benchmark: its figures are README's performance table; "
    "tests/serve.rs and test_serve.py test what it times)",
    ".ci/run": "CI (it is what CI runs: the apt/rustup set-up, then scripts/test)",
    'podman run --rm --user 65534 -v "$(command -v capsule)":/usr/local/bin/capsule:ro IMAGE capsule exec -- '
    "python3 -c 'print(\"hello from the sandbox\")'": "scripts/test-containers (scripts/test section 5: the static "
    "binary mounted read-only at /usr/local/bin/capsule of a debootstrap image, run as 65534 in the pod shapes)",
    "mkdir -p ~/.local/bin ~/.local/share/man/man1 ~/.local/share/bash-completion/completions && ln -sf "
    "~/.venvs/capsule/bin/capsule ~/.local/bin/capsule && ln -sf ~/.venvs/capsule/share/man/man1/capsule*.1 "
    "~/.local/share/man/man1/ && ~/.venvs/capsule/bin/capsule completions bash > "
    "~/.local/share/bash-completion/completions/capsule": "test_install.py (capsule, man capsule and the bash "
    "completion by name; python3 stays the user's)",
    "python3 integration/python/examples/agent_demo.py": "test_example.py",
    "python3 -m pytest integration/python/tests -q": "scripts/test, section 2",
    # The kernel matrix boots distribution kernels under qemu: minutes per kernel.
    "cargo build --release": "scripts/kernel-matrix (it takes the static release binary)",
    'scripts/kernel-matrix setup && scripts/kernel-matrix': "scripts/kernel-matrix (boots kernels under qemu)",
    'scripts/kernel-matrix --capsule PATH --kernels deb12-6.1,u2204-5.15': "scripts/kernel-matrix (boots kernels under qemu)",
    'scripts/kernel-matrix --ci': "scripts/kernel-matrix (boots kernels under qemu)",
    # aarch64: the toolchain .ci/run installs; the build and the arm64 guests are by hand (tens of
    # minutes under TCG); CI cross-checks with clippy (scripts/test, section 0b).
    "rustup target add aarch64-unknown-linux-gnu && apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross":
    ".ci/run (installs both for scripts/test's aarch64 cross-check)",
    "cargo build --release --target aarch64-unknown-linux-gnu": "scripts/kernel-matrix's arm64 kernels take it "
    "(by hand; CI: the clippy cross-check of scripts/test, section 0b)",
    "scripts/kernel-matrix setup --arch arm64 && scripts/kernel-matrix --kernels deb12-6.1-arm64,deb13-6.12-arm64":
    "scripts/kernel-matrix (boots arm64 kernels under qemu-system-aarch64)",
    # Tests reach loopback only: the flag is run against a loopback origin there.
    "capsule exec --credential GITHUB_TOKEN@api.github.com -- gh api /user":
    "tests/escape_credentials.rs (credential_flag_injects_a_bearer_token: the same flag, a loopback origin)",
    # Benchmarks: minutes of measurement on an idle machine, not a test.
    "scripts/bench": "not run by the suite (a benchmark)",
    "scripts/bench-proxy terminated": "not run by the suite (a benchmark; tests/escape_credentials.rs and "
    "tests/credentials_clients.rs test what it times)",
    "scripts/bench startup": "not run by the suite (a benchmark; tests/exec_*.rs test what it times)",
    "sudo scripts/bench-phases": "not run by the suite (a benchmark; needs perf uprobes)",
}

_STARTS = ("capsule ", "scripts/", "sudo ", "cargo ", "python3 ", "pip ", "~/", "/tmp/", ".ci/", "export ", "mkdir ")


def _strip_comment(line: str) -> str:
    # A comment is `  # ...` after the command (two spaces before the #).
    return re.split(r"\s{2,}#\s", line, maxsplit=1)[0].rstrip()


def readme_commands() -> list[tuple[str, str]]:
    """(README name, command) for every shell command in the READMEs."""
    found: list[tuple[str, str]] = []
    for readme in READMES:
        in_sh = False
        for raw in readme.read_text(encoding="utf-8").splitlines():
            if raw.startswith("```"):
                in_sh = raw.strip() in ("```sh", "```bash", "```console")
                continue
            if in_sh:
                line = _strip_comment(raw.strip())
            elif raw.startswith("    ") and not raw.startswith("     "):
                line = _strip_comment(raw[4:])
                if not line.startswith(_STARTS):
                    continue
            else:
                continue
            if line and not line.startswith("#"):
                found.append((readme.relative_to(ROOT).as_posix(), line))
    return found


# Commands the README shows exiting non-zero, with that status (its comment says so).
EXITS = {
    # `why` exits 1 when anything asked is refused: the quick tour asks about a refusal.
    "capsule why -p agent.yaml --write notes.txt --connect api.github.com:443": 1,
}


def test_the_readmes_have_commands():
    names = {name for name, _ in readme_commands()}
    assert names == {"README.md", "integration/python/README.md"}, names


def test_every_readme_command_is_run(capsule_bin, tmp_path):
    home = tmp_path / "home"
    work = tmp_path / "work"
    for d in (home, work, work / "out"):
        d.mkdir()
    # What the quick tour's commands expect in their directory.
    (work / "agent.py").write_text('print("agent ran")\n')
    (work / "Makefile").write_text("test:\n\t@echo make test ran\n")
    env = {
        "PATH": f"{os.path.dirname(capsule_bin)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path),
        "CAPSULE_BIN": capsule_bin,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if os.environ.get("CAPSULE_TEST_INSTALLED") != "1":
        # From the source tree: the package comes from there.
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    ran = 0
    for readme, cmd in readme_commands():
        if cmd in RUN_ELSEWHERE:
            continue
        uses_install = cmd.startswith((VENV_CAPSULE, VENV_PYTHON))
        assert cmd.startswith("capsule ") or uses_install, (
            f"{readme}: no test runs this command (run it here, or name its test in RUN_ELSEWHERE): {cmd}"
        )
        line = cmd.replace(VENV_CAPSULE, capsule_bin).replace(VENV_PYTHON, sys.executable)
        # The repository's own files (policy/...) are relative to its root.
        cwd = ROOT if "policy/" in line else work
        done = subprocess.run(
            ["/bin/bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
        )
        # A command the README documents with another exit status.
        want = EXITS.get(cmd, 0)
        assert done.returncode == want, f"{readme}: `{cmd}` exited {done.returncode}\n{done.stdout}\n{done.stderr}"
        if "hello from the sandbox" in cmd:
            assert done.stdout == "hello from the sandbox\n", done.stdout
        if cmd.startswith("capsule exec -- python3 agent.py"):
            # No policy file: the current directory is read-only and the cwd.
            assert done.stdout == "agent ran\n" and "note:" not in done.stderr, done.stdout + done.stderr
        if "print(6 * 7)" in cmd:
            assert done.stdout.strip() == "42", done.stdout + done.stderr
        ran += 1
    assert ran >= 10, f"only {ran} README commands ran"
    assert (work / "agent.yaml").is_file() and (work / "capsule.1").is_file()


@pytest.mark.parametrize("cmd", sorted(RUN_ELSEWHERE))
def test_commands_run_elsewhere_are_still_in_a_readme(cmd):
    assert cmd in {c for _, c in readme_commands()}, f"RUN_ELSEWHERE lists a command no README has: {cmd}"


# --------------------------------------------------------------- Python examples
# Every ```python block of the READMEs runs as written (issue 25): in a
# scratch directory, with the package under test (the wheel's, or the
# source tree's) and the binary under test. A block that imports the
# in-sandbox client runs inside `capsule exec` (that is where it lives).
# A block that needs a third-party package (the Agent Governance Toolkit,
# agentnode) runs in the conformance tests' virtualenv of the real package
# from PyPI (the same cached venv; it skips, or under
# CAPSULE_CONFORMANCE_REQUIRED=1 fails, when that venv cannot be built).
NEEDS_PACKAGE = {
    "agent_sandbox": "tests/test_conformance_agt.py (the real agt-sandbox from PyPI)",
    "agentnode_sdk": "tests/test_conformance_agentnode.py (the real agentnode-sdk from PyPI)",
    "autogen_agentchat": "tests/test_conformance_autogen.py (the real AutoGen from PyPI)",
    "smolagents": "tests/test_conformance_smolagents.py (the real smolagents from PyPI)",
    "crewai": "tests/test_conformance_crewai.py (the real crewai from PyPI; with CAPSULE_CONFORMANCE_CREWAI=1)",
}


def _package_python(name: str) -> str:
    """The interpreter of the conformance venv that has ``name``."""
    from _conformance import (
        AGENTNODE_PINNED,
        AGT_PINNED,
        AGT_REQUIREMENTS,
        AUTOGEN_PINNED,
        AUTOGEN_REQUIREMENTS,
        CREWAI_PINNED,
        CREWAI_REQUIREMENTS,
        SMOLAGENTS_PINNED,
        SMOLAGENTS_REQUIREMENTS,
        agentnode_requirements,
        venv,
    )

    if name == "agent_sandbox":
        return str(venv(f"agt-{AGT_PINNED}", AGT_REQUIREMENTS))
    if name == "autogen_agentchat":
        return str(venv(f"autogen-{AUTOGEN_PINNED}", AUTOGEN_REQUIREMENTS))
    if name == "smolagents":
        return str(venv(f"smolagents-{SMOLAGENTS_PINNED}", SMOLAGENTS_REQUIREMENTS))
    if name == "crewai":
        if os.environ.get("CAPSULE_CONFORMANCE_CREWAI", "") != "1":
            reason = f"crewai=={CREWAI_PINNED} installs ~1 GB: set CAPSULE_CONFORMANCE_CREWAI=1 to run this example"
            print(f"SKIP: {reason}")
            pytest.skip(reason)
        return str(venv(f"crewai-{CREWAI_PINNED}", CREWAI_REQUIREMENTS))
    return str(venv(f"agentnode-{AGENTNODE_PINNED}", agentnode_requirements(AGENTNODE_PINNED)))


def readme_python_blocks() -> list[tuple[str, int, str]]:
    """(README name, line of the opening fence, code) for every ```python block."""
    found: list[tuple[str, int, str]] = []
    for readme in READMES:
        block: list[str] | None = None
        start = 0
        for n, raw in enumerate(readme.read_text(encoding="utf-8").splitlines(), 1):
            if block is None and raw.strip() == "```python":
                block, start = [], n
            elif block is not None and raw.startswith("```"):
                found.append((readme.relative_to(ROOT).as_posix(), start, "\n".join(block) + "\n"))
                block = None
            elif block is not None:
                block.append(raw)
    return found


def _unguarded_import(code: str) -> str | None:
    """The third-party package a block imports outside a try, if any."""
    for line in code.splitlines():
        if line.startswith(("import ", "from ")):
            for name in NEEDS_PACKAGE:
                if re.match(rf"(from|import)\s+{name}\b", line):
                    return name
    return None


def test_the_python_readme_has_python_examples():
    assert len(readme_python_blocks()) >= 5, readme_python_blocks()


@pytest.mark.parametrize(
    "readme,line,code", readme_python_blocks(), ids=[f"{r}:{n}" for r, n, _ in readme_python_blocks()]
)
def test_every_readme_python_example_runs(readme, line, code, capsule_bin, tmp_path):
    import importlib.util

    import capsule_sandbox

    where = f"{readme}:{line}"
    needs = _unguarded_import(code)
    python = sys.executable
    if needs and importlib.util.find_spec(needs) is None:
        python = _package_python(needs)
    work = tmp_path / "work"
    home = tmp_path / "home"
    for d in (work, home):
        d.mkdir()
    package_parent = str(Path(capsule_sandbox.__file__).resolve().parents[1])
    env = {
        "PATH": f"{os.path.dirname(capsule_bin)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path),
        "CAPSULE_BIN": capsule_bin,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    if os.environ.get("CAPSULE_TEST_INSTALLED") != "1" or python != sys.executable:
        env["PYTHONPATH"] = package_parent
    inside = code.startswith("from capsule_sandbox.client import")
    if inside:
        # Inside the sandbox: the client from the package under test, on a
        # read-only PYTHONPATH (capsule refuses a writable one).
        argv = [capsule_bin, "exec", "--allow-read", package_parent, "-e", f"PYTHONPATH={package_parent}",
                "--", "/usr/bin/python3", "-c", code]
    else:
        argv = [python, "-c", code]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{where} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    if inside:
        # No tool is allowed in a bare run: the example's except branch prints the reason.
        assert done.stdout.startswith("not_allowed"), done.stdout + done.stderr
    if "CapsuleBackend()" in code and "run_process" in code:
        assert done.stdout.startswith('0 {"got": {"q": 1}}'), done.stdout + done.stderr
        assert '{\'got\': {\'type\': \'task\'}}' in done.stdout, done.stdout + done.stderr
    if "create_session" in code and "lookup" in code:
        # The tool ran on the host and its answer came back into the sandbox.
        assert "'value': 42" in done.stdout and "COMPLETED" in done.stdout.upper().split()[0], done.stdout + done.stderr

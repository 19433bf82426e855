"""agentnode's SandboxBackend contract on CapsuleBackend (issues 11 #12, 13).

tests/test_conformance_agentnode.py drives the real agentnode-sdk."""

from __future__ import annotations

import json
import os
import sys

import pytest

from capsule_sandbox import CapsuleBackend, MountSpec, ProcessSpec, SandboxRequiredError
from capsule_sandbox.backend import package_index_hosts


@pytest.fixture
def backend(capsule_bin, audit_log):
    b = CapsuleBackend(capsule_bin, agent_id="agentnode-test", audit_log=audit_log, index_hosts=["pypi.org"])
    yield b
    b.close()


def _policy_of(argv):
    return json.loads(open(argv[argv.index("--policy") + 1]).read())


@pytest.mark.parametrize("code", [124, 125, 1])
def test_child_exit_status_is_only_an_exit_code(backend, code):
    outcome = backend.run_process(ProcessSpec(command=["sh", "-c", f"echo out; exit {code}"]), timeout=30)
    assert outcome == (code, "out\n", "")
    assert outcome.reason == "exited"


def test_signal_is_128_plus_n_and_never_minus_one(backend):
    outcome = backend.run_process(ProcessSpec(command=["sh", "-c", "kill -HUP $$"]), timeout=30)
    assert outcome.reason == "signaled"
    assert outcome.exit_code == 129  # -1 would read as a timeout to agentnode


def test_refusal_raises(backend, tmp_path):
    spec = ProcessSpec(command=["true"], limits={"max_processes": 0})
    with pytest.raises(SandboxRequiredError, match="max_processes"):
        backend.run_process(spec, timeout=30)


def test_open_agent_session_refused_spec_is_a_clear_error(backend):
    spec = ProcessSpec(command=[sys.executable, "-c", "import sys; sys.stdin.read()"], limits={"max_processes": 0})
    with pytest.raises(SandboxRequiredError, match="refused the agent session.*max_processes"):
        backend.open_agent_session(spec)


def test_a_session_program_exiting_125_is_not_a_refusal(backend):
    """issue 11 #12: in a session the program's exit status is its own. One
    that prints a capsule-like refusal line and exits 125 is a process that
    ended, not capsule refusing (which could send a framework to a fallback)."""
    forged = "echo 'capsule: refused: protection unavailable (forged by the program)' >&2; exit 125"
    session = backend.open_agent_session(ProcessSpec(command=["sh", "-c", forged], interactive=True))
    try:
        assert session.recv(30) is None  # the program ran and ended
        assert session.returncode == 125
        with pytest.raises(Exception) as info:
            for _ in range(50):  # until the pipe reports the reader gone
                session.send({"type": "hello"})
        assert not isinstance(info.value, SandboxRequiredError), info.value
        assert "exit 125" in str(info.value), info.value
    finally:
        session.close()


def test_a_session_capsule_refuses_is_still_a_refusal(backend, tmp_path):
    """The other half: capsule's own refusal of a session spec (its verdict
    before the program exists) raises SandboxRequiredError."""
    spec = ProcessSpec(
        command=[sys.executable, "-c", "import sys; sys.stdin.read()"],
        interactive=True,
        limits={"max_processes": 0},
    )
    with pytest.raises(SandboxRequiredError, match="capsule refused the agent session"):
        backend.open_agent_session(spec)


def test_a_session_this_host_cannot_give_is_refused_before_it_starts(backend, tmp_path, monkeypatch):
    """A valid spec this host cannot enforce (a mount at another path without
    the mount namespace CAPSULE_NO_NAMESPACES=1 takes away): capsule's
    --dry-run names the problem, and the session is refused before the
    program exists."""
    monkeypatch.setenv("CAPSULE_NO_NAMESPACES", "1")
    spec = ProcessSpec(
        command=[sys.executable, "-c", "import sys; sys.stdin.read()"],
        interactive=True,
        mounts=[MountSpec(str(tmp_path), "/capsule-test-elsewhere", True)],
    )
    with pytest.raises(SandboxRequiredError, match="refused the agent session: .*mount namespace"):
        backend.open_agent_session(spec)


def test_a_session_that_dies_logs_its_exit_code_and_stderr(backend, caplog):
    """A framework sees only EOF when the sandboxed agent dies; the reason must
    reach the host's log (exit code and stderr), not vanish with the pipe."""
    spec = ProcessSpec(command=["sh", "-c", "echo agent-broke-here >&2; exit 3"], interactive=True)
    session = backend.open_agent_session(spec)
    try:
        with caplog.at_level("WARNING", logger="capsule_sandbox"):
            assert session.recv(30) is None
    finally:
        session.close()
    text = caplog.text
    assert "exit 3" in text and "agent-broke-here" in text, text


@pytest.mark.parametrize("network", ["restricted", "default"])
def test_restricted_and_default_network_is_the_proxy_to_package_indexes(capsule_bin, network):
    b = CapsuleBackend(capsule_bin, index_hosts=["pypi.org", "files.pythonhosted.org"], network_hosts=["wheels.example.com"])
    try:
        net = _policy_of(b.wrap_command(ProcessSpec(command=["true"], network=network)))["network"]
        assert net == {"mode": "proxy", "allow_hosts": ["pypi.org", "files.pythonhosted.org", "wheels.example.com"]}
        net = _policy_of(b.wrap_command(ProcessSpec(command=["true"], network=network, allow_hosts=["a.example"])))["network"]
        assert net == {"mode": "proxy", "allow_hosts": ["a.example"]}
        net = _policy_of(b.wrap_command(ProcessSpec(command=["true"], network="unrestricted")))["network"]
        assert net == {"mode": "unrestricted"}
    finally:
        b.close()


def test_package_index_hosts_follow_pip_and_npm_config(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://mirror.example.org:8443/simple\nextra-index-url = https://extra.example.net/simple\n"
    )
    (home / ".npmrc").write_text("registry=https://npm.example.com/\n//npm.example.com/:_authToken=SECRET\n")
    hosts = package_index_hosts({"HOME": str(home)})
    assert hosts == ["mirror.example.org:8443", "extra.example.net", "npm.example.com"]
    assert package_index_hosts({"HOME": str(tmp_path / "empty")}) == [
        "pypi.org", "files.pythonhosted.org", "registry.npmjs.org",
    ]
    assert package_index_hosts({"HOME": str(tmp_path / "empty"), "PIP_INDEX_URL": "https://pypi.org/simple"}) == [
        "registry.npmjs.org", "pypi.org", "files.pythonhosted.org",
    ]


def test_bare_python_is_the_hosts_python3(backend, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if any(os.path.exists(os.path.join(d, "python")) for d in ("/usr/bin", "/bin")):
        pytest.skip("this host has a `python` on PATH")
    rc, out, err = backend.run_process(ProcessSpec(command=["python", "-c", "print(6 * 7)"]), timeout=30)
    assert (rc, out) == (0, "42\n"), err
    rc, out, err = backend.run_process(ProcessSpec(command=["sh", "-c", "python -c 'print(1 + 1)'"]), timeout=30)
    assert (rc, out) == (0, "2\n"), err


def test_tmpdir_tmp_is_accepted(backend):
    rc, out, err = backend.run_process(
        ProcessSpec(command=["sh", "-c", "echo ok > $TMPDIR/f && cat $TMPDIR/f"], env={"TMPDIR": "/tmp"}), timeout=30
    )
    assert (rc, out) == (0, "ok\n"), err


def test_pythonpath_only_from_read_only_places(backend, tmp_path):
    ro = tmp_path / "ro"
    rw = tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    with pytest.raises(SandboxRequiredError, match="PYTHONPATH"):
        backend.wrap_command(ProcessSpec(command=["true"], env={"PYTHONPATH": str(rw)},
                                         mounts=[MountSpec(str(rw), str(rw), read_only=False)]))
    with pytest.raises(SandboxRequiredError, match="PYTHONPATH"):
        backend.wrap_command(ProcessSpec(command=["true"], env={"PYTHONPATH": "/somewhere/else"}))
    with pytest.raises(SandboxRequiredError, match="PYTHONPATH"):
        backend.wrap_command(ProcessSpec(command=["true"], env={"PYTHONPATH": f"{ro}:relative"}, read_only_mounts=[str(ro)]))
    argv = backend.wrap_command(ProcessSpec(command=["true"], env={"PYTHONPATH": str(ro)}, read_only_mounts=[str(ro)]))
    assert _policy_of(argv)["env"]["set"]["PYTHONPATH"] == str(ro)


def test_remapped_mounts_need_capsule_mount(backend, tmp_path):
    spec = ProcessSpec(command=["true"], mounts=[MountSpec("agentnode-pack-x", "/pack", read_only=True)])
    if backend.features().mount:
        argv = backend.wrap_command(ProcessSpec(command=["true"], mounts=[MountSpec(str(tmp_path), "/src", True)]))
        assert argv[argv.index("--mount") + 1] == f"{os.path.realpath(tmp_path)}:/src:ro"
        return
    with pytest.raises(SandboxRequiredError, match="--mount"):
        backend.wrap_command(spec)
    with pytest.raises(SandboxRequiredError, match="--mount"):
        backend.wrap_command(ProcessSpec(command=["true"], mounts=[MountSpec(str(tmp_path), "/src", True)]))


def _need(backend, *what):
    f = backend.features()
    missing = [w for w in what if not getattr(f, w)]
    if missing:
        # Every capsule built from this tree has both: a binary without them is
        # the wrong one, not a machine that lacks something.
        pytest.fail(f"capsule at {backend.check_available().backend} lacks {', '.join(missing)} "
                    "(capsule exec --mount, capsule volume): an old binary? set CAPSULE_BIN", pytrace=False)


def test_a_volume_made_for_a_refused_run_is_removed(backend, capsule_bin, tmp_path, monkeypatch):
    """A read-write volume the backend creates for a run that capsule then
    refuses (here: a mount at another path, which needs the view that
    CAPSULE_NO_NAMESPACES=1 takes away) is removed again: nothing ran, and
    agentnode does not clean up after a backend that raises."""
    _need(backend, "mount", "volume")
    import subprocess

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("CAPSULE_NO_NAMESPACES", "1")
    vol = "capsule-test-refused-vol"
    spec = ProcessSpec(command=["sh", "-c", "echo never"], mounts=[MountSpec(vol, "/install", False)])
    try:
        with pytest.raises(SandboxRequiredError):
            backend.run_process(spec, timeout=30)
        left = subprocess.run([capsule_bin, "volume", "inspect", vol], capture_output=True, text=True)
        assert left.returncode != 0, f"the volume stayed: {left.stdout}"
    finally:
        subprocess.run([capsule_bin, "volume", "rm", "-f", vol], capture_output=True)


def test_volume_build_then_run_at_pack(backend, capsule_bin, tmp_path, monkeypatch):
    """agentnode's layout: source ro at /src, volume rw at /install, then the
    volume ro at /pack with PYTHONPATH=/pack."""
    _need(backend, "mount", "volume")
    import subprocess

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello_pack.py").write_text("def hi():\n    return 'hi from /pack'\n")
    vol = "capsule-test-vol"
    build = ProcessSpec(
        command=["sh", "-c", "cp /src/hello_pack.py /install/ && echo built"],
        mounts=[MountSpec(str(src), "/src", True), MountSpec(vol, "/install", False)],
    )
    try:
        rc, out, err = backend.run_process(build, timeout=60)
        assert (rc, out) == (0, "built\n"), err
        run = ProcessSpec(
            command=["python", "-c", "import hello_pack; print(hello_pack.hi())"],
            mounts=[MountSpec(vol, "/pack", True)],
            env={"PYTHONPATH": "/pack"},
        )
        rc, out, err = backend.run_process(run, timeout=60)
        assert (rc, out) == (0, "hi from /pack\n"), err
        # Read-only at /pack: the run cannot change the installed code.
        rc, _, _ = backend.run_process(
            ProcessSpec(command=["sh", "-c", "echo x > /pack/evil.py"], mounts=[MountSpec(vol, "/pack", True)]), timeout=60
        )
        assert rc != 0
    finally:
        subprocess.run([capsule_bin, "volume", "rm", "-f", vol], capture_output=True)

"""The agentnode-style backend: CapsuleBackend + ProcessSpec."""

from __future__ import annotations

import json
import os
import re
import subprocess
import socket
import sys

import pytest

from capsule_sandbox import CapsuleBackend, MountSpec, ProcessSpec, SandboxRequiredError


@pytest.fixture
def backend(capsule_bin, audit_log):
    b = CapsuleBackend(capsule_bin, agent_id="agentnode-test", audit_log=audit_log)
    yield b
    b.close()


def test_check_available(backend, capsule_bin):
    avail = backend.check_available()
    assert avail.available, avail.reason
    # agentnode runs `<backend> volume ...`: backend is the capsule executable.
    assert avail.backend == capsule_bin
    assert avail.executable_path == capsule_bin
    assert avail.daemon_ok is True and avail.image_available is True
    # As documented: `capsule <version>`, the version of the binary (the crate's).
    version = json.loads(subprocess.run([capsule_bin, "doctor", "--json"], capture_output=True, text=True).stdout)[
        "version"
    ]
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", version), version
    assert avail.image_digest == f"capsule {version}", avail.image_digest
    assert avail.landlock_abi >= 1


def test_wrap_command_builds_capsule_argv(backend, capsule_bin):
    spec = ProcessSpec(command=["echo", "hi"], env={"A": "1"}, limits={"memory": "256m", "timeout": 5})
    argv = backend.wrap_command(spec)
    assert argv[0] == capsule_bin and argv[1] == "exec"
    assert argv[argv.index("--") + 1 :] == ["echo", "hi"]
    assert "--agent-id" in argv and "agentnode-test" in argv


def test_run_process_with_stdin(backend):
    spec = ProcessSpec(command=[sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"])
    outcome = backend.run_process(spec, input_text="hello sandbox", timeout=30)
    rc, out, err = outcome
    assert rc == 0, err
    assert out == "HELLO SANDBOX\n"
    assert outcome.reason == "exited"


def test_run_process_exit_code_and_timeout(backend):
    rc, _, _ = backend.run_process(ProcessSpec(command=["sh", "-c", "exit 4"]), timeout=30)
    assert rc == 4
    outcome = backend.run_process(ProcessSpec(command=["sleep", "30"]), timeout=1)
    assert outcome.reason == "timeout"
    # agentnode's run paths check `returncode == -1` for a timeout.
    assert outcome.exit_code == -1 and outcome[0] == -1 and outcome.native_status == 124


def test_read_only_mounts(backend, tmp_path):
    (tmp_path / "f.txt").write_text("mounted")
    spec = ProcessSpec(command=["cat", str(tmp_path / "f.txt")], read_only_mounts=[str(tmp_path)])
    rc, out, err = backend.run_process(spec, timeout=30)
    assert rc == 0, err
    assert out == "mounted"
    spec = ProcessSpec(command=["sh", "-c", f"echo x > {tmp_path}/new.txt"], read_only_mounts=[str(tmp_path)])
    rc, _, _ = backend.run_process(spec, timeout=30)
    assert rc != 0
    assert not (tmp_path / "new.txt").exists()
    spec = ProcessSpec(command=["sh", "-c", f"echo x > {tmp_path}/new.txt"], mounts=[MountSpec(str(tmp_path), str(tmp_path), read_only=False)])
    rc, _, err = backend.run_process(spec, timeout=30)
    assert rc == 0, err
    assert (tmp_path / "new.txt").read_text() == "x\n"


def test_network_none_by_default(backend):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = (
        "import socket\ntry:\n"
        f" socket.create_connection(('127.0.0.1', {port}), 2)\n print('CONNECTED')\n"
        "except OSError:\n print('blocked')"
    )
    try:
        rc, out, err = backend.run_process(ProcessSpec(command=[sys.executable, "-c", code]), timeout=30)
        assert out.strip() == "blocked", err
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


def test_fail_closed_specs(backend):
    with pytest.raises(SandboxRequiredError):
        backend.wrap_command(ProcessSpec(command=["true"], network="egress"))
    with pytest.raises(SandboxRequiredError):
        backend.wrap_command(ProcessSpec(command=["true"], network="bogus"))
    # A remapping mount becomes --mount; capsule refuses it at run time when
    # the destination cannot exist in the view.
    # (A missing top-level destination is made in a new root; a deeper one
    # under an existing host directory cannot be.)
    remap = ProcessSpec(command=["true"], mounts=[MountSpec("/tmp", "/usr/capsule-no-such-dir/x")])
    assert "--mount" in backend.wrap_command(remap)
    with pytest.raises(SandboxRequiredError):
        backend.run_process(remap, timeout=30)
    with pytest.raises(ValueError):
        backend.wrap_command(ProcessSpec(command=["true"], env={"LD_PRELOAD": "x"}))
    with pytest.raises(ValueError):
        backend.wrap_command(ProcessSpec(command=["true"], read_only_mounts=["/etc"]))
    argv = backend.wrap_command(ProcessSpec(command=["true"], network="egress", allow_hosts=["api.example.com"]))
    assert argv[-1] == "true"


def test_unavailable_backend_refuses():
    b = CapsuleBackend("/nonexistent/capsule")
    assert b.check_available().available is False
    assert b.explain_unavailable()
    with pytest.raises(SandboxRequiredError):
        b.wrap_command(ProcessSpec(command=["true"]))


def test_open_agent_session(backend):
    agent = (
        "import sys, json\n"
        "for line in sys.stdin:\n"
        "    msg = json.loads(line)\n"
        "    print(json.dumps({'echo': msg, 'n': len(line)}), flush=True)\n"
    )
    session = backend.open_agent_session(ProcessSpec(command=[sys.executable, "-c", agent], interactive=True))
    try:
        session.send({"type": "hello", "value": 1})
        assert session.recv(timeout=30) == {"echo": {"type": "hello", "value": 1}, "n": 27}
        session.send({"type": "second"})
        assert session.recv(timeout=30)["echo"] == {"type": "second"}
        with pytest.raises(TimeoutError):
            session.recv(timeout=0.3)
    finally:
        session.close()
    assert session.recv(timeout=5) is None
    assert session.returncode == 0


def _tmp_mount(mountinfo: str) -> tuple[str, str]:
    """(filesystem type, super options) of the mount at /tmp in a mountinfo dump."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/tmp" and " - " in line:
            fstype, _source, options = line.split(" - ", 1)[1].split()[:3]
            return fstype, options
    raise AssertionError(f"no /tmp mount in:\n{mountinfo}")


@pytest.mark.parametrize("size,kib", [("16m", 16384), ("24m", 24576)])
def test_limits_tmp_size_sizes_the_private_tmp(backend, doctor, size, kib):
    """agentnode's build spec asks for ``limits={"tmp_size": "512m"}``: the
    backend passes it as ``capsule exec --tmp-size``, and the run's /tmp is a
    tmpfs of that size."""
    spec = backend.build_process_spec(
        ["sh", "-c", "df -k /tmp; echo ---; cat /proc/self/mountinfo"], limits={"tmp_size": size}
    )
    argv = backend.wrap_command(spec)
    sep = argv.index("--")
    assert "--tmp-size" in argv[:sep], argv
    assert argv[argv.index("--tmp-size") + 1] == size
    if os.environ.get("CAPSULE_NO_NAMESPACES") == "1" or not (doctor.get("default_policy") or {}).get("view"):
        msg = ("a private /tmp needs the run's own mount namespace (no user namespaces here, or "
               "CAPSULE_NO_NAMESPACES=1): limits.tmp_size has no /tmp to size")
        print(f"SKIP: {msg}")
        pytest.skip(msg)
    rc, out, err = backend.run_process(spec, timeout=30)
    assert rc == 0, err
    df, mountinfo = out.split("---\n", 1)
    fstype, options = _tmp_mount(mountinfo)
    assert fstype == "tmpfs" and f"size={kib}k" in options.split(","), (fstype, options)
    row = df.strip().splitlines()[-1].split()
    assert row[-1] == "/tmp" and int(row[1]) == kib, df


def test_a_missing_mount_is_named_in_the_specs_words(backend, tmp_path):
    """Issue 25: the error quoted the backend's internal policy file."""
    spec = ProcessSpec(command=["python3", "-c", "print(1)"], read_only_mounts=[str(tmp_path / "no-such-pack")])
    with pytest.raises(SandboxRequiredError) as err:
        backend.run_process(spec, input_text="", timeout=30)
    msg = str(err.value)
    assert "ProcessSpec.read_only_mounts" in msg and "does not exist on this host" in msg, msg
    assert "policy-" not in msg and "capsule-backend-" not in msg, msg


def test_capsule_errors_name_the_spec_not_the_policy_file():
    from capsule_sandbox.backend import _spec_words

    text = "/tmp/capsule-backend-ab12/policy-0123456789abcdef01234567.json:3:7: filesystem.read[0]: `/x` does not exist"
    assert _spec_words(text) == "the ProcessSpec, as capsule policy key filesystem.read[0]: `/x` does not exist"

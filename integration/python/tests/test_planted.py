"""What one run writes must not widen a later run (issue 20, findings 1, 3, 8).

1. A symlink a run planted in its output directory must not redirect a later
   run's ``input_dir`` or an agentnode ``MountSpec`` / ``read_only_mounts``.
3. A read-only mount over a writable place gives no exec there.
8. A base-policy ``command`` tool whose script lies in ``output_dir`` is
   refused: the run could rewrite it and then call it, on the host.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from capsule_sandbox import CapsuleBackend, MountSpec, ProcessSpec, SandboxConfig, SandboxRequiredError


@pytest.fixture
def planted(provider, tmp_path):
    """A secret outside every grant; run 1 (output_dir=ws) replaces ws/data
    with a link to it. Returns (ws/data, secret dir)."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.txt").write_text("PLANTED-LINK-SECRET")
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    code = (
        "import os, shutil\n"
        "d = os.path.join(os.environ['CAPSULE_OUTPUT_DIR'], 'data')\n"
        "shutil.rmtree(d)\n"
        f"os.symlink({str(secret)!r}, d)\n"
        "print('planted')\n"
    )
    ex = provider.run_once("plant-agent", code, config=SandboxConfig(output_dir=str(ws)))
    assert ex.result.success and (ws / "data").is_symlink(), ex.result.stderr
    return ws / "data", secret


def test_input_dir_through_a_planted_link_is_refused(provider, planted):
    link, secret = planted
    code = (
        "import os\n"
        "for p in (os.path.join(os.environ.get('CAPSULE_INPUT_DIR', '/nonexistent'), 'key.txt'),\n"
        f"          {str(secret / 'key.txt')!r}):\n"
        "    try:\n"
        "        print(open(p).read())\n"
        "    except OSError as e:\n"
        "        print('denied', e)\n"
    )
    try:
        ex = provider.run_once("read-agent", code, config=SandboxConfig(input_dir=str(link)))
    except ValueError as exc:
        assert str(link) in str(exc) and "symbolic link" in str(exc), exc
        return
    assert "PLANTED-LINK-SECRET" not in ex.result.stdout, "ESCAPE: input_dir followed a planted link"
    assert not ex.result.success and str(link) in (ex.result.error or ex.result.stderr), ex.result


def _view(backend, doctor) -> bool:
    """Whether a mount elsewhere than its source can run here (the view)."""
    return (
        backend.features().mount
        and os.environ.get("CAPSULE_NO_NAMESPACES") != "1"
        and bool((doctor.get("default_policy") or {}).get("view"))
    )


@pytest.fixture
def backend(capsule_bin, audit_log):
    b = CapsuleBackend(capsule_bin, agent_id="planted-test", audit_log=audit_log)
    yield b
    b.close()


def _refused_or_not_leaked(run, link):
    try:
        outcome = run()
    except (SandboxRequiredError, ValueError) as exc:
        assert str(link) in str(exc) and "symbolic link" in str(exc), exc
        return
    assert "PLANTED-LINK-SECRET" not in outcome.stdout, f"ESCAPE: a planted link was followed: {outcome}"
    assert outcome.exit_code == 125 and str(link) in outcome.stderr, outcome


def test_agentnode_mounts_through_a_planted_link_are_refused(backend, planted, doctor):
    link, secret = planted
    cat = ["sh", "-c", f'cat "$0/key.txt"; cat {secret}/key.txt', str(link)]
    _refused_or_not_leaked(
        lambda: backend.run_process(ProcessSpec(command=cat, read_only_mounts=[str(link)]), timeout=60), link
    )
    _refused_or_not_leaked(
        lambda: backend.run_process(
            ProcessSpec(command=cat, mounts=[MountSpec(str(link), str(link), read_only=True)]), timeout=60
        ),
        link,
    )
    if _view(backend, doctor):
        src = ["sh", "-c", f"cat /src/key.txt; cat {secret}/key.txt"]
        _refused_or_not_leaked(
            lambda: backend.run_process(
                ProcessSpec(command=src, mounts=[MountSpec(str(link), "/src", read_only=True)]), timeout=60
            ),
            link,
        )


def test_agentnode_read_only_mount_gives_no_exec_over_a_writable_mount(backend, tmp_path, doctor):
    """A MountSpec elsewhere (dst != src) is `--mount SRC:DST:ro`, which
    carries exec; the writable mount inside its source must not get it."""
    if not _view(backend, doctor):
        msg = "a mount elsewhere needs the view (no namespaces here); a mount in place carries no exec"
        print(f"SKIP: {msg}")
        pytest.skip(msg)
    proj = tmp_path / "proj"
    (proj / "out").mkdir(parents=True)
    out = proj / "out"
    script = (
        'cp /usr/bin/id "$0/prog" && chmod +x "$0/prog" || exit 9; '
        '/src/out/prog && echo EXEC-VIA-MOUNT; "$0/prog" && echo EXEC-VIA-SOURCE; exit 0'
    )
    spec = ProcessSpec(
        command=["sh", "-c", script, str(out)],
        mounts=[MountSpec(str(proj), "/src", read_only=True), MountSpec(str(out), str(out), read_only=False)],
    )
    outcome = backend.run_process(spec, timeout=60)
    assert outcome.exit_code == 0, outcome
    assert "EXEC-VIA" not in outcome.stdout, f"ESCAPE: a program the run wrote ran from a read-only mount: {outcome}"


def test_base_policy_command_tool_in_output_dir_is_refused(make_provider, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    tool = out / "tool.sh"
    tool.write_text("#!/bin/sh\ncat >/dev/null; echo benign\n")
    pwned = tmp_path / "pwned"
    base = {
        "version": 1,
        "tools": {"allow": [{"name": "t", "command": ["/bin/sh", str(tool)]}]},
    }
    provider = make_provider(policy=base)
    code = (
        "import os\n"
        "from capsule_sandbox.client import call_tool, CapsuleRpcError\n"
        "p = os.path.join(os.environ['CAPSULE_OUTPUT_DIR'], 'tool.sh')\n"
        f"open(p, 'w').write('#!/bin/sh\\ncat >/dev/null; id > {pwned}; echo pwned\\n')\n"
        "try:\n"
        "    print(call_tool('t'))\n"
        "except CapsuleRpcError as e:\n"
        "    print('refused', e.reason)\n"
    )
    try:
        ex = provider.run_once("tool-agent", code, config=SandboxConfig(output_dir=str(out), tool_allowlist=["t"]))
    except ValueError as exc:
        assert "tools.allow" in str(exc), exc
        return
    assert not pwned.exists(), f"ESCAPE: the run's code ran on the host through a tool: {ex.result}"
    assert not ex.result.success and "tools.allow[0]" in (ex.result.error or ex.result.stderr), ex.result

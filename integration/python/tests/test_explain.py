"""``explain=True``: a failed execution carries the sandbox's denials
(``capsule exec --explain``) and its error names the first one."""

from __future__ import annotations

from pathlib import Path

import pytest


def _secret(tmp_path_factory) -> Path:
    # Outside every grant (and outside the provider's workspaces).
    d = tmp_path_factory.mktemp("outside")
    p = d / "secret.txt"
    p.write_text("s3cret\n")
    return p


def test_a_failed_execution_carries_the_denials(make_provider, tmp_path_factory):
    secret = _secret(tmp_path_factory)
    provider = make_provider(explain=True)
    handle = provider.run_once("agent-explain", f"print(open({str(secret)!r}).read())")
    r = handle.result
    assert r is not None and not r.success, r
    if not r.raw.get("explain", {}).get("files"):
        pytest.skip(f"capsule cannot observe file accesses here: {r.raw.get('explain')}")
    question = f"read {secret}"
    found = [d for d in r.denials if d.get("question") == question]
    assert found, r.denials
    assert found[0]["verdict"] == "refused"
    assert "filesystem.read" in (found[0].get("change") or ""), found[0]
    # The error names the first denial, with the change that would allow it.
    assert r.error.startswith("the sandbox refused "), r.error
    assert "to allow" in r.error or "no policy change" in r.error, r.error
    first = r.denials[0]["question"]
    assert first in r.error, r.error


def test_without_explain_there_are_no_denials(provider, tmp_path_factory):
    secret = _secret(tmp_path_factory)
    handle = provider.run_once("agent-plain", f"print(open({str(secret)!r}).read())")
    r = handle.result
    assert r is not None and not r.success
    assert r.denials == []
    assert "denials" not in r.raw
    assert "the sandbox refused" not in r.error


def test_run_carries_the_denials_too(make_provider, tmp_path_factory):
    secret = _secret(tmp_path_factory)
    provider = make_provider(explain=True)
    r = provider.run("agent-explain-run", ["/bin/cat", str(secret)])
    assert not r.success, r
    if not r.raw.get("explain", {}).get("files"):
        pytest.skip(f"capsule cannot observe file accesses here: {r.raw.get('explain')}")
    assert any(d.get("question") == f"read {secret}" for d in r.denials), r.denials
    assert str(secret) in r.error, r.error


def test_writes_in_the_runs_own_tmp_are_not_denials(make_provider):
    # Issue 39: a directory made in the run's private /tmp (tempfile, as
    # pytest's tmp_path) and a file in it were listed as refused, with "/"
    # as the grant to add.
    provider = make_provider(explain=True)
    code = (
        "import os, tempfile\n"
        "d = tempfile.mkdtemp()\n"
        "os.makedirs(d + '/a/b')\n"
        "open(d + '/a/b/f', 'w').write('x')\n"
        "print(open(d + '/a/b/f').read())\n"
    )
    r = provider.run_once("agent-explain-tmp", code).result
    assert r is not None and r.success, r
    if not r.raw.get("explain", {}).get("files"):
        pytest.skip(f"capsule cannot observe file accesses here: {r.raw.get('explain')}")
    assert r.denials == [], r.denials

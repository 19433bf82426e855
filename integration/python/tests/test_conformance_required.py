"""CAPSULE_CONFORMANCE_REQUIRED=1 (set by .ci/run): a conformance venv that
cannot be built fails the test instead of skipping it, so CI cannot pass with
the real-framework tests silently skipped; locally it skips with the reason."""

from __future__ import annotations

import pytest

import _conformance


def _broken_venv(tmp_path, monkeypatch, **kwargs):
    # pip with no index and nothing to find: the install fails, fast, offline.
    monkeypatch.setenv("CAPSULE_CONFORMANCE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    return _conformance.venv("required-check", ["capsule-conformance-no-such-package==0"], **kwargs)


def test_unbuildable_venv_fails_when_required(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSULE_CONFORMANCE_REQUIRED", "1")
    with pytest.raises(pytest.fail.Exception, match="CAPSULE_CONFORMANCE_REQUIRED=1.*capsule-conformance-no-such"):
        _broken_venv(tmp_path, monkeypatch)


def test_unbuildable_optional_venv_skips_even_when_required(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSULE_CONFORMANCE_REQUIRED", "1")
    with pytest.raises(pytest.skip.Exception, match="capsule-conformance-no-such"):
        _broken_venv(tmp_path, monkeypatch, optional=True)


def test_unbuildable_venv_skips_locally(tmp_path, monkeypatch):
    monkeypatch.delenv("CAPSULE_CONFORMANCE_REQUIRED", raising=False)
    with pytest.raises(pytest.skip.Exception, match="capsule-conformance-no-such"):
        _broken_venv(tmp_path, monkeypatch)

"""Credential and HostRule render the policy of contract section 8.

The rendering tests need no capsule. The last ones hand the rendered policy
to ``capsule check``; a capsule that predates section 8 refuses the new keys
(``credentials: unknown key``, ``allow_hosts[N]: invalid type: map``), and
only that refusal is skipped, with the reason printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from capsule_sandbox import (
    CapsuleBackend,
    Credential,
    HostRule,
    ProcessSpec,
    SandboxConfig,
    SandboxRequiredError,
)
from capsule_sandbox import _policy
from capsule_sandbox.backend import spec_to_policy
from capsule_sandbox.types import coerce_config

SECRET = "s3cret-never-in-a-policy-0b1f"


def _build(config: SandboxConfig, base=None) -> dict:
    return _policy.build(config, base=base or {"version": 1}, python_tools={})


# -- Credential ------------------------------------------------------------------


def test_the_default_credential_is_a_bearer_header():
    cred = Credential(name="github", env="GITHUB_TOKEN", hosts=["api.github.com"],
                      placeholder_env=["GITHUB_TOKEN"])
    assert cred.to_policy() == {
        "name": "github",
        "from": {"env": "GITHUB_TOKEN"},
        "hosts": ["api.github.com"],
        "inject": {"header": "Authorization", "format": "Bearer {}"},
        "placeholder_env": ["GITHUB_TOKEN"],
    }


def test_each_injection_form_renders():
    basic = Credential(name="git", env="T", hosts=["git.example.com"], basic_username="x-access-token")
    assert basic.to_policy()["inject"] == {"basic": {"username": "x-access-token"}}
    query = Credential(name="q", env="T", hosts=["api.example.com"], query="access_token")
    assert query.to_policy()["inject"] == {"query": "access_token"}
    header = Credential(name="h", env="T", hosts=["api.example.com"], header="X-Api-Key", format="{}")
    assert header.to_policy()["inject"] == {"header": "X-Api-Key", "format": "{}"}
    token = Credential(name="gh", env="T", hosts=["api.github.com"], format="token {}")
    assert token.to_policy()["inject"] == {"header": "Authorization", "format": "token {}"}


def test_sources_and_rules_render(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    by_file = Credential(name="f", file="token.txt", hosts=["*.example.com:8443"],
                         methods=["GET", "POST"], paths=["/repos/acme/**", "/user"],
                         allow_plaintext=True)
    entry = by_file.to_policy()
    assert entry["from"] == {"file": str(tmp_path / "token.txt")}  # absolute: the policy file lives elsewhere
    assert entry["hosts"] == ["*.example.com:8443"]
    assert entry["methods"] == ["GET", "POST"]
    assert entry["paths"] == ["/repos/acme/**", "/user"]
    assert entry["allow_plaintext"] is True
    by_cmd = Credential(name="c", command=["./bin/get-token", "--scope", "read"], hosts=["h.example"])
    assert by_cmd.to_policy()["from"] == {"command": [str(tmp_path / "bin/get-token"), "--scope", "read"]}
    bare = Credential(name="c2", command=("pass", "show", "x"), hosts=["h.example"])
    assert bare.to_policy()["from"] == {"command": ["pass", "show", "x"]}
    assert "allow_plaintext" not in bare.to_policy()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one source"),
        ({"env": "A", "file": "/x"}, "exactly one source"),
        ({"env": "A", "command": []}, "exactly one source"),
        ({"command": []}, "command is empty"),
        ({"env": "1BAD"}, "not an environment variable name"),
        ({"env": "A", "hosts": []}, "hosts is empty"),
        ({"env": "A", "hosts": "api.github.com"}, "list of strings"),
        ({"env": "A", "hosts": ["https://api.github.com/"]}, "invalid host"),
        ({"env": "A", "basic_username": "u", "query": "q"}, "one injection form"),
        ({"env": "A", "header": "X-Key", "query": "q"}, "one injection form"),
        ({"env": "A", "format": "Bearer", }, "exactly once"),
        ({"env": "A", "format": "{} {}"}, "exactly once"),
        ({"env": "A", "header": None}, "no injection form"),
        ({"env": "A", "header": "Host"}, "owned by the proxy"),
        ({"env": "A", "header": "Bad Header"}, "not an HTTP header name"),
        ({"env": "A", "basic_username": "a:b"}, "without ':'"),
        ({"env": "A", "query": "a&b"}, "query parameter"),
        ({"env": "A", "methods": ["get"]}, "upper-case"),
        ({"env": "A", "methods": []}, "allow no request"),
        ({"env": "A", "paths": ["repos/**"]}, "start with '/'"),
        ({"env": "A", "paths": ["/a/../b"]}, "'..' segment"),
        ({"env": "A", "paths": ["/a//b"]}, "empty segment"),
        ({"env": "A", "paths": ["/a%2Fb"]}, "percent-escapes"),
        ({"env": "A", "paths": ["/a;x=1"]}, "';'"),
        ({"env": "A", "paths": ["/a?x=1"]}, "'?'"),
        ({"env": "A", "paths": ["/v*/x"]}, "whole segment"),
        ({"env": "A", "placeholder_env": ["LD_PRELOAD"]}, "placeholder_env"),
        ({"env": "A", "allow_plaintext": "yes"}, "allow_plaintext"),
    ],
)
def test_malformed_credentials_are_value_errors(kwargs, message):
    kwargs = {"hosts": ["api.example.com"], **kwargs}
    with pytest.raises(ValueError, match=message):
        Credential(name="c", **kwargs)


@pytest.mark.parametrize("name", ["", "-x", "a b", "x" * 65, "a/b"])
def test_bad_credential_names(name):
    with pytest.raises(ValueError, match="credential name"):
        Credential(name=name, env="A", hosts=["h.example"])


def test_a_credential_round_trips_through_its_kwargs(tmp_path):
    cred = Credential(name="npm", file=tmp_path / "t", hosts=("registry.npmjs.org",),
                      placeholder_env=("NPM_TOKEN",))
    kwargs = cred.to_kwargs()
    json.dumps(kwargs)  # JSON-able: autogen's saved config holds it
    assert Credential(**kwargs).to_policy() == cred.to_policy()


# -- HostRule ------------------------------------------------------------------


def test_host_rules_render():
    rule = HostRule(host="api.github.com", methods=["GET", "POST"], paths=["/repos/acme/widget/**"],
                    max_requests=500, max_upload_bytes=10485760)
    assert rule.to_policy() == {
        "host": "api.github.com",
        "methods": ["GET", "POST"],
        "paths": ["/repos/acme/widget/**"],
        "max_requests": 500,
        "max_upload_bytes": 10485760,
    }
    assert HostRule(host="10.0.0.5:8080").to_policy() == {"host": "10.0.0.5:8080"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"host": "a b"}, "invalid host"),
        ({"host": "h.example", "max_requests": 0}, "max_requests"),
        ({"host": "h.example", "max_upload_bytes": True}, "max_upload_bytes"),
        ({"host": "h.example", "max_requests": 1.5}, "max_requests"),
        ({"host": "h.example", "paths": ["/./x"]}, "'.' segment"),
        ({"host": "h.example", "methods": ["G ET"]}, "upper-case"),
    ],
)
def test_malformed_host_rules_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HostRule(**kwargs)


# -- SandboxConfig -> policy --------------------------------------------------------


def test_credentials_alone_turn_on_the_proxy_to_their_hosts(tmp_path):
    cfg = SandboxConfig(credentials=[Credential(name="gh", env="GITHUB_TOKEN", hosts=["api.github.com"],
                                                placeholder_env=["GITHUB_TOKEN"])],
                        upstream_ca=str(tmp_path / "ca.pem"))
    policy = _build(cfg)
    assert policy["network"] == {
        "mode": "proxy",
        "allow_hosts": ["api.github.com"],
        "upstream_ca": str(tmp_path / "ca.pem"),
    }
    assert [c["name"] for c in policy["credentials"]] == ["gh"]


def test_credential_hosts_join_the_allowlist_once_and_maps_stay():
    cfg = SandboxConfig(
        network_enabled=True,
        network_allowlist=["pypi.org", HostRule(host="api.github.com", methods=["GET"]),
                           {"host": "uploads.example.com", "max_upload_bytes": 1000}],
        credentials=[
            {"name": "gh", "env": "GITHUB_TOKEN", "hosts": ["api.github.com", "git.example.com"]},
            {"name": "pypi", "env": "PYPI_TOKEN", "hosts": ["pypi.org"], "basic_username": "__token__"},
        ],
    )
    net = _build(cfg)["network"]
    assert net["mode"] == "proxy"
    assert net["allow_hosts"] == [
        "pypi.org",
        {"host": "api.github.com", "methods": ["GET"]},
        {"host": "uploads.example.com", "max_upload_bytes": 1000},
        "git.example.com",
    ]


def test_credentials_with_unrestricted_egress_are_refused():
    with pytest.raises(ValueError, match="credentials need capsule's proxy"):
        SandboxConfig(network_enabled=True, network_default="allow",
                      credentials=[Credential(name="gh", env="T", hosts=["api.github.com"])])


def test_a_placeholder_variable_may_not_also_be_set():
    cfg = SandboxConfig(env_vars={"GITHUB_TOKEN": "x"},
                        credentials=[Credential(name="gh", env="T", hosts=["api.github.com"],
                                                placeholder_env=["GITHUB_TOKEN"])])
    with pytest.raises(ValueError, match="GITHUB_TOKEN is both"):
        _build(cfg)


def test_base_policy_credentials_are_kept_and_names_stay_unique():
    base = {"version": 1, "credentials": [{"name": "gh", "from": {"env": "T"}, "hosts": ["api.github.com"],
                                           "inject": {"header": "Authorization", "format": "Bearer {}"}}]}
    cfg = SandboxConfig(credentials=[Credential(name="npm", env="NPM_TOKEN", hosts=["registry.npmjs.org"])])
    assert [c["name"] for c in _build(cfg, base)["credentials"]] == ["gh", "npm"]
    clash = SandboxConfig(credentials=[Credential(name="gh", env="X", hosts=["api.github.com"])])
    with pytest.raises(ValueError, match="given twice"):
        _build(clash, base)
    with pytest.raises(ValueError, match="given twice"):
        SandboxConfig(credentials=[Credential(name="a", env="X", hosts=["h.example"]),
                                   Credential(name="a", env="Y", hosts=["h.example"])])


def test_configs_given_as_mappings_carry_credentials():
    cfg = coerce_config({"credentials": [{"name": "gh", "env": "T", "hosts": ["api.github.com"]}],
                         "network_allowlist": [{"host": "api.github.com", "paths": ["/repos/**"]}],
                         "network_enabled": True})
    assert _build(cfg)["network"]["allow_hosts"] == [{"host": "api.github.com", "paths": ["/repos/**"]}]
    with pytest.raises(ValueError, match="unknown key 'token'"):
        SandboxConfig(credentials=[{"name": "gh", "token": "x", "hosts": ["h.example"]}])
    with pytest.raises(ValueError, match="unknown key 'path'"):
        SandboxConfig(network_enabled=True, network_allowlist=[{"host": "h.example", "path": "/"}])


def test_python_never_reads_the_value(monkeypatch):
    monkeypatch.setenv("CAPSULE_TEST_TOKEN", SECRET)
    cfg = SandboxConfig(credentials=[Credential(name="t", env="CAPSULE_TEST_TOKEN", hosts=["h.example"],
                                                placeholder_env=["CAPSULE_TEST_TOKEN"])])
    text = _policy.dumps(_build(cfg))
    assert SECRET not in text
    assert "CAPSULE_TEST_TOKEN" in text


# -- ProcessSpec -> policy ----------------------------------------------------------


def test_process_specs_take_credentials_and_host_rules():
    cred = Credential(name="gh", env="GITHUB_TOKEN", hosts=["api.github.com"], placeholder_env=["GITHUB_TOKEN"])
    spec = CapsuleBackend.build_process_spec(None, ["true"], credentials=[cred])  # type: ignore[arg-type]
    policy = spec_to_policy(spec, index_hosts=[])
    assert policy["network"] == {"mode": "proxy", "allow_hosts": ["api.github.com"]}
    assert policy["credentials"] == [cred.to_policy()]
    # restricted with only credentials: no package-index fallback is added
    spec = ProcessSpec(command=["true"], network="restricted", credentials=[cred])
    assert spec_to_policy(spec, index_hosts=["pypi.org"])["network"]["allow_hosts"] == ["api.github.com"]
    spec = ProcessSpec(command=["true"], network="restricted",
                       allow_hosts=[HostRule(host="api.github.com", paths=["/repos/**"])], credentials=[cred])
    assert spec_to_policy(spec)["network"]["allow_hosts"] == [{"host": "api.github.com", "paths": ["/repos/**"]}]
    with pytest.raises(SandboxRequiredError, match="unrestricted"):
        spec_to_policy(ProcessSpec(command=["true"], network="unrestricted", credentials=[cred]))
    with pytest.raises(ValueError, match="GITHUB_TOKEN is both"):
        spec_to_policy(ProcessSpec(command=["true"], env={"GITHUB_TOKEN": "x"}, credentials=[cred]))
    assert "credentials" not in spec_to_policy(ProcessSpec(command=["true"]))


# -- capsule check accepts what Python renders ------------------------------------------

_PREDATES = ("credentials: unknown key", "invalid type: map, expected a string", "upstream_ca: unknown key")


def _check(capsule_bin: str, policy: dict, tmp_path, env: dict[str, str]) -> None:
    path = _policy.write(policy, str(tmp_path / "policy.json"))
    done = subprocess.run([capsule_bin, "check", "--policy", path], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})
    if done.returncode != 0 and any(p in done.stderr for p in _PREDATES):
        reason = f"capsule check predates contract section 8 (credentials): {done.stderr.strip()}"
        print(f"skipping: {reason}", file=sys.stderr)
        pytest.skip(reason)
    assert done.returncode == 0, f"capsule check refused the rendered policy:\n{done.stderr}\n{json.dumps(policy)}"
    assert SECRET not in done.stdout + done.stderr


def test_capsule_check_accepts_rendered_credentials(capsule_bin, tmp_path):
    token_dir = tmp_path / "secret"
    token_dir.mkdir(mode=0o700)
    token = token_dir / "token"
    token.write_text(SECRET)
    token.chmod(0o600)
    cfg = SandboxConfig(
        network_enabled=True,
        network_allowlist=["pypi.org", HostRule(host="api.github.com", methods=["GET", "POST"],
                                                paths=["/repos/acme/widget/**"], max_requests=500,
                                                max_upload_bytes=10485760)],
        credentials=[
            Credential(name="github", env="CAPSULE_TEST_TOKEN", hosts=["api.github.com"],
                       methods=["GET"], placeholder_env=["GITHUB_TOKEN"]),
            Credential(name="git", file=str(token), hosts=["git.example.com"], basic_username="x-access-token"),
            Credential(name="q", env="CAPSULE_TEST_TOKEN", hosts=["api.example.com"], query="access_token"),
        ],
    )
    _check(capsule_bin, _build(cfg), tmp_path, {"CAPSULE_TEST_TOKEN": SECRET})


def test_capsule_check_accepts_a_rendered_process_spec(capsule_bin, tmp_path):
    cred = Credential(name="npm", env="CAPSULE_TEST_TOKEN", hosts=["registry.npmjs.org"],
                      placeholder_env=["NPM_TOKEN"])
    policy = spec_to_policy(ProcessSpec(command=["true"], credentials=[cred]))
    _check(capsule_bin, policy, tmp_path, {"CAPSULE_TEST_TOKEN": SECRET})

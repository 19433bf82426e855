"""Fail-closed refusals at config time (no capsule needed) and by capsule itself."""

from __future__ import annotations

import os

import pytest

from capsule_sandbox import CapsuleSandboxProvider, SandboxConfig


def test_egress_without_allowlist_refused_at_config_time():
    with pytest.raises(ValueError, match="allowlist"):
        SandboxConfig(network_enabled=True)
    with pytest.raises(ValueError, match="allowlist"):
        SandboxConfig(network_enabled=True, network_default="deny")
    with pytest.raises(ValueError):
        SandboxConfig(network_default="maybe")
    # explicit opt-ins are accepted
    SandboxConfig(network_enabled=True, network_default="allow")
    SandboxConfig(network_enabled=True, network_allowlist=["api.example.com", "*.pypi.org"])


@pytest.mark.parametrize(
    "path", ["/", "/etc", "/proc", "/sys", "/dev", "/usr", "/boot", "/etc/ssl", "/proc/self", "/var", "/root"]
)
def test_protected_input_dir_refused(path):
    with pytest.raises(ValueError, match="input_dir"):
        SandboxConfig(input_dir=path)


@pytest.mark.parametrize("path", ["/", "/usr/local/out", "/bin", "/lib/x", "/etc/out"])
def test_protected_output_dir_refused(path):
    with pytest.raises(ValueError, match="output_dir"):
        SandboxConfig(output_dir=path)


def test_symlink_to_protected_dir_refused(tmp_path):
    link = tmp_path / "innocent"
    os.symlink("/etc", link)
    with pytest.raises(ValueError, match="protected"):
        SandboxConfig(input_dir=str(link))


def test_credential_dirs_refused():
    with pytest.raises(ValueError):
        SandboxConfig(input_dir=os.path.expanduser("~/.ssh"))
    with pytest.raises(ValueError):
        SandboxConfig(input_dir=os.path.expanduser("~"))


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "BASH_ENV", "CAPSULE_RPC_FD", "HTTPS_PROXY", "BAD NAME"])
def test_dangerous_env_vars_refused(name):
    with pytest.raises(ValueError, match="env_vars"):
        SandboxConfig(env_vars={name: "x"})


@pytest.mark.parametrize("bad", ["", "../evil", "-flag", "a/b", "a b", "x" * 129, "é", "a\nb"])
def test_bad_agent_id_refused(provider, bad):
    with pytest.raises(ValueError, match="agent_id"):
        provider.create_session(bad)
    with pytest.raises(ValueError, match="agent_id"):
        provider.run(bad, ["/bin/true"])
    with pytest.raises(ValueError, match="agent_id"):
        provider.run_once(bad, "print(1)")


def test_good_agent_ids_accepted(provider):
    for good in ["a", "A.b-c_d", "0" * 128]:
        handle = provider.create_session(good)
        provider.destroy_session(good, handle.session_id)


def test_tool_allowlist_must_name_a_known_tool(make_provider):
    provider = make_provider(tools={"known": lambda: 1})
    with pytest.raises(ValueError, match="unknown_tool"):
        provider.create_session("agent-1", config=SandboxConfig(tool_allowlist=["unknown_tool"]))


def test_capsule_itself_refuses_ld_preload_from_a_base_policy(make_provider):
    """Defence in depth: a base policy bypasses the Python check; capsule still refuses (125)."""
    provider = make_provider(policy={"version": 1, "env": {"set": {"LD_PRELOAD": "/tmp/evil.so"}}})
    result = provider.run("agent-1", ["/bin/true"])
    assert result.success is False
    assert result.exit_code == 125
    assert result.termination_reason == "refused"
    assert "LD_PRELOAD" in (result.error + result.stderr)


def test_unknown_base_policy_key_is_refused_by_capsule(make_provider):
    provider = make_provider(policy={"version": 1, "filesystem": {"reed": ["/tmp"]}})
    result = provider.run("agent-1", ["/bin/true"])
    assert result.exit_code == 125 and result.termination_reason == "refused"


def test_refused_env_list_matches_capsule(doctor):
    # The package refuses these before capsule runs; capsule is the authority.
    from capsule_sandbox import _validate

    refused = doctor["refused_env"]
    assert sorted(_validate._REFUSED_ENV) == sorted(refused["names"])
    assert sorted(_validate._REFUSED_ENV_PREFIXES) == sorted(refused["prefixes"])


@pytest.mark.parametrize(
    "rel",
    [
        ".local/share/capsule/volumes/other-run",  # another run's volume
        ".azure",
        ".oci/config",
        ".config/rclone",
        ".config/gh",
        ".bash_history",
        ".cargo/credentials.toml",
        ".password-store/x",
    ],
)
def test_every_credential_location_of_capsule_is_refused_as_a_mount(rel):
    """A mount a spec asks for (``mounts``, ``read_only_mounts``) names no
    credential location capsule itself carves out: capsule keeps a grant
    that names one (or lies inside one) as meant, so this list is the guard.
    It missed most of capsule's (other runs' volumes, ~/.azure, histories)."""
    from capsule_sandbox import _validate

    with pytest.raises(ValueError, match="credential store"):
        _validate.mount_path(os.path.join(os.path.expanduser("~"), rel), "mounts", write=False)


def test_the_credential_list_is_capsules():
    """The Python list is capsule's LOCATIONS (src/policy/credentials.rs)."""
    import re

    from capsule_sandbox import _validate

    src = os.path.join(os.path.dirname(__file__), "..", "..", "..", "src", "policy", "credentials.rs")
    if not os.path.exists(src):
        pytest.skip("capsule's source is not beside this package")
    text = open(src, encoding="utf-8").read()
    block = text[text.index("pub const LOCATIONS") : text.index("];", text.index("pub const LOCATIONS"))]
    rust = re.findall(r'\(\s*"([^"]+)",\s*"', block)
    assert sorted(rust) == sorted(_validate._CREDENTIAL_DIRS)

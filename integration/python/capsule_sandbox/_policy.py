"""``SandboxConfig`` -> capsule policy (version 1, JSON).

Mapping (documented in the README):

==========================  ==============================================
SandboxConfig               policy
==========================  ==============================================
timeout_seconds             limits.timeout_seconds
memory_mb                   limits.memory_mb
cpu_limit (cores)           limits.cpu_seconds = ceil(cpu_limit * timeout)
output_max_bytes            limits.max_output_bytes
network_enabled=False       network.mode: none
... + network_allowlist     network.mode: proxy, allow_hosts
... + network_default=allow network.mode: unrestricted (no allowlist)
network_allowlist HostRule  network.allow_hosts map entry (TLS terminated)
credentials                 credentials (+ their hosts in allow_hosts; proxy)
upstream_ca                 network.upstream_ca (made absolute)
input_dir                   filesystem.read
output_dir                  filesystem.write
env_vars                    env.set
tool_allowlist              tools.allow (Python tools: forward: true)
tool_max_calls              tools.max_calls
context (per execution)     env.set.CAPSULE_CONTEXT and NONO_CONTEXT (JSON)
==========================  ==============================================
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import os
from typing import Any, Callable, Mapping

from capsule_sandbox import _validate
from capsule_sandbox._toolspec import ToolSpec
from capsule_sandbox.credentials import apply_network, host_policy
from capsule_sandbox.types import SandboxConfig

# An env string above this risks E2BIG at exec (Linux MAX_ARG_STRLEN is 128 KiB).
_MAX_CONTEXT_BYTES = 100 * 1024



def load_base_policy(policy: Mapping[str, Any] | str | os.PathLike[str] | None) -> dict[str, Any]:
    """The provider's base policy: a dict, a JSON file, or None (empty)."""
    if policy is None:
        return {"version": 1}
    if isinstance(policy, Mapping):
        base = copy.deepcopy(dict(policy))
    else:
        with open(os.fspath(policy), encoding="utf-8") as handle:
            try:
                base = json.load(handle)
            except ValueError as exc:
                raise ValueError(
                    f"base policy {os.fspath(policy)!r} is not JSON ({exc}); pass a dict "
                    "or a JSON file (YAML needs a parser this stdlib-only package lacks)"
                ) from None
        if not isinstance(base, dict):
            raise ValueError("base policy must be a JSON object")
    version = base.setdefault("version", 1)
    if version != 1:
        raise ValueError(f"base policy version {version!r} is not supported (only 1)")
    return base


def tool_schema(func: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of what the child may pass (see ``_toolspec``)."""
    return ToolSpec(func).schema()


def build(
    config: SandboxConfig,
    *,
    base: Mapping[str, Any],
    python_tools: Mapping[str, Callable[..., Any]],
    context: Mapping[str, Any] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The policy for one execution. Raises ``ValueError`` when it must be refused."""
    config.validate()
    policy: dict[str, Any] = copy.deepcopy(dict(base))
    policy["version"] = 1

    fs = policy.setdefault("filesystem", {})
    if config.input_dir is not None:
        path = _validate.mount_path(config.input_dir, "input_dir", write=False)
        if not os.path.isdir(path):
            raise ValueError(f"input_dir {config.input_dir!r} is not a directory")
        fs.setdefault("read", []).append(path)
    if config.output_dir is not None:
        path = _validate.mount_path(config.output_dir, "output_dir", write=True)
        os.makedirs(path, exist_ok=True)
        fs.setdefault("write", []).append(path)

    net = policy.setdefault("network", {})
    if not config.network_enabled:
        net["mode"] = "none"
        net.pop("allow_hosts", None)
    elif config.network_allowlist:
        net["mode"] = "proxy"
        net["allow_hosts"] = [host_policy(h) for h in config.network_allowlist]
    else:  # validate() guarantees network_default == "allow" here
        net["mode"] = "unrestricted"
        net.pop("allow_hosts", None)
    # Credentials turn "none" into "proxy" to their hosts (validate() refused
    # them with unrestricted egress); a base policy's own credentials stay.
    apply_network(policy, credentials=config.credentials, upstream_ca=config.upstream_ca)
    _placeholders_free(policy, config.env_vars)

    limits = policy.setdefault("limits", {})
    limits["timeout_seconds"] = float(config.timeout_seconds)
    limits["max_output_bytes"] = int(config.output_max_bytes)
    if config.memory_mb is not None:
        limits["memory_mb"] = int(config.memory_mb)
    if config.cpu_limit is not None:
        limits["cpu_seconds"] = max(1, math.ceil(float(config.cpu_limit) * float(config.timeout_seconds)))

    env_set = dict(policy.setdefault("env", {}).get("set", {}))
    env_set.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    env_set.setdefault("PYTHONUNBUFFERED", "1")
    if config.input_dir is not None:
        env_set["CAPSULE_INPUT_DIR"] = os.path.realpath(config.input_dir)
    if config.output_dir is not None:
        env_set["CAPSULE_OUTPUT_DIR"] = os.path.realpath(config.output_dir)
    env_set.update(extra_env or {})
    env_set.update(config.env_vars)
    if context is not None:
        try:
            encoded = json.dumps(context, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"context is not JSON-serialisable: {exc}") from None
        if len(encoded.encode("utf-8")) > _MAX_CONTEXT_BYTES:
            raise ValueError(f"context is larger than {_MAX_CONTEXT_BYTES} bytes of JSON")
        env_set["CAPSULE_CONTEXT"] = encoded
        env_set["NONO_CONTEXT"] = encoded  # the name AGT's nono provider uses
    policy["env"]["set"] = env_set

    base_tools = {
        t.get("name"): t
        for t in (policy.get("tools") or {}).get("allow", [])
        if isinstance(t, dict)
    }
    allow: list[dict[str, Any]] = []
    for name in dict.fromkeys(config.tool_allowlist):
        if name in python_tools:
            func = python_tools[name]
            entry: dict[str, Any] = {
                "name": name,
                "forward": True,
                "timeout_seconds": float(config.tool_timeout_seconds),
                "inputSchema": tool_schema(func),
            }
            doc = inspect.getdoc(func)
            if doc:
                entry["description"] = doc.strip().splitlines()[0][:500]
            allow.append(entry)
        elif name in base_tools:
            allow.append(base_tools[name])
        else:
            raise ValueError(
                f"tool_allowlist names {name!r}, which is neither a Python tool given "
                "to the provider nor a tool of its base policy"
            )
    if allow:
        policy["tools"] = {"max_calls": int(config.tool_max_calls), "allow": allow}
    else:
        policy.pop("tools", None)
    return policy


def _placeholders_free(policy: Mapping[str, Any], env_vars: Mapping[str, str]) -> None:
    """A variable that shows a credential's placeholder may not also be set."""
    set_names = set(env_vars) | set(((policy.get("env") or {}).get("set") or {}))
    for entry in policy.get("credentials") or []:
        if not isinstance(entry, Mapping):
            continue
        for name in entry.get("placeholder_env") or []:
            if name in set_names:
                raise ValueError(
                    f"credential {entry.get('name')!r}: {name} is both its placeholder_env and set "
                    "by env_vars / env.set; the run would see one of them, not both"
                )


def has_forward_tools(policy: Mapping[str, Any]) -> bool:
    tools = policy.get("tools") or {}
    return any(isinstance(t, dict) and t.get("forward") for t in tools.get("allow", []))


#: Texts of recent policies, by their compact form (``dumps``).
_TEXTS: dict[str, str] = {}
_TEXTS_MAX = 64


def dumps(policy: Mapping[str, Any]) -> str:
    """The policy as the JSON text a file of ``write`` holds (same sha256).

    An indented dump runs Python's pure-Python encoder (~4x the C one's
    time); a session or a Ray worker sends the same policy step after step,
    so the text is kept by the policy's compact (C-encoded) form, the same
    exactly when the policy is."""
    key = json.dumps(policy, sort_keys=True, separators=(",", ":"))
    text = _TEXTS.get(key)
    if text is None:
        text = json.dumps(policy, indent=1, sort_keys=True) + "\n"
        if len(_TEXTS) >= _TEXTS_MAX:
            _TEXTS.clear()
        _TEXTS[key] = text
    return text


def write(policy: Mapping[str, Any], path: str) -> str:
    """Write the policy as JSON, 0600, atomically; return the path."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(dumps(policy))
    os.replace(tmp, path)
    return path

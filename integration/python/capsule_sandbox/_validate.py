"""Fail-closed checks shared by the provider and the backend.

Everything here raises ``ValueError`` with a message naming the offending
field, before capsule is ever started. capsule applies the same rules itself
(exit 125); refusing early gives a Python exception at config time instead of
a refused run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

AGENT_ID_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# host, *.domain, IPv4, [IPv6], each with an optional :port; capsule checks the finer rules.
_HOST_RE = re.compile(
    r"^(?:(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*)(?::[0-9]{1,5})?$"
)

# Variables capsule refuses even in env.set (contract section 3): every name
# with one of these prefixes and these names. A copy, so that a bad config fails
# before capsule is started; tests/test_refusals.py checks it against
# `capsule doctor --json` (refused_env).
_REFUSED_ENV_PREFIXES = ("LD_",)
_REFUSED_ENV = frozenset(
    {
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "PYTHONHOME",
        "NODE_OPTIONS",
        "BASH_ENV",
        "ENV",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "DOTNET_STARTUP_HOOKS",
    }
)
# Variables capsule sets itself; a caller overriding them would break the run
# (or, for the proxy variables, route around the egress proxy).
_RESERVED_ENV = frozenset(
    {
        "CAPSULE_RPC_FD",
        "CAPSULE_CONTEXT",
        "NONO_CONTEXT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "TMPDIR",
    }
)

# Never a mount, whatever the access.
_PROTECTED_EXACT = frozenset(
    {
        "/",
        "/etc",
        "/proc",
        "/sys",
        "/dev",
        "/usr",
        "/boot",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/var",
        "/root",
        "/run",
        "/home",
    }
)
# Nothing beneath these is a mount either (kernel interfaces, host config).
_PROTECTED_TREES = ("/proc", "/sys", "/dev", "/boot", "/etc")
# Nothing beneath these is a writable mount (the host's programs).
_PROTECTED_WRITE_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Credential stores beneath the home directory: capsule's own list
# (src/policy/credentials.rs LOCATIONS, kept equal by a test); a ``*``
# matches any run of characters within one name.
_CREDENTIAL_DIRS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".yarnrc*",
    ".pypirc",
    ".cargo/credentials*",
    ".gem/credentials",
    ".m2/settings*.xml",
    ".gradle/gradle.properties",
    ".terraform.d/credentials*",
    ".terraformrc",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
    ".config/op",
    ".config/containers/auth.json",
    ".s3cfg",
    ".boto",
    ".oci",
    ".config/doctl",
    ".config/rclone",
    ".*_history",
    ".local/share/fish/fish_history",
    ".histfile",
    ".config/capsule",
    ".local/state/capsule",
    ".local/share/capsule",
)
# capsule's own directories where the XDG variables move them.
_XDG_CAPSULE = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME")


def _credential_roots() -> list[str]:
    """Every credential location (a pattern per name) as an absolute path."""
    homes = {str(Path.home())}
    try:
        import pwd

        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):
        pass
    roots = [os.path.join(h, c) for h in homes for c in _CREDENTIAL_DIRS]
    for var in _XDG_CAPSULE:
        d = os.environ.get(var, "")
        if os.path.isabs(d):
            roots.append(os.path.join(d, "capsule"))
    return roots


def _in_credential(path: str) -> bool:
    """Whether ``path`` is, or lies beneath, a credential location."""
    parts = [p for p in os.path.normpath(path).split("/") if p]
    for root in _credential_roots():
        pat = [p for p in os.path.normpath(root).split("/") if p]
        if len(parts) >= len(pat) and all(
            re.fullmatch(".*".join(map(re.escape, q.split("*"))), n) for q, n in zip(pat, parts)
        ):
            return True
    return False


def agent_id(value: object) -> str:
    if not isinstance(value, str) or not AGENT_ID_RE.match(value):
        raise ValueError(
            f"invalid agent_id {value!r}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]{{0,127}}$"
        )
    return value


def execution_id(value: object) -> str:
    if not isinstance(value, str) or not AGENT_ID_RE.match(value):
        raise ValueError(
            f"invalid execution_id {value!r}: must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]{{0,127}}$"
        )
    return value


def tool_name(value: object) -> str:
    if not isinstance(value, str) or not _TOOL_NAME_RE.match(value):
        raise ValueError(f"invalid tool name {value!r}: 1-64 of A-Z a-z 0-9 _ . -")
    return value


def host_entry(value: object) -> str:
    if not isinstance(value, str) or not _HOST_RE.match(value) or value.startswith("*.*"):
        raise ValueError(
            f"invalid network_allowlist entry {value!r}: use 'host', '*.domain' or 'host:port'"
        )
    return value


def env_name_refused(name: str) -> str | None:
    """Why ``name`` may not be set in the sandbox, or None if it may."""
    if not _ENV_NAME_RE.match(name):
        return "not a valid environment variable name"
    if name.startswith(_REFUSED_ENV_PREFIXES) or name in _REFUSED_ENV:
        return "a loader/interpreter hook that capsule refuses"
    if name in _RESERVED_ENV:
        return "set by capsule itself"
    return None


def env_vars(values: Mapping[str, str]) -> None:
    if not isinstance(values, Mapping):
        raise ValueError("env_vars must be a mapping of str to str")
    for name, value in values.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError(f"env_vars entry {name!r} must map a str to a str")
        why = env_name_refused(name)
        if why is not None:
            raise ValueError(f"env_vars may not set {name}: {why}")
        if "\x00" in value:
            raise ValueError(f"env_vars value of {name} contains a NUL byte")


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _link_trusted(link: str) -> bool:
    """Whether no run of this user can have made ``link`` (capsule's rule,
    ``resolve::follow``): every directory from ``/`` down to it is neither
    owned by nor writable by this user. Never for root."""
    uid = os.geteuid()
    if uid == 0:
        return False
    d = os.path.dirname(link)
    while True:
        try:
            st = os.stat(d)
        except OSError:
            return False
        if st.st_uid == uid or os.access(d, os.W_OK):
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


def planted_link(path: str) -> tuple[str, str] | None:
    """The first symlink on the way to absolute ``path`` that a run of this
    user could have planted (a link in a directory this user can write), as
    (link, target); None when there is none. Such a path is never granted:
    an earlier run that could write ``ws`` may have replaced ``ws/data`` with
    a link to ``~/.ssh``."""
    todo = [c for c in path.split("/") if c and c != "."][::-1]
    cur = "/"
    hops = 0
    while todo:
        name = todo.pop()
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, name)
        if not os.path.islink(nxt):
            cur = nxt
            continue
        target = os.readlink(nxt)
        if not _link_trusted(nxt):
            return nxt, target
        hops += 1
        if hops > 40:
            return nxt, target
        if target.startswith("/"):
            cur = "/"
        todo.extend([c for c in target.split("/") if c and c != "."][::-1])
    return None


def mount_path(value: object, field_name: str, *, write: bool) -> str:
    """Validate a host directory granted to the sandbox; return it absolute,
    as written (capsule resolves it again, by the same rules).

    Symlinks are resolved for the checks, so a link to ``/etc`` is refused
    like ``/etc``; a link a run of this user could have planted (in a
    directory this user can write; any link, as root) is refused outright.
    """
    if not isinstance(value, (str, os.PathLike)) or str(value) == "":
        raise ValueError(f"{field_name} must be a non-empty path")
    raw = os.fspath(value)
    if "\x00" in str(raw):
        raise ValueError(f"{field_name} contains a NUL byte")
    literal = os.path.join(os.getcwd(), os.path.expanduser(str(raw)))
    planted = planted_link(literal)
    if planted is not None:
        raise ValueError(
            f"{field_name} {raw!r} passes through the symbolic link {planted[0]} (-> {planted[1]}) in a "
            "directory this user can write, where an earlier run may have planted it; it is never "
            "granted through such a link (name the target itself if it is meant)"
        )
    resolved = os.path.realpath(literal)
    candidates = {os.path.normpath(literal), resolved}
    for path in candidates:
        if path in _PROTECTED_EXACT:
            raise ValueError(f"{field_name} {raw!r} is a protected system directory")
        for root in _PROTECTED_TREES:
            if _beneath(path, root):
                raise ValueError(f"{field_name} {raw!r} is beneath protected {root}")
        if write:
            for root in _PROTECTED_WRITE_TREES:
                if _beneath(path, root):
                    raise ValueError(
                        f"{field_name} {raw!r} is beneath {root}: system directories "
                        "are never writable"
                    )
        home = str(Path.home())
        if path == home:
            raise ValueError(f"{field_name} {raw!r} is the whole home directory")
        if _in_credential(path):
            raise ValueError(f"{field_name} {raw!r} is a credential store")
    # As written, so capsule judges any (trusted) link on it itself: a path
    # names a credential or secret only by its own name, never by a link.
    return os.path.normpath(literal)

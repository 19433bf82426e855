"""Credentials and HTTPS host rules (contract section 8), as Python values.

A :class:`Credential` names where capsule reads a secret *on the host* (an
environment variable, a file or a command) and where its proxy injects it
(a header, HTTP Basic, or a query parameter) into requests to ``hosts``.
The run never holds the value: it sees a per-run placeholder in
``placeholder_env``. Python never reads the value either; it only renders
the policy's ``credentials:`` entry, and capsule reads the source when the
run starts (a missing variable or unreadable file is exit 125, naming the
credential).

A :class:`HostRule` is a map entry of ``network.allow_hosts``: the host's TLS
is terminated by capsule's proxy and only the listed methods and paths pass
(``*`` one path segment, ``**`` any number), within optional budgets.

Every check here raises ``ValueError`` with a message naming the field; the
finer rules (and the authority) stay with ``capsule check``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from capsule_sandbox import _validate

__all__ = ["Credential", "HostRule", "coerce_credentials", "coerce_host", "apply_network"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_METHOD_RE = re.compile(r"^[A-Z][A-Z0-9_-]{0,31}$")
_TOKEN_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token (a header name)
_QUERY_RE = re.compile(r"^[A-Za-z0-9_.~-]+$")
# Headers the proxy itself owns: injecting a secret there means nothing sane.
_REFUSED_HEADERS = {
    "host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
    "trailer", "keep-alive", "proxy-connection", "proxy-authorization",
}


def _str_list(value: Any, what: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a list of strings, not {value!r}")
    items = list(value)
    if not all(isinstance(v, str) for v in items):
        raise ValueError(f"{what} must be a list of strings, not {items!r}")
    return items


def _methods(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    items = _str_list(value, what)
    if not items:
        raise ValueError(f"{what} is empty, which would allow no request; omit it to allow any method")
    for m in items:
        if not _METHOD_RE.match(m):
            raise ValueError(
                f"{what}: {m!r} is not an upper-case HTTP method (capsule compares methods "
                "case-sensitively; write e.g. 'GET')"
            )
    return list(dict.fromkeys(items))


def _path_pattern(pattern: str, what: str) -> str:
    """One path pattern: absolute, whole-segment ``*``/``**`` only, nothing ambiguous."""
    if not pattern.startswith("/"):
        raise ValueError(f"{what}: {pattern!r} must start with '/'")
    bad = [c for c in ("?", "#", ";", "\\", "%", " ", "\x00") if c in pattern]
    if bad:
        raise ValueError(
            f"{what}: {pattern!r} contains {bad[0]!r}; a path pattern is the decoded path "
            "without query, parameters or percent-escapes"
        )
    segments = pattern[1:].split("/")
    for i, seg in enumerate(segments):
        if seg == "" and not (i == len(segments) - 1):
            raise ValueError(f"{what}: {pattern!r} has an empty segment ('//')")
        if seg in (".", ".."):
            raise ValueError(f"{what}: {pattern!r} has a {seg!r} segment")
        if "*" in seg and seg not in ("*", "**"):
            raise ValueError(
                f"{what}: {pattern!r}: '*' matches one whole segment and '**' any number of "
                f"segments; {seg!r} mixes a wildcard into a segment"
            )
    return pattern


def _paths(value: Any, what: str) -> list[str] | None:
    if value is None:
        return None
    items = _str_list(value, what)
    if not items:
        raise ValueError(f"{what} is empty, which would allow no request; omit it to allow any path")
    return [_path_pattern(p, f"{what}[{i}]") for i, p in enumerate(items)]


def _positive_int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be an integer > 0, not {value!r}")
    return value


def _host(value: Any, what: str) -> str:
    try:
        return _validate.host_entry(value)
    except ValueError:
        raise ValueError(
            f"{what}: invalid host {value!r}: use 'host', '*.domain', an IP literal, each with an optional ':port'"
        ) from None


@dataclass(frozen=True)
class HostRule:
    """A map entry of ``network.allow_hosts``: TLS terminated, rules apply.

    ``methods`` (upper case) and ``paths`` (``/a/*/c``, ``/repos/acme/**``)
    default to any; ``max_requests`` and ``max_upload_bytes`` are budgets
    (429 past them)."""

    host: str
    methods: Sequence[str] | None = None
    paths: Sequence[str] | None = None
    max_requests: int | None = None
    max_upload_bytes: int | None = None

    def __post_init__(self) -> None:
        self.to_policy()

    def to_policy(self) -> dict[str, Any]:
        """The ``allow_hosts`` map entry (raises ``ValueError`` when malformed)."""
        what = f"allow_hosts entry {self.host!r}"
        entry: dict[str, Any] = {"host": _host(self.host, what)}
        methods = _methods(self.methods, f"{what}: methods")
        if methods is not None:
            entry["methods"] = methods
        paths = _paths(self.paths, f"{what}: paths")
        if paths is not None:
            entry["paths"] = paths
        for key in ("max_requests", "max_upload_bytes"):
            value = _positive_int(getattr(self, key), f"{what}: {key}")
            if value is not None:
                entry[key] = value
        return entry


_HOST_RULE_KEYS = ("host", "methods", "paths", "max_requests", "max_upload_bytes")


def coerce_host(value: Any) -> str | HostRule:
    """An ``allow_hosts`` entry: a host string (spliced end to end), a
    :class:`HostRule`, or a mapping of its fields."""
    if isinstance(value, HostRule):
        return value
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(_HOST_RULE_KEYS))
        if unknown:
            raise ValueError(
                f"allow_hosts entry {dict(value)!r}: unknown key {unknown[0]!r} "
                f"(expected {', '.join(_HOST_RULE_KEYS)})"
            )
        if "host" not in value:
            raise ValueError(f"allow_hosts entry {dict(value)!r} has no 'host'")
        return HostRule(**dict(value))
    return _host(value, "allow_hosts entry")


def host_policy(value: Any) -> str | dict[str, Any]:
    entry = coerce_host(value)
    return entry.to_policy() if isinstance(entry, HostRule) else entry


def _abs(path: Any, what: str) -> str:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{what} must be a path, not {path!r}")
    text = os.fspath(path)
    if "\x00" in text:
        raise ValueError(f"{what} contains a NUL byte")
    # The policy file Python writes lives in a temp directory: a relative
    # path there would resolve against it, not against the caller's cwd.
    return os.path.abspath(os.path.expanduser(text))


@dataclass(frozen=True)
class Credential:
    """A secret the proxy injects into requests to ``hosts``; the run sees only a placeholder.

    Source, exactly one: ``env`` (a variable of the capsule process),
    ``file`` (a path; made absolute here) or ``command`` (argv; its stdout).
    Injection, exactly one: ``header`` + ``format`` (default
    ``Authorization: Bearer {}``), ``basic_username`` (HTTP Basic with the
    value as password) or ``query`` (a query parameter name).
    """

    name: str
    env: str | None = None
    file: str | os.PathLike[str] | None = None
    command: Sequence[str] | None = None
    hosts: Sequence[str] = field(default_factory=list)
    header: str | None = "Authorization"
    format: str = "Bearer {}"
    basic_username: str | None = None
    query: str | None = None
    methods: Sequence[str] | None = None
    paths: Sequence[str] | None = None
    placeholder_env: Sequence[str] | None = None
    allow_plaintext: bool = False

    def __post_init__(self) -> None:
        self.to_policy()

    def _what(self) -> str:
        return f"credential {self.name!r}"

    def _source(self) -> dict[str, Any]:
        what = self._what()
        given = [k for k in ("env", "file", "command") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"{what}: give exactly one source of env=, file=, command= (got "
                f"{', '.join(given) or 'none'})"
            )
        if self.env is not None:
            if not isinstance(self.env, str) or not _validate._ENV_NAME_RE.match(self.env):
                raise ValueError(f"{what}: env={self.env!r} is not an environment variable name")
            return {"env": self.env}
        if self.file is not None:
            return {"file": _abs(self.file, f"{what}: file")}
        argv = _str_list(self.command, f"{what}: command")
        if not argv or not argv[0]:
            raise ValueError(f"{what}: command is empty")
        if any("\x00" in a for a in argv):
            raise ValueError(f"{what}: command contains a NUL byte")
        if "/" in argv[0]:
            argv[0] = _abs(argv[0], f"{what}: command[0]")
        return {"command": argv}

    def _inject(self) -> dict[str, Any]:
        what = self._what()
        header_given = self.header is not None and (
            self.header != "Authorization" or self.format != "Bearer {}"
        )
        forms = [n for n, on in (("header", header_given), ("basic_username", self.basic_username is not None),
                                 ("query", self.query is not None)) if on]
        if len(forms) > 1:
            raise ValueError(f"{what}: give one injection form, not {' and '.join(forms)}")
        if self.basic_username is not None:
            user = self.basic_username
            if not isinstance(user, str) or ":" in user or any(ord(c) < 0x20 for c in user):
                raise ValueError(f"{what}: basic_username {user!r} must be a string without ':' or control characters")
            return {"basic": {"username": user}}
        if self.query is not None:
            if not isinstance(self.query, str) or not _QUERY_RE.match(self.query):
                raise ValueError(f"{what}: query={self.query!r} is not a plain query parameter name")
            return {"query": self.query}
        if self.header is None:
            raise ValueError(f"{what}: no injection form; give header=, basic_username= or query=")
        if not isinstance(self.header, str) or not _TOKEN_RE.match(self.header):
            raise ValueError(f"{what}: header={self.header!r} is not an HTTP header name")
        if self.header.lower() in _REFUSED_HEADERS:
            raise ValueError(f"{what}: header={self.header!r} is owned by the proxy; choose another header")
        if not isinstance(self.format, str) or self.format.count("{}") != 1:
            raise ValueError(f"{what}: format={self.format!r} must contain '{{}}' exactly once (where the value goes)")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in self.format):
            raise ValueError(f"{what}: format={self.format!r} contains a control character")
        return {"header": self.header, "format": self.format}

    def to_kwargs(self) -> dict[str, Any]:
        """Its fields as JSON-able keyword arguments (``Credential(**kw)``), for saved configs."""
        out: dict[str, Any] = {}
        for key in _CREDENTIAL_KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            if key == "file":
                value = os.fspath(value)
            elif isinstance(value, (list, tuple)):
                value = list(value)
            out[key] = value
        return out

    def to_policy(self) -> dict[str, Any]:
        """The policy's ``credentials:`` entry (raises ``ValueError`` when malformed)."""
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"credential name {self.name!r}: use 1-64 letters, digits, '_', '.', '-' (not starting with a symbol)"
            )
        what = self._what()
        entry: dict[str, Any] = {"name": self.name, "from": self._source()}
        hosts = _str_list(self.hosts, f"{what}: hosts")
        if not hosts:
            raise ValueError(f"{what}: hosts is empty; name the hosts it may be sent to")
        entry["hosts"] = [_host(h, f"{what}: hosts") for h in dict.fromkeys(hosts)]
        methods = _methods(self.methods, f"{what}: methods")
        if methods is not None:
            entry["methods"] = methods
        paths = _paths(self.paths, f"{what}: paths")
        if paths is not None:
            entry["paths"] = paths
        entry["inject"] = self._inject()
        if self.placeholder_env is not None:
            names = _str_list(self.placeholder_env, f"{what}: placeholder_env")
            for n in names:
                why = _validate.env_name_refused(n)
                if why is not None:
                    raise ValueError(f"{what}: placeholder_env {n!r} is {why}")
            if names:
                entry["placeholder_env"] = list(dict.fromkeys(names))
        if not isinstance(self.allow_plaintext, bool):
            raise ValueError(f"{what}: allow_plaintext must be True or False")
        if self.allow_plaintext:
            entry["allow_plaintext"] = True
        return entry


_CREDENTIAL_KEYS: tuple[str, ...] = tuple(Credential.__dataclass_fields__)


def coerce_credentials(values: Any) -> list[Credential]:
    """A list of :class:`Credential` from Credentials or mappings of their fields."""
    if values is None:
        return []
    if isinstance(values, (Credential, Mapping)):
        values = [values]
    out: list[Credential] = []
    for value in _as_list(values, "credentials"):
        if isinstance(value, Credential):
            out.append(value)
        elif isinstance(value, Mapping):
            unknown = sorted(set(value) - set(_CREDENTIAL_KEYS))
            if unknown:
                raise ValueError(
                    f"credential {value.get('name')!r}: unknown key {unknown[0]!r} "
                    f"(expected {', '.join(_CREDENTIAL_KEYS)})"
                )
            if "name" not in value:
                raise ValueError(f"credential {dict(value)!r} has no 'name'")
            out.append(Credential(**dict(value)))
        else:
            raise ValueError(f"credentials entries must be Credential objects or mappings, not {value!r}")
    names = [c.name for c in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"credential name {dup!r} is given twice")
    return out


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a list, not {value!r}")
    return list(value)


def _entry_host(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, Mapping):
        host = entry.get("host")
        return host if isinstance(host, str) else None
    return None


def apply_network(
    policy: dict[str, Any],
    *,
    credentials: Any = None,
    upstream_ca: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Add ``credentials`` (and ``upstream_ca``) to ``policy`` in place.

    Credentials need the proxy: a policy in mode ``none`` (or with no mode)
    becomes mode ``proxy``; ``unrestricted`` is refused (its traffic never
    passes the proxy, so the placeholder would go out as it is). Every
    credential host not named by an ``allow_hosts`` entry is added as a
    string entry (the credential makes capsule terminate it; any map entry
    for the same host still decides methods and paths). Credentials already
    in the policy are kept; a name given twice is refused."""
    creds = coerce_credentials(credentials)
    net = policy.setdefault("network", {})
    if upstream_ca is not None:
        net["upstream_ca"] = _abs(upstream_ca, "upstream_ca")
    if not creds:
        return policy
    mode = net.get("mode", "none")
    if mode == "unrestricted":
        raise ValueError(
            "credentials need network mode 'proxy' (capsule's proxy injects them); unrestricted "
            "egress bypasses the proxy. Name the hosts instead (network_allowlist / allow_hosts)"
        )
    if mode not in ("none", "proxy"):
        raise ValueError(f"credentials need network mode 'proxy', not {mode!r}")
    if mode == "none":
        net["allow_hosts"] = []
    net["mode"] = "proxy"
    hosts = list(net.get("allow_hosts") or [])
    named = {_entry_host(e) for e in hosts}
    existing = list(policy.get("credentials") or [])
    taken = {e.get("name") for e in existing if isinstance(e, Mapping)}
    rendered = []
    for cred in creds:
        if cred.name in taken:
            raise ValueError(f"credential name {cred.name!r} is given twice (the base policy has it)")
        entry = cred.to_policy()
        for host in entry["hosts"]:
            if host not in named:
                hosts.append(host)
                named.add(host)
        rendered.append(entry)
    net["allow_hosts"] = hosts
    policy["credentials"] = existing + rendered
    return policy

"""``CapsuleBackend``: agentnode's ``SandboxBackend`` on capsule.

agentnode (``agentnode-sdk``) plugs an isolation backend with
``set_default_backend()`` and calls ``check_available()``,
``build_process_spec()``, ``wrap_command(spec)``, ``run_process(spec,
input_text, timeout)``, ``open_agent_session(spec)`` and, on the executable
``check_available().backend`` names, ``volume inspect|create|rm NAME``. This
module reads agentnode's ``ProcessSpec``/``MountSpec`` (or any object with
their fields; it defines compatible ones, plus ``allow_hosts``,
``read_only_mounts`` and ``cwd``). When agentnode is importable,
``CapsuleBackend`` subclasses its ``SandboxBackend``, ``SandboxAvailability``
its dataclass and ``SandboxRequiredError`` its exception, so its own
``except`` clauses catch capsule's refusals.

Network: ``none`` -> capsule ``none``; ``restricted``, ``default`` and
``egress`` -> ``proxy`` to the spec's ``allow_hosts`` (and
``egress.allowed_domains``), else the package-index hosts the host's own pip
and npm configuration names (``network_hosts=`` widens that list);
``unrestricted`` -> capsule ``unrestricted``, only when the spec says so.
Anything else is refused. ``credentials`` (capsule's: ``Credential``s the
proxy injects) make ``none`` a proxy to their hosts and add their hosts to
the others; ``allow_hosts`` entries may be ``HostRule``s (TLS terminated,
methods/paths/budgets apply); ``upstream_ca`` is ``network.upstream_ca``.

Mounts: a ``MountSpec`` whose ``dst`` is empty or equals an absolute ``src``
is a grant in place; any other (``/pack``, ``/install``...) is ``capsule exec
--mount SRC:DST:ro|rw``, and a ``src`` that is not an absolute path is a
capsule volume (``volume:NAME``; a read-write one is created when missing, as
container runtimes do). A capsule without ``--mount`` refuses those specs
with a ``SandboxRequiredError`` naming what is missing.
"""

from __future__ import annotations

import configparser
import functools
import hashlib
import json
import logging
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from capsule_sandbox import _policy, _validate
from capsule_sandbox._binary import AvailabilityCache
from capsule_sandbox._serve import ServeClient, ServeDied
from capsule_sandbox.credentials import apply_network, coerce_credentials, host_policy

_LOG = logging.getLogger("capsule_sandbox")

try:  # pragma: no cover - only when agentnode is installed
    from agentnode_sdk.sandbox.backend import SandboxBackend as _Base  # type: ignore
    from agentnode_sdk.sandbox.types import SandboxAvailability as _AvailBase  # type: ignore
    from agentnode_sdk.sandbox.types import SandboxRequiredError as _RequiredBase  # type: ignore
except Exception:  # noqa: BLE001 - optional, any import failure means "absent"
    _Base = object
    _AvailBase = None
    _RequiredBase = RuntimeError

try:  # pragma: no cover - only when agentnode is installed
    from agentnode_sdk.sandbox.agent_session import AgentSandboxSession as _SessionBase  # type: ignore
except Exception:  # noqa: BLE001
    _SessionBase = object


class SandboxRequiredError(_RequiredBase):  # type: ignore[misc,valid-type]
    """Isolation was asked for and cannot be given: refuse, never run unsandboxed.

    A subclass of agentnode's ``SandboxRequiredError`` when agentnode is importable."""


if _AvailBase is not None:

    @dataclass(frozen=True)
    class SandboxAvailability(_AvailBase):  # type: ignore[misc,valid-type]
        """agentnode's ``SandboxAvailability`` plus what capsule's doctor says."""

        landlock_abi: int = 0
        doctor: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

else:

    @dataclass(frozen=True)
    class SandboxAvailability:  # type: ignore[no-redef]
        """Result of ``check_available()`` (agentnode's field names)."""

        available: bool
        backend: str
        reason: str
        executable_path: str | None = None
        daemon_ok: bool = False
        image_available: bool = False
        image_digest: str | None = None
        landlock_abi: int = 0
        doctor: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class MountSpec:
    """``src`` (a host path, or a capsule volume name) seen at ``dst`` inside;
    an empty ``dst`` (or ``dst == src``) grants the host path in place."""

    src: str
    dst: str = ""
    read_only: bool = True


@dataclass(frozen=True)
class EgressSpec:
    """Upstream's egress handle; capsule only uses ``allowed_domains``."""

    network_name: str = ""
    proxy_url: str = ""
    allowed_domains: tuple[str, ...] = ()


@dataclass
class ProcessSpec:
    """A request to run a command in isolation."""

    command: list[str]
    network: str = "none"  # none | restricted | default | egress | unrestricted
    allow_hosts: list[Any] = field(default_factory=list)  # str, HostRule or mapping
    read_only_mounts: list[str] = field(default_factory=list)
    mounts: list[MountSpec] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    cwd: str | None = None
    clean_home: bool = True
    interactive: bool = False
    name: str | None = None
    egress: EgressSpec | None = None
    #: capsule's: secrets the proxy injects (``Credential`` or mappings of its
    #: fields); they turn ``none`` into proxy mode to their hosts.
    credentials: list[Any] = field(default_factory=list)
    #: capsule's: a PEM file of extra roots the proxy trusts upstream.
    upstream_ca: str | None = None


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def _mebibytes(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(1, int(value))
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ValueError(f"unreadable memory limit {value!r} (use e.g. 512, '512m', '2g')")
    number, unit = float(match.group(1)), match.group(2).lower()
    factor = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]
    if unit == "" and not str(value).strip().lower().endswith("b"):
        factor = 1  # a bare number is MiB, like memory_mb; "…b" is bytes
    return max(1, int(number * factor))


_VOLUME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,254}$")
# Variables that name code to load: acceptable only when every entry is a
# read-only place inside the child (capsule checks the same).
_PATH_LIKE_ENV = ("PYTHONPATH", "NODE_PATH")


@dataclass(frozen=True)
class CapsuleFeatures:
    """What this capsule binary's command line offers (``exec --help``, ``volume --help``)."""

    mount: bool = False
    volume: bool = False
    tmp_size: bool = False


@functools.lru_cache(maxsize=16)
def probe_features(binary: str) -> CapsuleFeatures:
    """Ask the binary; anything that fails means the feature is absent."""

    def ask(*args: str) -> tuple[int, str]:
        try:
            done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return 1, ""
        return done.returncode, done.stdout + done.stderr

    rc, text = ask("exec", "--help")
    vrc, _ = ask("volume", "--help")
    return CapsuleFeatures(
        mount=rc == 0 and "--mount" in text,
        volume=vrc == 0,
        tmp_size=rc == 0 and "--tmp-size" in text,
    )


def _url_host(url: str) -> str | None:
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not host:
        return None
    return f"{host}:{port}" if port and port not in (80, 443) else host


def package_index_hosts(environ: Mapping[str, str] | None = None) -> list[str]:
    """The package-index hosts the host's pip and npm configuration name.

    pip: ``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` and ``index-url`` /
    ``extra-index-url`` in ``/etc/pip.conf``, ``$XDG_CONFIG_HOME/pip/pip.conf``
    (default ``~/.config``), ``~/.pip/pip.conf`` and ``$PIP_CONFIG_FILE``;
    npm: ``NPM_CONFIG_REGISTRY`` and ``registry=`` in ``~/.npmrc``. When pip
    (npm) names no index: PyPI (``pypi.org``, ``files.pythonhosted.org``)
    (``registry.npmjs.org``).
    """
    env = dict(os.environ if environ is None else environ)
    home = env.get("HOME") or os.path.expanduser("~")
    pip_urls: list[str] = []
    npm_urls: list[str] = []
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        pip_urls += env.get(key, "").split()
    pip_files = [
        "/etc/pip.conf",
        os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf"),
        os.path.join(home, ".pip", "pip.conf"),
    ]
    if env.get("PIP_CONFIG_FILE"):
        pip_files.append(env["PIP_CONFIG_FILE"])
    for path in pip_files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in parser.sections():
            for key in ("index-url", "extra-index-url", "index_url", "extra_index_url"):
                if parser.has_option(section, key):
                    pip_urls += parser.get(section, key).split()
    if env.get("NPM_CONFIG_REGISTRY"):
        npm_urls.append(env["NPM_CONFIG_REGISTRY"])
    try:
        with open(os.path.join(home, ".npmrc"), encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "registry":
                    npm_urls.append(value.strip())
    except (OSError, UnicodeDecodeError):
        pass
    hosts: list[str] = []
    if not pip_urls:
        hosts += ["pypi.org", "files.pythonhosted.org"]
    if not npm_urls:
        hosts.append("registry.npmjs.org")
    for url in pip_urls + npm_urls:
        host = _url_host(url)
        if host and host not in hosts:
            hosts.append(host)
    if "pypi.org" in hosts and "files.pythonhosted.org" not in hosts:
        hosts.append("files.pythonhosted.org")  # PyPI serves its files from there
    return hosts


@dataclass
class _Plan:
    policy: dict[str, Any]
    args: list[str] = field(default_factory=list)  # capsule exec options (--mount ...)
    volumes: list[tuple[str, bool]] = field(default_factory=list)  # (name, read_only)


def _inside(path: str, places: Iterable[str]) -> bool:
    path = os.path.normpath(path)
    for place in places:
        place = os.path.normpath(place)
        if path == place or path.startswith(place.rstrip("/") + "/"):
            return True
    return False


def plan_spec(
    spec: Any,
    *,
    features: CapsuleFeatures | None = None,
    index_hosts: Iterable[str] | None = None,
) -> _Plan:
    """The capsule policy and ``exec`` options for a ProcessSpec-like object.

    Raises ``SandboxRequiredError`` (or ``ValueError`` for a malformed value)
    when the spec cannot be given as asked.
    """
    features = features or CapsuleFeatures()
    network = getattr(spec, "network", "none") or "none"
    hosts = list(getattr(spec, "allow_hosts", None) or [])
    egress = getattr(spec, "egress", None)
    if egress is not None:
        hosts += [h for h in getattr(egress, "allowed_domains", ()) or () if h not in hosts]
    credentials = coerce_credentials(getattr(spec, "credentials", None))
    net: dict[str, Any]
    if network == "none":
        net = {"mode": "none"}
    elif network in ("restricted", "default", "egress"):
        if not hosts and not credentials and network != "egress":
            hosts = list(index_hosts if index_hosts is not None else package_index_hosts())
        if not hosts and not credentials:
            raise SandboxRequiredError(
                f"network={network!r} needs allow_hosts: capsule never turns a restricted "
                "network into unrestricted egress"
            )
        net = {"mode": "proxy", "allow_hosts": [host_policy(h) for h in hosts]}
    elif network == "unrestricted":
        if credentials:
            raise SandboxRequiredError(
                "network='unrestricted' with credentials: unrestricted egress never passes "
                "capsule's proxy, which injects them; use network='restricted' with allow_hosts"
            )
        net = {"mode": "unrestricted"}
    else:
        raise SandboxRequiredError(f"unknown network mode {network!r}; refusing (fail closed)")
    # Credentials make "none" a proxy to their hosts and add their hosts.
    with_net = apply_network({"network": net}, credentials=credentials,
                             upstream_ca=getattr(spec, "upstream_ca", None))

    plan = _Plan(policy={})
    read: list[str] = []
    write: list[str] = []
    ro_places: list[str] = []
    rw_places: list[str] = []
    for path in getattr(spec, "read_only_mounts", None) or []:
        resolved = _validate.mount_path(path, "read_only_mounts", write=False)
        _must_exist(resolved, f"ProcessSpec.read_only_mounts {os.fspath(path)!r}")
        read.append(resolved)
        ro_places += [resolved, os.fspath(path)]
    for mount in getattr(spec, "mounts", None) or []:
        src = str(getattr(mount, "src", "") or "")
        dst = str(getattr(mount, "dst", "") or "")
        read_only = bool(getattr(mount, "read_only", True))
        is_volume = not os.path.isabs(src)
        if not is_volume and (not dst or os.path.normpath(dst) == os.path.normpath(src)):
            resolved = _validate.mount_path(src, "mounts", write=not read_only)
            _must_exist(resolved, f"ProcessSpec.mounts src {src!r}")
            (read if read_only else write).append(resolved)
            (ro_places if read_only else rw_places).extend([resolved, src])
            continue
        if is_volume and not _VOLUME_RE.match(src):
            raise SandboxRequiredError(f"mount source {src!r} is neither an absolute host path nor a volume name")
        if not os.path.isabs(dst):
            raise SandboxRequiredError(f"mount {src!r}: the destination {dst!r} must be an absolute path")
        if not features.mount:
            raise SandboxRequiredError(
                f"mount {src!r} -> {dst!r} needs `capsule exec --mount` (a capsule with the "
                "private view); this capsule cannot remap paths, it grants host paths in place only (dst == src)"
            )
        if is_volume and not features.volume:
            raise SandboxRequiredError(f"mount of volume {src!r} needs `capsule volume` (this capsule has none)")
        source = f"volume:{src}" if is_volume else _validate.mount_path(src, "mounts", write=not read_only)
        plan.args += ["--mount", f"{source}:{os.path.normpath(dst)}:{'ro' if read_only else 'rw'}"]
        if is_volume:
            plan.volumes.append((src, read_only))
        (ro_places if read_only else rw_places).append(os.path.normpath(dst))

    env = dict(getattr(spec, "env", None) or {})
    if env.get("TMPDIR") in ("/tmp", "/tmp/"):
        # capsule gives every run its own TMPDIR (and, with the private view,
        # its own /tmp): that is what the caller asked for.
        env.pop("TMPDIR")
    path_like = {k: env.pop(k) for k in _PATH_LIKE_ENV if k in env}
    _validate.env_vars(env)
    for key, value in path_like.items():
        entries = [e for e in value.split(os.pathsep) if e]
        bad = [e for e in entries if not os.path.isabs(e) or _inside(e, rw_places) or not _inside(e, ro_places)]
        if bad or not entries:
            raise SandboxRequiredError(
                f"{key}={value!r}: every entry must lie in a read-only mount or grant (never a "
                f"writable place); not: {', '.join(bad) or '(empty)'}"
            )
        env[key] = value

    limits_in: Mapping[str, Any] = getattr(spec, "limits", None) or {}
    limits: dict[str, Any] = {}
    for key, value in limits_in.items():
        if key in ("memory", "memory_mb", "mem"):
            limits["memory_mb"] = _mebibytes(value)
        elif key in ("timeout", "timeout_seconds"):
            limits["timeout_seconds"] = float(value)
        elif key in ("cpu_seconds", "cpu_time"):
            limits["cpu_seconds"] = int(value)
        elif key in ("pids", "pids_limit", "max_processes"):
            limits["max_processes"] = int(value)
        elif key in ("nofile", "max_open_files"):
            limits["max_open_files"] = int(value)
        elif key in ("max_output_bytes", "output_max_bytes"):
            limits["max_output_bytes"] = int(value)
        elif key in ("max_file_size_mb", "fsize_mb"):
            limits["max_file_size_mb"] = int(value)
        elif key == "tmp_size" and features.tmp_size:
            plan.args += ["--tmp-size", f"{_mebibytes(value)}m"]
        # Docker-only knobs (cpus, home_size; tmp_size without a private /tmp)
        # have no capsule meaning.

    for entry in with_net.get("credentials", []):
        clash = [n for n in entry.get("placeholder_env", []) if n in env]
        if clash:
            raise ValueError(
                f"credential {entry['name']!r}: {clash[0]} is both its placeholder_env and set by env"
            )
    plan.policy = {
        "version": 1,
        "filesystem": {"read": read, "write": write},
        "network": with_net["network"],
        "env": {"set": env},
        "limits": limits,
    }
    if "credentials" in with_net:
        plan.policy["credentials"] = with_net["credentials"]
    return plan


def spec_to_policy(spec: Any, **kwargs: Any) -> dict[str, Any]:
    """The capsule policy for a ProcessSpec-like object (see :func:`plan_spec`)."""
    return plan_spec(spec, **kwargs).policy


class Outcome(tuple):  # type: ignore[type-arg]
    """``(exit_code, stdout, stderr)``, agentnode's ``run_process`` triple, that
    also says why the run stopped.

    ``exit_code`` is ``-1`` when capsule's wall-clock limit killed the run
    (agentnode's timeout convention), ``128+N`` when signal N ended it, else
    the program's exit status: a program that exits 124 or 125 is just that.
    ``reason`` is capsule's ``termination_reason`` (``exited``, ``signaled``,
    ``timeout``); ``result`` is capsule's whole JSON result.
    """

    def __new__(
        cls,
        exit_code: int,
        stdout: str,
        stderr: str,
        *,
        reason: str = "exited",
        native_status: int | None = None,
        result: Mapping[str, Any] | None = None,
        platform: str = "capsule",
    ) -> "Outcome":
        made = super().__new__(cls, (exit_code, stdout, stderr))
        made._reason = reason  # type: ignore[attr-defined]
        made._native = native_status  # type: ignore[attr-defined]
        made._result = dict(result or {})  # type: ignore[attr-defined]
        made._platform = platform  # type: ignore[attr-defined]
        return made

    @property
    def exit_code(self) -> int:
        return self[0]  # type: ignore[no-any-return]

    @property
    def stdout(self) -> str:
        return self[1]  # type: ignore[no-any-return]

    @property
    def stderr(self) -> str:
        return self[2]  # type: ignore[no-any-return]

    @property
    def reason(self) -> str:
        return self._reason  # type: ignore[attr-defined,no-any-return]

    @property
    def timed_out(self) -> bool:
        return self.reason == "timeout"

    @property
    def native_status(self) -> int | None:
        """capsule's own exit status."""
        return self._native  # type: ignore[attr-defined,no-any-return]

    @property
    def result(self) -> dict[str, Any]:
        return self._result  # type: ignore[attr-defined,no-any-return]

    @property
    def platform(self) -> str:
        return self._platform  # type: ignore[attr-defined,no-any-return]


def _refusal_text(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("capsule:")]
    return _spec_words("; ".join(lines[-3:]) or stderr.strip()[-2000:] or "refused by capsule")


def _must_exist(path: str, what: str) -> None:
    """A host path the spec grants must exist: said in the spec's words, not
    as an error in the policy file the backend writes."""
    if not os.path.exists(path):
        raise SandboxRequiredError(f"{what} does not exist on this host ({path}); create it, or leave it out")


# The policy file the backend writes for a spec (`<tmp>/capsule-backend-*/policy-*.json`,
# with `:line:col`) means nothing to the caller: errors name the spec instead.
_POLICY_FILE_RE = re.compile(r"\S*capsule-backend-[^/\s]*/policy-[0-9a-f]+\.json(?::\d+)*:?\s*")


def _spec_words(text: str) -> str:
    return _POLICY_FILE_RE.sub("the ProcessSpec, as capsule policy key ", text)


class CapsuleAgentSession(_SessionBase):  # type: ignore[misc,valid-type]
    """A long-lived sandboxed process spoken to in JSON lines over its stdio
    (agentnode's ``AgentSandboxSession`` when agentnode is importable)."""

    def __init__(self, argv: list[str], cwd: str | None = None) -> None:
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=None,
            bufsize=0,
        )
        self._lines: "queue.Queue[bytes | None]" = queue.Queue()
        self._stderr = bytearray()
        self._wlock = threading.Lock()
        self._closed = False
        self._err_done = threading.Event()
        self._reported = False
        threading.Thread(target=self._pump_out, daemon=True, name="capsule-session-out").start()
        threading.Thread(target=self._pump_err, daemon=True, name="capsule-session-err").start()

    def _pump_out(self) -> None:
        assert self._proc.stdout is not None
        for line in iter(self._proc.stdout.readline, b""):
            self._lines.put(line)
        self._lines.put(None)

    def _pump_err(self) -> None:
        assert self._proc.stderr is not None
        try:
            for chunk in iter(lambda: self._proc.stderr.read(4096), b""):  # type: ignore[union-attr]
                if len(self._stderr) < 1_048_576:
                    self._stderr += chunk
        finally:
            self._err_done.set()

    @property
    def stderr(self) -> str:
        """What the process (and capsule) wrote on stderr so far (first MiB)."""
        return self._stderr.decode("utf-8", "replace")

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def _gone(self, exc: BaseException) -> Exception:
        code = self._proc.poll()
        if code is None:
            try:
                code = self._proc.wait(2.0)
            except subprocess.TimeoutExpired:
                code = None
        self._err_done.wait(2.0)
        # capsule's verdict on the spec came before the program existed
        # (open_agent_session's --dry-run). From then on the exit status may be
        # the program's own (it can exit 125, and print "capsule: ..." on the
        # same stderr capsule uses), so it is never read as a refusal.
        return RuntimeError(
            f"sandboxed process is gone (exit {code}): {exc}; stderr (capsule's and the program's): "
            f"{self.stderr.strip()[-500:]!r}"
        )

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one message as a JSON line to the process's stdin."""
        if self._closed:
            raise RuntimeError("session is closed")
        data = json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
        assert self._proc.stdin is not None
        with self._wlock:
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                raise self._gone(exc) from None

    def recv(self, timeout: float) -> dict[str, Any] | None:
        """Next JSON line from stdout; None at EOF; TimeoutError when none comes.

        Lines that are not JSON objects are skipped.
        """
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no message within {timeout}s") from None
            if line is None:
                self._lines.put(None)  # stay at EOF for later calls
                self._report_end()
                return None
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):
                # The program's line: nested past Python's recursion limit
                # it raises RecursionError, which is no ValueError.
                continue
            if isinstance(value, dict):
                return value

    def _report_end(self) -> None:
        """Once the session's stdout ends: when capsule or the process failed,
        log why (exit code and the tail of stderr) on the ``capsule_sandbox``
        logger, since a framework that only sees EOF reports no reason."""
        if self._reported:
            return
        self._reported = True
        try:
            code = self._proc.wait(2.0)
        except subprocess.TimeoutExpired:
            return
        if code != 0:
            self._err_done.wait(2.0)
            _LOG.warning("capsule agent session ended with exit %s; stderr: %s", code, self.stderr[-4000:])

    def close(self, timeout: float = 5.0) -> None:
        """Close stdin, then stop capsule (and with it the sandboxed tree)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.terminate()
            try:
                self._proc.wait(3.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> "CapsuleAgentSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CapsuleBackend(_Base):  # type: ignore[misc]
    """agentnode's ``SandboxBackend`` on capsule: each process is one ``capsule exec``.

    ``wrap_command`` writes the spec's policy to a private, content-addressed
    JSON file (0600, in a directory removed with the backend) and returns the
    argv. ``check_available().backend`` is the capsule executable, so
    agentnode's ``<backend> volume inspect|create|rm`` land on capsule.

    Options: ``network_hosts`` widens the hosts a ``restricted``/``default``
    network reaches (beyond the package indexes the host's pip/npm
    configuration names; ``index_hosts`` replaces that list);
    ``pip_find_links`` makes pip inside every run install from that local
    wheel directory only (``PIP_NO_INDEX=1``, ``PIP_FIND_LINKS``, the
    directory readable), for offline or pinned builds; ``agent_id`` and
    ``audit_log`` as for the provider.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        agent_id: str = "agentnode",
        audit_log: str | os.PathLike[str] | bool | None = None,
        network_hosts: Iterable[str] = (),
        index_hosts: Iterable[str] | None = None,
        pip_find_links: str | os.PathLike[str] | None = None,
        llm_access: dict[str, Any] | None = None,
    ) -> None:
        self._llm_access = None if llm_access is None else dict(llm_access)
        self._find_links = os.path.realpath(os.fspath(pip_find_links)) if pip_find_links is not None else None
        if self._find_links is not None and not os.path.isdir(self._find_links):
            raise ValueError(f"pip_find_links {self._find_links!r} is not a directory")
        self._availability = AvailabilityCache(binary)
        self._agent_id = _validate.agent_id(agent_id)
        self._audit_log = audit_log
        self._network_hosts = [str(h) for h in network_hosts]
        for host in self._network_hosts:
            _validate.host_entry(host)
        self._index_hosts = None if index_hosts is None else [str(h) for h in index_hosts]
        self._dir = tempfile.mkdtemp(prefix="capsule-backend-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        # One warm `capsule serve` for this backend's runs (docs/serve.md);
        # CAPSULE_SANDBOX_WARM=0: a fresh `capsule exec` per run.
        self._serve: ServeClient | None = None
        self._serve_lock = threading.Lock()
        self._warm = os.environ.get("CAPSULE_SANDBOX_WARM", "1") != "0"

    @staticmethod
    def llm_access_for(agent_config: dict[str, Any] | None, host_config: dict[str, Any] | None = None) -> dict[str, Any]:
        """Capsule's ``llm_access`` policy section for an agentnode agent.

        The agent's manifest ``llm_access`` block, clamped by agentnode's own
        host ceiling (``agent_sandbox.llm`` in ``~/.agentnode/config.json``),
        resolved by agentnode's own ``resolve_llm_policy`` when agentnode is
        installed (default-deny: no block, or ``enabled`` not true, gives
        ``{"enabled": False}``). Pass the result as ``CapsuleBackend(...,
        llm_access=...)`` to have capsule's broker, not agentnode's, hold the
        key; capsule's own ``llm.ceiling`` still wins over it.
        """
        try:
            from agentnode_sdk.runtimes.agent_llm_policy import resolve_llm_policy
        except ImportError:  # agentnode not installed: the same rule, stated here
            resolve_llm_policy = None
        if resolve_llm_policy is not None:
            p = resolve_llm_policy(agent_config, host_config)
            enabled, calls, inp, out = p.enabled, p.max_calls, p.max_input_chars, p.max_output_chars
            models = None if p.allowed_models is None else sorted(p.allowed_models)
        else:
            manifest = ((agent_config or {}).get("llm_access")) or {}
            host = (((host_config or {}).get("agent_sandbox")) or {}).get("llm") or {}
            enabled = manifest.get("enabled") is True and host.get("enabled", True) is not False

            def cap(key: str, default: int) -> int:
                def num(d: dict[str, Any]) -> int | None:
                    try:
                        v = int(d[key])
                    except (KeyError, TypeError, ValueError):
                        return None
                    return v if v > 0 else None

                ceiling = num(host) or default
                return min(num(manifest) or ceiling, ceiling)

            calls, inp, out = cap("max_calls", 20), cap("max_input_chars", 24000), cap("max_output_chars", 24000)
            lists = [d.get("allowed_models") for d in (manifest, host) if isinstance(d.get("allowed_models"), list)]
            models = None
            if lists:
                sets = [{str(m).strip() for m in lst if str(m).strip()} for lst in lists]
                models = sorted(set.intersection(*sets))
        if not enabled:
            return {"enabled": False}
        section: dict[str, Any] = {
            "enabled": True,
            "max_calls": int(calls),
            "max_input_chars": int(inp),
            "max_output_chars": int(out),
        }
        if models is not None:
            section["allowed_models"] = list(models)
        return section

    # -- detection ----------------------------------------------------------------

    def check_available(self, force: bool = False) -> SandboxAvailability:
        avail = self._availability.get(refresh=force)
        from capsule_sandbox._binary import landlock_abi

        version = avail.doctor.get("version") if isinstance(avail.doctor, dict) else None
        return SandboxAvailability(
            available=avail.available,
            backend=avail.binary or "none",
            reason=avail.reason,
            executable_path=avail.binary,
            # No daemon and no image: capsule itself is the whole runtime.
            daemon_ok=avail.available,
            image_available=avail.available,
            image_digest=f"capsule {version}" if version else ("capsule" if avail.available else None),
            landlock_abi=landlock_abi(avail.doctor) if avail.doctor else 0,
            doctor=dict(avail.doctor),
        )

    def explain_unavailable(self) -> str:
        avail = self.check_available()
        return "" if avail.available else (avail.reason or "capsule unavailable")

    def features(self) -> CapsuleFeatures:
        """Which of ``--mount``, ``volume``, ``--tmp-size`` this capsule has."""
        binary = self._availability.get().binary
        return probe_features(binary) if binary else CapsuleFeatures()

    def build_process_spec(
        self,
        command: list[str],
        *,
        network: str = "none",
        mounts: list[MountSpec] | None = None,
        env: dict[str, str] | None = None,
        limits: dict[str, Any] | None = None,
        clean_home: bool = True,
        interactive: bool = False,
        allow_hosts: list[Any] | None = None,
        read_only_mounts: list[str] | None = None,
        cwd: str | None = None,
        credentials: list[Any] | None = None,
        upstream_ca: str | None = None,
    ) -> ProcessSpec:
        """agentnode's spec, plus capsule's ``credentials`` and ``upstream_ca``
        (``allow_hosts`` entries may be ``HostRule``s or mappings)."""
        return ProcessSpec(
            command=list(command),
            network=network,
            allow_hosts=list(allow_hosts or []),
            read_only_mounts=list(read_only_mounts or []),
            mounts=list(mounts or []),
            env=dict(env or {}),
            limits=dict(limits or {}),
            cwd=cwd,
            clean_home=clean_home,
            interactive=interactive,
            credentials=list(credentials or []),
            upstream_ca=upstream_ca,
        )

    # -- argv ---------------------------------------------------------------------

    def _index_hosts_for(self) -> list[str]:
        hosts = list(self._index_hosts) if self._index_hosts is not None else package_index_hosts()
        return hosts + [h for h in self._network_hosts if h not in hosts]

    def _volume(self, binary: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, "volume", *args], capture_output=True, text=True, timeout=30)

    def _remove_volumes(self, binary: str, names: list[str]) -> None:
        """Remove volumes this backend created for a run that never ran."""
        for name in names:
            if self._volume(binary, "rm", "-f", name).returncode != 0:
                _LOG.warning("could not remove volume %r, made for a run capsule refused", name)

    def wrap_command(self, spec: Any, *, json_result: bool = False, timeout: float | None = None) -> list[str]:
        """The argv that runs ``spec.command`` under capsule (nothing is run,
        except that a read-write volume the spec mounts is created if missing)."""
        return self._wrap(spec, json_result=json_result, timeout=timeout)[0]

    def _wrap(
        self, spec: Any, *, json_result: bool = False, timeout: float | None = None
    ) -> tuple[list[str], list[str]]:
        """``wrap_command``'s argv, and the volumes it created for it."""
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise SandboxRequiredError(f"capsule unavailable: {avail.reason}; refusing to run unsandboxed")
        command = [str(a) for a in (getattr(spec, "command", None) or [])]
        if not command:
            raise ValueError("ProcessSpec.command is empty")
        command[0] = _resolve_program(command[0])
        plan = plan_spec(spec, features=self.features(), index_hosts=self._index_hosts_for())
        made: list[str] = []
        for name, read_only in plan.volumes:
            if self._volume(avail.binary, "inspect", name).returncode == 0:
                continue
            if read_only:
                self._remove_volumes(avail.binary, made)
                raise SandboxRequiredError(f"volume {name!r} does not exist (capsule volume inspect failed)")
            created = self._volume(avail.binary, "create", name)
            if created.returncode != 0:
                self._remove_volumes(avail.binary, made)
                raise SandboxRequiredError(f"could not create volume {name!r}: {created.stderr.strip()}")
            made.append(name)
        policy = plan.policy
        self._python_shim(policy)
        if self._find_links is not None:
            policy["env"]["set"].setdefault("PIP_NO_INDEX", "1")
            policy["env"]["set"].setdefault("PIP_FIND_LINKS", self._find_links)
            policy["filesystem"]["read"].append(self._find_links)
        if timeout is not None:
            policy["limits"]["timeout_seconds"] = float(timeout)
        if self._llm_access is not None:
            # capsule's own key-holding broker: the child asks over its RPC fd;
            # capsule's host config (provider, key, llm.ceiling) decides.
            policy["llm_access"] = dict(self._llm_access)
        blob = json.dumps(policy, sort_keys=True).encode("utf-8")
        path = os.path.join(self._dir, f"policy-{hashlib.sha256(blob).hexdigest()[:24]}.json")
        if not os.path.exists(path):
            _policy.write(policy, path)
        argv = [avail.binary, "exec", "--policy", path, "--agent-id", self._agent_id, *plan.args]
        if json_result:
            argv.append("--json")
        cwd = getattr(spec, "cwd", None)
        if cwd:
            argv += ["--cwd", os.path.abspath(cwd)]
        if self._audit_log is False:
            argv.append("--no-audit")
        elif self._audit_log not in (None, True):
            argv += ["--audit-log", os.fspath(self._audit_log)]  # type: ignore[arg-type]
        return argv + ["--", *command], made

    def _python_shim(self, policy: dict[str, Any]) -> None:
        """When PATH has no ``python`` (Debian), give the child one: a directory
        of this backend's (host-only, read-only inside) with ``python`` ->
        the host's ``python3``, first on the child's PATH, so ``sh -c "python
        -m pip ..."`` works as it does in agentnode's image."""
        env = policy["env"]["set"]

        def system(path: str | None) -> bool:
            # Only a system interpreter runs inside: a per-user shim (pyenv,
            # asdf) under $HOME is not granted to the child.
            real = os.path.realpath(path) if path else ""
            return real.startswith(("/usr/", "/bin/", "/opt/"))

        if "PATH" in env or system(shutil.which("python")):
            return
        candidates = [shutil.which("python3"), "/usr/bin/python3", "/usr/local/bin/python3"]
        target = next((c for c in candidates if c and os.path.exists(c) and system(c)), None)
        if target is None:
            return
        shim = os.path.join(self._dir, "bin")
        link = os.path.join(shim, "python")
        if not os.path.islink(link):
            os.makedirs(shim, mode=0o755, exist_ok=True)
            os.symlink(os.path.realpath(target), link)
        env["PATH"] = shim + os.pathsep + os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        policy["filesystem"]["read"].append(shim)

    # -- running ------------------------------------------------------------------

    def run_process(self, spec: Any, input_text: str | None = None, timeout: float = 120.0) -> Outcome:
        """One-shot sandboxed run: ``(exit_code, stdout, stderr)`` as an :class:`Outcome`.

        capsule enforces ``timeout`` (killing the whole tree): ``exit_code`` is
        then ``-1``, agentnode's timeout convention. A refusal (capsule's
        result says ``refused``, or the spec cannot be given) raises
        :class:`SandboxRequiredError`. Both are read from capsule's JSON
        result, never from the exit status the program chose.
        """
        argv, made = self._wrap(spec, json_result=True, timeout=timeout)
        try:
            return self._run_wrapped(argv, input_text, timeout)
        except SandboxRequiredError:
            # Nothing ran: a volume made for this run goes with it.
            self._remove_volumes(argv[0], made)
            raise

    def _serve_client(self, binary: str) -> ServeClient:
        with self._serve_lock:
            if self._serve is None or not self._serve.alive:
                if self._serve is not None:
                    self._serve.close()
                self._serve = ServeClient(binary)
            return self._serve

    def _run_served(self, argv: list[str], input_text: str | None, timeout: float) -> subprocess.CompletedProcess:
        """``argv`` (a ``capsule exec``) through the backend's ``capsule serve``:
        the same run, forked from a warm parent. A server that dies is a
        failed run (the run died with it), never one left running."""
        client = self._serve_client(argv[0])
        with self._serve_lock:
            self._serve_seq = getattr(self, "_serve_seq", 0) + 1
            rid = str(self._serve_seq)
        waiter = client.submit(rid, {
            "args": argv[2:],
            "env": dict(os.environ),
            "clear_env": True,
            "cwd": os.getcwd(),
            "stdin": input_text or "",
        })
        if not client.wait(waiter, float(timeout) + 30.0):
            client.cancel(rid)
            if not client.wait(waiter, 5.0):
                client.close()
            raise subprocess.TimeoutExpired(argv, float(timeout) + 30.0)
        resp = waiter.response
        if resp is None or not isinstance(resp.get("exit_code"), int):
            why = "it ended before answering" if resp is None else resp.get("error")
            return subprocess.CompletedProcess(argv, 125, b"", f"capsule serve: {why}".encode())
        doc = resp.get("result")
        out = json.dumps(doc).encode() if isinstance(doc, dict) else str(resp.get("stdout") or "").encode()
        return subprocess.CompletedProcess(argv, resp["exit_code"], out, str(resp.get("stderr") or "").encode())

    def _run_wrapped(self, argv: list[str], input_text: str | None, timeout: float) -> Outcome:
        try:
            if self._warm and argv[1:2] == ["exec"] and "--tool-fd" not in argv:
                try:
                    done = self._run_served(argv, input_text, timeout)
                except ServeDied:
                    done = self._run_served(argv, input_text, timeout)  # a new server, once
            else:
                done = subprocess.run(
                    argv,
                    input=(input_text or "").encode("utf-8"),
                    capture_output=True,
                    timeout=float(timeout) + 30.0,
                    check=False,
                )
        except subprocess.TimeoutExpired as exc:
            # capsule overran its own limit by 30 s: subprocess killed it.
            return Outcome(
                -1,
                "",
                (exc.stderr or b"").decode("utf-8", "replace") + f"\n[capsule did not stop after {timeout}s]",
                reason="timeout",
                native_status=None,
            )
        err_text = done.stderr.decode("utf-8", "replace")
        try:
            result = json.loads(done.stdout.decode("utf-8", "replace"))
        except ValueError:
            result = None
        if not isinstance(result, dict):
            raise SandboxRequiredError(
                f"capsule exited {done.returncode} without a result: {_refusal_text(err_text)}"
            )
        reason = str(result.get("termination_reason") or "")
        out = str(result.get("stdout") or "")
        err = str(result.get("stderr") or "")
        if reason == "refused":
            raise SandboxRequiredError(
                f"capsule refused the run: {_spec_words(str(result.get('error') or '')) or _refusal_text(err_text)}"
            )
        if reason == "error":
            raise SandboxRequiredError(
                f"capsule failed to run it: {_spec_words(str(result.get('error') or '')) or _refusal_text(err_text)}"
            )
        if reason == "timeout":
            return Outcome(-1, out, err + f"\n[sandbox timed out after {timeout}s]", reason=reason,
                           native_status=done.returncode, result=result)
        code = result.get("exit_code")
        sig = result.get("signal")
        if reason == "signaled" and isinstance(sig, int):
            code = 128 + sig
        if not isinstance(code, int) or isinstance(code, bool):
            raise SandboxRequiredError(f"capsule's result has no exit code (termination_reason {reason!r})")
        return Outcome(code, out, err, reason=reason or "exited", native_status=done.returncode, result=result)

    def open_agent_session(self, spec: Any) -> CapsuleAgentSession:
        """Start ``spec.command`` under capsule and talk to it over stdin/stdout.

        The spec is checked first (``capsule exec --dry-run``): a spec capsule
        refuses raises :class:`SandboxRequiredError` here, with capsule's
        reason, not a broken pipe on the first ``send()``.
        """
        argv = self.wrap_command(spec)
        sep = argv.index("--")
        check = argv[:sep] + ["--dry-run", "--json"] + argv[sep:]
        try:
            done = subprocess.run(check, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxRequiredError(f"could not check the agent spec with capsule: {exc}") from None
        if done.returncode != 0:
            raise SandboxRequiredError(f"capsule refused the agent session: {_refusal_text(done.stderr)}")
        # The plan is valid; what this host cannot enforce is in `problems`.
        try:
            problems = json.loads(done.stdout).get("problems") or []
        except (ValueError, AttributeError):
            raise SandboxRequiredError("capsule refused the agent session: no plan from --dry-run") from None
        if problems:
            raise SandboxRequiredError(f"capsule refused the agent session: {_spec_words('; '.join(map(str, problems)))}")
        return CapsuleAgentSession(argv)

    def close(self) -> None:
        """Stop the backend's ``capsule serve`` and remove its policy directory."""
        with self._serve_lock:
            serve, self._serve = self._serve, None
        if serve is not None:
            serve.close()
        self._finalizer()


def _resolve_program(program: str) -> str:
    """A bare ``python`` is the host's Python 3 when PATH has no ``python``
    (Debian ships only ``python3``); everything else is left to capsule."""
    if program == "python" and shutil.which("python") is None:
        return shutil.which("python3") or sys.executable or program
    return program

"""CrewAI: the code interpreter tool, each run confined by capsule.

crewai-tools' ``CodeInterpreterTool`` ran the agent's Python in a Docker
container, else in a "restricted sandbox" of Python builtins, else (with
``unsafe_mode=True``) on the host; crewai 1.x dropped it (``Agent(
allow_code_execution=True)`` is deprecated: "use dedicated sandbox
services"). ``CapsuleCodeInterpreterTool`` is that tool with capsule as the
sandbox: a CrewAI ``BaseTool`` with the same name, arguments (``code``,
``libraries_used``) and results as its Docker mode::

    from capsule_sandbox.crewai import CapsuleCodeInterpreterTool
    agent = Agent(role=..., goal=..., backstory=..., tools=[CapsuleCodeInterpreterTool()])

Each call is one fresh ``capsule exec`` of ``python -c CODE`` with the work
dir (default: the current directory, which the Docker mode mounted at
``/workspace``) as its cwd and only write grant, no network, a private
``/tmp`` and ``HOME``. It answers the output (stdout then stderr), or
``"Something went wrong while running the code: \\n<output>"`` when the code
exits non-zero, as the Docker mode did; a run over ``timeout`` seconds is
such a failure, its output ending in ``Timeout``. capsule installs nothing:
``libraries_used`` must be importable by ``python`` (a library that is not
is named in the answer).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, List, Optional, Type

from crewai.tools import BaseTool
from pydantic import BaseModel, Field, PrivateAttr

from capsule_sandbox import _policy
from capsule_sandbox._binary import AvailabilityCache
from capsule_sandbox._exec import CapsuleRun
from capsule_sandbox.types import SandboxConfig, SandboxResult


class CodeInterpreterSchema(BaseModel):
    """The arguments of crewai-tools' CodeInterpreterTool."""

    code: str = Field(
        ...,
        description="Python3 code used to be interpreted in the sandbox. ALWAYS PRINT the final result and the "
        "output of the code",
    )
    libraries_used: List[str] = Field(
        default_factory=list,
        description="List of libraries used in the code with proper installing names separated by commas. "
        "Example: numpy,pandas,beautifulsoup4",
    )


_IMPORT_NAMES = {"pillow": "PIL", "beautifulsoup4": "bs4", "scikit-learn": "sklearn", "pyyaml": "yaml"}


class CapsuleCodeInterpreterTool(BaseTool):
    """crewai-tools' CodeInterpreterTool, confined by capsule instead of Docker."""

    name: str = "Code Interpreter"
    description: str = "Interprets Python3 code strings with a final print statement."
    args_schema: Type[BaseModel] = CodeInterpreterSchema
    code: Optional[str] = None
    work_dir: Optional[str] = None
    timeout: float = 60.0
    python: Optional[str] = None
    network_allowlist: List[Any] = Field(default_factory=list)
    #: ``Credential``s (or mappings of their fields) the proxy injects; the
    #: code sees placeholders. They turn on the proxy to their hosts.
    credentials: List[Any] = Field(default_factory=list)
    upstream_ca: Optional[str] = None
    memory_mb: Optional[int] = 512
    env_vars: dict = Field(default_factory=dict)
    policy: Optional[Any] = None
    binary: Optional[str] = None
    audit_log: Optional[Any] = None

    _availability: Any = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        self._availability = AvailabilityCache(self.binary)

    def _run(self, **kwargs: Any) -> str:
        code = kwargs.get("code", self.code)
        if not isinstance(code, str) or not code.strip():
            return "Something went wrong while running the code: \nno code was given"
        libraries = [str(x) for x in (kwargs.get("libraries_used") or [])]
        return self.run_code_in_capsule(code, libraries)

    def run_code_in_capsule(self, code: str, libraries_used: List[str]) -> str:
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            return f"Something went wrong while running the code: \ncapsule unavailable: {avail.reason}"
        work = Path(self.work_dir) if self.work_dir is not None else Path.cwd()
        work.mkdir(parents=True, exist_ok=True)
        python = os.path.abspath(self.python or sys.executable)
        try:
            config = SandboxConfig(
                timeout_seconds=float(self.timeout),
                memory_mb=self.memory_mb,
                cpu_limit=None,
                network_enabled=bool(self.network_allowlist),
                network_allowlist=list(self.network_allowlist),
                output_dir=str(work.resolve()),
                env_vars={str(k): str(v) for k, v in self.env_vars.items()},
                credentials=list(self.credentials),
                upstream_ca=self.upstream_ca,
            )
            policy = _policy.build(config, base=_policy.load_base_policy(self.policy), python_tools={})
        except ValueError as exc:
            return f"Something went wrong while running the code: \ncapsule refused the policy: {exc}"
        fd, path = tempfile.mkstemp(prefix="capsule-crewai-", suffix=".json")
        os.close(fd)
        try:
            _policy.write(policy, path)
            flags = ["--json", "--cwd", str(work.resolve())]
            if self.audit_log is False:
                flags.append("--no-audit")
            elif self.audit_log not in (None, True):
                flags += ["--audit-log", os.fspath(self.audit_log)]
            missing = _missing_check(libraries_used)
            command = [python, "-c", missing + code] if missing else [python, "-c", code]
            result = CapsuleRun([avail.binary, "exec", *flags, "--policy", path], command,
                                timeout_seconds=float(self.timeout), tools=None).run()
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        return _answer(result, self.timeout)


def _missing_check(libraries: List[str]) -> str:
    """A prologue naming the libraries the interpreter cannot import (capsule
    installs none), on stderr, before the code runs."""
    names = sorted({_IMPORT_NAMES.get(lib.strip().lower(), lib.strip()).split("[")[0].replace("-", "_")
                    for lib in libraries if lib.strip()})
    if not names:
        return ""
    return (
        "import importlib.util as _capsule_u, sys as _capsule_s\n"
        f"_capsule_m = [n for n in {names!r} if _capsule_u.find_spec(n) is None]\n"
        "if _capsule_m: print('capsule installs no libraries; not importable here: ' + ', '.join(_capsule_m),"
        " file=_capsule_s.stderr)\n"
        "del _capsule_u, _capsule_s, _capsule_m\n"
    )


def _answer(result: SandboxResult, timeout: float) -> str:
    output = (result.stdout or "") + (result.stderr or "")
    reason = result.termination_reason
    if reason == "timeout":
        return f"Something went wrong while running the code: \n{output}\nTimeout after {timeout:g} seconds"
    if reason in ("refused", "error"):
        return f"Something went wrong while running the code: \n{output}capsule: {result.error}"
    if result.exit_code != 0:
        return f"Something went wrong while running the code: \n{output}"
    return output


__all__ = ["CapsuleCodeInterpreterTool", "CodeInterpreterSchema"]

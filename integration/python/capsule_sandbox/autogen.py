"""AutoGen: a code executor that runs each code block under capsule.

``CapsuleCommandLineCodeExecutor`` is autogen-core's ``CodeExecutor`` as
autogen-ext's ``DockerCommandLineCodeExecutor`` is, with capsule in place
of the container: swap the class and keep the rest::

    from capsule_sandbox.autogen import CapsuleCommandLineCodeExecutor
    executor = CapsuleCommandLineCodeExecutor(work_dir="coding", timeout=60)
    agent = CodeExecutorAgent("coder", code_executor=executor)

Each block is written to the work dir (``tmp_code_<sha256>.<ext>``, or the
name its ``# filename:`` first line gives, which must stay inside the work
dir), then run as one fresh ``capsule exec`` with the work dir as its cwd
and only write grant, forked by the executor's warm ``capsule serve``
(started by ``start()``, stopped by ``stop()``). The result is AutoGen's
``CommandLineCodeResult`` (``exit_code``, ``output``, ``code_file``), in
the Docker executor's shapes: a block that overran ``timeout`` is exit code
124 with ``Timeout`` at the end of the output; a cancelled one exit code 1,
"Code execution was cancelled."; the blocks stop at the first that fails.

Needs ``autogen-core`` and ``autogen-ext`` (imported from the installed
packages: capsule_sandbox itself stays standard-library only).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import sys
import tempfile
import threading
import warnings
from hashlib import sha256
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Union

from autogen_core import CancellationToken, Component
from autogen_core.code_executor import CodeBlock, CodeExecutor, FunctionWithRequirements
from autogen_ext.code_executors._common import (
    CommandLineCodeResult,
    build_python_functions_file,
    get_file_name_from_content,
    silence_pip,
)
from pydantic import BaseModel

from capsule_sandbox import _policy, _validate
from capsule_sandbox.credentials import coerce_credentials, host_policy
from capsule_sandbox._binary import AvailabilityCache
from capsule_sandbox._exec import CapsuleRun
from capsule_sandbox._serve import ServeClient, ServeRun
from capsule_sandbox.types import SandboxConfig, SandboxResult

if sys.version_info >= (3, 11):
    from typing import Self
else:  # pragma: no cover
    from typing_extensions import Self

logger = logging.getLogger("capsule_sandbox")

_PYTHON_LANGS = ("python", "py", "python3")
_SHELL_LANGS = {"bash": "bash", "shell": "sh", "sh": "sh"}


class CapsuleCommandLineCodeExecutorConfig(BaseModel):
    """What ``dump_component`` keeps (as the Docker executor's config does)."""

    timeout: int = 60
    work_dir: Optional[str] = None
    bind_dir: Optional[str] = None
    functions_module: str = "functions"
    extra_volumes: Dict[str, Dict[str, str]] = {}
    delete_tmp_files: bool = False
    python: Optional[str] = None
    policy: Optional[Dict[str, Any]] = None
    network_allowlist: List[Any] = []
    credentials: List[Dict[str, Any]] = []
    upstream_ca: Optional[str] = None
    memory_mb: Optional[int] = 512
    env_vars: Dict[str, str] = {}
    explain: bool = False


class CapsuleCommandLineCodeExecutor(CodeExecutor, Component[CapsuleCommandLineCodeExecutorConfig]):
    """Executes code blocks through a command line, each confined by capsule.

    The arguments the Docker executor has and that mean something without a
    container keep its names and meanings: ``timeout`` (per block, seconds,
    >= 1), ``work_dir`` (default: a temporary directory made by ``start()``
    and removed by ``stop()``), ``bind_dir`` (kept for the config; the work
    dir is the run's own directory, at its host path), ``functions`` and
    ``functions_module``, ``extra_volumes`` (``{host: {"bind": path,
    "mode": "rw"|"ro"}}``: the host path bound at ``bind`` in the run's view,
    ``capsule exec --mount``), ``delete_tmp_files``. ``image``,
    ``container_name``, ``auto_remove``, ``extra_hosts`` and
    ``device_requests`` have no meaning here and are not accepted.

    capsule's own: ``python`` (the interpreter for python blocks; default
    this process's), ``policy`` (a base capsule policy, dict or JSON file,
    as ``CapsuleSandboxProvider(policy=...)``), ``network_allowlist`` (hosts
    reachable through capsule's filtering proxy, strings or ``HostRule``s;
    default: no network), ``credentials`` (``Credential``s the proxy injects;
    they turn on the proxy to their hosts), ``upstream_ca``,
    ``memory_mb``, ``env_vars`` (set inside), ``binary`` (the capsule
    binary; default ``$CAPSULE_BIN``, the wheel's, PATH), ``audit_log``
    (a path, or False for none), ``explain`` (refused accesses explained in
    the output).
    """

    component_config_schema = CapsuleCommandLineCodeExecutorConfig
    component_provider_override = "capsule_sandbox.autogen.CapsuleCommandLineCodeExecutor"

    SUPPORTED_LANGUAGES: ClassVar[List[str]] = ["bash", "shell", "sh", "python"]

    FUNCTION_PROMPT_TEMPLATE: ClassVar[str] = (
        "You have access to the following user defined functions. They can be accessed from the module "
        "called `$module_name` by their function names.\n\nFor example, if there was a function called "
        "`foo` you could import it by writing `from $module_name import foo`\n\n$functions"
    )

    def __init__(
        self,
        *,
        timeout: int = 60,
        work_dir: Union[Path, str, None] = None,
        bind_dir: Union[Path, str, None] = None,
        functions: Sequence[Any] = (),
        functions_module: str = "functions",
        extra_volumes: Optional[Mapping[str, Mapping[str, str]]] = None,
        delete_tmp_files: bool = False,
        python: Union[str, os.PathLike[str], None] = None,
        policy: Union[Mapping[str, Any], str, os.PathLike[str], None] = None,
        network_allowlist: Sequence[Any] = (),
        memory_mb: Optional[int] = 512,
        env_vars: Optional[Mapping[str, str]] = None,
        credentials: Sequence[Any] = (),
        upstream_ca: Union[str, os.PathLike[str], None] = None,
        binary: Union[str, os.PathLike[str], None] = None,
        audit_log: Union[str, os.PathLike[str], bool, None] = None,
        explain: bool = False,
    ) -> None:
        if timeout < 1:
            raise ValueError("Timeout must be greater than or equal to 1.")
        if work_dir is None:
            self._work_dir: Optional[Path] = None
        else:
            work_dir = Path(work_dir)
            if work_dir.resolve() == Path.cwd().resolve():
                warnings.warn("Using the current directory as work_dir is deprecated.", DeprecationWarning,
                              stacklevel=2)
            work_dir.mkdir(exist_ok=True, parents=True)
            self._work_dir = work_dir
        self._bind_dir = Path(bind_dir) if bind_dir is not None else None
        self._timeout = int(timeout)
        if not functions_module.isidentifier():
            raise ValueError("Module name must be a valid Python identifier")
        self._functions_module = functions_module
        self._functions = list(functions)
        self._setup_functions_complete = not self._functions
        self._extra_volumes = {str(k): dict(v) for k, v in (extra_volumes or {}).items()}
        for host, spec in self._extra_volumes.items():
            if spec.get("mode", "rw") not in ("rw", "ro") or not str(spec.get("bind", host)).startswith("/"):
                raise ValueError(f"extra_volumes[{host!r}]: 'bind' must be an absolute path and 'mode' rw or ro")
        self._delete_tmp_files = bool(delete_tmp_files)
        self._python = os.path.abspath(os.fspath(python)) if python is not None else os.path.abspath(sys.executable)
        self._policy_arg = policy
        self._base_policy = _policy.load_base_policy(policy)
        self._network_allowlist = [host_policy(h) for h in network_allowlist]
        self._credentials = coerce_credentials(credentials)
        self._upstream_ca = os.path.abspath(os.fspath(upstream_ca)) if upstream_ca is not None else None
        self._memory_mb = memory_mb
        self._env_vars = dict(env_vars or {})
        self._availability = AvailabilityCache(binary)
        self._audit_log = audit_log
        self._explain = bool(explain)
        self._temp_dir: Optional[tempfile.TemporaryDirectory[str]] = None
        self._serve: Optional[ServeClient] = None
        self._serve_lock = threading.Lock()
        self._running = False
        self._warm = os.environ.get("CAPSULE_SANDBOX_WARM", "1") != "0"

    # -- the Docker executor's properties ------------------------------------------

    @property
    def timeout(self) -> int:
        """The timeout for each code block, in seconds."""
        return self._timeout

    @property
    def work_dir(self) -> Path:
        if self._work_dir is not None:
            return self._work_dir
        if self._temp_dir is not None:
            return Path(self._temp_dir.name)
        raise RuntimeError("Working directory not properly initialized")

    @property
    def bind_dir(self) -> Path:
        return self._bind_dir if self._bind_dir is not None else self.work_dir

    @property
    def functions_module(self) -> str:
        return self._functions_module

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Check capsule is usable, make the temporary work dir if none was
        given, and start the warm ``capsule serve``."""
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise RuntimeError(f"capsule unavailable: {avail.reason or 'unknown reason'}")
        if self._work_dir is None and self._temp_dir is None:
            self._temp_dir = tempfile.TemporaryDirectory()
        self._config()  # refuse a bad work dir / policy now, not on the first block
        if self._warm and self._serve is None:
            self._serve = await asyncio.to_thread(ServeClient, avail.binary)
        self._running = True

    async def stop(self) -> None:
        """Stop the warm ``capsule serve`` (a running block dies with it) and
        remove the temporary work dir, if one was made."""
        serve, self._serve = self._serve, None
        if serve is not None:
            await asyncio.to_thread(serve.close)
        if self._temp_dir is not None:
            self._temp_dir.cleanup()
            self._temp_dir = None
        self._running = False

    async def restart(self) -> None:
        """A new ``capsule serve`` (each block is a fresh sandbox anyway)."""
        if not self._running:
            raise ValueError("The executor is not running. Must first be started with either start or a context manager.")
        serve, self._serve = self._serve, None
        if serve is not None:
            await asyncio.to_thread(serve.close)
        if self._warm:
            self._serve = await asyncio.to_thread(ServeClient, self._binary())

    # -- execution ----------------------------------------------------------------

    async def execute_code_blocks(
        self, code_blocks: List[CodeBlock], cancellation_token: CancellationToken
    ) -> CommandLineCodeResult:
        """Execute the code blocks in order (each a fresh capsule sandbox);
        stop at the first that fails."""
        if not self._running:
            raise ValueError("The executor is not running. Must first be started with either start or a context manager.")
        if not self._setup_functions_complete:
            await self._setup_functions(cancellation_token)
        return await self._execute_code_dont_check_setup(code_blocks, cancellation_token)

    async def _setup_functions(self, cancellation_token: CancellationToken) -> None:
        content = build_python_functions_file(self._functions)
        (self.work_dir / f"{self._functions_module}.py").write_text(content)
        packages = sorted({p for f in self._functions if isinstance(f, FunctionWithRequirements)
                           for p in f.python_packages})
        if packages:
            result = await self._execute_code_dont_check_setup(
                [CodeBlock(code=f"{shlex.quote(self._python)} -m pip install {shlex.join(packages)}", language="sh")],
                cancellation_token,
            )
            if result.exit_code != 0:
                raise ValueError(f"Pip install failed. {result.output}")
        result = await self._execute_code_dont_check_setup([CodeBlock(code=content, language="python")],
                                                           cancellation_token)
        if result.exit_code != 0:
            raise ValueError(f"Functions failed to load: {result.output}")
        self._setup_functions_complete = True

    async def _execute_code_dont_check_setup(
        self, code_blocks: List[CodeBlock], cancellation_token: CancellationToken
    ) -> CommandLineCodeResult:
        if not code_blocks:
            raise ValueError("No code blocks to execute.")
        outputs: List[str] = []
        files: List[Path] = []
        last_exit_code = 0
        try:
            for block in code_blocks:
                lang = block.language.lower()
                if lang in _PYTHON_LANGS:
                    lang = "python"
                if lang != "python" and lang not in _SHELL_LANGS:
                    outputs.append(f"unknown language {lang}")
                    last_exit_code = 1
                    break
                code = silence_pip(block.code, lang)
                try:
                    filename = get_file_name_from_content(code, self.work_dir)
                except ValueError:
                    outputs.append("Filename is not in the workspace")
                    last_exit_code = 1
                    break
                if not filename:
                    ext = "py" if lang == "python" else lang
                    filename = f"tmp_code_{sha256(code.encode()).hexdigest()}.{ext}"
                code_path = self.work_dir / filename
                code_path.parent.mkdir(parents=True, exist_ok=True)
                code_path.write_text(code, encoding="utf-8")
                files.append(code_path)
                program = self._python if lang == "python" else _shell(_SHELL_LANGS[lang])
                output, exit_code = await self._run(
                    [program, str(code_path.resolve())], cancellation_token
                )
                outputs.append(output)
                last_exit_code = exit_code
                if exit_code != 0:
                    break
        finally:
            if self._delete_tmp_files:
                for path in files:
                    try:
                        path.unlink()
                    except OSError:
                        pass
        code_file = str(files[0]) if files else None
        return CommandLineCodeResult(exit_code=last_exit_code, output="".join(outputs), code_file=code_file)

    def _live_serve(self) -> ServeClient:
        """The executor's ``capsule serve``; a new one when it died (the blocks
        it was running failed with it)."""
        with self._serve_lock:
            serve = self._serve
            if serve is None:
                raise OSError("the executor was stopped")
            if not serve.alive:
                serve.close()
                serve = self._serve = ServeClient(self._binary())
            return serve

    def _binary(self) -> str:
        avail = self._availability.get()
        if not avail.available or avail.binary is None:
            raise RuntimeError(f"capsule unavailable: {avail.reason or 'unknown reason'}")
        return avail.binary

    def _config(self) -> SandboxConfig:
        config = SandboxConfig(
            timeout_seconds=float(self._timeout),
            memory_mb=self._memory_mb,
            cpu_limit=None,
            network_enabled=bool(self._network_allowlist),
            network_allowlist=list(self._network_allowlist),
            output_dir=str(self.work_dir.resolve()),
            env_vars=dict(self._env_vars),
            credentials=list(self._credentials),
            upstream_ca=self._upstream_ca,
        )
        _policy.build(config, base=self._base_policy, python_tools={})
        for host in self._extra_volumes:
            _validate.mount_path(host, "extra_volumes", write=self._extra_volumes[host].get("mode", "rw") == "rw")
        return config

    def _flags(self) -> List[str]:
        flags = ["--json", "--cwd", str(self.work_dir.resolve())]
        for host, spec in self._extra_volumes.items():
            flags += ["--mount", f"{os.path.abspath(host)}:{spec.get('bind', host)}:{spec.get('mode', 'rw')}"]
        if self._audit_log is False:
            flags.append("--no-audit")
        elif self._audit_log not in (None, True):
            flags += ["--audit-log", os.fspath(self._audit_log)]  # type: ignore[arg-type]
        if self._explain:
            flags.append("--explain")
        return flags

    async def _run(self, command: List[str], cancellation_token: CancellationToken) -> tuple[str, int]:
        binary = self._binary()
        policy = _policy.build(self._config(), base=self._base_policy, python_tools={})
        policy_path: Optional[str] = None
        run: Union[CapsuleRun, ServeRun]
        if self._serve is not None:
            run = ServeRun(self._live_serve, self._flags(), command, policy_text=_policy.dumps(policy),
                           cwd=str(self.work_dir.resolve()), timeout_seconds=float(self._timeout))
        else:
            fd, policy_path = tempfile.mkstemp(prefix="capsule-autogen-", suffix=".json")
            os.close(fd)
            _policy.write(policy, policy_path)
            run = CapsuleRun([binary, "exec", *self._flags(), "--policy", policy_path], command,
                             timeout_seconds=float(self._timeout), tools=None)
        task = asyncio.ensure_future(asyncio.to_thread(run.run))
        cancellation_token.link_future(task)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            run.cancel()
            return "Code execution was cancelled.", 1
        finally:
            if policy_path is not None:
                try:
                    os.unlink(policy_path)
                except OSError:
                    pass
        if run.cancelled:
            return "Code execution was cancelled.", 1
        return _output_of(result)

    # -- component config -----------------------------------------------------------

    def _to_config(self) -> CapsuleCommandLineCodeExecutorConfig:
        if self._functions:
            logger.info("Functions will not be included in serialized configuration")
        return CapsuleCommandLineCodeExecutorConfig(
            timeout=self._timeout,
            work_dir=str(self._work_dir) if self._work_dir else None,
            bind_dir=str(self._bind_dir) if self._bind_dir else None,
            functions_module=self._functions_module,
            extra_volumes=self._extra_volumes,
            delete_tmp_files=self._delete_tmp_files,
            python=self._python,
            policy=self._base_policy if self._policy_arg is not None else None,
            network_allowlist=self._network_allowlist,
            credentials=[c.to_kwargs() for c in self._credentials],
            upstream_ca=self._upstream_ca,
            memory_mb=self._memory_mb,
            env_vars=self._env_vars,
            explain=self._explain,
        )

    @classmethod
    def _from_config(cls, config: CapsuleCommandLineCodeExecutorConfig) -> Self:
        return cls(
            timeout=config.timeout,
            work_dir=Path(config.work_dir) if config.work_dir else None,
            bind_dir=Path(config.bind_dir) if config.bind_dir else None,
            functions_module=config.functions_module,
            extra_volumes=config.extra_volumes,
            delete_tmp_files=config.delete_tmp_files,
            python=config.python,
            policy=config.policy,
            network_allowlist=config.network_allowlist,
            credentials=config.credentials,
            upstream_ca=config.upstream_ca,
            memory_mb=config.memory_mb,
            env_vars=config.env_vars,
            explain=config.explain,
        )


def _shell(name: str) -> str:
    found = shutil.which(name) or shutil.which("sh")
    if not found:
        raise ValueError(f"no {name} on this host for a shell code block")
    return found


def _output_of(result: SandboxResult) -> tuple[str, int]:
    """(output, exit code) in the shapes of AutoGen's Docker executor."""
    output = (result.stdout or "") + (result.stderr or "")
    reason = result.termination_reason
    if reason == "timeout":
        return output + "\n Timeout", 124
    if reason in ("refused", "error"):
        return output + f"\ncapsule: {result.error or 'the sandbox could not run the block'}", result.exit_code or 125
    code = result.exit_code
    if isinstance(result.signal, int) and result.signal > 0:
        code = 128 + result.signal  # as a shell (and docker exec) reports it
    if result.error and getattr(result, "denials", None):
        output += f"\ncapsule: {result.error}"
    return output, int(code)


__all__ = ["CapsuleCommandLineCodeExecutor", "CapsuleCommandLineCodeExecutorConfig"]

"""pytest plugin: AutoGen's own Docker executor tests, with capsule's executor.

Loaded with ``-p autogen_docker_plugin`` before autogen-ext's
``tests/code_executors/test_docker_commandline_code_executor.py`` (from the
autogen-ext sdist, unmodified) is collected:

* ``autogen_ext.code_executors.docker`` is a module whose
  ``DockerCommandLineCodeExecutor`` is ``CapsuleDocker``: capsule's
  ``CapsuleCommandLineCodeExecutor``, taking (and ignoring) the
  container-only arguments the tests pass (``image``, ``container_name``...);
* the tests' gate (``import docker; docker.from_env().ping()``) is opened:
  ``docker`` is a module saying capsule stands in for it, whose ``ping()``
  fails when capsule is not usable, as Docker's does without a daemon.

The one test about container-only features (``extra_hosts``,
``init_command``) is deselected by the caller.
"""

from __future__ import annotations

import os
import sys
import types

import autogen_ext.code_executors  # noqa: F401  (the parent package, real)

from capsule_sandbox._binary import probe
from capsule_sandbox.autogen import CapsuleCommandLineCodeExecutor


class DockerException(Exception):
    pass


class _Client:
    def ping(self) -> bool:
        avail = probe(os.environ["CAPSULE_BIN"])
        if not avail.available:
            raise DockerException(f"capsule is not usable: {avail.reason}")
        return True


docker = types.ModuleType("docker")
docker.__doc__ = "capsule stands in for docker (see autogen_docker_plugin)"
docker.from_env = lambda: _Client()  # type: ignore[attr-defined]
errors = types.ModuleType("docker.errors")
errors.DockerException = DockerException  # type: ignore[attr-defined]
docker.errors = errors  # type: ignore[attr-defined]
sys.modules.setdefault("docker", docker)
sys.modules.setdefault("docker.errors", errors)

_CONTAINER_ONLY = ("image", "container_name", "auto_remove", "stop_container", "device_requests",
                   "extra_hosts", "init_command")


class CapsuleDocker(CapsuleCommandLineCodeExecutor):
    """What AutoGen's tests construct as ``DockerCommandLineCodeExecutor(...)``."""

    component_provider_override = "autogen_docker_plugin.CapsuleDocker"

    def __init__(self, *args, **kwargs):
        # Docker's positional arguments are image and container_name: dropped.
        if len(args) > 2:
            raise TypeError("DockerCommandLineCodeExecutor takes at most 2 positional arguments")
        for name in _CONTAINER_ONLY:
            kwargs.pop(name, None)
        kwargs.setdefault("audit_log", False)
        kwargs.setdefault("binary", os.environ["CAPSULE_BIN"])
        super().__init__(**kwargs)


stand_in = types.ModuleType("autogen_ext.code_executors.docker")
stand_in.__doc__ = "capsule's executor in place of AutoGen's Docker one (see autogen_docker_plugin)"
stand_in.DockerCommandLineCodeExecutor = CapsuleDocker  # type: ignore[attr-defined]
sys.modules["autogen_ext.code_executors.docker"] = stand_in

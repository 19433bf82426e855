"""pytest plugin: agentnode's own shipped sandbox tests, with capsule in place
of its container backend.

Loaded with ``-p agentnode_container_plugin`` before agentnode's tests (from
the agentnode-sdk sdist, unmodified) are collected:

* ``ContainerBackend`` (docker/podman), wherever agentnode's sandbox modules
  hold it, becomes ``CapsuleContainer``: a ``CapsuleBackend`` on
  ``$CAPSULE_BIN`` (pip inside it installs from ``$CAPSULE_CONFORMANCE_WHEELS``,
  offline);
* the gate of agentnode's real-sandbox tests (``AGENTNODE_SANDBOX_E2E=1``) is
  opened; the backend's own ``check_available()`` decides the rest, as
  docker's does.

Nothing here changes what the tests assert.
"""

from __future__ import annotations

import os
import sys

import agentnode_sdk.sandbox
import agentnode_sdk.sandbox.container_backend
import agentnode_sdk.sandbox.policy  # noqa: F401  (holds ContainerBackend for get_default_backend)

from capsule_sandbox import CapsuleBackend

os.environ["AGENTNODE_SANDBOX_E2E"] = "1"


class CapsuleContainer(CapsuleBackend):
    """What agentnode's tests construct as ``ContainerBackend()``."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("audit_log", False)
        wheels = os.environ.get("CAPSULE_CONFORMANCE_WHEELS")
        if wheels:
            kwargs.setdefault("pip_find_links", wheels)
        super().__init__(os.environ["CAPSULE_BIN"], **kwargs)


for name, module in list(sys.modules.items()):
    if name.startswith("agentnode_sdk.sandbox") and getattr(module, "ContainerBackend", None) is not None:
        module.ContainerBackend = CapsuleContainer

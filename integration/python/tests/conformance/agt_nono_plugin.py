"""pytest plugin: AGT's own nono integration test, with capsule in place of nono.

Loaded with ``-p agt_nono_plugin`` before AGT's ``test_nono_integration.py``
(from the agt-sandbox sdist, unmodified) is collected:

* ``agent_sandbox.nono_sandbox_provider.NonoSandboxProvider`` becomes
  ``CapsuleNono``, a ``CapsuleSandboxProvider`` (itself an AGT
  ``SandboxProvider``) on ``$CAPSULE_BIN``;
* the test's gate (``AGT_NONO_INTEGRATION=1`` and ``import nono_py``) is
  opened: ``nono_py`` is a module saying capsule stands in for it; the
  provider's own ``is_available()`` decides the rest, as for nono.

The test then builds AGT's own ``SandboxConfig`` and checks AGT's statuses.
"""

from __future__ import annotations

import os
import sys
import types

import agent_sandbox.nono_sandbox_provider as nono_pkg

from capsule_sandbox import CapsuleSandboxProvider

os.environ["AGT_NONO_INTEGRATION"] = "1"
stand_in = types.ModuleType("nono_py")
stand_in.__doc__ = "capsule stands in for nono-py (see agt_nono_plugin)"
sys.modules.setdefault("nono_py", stand_in)


class CapsuleNono(CapsuleSandboxProvider):
    """What AGT's test constructs as ``NonoSandboxProvider()``."""

    def __init__(self, **kwargs):
        kwargs.setdefault("audit_log", False)
        super().__init__(os.environ["CAPSULE_BIN"], **kwargs)


nono_pkg.NonoSandboxProvider = CapsuleNono

"""pytest plugin: AGT main's upstream files (vendored in ``agt_main/``) importable.

Loaded with ``-p agt_main_plugin`` in the venv tests/test_agt_main_runtime.py
builds (``agent-control-specification==0.3.1b1`` from PyPI, no agt-sandbox):

* ``agent_sandbox`` is the namespace package ``agt_main/agent_sandbox``: AGT
  main's nono provider and the modules it imports (its ``__init__.py``, which
  imports every other provider, is not vendored);
* ``agent_control_specification`` is AGT main's ``__init__.py`` and
  ``_host.py`` (vendored: the PyPI release has no ``HostSession``) over the
  installed release, which supplies everything else (the native runtime,
  ``AgentControl``, the types; at the vendored commit those modules match
  the release's).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

VENDORED = Path(__file__).resolve().parent / "agt_main"

if importlib.util.find_spec("agent_sandbox") is not None:
    raise RuntimeError("agt_main_plugin: an agent_sandbox is installed; this venv must have AGT main's only")

_installed = importlib.util.find_spec("agent_control_specification")
if _installed is None or not _installed.submodule_search_locations:
    raise RuntimeError("agt_main_plugin: agent-control-specification is not installed")
_spec = importlib.util.spec_from_file_location(
    "agent_control_specification",
    VENDORED / "agent_control_specification" / "__init__.py",
    submodule_search_locations=[
        str(VENDORED / "agent_control_specification"),
        *_installed.submodule_search_locations,
    ],
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _module
_spec.loader.exec_module(_module)

sys.path.insert(0, str(VENDORED))

"""The static pre-execution scan ``execute_code`` applies (``static_scan``).

When the Agent Governance Toolkit is importable this is AGT's own
``enforce_no_subprocess_execution`` (raising its ``SandboxCodeViolation``, a
``PermissionError``). Without AGT, capsule's counterpart below refuses the
same kind of code: calls that start processes (``subprocess.*``,
``os.system``/``popen``/``exec*``/``spawn*``/``fork*``, ``pty.spawn``) and
``shutil.which``, through imports, aliases and ``from`` imports.

It is a guardrail in front of the sandbox, not a layer of it: capsule confines
every process the code starts whether or not the scan sees it.
"""

from __future__ import annotations

import ast
from typing import Dict, List, Set, Tuple

from capsule_sandbox import _agt

_DENIED: Dict[str, Set[str]] = {
    "subprocess": {"Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "run"},
    "os": {
        "system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
        "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe",
        "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
    },
    "pty": {"spawn", "fork"},
    "shutil": {"which"},
}


class SandboxCodeViolation(PermissionError):
    """The static scan found process-spawning code (capsule's counterpart of AGT's)."""

    def __init__(self, findings: List[Tuple[int, str]]) -> None:
        self.findings = findings
        where = ", ".join(f"{name} (line {line})" for line, name in findings[:10])
        super().__init__(f"Sandbox code scan blocked process execution: {where}")


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.modules: Dict[str, str] = {}
        self.names: Dict[str, str] = {}
        self.found: List[Tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802
        for alias in node.names:
            root = alias.name.split(".")[0]
            if root in _DENIED:
                self.modules[alias.asname or root] = root
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
        root = (node.module or "").split(".")[0]
        for alias in node.names:
            if root in _DENIED and (alias.name in _DENIED[root] or alias.name == "*"):
                self.names[alias.asname or alias.name] = f"{root}.{alias.name}"
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = self.modules.get(func.value.id)
            if module and func.attr in _DENIED[module]:
                self.found.append((node.lineno, f"{module}.{func.attr}"))
        elif isinstance(func, ast.Name) and func.id in self.names:
            self.found.append((node.lineno, self.names[func.id]))
        elif isinstance(func, ast.Name) and func.id == "__import__":
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in _DENIED:
                self.found.append((node.lineno, f"__import__({node.args[0].value!r})"))
        self.generic_visit(node)


def scan(code: str) -> List[Tuple[int, str]]:
    """``(line, call)`` for each process-spawning call found (a syntax error is
    not a finding: the interpreter reports it when the code runs)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    except (RecursionError, MemoryError):
        # Nested past what the parser can hold: unread code is refused, as a
        # finding, not raised as an error the caller does not expect.
        return [(1, "code nested too deeply to scan")]
    visitor = _Visitor()
    try:
        visitor.visit(tree)
    except RecursionError:
        return [(1, "code nested too deeply to scan")]
    return visitor.found


def enforce(code: str) -> None:
    """Raise a ``PermissionError`` (AGT's ``SandboxCodeViolation`` when AGT is
    importable, else capsule's) when the scan finds process-spawning code."""
    agt = _agt.agt_code_scanner()
    if agt is not None:
        agt(code)
        return
    found = scan(code)
    if found:
        raise SandboxCodeViolation(found)

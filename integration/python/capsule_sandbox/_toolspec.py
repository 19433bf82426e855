"""What the sandboxed child may pass to a Python tool, and the check.

A Python tool is called with keyword arguments the child chose, so only the
parameters the tool's published schema declares reach it:

* parameters without a default (the tool's real inputs);
* parameters with a default, and keywords bound with ``functools.partial``,
  only when the tool opts in (:func:`child_settable`): a default such as
  ``readonly=True`` or a partial-bound ``root=`` is the host's choice, not
  the child's;
* never ``**kwargs`` extras, never positional-only parameters;
* basic JSON types checked against the annotations (``str``, ``int``,
  ``float``, ``bool``, ``list``, ``dict`` and ``Optional`` of those).

Anything else is a ``bad_request`` before the tool runs.
"""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

_ATTR = "__capsule_child_settable__"

_JSON = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", tuple: "array", dict: "object"}
_BY_NAME = {t.__name__: t for t in _JSON}


def child_settable(*names: str) -> Callable[[Any], Any]:
    """Let the sandboxed child set these defaulted (or partial-bound) parameters.

    ``@child_settable("limit")`` on a function, or
    ``child_settable("root")(functools.partial(f, root=...))`` for a partial's
    keyword (the opt-in must be on the object given to the provider).
    """

    def mark(func: Any) -> Any:
        value = frozenset(names) | frozenset(getattr(func, _ATTR, ()))
        try:
            setattr(func, _ATTR, value)
        except AttributeError:  # a bound method: mark its function
            setattr(func.__func__, _ATTR, value)
        return func

    return mark


@dataclass(frozen=True)
class Param:
    name: str
    json_type: Optional[str]
    nullable: bool
    required: bool


def _json_type(annotation: Any) -> Tuple[Optional[str], bool]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return None, False
    if isinstance(annotation, str):
        bare = annotation.replace(" ", "")
        nullable = bare.startswith("Optional[") or bare.endswith("|None") or bare.startswith("None|")
        for prefix, suffix in (("Optional[", "]"),):
            if bare.startswith(prefix) and bare.endswith(suffix):
                bare = bare[len(prefix) : -len(suffix)]
        bare = bare.replace("|None", "").replace("None|", "").split("[")[0]
        found = _BY_NAME.get(bare) or {"List": list, "Dict": dict, "Tuple": tuple}.get(bare)
        return (_JSON[found] if found else None), nullable
    origin = typing.get_origin(annotation)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            kind, _ = _json_type(args[0])
            return kind, nullable
        return None, nullable
    if origin is not None:
        annotation = origin
    if isinstance(annotation, type) and annotation in _JSON:
        return _JSON[annotation], False
    return None, False


def _partial_keywords(func: Any) -> Tuple[set, Any]:
    bound: set = set()
    inner = func
    while isinstance(inner, functools.partial):
        bound |= set(inner.keywords or {})
        inner = inner.func
    return bound, inner


def _hints(func: Any) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable annotations: use the raw ones
        return {}


class ToolSpec:
    """The child-settable parameters of one Python tool."""

    def __init__(self, func: Callable[..., Any]) -> None:
        opted = frozenset(getattr(func, _ATTR, ()))
        bound, inner = _partial_keywords(func)
        inner_opted = frozenset(getattr(inner, _ATTR, ()))
        hints = _hints(inner)
        self.params: Dict[str, Param] = {}
        try:
            sig = inspect.signature(func)
        except (TypeError, ValueError):
            sig = None
        for name, p in (sig.parameters.items() if sig else ()):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
                continue
            if name in bound:
                if name not in opted:  # a partial binding is the host's choice
                    continue
            elif p.default is not p.empty and name not in opted | inner_opted:
                continue
            kind, nullable = _json_type(hints.get(name, p.annotation))
            if p.default is None:
                nullable = True
            self.params[name] = Param(name, kind, nullable, p.default is p.empty and name not in bound)

    def schema(self) -> Dict[str, Any]:
        props: Dict[str, Any] = {}
        for p in self.params.values():
            prop: Dict[str, Any] = {}
            if p.json_type:
                prop["type"] = [p.json_type, "null"] if p.nullable else p.json_type
            props[p.name] = prop
        schema: Dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
        required = [p.name for p in self.params.values() if p.required]
        if required:
            schema["required"] = required
        return schema

    def check(self, arguments: Mapping[str, Any]) -> Optional[str]:
        """None when the arguments may be passed, else what is wrong (for the child)."""
        unknown = [k for k in arguments if k not in self.params]
        if unknown:
            return "unknown argument(s): " + ", ".join(sorted(repr(k)[:80] for k in unknown)[:10])
        missing = [p.name for p in self.params.values() if p.required and p.name not in arguments]
        if missing:
            return "missing argument(s): " + ", ".join(missing)
        for name, value in arguments.items():
            p = self.params[name]
            if value is None:
                if p.json_type and not p.nullable:
                    return f"argument {name!r} may not be null"
                continue
            if p.json_type and not _is(p.json_type, value):
                return f"argument {name!r} must be of type {p.json_type}"
        return None


def _is(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return True


def specs(tools: Iterable[Tuple[str, Callable[..., Any]]]) -> Dict[str, ToolSpec]:
    return {name: ToolSpec(func) for name, func in tools}

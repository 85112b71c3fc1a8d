"""What a hold shows of the program: its locals (each printed within
bounds), where it is, and the stack above it."""

from __future__ import annotations

import inspect
import os
import types
from typing import Any, Callable, Mapping, Protocol

from stepd.v1 import pause_pb2, source_pb2

_MAX_LOCALS = 40
_MAX_FRAMES = 40
_DISPLAY = 300

#: Types whose builtin repr is short and cheap.
_PLAIN = frozenset({int, float, bool, type(None)})
#: Items shown per container, and containers shown inside each other.
_SHOWN_ITEMS, _SHOWN_DEPTH = 30, 4
_BRACKETS: dict[type, tuple[str, str]] = {
    list: ("[", "]"),
    tuple: ("(", ")"),
    set: ("{", "}"),
    frozenset: ("frozenset({", "})"),
    dict: ("{", "}"),
}


def _bounded(value: Any, depth: int, room: int, cut: list[bool]) -> str:
    """A repr that stops producing text once `room` characters are made, so a
    hold never prints a huge local in full; sets ``cut[0]`` when it left
    something out. Builtin containers are walked; any other object gives its
    own repr."""
    kind = type(value)
    if kind in _PLAIN:
        return repr(value)
    if kind is str:
        if len(value) > room:
            cut[0] = True
            return repr(value[:room])
        return repr(value)
    brackets = _BRACKETS.get(kind)
    if brackets is None:
        text = repr(value)
        if len(text) > room:
            cut[0] = True
        return text
    if not value:
        return repr(value)
    opening, closing = brackets
    if depth <= 0:
        cut[0] = True
        return opening + "..." + closing
    if kind is list or kind is tuple:
        head = value[:_SHOWN_ITEMS]
        if all(type(x) in _PLAIN for x in head):  # the common case, in one pass of C
            text = ", ".join(map(repr, head))
            if len(value) > _SHOWN_ITEMS:
                cut[0] = True
                text += ", ..."
            return opening + text + ("," if len(value) == 1 and kind is tuple else "") + closing
    parts: list[str] = []
    used = 0
    items = iter(value.items()) if kind is dict else iter(value)
    for n, item in enumerate(items):
        if n >= _SHOWN_ITEMS or used >= room:
            cut[0] = True
            parts.append("...")
            break
        if kind is dict:
            text = _bounded(item[0], depth - 1, room - used, cut) + ": " + _bounded(item[1], depth - 1, room - used, cut)
        else:
            text = _bounded(item, depth - 1, room - used, cut)
        parts.append(text)
        used += len(text) + 2
    if kind is tuple and len(parts) == 1 and len(value) == 1:
        return "(" + parts[0] + ",)"
    return opening + ", ".join(parts) + closing


def _display(value: Any) -> pause_pb2.DisplayValue:
    cut = [False]
    try:
        text = _bounded(value, _SHOWN_DEPTH, _DISPLAY, cut)
    except Exception as err:  # noqa: BLE001 - a broken __repr__ must not break the hold
        text = f"<repr failed: {err}>"
    return pause_pb2.DisplayValue(text=text[:_DISPLAY], truncated=cut[0] or len(text) > _DISPLAY, type=type(value).__name__)


def _locals(f_locals: Mapping[str, Any]) -> list[pause_pb2.Local]:
    out = []
    for key, value in f_locals.items():
        if key.startswith("__") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
            continue
        out.append(pause_pb2.Local(name=str(key), value=_display(value)))
        if len(out) >= _MAX_LOCALS:
            break
    return out


class _Frame(Protocol):
    """What a point reads of where it is: a frame, or a decorated function's _Called."""

    @property
    def f_code(self) -> types.CodeType: ...
    @property
    def f_lineno(self) -> int | Any: ...
    @property
    def f_globals(self) -> dict[str, Any]: ...
    @property
    def f_locals(self) -> dict[str, Any]: ...
    @property
    def f_back(self) -> types.FrameType | None: ...


class _Called:
    """Where a decorated function's point is: the function itself (its file,
    the first line of its definition, its module), called from the frame that
    called the decorator's wrapper. The wrapper is this library's code, which
    a user never wants to see as the point's location."""

    __slots__ = ("f_code", "f_lineno", "f_globals", "f_locals", "f_back")

    def __init__(self, code: types.CodeType, f_globals: dict[str, Any], wrapper_frame: types.FrameType) -> None:
        self.f_code = code
        self.f_lineno: int = code.co_firstlineno
        self.f_globals = f_globals
        self.f_locals: dict[str, Any] = {}
        self.f_back = wrapper_frame.f_back

    @staticmethod
    def of(fn: Callable[..., Any]) -> tuple[types.CodeType | None, dict[str, Any]]:
        """The code and globals of the function under any wrappers (None for a callable object)."""
        inner: Any = inspect.unwrap(fn)
        return getattr(inner, "__code__", None), getattr(inner, "__globals__", {})


def _location(frame: _Frame) -> source_pb2.Location:
    code = frame.f_code
    return source_pb2.Location(
        path=code.co_filename,
        line=frame.f_lineno or 0,
        function=code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
        module=str(frame.f_globals.get("__name__", "")),
    )


_HERE = os.path.dirname(os.path.abspath(__file__))


def _stack_of(frame: _Frame) -> list[source_pb2.Location]:
    out: list[source_pb2.Location] = []
    current: _Frame | None = frame
    while current is not None and len(out) < _MAX_FRAMES:
        if not current.f_code.co_filename.startswith(_HERE):
            out.append(_location(current))
        current = current.f_back
    return out

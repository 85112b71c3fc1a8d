"""Python values to and from google.protobuf.Value, fast and forgiving."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from google.protobuf import struct_pb2

__all__ = ["fill_value", "from_value", "to_struct", "to_value", "type_name"]

_MAX_DEPTH = 32


def fill_value(out: struct_pb2.Value, obj: Any, depth: int) -> None:
    if obj is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif obj is True or obj is False:
        out.bool_value = obj
    elif isinstance(obj, str):
        out.string_value = obj
    elif isinstance(obj, (int, float)):
        f = float(obj)
        if math.isfinite(f):
            out.number_value = f
        else:
            out.string_value = repr(obj)
    elif depth >= _MAX_DEPTH:
        out.string_value = repr(obj)
    elif isinstance(obj, Mapping):
        fields = out.struct_value.fields
        out.struct_value.SetInParent()
        for key, item in obj.items():
            fill_value(fields[str(key)], item, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        values = out.list_value.values
        out.list_value.SetInParent()
        for item in obj:
            fill_value(values.add(), item, depth + 1)
    elif isinstance(obj, bytes):
        out.string_value = obj.decode("utf-8", "replace")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fill_value(out, dataclasses.asdict(obj), depth + 1)
    elif hasattr(obj, "model_dump"):  # pydantic models
        try:
            fill_value(out, obj.model_dump(), depth + 1)
        except Exception:
            out.string_value = repr(obj)
    else:
        out.string_value = repr(obj)


def to_value(obj: Any) -> struct_pb2.Value:
    """A Python value as a Value: JSON-like values as themselves, dataclasses and
    pydantic models as objects, anything else as its repr."""
    out = struct_pb2.Value()
    fill_value(out, obj, 0)
    return out


def to_struct(obj: Mapping[str, Any]) -> struct_pb2.Struct:
    """A mapping (e.g. a JSON Schema) as a Struct."""
    out = struct_pb2.Struct()
    for key, item in obj.items():
        fill_value(out.fields[str(key)], item, 0)
    return out


def from_value(value: struct_pb2.Value) -> Any:
    """A Value as a Python value. Whole numbers become ``int`` (a Value carries a
    double; ``3`` sent by a client arrives as ``3.0``)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        n = value.number_value
        return int(n) if n.is_integer() and abs(n) < 2**53 else n
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return {k: from_value(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [from_value(v) for v in value.list_value.values]
    return None


_HINTS = {str: "str", int: "int", float: "float", bool: "bool", dict: "dict", list: "list", tuple: "list", type(None): "None"}


def type_name(hint: Any) -> str:
    """A type hint as the name the daemon validates against ("str", "dict", …)."""
    if hint is None:
        return ""
    if isinstance(hint, str):
        return hint
    if hint in _HINTS:
        return _HINTS[hint]
    origin = getattr(hint, "__origin__", None)
    if origin in _HINTS:
        return _HINTS[origin]
    return getattr(hint, "__name__", str(hint))

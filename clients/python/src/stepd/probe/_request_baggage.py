"""The W3C baggage of the request a point is reached in, for breakpoints
scoped to one request (``ProbeMatch.baggage``).

It comes from the program's OpenTelemetry context when the API is importable
(``opentelemetry.baggage``: what its propagators extracted from the incoming
request), or from what the program passes to ``hold(baggage=...)``: a mapping
or the ``baggage`` header itself. Only a matcher scoped to a request reads it,
so other points cost nothing more.
"""

from __future__ import annotations

from typing import Mapping, Union
from urllib.parse import unquote

try:
    from opentelemetry import baggage as _otel_baggage
except ImportError:  # the API is optional: requests then carry no baggage
    _otel_baggage = None  # type: ignore[assignment]

#: What a program may pass as a request's baggage.
Given = Union[Mapping[str, object], str, None]

#: Compiled entries a request must carry: ``((key, value), ...)``.
Entries = tuple[tuple[str, str], ...]

_EMPTY: Mapping[str, object] = {}


def parse_header(header: str) -> dict[str, str]:
    """A W3C ``baggage`` header as key → value (percent-decoded, properties
    dropped); malformed members are skipped, as propagators do."""
    out: dict[str, str] = {}
    for member in header.split(","):
        pair = member.split(";", 1)[0]
        key, eq, value = pair.partition("=")
        key = key.strip()
        if eq and key:
            out[unquote(key)] = unquote(value.strip())
    return out


def _current(given: Given) -> Mapping[str, object]:
    if given is None:
        return _EMPTY if _otel_baggage is None else _otel_baggage.get_all()
    if isinstance(given, str):
        return parse_header(given)
    return given


def carries(entries: Entries, given: Given) -> bool:
    """Whether the request's baggage has every entry, key and value equal."""
    bag = _current(given)
    if not bag:
        return False
    for key, want in entries:
        value = bag.get(key)
        if value == want:
            continue
        # OpenTelemetry's Python propagator keeps a member's properties in its value.
        if not isinstance(value, str) or value.split(";", 1)[0].strip() != want:
            return False
    return True

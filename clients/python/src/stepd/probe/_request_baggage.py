"""The W3C baggage of the request a point is reached in, for breakpoints
scoped to one request (``ProbeMatch.baggage``).

It comes from the program's OpenTelemetry context when the API is importable
(``opentelemetry.baggage``: what its propagators extracted from the incoming
request), or from what the program passes to ``hold(baggage=...)``: a mapping
or the ``baggage`` header itself. Only a matcher scoped to a request reads it,
so other points cost nothing more.
"""

from __future__ import annotations

from typing import Mapping, Union, cast
from urllib.parse import unquote

_EMPTY: Mapping[str, object] = {}

try:
    from opentelemetry import baggage as _otel_baggage
    from opentelemetry.context import get_current as _get_current

    # The context's baggage read directly (what ``baggage.get_all()`` returns
    # without its copy), so a point armed for another request stays cheap.
    _KEY = getattr(_otel_baggage, "_BAGGAGE_KEY", None)

    def _from_otel() -> Mapping[str, object]:
        if _KEY is None:
            return _otel_baggage.get_all()
        found = _get_current().get(_KEY)
        return cast("Mapping[str, object]", found) if found else _EMPTY

except ImportError:  # the API is optional: requests then carry no baggage

    def _from_otel() -> Mapping[str, object]:
        return _EMPTY


#: The current OpenTelemetry context's baggage (empty without the API).
from_context = _from_otel

#: What a program may pass as a request's baggage.
Given = Union[Mapping[str, object], str, None]

#: Compiled entries a request must carry: ``((key, value), ...)``.
Entries = tuple[tuple[str, str], ...]


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


def resolve(given: Given) -> Mapping[str, object]:
    """The request's baggage as key → value: what the program gave, else the
    current OpenTelemetry context's. Read once, a point can test it against
    several scopes (``carries`` takes the mapping as given)."""
    return _from_otel() if given is None else parse_header(given) if isinstance(given, str) else given


def carries(entries: Entries, given: Given) -> bool:
    """Whether the request's baggage has every entry, key and value equal."""
    bag = _from_otel() if given is None else parse_header(given) if isinstance(given, str) else given
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

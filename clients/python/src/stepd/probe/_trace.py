"""The program's current span as W3C Trace Context, for a Hit or a Hello.

Read through the OpenTelemetry API when it is importable; without it (or with
no span recording) there is none, and a probe works exactly as before. Only a
hold and a connect read it, so a point that does not hold costs nothing more.
"""

from __future__ import annotations

import os

try:
    from opentelemetry import trace as _otel
except ImportError:  # the API is optional: no span to report
    _otel = None  # type: ignore[assignment]

#: ``(traceparent, tracestate)``; ``("", "")`` names no span.
Context = tuple[str, str]

NONE: Context = ("", "")


def current() -> Context:
    """The current span's ``traceparent`` and ``tracestate``, if it is valid."""
    if _otel is None:
        return NONE
    sc = _otel.get_current_span().get_span_context()
    if not sc.is_valid:
        return NONE
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}", sc.trace_state.to_header()


def at_connect(explicit: str | None) -> Context:
    """What Hello carries: the ``traceparent=`` given to connect, else the
    current span, else ``$TRACEPARENT`` (a parent that started the process)."""
    if explicit is not None:
        return explicit, ""
    found = current()
    if found != NONE:
        return found
    return os.environ.get("TRACEPARENT", ""), os.environ.get("TRACESTATE", "")

"""Arming: the daemon's last ``Armed``, compiled, and the table that decides
from it, locally, whether a point holds (docs/probes.md)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from stepd.probe import _request_baggage
from stepd.probe._condition import ConditionError, Predicate, compile_condition
from stepd.probe._glob import compile_glob
from stepd.v1 import probe_pb2

_BREAKPOINTS = probe_pb2.PROBE_MODE_BREAKPOINTS
_STEP = probe_pb2.PROBE_MODE_STEP
_NONE = probe_pb2.PROBE_MODE_NONE
_DEPTH = probe_pb2.PROBE_MODE_DEPTH
_TRACE = probe_pb2.PROBE_MODE_TRACE


class _Matcher:
    __slots__ = ("id", "kind", "name", "condition", "baggage")

    def __init__(self, m: probe_pb2.ArmedMatcher) -> None:
        self.id = m.breakpoint_id
        self.kind = m.point_kind
        # The request scope: entries the request's baggage must carry (empty = any request).
        self.baggage: _request_baggage.Entries = tuple((e.key, e.value) for e in m.baggage)
        try:
            self.name: Callable[[str], bool] = compile_glob(m.name_glob)
            self.condition: Predicate | None = compile_condition(m.condition) if m.condition.strip() else None
        except ConditionError:  # the daemon validates; never fail the program over one
            self.name = lambda name: False
            self.condition = None


class _Arming:
    """An ``Armed``, compiled. `idle` is the fast path: nothing can hold.

    `scope` is the request the mode is about (``Armed.request_scope``): the
    mode applies only where the request's baggage carries every entry;
    elsewhere only the matchers decide. Empty: the whole process.
    """

    __slots__ = ("mode", "matchers", "depth", "target", "honour", "scope", "elsewhere", "idle", "reads_baggage")

    def __init__(
        self,
        mode: int = _BREAKPOINTS,
        matchers: tuple[_Matcher, ...] = (),
        depth: int = 0,
        target: list[int] | None = None,
        honour: bool = True,
        scope: _request_baggage.Entries = (),
    ) -> None:
        self.mode = mode or _BREAKPOINTS
        self.matchers = matchers
        self.depth = depth
        self.target = target or None
        self.honour = honour
        self.scope = scope
        # The matchers that can match a request outside the scope: one that
        # requires every entry of the scope cannot (the usual case: the
        # breakpoint whose hold the step began at).
        wanted = set(scope)
        self.elsewhere = tuple(m for m in matchers if not wanted <= set(m.baggage)) if scope else matchers
        self.idle = self.mode == _BREAKPOINTS and not matchers and not self.target
        # Whether a point under this arming needs the request's baggage: then
        # it is read once per point, not once per scoped matcher.
        self.reads_baggage = bool(scope) or any(m.baggage for m in matchers)

    @classmethod
    def of(cls, armed: probe_pb2.Armed) -> _Arming:
        return cls(
            armed.mode,
            tuple(_Matcher(m) for m in armed.matchers),
            armed.depth,
            list(armed.target_coor),
            armed.honour_breakpoints,
            tuple((e.key, e.value) for e in armed.request_scope),
        )

    def but(self, mode: int) -> _Arming:
        """This arming in another mode: BREAKPOINTS is about every request, STEP stays about this one's."""
        return _Arming(mode, self.matchers, 0, None, True, () if mode == _BREAKPOINTS else self.scope)


class _OutsideScope(list[str]):
    """The ids of a hold decided outside the arming's request scope: only the
    breakpoints held it (``Hit.outside_request_scope``)."""

    __slots__ = ()


_DISARMED = _Arming()


def _matches(
    m: _Matcher, kind: str, name: str, value: Any, labels: Mapping[str, str], baggage: _request_baggage.Given
) -> bool:
    if m.kind and m.kind != kind:
        return False
    if not m.name(name):
        return False
    if m.baggage and not _request_baggage.carries(m.baggage, baggage):
        return False
    return m.condition is None or m.condition(kind, name, value, labels)


def _elsewhere(
    a: _Arming, kind: str, name: str, value: Any, labels: Mapping[str, str], bag: _request_baggage.Given
) -> _OutsideScope | None:
    """A point of a request the arming's mode is not about: it holds only at
    its breakpoints, as in BREAKPOINTS mode."""
    if not a.elsewhere:
        return None
    ids = [m.id for m in a.elsewhere if _matches(m, kind, name, value, labels, bag)]
    return _OutsideScope(ids) if ids else None


def decide(
    a: _Arming,
    kind: str,
    name: str,
    value: Any,
    depth: int,
    coor: list[int],
    labels: Mapping[str, str],
    baggage: _request_baggage.Given = None,
) -> tuple[list[str] | None | bool, _Arming]:
    """The table of docs/probes.md for one point under arming `a`: None (go on),
    a list (hold, with the matched breakpoint ids; an :class:`_OutsideScope`
    when the arming's mode is about another request) or False (trace it), and
    the arming in force afterwards (NONE switches itself back to BREAKPOINTS).

    The ids are every matcher that matches the point whenever breakpoints are
    honoured, whatever made it hold; ``clients/testdata/decisions.json`` is the
    table shared with the Go library.
    """
    if a.reads_baggage:
        baggage = _request_baggage.resolve(baggage)
    if a.scope and not _request_baggage.carries(a.scope, baggage):
        return _elsewhere(a, kind, name, value, labels, baggage), a
    mode = a.mode
    if mode == _NONE:
        if depth >= a.depth:
            return None, a
        a = a.but(_BREAKPOINTS)
        mode = _BREAKPOINTS
    at_target = a.target is not None and mode == _BREAKPOINTS and coor == a.target
    if mode == _BREAKPOINTS and a.target is not None and not a.honour:
        return ([] if at_target else None), a  # forced: only the target holds
    # Where breakpoints are all that can hold, honour_breakpoints is moot.
    honoured = a.honour or mode in (_BREAKPOINTS, _TRACE)
    ids = [m.id for m in a.matchers if _matches(m, kind, name, value, labels, baggage)] if a.matchers and honoured else []
    if mode == _STEP:
        return ids, a
    if mode == _DEPTH:
        return (ids if depth < a.depth or ids else None), a
    if mode == _TRACE:
        return (ids or False), a
    return (ids if at_target or ids else None), a

"""Points and scopes: whether a point holds (decided locally from the
arming), holding it in a thread or a coroutine, and the scopes that give
points their coordinates."""

from __future__ import annotations

import asyncio
import contextvars
import queue
import sys
import warnings
from typing import Any, Mapping, cast

from stepd.probe import _request_baggage
from stepd.probe._arming import _BREAKPOINTS, _DEPTH, _NONE, _STEP, _matches, decide
from stepd.probe._frames import _Frame
from stepd.probe._hits import _Hits
from stepd.probe._outcome import _CONTINUED, _RELEASE, Skipped, Stopped, _next_answer, _Waiter
from stepd.probe._state import _Scope
from stepd.probe._values import from_value
from stepd.v1 import probe_pb2

_REPLACE = probe_pb2.RESUME_DECISION_REPLACE
_SKIP = probe_pb2.RESUME_DECISION_SKIP
_STOP = probe_pb2.RESUME_DECISION_STOP


class _ScopeContext:
    """``with probe.scope("turn"):`` (or ``async with``)."""

    __slots__ = ("_probe", "_name", "_token", "_scope")

    def __init__(self, probe: _Points, name: str) -> None:
        self._probe = probe
        self._name = name
        self._token: contextvars.Token[tuple[_Scope, ...]] | None = None
        self._scope: _Scope | None = None

    def __enter__(self) -> _ScopeContext:
        var = self._probe._stack
        self._scope = _Scope(self._name)
        self._token = var.set(self._probe._open_scopes() + (self._scope,))
        return self

    def __exit__(self, *exc: object) -> None:
        token, scope = self._token, self._scope
        if token is None or scope is None:
            return
        self._token = self._scope = None
        scope.closed = True
        var = self._probe._stack
        try:
            var.reset(token)
        except ValueError:
            # Exited in another context than it was entered in: an async
            # generator its consumer stopped early, closed later by the event
            # loop (its finalizer, or shutdown) in a task of its own. The
            # consumer's context still lists the scope; `closed` drops it there.
            self._probe._orphans = True
            var.set(tuple(s for s in var.get() if s is not scope))
        self._probe._scope_exited(len(self._probe._open_scopes()))

    async def __aenter__(self) -> _ScopeContext:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


class _Points(_Hits):
    """Scopes, and points that hold: ``hold``, ``ahold`` and the paths the decorators take."""

    def scope(self, name: str) -> _ScopeContext:
        """A scope: ``with probe.scope("turn"):`` or ``async with``. Scopes nest per
        thread / asyncio task (a context variable); each counts the points hit in it."""
        return _ScopeContext(self, name)

    @property
    def depth(self) -> int:
        """How many scopes are open here."""
        return len(self._open_scopes())

    def scope_path(self) -> list[str]:
        """The names of the open scopes, outermost first."""
        return [s.name for s in self._open_scopes()]

    def _scope_exited(self, depth: int) -> None:
        a = self._arming
        if a.scope and depth < a.depth and not _request_baggage.carries(a.scope, None):
            # Another request's scope (or one whose baggage the program
            # passes to each hold): none of the mode's business.
            return
        if a.mode == _NONE and depth < a.depth:
            self._arming = a.but(_BREAKPOINTS)
        elif a.mode == _DEPTH and depth < a.depth:
            # The scope held in has ended: the next point holds.
            self._arming = a.but(_STEP)

    def _coor(self, stack: tuple[_Scope, ...]) -> list[int]:
        if not stack:
            return [next(self._top)]
        coor = []
        for s in stack:
            coor.append(s.n)
            s.n += 1
        return coor

    def _decide(
        self, kind: str, name: str, value: Any, depth: int, coor: list[int], baggage: _request_baggage.Given = None
    ) -> list[str] | None | bool:
        """None: go on; a list: hold (the matched breakpoint ids); False: trace it."""
        before = self._arming
        if before.mode == _BREAKPOINTS and before.target is None:
            # The common case, inline (it is on every armed point's path):
            # only breakpoints can hold, and their ids are the ones matching.
            labels = self.labels
            if before.reads_baggage:
                baggage = _request_baggage.resolve(baggage)  # once for every scoped matcher
            return [m.id for m in before.matchers if _matches(m, kind, name, value, labels, baggage)] or None
        verdict, after = decide(before, kind, name, value, depth, coor, self.labels, baggage)
        if after is not before:
            self._arming = after  # NONE switched itself back to BREAKPOINTS
        return verdict

    def hold(
        self,
        kind: str,
        name: str = "",
        value: Any = None,
        *,
        editable: bool = False,
        schema: Mapping[str, Any] | None = None,
        type_hint: Any = None,
        traceparent: str | None = None,
        baggage: Mapping[str, object] | str | None = None,
    ) -> Any:
        """A pause point. Returns `value`, or the value a client injected.

        Holds only when the current arming says so (decided here, without a
        round trip); while held, the calling thread waits. Raises
        :class:`Skipped` for SKIP and :class:`Stopped` for QUIT. EVAL runs in
        the caller's frame. In a coroutine use :meth:`ahold`. An exception
        that interrupts the wait (``KeyboardInterrupt``) withdraws the hold:
        its pause resolves as withdrawn and can no longer be answered.

        A hold carries the current OpenTelemetry span (when the API is
        importable), so its pause is a span in the program's trace;
        `traceparent` names another span instead ("" for none).

        A breakpoint scoped to one request (``--baggage``) holds only where
        the request's W3C baggage carries its entries: the current
        OpenTelemetry context's baggage, or `baggage` when given (a mapping,
        or the incoming ``baggage`` header as is).
        """
        stack = self._open_scopes()
        if stack:
            coor = []
            for s in stack:
                coor.append(s.n)
                s.n += 1
        else:
            coor = [next(self._top)]
        if self._arming.idle:
            return value
        ids = self._decide(kind, name, value, len(stack), coor, baggage)
        if ids is None:
            return value
        if ids is False:
            self._trace(kind, name, value, stack, coor, sys._getframe(1))
            return value
        frame = sys._getframe(1)
        result = self._hold(
            kind, name, value, frame, frame.f_globals, frame.f_locals, stack, coor, cast(list[str], ids), editable, schema, type_hint, "",
            traceparent=traceparent,
        )  # fmt: skip
        return value if result is _CONTINUED else result

    async def ahold(
        self,
        kind: str,
        name: str = "",
        value: Any = None,
        *,
        editable: bool = False,
        schema: Mapping[str, Any] | None = None,
        type_hint: Any = None,
        traceparent: str | None = None,
        baggage: Mapping[str, object] | str | None = None,
    ) -> Any:
        """:meth:`hold` for coroutines: waits without blocking the event loop.
        Cancelling the task withdraws the hold (its pause resolves as withdrawn)."""
        frame = sys._getframe(1)
        result = await self._apoint(
            kind, name, value, frame.f_globals, frame.f_locals, frame, editable, schema, type_hint, traceparent, baggage
        )  # fmt: skip
        return value if result is _CONTINUED else result

    def _point(
        self,
        kind: str,
        name: str,
        value: Any,
        frame: _Frame,
        *,
        f_locals: Mapping[str, Any] | None = None,
        editable: bool = False,
        schema: Mapping[str, Any] | None = None,
        type_hint: Any = None,
        exception_message: str = "",
    ) -> Any:
        """A point with an explicit frame; returns _CONTINUED or the replacement."""
        stack = self._open_scopes()
        coor = self._coor(stack)
        if self._arming.idle:
            return _CONTINUED
        ids = self._decide(kind, name, value, len(stack), coor)
        if ids is None:
            return _CONTINUED
        if ids is False:
            self._trace(kind, name, value, stack, coor, frame)
            return _CONTINUED
        return self._hold(
            kind, name, value, frame, frame.f_globals, frame.f_locals if f_locals is None else f_locals,
            stack, coor, cast(list[str], ids), editable, schema, type_hint, exception_message,
        )  # fmt: skip

    async def _apoint(
        self,
        kind: str,
        name: str,
        value: Any,
        f_globals: dict[str, Any],
        f_locals: Mapping[str, Any],
        frame: _Frame,
        editable: bool,
        schema: Mapping[str, Any] | None,
        type_hint: Any,
        traceparent: str | None = None,
        baggage: Mapping[str, object] | str | None = None,
    ) -> Any:
        stack = self._open_scopes()
        coor = self._coor(stack)
        if self._arming.idle:
            return _CONTINUED
        ids = self._decide(kind, name, value, len(stack), coor, baggage)
        if ids is None:
            return _CONTINUED
        if ids is False:
            self._trace(kind, name, value, stack, coor, frame)
            return _CONTINUED
        waiter = _Waiter(f_globals, f_locals, value)
        waiter.loop = asyncio.get_running_loop()
        waiter.aq = asyncio.Queue()
        try:
            hit_id = self._send_hit(
                waiter, kind, name, value, frame, f_locals, stack, coor, cast(list[str], ids), editable, schema,
                type_hint, "", traceparent=traceparent,
            )  # fmt: skip
            if not hit_id:
                return _CONTINUED
            while isinstance(message := await waiter.aq.get(), probe_pb2.Eval):
                self._evaluate(waiter, message)
        except BaseException:  # cancelled: nobody waits for this hold any more
            self._withdraw_waiter(waiter)
            raise
        return self._resolve(message, kind, name)

    def _hold(
        self,
        kind: str,
        name: str,
        value: Any,
        frame: _Frame,
        f_globals: dict[str, Any],
        f_locals: Mapping[str, Any],
        stack: tuple[_Scope, ...],
        coor: list[int],
        ids: list[str],
        editable: bool,
        schema: Mapping[str, Any] | None,
        type_hint: Any,
        exception_message: str,
        *,
        traceparent: str | None = None,
    ) -> Any:
        if not self._warned_loop and _loop_running():
            self._warned_loop = True
            warnings.warn(
                "stepd: a probe point holds inside a running event loop and blocks it; use `await probe.ahold(...)`",
                RuntimeWarning,
                stacklevel=3,
            )
        waiter = _Waiter(f_globals, f_locals, value)
        waiter.q = queue.SimpleQueue()
        # An interrupt (KeyboardInterrupt) may land as the Hit goes out, before
        # the wait begins: the hold is withdrawn whichever it was.
        try:
            hit_id = self._send_hit(
                waiter, kind, name, value, frame, f_locals, stack, coor, ids, editable, schema, type_hint,
                exception_message, traceparent=traceparent,
            )  # fmt: skip
            if not hit_id:
                return _CONTINUED
            while isinstance(message := _next_answer(waiter.q), probe_pb2.Eval):
                self._evaluate(waiter, message)
        except BaseException:  # the thread no longer waits
            self._withdraw_waiter(waiter)
            raise
        return self._resolve(message, kind, name)

    def _resolve(self, message: Any, kind: str, name: str) -> Any:
        if message is _RELEASE:
            return _CONTINUED
        resume = cast(probe_pb2.Resume, message)
        if resume.decision == _REPLACE:
            return from_value(resume.value)
        if resume.decision == _SKIP:
            raise Skipped(kind, name)
        if resume.decision == _STOP:
            raise Stopped(kind, name)
        return _CONTINUED


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False

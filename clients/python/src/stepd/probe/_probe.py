"""The probe: one ``ProbeService.Connect`` stream per :class:`Probe`, owned by a
background thread; points decide locally whether they hold."""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextvars
import functools
import inspect
import itertools
import logging
import os
import queue
import socket
import sys
import threading
import time
import types
import warnings
import weakref
from typing import Any, Callable, Iterator, Mapping, TypeVar, cast

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from stepd import _build
from stepd.errors import StepdError, from_rpc_error
from stepd.probe import _labels, _request_baggage, _trace
from stepd.probe._condition import ConditionError, Predicate, compile_condition, compile_glob
from stepd.probe._values import fill_value, from_value, to_struct, to_value, type_name
from stepd.v1 import event_pb2, pause_pb2, probe_pb2, probe_pb2_grpc, source_pb2

__all__ = ["Probe", "Skipped", "Stopped", "connect"]

_F = TypeVar("_F", bound=Callable[..., Any])

_BREAKPOINTS = probe_pb2.PROBE_MODE_BREAKPOINTS
_STEP = probe_pb2.PROBE_MODE_STEP
_NONE = probe_pb2.PROBE_MODE_NONE
_DEPTH = probe_pb2.PROBE_MODE_DEPTH
_TRACE = probe_pb2.PROBE_MODE_TRACE

_REPLACE = probe_pb2.RESUME_DECISION_REPLACE
_SKIP = probe_pb2.RESUME_DECISION_SKIP
_STOP = probe_pb2.RESUME_DECISION_STOP

_MAX_LOCALS = 40
_MAX_FRAMES = 40
_DISPLAY = 300

_log = logging.getLogger("stepd.probe")

#: The codes of a daemon that refuses the probe's credentials: retrying
#: faster will not change its mind, an operator's new token will.
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class Skipped(Exception):
    """A held call was skipped (SKIP): raised where the call would run."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"stepd skipped {kind} {name!r}".rstrip())
        self.kind = kind
        self.name = name


#: How often the main thread wakes up while held, for a Ctrl-C.
_INTERRUPT_POLL = 0.25


def _next_answer(q: queue.SimpleQueue[Any]) -> Any:
    """The next message for a held thread. The kernel may hand a Ctrl-C to any
    of the process's threads, and then a wait without a timeout in the main
    thread is never interrupted: the main thread wakes up now and then, so
    Python runs the handler and the hold is withdrawn."""
    if threading.current_thread() is not threading.main_thread():
        return q.get()
    while True:
        try:
            return q.get(timeout=_INTERRUPT_POLL)
        except queue.Empty:
            continue


class Stopped(BaseException):
    """A client stopped the program at a held point (QUIT).

    A ``BaseException`` (like ``KeyboardInterrupt``), so a broad
    ``except Exception`` in the program does not swallow it.
    """

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"stopped by stepd at {kind} {name!r}")
        self.kind = kind
        self.name = name


# -- arming ---------------------------------------------------------------------------


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

    __slots__ = ("mode", "matchers", "depth", "target", "honour", "scope", "elsewhere", "idle")

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
    a: _Arming, kind: str, name: str, value: Any, labels: Mapping[str, str], bag: Mapping[str, object]
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
    if a.scope:
        bag = _request_baggage.resolve(baggage)
        if not _request_baggage.carries(a.scope, bag):
            return _elsewhere(a, kind, name, value, labels, bag), a
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


class _Scope:
    __slots__ = ("name", "n")

    def __init__(self, name: str) -> None:
        self.name = name
        self.n = 0


class _ScopeContext:
    """``with probe.scope("turn"):`` (or ``async with``)."""

    __slots__ = ("_probe", "_name", "_token")

    def __init__(self, probe: Probe, name: str) -> None:
        self._probe = probe
        self._name = name
        self._token: contextvars.Token[tuple[_Scope, ...]] | None = None

    def __enter__(self) -> _ScopeContext:
        var = self._probe._stack
        self._token = var.set(var.get() + (_Scope(self._name),))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            var = self._probe._stack
            var.reset(self._token)
            self._token = None
            self._probe._scope_exited(len(var.get()))

    async def __aenter__(self) -> _ScopeContext:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


class _Waiter:
    """A held point waiting for its Resume (and serving Evals meanwhile)."""

    __slots__ = ("globals", "locals", "value", "q", "loop", "aq", "hit", "since")

    def __init__(self, f_globals: dict[str, Any], f_locals: Mapping[str, Any], value: Any) -> None:
        self.globals = f_globals
        self.locals = f_locals
        self.value = value
        self.q: queue.SimpleQueue[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.aq: asyncio.Queue[Any] | None = None
        #: The Hit sent, re-reported (with ``held_since``) after a reconnect.
        self.hit: probe_pb2.Hit | None = None
        #: When the program began to wait (seconds since the epoch).
        self.since = 0.0

    def deliver(self, message: Any) -> None:
        if self.loop is not None and self.aq is not None:
            try:
                self.loop.call_soon_threadsafe(self.aq.put_nowait, message)
            except RuntimeError:  # the loop is closed
                pass
        elif self.q is not None:
            self.q.put(message)


_RELEASE = object()  # the stream ended: go on as if CONTINUE
_WAKE = object()  # reports are waiting
_OBSERVED, _TRACED, _ENLIGHTEN = 0, 1, 2
_Report = tuple[Any, ...]


class _OnException:
    """``with probe.on_exception("tool", name=...) as point:`` — holds only if the block raises."""

    def __init__(self, probe: Probe, kind: str, name: str, editable: bool) -> None:
        self._probe = probe
        self._kind = kind
        self._name = name
        self._editable = editable
        #: The replacement a client injected (REPLACE), else None.
        self.value: Any = None
        #: Whether the exception was swallowed (SKIP or REPLACE).
        self.suppressed = False

    def __enter__(self) -> _OnException:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None) -> bool:
        if exc is None or isinstance(exc, (Skipped, Stopped)) or not isinstance(exc, Exception):
            return False
        frame = sys._getframe(1)
        message = str(exc) or type(exc).__name__
        value = {"type": type(exc).__name__, "message": message}
        try:
            resume = self._probe._point(
                self._kind, self._name, value, frame, editable=self._editable, exception_message=message
            )
        except Skipped:
            self.suppressed = True
            return True
        if resume is _CONTINUED:
            return False
        self.value = resume
        self.suppressed = True
        return True


_CONTINUED = object()


class Probe:
    """A connection of an instrumented program to stepd; see :func:`connect`."""

    def __init__(
        self,
        name: str = "",
        labels: Mapping[str, str] | None = None,
        addr: str | None = None,
        eval: bool = True,
        *,
        buffer_size: int = 65536,
        batch_size: int = 2048,
        linger: float = 0.002,
        backoff: tuple[float, float] = (0.05, 2.0),
        client_name: str = "",
        tls_ca: str | os.PathLike[str] | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        token: str | None = None,
        traceparent: str | None = None,
        environment_labels: bool = True,
        release_on_disconnect: bool = False,
        reconnect_deadline: float = 60.0,
        heartbeat: float | None = None,
        on_refused: Callable[[StepdError], None] | None = None,
    ) -> None:
        self.name = name or os.path.basename(sys.argv[0] or "python")
        self._on_refused = on_refused
        #: Why the daemon refuses this probe (its credentials), while it does;
        #: None once it welcomes the probe.
        self.refusal: StepdError | None = None
        #: How many times the stream was attempted, welcomed or not.
        self.attempts = 0
        self._release_on_disconnect = release_on_disconnect
        self._reconnect_deadline = reconnect_deadline
        self._heartbeat_asked = heartbeat
        #: Quiet time after which the stream gets a heartbeat (the daemon's, from Welcome).
        self._heartbeat = heartbeat or 30.0
        #: The daemon's hold limit (Welcome), which also bounds a hold kept while disconnected.
        self._hold_limit = 3600.0
        self._lost_at = 0.0
        self._reaper: asyncio.TimerHandle | None = None
        # Read here, in the caller's context: the stream's thread has none.
        self._hello_trace = _trace.at_connect(traceparent)
        self.labels: dict[str, str] = _labels.merged(labels, environment_labels)
        self._transport = _build.transport(addr, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.addr = self._transport.target
        self.eval_enabled = eval
        #: The current session id ("" while disconnected).
        self.session_id = ""
        #: How many times the stream was (re)established.
        self.connections = 0
        #: Reports dropped because the buffer was full, in all.
        self.dropped_total = 0
        #: Holds the daemon refused (its limits on pending holds): those
        #: points went on at once, as if not armed.
        self.refused_total = 0
        self._metadata = ((_build.CLIENT_HEADER, client_name or f"probe:{self.name}"), *self._transport.metadata)
        self._arming = _DISARMED
        self._armed_changed = threading.Condition()
        self._armed_raw = b""
        self._armed_compiled = _DISARMED
        #: Increases with every Armed (or Welcome) applied.
        self.arming_version = 0
        self._stack: contextvars.ContextVar[tuple[_Scope, ...]] = contextvars.ContextVar(f"stepd-scopes-{id(self)}", default=())
        self._top = itertools.count()
        self._hit_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._hits: dict[str, _Waiter] = {}
        self._connected = False
        self._welcomed = threading.Event()
        self._attempted = threading.Event()
        self._closed = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aq: asyncio.Queue[Any] | None = None
        self._stop: asyncio.Event | None = None
        self._reports: collections.deque[_Report] = collections.deque(maxlen=buffer_size)
        self._buffer_size = buffer_size
        self._batch_size = batch_size
        self._linger = linger
        self._backoff = backoff
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._flushed = threading.Condition()
        self._sent_reports = 0
        self._sent_count = 0
        self._queued_reports = 0
        self._call: Any = None
        self._warned_loop = False
        self._thread = threading.Thread(target=self._run, name=f"stepd-probe-{self.name}", daemon=True)
        self._thread.start()
        _live.add(self)

    # -- lifecycle ------------------------------------------------------------------

    def _set_armed(self, armed: probe_pb2.Armed) -> None:
        # Most Resumes repeat the arming in force: reuse its compiled form.
        raw = armed.SerializeToString()
        if raw != self._armed_raw or self._arming is _DISARMED:
            self._armed_raw = raw
            self._arming = _Arming.of(armed)
        elif self._arming is not self._armed_compiled:
            self._arming = self._armed_compiled  # undo a local switch (NONE → BREAKPOINTS)
        self._armed_compiled = self._arming
        with self._armed_changed:
            self.arming_version += 1
            self._armed_changed.notify_all()

    def wait_armed(self, after: int, timeout: float | None = None) -> bool:
        """Waits until an arming newer than version `after` arrived (see `arming_version`)."""
        with self._armed_changed:
            return self._armed_changed.wait_for(lambda: self.arming_version > after, timeout)

    @property
    def connected(self) -> bool:
        """Whether the stream is up (points can hold)."""
        return self._connected

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Waits for the daemon's Welcome; False when it did not come in time."""
        return self._welcomed.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Sends the buffered reports, ends the stream, releases held points."""
        if self._closed.is_set():
            return
        if self._connected:
            self.flush(timeout)
        self._closed.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
                call = self._call
                if call is not None:
                    loop.call_soon_threadsafe(call.cancel)
            except RuntimeError:
                pass
        self._thread.join(timeout)
        _live.discard(self)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Waits until every report queued so far went to the stream (or the timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._flushed:
            want = self._queued_reports
            self._send(_WAKE)
            while self._sent_reports < want and self._connected:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._flushed.wait(remaining if remaining is not None else 0.5)
        return self._sent_reports >= want

    # -- scopes -----------------------------------------------------------------------

    def scope(self, name: str) -> _ScopeContext:
        """A scope: ``with probe.scope("turn"):`` or ``async with``. Scopes nest per
        thread / asyncio task (a context variable); each counts the points hit in it."""
        return _ScopeContext(self, name)

    @property
    def depth(self) -> int:
        """How many scopes are open here."""
        return len(self._stack.get())

    def scope_path(self) -> list[str]:
        """The names of the open scopes, outermost first."""
        return [s.name for s in self._stack.get()]

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

    # -- points -----------------------------------------------------------------------

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
            return [m.id for m in before.matchers if _matches(m, kind, name, value, labels, baggage)] or None
        if before.scope:
            # Stepping one request: another's point is decided here, its
            # baggage read once for the scope and every scoped matcher.
            bag = _request_baggage.from_context() if baggage is None else _request_baggage.resolve(baggage)
            if not _request_baggage.carries(before.scope, bag):
                return _elsewhere(before, kind, name, value, self.labels, bag) if before.elsewhere else None
            baggage = bag
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
        stack = self._stack.get()
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
        frame: types.FrameType,
        *,
        f_locals: Mapping[str, Any] | None = None,
        editable: bool = False,
        schema: Mapping[str, Any] | None = None,
        type_hint: Any = None,
        exception_message: str = "",
    ) -> Any:
        """A point with an explicit frame; returns _CONTINUED or the replacement."""
        stack = self._stack.get()
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
        frame: types.FrameType,
        editable: bool,
        schema: Mapping[str, Any] | None,
        type_hint: Any,
        traceparent: str | None = None,
        baggage: Mapping[str, object] | str | None = None,
    ) -> Any:
        stack = self._stack.get()
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
        frame: types.FrameType,
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

    def _send_hit(
        self,
        waiter: _Waiter,
        kind: str,
        name: str,
        value: Any,
        frame: types.FrameType | None,
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
    ) -> str:
        """Sends the Hit; its id, or "" when disconnected (the point does not hold).
        It carries `traceparent`, or when that is None the current span."""
        hit_id = f"h{next(self._hit_ids)}"
        info = pause_pb2.PointInfo(
            kind=kind,
            name=name,
            payload=to_value(value),
            editable=editable,
            labels=self.labels,
            type_hint=type_name(type_hint),
            scope_path=[s.name for s in stack],
        )
        if schema is not None:
            info.schema.CopyFrom(to_struct(schema))
        hit = probe_pb2.Hit(
            hit_id=hit_id,
            point=info,
            locals=_locals(f_locals),
            coor=coor,
            exception_message=exception_message,
            breakpoint_ids=ids,
            outside_request_scope=isinstance(ids, _OutsideScope),
        )
        hit.traceparent, hit.tracestate = _trace.current() if traceparent is None else (traceparent, "")
        if frame is not None:
            hit.location.CopyFrom(_location(frame))
            hit.stack.extend(_stack_of(frame))
        waiter.hit, waiter.since = hit, time.time()
        with self._lock:
            if not self._connected:
                return ""  # while disconnected, points don't hold
            self._hits[hit_id] = waiter
            self._send(probe_pb2.ConnectRequest(hit=hit))
        return hit_id

    def _withdraw_waiter(self, waiter: _Waiter) -> None:
        """Withdraws the hold of `waiter` if its Hit was made, sent or not."""
        if waiter.hit is not None:
            self._withdraw(waiter.hit.hit_id)

    def _withdraw(self, hit_id: str) -> None:
        """The program gave up a hold before its Resume came: tell the daemon,
        so the pause resolves (``by: "withdrawn"``) instead of lingering."""
        with self._lock:
            if self._hits.pop(hit_id, None) is None:
                return  # already answered or released: nothing to withdraw
            self._send(probe_pb2.ConnectRequest(withdraw=probe_pb2.Withdraw(hit_id=hit_id)))

    def _evaluate(self, waiter: _Waiter, ev: probe_pb2.Eval) -> None:
        result = probe_pb2.EvalResult(eval_id=ev.eval_id)
        if not self.eval_enabled:
            result.error = "this probe does not evaluate code"
        else:
            namespace = dict(waiter.locals)
            namespace.setdefault("_", waiter.value)
            try:
                try:
                    code = compile(ev.code, "<stepd eval>", "eval")
                except SyntaxError:
                    exec(compile(ev.code, "<stepd eval>", "exec"), waiter.globals, namespace)
                    out: Any = None
                else:
                    out = eval(code, waiter.globals, namespace)
                result.value = repr(out)
                if out is None or isinstance(out, (str, int, float, bool, list, dict, tuple)):
                    result.structured.CopyFrom(to_value(out))
            except BaseException as err:  # noqa: BLE001 - any failure is the evaluation's answer
                result.error = f"{type(err).__name__}: {err}"
        self._send(probe_pb2.ConnectRequest(eval_result=result))

    # -- reports ------------------------------------------------------------------------

    def observe(self, kind: str, name: str = "", value: Any = None) -> None:
        """A point that only reports (never holds): batched, never waits."""
        stack = self._stack.get()
        self._report((_OBSERVED, kind, name, value, stack, [s.n for s in stack], time.time_ns()))

    def enlighten(self, value: Any, *, erase_previous: bool = False) -> None:
        """A value to show beside the current coordinate."""
        stack = self._stack.get()
        self._report((_ENLIGHTEN, value, erase_previous, [s.n for s in stack]))

    def _trace(self, kind: str, name: str, value: Any, stack: tuple[_Scope, ...], coor: list[int], frame: types.FrameType) -> None:
        # Where the point is, read now: the frame moves on before the batch is sent.
        code = frame.f_code
        where = (code.co_filename, frame.f_lineno or 0, getattr(code, "co_qualname", code.co_name), str(frame.f_globals.get("__name__", "")))
        self._report((_TRACED, kind, name, value, stack, coor, time.time_ns(), where))

    def _report(self, item: _Report) -> None:
        """Queues a report; when the buffer is full the oldest is dropped and
        counted. Check, drop and append happen under one lock, so a batch
        taken meanwhile can never make a drop count twice."""
        buf = self._reports
        with self._drop_lock:
            if len(buf) >= self._buffer_size:
                buf.popleft()
                self._dropped += 1
                self.dropped_total += 1
                self._sent_reports += 1  # it will never be sent; flush() must not wait for it
            buf.append(item)
            self._queued_reports += 1
            wake = len(buf) == 1
        if wake:
            self._send(_WAKE)

    def _batch(self) -> probe_pb2.Reports | None:
        buf = self._reports
        with self._drop_lock:
            dropped, self._dropped = self._dropped, 0
            items = [buf.popleft() for _ in range(min(len(buf), self._batch_size))]
        if not items and not dropped:
            return None
        reports = probe_pb2.Reports(dropped=dropped)
        add_observed = reports.observed.add
        n = 0
        for item in items:
            n += 1
            tag = item[0]
            if tag == _OBSERVED:
                _, kind, name, value, stack, coor, ns = item
                o = add_observed(kind=kind, name=name)
                if stack:
                    o.scope_path.extend([s.name for s in stack])
                    o.coor.extend(coor)
                fill_value(o.value, value, 0)
                stamp = o.time
                stamp.seconds = ns // 1_000_000_000
                stamp.nanos = ns % 1_000_000_000
            elif tag == _TRACED:
                _, kind, name, value, stack, coor, ns, where = item
                tr = reports.trace.add(coor=coor)
                loc = tr.location
                loc.path, loc.line, loc.function, loc.module = where
                tr.point.kind, tr.point.name = kind, name
                tr.point.scope_path.extend(s.name for s in stack)
                tr.point.labels.update(self.labels)
                fill_value(tr.point.payload, value, 0)
                tr.time.seconds, tr.time.nanos = divmod(ns, 1_000_000_000)
            else:
                _, value, erase, coor = item
                reports.enlighten.add(coor=coor, value=value if isinstance(value, str) else repr(value), erase_previous=erase)
        self._sent_count = n
        return reports

    # -- the stream ---------------------------------------------------------------------

    def _hello(self, previous: str) -> probe_pb2.ConnectRequest:
        return probe_pb2.ConnectRequest(
            hello=probe_pb2.Hello(
                name=self.name,
                language="python",
                pid=os.getpid(),
                host=socket.gethostname(),
                labels=self.labels,
                capabilities=probe_pb2.ProbeCapabilities(eval=self.eval_enabled, skip=True, edit=True),
                traceparent=self._hello_trace[0],
                tracestate=self._hello_trace[1],
                resume_session_id=previous,
                heartbeat_interval=None if self._heartbeat_asked is None else _duration(self._heartbeat_asked),
            )
        )

    def _send(self, message: Any) -> None:
        """Queues a message for the stream (from any thread)."""
        loop, q = self._loop, self._aq
        if loop is None or q is None:
            return
        try:
            loop.call_soon_threadsafe(q.put_nowait, message)
        except RuntimeError:  # the loop is closed
            pass

    async def _writer(self, call: Any, q: asyncio.Queue[Any]) -> None:
        while True:
            try:
                # A quiet stream gets a heartbeat, so proxies do not cut it.
                message = await asyncio.wait_for(q.get(), self._heartbeat)
            except asyncio.TimeoutError:
                message = probe_pb2.ConnectRequest(heartbeat=event_pb2.Heartbeat())
            if message is _WAKE:
                # Let a burst of reports gather, but never delay a control message.
                if len(self._reports) < self._batch_size and self._linger > 0 and q.empty():
                    try:
                        message = await asyncio.wait_for(q.get(), self._linger)
                    except asyncio.TimeoutError:
                        message = _WAKE
            while True:
                batch = self._batch()
                if batch is None:
                    break
                await call.write(probe_pb2.ConnectRequest(reports=batch))
                with self._flushed:
                    self._sent_reports += self._sent_count
                    self._flushed.notify_all()
            if message is not _WAKE:
                await call.write(message)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException:  # noqa: BLE001 - never let the probe thread die noisily
            pass
        finally:
            self._loop = None
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
            self._attempted.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        if self._closed.is_set():
            return
        channel = self._transport.aio_channel()
        stub = probe_pb2_grpc.ProbeServiceStub(channel)
        delay = self._backoff[0]
        previous = ""
        try:
            while not self._closed.is_set():
                # Messages queued for a previous stream (hits, eval results) are
                # dropped with it: their holds were released when it ended.
                q: asyncio.Queue[Any] = asyncio.Queue()
                self._aq = q
                call: Any = stub.Connect(metadata=self._metadata)
                self._call = call
                self.attempts += 1
                writer = asyncio.ensure_future(self._writer(call, q))
                refused: StepdError | None = None
                try:
                    await call.write(self._hello(previous))
                    async for response in call:
                        if self._on_response(response, q):
                            previous = self.session_id
                            delay = self._backoff[0]
                            self.refusal = None
                except grpc.RpcError as err:
                    if err.code() in _REFUSED and not self._closed.is_set():
                        refused = from_rpc_error(err)
                except (grpc.aio.UsageError, asyncio.CancelledError):
                    pass
                except Exception:  # noqa: BLE001 - a bad message must not end the probe
                    pass
                finally:
                    writer.cancel()
                    call.cancel()
                    # Let the writer finish its cancellation before the loop may close.
                    await asyncio.wait([writer])
                    self._call = None
                    self._disconnected()
                    self._attempted.set()
                if self._closed.is_set():
                    break
                if refused is not None:
                    self._refused(refused)
                    delay = self._backoff[1]
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, self._backoff[1])
        finally:
            # Closed: no daemon will answer the holds kept for one.
            with self._lock:
                waiters, self._hits = self._hits, {}
            for waiter in waiters.values():
                waiter.deliver(_RELEASE)
            await channel.close()

    def _refused(self, err: StepdError) -> None:
        """The daemon refuses the credentials: says so once (a log line and
        ``on_refused``) until it welcomes the probe again."""
        first = self.refusal is None
        self.refusal = err
        if not first:
            return
        _log.warning(
            "stepd probe %r: the daemon at %s refuses its credentials (%s): %s; its points do not hold until it accepts them",
            self.name,
            self.addr,
            err.reason or err.code.name,
            err.message,
        )
        if self._on_refused is not None:
            try:
                self._on_refused(err)
            except Exception:  # noqa: BLE001 - the program's callback must not end the probe
                _log.exception("stepd probe %r: on_refused raised", self.name)

    def _on_response(self, response: probe_pb2.ConnectResponse, q: asyncio.Queue[Any]) -> bool:
        """Handles one message from the daemon; True for a Welcome."""
        kind = response.WhichOneof("message")
        if kind == "resume":
            resume = response.resume
            if resume.HasField("armed"):
                self._set_armed(resume.armed)
            with self._lock:
                waiter = self._hits.pop(resume.hit_id, None)
            if waiter is not None:
                waiter.deliver(resume)
        elif kind == "refused":
            # The daemon did not hold it (too many holds pending): the
            # point goes on with its value, as if it were not armed.
            refused = response.refused
            with self._lock:
                waiter = self._hits.pop(refused.hit_id, None)
                self.refused_total += 1
            warnings.warn(f"stepd: the daemon did not hold a point: {refused.error.message}", RuntimeWarning, stacklevel=2)
            if waiter is not None:
                waiter.deliver(_RELEASE)
        elif kind == "armed":
            self._set_armed(response.armed)
        elif kind == "eval":
            with self._lock:
                waiter = self._hits.get(response.eval.hit_id)
            if waiter is not None:
                waiter.deliver(response.eval)
            else:
                error = probe_pb2.EvalResult(eval_id=response.eval.eval_id, error="the point is no longer held")
                q.put_nowait(probe_pb2.ConnectRequest(eval_result=error))
        elif kind == "welcome":
            welcome = response.welcome
            if welcome.HasField("hold_limit"):
                self._hold_limit = welcome.hold_limit.ToTimedelta().total_seconds()
            if welcome.HasField("heartbeat_interval") and self._heartbeat_asked is None:
                self._heartbeat = welcome.heartbeat_interval.ToTimedelta().total_seconds() or self._heartbeat
            if self._reaper is not None:
                self._reaper.cancel()
                self._reaper = None
            with self._lock:
                self.session_id = welcome.session_id
                self._set_armed(welcome.armed)
                self._connected = True
                self.connections += 1
                # Holds kept across the lost stream are reported again, first.
                for waiter in self._hits.values():
                    if waiter.hit is not None:
                        again = probe_pb2.Hit()
                        again.CopyFrom(waiter.hit)
                        again.held_since.FromNanoseconds(int(waiter.since * 1e9))
                        q.put_nowait(probe_pb2.ConnectRequest(hit=again))
            self._welcomed.set()
            self._attempted.set()
            if self._reports:
                q.put_nowait(_WAKE)
            return True
        return False

    def _disconnected(self) -> None:
        keep = not self._release_on_disconnect and not self._closed.is_set()
        with self._lock:
            was_connected, self._connected = self._connected, False
            self.session_id = ""
            self._arming = _DISARMED
            waiters: dict[str, _Waiter] = {}
            if not keep:
                waiters, self._hits = self._hits, {}
        self._welcomed.clear()
        for waiter in waiters.values():
            waiter.deliver(_RELEASE)
        if keep and was_connected:
            # The holds wait for a daemon to come back, within the deadline
            # (counted from the stream's loss, not from each failed attempt).
            self._lost_at = time.monotonic()
            self._reap()
        with self._flushed:
            self._flushed.notify_all()

    def _reap(self) -> None:
        """While disconnected: releases (as CONTINUE) the holds past their hold
        limit, and all of them once the reconnect deadline passed."""
        self._reaper = None
        if self._connected:
            return
        now, wall = time.monotonic(), time.time()
        give_up = now >= self._lost_at + self._reconnect_deadline
        with self._lock:
            expired = [h for h, w in self._hits.items() if give_up or wall >= w.since + self._hold_limit]
            released = [self._hits.pop(h) for h in expired]
            left = [w.since + self._hold_limit - wall for w in self._hits.values()]
        for waiter in released:
            waiter.deliver(_RELEASE)
        loop = self._loop
        if left and loop is not None:
            delay = min([self._lost_at + self._reconnect_deadline - now, *left])
            self._reaper = loop.call_later(max(delay, 0.0), self._reap)

    # -- decorators ---------------------------------------------------------------------------

    def point(
        self,
        kind: str,
        name: str | None = None,
        *,
        editable: bool = True,
        on_result: bool = False,
        schema: Mapping[str, Any] | None = None,
        type_hint: Any = None,
    ) -> Callable[[_F], _F]:
        """Decorates a function (or coroutine function) with a pause point.

        By default the point holds on the call's arguments (a dict by parameter
        name, editable): INJECT replaces arguments, SKIP raises :class:`Skipped`
        instead of calling. With ``on_result=True`` it holds on the return value
        instead (INJECT replaces the result). EVAL sees the arguments.
        """

        def decorate(fn: _F) -> _F:
            point_name = name or fn.__name__
            signature = inspect.signature(fn)
            hint = type_hint if type_hint is not None else (None if on_result or schema is not None else "dict")
            f_globals: dict[str, Any] = getattr(fn, "__globals__", {})

            def arguments(bound: inspect.BoundArguments) -> dict[str, Any]:
                return {k: v for k, v in bound.arguments.items() if k not in ("self", "cls")}

            def call_with(bound: inspect.BoundArguments, replaced: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
                if isinstance(replaced, Mapping):
                    for key, item in replaced.items():
                        if key in signature.parameters:
                            bound.arguments[key] = item
                return bound.args, bound.kwargs

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    frame = sys._getframe(0)
                    if on_result:
                        result = await fn(*args, **kwargs)
                        if self._arming.idle:
                            self._coor(self._stack.get())
                            return result
                        ns = {"result": result, **_bind_locals(signature, args, kwargs)}
                        out = await self._apoint(kind, point_name, result, f_globals, ns, frame, editable, schema, hint)
                        return result if out is _CONTINUED else out
                    if self._arming.idle:
                        self._coor(self._stack.get())
                        return await fn(*args, **kwargs)
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    value = arguments(bound)
                    out = await self._apoint(kind, point_name, value, f_globals, dict(bound.arguments), frame, editable, schema, hint)
                    if out is not _CONTINUED:
                        args, kwargs = call_with(bound, out)
                    return await fn(*args, **kwargs)

                return cast(_F, async_wrapper)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                frame = sys._getframe(0)
                if on_result:
                    result = fn(*args, **kwargs)
                    if self._arming.idle:
                        self._coor(self._stack.get())
                        return result
                    ns = {"result": result, **_bind_locals(signature, args, kwargs)}
                    out = self._point(kind, point_name, result, frame, f_locals=ns, editable=editable, schema=schema, type_hint=hint)
                    return result if out is _CONTINUED else out
                if self._arming.idle:
                    self._coor(self._stack.get())
                    return fn(*args, **kwargs)
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                value = arguments(bound)
                out = self._point(
                    kind, point_name, value, frame, f_locals=dict(bound.arguments), editable=editable,
                    schema=schema, type_hint=hint,
                )  # fmt: skip
                if out is not _CONTINUED:
                    args, kwargs = call_with(bound, out)
                return fn(*args, **kwargs)

            return cast(_F, wrapper)

        return decorate

    def on_exception(self, kind: str, name: str = "", *, editable: bool = False) -> _OnException:
        """A point that exists only when the block raises::

            with probe.on_exception("tool", name="Bash") as point:
                run()

        It holds (when armed) with the exception as its value and
        ``caught_msg`` = the exception's message; EVAL runs in the frame of
        the ``with``. CONTINUE re-raises; SKIP swallows the exception; INJECT
        swallows it and puts the value in ``point.value``; QUIT raises
        :class:`Stopped`.
        """
        return _OnException(self, kind, name, editable)


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def _bind_locals(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError:
        return {}


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


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


def _location(frame: types.FrameType) -> source_pb2.Location:
    code = frame.f_code
    return source_pb2.Location(
        path=code.co_filename,
        line=frame.f_lineno or 0,
        function=code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
        module=str(frame.f_globals.get("__name__", "")),
    )


_HERE = os.path.dirname(os.path.abspath(__file__))


def _stack_of(frame: types.FrameType) -> list[source_pb2.Location]:
    out: list[source_pb2.Location] = []
    current: types.FrameType | None = frame
    while current is not None and len(out) < _MAX_FRAMES:
        if not current.f_code.co_filename.startswith(_HERE):
            out.append(_location(current))
        current = current.f_back
    return out


_live: weakref.WeakSet[Probe] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for probe in list(_live):
        try:
            probe.close(timeout=1.0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def connect(
    name: str = "",
    labels: Mapping[str, str] | None = None,
    addr: str | None = None,
    eval: bool = True,
    *,
    wait: float = 2.0,
    **options: Any,
) -> Probe:
    """Connects an instrumented program to stepd and returns its :class:`Probe`.

    `addr` defaults to ``$STEPD_ADDR``, else ``127.0.0.1:7701``; the keyword
    options ``tls_ca``, ``tls_cert``, ``tls_key`` and ``token`` are those of
    :class:`stepd.Client` (with the same ``STEPD_*`` defaults). The stream is
    owned by a background thread that reconnects with backoff; while it is
    down, points do not hold. `wait` is how long to wait for the daemon's first
    Welcome, so breakpoints set before the program started apply to its first
    points (0: don't wait). `eval=False` refuses EVAL (see the security note in
    :mod:`stepd.probe`). The keyword option ``traceparent`` is the span the
    probe's session is a child of; by default the current OpenTelemetry span
    (when the API is importable), else ``$TRACEPARENT``. The labels start from
    the pod's environment (``pod``, ``namespace``, ``node``, ``app``: see
    docs/probes.md) with `labels` over them; ``environment_labels=False``
    leaves them out.

    A hold in progress when the stream drops keeps waiting and is reported
    again to the daemon the probe reconnects to (a restarted one or another
    instance), where it can be answered; it goes on with its original value
    when its hold limit passes or no daemon welcomed the probe within
    ``reconnect_deadline`` seconds (60). ``release_on_disconnect=True`` makes
    it go on at once instead. ``heartbeat`` is the interval, in seconds, of
    heartbeats on a quiet stream (default: the daemon's), for proxies that
    cut idle streams.

    A daemon that refuses the probe's credentials (``UNAUTHENTICATED``: a
    wrong, expired or revoked token; ``PERMISSION_DENIED``: a role that may
    not connect probes) is said once: a warning on the ``stepd.probe``
    logger and ``on_refused(error)`` (a :class:`stepd.errors.StepdError`,
    e.g. :class:`stepd.errors.TokenExpired`), from the probe's thread;
    ``probe.refusal`` holds the error until the daemon welcomes the probe
    again. The probe keeps trying, at its longest backoff, so a new token on
    the daemon's side is picked up.
    """
    probe = Probe(name, labels, addr, eval, **options)
    if wait > 0:
        # Until the first attempt ends: welcomed, or refused (no daemon there).
        probe._attempted.wait(wait)
    return probe


"""What every part of a probe reads and writes: its fields, declared here
once for the modules that each hold a part of :class:`stepd.probe.Probe`
(assigned in ``Probe.__init__``), and the queue to its stream."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import threading
from typing import Any, Callable, Iterator

from stepd import _build
from stepd.errors import StepdError
from stepd.probe import _trace
from stepd.probe._arming import _Arming
from stepd.probe._outcome import _Waiter

_Report = tuple[Any, ...]


class _Scope:
    __slots__ = ("name", "n", "closed")

    def __init__(self, name: str) -> None:
        self.name = name
        self.n = 0
        #: Exited; set so a context that still lists it (see _ProbeState._open_scopes) drops it.
        self.closed = False


class _ProbeState:
    """The fields of a probe; the parts are its bases, each in its module:
    reports (``_reports``), hits (``_hits``), points and scopes (``_point``),
    decorators (``_decorators``), the stream (``_stream``)."""

    name: str
    labels: dict[str, str]
    addr: str
    eval_enabled: bool
    session_id: str
    refusal: StepdError | None
    attempts: int
    connections: int
    dropped_total: int
    refused_total: int
    arming_version: int
    _on_refused: Callable[[StepdError], None] | None
    _release_on_disconnect: bool
    _reconnect_deadline: float
    _heartbeat_asked: float | None
    _heartbeat: float
    _hold_limit: float
    _lost_at: float
    _reaper: asyncio.TimerHandle | None
    _hello_trace: _trace.Context
    _transport: _build.Transport
    _metadata: tuple[tuple[str, str], ...]
    # arming
    _arming: _Arming
    _armed_changed: threading.Condition
    _armed_raw: bytes
    _armed_compiled: _Arming
    # points and holds
    _stack: contextvars.ContextVar[tuple[_Scope, ...]]
    #: Whether some scope was exited in another context than its own (see _open_scopes).
    _orphans: bool = False
    _top: Iterator[int]
    _hit_ids: Iterator[int]
    _lock: threading.Lock
    _hits: dict[str, _Waiter]
    _warned_loop: bool
    # the stream
    _connected: bool
    _welcomed: threading.Event
    _attempted: threading.Event
    _closed: threading.Event
    _loop: asyncio.AbstractEventLoop | None
    _aq: asyncio.Queue[Any] | None
    _stop: asyncio.Event | None
    _backoff: tuple[float, float]
    _call: Any
    _thread: threading.Thread
    # reports
    _reports: collections.deque[_Report]
    _buffer_size: int
    _batch_size: int
    _linger: float
    _dropped: int
    _drop_lock: threading.Lock
    _flushed: threading.Condition
    _sent_reports: int
    _sent_count: int
    _queued_reports: int

    def _send(self, message: Any) -> None:
        """Queues a message for the stream (from any thread)."""
        loop, q = self._loop, self._aq
        if loop is None or q is None:
            return
        try:
            loop.call_soon_threadsafe(q.put_nowait, message)
        except RuntimeError:  # the loop is closed
            pass

    def _open_scopes(self) -> tuple[_Scope, ...]:
        """This context's scopes, without those exited elsewhere (checked
        only once some scope was: the common path reads the variable alone)."""
        stack = self._stack.get()
        if self._orphans and any(s.closed for s in stack):
            stack = tuple(s for s in stack if not s.closed)
            self._stack.set(stack)
        return stack

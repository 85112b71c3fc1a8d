"""How a held point ends: the wait for the daemon's Resume (answering
Evals meanwhile) and what the program sees of it."""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Mapping

from stepd.v1 import probe_pb2

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
#: What a point returns when it goes on with its own value.
_CONTINUED = object()

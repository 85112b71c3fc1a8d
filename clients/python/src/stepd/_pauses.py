"""Pauses followed across their revisions (blocking API)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from stepd import _build
from stepd._subscription import Subscription
from stepd.views import Pause
from stepd.v1 import event_pb2, pause_pb2

if TYPE_CHECKING:
    from stepd.client import Client

__all__ = ["Pauses"]


class Pauses:
    """The pending pauses of some sessions, each pause once however often it is re-sent.

    A pause is re-sent with the same key and a higher ``revision`` after EVAL,
    STACKTRACE, INSPECT, LOCALS or an eval error; a loop over ``stopped`` events
    would take each revision for a new stop and answer it again. Iterating this
    yields each pause (each key) once, at its latest revision; :meth:`answer`
    returns the re-sent revision for the commands that keep the pause, so
    ``for pause in pauses: pauses.answer(pauses.answer(pause, "eval", code="x"), "continue")``
    answers every pause exactly once. :meth:`current` is the oldest pending
    pause not answered through this object, yielded before or not.

    Opened by :meth:`stepd.Client.pauses` (or a :class:`stepd.Session`); close
    it, or use it as a context manager.
    """

    def __init__(self, client: Client, session_ids: Sequence[str] = (), *, subscription: Subscription | None = None) -> None:
        self._client = client
        self._session_ids = list(session_ids)
        self._sub = subscription or client.events(session_ids=session_ids, channels=["execution", "lifecycle"])
        self._pending: OrderedDict[str, pause_pb2.Pause] = OrderedDict()
        self._answered: set[str] = set()
        self._yielded: set[str] = set()
        #: Sessions that ended (their pauses are gone).
        self.ended: set[str] = set()

    # -- reading -------------------------------------------------------------

    def _apply(self, event: event_pb2.Event) -> None:
        kind = event.WhichOneof("payload")
        if kind == "snapshot":
            self._pending.clear()
            for pause in event.snapshot.pauses:
                self._note(pause)
        elif kind == "stopped":
            self._note(event.stopped.pause)
        elif kind == "pause_resolved":
            self._pending.pop(event.pause_resolved.key, None)
            self._answered.add(event.pause_resolved.key)
        elif kind == "session_ended":
            self.ended.add(event.session_id)

    def _note(self, pause: pause_pb2.Pause) -> None:
        if self._session_ids and pause.session_id not in self._session_ids:
            return
        if pause.key in self._answered:
            return
        known = self._pending.get(pause.key)
        if known is None or pause.revision >= known.revision:
            self._pending[pause.key] = pause

    def _first(self, unyielded: bool) -> Pause | None:
        for key, pause in self._pending.items():
            if key not in self._answered and not (unyielded and key in self._yielded):
                return Pause(pause)
        return None

    def _wait(self, unyielded: bool, timeout: float | None, session_id: str = "") -> Pause:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._first(unyielded)
            if found is not None:
                return found
            if session_id and session_id in self.ended:
                raise EOFError(f"session {session_id} ended")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no pause within {timeout} s")
            try:
                event = self._sub.next(timeout=remaining)
            except StopIteration:
                raise EOFError("the event stream ended") from None
            self._apply(event)

    def current(self, timeout: float | None = 30.0, *, session_id: str = "") -> Pause:
        """The oldest pending pause not answered through this object, at its
        latest revision; waits up to `timeout` seconds for one. Raises
        TimeoutError, or EOFError when `session_id` ends first."""
        return self._wait(False, timeout, session_id)

    def next(self, timeout: float | None = None) -> Pause:
        """The next pause not yielded before (a new key); TimeoutError after `timeout` seconds."""
        pause = self._wait(True, timeout)
        self._yielded.add(pause.key)
        return pause

    def __iter__(self) -> Iterator[Pause]:
        return self

    def __next__(self) -> Pause:
        try:
            return self.next()
        except EOFError:
            raise StopIteration from None

    # -- answering -----------------------------------------------------------

    def answer(self, pause: Pause | pause_pb2.Pause | str, command: _build.CommandLike, **args: Any) -> Pause | None:
        """Answers a pause (SendDebugInput). For a command that keeps the pause
        (EVAL, STACKTRACE, INSPECT, LOCALS, EXPRESSION) returns it as re-sent,
        the revision to answer next; for one that resolves it, None, and the
        pause is never yielded or returned again."""
        key = pause if isinstance(pause, str) else pause.key
        response = self._client.send_debug_input(key, command, **args)
        if response.HasField("pause"):
            self._note(response.pause)
            return Pause(response.pause)
        self.settled(key)
        return None

    def settled(self, key: str, stopped_in: pause_pb2.Pause | None = None) -> None:
        """Records that `key` was answered elsewhere (Continue, Step) and, when
        it stopped again, the new pause."""
        self._answered.add(key)
        self._pending.pop(key, None)
        if stopped_in is not None:
            self._note(stopped_in)

    def close(self) -> None:
        self._sub.close()

    def __enter__(self) -> Pauses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

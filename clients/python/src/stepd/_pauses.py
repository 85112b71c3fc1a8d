"""Pauses followed across their revisions: the bookkeeping, and its blocking driver."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from stepd import _build
from stepd._subscription import Subscription
from stepd.views import Pause
from stepd.v1 import event_pb2, pause_pb2, session_pb2

if TYPE_CHECKING:
    from stepd.client import Client

__all__ = ["PauseBook", "Pauses"]


class PauseBook:
    """Which pauses are pending, by key, at their latest revision; which were
    answered (here or anywhere) and which were handed out. Fed with events and
    answers; shared by the blocking and the asyncio drivers."""

    def __init__(self, session_ids: Sequence[str]) -> None:
        self.session_ids = list(session_ids)
        self.pending: OrderedDict[str, pause_pb2.Pause] = OrderedDict()
        self.answered: set[str] = set()
        self.yielded: set[str] = set()
        self.ended: set[str] = set()

    def apply(self, event: event_pb2.Event) -> None:
        kind = event.WhichOneof("payload")
        if kind == "snapshot":
            self.pending.clear()
            for pause in event.snapshot.pauses:
                self.note(pause)
        elif kind == "stopped":
            self.note(event.stopped.pause)
        elif kind == "pause_resolved":
            self.settled(event.pause_resolved.key)
        elif kind == "session_ended":
            self.ended.add(event.session_id)

    def note(self, pause: pause_pb2.Pause) -> None:
        """A pause as sent; an older revision than the one known is ignored."""
        if (self.session_ids and pause.session_id not in self.session_ids) or pause.key in self.answered:
            return
        known = self.pending.get(pause.key)
        if known is None or pause.revision >= known.revision:
            self.pending[pause.key] = pause

    def settled(self, key: str, stopped_in: pause_pb2.Pause | None = None) -> None:
        """`key` no longer needs an answer; `stopped_in`, the pause it led to."""
        self.answered.add(key)
        self.pending.pop(key, None)
        if stopped_in is not None:
            self.note(stopped_in)

    def answered_with(self, key: str, response: session_pb2.SendDebugInputResponse) -> Pause | None:
        """Records an answer: the re-sent pause when it stays, else None."""
        if response.HasField("pause"):
            self.note(response.pause)
            return Pause(response.pause)
        self.settled(key)
        return None

    def first(self, unyielded: bool, session_id: str = "") -> Pause | None:
        """The oldest pending pause (not handed out yet, with `unyielded`); EOFError when `session_id` ended."""
        for key, pause in self.pending.items():
            if not (unyielded and key in self.yielded):
                if unyielded:
                    self.yielded.add(key)
                return Pause(pause)
        if session_id and session_id in self.ended:
            raise EOFError(f"session {session_id} ended")
        return None


class Pauses:
    """The pending pauses of some sessions, each pause once however often it is re-sent.

    A pause is re-sent with the same key and a higher ``revision`` after EVAL,
    STACKTRACE, INSPECT, LOCALS or an eval error; a loop over ``stopped`` events
    would take each revision for a new stop and answer it again. Iterating this
    yields each pause (each key) once, at its latest revision; :meth:`answer`
    returns the re-sent revision for the commands that keep the pause, so
    ``for pause in pauses: pauses.answer(pauses.answer(pause, "eval", code="x"), "continue")``
    answers every pause exactly once. :meth:`current` is the oldest pending
    pause not answered, yielded before or not.

    Opened by :meth:`stepd.Client.pauses` (or a :class:`stepd.Session`); close
    it, or use it as a context manager.
    """

    def __init__(self, client: Client, session_ids: Sequence[str] = (), *, subscription: Subscription | None = None) -> None:
        self._client = client
        self.book = PauseBook(session_ids)
        self._sub = subscription or client.events(session_ids=session_ids, channels=["execution", "lifecycle"])

    def _wait(self, unyielded: bool, timeout: float | None, session_id: str = "") -> Pause:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self.book.first(unyielded, session_id)
            if found is not None:
                return found
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no pause within {timeout} s")
            try:
                event = self._sub.next(timeout=remaining)
            except StopIteration:
                raise EOFError("the event stream ended") from None
            self.book.apply(event)

    def current(self, timeout: float | None = 30.0, *, session_id: str = "") -> Pause:
        """The oldest pending pause not answered, at its latest revision; waits
        up to `timeout` seconds for one. Raises TimeoutError, or EOFError when
        `session_id` ends first."""
        return self._wait(False, timeout, session_id)

    def next(self, timeout: float | None = None) -> Pause:
        """The next pause not yielded before (a new key); TimeoutError after `timeout` seconds."""
        return self._wait(True, timeout)

    def __iter__(self) -> Iterator[Pause]:
        return self

    def __next__(self) -> Pause:
        try:
            return self.next()
        except EOFError:
            raise StopIteration from None

    def answer(self, pause: Pause | pause_pb2.Pause | str, command: _build.CommandLike, **args: Any) -> Pause | None:
        """Answers a pause (SendDebugInput). For a command that keeps the pause
        (EVAL, STACKTRACE, INSPECT, LOCALS, EXPRESSION) returns it as re-sent,
        the revision to answer next; for one that resolves it, None, and the
        pause is never yielded or returned again."""
        key = pause if isinstance(pause, str) else pause.key
        return self.book.answered_with(key, self._client.send_debug_input(key, command, **args))

    def settled(self, key: str, stopped_in: pause_pb2.Pause | None = None) -> None:
        """Records that `key` was answered elsewhere (Continue, Step) and, when
        it stopped again, the new pause."""
        self.book.settled(key, stopped_in)

    def close(self) -> None:
        self._sub.close()

    def __enter__(self) -> Pauses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

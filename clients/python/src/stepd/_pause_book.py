"""Pauses followed across their revisions: the bookkeeping that the blocking
and the asyncio drivers (``stepd._pauses``, ``stepd.aio._pauses``) share."""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

from stepd.views import Pause
from stepd.v1 import event_pb2, pause_pb2, session_pb2

__all__ = ["PauseBook", "pause_of"]


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


def pause_of(event: event_pb2.Event, session_id: str | None) -> pause_pb2.Pause | None:
    """The pause `event` brings (of `session_id`, or any session): one pending
    in a snapshot, or a ``stopped`` event's."""
    kind = event.WhichOneof("payload")
    if kind == "snapshot":
        for pause in event.snapshot.pauses:
            if not session_id or pause.session_id == session_id:
                return pause
    elif kind == "stopped":
        if not session_id or event.stopped.pause.session_id == session_id:
            return event.stopped.pause
    return None

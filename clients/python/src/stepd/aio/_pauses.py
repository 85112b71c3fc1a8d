"""Pauses followed across their revisions: the driver of a
:class:`stepd._pause_book.PauseBook` over an event subscription."""

from __future__ import annotations

import time
from typing import Any, Protocol, Sequence

from stepd import _build
from stepd._pause_book import PauseBook
from stepd.aio._subscription import AsyncSubscription
from stepd.views import Pause
from stepd.v1 import pause_pb2, session_pb2

__all__ = ["AsyncPauses"]


class _Client(Protocol):
    """What the pauses need of a client (:class:`stepd.aio.Client`): events to
    follow, and SendDebugInput to answer with."""

    def events(
        self, *, session_ids: Sequence[str] = ..., channels: Sequence[_build.ChannelLike] = ...
    ) -> AsyncSubscription: ...

    async def send_debug_input(
        self, key: str, command: _build.CommandLike, **args: Any
    ) -> session_pb2.SendDebugInputResponse: ...


class AsyncPauses:
    """The pending pauses of some sessions, each pause once however often it is re-sent.

    A pause is re-sent with the same key and a higher ``revision`` after EVAL,
    STACKTRACE, INSPECT, LOCALS or an eval error; a loop over ``stopped`` events
    would take each revision for a new stop and answer it again. Iterating this
    (``async for pause in pauses``) yields each pause (each key) once, at its
    latest revision; :meth:`answer` returns the re-sent revision for the
    commands that keep the pause, so
    ``async for pause in pauses: await pauses.answer(await pauses.answer(pause, "eval", code="x"), "continue")``
    answers every pause exactly once. :meth:`current` is the oldest pending
    pause not answered, yielded before or not.

    Opened by :meth:`stepd.aio.Client.pauses` (or a :class:`stepd.aio.AsyncSession`);
    close it, or use it with ``async with``.
    """

    def __init__(
        self, client: _Client, session_ids: Sequence[str] = (), *, subscription: AsyncSubscription | None = None
    ) -> None:
        self._client = client
        self.book = PauseBook(session_ids)
        self._sub = subscription or client.events(session_ids=session_ids, channels=["execution", "lifecycle"])

    async def _wait(self, unyielded: bool, timeout: float | None, session_id: str = "") -> Pause:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self.book.first(unyielded, session_id)
            if found is not None:
                return found
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no pause within {timeout} s")
            try:
                event = await self._sub.next(timeout=remaining)
            except StopAsyncIteration:
                raise EOFError("the event stream ended") from None
            self.book.apply(event)

    async def current(self, timeout: float | None = 30.0, *, session_id: str = "") -> Pause:
        """The oldest pending pause not answered, at its latest revision; waits
        up to `timeout` seconds for one. Raises TimeoutError, or EOFError when
        `session_id` ends first."""
        return await self._wait(False, timeout, session_id)

    async def next(self, timeout: float | None = None) -> Pause:
        """The next pause not yielded before (a new key); TimeoutError after `timeout` seconds."""
        return await self._wait(True, timeout)

    def __aiter__(self) -> AsyncPauses:
        return self

    async def __anext__(self) -> Pause:
        try:
            return await self.next()
        except EOFError:
            raise StopAsyncIteration from None

    async def answer(self, pause: Pause | pause_pb2.Pause | str, command: _build.CommandLike, **args: Any) -> Pause | None:
        """Answers a pause (SendDebugInput). For a command that keeps the pause
        (EVAL, STACKTRACE, INSPECT, LOCALS, EXPRESSION) returns it as re-sent,
        the revision to answer next; for one that resolves it, None, and the
        pause is never yielded or returned again."""
        key = pause if isinstance(pause, str) else pause.key
        return self.book.answered_with(key, await self._client.send_debug_input(key, command, **args))

    def settled(self, key: str, stopped_in: pause_pb2.Pause | None = None) -> None:
        """Records that `key` was answered elsewhere (Continue, Step) and, when
        it stopped again, the new pause."""
        self.book.settled(key, stopped_in)

    async def close(self) -> None:
        await self._sub.close()

    async def __aenter__(self) -> AsyncPauses:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

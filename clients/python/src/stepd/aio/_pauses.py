"""Pauses followed across their revisions (asyncio driver of stepd._pauses.PauseBook)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from stepd import _build
from stepd._pauses import PauseBook
from stepd.views import Pause
from stepd.v1 import pause_pb2

if TYPE_CHECKING:
    from stepd.aio.client import Client

__all__ = ["AsyncPauses"]


class AsyncPauses:
    """:class:`stepd.Pauses` for asyncio: ``async for pause in pauses``,
    ``await pauses.answer(...)``, ``await pauses.current()``."""

    def __init__(self, client: Client, session_ids: Sequence[str] = ()) -> None:
        self._client = client
        self.book = PauseBook(session_ids)
        self._sub = client.events(session_ids=session_ids, channels=["execution", "lifecycle"])

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
        """See :meth:`stepd.Pauses.current`."""
        return await self._wait(False, timeout, session_id)

    async def next(self, timeout: float | None = None) -> Pause:
        """See :meth:`stepd.Pauses.next`."""
        return await self._wait(True, timeout)

    def __aiter__(self) -> AsyncPauses:
        return self

    async def __anext__(self) -> Pause:
        try:
            return await self.next()
        except EOFError:
            raise StopAsyncIteration from None

    async def answer(self, pause: Pause | pause_pb2.Pause | str, command: _build.CommandLike, **args: Any) -> Pause | None:
        """See :meth:`stepd.Pauses.answer`."""
        key = pause if isinstance(pause, str) else pause.key
        return self.book.answered_with(key, await self._client.send_debug_input(key, command, **args))

    async def close(self) -> None:
        await self._sub.close()

    async def __aenter__(self) -> AsyncPauses:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

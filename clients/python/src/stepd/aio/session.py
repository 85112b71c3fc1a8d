"""A handle on one debug session (asyncio)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Sequence, Union

from stepd import errors
from stepd._build import ChannelLike
from stepd.aio._pauses import AsyncPauses
from stepd.enums import SessionState
from stepd.views import Pause, State
from stepd.v1 import event_pb2, session_pb2

if TYPE_CHECKING:
    from stepd.aio.client import Client

__all__ = ["AsyncSession"]

_Started = Union[session_pb2.LaunchResponse, session_pb2.AttachResponse]


class AsyncSession:
    """:class:`stepd.Session` for asyncio: ``async with await client.launch(...) as session:``
    ends the session when the block is left; the methods are coroutines."""

    def __init__(self, client: Client, response: _Started, *, end_on_exit: bool = True) -> None:
        self.client = client
        self.response = response
        self.id: str = response.session.id
        self.end_on_exit = end_on_exit
        self._pauses: AsyncPauses | None = None

    @property
    def session(self) -> session_pb2.Session:
        """The session as it started (the response's ``session``)."""
        return self.response.session

    @property
    def breakpoints(self) -> Sequence[session_pb2.BreakpointPlacement]:
        """Where the breakpoints were placed as it started (the response's ``breakpoints``)."""
        return self.response.breakpoints

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("response", "_pauses"):
            raise AttributeError(name)
        return getattr(self.response, name)

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, program={self.response.session.program!r})"

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.end_on_exit:
            await self.end()
        elif self._pauses is not None:
            await self._pauses.close()

    @property
    def pauses(self) -> AsyncPauses:
        """This session's pauses, followed across revisions (opened on first use)."""
        if self._pauses is None:
            self._pauses = AsyncPauses(self.client, [self.id])
        return self._pauses

    async def info(self) -> session_pb2.Session:
        """The session as the daemon has it now (GetSession)."""
        return (await self.client.get_session(self.id)).session

    @property
    def pid(self) -> int:
        """The debuggee's process id as the session started (0 when unknown)."""
        return self.response.session.pid

    async def end(self, mode: int | str | None = None) -> None:
        """Ends the session; ending one that already ended does nothing."""
        try:
            if self._pauses is not None:
                await self._pauses.close()
            if (await self.info()).state != SessionState.ENDED:
                await self.client.disconnect(self.id, mode=mode)
        except errors.SessionNotFound:
            pass

    async def wait_for_pause(self, timeout: float | None = 30.0) -> Pause:
        """See :meth:`stepd.Session.wait_for_pause`."""
        return await self.pauses.current(timeout, session_id=self.id)

    async def locals(self, pause: Pause | None = None) -> dict[str, str]:
        """The paused frame's locals as printed, by name."""
        return (pause or await self.wait_for_pause()).locals

    async def eval(self, expression: str, pause: Pause | None = None) -> str:
        """See :meth:`stepd.Session.eval`."""
        resent = await self.pauses.answer(pause or await self.wait_for_pause(), "eval", code=expression)
        return resent.debug_value.text if resent is not None else ""

    async def answer(self, command: Any, pause: Pause | None = None, **args: Any) -> Pause | None:
        """Answers the current pause (or `pause`) with any command."""
        return await self.pauses.answer(pause or await self.wait_for_pause(), command, **args)

    async def _settle(self, thread_id: int, call: Callable[[], Awaitable[Any]]) -> State:
        listed = (await self.client.list_pauses(self.id)).pauses
        before = [p for p in listed if not thread_id or p.thread_id == thread_id]
        state = State((await call()).state)
        for pause in before:
            self.pauses.book.settled(pause.key)
        if state.pause is not None:
            self.pauses.book.note(state.message.pause)
        return state

    async def continue_(self, *, thread_id: int = 0, wait: bool = True, wait_timeout_ms: int | None = None) -> State:
        """See :meth:`stepd.Session.continue_`."""
        return await self._settle(
            thread_id, lambda: self.client.continue_(self.id, thread_id=thread_id, wait=wait, wait_timeout_ms=wait_timeout_ms)
        )

    async def step(
        self, kind: int | str = "over", *, thread_id: int = 0, wait: bool = True, wait_timeout_ms: int | None = None
    ) -> State:
        """See :meth:`stepd.Session.step`."""
        return await self._settle(
            thread_id,
            lambda: self.client.step(self.id, kind, thread_id=thread_id, wait=wait, wait_timeout_ms=wait_timeout_ms),
        )

    async def pause(self, *, thread_id: int = 0, wait: bool = True, wait_timeout_ms: int | None = None) -> State:
        """See :meth:`stepd.Session.pause`."""
        return await self._settle(
            thread_id, lambda: self.client.pause(self.id, thread_id=thread_id, wait=wait, wait_timeout_ms=wait_timeout_ms)
        )

    async def output(self, categories: Sequence[str] = (), *, after_offset: int = 0) -> str:
        """See :meth:`stepd.Session.output`."""
        text: list[str] = []
        while True:
            read = await self.client.read_output(self.id, after_offset=after_offset, categories=categories)
            text += [chunk.text for chunk in read.chunks]
            if not read.chunks or read.next_offset <= after_offset:
                return "".join(text)
            after_offset = read.next_offset

    def history(self, channels: Sequence[ChannelLike] = (), *, page_size: int = 0) -> AsyncIterator[event_pb2.Event]:
        """Everything this session published, oldest first (``async for``); see
        :meth:`stepd.Client.session_history`."""
        return self.client.session_history(self.id, channels=channels, page_size=page_size)

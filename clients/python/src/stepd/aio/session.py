"""A handle on one debug session."""

from __future__ import annotations

# [async]
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Sequence, Union
# [sync]
# from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, Union
# [end]

from stepd import _build, errors
from stepd._build import ChannelLike
from stepd.aio._pauses import AsyncPauses
from stepd.enums import SessionState
# [sync]
# from stepd.views import Pause, State, named
# [async]
from stepd.views import Pause, State
# [end]
from stepd.v1 import event_pb2, session_pb2

if TYPE_CHECKING:
    # For annotations only: the client module imports this one to make sessions.
    from stepd.aio.client import Client

__all__ = ["AsyncSession"]

_Started = Union[session_pb2.LaunchResponse, session_pb2.AttachResponse]


class AsyncSession:
    """One session, as :meth:`stepd.aio.Client.launch` and :meth:`~stepd.aio.Client.attach` return it.

    Use it with ``async with await client.launch(...) as session:``: leaving
    the block ends the session (the daemon terminates a launched program,
    detaches from an attached one), so a script that raises leaves no stopped
    debuggee behind. :meth:`end` does the same by hand; ``end_on_exit=False``
    keeps the session running after the block.

    It still reads as the Launch/Attach response it wraps (``.session``,
    ``.breakpoints``, ``.entry``; the message itself is ``.response``).
    """

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

    # -- state -------------------------------------------------------------------

    @property
    def pauses(self) -> AsyncPauses:
        """This session's pauses, followed across revisions (opened on first use)."""
        if self._pauses is None:
            self._pauses = AsyncPauses(self.client, [self.id])
        return self._pauses

    async def info(self) -> session_pb2.Session:
        """The session as the daemon has it now (GetSession)."""
        return (await self.client.get_session(self.id)).session

    # [async]
    @property
    def pid(self) -> int:
        """The debuggee's process id as the session started (0 when unknown)."""
        return self.response.session.pid
    # [sync]
    # @property
    # def state(self) -> SessionState:
    #     """The session's state now, by name (``s.state == "STOPPED"``)."""
    #     return named(self.info(), "state")  # type: ignore[no-any-return]
    #
    # @property
    # def pid(self) -> int:
    #     """The debuggee's process id (0 when unknown)."""
    #     return self.response.session.pid or self.info().pid
    # [end]

    async def end(self, mode: int | str | None = None) -> None:
        """Ends the session ("terminate" or "detach"; default: as it started).
        Ending one that already ended does nothing."""
        try:
            if self._pauses is not None:
                await self._pauses.close()
            if SessionState((await self.info()).state) != SessionState.ENDED:
                await self.client.disconnect(self.id, mode=mode)
        except errors.SessionNotFound:
            pass

    # -- pauses ------------------------------------------------------------------

    async def wait_for_pause(self, timeout: float | None = 30.0) -> Pause:
        """The pause the session is in, at its latest revision, or the next one;
        raises TimeoutError, or EOFError when the session ends first."""
        return await self.pauses.current(timeout, session_id=self.id)

    async def locals(self, pause: Pause | None = None) -> dict[str, str]:
        """The paused frame's locals as printed, by name."""
        return (pause or await self.wait_for_pause()).locals

    async def eval(self, expression: str, pause: Pause | None = None) -> str:
        """Evaluates `expression` in the paused frame (EVAL) and returns the printed
        result; the pause stays, re-sent with it (:meth:`wait_for_pause` returns
        that revision). A failed evaluation raises the daemon's error."""
        resent = await self.pauses.answer(pause or await self.wait_for_pause(), "eval", code=expression)
        return resent.debug_value.text if resent is not None else ""

    async def answer(self, command: Any, pause: Pause | None = None, **args: Any) -> Pause | None:
        """Answers the current pause (or `pause`) with any command; see :meth:`stepd.aio.AsyncPauses.answer`."""
        return await self.pauses.answer(pause or await self.wait_for_pause(), command, **args)

    # -- execution -------------------------------------------------------------

    async def _settle(self, thread_id: int, call: Callable[[], Awaitable[Any]]) -> State:
        listed = (await self.client.list_pauses(self.id)).pauses
        before = [p for p in listed if not thread_id or p.thread_id == thread_id]
        state = State((await call()).state)
        for pause in before:
            self.pauses.settled(pause.key)
        if state.pause is not None:
            self.pauses.book.note(state.message.pause)
        return state

    async def continue_(
        self,
        *,
        thread_id: int = 0,
        wait: bool = True,
        wait_timeout: float | None = None,
        wait_timeout_ms: int | None = None,
    ) -> State:
        """Resumes; with `wait`, returns where the session settled (stopped again,
        or ended) within `wait_timeout` seconds. `wait_timeout_ms` is deprecated."""
        waited = _build.wait_seconds(wait_timeout, wait_timeout_ms)
        return await self._settle(
            thread_id, lambda: self.client.continue_(self.id, thread_id=thread_id, wait=wait, wait_timeout=waited)
        )

    async def step(
        self,
        kind: _build.StepKindLike = "over",
        *,
        thread_id: int = 0,
        wait: bool = True,
        wait_timeout: float | None = None,
        wait_timeout_ms: int | None = None,
    ) -> State:
        """Steps "over", "in" or "out"; returns the stop it reached."""
        waited = _build.wait_seconds(wait_timeout, wait_timeout_ms)
        return await self._settle(
            thread_id,
            lambda: self.client.step(self.id, kind, thread_id=thread_id, wait=wait, wait_timeout=waited),
        )

    async def pause(
        self,
        *,
        thread_id: int = 0,
        wait: bool = True,
        wait_timeout: float | None = None,
        wait_timeout_ms: int | None = None,
    ) -> State:
        """Interrupts the running program; returns the stop."""
        waited = _build.wait_seconds(wait_timeout, wait_timeout_ms)
        return await self._settle(
            thread_id, lambda: self.client.pause(self.id, thread_id=thread_id, wait=wait, wait_timeout=waited)
        )

    # -- output ------------------------------------------------------------------

    async def output(self, categories: Sequence[str] = (), *, after_offset: int = 0) -> str:
        """The program's captured output so far (stdout and stderr unless `categories` names others)."""
        text: list[str] = []
        while True:
            read = await self.client.read_output(self.id, after_offset=after_offset, categories=categories)
            text += [chunk.text for chunk in read.chunks]
            if not read.chunks or read.next_offset <= after_offset:
                return "".join(text)
            after_offset = read.next_offset

    # -- history -----------------------------------------------------------------

    def history(self, channels: Sequence[ChannelLike] = (), *, page_size: int = 0) -> AsyncIterator[event_pb2.Event]:
        """Everything this session published, oldest first, as the daemon
        recorded it (also after it ended); see :meth:`stepd.aio.Client.session_history`."""
        return self.client.session_history(self.id, channels=channels, page_size=page_size)

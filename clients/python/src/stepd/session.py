"""A handle on one debug session (blocking API)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Sequence, Union

from stepd import errors
from stepd._build import ChannelLike
from stepd._pauses import Pauses
from stepd.enums import SessionState
from stepd.views import Pause, State, named
from stepd.v1 import event_pb2, session_pb2

if TYPE_CHECKING:
    from stepd.client import Client

__all__ = ["Session"]

_Started = Union[session_pb2.LaunchResponse, session_pb2.AttachResponse]


class Session:
    """One session, as :meth:`stepd.Client.launch` and :meth:`~stepd.Client.attach` return it.

    Use it as a context manager: leaving the block ends the session (the
    daemon terminates a launched program, detaches from an attached one), so a
    script that raises leaves no stopped debuggee behind. :meth:`end` does the
    same by hand; ``end_on_exit=False`` keeps the session running after the block.

    It still reads as the Launch/Attach response it wraps (``.session``,
    ``.breakpoints``, ``.entry``; the message itself is ``.response``).
    """

    def __init__(self, client: Client, response: _Started, *, end_on_exit: bool = True) -> None:
        self.client = client
        self.response = response
        self.id: str = response.session.id
        self.end_on_exit = end_on_exit
        self._pauses: Pauses | None = None

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
        return f"Session(id={self.id!r}, program={self.response.session.program!r})"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.end_on_exit:
            self.end()
        elif self._pauses is not None:
            self._pauses.close()

    # -- state -------------------------------------------------------------------

    @property
    def pauses(self) -> Pauses:
        """This session's pauses, followed across revisions (opened on first use)."""
        if self._pauses is None:
            self._pauses = Pauses(self.client, [self.id])
        return self._pauses

    def info(self) -> session_pb2.Session:
        """The session as the daemon has it now (GetSession)."""
        return self.client.get_session(self.id).session

    @property
    def state(self) -> SessionState:
        """The session's state now, by name (``s.state == "STOPPED"``)."""
        return named(self.info(), "state")  # type: ignore[no-any-return]

    @property
    def pid(self) -> int:
        """The debuggee's process id (0 when unknown)."""
        return self.response.session.pid or self.info().pid

    def end(self, mode: int | str | None = None) -> None:
        """Ends the session ("terminate" or "detach"; default: as it started).
        Ending one that already ended does nothing."""
        try:
            if self._pauses is not None:
                self._pauses.close()
            if self.info().state != SessionState.ENDED:
                self.client.disconnect(self.id, mode=mode)
        except errors.SessionNotFound:
            pass

    # -- pauses ------------------------------------------------------------------

    def wait_for_pause(self, timeout: float | None = 30.0) -> Pause:
        """The pause the session is in, at its latest revision, or the next one;
        raises TimeoutError, or EOFError when the session ends first."""
        return self.pauses.current(timeout, session_id=self.id)

    def locals(self, pause: Pause | None = None) -> dict[str, str]:
        """The paused frame's locals as printed, by name."""
        return (pause or self.wait_for_pause()).locals

    def eval(self, expression: str, pause: Pause | None = None) -> str:
        """Evaluates `expression` in the paused frame (EVAL) and returns the printed
        result; the pause stays, re-sent with it (:meth:`wait_for_pause` returns
        that revision). A failed evaluation raises the daemon's error."""
        resent = self.pauses.answer(pause or self.wait_for_pause(), "eval", code=expression)
        return resent.debug_value.text if resent is not None else ""

    def answer(self, command: Any, pause: Pause | None = None, **args: Any) -> Pause | None:
        """Answers the current pause (or `pause`) with any command; see :meth:`stepd.Pauses.answer`."""
        return self.pauses.answer(pause or self.wait_for_pause(), command, **args)

    # -- execution -------------------------------------------------------------

    def _settle(self, thread_id: int, call: Any) -> State:
        before = [p for p in self.client.list_pauses(self.id).pauses if not thread_id or p.thread_id == thread_id]
        response = call()
        state = State(response.state)
        for pause in before:
            self.pauses.settled(pause.key)
        if state.pause is not None:
            self.pauses.book.note(state.message.pause)
        return state

    def continue_(self, *, thread_id: int = 0, wait: bool = True, wait_timeout_ms: int | None = None) -> State:
        """Resumes; with `wait`, returns where the session settled (stopped again, or ended)."""
        return self._settle(
            thread_id, lambda: self.client.continue_(self.id, thread_id=thread_id, wait=wait, wait_timeout_ms=wait_timeout_ms)
        )

    def step(
        self, kind: int | str = "over", *, thread_id: int = 0, wait: bool = True, wait_timeout_ms: int | None = None
    ) -> State:
        """Steps "over", "in" or "out"; returns the stop it reached."""
        return self._settle(
            thread_id,
            lambda: self.client.step(self.id, kind, thread_id=thread_id, wait=wait, wait_timeout_ms=wait_timeout_ms),
        )

    def pause(self, *, thread_id: int = 0, wait: bool = True, wait_timeout_ms: int | None = None) -> State:
        """Interrupts the running program; returns the stop."""
        return self._settle(
            thread_id, lambda: self.client.pause(self.id, thread_id=thread_id, wait=wait, wait_timeout_ms=wait_timeout_ms)
        )

    # -- output ------------------------------------------------------------------

    def output(self, categories: Sequence[str] = (), *, after_offset: int = 0) -> str:
        """The program's captured output so far (stdout and stderr unless `categories` names others)."""
        text: list[str] = []
        while True:
            read = self.client.read_output(self.id, after_offset=after_offset, categories=categories)
            text += [chunk.text for chunk in read.chunks]
            if not read.chunks or read.next_offset <= after_offset:
                return "".join(text)
            after_offset = read.next_offset

    # -- history -----------------------------------------------------------------

    def history(self, channels: Sequence[ChannelLike] = (), *, page_size: int = 0) -> Iterator[event_pb2.Event]:
        """Everything this session published, oldest first, as the daemon
        recorded it (also after it ended); see :meth:`stepd.Client.session_history`."""
        return self.client.session_history(self.id, channels=channels, page_size=page_size)

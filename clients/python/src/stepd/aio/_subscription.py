"""The resuming event iterator over EventService.Subscribe (asyncio)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence, Union

import grpc
import grpc.aio

from stepd import _build
from stepd._resume import BACKOFF, Resumable
from stepd.errors import StepdError, Unavailable, from_rpc_error
from stepd.v1 import event_pb2, event_pb2_grpc

__all__ = ["AsyncSubscription"]

_END = object()
_Item = Union[event_pb2.Event, BaseException, object]


class AsyncSubscription(Resumable):
    """The asyncio twin of :class:`stepd.Subscription`: ``async for event in sub``.

    Same contract: snapshot (or the missed events) first, transparent resume
    after a dropped connection with ``resume_after_seq`` / ``resume_instance_id``,
    no event delivered twice; iteration ends on daemon shutdown or
    :meth:`close`; daemon errors are raised from the iterator.
    """

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        session_ids: Sequence[str] = (),
        channels: Sequence[_build.ChannelLike] = (),
        resume_after_seq: int = 0,
        resume_instance_id: str = "",
        client_name: str = "",
        metadata: Sequence[tuple[str, str]] = (),
        heartbeats: bool = False,
        reconnect: bool = True,
        reconnect_timeout: float | None = 60.0,
        follow_restarts: bool = False,
    ) -> None:
        super().__init__(
            session_ids=session_ids, channels=channels, resume_after_seq=resume_after_seq,
            resume_instance_id=resume_instance_id, client_name=client_name, metadata=metadata,
            heartbeats=heartbeats, reconnect=reconnect, reconnect_timeout=reconnect_timeout,
            follow_restarts=follow_restarts,
        )  # fmt: skip
        self._channel = channel
        self._stub = event_pb2_grpc.EventServiceStub(channel)
        self._events: asyncio.Queue[_Item] = asyncio.Queue()
        self._write_lock = asyncio.Lock()
        self._call: Any = None
        self._closed = False
        self._done = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    # -- consumer side ---------------------------------------------------------------

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> event_pb2.Event:
        return await self.next()

    async def next(self, timeout: float | None = None) -> event_pb2.Event:
        """The next event; raises TimeoutError after `timeout` seconds, StopAsyncIteration at the end."""
        if self._done:
            raise StopAsyncIteration
        try:
            item = await asyncio.wait_for(self._events.get(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no event within {timeout} s") from None
        if isinstance(item, event_pb2.Event):
            return item
        self._done = True
        if isinstance(item, BaseException):
            raise item
        raise StopAsyncIteration

    async def send_input(
        self, key: str, command: _build.CommandLike, *, client_name: str = "", **args: Any
    ) -> None:
        """Answers the pause `key` on this stream; failures come back as an ``error`` event."""
        await self._write(
            event_pb2.SubscribeRequest(debug_input=_build.debug_input(key, command, client_name, **args))
        )

    async def watch(self, session_ids: Sequence[str] = (), channels: Sequence[_build.ChannelLike] = ()) -> None:
        """Replaces the filter; the daemon answers with a fresh snapshot."""
        await self._write(self._refilter(session_ids, channels))

    async def close(self) -> None:
        """Ends the stream; iteration stops."""
        self._closed = True
        if self._call is not None:
            self._call.cancel()
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- stream side --------------------------------------------------------------------

    async def _write(self, message: event_pb2.SubscribeRequest) -> None:
        async with self._write_lock:
            call = self._call
            if call is None:
                raise StepdError("the event stream is not connected")
            await call.write(message)

    async def _run(self) -> None:
        established = False
        dropped = False
        deadline: float | None = None
        backoff = BACKOFF[0]
        try:
            while not self._closed:
                call: Any = self._stub.Subscribe(metadata=self._metadata)
                try:
                    async with self._write_lock:
                        self._call = call
                        await call.write(event_pb2.SubscribeRequest(watch=self._watch(resume=self.seq > 0)))
                    while True:
                        response = await call.read()
                        if response is grpc.aio.EOF:
                            if not (self._follow_restarts and established):
                                self._events.put_nowait(_END)  # the daemon ended the stream: shutdown
                                return
                            err: StepdError = Unavailable("the daemon ended the event stream", code=grpc.StatusCode.UNAVAILABLE)
                            break
                        if dropped:
                            self.reconnects += 1
                        established, dropped, deadline = True, False, None
                        backoff = BACKOFF[0]
                        if self._accept(response.event):
                            self._events.put_nowait(response.event)
                except grpc.RpcError as rpc_error:
                    err = from_rpc_error(rpc_error)
                except (grpc.aio.UsageError, asyncio.InvalidStateError) as usage:
                    err = await self._status_of(call, usage)
                if self._closed:
                    break  # close(): the caller's own cancel
                if not self._resumes(err, established):
                    self._events.put_nowait(err)
                    return
                if deadline is None and self._reconnect_timeout is not None:
                    deadline = time.monotonic() + self._reconnect_timeout
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                # A proxy answers at once while the daemon is away: wait between
                # attempts that did not get through, rather than spin.
                if dropped:
                    await asyncio.sleep(backoff if remaining is None else min(backoff, remaining))
                    backoff = min(backoff * 2, BACKOFF[1])
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        self._events.put_nowait(
                            Unavailable(f"could not resume the event stream: {err.message}", code=err.code)
                        )
                        return
                try:
                    await asyncio.wait_for(self._channel.channel_ready(), remaining)
                except asyncio.TimeoutError:
                    self._events.put_nowait(
                        Unavailable(f"could not resume the event stream: {err.message}", code=err.code)
                    )
                    return
                dropped = True
        except asyncio.CancelledError:
            pass
        self._events.put_nowait(_END)

    @staticmethod
    async def _status_of(call: Any, cause: BaseException) -> StepdError:
        # A write on a finished call: the call's own status says why it finished.
        try:
            code: grpc.StatusCode = await call.code()
            details = str(await call.details() or "")
        except Exception:
            return StepdError(str(cause), code=grpc.StatusCode.UNAVAILABLE)
        return StepdError(details or str(cause), code=code)

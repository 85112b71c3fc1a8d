"""The resuming event iterator over EventService.Subscribe (blocking API)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Generator, Iterator, Sequence, Union

import grpc

from stepd import _build
from stepd._resume import BACKOFF, Resumable
from stepd.errors import StepdError, Unavailable, from_stream_call
from stepd.v1 import event_pb2, event_pb2_grpc

__all__ = ["Subscription"]

_END = object()
_Item = Union[event_pb2.Event, BaseException, object]


class Subscription(Resumable):
    """An open ``EventService.Subscribe`` stream that survives dropped connections.

    Iterate it to receive :class:`stepd.v1.event_pb2.Event` messages. The first
    event is a snapshot (or, when resuming, exactly the missed events). When the
    connection drops, the subscription reconnects and sends a Watch with
    ``resume_after_seq`` = the highest seq seen and ``resume_instance_id`` = the
    snapshot's instance, so the daemon replays exactly what was missed — or sends
    ``gap`` and a fresh snapshot when it no longer holds it. Events are never
    delivered twice. Iteration ends when the daemon ends the stream (shutdown) or
    :meth:`close` is called — unless ``follow_restarts`` is set: then a daemon
    that shuts down or answers UNAVAILABLE is waited for (up to
    ``reconnect_timeout``) and the stream goes on with the daemon that comes
    back on the same address, which sends ``gap`` and its snapshot; errors the daemon returns (e.g. ``LimitExceeded``)
    are raised from the iterator. A stream a proxy resets (``CANCELLED``, as
    HAProxy does when it loses the daemon) is a dropped connection, not an
    end: only :meth:`close` ends the iteration that way.

    Iterating (or ``next()`` without a timeout) reads the stream in the
    caller's thread, the shortest path from the daemon to the caller; the first
    ``next(timeout=...)`` moves the reading to a background thread for good,
    so that a wait can end. Use one consumer thread per subscription.

    Attributes:
        seq: the cursor — the highest event seq accounted for.
        instance_id: the daemon instance the cursor belongs to.
        reconnects: how many times the stream resumed after a dropped connection
            (counted when the resumed stream delivers its first event).
    """

    def __init__(
        self,
        channel: grpc.Channel,
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
        keepalive_interval: float = 30.0,
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
        self._keepalive_interval = keepalive_interval
        self._lock = threading.Lock()
        self._events: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._requests: queue.SimpleQueue[event_pb2.SubscribeRequest | None] = queue.SimpleQueue()
        self._call: Any = None
        self._closed = threading.Event()
        self._done = False
        # The stream starts now, so the snapshot is taken at subscription time.
        # `for event in sub` reads it in the caller's thread; the first
        # `next(timeout=...)` hands the reading to a thread of its own.
        self._items = self._stream(*self._open(resume=self.seq > 0))
        self._thread: threading.Thread | None = None
        # Held while the caller's thread reads the stream, so that close()
        # from another thread closes the generator only between reads.
        self._reading = threading.Lock()

    # -- consumer side -------------------------------------------------------

    def __iter__(self) -> Iterator[event_pb2.Event]:
        return self

    def __next__(self) -> event_pb2.Event:
        return self.next()

    def next(self, timeout: float | None = None) -> event_pb2.Event:
        """The next event; raises TimeoutError after `timeout` seconds, StopIteration at the end."""
        if self._done:
            raise StopIteration
        if timeout is None and self._thread is None:
            with self._reading:
                item = next(self._items, _END)
        else:
            if self._thread is None:
                self._thread = threading.Thread(target=self._pump, name="stepd-events", daemon=True)
                self._thread.start()
            try:
                item = self._events.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no event within {timeout} s") from None
        if isinstance(item, event_pb2.Event):
            return item
        self._done = True
        if isinstance(item, BaseException):
            raise item
        raise StopIteration

    def send_input(self, key: str, command: _build.CommandLike, *, client_name: str = "", **args: Any) -> None:
        """Answers the pause `key` on this stream (same semantics as SendDebugInput).

        Success shows up as a ``pause_resolved`` event; a failure as an ``error``
        event on this stream (see :func:`stepd.errors.from_stream_error`).
        """
        message = event_pb2.SubscribeRequest(debug_input=_build.debug_input(key, command, client_name, **args))
        with self._lock:
            self._requests.put(message)

    def watch(self, session_ids: Sequence[str] = (), channels: Sequence[_build.ChannelLike] = ()) -> None:
        """Replaces the filter; the daemon answers with a fresh snapshot."""
        with self._lock:
            self._requests.put(self._refilter(session_ids, channels))

    def close(self) -> None:
        """Ends the stream; iteration stops."""
        self._closed.set()
        with self._lock:
            self._requests.put(None)
            call = self._call
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=5)
        elif self._reading.acquire(timeout=5):
            # Read in the caller's thread: the stream's generator still holds
            # the call. A read under way ends at once, as the call is cancelled.
            try:
                self._items.close()
            finally:
                self._reading.release()
        # The call is freed now, while grpc's threads still run, and not by
        # the interpreter's last collection (see errors.from_stream_call).
        with self._lock:
            if self._call is call:
                self._call = None

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- stream side -----------------------------------------------------------

    def _outbound(self, requests: queue.SimpleQueue[event_pb2.SubscribeRequest | None]) -> Iterator[event_pb2.SubscribeRequest]:
        while True:
            try:
                message = requests.get(timeout=self._keepalive_interval)
            except queue.Empty:
                message = event_pb2.SubscribeRequest(heartbeat=event_pb2.Heartbeat())
            if message is None:
                return
            yield message

    def _open(self, resume: bool) -> tuple[Any, queue.SimpleQueue[event_pb2.SubscribeRequest | None]]:
        """Starts a Subscribe call whose first message is the Watch."""
        requests: queue.SimpleQueue[event_pb2.SubscribeRequest | None] = queue.SimpleQueue()
        with self._lock:
            self._requests = requests
            requests.put(event_pb2.SubscribeRequest(watch=self._watch(resume=resume)))
            call: Any = self._stub.Subscribe(self._outbound(requests), metadata=self._metadata)
            self._call = call
        return call, requests

    def _stream(
        self, call: Any, requests: queue.SimpleQueue[event_pb2.SubscribeRequest | None]
    ) -> Generator[_Item, None, None]:
        """Events, across reconnects; ends with _END or the error that ended it."""
        established = False
        dropped = False
        deadline: float | None = None
        backoff = BACKOFF[0]
        while not self._closed.is_set():
            try:
                for response in call:
                    if dropped:
                        self.reconnects += 1
                    established, dropped, deadline = True, False, None
                    backoff = BACKOFF[0]
                    if self._accept(response.event):
                        yield response.event
                if not (self._follow_restarts and established):
                    yield _END  # the daemon ended the stream: shutdown
                    return
                err: StepdError = Unavailable("the daemon ended the event stream", code=grpc.StatusCode.UNAVAILABLE)
            except grpc.RpcError as rpc_error:
                err = from_stream_call(rpc_error)
            finally:
                requests.put(None)
            if self._closed.is_set():
                break  # close(): the caller's own cancel
            if not self._resumes(err, established):
                yield err
                return
            if deadline is None and self._reconnect_timeout is not None:
                deadline = time.monotonic() + self._reconnect_timeout
            # A proxy answers at once while the daemon is away: wait between
            # attempts that did not get through, rather than spin.
            if dropped and not self._pause(backoff, deadline):
                backoff = min(backoff * 2, BACKOFF[1])
            if not self._wait_ready(deadline) or self._past(deadline):
                if not self._closed.is_set():
                    yield Unavailable(f"could not resume the event stream: {err.message}", code=err.code)
                return
            dropped = True
            call, requests = self._open(resume=self.seq > 0)
        yield _END

    def _pause(self, seconds: float, deadline: float | None) -> bool:
        """Waits `seconds` (not past `deadline`); True when close() cut it short."""
        if deadline is not None:
            seconds = min(seconds, max(0.0, deadline - time.monotonic()))
        return self._closed.wait(seconds)

    @staticmethod
    def _past(deadline: float | None) -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def _pump(self) -> None:
        """The reading thread, once a timeout asked for one."""
        for item in self._items:
            self._events.put(item)
        self._events.put(_END)

    def _wait_ready(self, deadline: float | None) -> bool:
        while not self._closed.is_set():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            step = 0.5 if remaining is None else min(0.5, remaining)
            try:
                grpc.channel_ready_future(self._channel).result(timeout=step)
                return True
            except grpc.FutureTimeoutError:
                continue
        return False

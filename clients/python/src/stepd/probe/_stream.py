"""The probe's stream: one ``ProbeService.Connect`` call at a time, owned by
a background thread with its own event loop, reconnecting with backoff; what
the daemon sends (Welcome, Armed, Resume, Eval) and what a lost stream does
to the holds."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import warnings
from typing import Any

import grpc
from google.protobuf import duration_pb2

from stepd.errors import StepdError, from_rpc_error
from stepd.probe._arming import _DISARMED, _Arming
from stepd.probe._decorators import _Decorators
from stepd.probe._outcome import _RELEASE, _Waiter
from stepd.probe._reports import _WAKE
from stepd.v1 import event_pb2, probe_pb2, probe_pb2_grpc

_log = logging.getLogger("stepd.probe")

#: The codes of a daemon that refuses the probe's credentials: retrying
#: faster will not change its mind, an operator's new token will.
_REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class _Stream(_Decorators):
    """The part of a probe that talks to the daemon."""

    def _set_armed(self, armed: probe_pb2.Armed) -> None:
        # Most Resumes repeat the arming in force: reuse its compiled form.
        raw = armed.SerializeToString()
        if raw != self._armed_raw or self._arming is _DISARMED:
            self._armed_raw = raw
            self._arming = _Arming.of(armed)
        elif self._arming is not self._armed_compiled:
            self._arming = self._armed_compiled  # undo a local switch (NONE → BREAKPOINTS)
        self._armed_compiled = self._arming
        with self._armed_changed:
            self.arming_version += 1
            self._armed_changed.notify_all()

    def _hello(self, previous: str) -> probe_pb2.ConnectRequest:
        return probe_pb2.ConnectRequest(
            hello=probe_pb2.Hello(
                name=self.name,
                language="python",
                pid=os.getpid(),
                host=socket.gethostname(),
                labels=self.labels,
                capabilities=probe_pb2.ProbeCapabilities(eval=self.eval_enabled, skip=True, edit=True),
                traceparent=self._hello_trace[0],
                tracestate=self._hello_trace[1],
                resume_session_id=previous,
                heartbeat_interval=None if self._heartbeat_asked is None else _duration(self._heartbeat_asked),
            )
        )

    async def _writer(self, call: Any, q: asyncio.Queue[Any]) -> None:
        while True:
            try:
                # A quiet stream gets a heartbeat, so proxies do not cut it.
                message = await asyncio.wait_for(q.get(), self._heartbeat)
            except asyncio.TimeoutError:
                message = probe_pb2.ConnectRequest(heartbeat=event_pb2.Heartbeat())
            if message is _WAKE:
                # Let a burst of reports gather, but never delay a control message.
                if len(self._reports) < self._batch_size and self._linger > 0 and q.empty():
                    try:
                        message = await asyncio.wait_for(q.get(), self._linger)
                    except asyncio.TimeoutError:
                        message = _WAKE
            while True:
                batch = self._batch()
                if batch is None:
                    break
                await call.write(probe_pb2.ConnectRequest(reports=batch))
                with self._flushed:
                    self._sent_reports += self._sent_count
                    self._flushed.notify_all()
            if message is not _WAKE:
                await call.write(message)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException:  # noqa: BLE001 - never let the probe thread die noisily
            pass
        finally:
            self._loop = None
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
            self._attempted.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        if self._closed.is_set():
            return
        channel = self._transport.aio_channel()
        stub = probe_pb2_grpc.ProbeServiceStub(channel)
        delay = self._backoff[0]
        previous = ""
        try:
            while not self._closed.is_set():
                # Messages queued for a previous stream (hits, eval results) are
                # dropped with it: their holds were released when it ended.
                q: asyncio.Queue[Any] = asyncio.Queue()
                self._aq = q
                call: Any = stub.Connect(metadata=self._metadata)
                self._call = call
                self.attempts += 1
                writer = asyncio.ensure_future(self._writer(call, q))
                refused: StepdError | None = None
                try:
                    await call.write(self._hello(previous))
                    async for response in call:
                        if self._on_response(response, q):
                            previous = self.session_id
                            delay = self._backoff[0]
                            self.refusal = None
                except grpc.RpcError as err:
                    if err.code() in _REFUSED and not self._closed.is_set():
                        refused = from_rpc_error(err)
                except (grpc.aio.UsageError, asyncio.CancelledError):
                    pass
                except Exception:  # noqa: BLE001 - a bad message must not end the probe
                    pass
                finally:
                    writer.cancel()
                    call.cancel()
                    # Let the writer finish its cancellation before the loop may close.
                    await asyncio.wait([writer])
                    self._call = None
                    self._disconnected()
                    self._attempted.set()
                if self._closed.is_set():
                    break
                if refused is not None:
                    self._refused(refused)
                    delay = self._backoff[1]
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, self._backoff[1])
        finally:
            # Closed: no daemon will answer the holds kept for one.
            with self._lock:
                waiters, self._hits = self._hits, {}
            for waiter in waiters.values():
                waiter.deliver(_RELEASE)
            await channel.close()

    def _refused(self, err: StepdError) -> None:
        """The daemon refuses the credentials: says so once (a log line and
        ``on_refused``) until it welcomes the probe again."""
        first = self.refusal is None
        self.refusal = err
        if not first:
            return
        _log.warning(
            "stepd probe %r: the daemon at %s refuses its credentials (%s): %s; its points do not hold until it accepts them",
            self.name,
            self.addr,
            err.reason or err.code.name,
            err.message,
        )
        if self._on_refused is not None:
            try:
                self._on_refused(err)
            except Exception:  # noqa: BLE001 - the program's callback must not end the probe
                _log.exception("stepd probe %r: on_refused raised", self.name)

    def _on_response(self, response: probe_pb2.ConnectResponse, q: asyncio.Queue[Any]) -> bool:
        """Handles one message from the daemon; True for a Welcome."""
        kind = response.WhichOneof("message")
        if kind == "resume":
            resume = response.resume
            if resume.HasField("armed"):
                self._set_armed(resume.armed)
            with self._lock:
                waiter = self._hits.pop(resume.hit_id, None)
            if waiter is not None:
                waiter.deliver(resume)
        elif kind == "refused":
            # The daemon did not hold it (too many holds pending): the
            # point goes on with its value, as if it were not armed.
            refused = response.refused
            with self._lock:
                waiter = self._hits.pop(refused.hit_id, None)
                self.refused_total += 1
            warnings.warn(f"stepd: the daemon did not hold a point: {refused.error.message}", RuntimeWarning, stacklevel=2)
            if waiter is not None:
                waiter.deliver(_RELEASE)
        elif kind == "armed":
            self._set_armed(response.armed)
        elif kind == "eval":
            with self._lock:
                waiter = self._hits.get(response.eval.hit_id)
            if waiter is not None:
                waiter.deliver(response.eval)
            else:
                error = probe_pb2.EvalResult(eval_id=response.eval.eval_id, error="the point is no longer held")
                q.put_nowait(probe_pb2.ConnectRequest(eval_result=error))
        elif kind == "welcome":
            welcome = response.welcome
            if welcome.HasField("hold_limit"):
                self._hold_limit = welcome.hold_limit.ToTimedelta().total_seconds()
            if welcome.HasField("heartbeat_interval") and self._heartbeat_asked is None:
                self._heartbeat = welcome.heartbeat_interval.ToTimedelta().total_seconds() or self._heartbeat
            if self._reaper is not None:
                self._reaper.cancel()
                self._reaper = None
            with self._lock:
                self.session_id = welcome.session_id
                self._set_armed(welcome.armed)
                self._connected = True
                self.connections += 1
                # Holds kept across the lost stream are reported again, first.
                for waiter in self._hits.values():
                    if waiter.hit is not None:
                        again = probe_pb2.Hit()
                        again.CopyFrom(waiter.hit)
                        again.held_since.FromNanoseconds(int(waiter.since * 1e9))
                        q.put_nowait(probe_pb2.ConnectRequest(hit=again))
            self._welcomed.set()
            self._attempted.set()
            if self._reports:
                q.put_nowait(_WAKE)
            return True
        return False

    def _disconnected(self) -> None:
        keep = not self._release_on_disconnect and not self._closed.is_set()
        with self._lock:
            was_connected, self._connected = self._connected, False
            self.session_id = ""
            self._arming = _DISARMED
            waiters: dict[str, _Waiter] = {}
            if not keep:
                waiters, self._hits = self._hits, {}
        self._welcomed.clear()
        for waiter in waiters.values():
            waiter.deliver(_RELEASE)
        if keep and was_connected:
            # The holds wait for a daemon to come back, within the deadline
            # (counted from the stream's loss, not from each failed attempt).
            self._lost_at = time.monotonic()
            self._reap()
        with self._flushed:
            self._flushed.notify_all()

    def _reap(self) -> None:
        """While disconnected: releases (as CONTINUE) the holds past their hold
        limit, and all of them once the reconnect deadline passed."""
        self._reaper = None
        if self._connected:
            return
        now, wall = time.monotonic(), time.time()
        give_up = now >= self._lost_at + self._reconnect_deadline
        with self._lock:
            expired = [h for h, w in self._hits.items() if give_up or wall >= w.since + self._hold_limit]
            released = [self._hits.pop(h) for h in expired]
            left = [w.since + self._hold_limit - wall for w in self._hits.values()]
        for waiter in released:
            waiter.deliver(_RELEASE)
        loop = self._loop
        if left and loop is not None:
            delay = min([self._lost_at + self._reconnect_deadline - now, *left])
            self._reaper = loop.call_later(max(delay, 0.0), self._reap)


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d

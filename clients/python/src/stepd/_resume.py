"""What a resuming event subscription is without its I/O: the filter, the
cursor, and whether a failed stream is resumed. The blocking
(``stepd._subscription``) and the asyncio (``stepd.aio._subscription``)
subscriptions differ only in how they read the stream."""

from __future__ import annotations

from typing import Sequence

import grpc

from stepd import _build
from stepd.errors import StepdError
from stepd.v1 import event_pb2

__all__ = ["BACKOFF", "Resumable", "retryable"]

# CANCELLED too: a proxy (HAProxy, Envoy) that loses the daemon resets the
# stream with CANCEL; the caller's own close is told apart by the subscription.
_RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.CANCELLED,
}
#: The first and the longest wait between two failed attempts to resume.
BACKOFF = (0.05, 1.0)


def retryable(err: StepdError) -> bool:
    """Whether a failed stream is worth resuming: a dropped connection (not a
    stepd refusal), or a stream the daemon ended for what its client left
    unread, which says where to resume (the cursor, read up to the end)."""
    if err.reason == "LIMIT_EXCEEDED" and "resume_after_seq" in err.metadata:
        return True
    return not err.reason and err.code in _RETRYABLE


class Resumable:
    """The state both subscriptions share: what they watch, the cursor (the
    highest seq delivered and the instance it belongs to), and the resume policy.

    Attributes:
        seq: the cursor — the highest event seq accounted for.
        instance_id: the daemon instance the cursor belongs to.
        reconnects: how many times the stream resumed after a dropped connection
            (counted when the resumed stream delivers its first event).
    """

    def __init__(
        self,
        *,
        session_ids: Sequence[str],
        channels: Sequence[_build.ChannelLike],
        resume_after_seq: int,
        resume_instance_id: str,
        client_name: str,
        metadata: Sequence[tuple[str, str]],
        heartbeats: bool,
        reconnect: bool,
        reconnect_timeout: float | None,
        follow_restarts: bool,
    ) -> None:
        self._session_ids = list(session_ids)
        self._channels = [_build.channel(c) for c in channels]
        self._client_name = client_name
        self._metadata = tuple(metadata)
        self._heartbeats = heartbeats
        self._reconnect = reconnect
        self._reconnect_timeout = reconnect_timeout
        self._follow_restarts = follow_restarts
        self.seq = resume_after_seq
        self.instance_id = resume_instance_id
        self.reconnects = 0

    def _refilter(self, session_ids: Sequence[str], channels: Sequence[_build.ChannelLike]) -> event_pb2.SubscribeRequest:
        """Replaces the filter; the Watch that asks the daemon for it (and a fresh snapshot)."""
        self._session_ids = list(session_ids)
        self._channels = [_build.channel(c) for c in channels]
        return event_pb2.SubscribeRequest(watch=self._watch(resume=False))

    def _watch(self, resume: bool) -> event_pb2.Watch:
        return event_pb2.Watch(
            session_ids=self._session_ids,
            channels=self._channels,
            resume_after_seq=self.seq if resume else 0,
            resume_instance_id=self.instance_id if resume else "",
            client_name=self._client_name,
        )

    def _accept(self, event: event_pb2.Event) -> bool:
        """Moves the cursor; False for what is not delivered (repeats, unwanted heartbeats)."""
        kind = event.WhichOneof("payload")
        if kind == "snapshot":
            self.seq = event.snapshot.seq
            self.instance_id = event.snapshot.instance_id
        elif event.seq > 0:
            if event.seq <= self.seq:
                return False  # already delivered before a reconnect
            self.seq = event.seq
        return kind != "heartbeat" or self._heartbeats

    def _resumes(self, err: StepdError, established: bool) -> bool:
        """Whether the stream that failed with `err` is resumed: one that
        delivered, dropped (or, with follow_restarts, whose daemon is stopping)."""
        follows = self._follow_restarts and err.code == grpc.StatusCode.UNAVAILABLE
        return self._reconnect and established and (retryable(err) or follows)

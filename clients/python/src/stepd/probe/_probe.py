"""The probe: one ``ProbeService.Connect`` stream per :class:`Probe`, owned by a
background thread; points decide locally whether they hold. The parts of a
probe are its bases, each in a module named for it (see ``_state``)."""

from __future__ import annotations

import atexit
import collections
import contextvars
import itertools
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Mapping

from stepd import _build
from stepd.errors import StepdError
from stepd.probe import _labels, _trace
from stepd.probe._arming import _DISARMED
from stepd.probe._outcome import Skipped, Stopped
from stepd.probe._reports import _WAKE
from stepd.probe._stream import _Stream

__all__ = ["Probe", "Skipped", "Stopped", "connect"]


class Probe(_Stream):
    """A connection of an instrumented program to stepd; see :func:`connect`."""

    def __init__(
        self,
        name: str = "",
        labels: Mapping[str, str] | None = None,
        addr: str | None = None,
        eval: bool = True,
        *,
        buffer_size: int = 65536,
        batch_size: int = 2048,
        linger: float = 0.002,
        backoff: tuple[float, float] = (0.05, 2.0),
        client_name: str = "",
        tls_ca: str | os.PathLike[str] | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        token: str | None = None,
        traceparent: str | None = None,
        environment_labels: bool = True,
        release_on_disconnect: bool = False,
        reconnect_deadline: float = 60.0,
        heartbeat: float | None = None,
        on_refused: Callable[[StepdError], None] | None = None,
    ) -> None:
        self.name = name or os.path.basename(sys.argv[0] or "python")
        self._on_refused = on_refused
        #: Why the daemon refuses this probe (its credentials), while it does;
        #: None once it welcomes the probe.
        self.refusal = None
        #: How many times the stream was attempted, welcomed or not.
        self.attempts = 0
        self._release_on_disconnect = release_on_disconnect
        self._reconnect_deadline = reconnect_deadline
        self._heartbeat_asked = heartbeat
        #: Quiet time after which the stream gets a heartbeat (the daemon's, from Welcome).
        self._heartbeat = heartbeat or 30.0
        #: The daemon's hold limit (Welcome), which also bounds a hold kept while disconnected.
        self._hold_limit = 3600.0
        self._lost_at = 0.0
        self._reaper = None
        # Read here, in the caller's context: the stream's thread has none.
        self._hello_trace = _trace.at_connect(traceparent)
        self.labels = _labels.merged(labels, environment_labels)
        self._transport = _build.transport(addr, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.addr = self._transport.target
        self.eval_enabled = eval
        #: The current session id ("" while disconnected).
        self.session_id = ""
        #: How many times the stream was (re)established.
        self.connections = 0
        #: Reports dropped because the buffer was full, in all.
        self.dropped_total = 0
        #: Holds the daemon refused (its limits on pending holds): those
        #: points went on at once, as if not armed.
        self.refused_total = 0
        self._metadata = ((_build.CLIENT_HEADER, client_name or f"probe:{self.name}"), *self._transport.metadata)
        self._arming = _DISARMED
        self._armed_changed = threading.Condition()
        self._armed_raw = b""
        self._armed_compiled = _DISARMED
        #: Increases with every Armed (or Welcome) applied.
        self.arming_version = 0
        self._stack = contextvars.ContextVar(f"stepd-scopes-{id(self)}", default=())
        self._orphans = False
        self._top = itertools.count()
        self._hit_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._hits = {}
        self._connected = False
        self._welcomed = threading.Event()
        self._attempted = threading.Event()
        self._closed = threading.Event()
        self._loop = None
        self._aq = None
        self._stop = None
        self._reports = collections.deque(maxlen=buffer_size)
        self._buffer_size = buffer_size
        self._batch_size = batch_size
        self._linger = linger
        self._backoff = backoff
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._flushed = threading.Condition()
        self._sent_reports = 0
        self._sent_count = 0
        self._queued_reports = 0
        self._call = None
        self._warned_loop = False
        self._thread = threading.Thread(target=self._run, name=f"stepd-probe-{self.name}", daemon=True)
        self._thread.start()
        _live.add(self)
    def wait_armed(self, after: int, timeout: float | None = None) -> bool:
        """Waits until an arming newer than version `after` arrived (see `arming_version`)."""
        with self._armed_changed:
            return self._armed_changed.wait_for(lambda: self.arming_version > after, timeout)

    @property
    def connected(self) -> bool:
        """Whether the stream is up (points can hold)."""
        return self._connected

    def wait_connected(self, timeout: float | None = None) -> bool:
        """Waits for the daemon's Welcome; False when it did not come in time."""
        return self._welcomed.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Sends the buffered reports, ends the stream, releases held points."""
        if self._closed.is_set():
            return
        if self._connected:
            self.flush(timeout)
        self._closed.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
                call = self._call
                if call is not None:
                    loop.call_soon_threadsafe(call.cancel)
            except RuntimeError:
                pass
        self._thread.join(timeout)
        _live.discard(self)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self, timeout: float | None = 5.0) -> bool:
        """Waits until every report queued so far went to the stream (or the timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._flushed:
            want = self._queued_reports
            self._send(_WAKE)
            while self._sent_reports < want and self._connected:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._flushed.wait(remaining if remaining is not None else 0.5)
        return self._sent_reports >= want


_live: weakref.WeakSet[Probe] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for probe in list(_live):
        try:
            probe.close(timeout=1.0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def connect(
    name: str = "",
    labels: Mapping[str, str] | None = None,
    addr: str | None = None,
    eval: bool = True,
    *,
    wait: float = 2.0,
    **options: Any,
) -> Probe:
    """Connects an instrumented program to stepd and returns its :class:`Probe`.

    `addr` defaults to ``$STEPD_ADDR``, else ``127.0.0.1:7701``; the keyword
    options ``tls_ca``, ``tls_cert``, ``tls_key`` and ``token`` are those of
    :class:`stepd.Client` (with the same ``STEPD_*`` defaults). The stream is
    owned by a background thread that reconnects with backoff; while it is
    down, points do not hold. `wait` is how long to wait for the daemon's first
    Welcome, so breakpoints set before the program started apply to its first
    points (0: don't wait). `eval=False` refuses EVAL (see the security note in
    :mod:`stepd.probe`). The keyword option ``traceparent`` is the span the
    probe's session is a child of; by default the current OpenTelemetry span
    (when the API is importable), else ``$TRACEPARENT``. The labels start from
    the pod's environment (``pod``, ``namespace``, ``node``, ``app``: see
    docs/probes.md) with `labels` over them; ``environment_labels=False``
    leaves them out.

    A hold in progress when the stream drops keeps waiting and is reported
    again to the daemon the probe reconnects to (a restarted one or another
    instance), where it can be answered; it goes on with its original value
    when its hold limit passes or no daemon welcomed the probe within
    ``reconnect_deadline`` seconds (60). ``release_on_disconnect=True`` makes
    it go on at once instead. ``heartbeat`` is the interval, in seconds, of
    heartbeats on a quiet stream (default: the daemon's), for proxies that
    cut idle streams.

    A daemon that refuses the probe's credentials (``UNAUTHENTICATED``: a
    wrong, expired or revoked token; ``PERMISSION_DENIED``: a role that may
    not connect probes) is said once: a warning on the ``stepd.probe``
    logger and ``on_refused(error)`` (a :class:`stepd.errors.StepdError`,
    e.g. :class:`stepd.errors.TokenExpired`), from the probe's thread;
    ``probe.refusal`` holds the error until the daemon welcomes the probe
    again. The probe keeps trying, at its longest backoff, so a new token on
    the daemon's side is picked up.
    """
    probe = Probe(name, labels, addr, eval, **options)
    if wait > 0:
        # Until the first attempt ends: welcomed, or refused (no daemon there).
        probe._attempted.wait(wait)
    return probe

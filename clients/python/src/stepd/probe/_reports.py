"""Reports: observed points, traced points and enlightened values, queued
without waiting and sent to the stream in batches."""

from __future__ import annotations

import time
from typing import Any

from stepd.probe._frames import _Frame
from stepd.probe._state import _ProbeState, _Report, _Scope
from stepd.probe._values import fill_value
from stepd.v1 import probe_pb2

_WAKE = object()  # reports are waiting
_OBSERVED, _TRACED, _ENLIGHTEN = 0, 1, 2


class _Reports(_ProbeState):
    """Points that only report (``observe``, ``enlighten``, traced points), batched."""

    def observe(self, kind: str, name: str = "", value: Any = None) -> None:
        """A point that only reports (never holds): batched, never waits."""
        stack = self._open_scopes()
        self._report((_OBSERVED, kind, name, value, stack, [s.n for s in stack], time.time_ns()))

    def enlighten(self, value: Any, *, erase_previous: bool = False) -> None:
        """A value to show beside the current coordinate."""
        stack = self._open_scopes()
        self._report((_ENLIGHTEN, value, erase_previous, [s.n for s in stack]))

    def _trace(self, kind: str, name: str, value: Any, stack: tuple[_Scope, ...], coor: list[int], frame: _Frame) -> None:
        # Where the point is, read now: the frame moves on before the batch is sent.
        code = frame.f_code
        where = (code.co_filename, frame.f_lineno or 0, getattr(code, "co_qualname", code.co_name), str(frame.f_globals.get("__name__", "")))
        self._report((_TRACED, kind, name, value, stack, coor, time.time_ns(), where))

    def _report(self, item: _Report) -> None:
        """Queues a report; when the buffer is full the oldest is dropped and
        counted. Check, drop and append happen under one lock, so a batch
        taken meanwhile can never make a drop count twice."""
        buf = self._reports
        with self._drop_lock:
            if len(buf) >= self._buffer_size:
                buf.popleft()
                self._dropped += 1
                self.dropped_total += 1
                self._sent_reports += 1  # it will never be sent; flush() must not wait for it
            buf.append(item)
            self._queued_reports += 1
            wake = len(buf) == 1
        if wake:
            self._send(_WAKE)

    def _batch(self) -> probe_pb2.Reports | None:
        buf = self._reports
        with self._drop_lock:
            dropped, self._dropped = self._dropped, 0
            items = [buf.popleft() for _ in range(min(len(buf), self._batch_size))]
        if not items and not dropped:
            return None
        reports = probe_pb2.Reports(dropped=dropped)
        add_observed = reports.observed.add
        n = 0
        for item in items:
            n += 1
            tag = item[0]
            if tag == _OBSERVED:
                _, kind, name, value, stack, coor, ns = item
                o = add_observed(kind=kind, name=name)
                if stack:
                    o.scope_path.extend([s.name for s in stack])
                    o.coor.extend(coor)
                fill_value(o.value, value, 0)
                stamp = o.time
                stamp.seconds = ns // 1_000_000_000
                stamp.nanos = ns % 1_000_000_000
            elif tag == _TRACED:
                _, kind, name, value, stack, coor, ns, where = item
                tr = reports.trace.add(coor=coor)
                loc = tr.location
                loc.path, loc.line, loc.function, loc.module = where
                tr.point.kind, tr.point.name = kind, name
                tr.point.scope_path.extend(s.name for s in stack)
                tr.point.labels.update(self.labels)
                fill_value(tr.point.payload, value, 0)
                tr.time.seconds, tr.time.nanos = divmod(ns, 1_000_000_000)
            else:
                _, value, erase, coor = item
                reports.enlighten.add(coor=coor, value=value if isinstance(value, str) else repr(value), erase_previous=erase)
        self._sent_count = n
        return reports

"""A point that holds: its Hit, sent to the daemon; its withdrawal when the
program stops waiting; and the Evals it answers while held."""

from __future__ import annotations

import time
from typing import Any, Mapping

from stepd.probe import _trace
from stepd.probe._arming import _OutsideScope
from stepd.probe._frames import _Frame, _locals, _location, _stack_of
from stepd.probe._outcome import _Waiter
from stepd.probe._reports import _Reports
from stepd.probe._state import _Scope
from stepd.probe._values import to_struct, to_value, type_name
from stepd.v1 import pause_pb2, probe_pb2


class _Hits(_Reports):
    """What a holding point sends the daemon, and the Evals it answers."""

    def _send_hit(
        self,
        waiter: _Waiter,
        kind: str,
        name: str,
        value: Any,
        frame: _Frame | None,
        f_locals: Mapping[str, Any],
        stack: tuple[_Scope, ...],
        coor: list[int],
        ids: list[str],
        editable: bool,
        schema: Mapping[str, Any] | None,
        type_hint: Any,
        exception_message: str,
        *,
        traceparent: str | None = None,
    ) -> str:
        """Sends the Hit; its id, or "" when disconnected (the point does not hold).
        It carries `traceparent`, or when that is None the current span."""
        hit_id = f"h{next(self._hit_ids)}"
        info = pause_pb2.PointInfo(
            kind=kind,
            name=name,
            payload=to_value(value),
            editable=editable,
            labels=self.labels,
            type_hint=type_name(type_hint),
            scope_path=[s.name for s in stack],
        )
        if schema is not None:
            info.schema.CopyFrom(to_struct(schema))
        hit = probe_pb2.Hit(
            hit_id=hit_id,
            point=info,
            locals=_locals(f_locals),
            coor=coor,
            exception_message=exception_message,
            breakpoint_ids=ids,
            outside_request_scope=isinstance(ids, _OutsideScope),
        )
        hit.traceparent, hit.tracestate = _trace.current() if traceparent is None else (traceparent, "")
        if frame is not None:
            hit.location.CopyFrom(_location(frame))
            hit.stack.extend(_stack_of(frame))
        waiter.hit, waiter.since = hit, time.time()
        with self._lock:
            if not self._connected:
                return ""  # while disconnected, points don't hold
            self._hits[hit_id] = waiter
            self._send(probe_pb2.ConnectRequest(hit=hit))
        return hit_id

    def _withdraw_waiter(self, waiter: _Waiter) -> None:
        """Withdraws the hold of `waiter` if its Hit was made, sent or not."""
        if waiter.hit is not None:
            self._withdraw(waiter.hit.hit_id)

    def _withdraw(self, hit_id: str) -> None:
        """The program gave up a hold before its Resume came: tell the daemon,
        so the pause resolves (``by: "withdrawn"``) instead of lingering."""
        with self._lock:
            if self._hits.pop(hit_id, None) is None:
                return  # already answered or released: nothing to withdraw
            self._send(probe_pb2.ConnectRequest(withdraw=probe_pb2.Withdraw(hit_id=hit_id)))

    def _evaluate(self, waiter: _Waiter, ev: probe_pb2.Eval) -> None:
        result = probe_pb2.EvalResult(eval_id=ev.eval_id)
        if not self.eval_enabled:
            result.error = "this probe does not evaluate code"
        else:
            namespace = dict(waiter.locals)
            namespace.setdefault("_", waiter.value)
            try:
                try:
                    code = compile(ev.code, "<stepd eval>", "eval")
                except SyntaxError:
                    exec(compile(ev.code, "<stepd eval>", "exec"), waiter.globals, namespace)
                    out: Any = None
                else:
                    out = eval(code, waiter.globals, namespace)
                result.value = repr(out)
                if out is None or isinstance(out, (str, int, float, bool, list, dict, tuple)):
                    result.structured.CopyFrom(to_value(out))
            except BaseException as err:  # noqa: BLE001 - any failure is the evaluation's answer
                result.error = f"{type(err).__name__}: {err}"
        self._send(probe_pb2.ConnectRequest(eval_result=result))

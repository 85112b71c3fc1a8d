# [async]
"""The asyncio stepd client: the same surface as :class:`stepd.Client`, awaitable.

Every method of :class:`stepd.Client` exists here as a coroutine, except
:meth:`Client.events` (an :class:`AsyncSubscription`, used with ``async for``)
and :meth:`Client.print_value` (an async iterator). Create the client inside a
running loop (``grpc.aio``).
"""
# [sync]
# """The synchronous stepd client."""
# [end]

from __future__ import annotations

import os
import time
# [async]
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence, TypeVar
# [sync]
# from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar
# [end]

import grpc
# [async]
import grpc.aio
# [end]
from google.protobuf import field_mask_pb2

from stepd import _build
from stepd._build import BaggageLike, ChannelLike, CommandLike, DurationLike, TimeLike
from stepd._pause_book import pause_of
from stepd.aio._pauses import AsyncPauses
from stepd.aio._subscription import AsyncSubscription
from stepd.aio.session import AsyncSession
from stepd.errors import from_rpc_error, from_stream_call
from stepd.v1 import (
    breakpoint_pb2,
    breakpoint_pb2_grpc,
    daemon_pb2,
    daemon_pb2_grpc,
    event_pb2,
    history_pb2,
    history_pb2_grpc,
    inspector_pb2,
    inspector_pb2_grpc,
    pause_pb2,
    session_pb2,
    session_pb2_grpc,
)

__all__ = ["Client"]

_Resp = TypeVar("_Resp")


class Client:
    """A connection to one stepd daemon.

    ``addr`` is "host:port", "https://host:port" or "unix:/path/stepd.sock"; by
    default ``$STEPD_ADDR``, else ``127.0.0.1:7701``. ``tls_ca`` (PEM roots;
    TLS for a TCP address), ``tls_cert``/``tls_key`` (a client certificate, for
    mutual TLS) and ``token`` (sent as ``authorization: Bearer``) default to
    ``$STEPD_TLS_CA``, ``$STEPD_TLS_CERT``, ``$STEPD_TLS_KEY`` and
    ``$STEPD_TOKEN``; with no address and no token the local daemon's
    ``<data dir>/token`` is sent when it exists. Every RPC of the API has a method with keyword
    arguments; each returns the RPC's response message and raises a
    :class:`stepd.errors.StepdError` subclass on failure. ``timeout`` (seconds)
    applies to every unary call unless a call passes its own.

    Use it with ``async with``, or await :meth:`close`.
    """

    def __init__(
        self,
        addr: str | None = None,
        *,
        client_name: str = "",
        timeout: float | None = 30.0,
        metadata: Mapping[str, str] | None = None,
        channel: grpc.aio.Channel | None = None,
        options: Sequence[tuple[str, Any]] = (),
        tls_ca: str | os.PathLike[str] | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        token: str | None = None,
    ) -> None:
        transport = _build.transport(addr, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token)
        self.addr = transport.target
        self.client_name = client_name or "stepd-python"
        self.timeout = timeout
        self._owns_channel = channel is None
        self.channel: grpc.aio.Channel = channel or transport.aio_channel(options)
        self.metadata: tuple[tuple[str, str], ...] = (
            (_build.CLIENT_HEADER, self.client_name),
            *transport.metadata,
            *(metadata or {}).items(),
        )
        self.daemon_stub = daemon_pb2_grpc.DaemonServiceStub(self.channel)
        self.session_stub = session_pb2_grpc.SessionServiceStub(self.channel)
        self.breakpoint_stub = breakpoint_pb2_grpc.BreakpointServiceStub(self.channel)
        self.inspector_stub = inspector_pb2_grpc.InspectorServiceStub(self.channel)
        self.history_stub = history_pb2_grpc.HistoryServiceStub(self.channel)

    async def close(self) -> None:
        """Closes the channel (when the client created it)."""
        if self._owns_channel:
            await self.channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, method: Callable[..., Awaitable[_Resp]], request: Any, timeout: float | None) -> _Resp:
        try:
            return await method(request, timeout=self.timeout if timeout is None else timeout, metadata=self.metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    # -- DaemonService -------------------------------------------------------------

    async def ping(self, *, timeout: float | None = None) -> daemon_pb2.PingResponse:
        """Handshake: version, protocol version ("stepd.v1"), instance id, uptime."""
        return await self._call(self.daemon_stub.Ping, daemon_pb2.PingRequest(), timeout)

    async def get_status(self, *, timeout: float | None = None) -> daemon_pb2.GetStatusResponse:
        """Counts and addresses of the running daemon."""
        return await self._call(self.daemon_stub.GetStatus, daemon_pb2.GetStatusRequest(), timeout)

    async def get_version(self, *, timeout: float | None = None) -> daemon_pb2.GetVersionResponse:
        """Build information."""
        return await self._call(self.daemon_stub.GetVersion, daemon_pb2.GetVersionRequest(), timeout)

    async def doctor(self, *, timeout: float | None = None) -> daemon_pb2.DoctorResponse:
        """Checks adapters, the store and the configuration."""
        return await self._call(self.daemon_stub.Doctor, daemon_pb2.DoctorRequest(), timeout)

    async def shutdown(self, *, timeout: float | None = None) -> daemon_pb2.ShutdownResponse:
        """Stops the daemon gracefully."""
        return await self._call(self.daemon_stub.Shutdown, daemon_pb2.ShutdownRequest(), timeout)

    # -- BreakpointService -----------------------------------------------------------

    async def list_breakpoints(
        self, *, for_labels: Mapping[str, str] | None = None, timeout: float | None = None
    ) -> breakpoint_pb2.ListBreakpointsResponse:
        """Breakpoints in creation order; `for_labels` keeps those that would apply to such a session."""
        request = breakpoint_pb2.ListBreakpointsRequest(for_labels=dict(for_labels or {}))
        return await self._call(self.breakpoint_stub.ListBreakpoints, request, timeout)

    async def add_breakpoint(
        self,
        spec: breakpoint_pb2.BreakpointSpec | None = None,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int = 0,
        function: str | None = None,
        exception_filters: Iterable[str] | None = None,
        probe_kind: str | None = None,
        probe_name: str | None = None,
        baggage: BaggageLike | None = None,
        enabled: bool | None = None,
        condition: str | None = None,
        hit_condition: str | None = None,
        label_selector: str | None = None,
        expires_at: TimeLike | None = None,
        max_hits: int | None = None,
        action: int | str | None = None,
        log_message: str | None = None,
        hold_limit: DurationLike | None = None,
        timeout: float | None = None,
    ) -> breakpoint_pb2.AddBreakpointResponse:
        """Adds a breakpoint: a `spec`, or keywords (``path``+``line``, ``function``,
        ``exception_filters``, ``probe_kind``/``probe_name``/``baggage``, plus the common fields;
        ``action`` is "stop", "log" or "snapshot")."""
        built, _ = _build.breakpoint_spec(
            spec, path=path, line=line, column=column, function=function,
            exception_filters=exception_filters, probe_kind=probe_kind, probe_name=probe_name, baggage=baggage,
            enabled=enabled, condition=condition, hit_condition=hit_condition,
            label_selector=label_selector, expires_at=expires_at, max_hits=max_hits,
            action=action, log_message=log_message, hold_limit=hold_limit,
        )  # fmt: skip
        request = breakpoint_pb2.AddBreakpointRequest(spec=built)
        return await self._call(self.breakpoint_stub.AddBreakpoint, request, timeout)

    async def remove_breakpoint(self, id: str, *, timeout: float | None = None) -> breakpoint_pb2.RemoveBreakpointResponse:
        """Removes a breakpoint from the store and every session."""
        request = breakpoint_pb2.RemoveBreakpointRequest(id=id)
        return await self._call(self.breakpoint_stub.RemoveBreakpoint, request, timeout)

    async def update_breakpoint(
        self,
        id: str,
        spec: breakpoint_pb2.BreakpointSpec | None = None,
        *,
        update_mask: Iterable[str] | field_mask_pb2.FieldMask | None = None,
        path: str | None = None,
        line: int | None = None,
        column: int = 0,
        function: str | None = None,
        exception_filters: Iterable[str] | None = None,
        probe_kind: str | None = None,
        probe_name: str | None = None,
        baggage: BaggageLike | None = None,
        enabled: bool | None = None,
        condition: str | None = None,
        hit_condition: str | None = None,
        label_selector: str | None = None,
        expires_at: TimeLike | None = None,
        max_hits: int | None = None,
        action: int | str | None = None,
        log_message: str | None = None,
        hold_limit: DurationLike | None = None,
        timeout: float | None = None,
    ) -> breakpoint_pb2.UpdateBreakpointResponse:
        """Changes a breakpoint. With keywords and no `update_mask`, exactly the
        fields given change (e.g. ``update_breakpoint(id, enabled=False)``); with a
        `spec` and no mask, the whole spec is replaced."""
        built, paths = _build.breakpoint_spec(
            spec, path=path, line=line, column=column, function=function,
            exception_filters=exception_filters, probe_kind=probe_kind, probe_name=probe_name, baggage=baggage,
            enabled=enabled, condition=condition, hit_condition=hit_condition,
            label_selector=label_selector, expires_at=expires_at, max_hits=max_hits,
            action=action, log_message=log_message, hold_limit=hold_limit,
        )  # fmt: skip
        mask = _build.field_mask(update_mask if update_mask is not None or spec is not None else paths)
        request = breakpoint_pb2.UpdateBreakpointRequest(id=id, spec=built, update_mask=mask)
        return await self._call(self.breakpoint_stub.UpdateBreakpoint, request, timeout)

    async def enable_breakpoint(self, id: str, *, timeout: float | None = None) -> breakpoint_pb2.UpdateBreakpointResponse:
        """Enables a breakpoint."""
        return await self.update_breakpoint(id, enabled=True, timeout=timeout)

    async def disable_breakpoint(self, id: str, *, timeout: float | None = None) -> breakpoint_pb2.UpdateBreakpointResponse:
        """Disables a breakpoint (it stays stored)."""
        return await self.update_breakpoint(id, enabled=False, timeout=timeout)

    # -- SessionService ----------------------------------------------------------------

    async def launch(
        self,
        program: str = "",
        *,
        adapter: str = "",
        adapter_command: Sequence[str] = (),
        args: Sequence[str] = (),
        cwd: str = "",
        env: Mapping[str, str] | None = None,
        stop_on_entry: bool = False,
        labels: Mapping[str, str] | None = None,
        name: str = "",
        adapter_options: Mapping[str, Any] | None = None,
        request_id: str = "",
        end_on_exit: bool = True,
        timeout: float | None = None,
    ) -> AsyncSession:
        """Starts a program under a debug adapter; answers once configuration is
        done, with a :class:`stepd.aio.AsyncSession` (which reads as the LaunchResponse).
        ``async with await client.launch(...) as session:`` ends it when the block is left."""
        request = session_pb2.LaunchRequest(
            adapter=adapter, adapter_command=list(adapter_command), program=program, args=list(args),
            cwd=cwd, env=dict(env or {}), stop_on_entry=stop_on_entry, labels=dict(labels or {}),
            name=name, adapter_options=_build.to_struct(adapter_options), request_id=request_id,
        )  # fmt: skip
        return AsyncSession(self, await self._call(self.session_stub.Launch, request, timeout), end_on_exit=end_on_exit)

    async def attach(
        self,
        *,
        adapter: str = "",
        adapter_command: Sequence[str] = (),
        pid: int = 0,
        connect: str = "",
        labels: Mapping[str, str] | None = None,
        name: str = "",
        adapter_options: Mapping[str, Any] | None = None,
        request_id: str = "",
        end_on_exit: bool = True,
        timeout: float | None = None,
    ) -> AsyncSession:
        """Attaches a debug adapter to a process (`pid`) or a debug server
        (`connect`); returns a :class:`stepd.aio.AsyncSession` (which reads as the AttachResponse)."""
        request = session_pb2.AttachRequest(
            adapter=adapter, adapter_command=list(adapter_command), pid=pid, connect=connect,
            labels=dict(labels or {}), name=name, adapter_options=_build.to_struct(adapter_options),
            request_id=request_id,
        )  # fmt: skip
        return AsyncSession(self, await self._call(self.session_stub.Attach, request, timeout), end_on_exit=end_on_exit)

    async def disconnect(
        self, session_id: str, *, mode: int | str | None = None, timeout: float | None = None
    ) -> session_pb2.DisconnectResponse:
        """Ends a session; `mode` is "terminate" or "detach" (default: as it started)."""
        request = session_pb2.DisconnectRequest(session_id=session_id, mode=_build.disconnect_mode(mode))
        return await self._call(self.session_stub.Disconnect, request, timeout)

    async def list_sessions(
        self, *, include_ended: bool = False, label_selector: str = "", timeout: float | None = None
    ) -> session_pb2.ListSessionsResponse:
        """Sessions, oldest first."""
        request = session_pb2.ListSessionsRequest(include_ended=include_ended, label_selector=label_selector)
        return await self._call(self.session_stub.ListSessions, request, timeout)

    async def get_session(self, session_id: str, *, timeout: float | None = None) -> session_pb2.GetSessionResponse:
        """One session with its pauses and breakpoint placements."""
        request = session_pb2.GetSessionRequest(session_id=session_id)
        return await self._call(self.session_stub.GetSession, request, timeout)

    async def continue_(
        self,
        session_id: str,
        *,
        thread_id: int = 0,
        wait: bool = True,
        wait_timeout: float | None = None,
        timeout: float | None = None,
        wait_timeout_ms: int | None = None,
    ) -> session_pb2.ContinueResponse:
        """Resumes execution; with `wait` answers when the session is stable again
        (within `wait_timeout` seconds: None is the daemon's 30 s, 0 no limit).
        `wait_timeout_ms` is deprecated."""
        waited = _build.wait_seconds(wait_timeout, wait_timeout_ms)
        request = session_pb2.ContinueRequest(
            session_id=session_id, thread_id=thread_id, **_build.wait_fields(wait, waited)
        )
        return await self._call(self.session_stub.Continue, request, self._wait_timeout(timeout, wait, waited))

    async def step(
        self,
        session_id: str,
        kind: _build.StepKindLike = "over",
        *,
        thread_id: int = 0,
        wait: bool = True,
        wait_timeout: float | None = None,
        timeout: float | None = None,
        wait_timeout_ms: int | None = None,
    ) -> session_pb2.StepResponse:
        """Steps one thread "over", "in" or "out" (or a StepKind); waits as
        :meth:`continue_` does."""
        waited = _build.wait_seconds(wait_timeout, wait_timeout_ms)
        request = session_pb2.StepRequest(
            session_id=session_id, thread_id=thread_id, kind=_build.step_kind(kind),
            **_build.wait_fields(wait, waited),
        )  # fmt: skip
        return await self._call(self.session_stub.Step, request, self._wait_timeout(timeout, wait, waited))

    async def pause(
        self,
        session_id: str,
        *,
        thread_id: int = 0,
        wait: bool = True,
        wait_timeout: float | None = None,
        timeout: float | None = None,
        wait_timeout_ms: int | None = None,
    ) -> session_pb2.PauseResponse:
        """Interrupts a running program (DAP) or arms "hold at the next point" (probes)."""
        waited = _build.wait_seconds(wait_timeout, wait_timeout_ms)
        request = session_pb2.PauseRequest(
            session_id=session_id, thread_id=thread_id, **_build.wait_fields(wait, waited)
        )
        return await self._call(self.session_stub.Pause, request, self._wait_timeout(timeout, wait, waited))

    async def list_threads(self, session_id: str, *, timeout: float | None = None) -> session_pb2.ListThreadsResponse:
        """Threads of a session."""
        request = session_pb2.ListThreadsRequest(session_id=session_id)
        return await self._call(self.session_stub.ListThreads, request, timeout)

    async def get_stack_trace(
        self,
        session_id: str,
        thread_id: int,
        *,
        start_frame: int = 0,
        levels: int = 0,
        timeout: float | None = None,
    ) -> session_pb2.GetStackTraceResponse:
        """Stack frames of a stopped thread, top first."""
        request = session_pb2.GetStackTraceRequest(
            session_id=session_id, thread_id=thread_id, start_frame=start_frame, levels=levels
        )
        return await self._call(self.session_stub.GetStackTrace, request, timeout)

    async def list_scopes(self, session_id: str, frame_id: str, *, timeout: float | None = None) -> session_pb2.ListScopesResponse:
        """Scopes of a frame."""
        request = session_pb2.ListScopesRequest(session_id=session_id, frame_id=frame_id)
        return await self._call(self.session_stub.ListScopes, request, timeout)

    async def list_variables(
        self,
        session_id: str,
        variables_ref: str,
        *,
        filter: int | str | None = None,
        start: int = 0,
        count: int = 0,
        timeout: float | None = None,
    ) -> session_pb2.ListVariablesResponse:
        """Children of a variable container; `filter` is "indexed" or "named"."""
        request = session_pb2.ListVariablesRequest(
            session_id=session_id, variables_ref=variables_ref, filter=_build.variable_filter(filter),
            start=start, count=count,
        )  # fmt: skip
        return await self._call(self.session_stub.ListVariables, request, timeout)

    async def set_variable(
        self, session_id: str, variables_ref: str, name: str, value: str, *, timeout: float | None = None
    ) -> session_pb2.SetVariableResponse:
        """Assigns a variable (value is an expression in the debuggee's language)."""
        request = session_pb2.SetVariableRequest(
            session_id=session_id, variables_ref=variables_ref, name=name, value=value
        )
        return await self._call(self.session_stub.SetVariable, request, timeout)

    async def evaluate(
        self,
        session_id: str,
        expression: str,
        *,
        frame_id: str = "",
        context: int | str | None = None,
        timeout: float | None = None,
    ) -> session_pb2.EvaluateResponse:
        """Evaluates an expression, in a frame or globally; `context` is "repl", "watch", "hover" or "clipboard"."""
        request = session_pb2.EvaluateRequest(
            session_id=session_id, expression=expression, frame_id=frame_id,
            context=_build.evaluate_context(context),
        )  # fmt: skip
        return await self._call(self.session_stub.Evaluate, request, timeout)

    async def read_output(
        self,
        session_id: str,
        *,
        after_offset: int = 0,
        max_bytes: int = 0,
        categories: Sequence[str] = (),
        timeout: float | None = None,
    ) -> session_pb2.ReadOutputResponse:
        """Reads captured output from an offset without draining it."""
        request = session_pb2.ReadOutputRequest(
            session_id=session_id, after_offset=after_offset, max_bytes=max_bytes, categories=list(categories)
        )
        return await self._call(self.session_stub.ReadOutput, request, timeout)

    async def send_debug_input(
        self,
        key: str,
        command: CommandLike,
        *,
        client_name: str = "",
        timeout: float | None = None,
        **args: Any,
    ) -> session_pb2.SendDebugInputResponse:
        """Answers the pause `key`: ``send_debug_input(key, "continue")``,
        ``send_debug_input(key, "eval", code="x")``, or a DebugCommand."""
        request = session_pb2.SendDebugInputRequest(input=_build.debug_input(key, command, client_name, **args))
        return await self._call(self.session_stub.SendDebugInput, request, timeout)

    async def list_pauses(self, session_id: str = "", *, timeout: float | None = None) -> session_pb2.ListPausesResponse:
        """Pending pauses, oldest first (of one session, or all)."""
        request = session_pb2.ListPausesRequest(session_id=session_id)
        return await self._call(self.session_stub.ListPauses, request, timeout)

    def _wait_timeout(self, timeout: float | None, wait: bool, wait_timeout: float | None) -> float | None:
        # A waiting call must be allowed to outlive the daemon-side wait.
        if timeout is not None or not wait or self.timeout is None:
            return timeout
        if wait_timeout == 0:
            return None  # the daemon waits forever, so may the call
        return max(self.timeout, (30.0 if wait_timeout is None else wait_timeout) + 10)

    # -- InspectorService ----------------------------------------------------------------

    async def inspect(
        self,
        session_id: str = "",
        *,
        pause_value: str | None = None,
        pause_locals: str | None = None,
        variables_ref: str | None = None,
        expression: str | None = None,
        frame_id: str = "",
        last_exception: bool = False,
        tap_seq: int | None = None,
        config: inspector_pb2.InspectorConfig | Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> inspector_pb2.InspectResponse:
        """Opens an inspector on one value: a pause's value or locals (by key), a
        variable handle, an expression (in `frame_id`), the session's last
        exception, or a tapped value (by the tap event's seq)."""
        request = inspector_pb2.InspectRequest(
            session_id=session_id,
            source=_build.inspect_source(
                session_id, pause_value=pause_value, pause_locals=pause_locals, variables_ref=variables_ref,
                expression=expression, frame_id=frame_id, last_exception=last_exception, tap_seq=tap_seq,
            ),
            config=_build.inspector_config(config),
        )  # fmt: skip
        return await self._call(self.inspector_stub.Inspect, request, timeout)

    async def push(self, inspector_id: str, idx: int, *, timeout: float | None = None) -> inspector_pb2.PushResponse:
        """Descends into the child `idx`."""
        request = inspector_pb2.PushRequest(inspector_id=inspector_id, idx=idx)
        return await self._call(self.inspector_stub.Push, request, timeout)

    async def pop(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.PopResponse:
        """Goes up one level."""
        return await self._call(self.inspector_stub.Pop, inspector_pb2.PopRequest(inspector_id=inspector_id), timeout)

    async def next_sibling(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.NextSiblingResponse:
        """Moves to the next sibling."""
        request = inspector_pb2.NextSiblingRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.NextSibling, request, timeout)

    async def previous_sibling(
        self, inspector_id: str, *, timeout: float | None = None
    ) -> inspector_pb2.PreviousSiblingResponse:
        """Moves to the previous sibling."""
        request = inspector_pb2.PreviousSiblingRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.PreviousSibling, request, timeout)

    async def next_page(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.NextPageResponse:
        """Shows the next page of the current level."""
        request = inspector_pb2.NextPageRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.NextPage, request, timeout)

    async def previous_page(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.PreviousPageResponse:
        """Shows the previous page of the current level."""
        request = inspector_pb2.PreviousPageRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.PreviousPage, request, timeout)

    async def refresh(
        self,
        inspector_id: str,
        config: inspector_pb2.InspectorConfig | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> inspector_pb2.RefreshResponse:
        """Re-renders, optionally changing the configuration (e.g. ``{"page_size": 10}``)."""
        request = inspector_pb2.RefreshRequest(inspector_id=inspector_id, config=_build.inspector_config(config))
        return await self._call(self.inspector_stub.Refresh, request, timeout)

    async def toggle_view_mode(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.ToggleViewModeResponse:
        """Cycles NORMAL → TABLE → OBJECT."""
        request = inspector_pb2.ToggleViewModeRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.ToggleViewMode, request, timeout)

    async def toggle_pretty_print(
        self, inspector_id: str, *, timeout: float | None = None
    ) -> inspector_pb2.TogglePrettyPrintResponse:
        """Toggles pretty printing."""
        request = inspector_pb2.TogglePrettyPrintRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.TogglePrettyPrint, request, timeout)

    async def show_analytics(
        self, inspector_id: str, *, cutoff: int = 0, timeout: float | None = None
    ) -> inspector_pb2.ShowAnalyticsResponse:
        """Statistics over the current value (at most `cutoff` elements; 0 = 100000)."""
        request = inspector_pb2.ShowAnalyticsRequest(inspector_id=inspector_id, cutoff=cutoff)
        return await self._call(self.inspector_stub.ShowAnalytics, request, timeout)

    async def pin_value(self, inspector_id: str, name: str, *, timeout: float | None = None) -> inspector_pb2.PinValueResponse:
        """Keeps the current value under `name` for later evaluations."""
        request = inspector_pb2.PinValueRequest(inspector_id=inspector_id, name=name)
        return await self._call(self.inspector_stub.PinValue, request, timeout)

    async def print_value(
        self, inspector_id: str, *, chunk_size: int = 0, timeout: float | None = None
    ) -> AsyncIterator[inspector_pb2.PrintValueResponse]:
        """Streams the full printed value in chunks."""
        request = inspector_pb2.PrintValueRequest(inspector_id=inspector_id, chunk_size=chunk_size)
        stream = self.inspector_stub.PrintValue(
            request, timeout=self.timeout if timeout is None else timeout, metadata=self.metadata
        )
        try:
            async for chunk in stream:
                yield chunk
            return
        except grpc.RpcError as err:
            failure = from_stream_call(err)
        # Raised outside the handler, so it has no __context__ holding the call.
        raise failure

    async def tap_value(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.TapValueResponse:
        """Emits the current value as a `tap` event."""
        request = inspector_pb2.TapValueRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.TapValue, request, timeout)

    async def tap_indexed(
        self, inspector_id: str, idx: int, *, timeout: float | None = None
    ) -> inspector_pb2.TapIndexedResponse:
        """Emits the child `idx` as a `tap` event."""
        request = inspector_pb2.TapIndexedRequest(inspector_id=inspector_id, idx=idx)
        return await self._call(self.inspector_stub.TapIndexed, request, timeout)

    async def clear(self, inspector_id: str, *, timeout: float | None = None) -> inspector_pb2.ClearResponse:
        """Drops the inspector."""
        request = inspector_pb2.ClearRequest(inspector_id=inspector_id)
        return await self._call(self.inspector_stub.Clear, request, timeout)

    # -- HistoryService ----------------------------------------------------------------

    async def session_history(
        self,
        session_id: str,
        *,
        channels: Sequence[ChannelLike] = (),
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[event_pb2.Event]:
        """A session's recorded events, oldest first, read from the store
        (GetSessionHistory): live or ended, kept until retention drops them.

        `channels` are EventChannel values or names as for :meth:`events`;
        empty = all. It asks for `page_size` events at a time (0 = the
        daemon's default) and follows ``next_page_token`` until the last page;
        `timeout` applies to each page. An unknown session (or one with nothing
        recorded) raises :class:`stepd.errors.SessionNotFound`.
        """
        request = history_pb2.GetSessionHistoryRequest(
            session_id=session_id, channels=[_build.channel(c) for c in channels], page_size=page_size
        )
        while True:
            page = await self._call(self.history_stub.GetSessionHistory, request, timeout)
            for event in page.events:
                yield event
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    async def ended_sessions(
        self,
        *,
        label_selector: str = "",
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[session_pb2.Session]:
        """Sessions that ended, on this daemon or any replica sharing its
        store, newest first (ListEndedSessions): each as last recorded,
        with ``ended_at``, ``end_reason`` and ``replica_id``. A session whose
        replica was killed before it could record the end reads
        ``END_REASON_REPLICA_LOST`` with ``ended_at`` unset.

        `label_selector` as a breakpoint's (``team=a,env!=prod``); `since`
        keeps those that ended at or after it, `until` those that started at
        or before it (datetimes, naive = UTC, or Timestamps). It asks for
        `page_size` sessions at a time (0 = the daemon's default) and follows
        ``next_page_token`` until the last page; `timeout` applies to each page.
        """
        request = _build.ended_sessions_request(label_selector, since, until, page_size)
        while True:
            page = await self._call(self.history_stub.ListEndedSessions, request, timeout)
            for session in page.sessions:
                yield session
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    # -- EventService -------------------------------------------------------------------

    def events(
        self,
        *,
        session_ids: Sequence[str] = (),
        channels: Sequence[ChannelLike] = (),
        resume_after_seq: int = 0,
        resume_instance_id: str = "",
        heartbeats: bool = False,
        reconnect: bool = True,
        reconnect_timeout: float | None = 60.0,
        follow_restarts: bool = False,
    ) -> AsyncSubscription:
        """Subscribes to events; see :class:`stepd.aio.AsyncSubscription`.

        `channels` are EventChannel values or names ("lifecycle", "execution",
        "output", "breakpoints", "probe", "inspector", "notifications"); empty =
        all. Heartbeat events are skipped unless `heartbeats` is true. With
        `follow_restarts`, a daemon that shuts down (or cannot be reached)
        does not end the subscription: it waits up to `reconnect_timeout` for
        a daemon on the same address and goes on there (a gap, then its snapshot).
        """
        return AsyncSubscription(
            self.channel,
            session_ids=session_ids,
            channels=channels,
            resume_after_seq=resume_after_seq,
            resume_instance_id=resume_instance_id,
            client_name=self.client_name,
            metadata=self.metadata,
            heartbeats=heartbeats,
            reconnect=reconnect,
            reconnect_timeout=reconnect_timeout,
            follow_restarts=follow_restarts,
        )

    def pauses(self, session_ids: Sequence[str] = ()) -> AsyncPauses:
        """Pending pauses (of `session_ids`, or every session), each yielded once
        however often it is re-sent; see :class:`stepd.aio.AsyncPauses`."""
        return AsyncPauses(self, session_ids)

    async def wait_for_pause(self, session_id: str | None = None, *, timeout: float = 30.0) -> pause_pb2.Pause:
        """The first pending pause (of `session_id`, or any session): one already
        pending in the snapshot, else the next ``stopped`` event's pause.
        Raises TimeoutError when none comes within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        async with self.events(session_ids=[session_id] if session_id else [], channels=["execution"]) as sub:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no pause within {timeout} s")
                try:
                    event = await sub.next(timeout=remaining)
                except StopAsyncIteration:
                    raise TimeoutError("the event stream ended before a pause") from None
                pause = pause_of(event, session_id)
                if pause is not None:
                    return pause


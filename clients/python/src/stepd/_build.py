"""Request building shared by the synchronous and asyncio clients."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
import warnings
from typing import Any, Iterable, Literal, Mapping, Sequence, Union, cast

import grpc
import grpc.aio

from google.protobuf import duration_pb2, field_mask_pb2, struct_pb2, timestamp_pb2
from google.protobuf.json_format import ParseDict

from stepd._baggage import SessionBaggage
from stepd.v1 import breakpoint_pb2, event_pb2, history_pb2, inspector_pb2, pause_pb2, session_pb2

DEFAULT_ADDR = "127.0.0.1:7701"
ADDR_ENV = "STEPD_ADDR"
CLIENT_HEADER = "x-stepd-client"

#: Channel options: reconnect quickly after a dropped connection (the event
#: iterator relies on it) and accept large renderings. gRPC reads
#: ``min_reconnect_backoff_ms`` as the time a connection attempt may take, so it
#: stays at seconds (as the Go client's MinConnectTimeout): a busy machine may
#: take longer than 100 ms to finish the HTTP/2 handshake.
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 5000),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.enable_http_proxy", 0),
]

JsonValue = Union[None, bool, int, float, str, Sequence[Any], Mapping[str, Any]]
CommandLike = Union[pause_pb2.DebugCommand, str, int]
#: A step's kind by name; mypy refuses any other string (``step("sideways")``).
StepKindName = Literal["over", "in", "out"]
StepKindLike = Union[StepKindName, int]
ChannelLike = Union[event_pb2.EventChannel.ValueType, str]
DurationLike = Union[_dt.timedelta, float, int, duration_pb2.Duration]
TimeLike = Union[_dt.datetime, timestamp_pb2.Timestamp]


def resolve_addr(addr: str | None) -> str:
    """The gRPC target for an address: explicit, else $STEPD_ADDR, else 127.0.0.1:7701.

    Accepts "host:port", "unix:/path/stepd.sock", "unix:///path" and a bare
    absolute socket path; an "http://" prefix is dropped.
    """
    target = addr or os.environ.get(ADDR_ENV) or DEFAULT_ADDR
    for prefix in ("http://", "grpc://"):
        if target.startswith(prefix):
            target = target[len(prefix):]
    if target.startswith("/"):
        target = "unix:" + target
    return target


TOKEN_ENV = "STEPD_TOKEN"
TLS_CA_ENV = "STEPD_TLS_CA"
TLS_CERT_ENV = "STEPD_TLS_CERT"
TLS_KEY_ENV = "STEPD_TLS_KEY"


def data_dir() -> Path:
    """The default daemon's data directory: $STEPD_DATA_DIR, else
    $XDG_DATA_HOME/stepd, else ~/.local/share/stepd (as stepd picks it)."""
    if os.environ.get("STEPD_DATA_DIR"):
        return Path(os.environ["STEPD_DATA_DIR"])
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]) / "stepd"
    return Path.home() / ".local" / "share" / "stepd"


@dataclass(frozen=True)
class Transport:
    """How to reach the daemon: the gRPC target, TLS credentials (None:
    plaintext) and the metadata that authenticates each call."""

    target: str
    credentials: grpc.ChannelCredentials | None
    metadata: tuple[tuple[str, str], ...]

    def channel(self, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A synchronous channel."""
        opts = channel_options(self.target, options)
        if self.credentials is None:
            return grpc.insecure_channel(self.target, options=opts)
        return grpc.secure_channel(self.target, self.credentials, options=opts)

    def aio_channel(self, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        """An asyncio channel."""
        opts = channel_options(self.target, options)
        if self.credentials is None:
            return grpc.aio.insecure_channel(self.target, options=opts)
        return grpc.aio.secure_channel(self.target, self.credentials, options=opts)


def _read(path: str | os.PathLike[str] | None, what: str) -> bytes | None:
    if path is None or path == "":
        return None
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"{what} {path}: {err.strerror}") from err


def transport(
    addr: str | None,
    *,
    tls_ca: str | os.PathLike[str] | None = None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    token: str | None = None,
) -> Transport:
    """Resolves an address and the security options (each defaulting to its
    ``STEPD_*`` variable) into a :class:`Transport`.

    TLS is used for an ``https://`` address, and for a TCP address whenever a
    CA or client certificate is given (without a CA: the system's roots).
    ``tls_cert``/``tls_key`` present a client certificate (mutual TLS). The
    token is sent as ``authorization: Bearer TOKEN``; without one, and only
    for the default local daemon (no address given at all), the daemon's
    ``<data dir>/token`` is sent when it exists.
    """
    default = not addr and not os.environ.get(ADDR_ENV)
    raw = addr or os.environ.get(ADDR_ENV) or DEFAULT_ADDR
    https = raw.startswith("https://")
    target = resolve_addr(raw[len("https://"):] if https else raw)
    tls_ca = tls_ca if tls_ca is not None else os.environ.get(TLS_CA_ENV) or None
    tls_cert = tls_cert if tls_cert is not None else os.environ.get(TLS_CERT_ENV) or None
    tls_key = tls_key if tls_key is not None else os.environ.get(TLS_KEY_ENV) or None
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("tls_cert and tls_key go together")
    credentials = None
    plain = raw.startswith("http://") or target.startswith("unix:")
    if https or (not plain and (tls_ca is not None or tls_cert is not None)):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca, "tls_ca"),
            private_key=_read(tls_key, "tls_key"),
            certificate_chain=_read(tls_cert, "tls_cert"),
        )
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is None and default:
        try:
            token = (data_dir() / "token").read_text().strip() or None
        except OSError:
            token = None
    metadata: tuple[tuple[str, str], ...] = ()
    if token:
        metadata = (("authorization", f"Bearer {token.strip()}"),)
    return Transport(target, credentials, metadata)


def channel_options(target: str, extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """Channel options for a target. For unix sockets gRPC's C core sends the
    socket path as `:authority`, which the daemon's HTTP/2 stack refuses as
    malformed; "localhost" is what other gRPC clients send there."""
    options = list(CHANNEL_OPTIONS)
    if target.startswith("unix:") and not any(k == "grpc.default_authority" for k, _ in extra):
        options.append(("grpc.default_authority", "localhost"))
    return options + list(extra)


def to_value(value: JsonValue) -> struct_pb2.Value:
    """A JSON-like Python value as a google.protobuf.Value."""
    if isinstance(value, struct_pb2.Value):
        return value
    out = struct_pb2.Value()
    ParseDict(cast(Any, value), out)
    return out


def to_struct(value: Mapping[str, Any] | struct_pb2.Struct | None) -> struct_pb2.Struct | None:
    """A JSON-like mapping as a google.protobuf.Struct."""
    if value is None or isinstance(value, struct_pb2.Struct):
        return value
    out = struct_pb2.Struct()
    out.update(dict(value))
    return out


def to_duration(value: DurationLike) -> duration_pb2.Duration:
    """Seconds or a timedelta as a Duration."""
    if isinstance(value, duration_pb2.Duration):
        return value
    out = duration_pb2.Duration()
    if isinstance(value, _dt.timedelta):
        out.FromTimedelta(value)
    else:
        out.FromNanoseconds(int(value * 1_000_000_000))
    return out


def to_timestamp(value: TimeLike) -> timestamp_pb2.Timestamp:
    """A datetime (naive = UTC) as a Timestamp."""
    if isinstance(value, timestamp_pb2.Timestamp):
        return value
    out = timestamp_pb2.Timestamp()
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    out.FromDatetime(value)
    return out


def ended_sessions_request(
    label_selector: str, since: TimeLike | None, until: TimeLike | None, page_size: int
) -> history_pb2.ListEndedSessionsRequest:
    """The first ListEndedSessions request of :meth:`stepd.Client.ended_sessions`."""
    request = history_pb2.ListEndedSessionsRequest(label_selector=label_selector, page_size=page_size)
    if since is not None:
        request.since.CopyFrom(to_timestamp(since))
    if until is not None:
        request.until.CopyFrom(to_timestamp(until))
    return request


def _enum(enum: Any, prefix: str, value: int | str | None) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    name = value.upper().replace("-", "_")
    if not name.startswith(prefix):
        name = prefix + name
    return int(enum.Value(name))


def channel(value: ChannelLike) -> event_pb2.EventChannel.ValueType:
    """An EventChannel from its value or name ("breakpoints", "EVENT_CHANNEL_OUTPUT")."""
    return cast(event_pb2.EventChannel.ValueType, _enum(event_pb2.EventChannel, "EVENT_CHANNEL_", value))


def breakpoint_action(value: int | str | None) -> breakpoint_pb2.BreakpointAction.ValueType:
    """A BreakpointAction from its value or name ("stop", "log", "snapshot")."""
    return cast(
        breakpoint_pb2.BreakpointAction.ValueType,
        _enum(breakpoint_pb2.BreakpointAction, "BREAKPOINT_ACTION_", value),
    )


#: A probe breakpoint's request scope: ``{"debug-session": "ana"}``, a
#: ``"debug-session=ana"`` entry (comma-separated for several), or a
#: :class:`stepd.SessionBaggage`.
BaggageLike = Union[Mapping[str, str], str, SessionBaggage]


def baggage_entries(baggage: BaggageLike | None) -> list[breakpoint_pb2.BaggageEntry]:
    """The BaggageEntry messages of a request scope (the daemon checks their syntax)."""
    if baggage is None:
        return []
    if isinstance(baggage, SessionBaggage):
        return [breakpoint_pb2.BaggageEntry(key=baggage.key, value=baggage.value)]
    if isinstance(baggage, str):
        pairs = [part.partition("=") for part in baggage.split(",") if part.strip()]
        return [breakpoint_pb2.BaggageEntry(key=k.strip(), value=v.strip()) for k, _, v in pairs]
    return [breakpoint_pb2.BaggageEntry(key=k, value=v) for k, v in baggage.items()]


def breakpoint_spec(
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
) -> tuple[breakpoint_pb2.BreakpointSpec, list[str]]:
    """A BreakpointSpec from keywords, and the spec paths the keywords set."""
    out = breakpoint_pb2.BreakpointSpec()
    if spec is not None:
        out.CopyFrom(spec)
    paths: list[str] = []
    if path is not None or line is not None:
        out.source.CopyFrom(breakpoint_pb2.SourceLocation(path=path or "", line=line or 0, column=column))
        paths.append("source")
    if function is not None:
        out.function.CopyFrom(breakpoint_pb2.FunctionLocation(name=function))
        paths.append("function")
    if exception_filters is not None:
        out.exception.CopyFrom(breakpoint_pb2.ExceptionFilters(filter_ids=list(exception_filters)))
        paths.append("exception")
    if probe_kind is not None or probe_name is not None or baggage is not None:
        out.probe.CopyFrom(
            breakpoint_pb2.ProbeMatch(
                point_kind=probe_kind or "", name_glob=probe_name or "", baggage=baggage_entries(baggage)
            )
        )
        paths.append("probe")
    if enabled is not None:
        out.enabled = enabled
        paths.append("enabled")
    if condition is not None:
        out.condition = condition
        paths.append("condition")
    if hit_condition is not None:
        out.hit_condition = hit_condition
        paths.append("hit_condition")
    if label_selector is not None:
        out.label_selector = label_selector
        paths.append("label_selector")
    if expires_at is not None:
        out.expires_at.CopyFrom(to_timestamp(expires_at))
        paths.append("expires_at")
    if max_hits is not None:
        out.max_hits = max_hits
        paths.append("max_hits")
    if action is not None:
        out.action = breakpoint_action(action)
        paths.append("action")
    if log_message is not None:
        out.log_message = log_message
        paths.append("log_message")
    if hold_limit is not None:
        out.hold_limit.CopyFrom(to_duration(hold_limit))
        paths.append("hold_limit")
    return out, paths


def field_mask(paths: Iterable[str] | field_mask_pb2.FieldMask | None) -> field_mask_pb2.FieldMask | None:
    """A FieldMask from paths."""
    if paths is None or isinstance(paths, field_mask_pb2.FieldMask):
        return paths
    return field_mask_pb2.FieldMask(paths=list(paths))


_COMMAND_ALIASES = {
    "in": "step_in",
    "out": "step_out",
    "continue": "resume",
    "stack": "stacktrace",
}

_COMMAND_FIELDS = {
    pause_pb2.COMMAND_KIND_NEXT: "next",
    pause_pb2.COMMAND_KIND_IN: "step_in",
    pause_pb2.COMMAND_KIND_OUT: "step_out",
    pause_pb2.COMMAND_KIND_HERE: "here",
    pause_pb2.COMMAND_KIND_CONTINUE: "resume",
    pause_pb2.COMMAND_KIND_CONTINUE_SCOPE: "continue_scope",
    pause_pb2.COMMAND_KIND_CONTINUE_ALL: "continue_all",
    pause_pb2.COMMAND_KIND_TRACE: "trace",
    pause_pb2.COMMAND_KIND_EVAL: "eval",
    pause_pb2.COMMAND_KIND_INJECT: "inject",
    pause_pb2.COMMAND_KIND_SKIP: "skip",
    pause_pb2.COMMAND_KIND_INSPECT: "inspect",
    pause_pb2.COMMAND_KIND_INSPECT_PROMPT: "inspect_prompt",
    pause_pb2.COMMAND_KIND_LOCALS: "locals",
    pause_pb2.COMMAND_KIND_STACKTRACE: "stacktrace",
    pause_pb2.COMMAND_KIND_QUIT: "quit",
    pause_pb2.COMMAND_KIND_EXPRESSION: "expression",
    pause_pb2.COMMAND_KIND_JUMP: "jump",
}


def command(value: CommandLike, /, **args: Any) -> pause_pb2.DebugCommand:
    """A DebugCommand from a name, a CommandKind or a DebugCommand.

    Names are the DebugCommand fields ("next", "step_in", "step_out", "here",
    "resume", "continue_scope", "continue_all", "trace", "eval", "inject", "skip",
    "inspect", "inspect_prompt", "locals", "stacktrace", "quit", "expression", "jump"),
    the CommandKind names ("NEXT", "IN", "CONTINUE", …) and the aliases "in",
    "out", "continue". Keyword arguments are the command's fields, e.g.
    ``command("eval", code="x + 1")``, ``command("inject", value={"a": 1})``,
    ``command("here", line=12)``, ``command("out", force=True)``.
    """
    if isinstance(value, pause_pb2.DebugCommand):
        if args:
            raise TypeError("arguments are given with a command name, not with a DebugCommand")
        return value
    if isinstance(value, int):
        if value not in _COMMAND_FIELDS:
            raise ValueError(f"not a command kind: {value}")
        field = _COMMAND_FIELDS[cast(pause_pb2.CommandKind.ValueType, value)]
    else:
        name = value.strip().lower().removeprefix("command_kind_")
        field = _COMMAND_ALIASES.get(name, name)
        if field not in _COMMAND_FIELDS.values():
            raise ValueError(f"unknown command {value!r}")
    out = pause_pb2.DebugCommand()
    sub: Any = getattr(out, field)
    sub.SetInParent()
    for key, arg in args.items():
        if field == "inject" and key == "value":
            sub.value.CopyFrom(to_value(arg))
        elif key == "coor":
            sub.coor.extend(arg)
        else:
            setattr(sub, key, arg)
    return out


def debug_input(key: str, cmd: CommandLike, /, client_name: str = "", **args: Any) -> pause_pb2.DebugInput:
    """A DebugInput answering the pause `key`."""
    return pause_pb2.DebugInput(key=key, command=command(cmd, **args), client_name=client_name)


def step_kind(value: StepKindLike | str) -> session_pb2.StepKind.ValueType:
    """A StepKind from its value or name ("over", "in", "out")."""
    return cast(session_pb2.StepKind.ValueType, _enum(session_pb2.StepKind, "STEP_KIND_", value))


def wait_fields(wait: bool, timeout: float | None) -> dict[str, Any]:
    """The `wait` oneof of Continue/Step/Pause: no_wait, or until_stable with
    a timeout in seconds (None: the daemon's default; 0: no limit)."""
    if not wait:
        return {"no_wait": session_pb2.NoWait()}
    until = session_pb2.Wait()
    if timeout is not None:
        if timeout < 0:
            raise ValueError(f"wait_timeout must be at least 0 s, not {timeout}")
        until.timeout_ms = max(1, round(timeout * 1000)) if timeout > 0 else 0
    return {"until_stable": until}


def wait_seconds(wait_timeout: float | None, wait_timeout_ms: int | None, *, stacklevel: int = 3) -> float | None:
    """The wait's timeout in seconds, from `wait_timeout` or the deprecated
    `wait_timeout_ms` (which warns; both at once is a TypeError)."""
    if wait_timeout_ms is None:
        return wait_timeout
    if wait_timeout is not None:
        raise TypeError("give wait_timeout (seconds) or wait_timeout_ms, not both")
    warnings.warn(
        "wait_timeout_ms is deprecated: pass wait_timeout in seconds, as every other timeout",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return wait_timeout_ms / 1000


def inspector_config(
    config: inspector_pb2.InspectorConfig | Mapping[str, Any] | None,
) -> inspector_pb2.InspectorConfig | None:
    """An InspectorConfig from a message or a mapping of its fields."""
    if config is None or isinstance(config, inspector_pb2.InspectorConfig):
        return config
    out = inspector_pb2.InspectorConfig()
    for key, value in config.items():
        if key == "view_mode":
            out.view_mode = cast(
                inspector_pb2.ViewMode.ValueType, _enum(inspector_pb2.ViewMode, "VIEW_MODE_", value)
            )
        else:
            setattr(out, key, value)
    return out


def disconnect_mode(value: int | str | None) -> session_pb2.DisconnectMode.ValueType:
    """A DisconnectMode from its value or name ("terminate", "detach")."""
    return cast(session_pb2.DisconnectMode.ValueType, _enum(session_pb2.DisconnectMode, "DISCONNECT_MODE_", value))


def variable_filter(value: int | str | None) -> session_pb2.VariableFilter.ValueType:
    """A VariableFilter from its value or name ("indexed", "named")."""
    return cast(session_pb2.VariableFilter.ValueType, _enum(session_pb2.VariableFilter, "VARIABLE_FILTER_", value))


def evaluate_context(value: int | str | None) -> session_pb2.EvaluateContext.ValueType:
    """An EvaluateContext from its value or name ("repl", "watch", "hover", "clipboard")."""
    return cast(
        session_pb2.EvaluateContext.ValueType, _enum(session_pb2.EvaluateContext, "EVALUATE_CONTEXT_", value)
    )


def inspect_source(
    session_id: str,
    *,
    pause_value: str | None = None,
    pause_locals: str | None = None,
    variables_ref: str | None = None,
    expression: str | None = None,
    frame_id: str = "",
    last_exception: bool = False,
    tap_seq: int | None = None,
) -> inspector_pb2.InspectSource:
    """The InspectSource oneof from exactly one of its keywords."""
    given = [
        x is not None for x in (pause_value, pause_locals, variables_ref, expression, tap_seq)
    ] + [last_exception]
    if sum(given) != 1:
        raise ValueError(
            "give exactly one of pause_value, pause_locals, variables_ref, expression, last_exception, tap_seq"
        )
    if pause_value is not None:
        return inspector_pb2.InspectSource(pause_value=pause_value)
    if pause_locals is not None:
        return inspector_pb2.InspectSource(pause_locals=pause_locals)
    if variables_ref is not None:
        return inspector_pb2.InspectSource(variables_ref=variables_ref)
    if expression is not None:
        return inspector_pb2.InspectSource(
            expression=inspector_pb2.FrameExpression(session_id=session_id, frame_id=frame_id, code=expression)
        )
    if tap_seq is not None:
        return inspector_pb2.InspectSource(tap_seq=tap_seq)
    return inspector_pb2.InspectSource(last_exception_session_id=session_id)

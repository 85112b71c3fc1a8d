"""Typed errors of the stepd API.

Every error status stepd returns carries a ``google.rpc.ErrorInfo`` detail
whose ``reason`` is an :class:`ErrorReason` name without the ``ERROR_REASON_``
prefix (e.g. ``"PAUSE_NOT_FOUND"``). The client turns each failed call into the
:class:`StepdError` subclass of that reason, so callers can write::

    try:
        client.send_debug_input(key, "continue")
    except stepd.errors.PauseNotFound:
        ...

A status without an ErrorInfo (e.g. the daemon is unreachable) becomes a plain
:class:`StepdError` with ``reason == ""``; :class:`Unavailable` is raised when the
daemon cannot be reached at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence, cast

import grpc
from google.protobuf import any_pb2

from stepd.v1 import errors_pb2

__all__ = [
    "ERROR_DOMAIN",
    "FieldViolation",
    "StepdError",
    "Unavailable",
    "SessionNotFound",
    "PauseNotFound",
    "AlreadyAnswered",
    "NotStopped",
    "StaleHandle",
    "AdapterNotFound",
    "AdapterDied",
    "UnsupportedByAdapter",
    "ProtocolError",
    "InvalidCommand",
    "LimitExceeded",
    "Unauthenticated",
    "PermissionDenied",
    "InvalidArgument",
    "BreakpointNotFound",
    "InspectorNotFound",
    "NotImplemented_",
    "ShuttingDown",
    "StoreUnavailable",
    "Internal",
    "SessionEnded",
    "InvalidValue",
    "LaunchFailed",
    "AdapterError",
    "ReplicaUnavailable",
    "TokenExpired",
    "ProbeNotReading",
    "REASONS",
    "error_class",
    "from_rpc_error",
    "from_stream_call",
    "from_stream_error",
]

#: The ErrorInfo domain of stepd's errors.
ERROR_DOMAIN = "stepd.dev"

_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


@dataclass(frozen=True)
class FieldViolation:
    """One malformed request field, from a ``google.rpc.BadRequest`` detail."""

    field: str
    description: str
    reason: str = ""


class StepdError(Exception):
    """A failed stepd call.

    Attributes:
        code: the gRPC status code.
        message: the status message.
        reason: the ErrorInfo reason ("" when the status had none).
        domain: the ErrorInfo domain ("stepd.dev").
        metadata: the ErrorInfo metadata (ids, paths, limits).
        field_violations: the BadRequest field violations, if any.
        details: every status detail, still packed.
    """

    #: The reason this class stands for ("" for the base class).
    REASON: ClassVar[str] = ""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str | None = None,
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[FieldViolation] = (),
        details: Sequence[any_pb2.Any] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = self.REASON if reason is None else reason
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field_violations: list[FieldViolation] = list(field_violations)
        self.details: list[any_pb2.Any] = list(details)

    def __str__(self) -> str:
        return f"{self.reason or self.code.name}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code.name}, reason={self.reason!r}, "
            f"message={self.message!r}, metadata={self.metadata!r})"
        )


class Unavailable(StepdError):
    """The daemon could not be reached (gRPC UNAVAILABLE without a stepd reason)."""


# One class per ErrorReason. Names follow the reason; NOT_IMPLEMENTED becomes
# NotImplemented_ so the builtin constant is not shadowed.


class SessionNotFound(StepdError):
    """No session with that id (NOT_FOUND)."""

    REASON = "SESSION_NOT_FOUND"


class PauseNotFound(StepdError):
    """No pending pause with that key (NOT_FOUND)."""

    REASON = "PAUSE_NOT_FOUND"


class AlreadyAnswered(StepdError):
    """The pause was already answered by another debug input (FAILED_PRECONDITION)."""

    REASON = "ALREADY_ANSWERED"


class NotStopped(StepdError):
    """The request needs a stopped thread or session (FAILED_PRECONDITION)."""

    REASON = "NOT_STOPPED"


class StaleHandle(StepdError):
    """A frame, scope or variable handle from an earlier stop (FAILED_PRECONDITION)."""

    REASON = "STALE_HANDLE"


class AdapterNotFound(StepdError):
    """The debug adapter could not be found; metadata lists the searched paths."""

    REASON = "ADAPTER_NOT_FOUND"


class AdapterDied(StepdError):
    """The debug adapter process died (UNAVAILABLE)."""

    REASON = "ADAPTER_DIED"


class UnsupportedByAdapter(StepdError):
    """The adapter did not announce the capability the request needs (UNIMPLEMENTED)."""

    REASON = "UNSUPPORTED_BY_ADAPTER"


class ProtocolError(StepdError):
    """The adapter or probe broke the protocol (INTERNAL)."""

    REASON = "PROTOCOL_ERROR"


class InvalidCommand(StepdError):
    """The command is not in the pause's input_type (INVALID_ARGUMENT)."""

    REASON = "INVALID_COMMAND"


class LimitExceeded(StepdError):
    """A configured limit was hit (RESOURCE_EXHAUSTED)."""

    REASON = "LIMIT_EXCEEDED"


class Unauthenticated(StepdError):
    """The caller presented no valid credentials (UNAUTHENTICATED)."""

    REASON = "UNAUTHENTICATED"


class PermissionDenied(StepdError):
    """The caller may not do this (PERMISSION_DENIED)."""

    REASON = "PERMISSION_DENIED"


class InvalidArgument(StepdError):
    """A request field is malformed; ``field_violations`` names it (INVALID_ARGUMENT)."""

    REASON = "INVALID_ARGUMENT"


class BreakpointNotFound(StepdError):
    """No breakpoint with that id (NOT_FOUND)."""

    REASON = "BREAKPOINT_NOT_FOUND"


class InspectorNotFound(StepdError):
    """No inspector with that id, or it expired (NOT_FOUND)."""

    REASON = "INSPECTOR_NOT_FOUND"


class NotImplemented_(StepdError):  # noqa: N801 - trailing _ avoids the builtin
    """The RPC is part of the API but this daemon does not implement it yet (UNIMPLEMENTED)."""

    REASON = "NOT_IMPLEMENTED"


class ShuttingDown(StepdError):
    """The daemon is shutting down (UNAVAILABLE)."""

    REASON = "SHUTTING_DOWN"


class StoreUnavailable(StepdError):
    """The embedded store failed (UNAVAILABLE)."""

    REASON = "STORE_UNAVAILABLE"


class Internal(StepdError):
    """A bug in stepd; the message says what (INTERNAL)."""

    REASON = "INTERNAL"


class SessionEnded(StepdError):
    """The session has ended; only reads of its history work (FAILED_PRECONDITION)."""

    REASON = "SESSION_ENDED"


class InvalidValue(StepdError):
    """An injected value does not fit the point's schema or type hint (INVALID_ARGUMENT)."""

    REASON = "INVALID_VALUE"


class LaunchFailed(StepdError):
    """The adapter refused to launch or attach; the message has its words (FAILED_PRECONDITION)."""

    REASON = "LAUNCH_FAILED"


class AdapterError(StepdError):
    """The adapter refused a request, e.g. an expression that does not evaluate (FAILED_PRECONDITION)."""

    REASON = "ADAPTER_ERROR"


class ReplicaUnavailable(StepdError):
    """The session runs on another replica of the cluster, which did not answer the forwarded call (UNAVAILABLE)."""

    REASON = "REPLICA_UNAVAILABLE"


class TokenExpired(StepdError):
    """The bearer token is known but past its expiry; a new one is needed (UNAUTHENTICATED)."""

    REASON = "TOKEN_EXPIRED"


class ProbeNotReading(StepdError):
    """The probe has not read what the daemon sent it, so the answer could not reach it; the pause stays pending (UNAVAILABLE)."""

    REASON = "PROBE_NOT_READING"


#: Reason string -> exception class, one entry per ErrorReason value.
REASONS: dict[str, type[StepdError]] = {
    cls.REASON: cls
    for cls in (
        SessionNotFound,
        PauseNotFound,
        AlreadyAnswered,
        NotStopped,
        StaleHandle,
        AdapterNotFound,
        AdapterDied,
        UnsupportedByAdapter,
        ProtocolError,
        InvalidCommand,
        LimitExceeded,
        Unauthenticated,
        PermissionDenied,
        InvalidArgument,
        BreakpointNotFound,
        InspectorNotFound,
        NotImplemented_,
        ShuttingDown,
        StoreUnavailable,
        Internal,
        SessionEnded,
        InvalidValue,
        LaunchFailed,
        AdapterError,
        ReplicaUnavailable,
        TokenExpired,
        ProbeNotReading,
    )
}


def error_class(reason: str | int) -> type[StepdError]:
    """The exception class of a reason: its string ("PAUSE_NOT_FOUND") or ErrorReason value."""
    if isinstance(reason, int):
        name = errors_pb2.ErrorReason.Name(cast(Any, reason)) if reason in errors_pb2.ErrorReason.values() else ""
        reason = name.removeprefix("ERROR_REASON_")
    return REASONS.get(reason, StepdError)


def _decode_details(raw: bytes) -> tuple[str, str, dict[str, str], list[FieldViolation], list[any_pb2.Any]]:
    # googleapis-common-protos ships no py.typed; keep its objects local and untyped.
    from google.rpc import error_details_pb2, status_pb2

    status: Any = status_pb2.Status.FromString(raw)
    reason, domain = "", ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    details: list[any_pb2.Any] = list(status.details)
    for detail in details:
        if detail.type_url == _ERROR_INFO:
            info: Any = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain = str(info.reason), str(info.domain)
            metadata.update({str(k): str(v) for k, v in info.metadata.items()})
        elif detail.type_url == _BAD_REQUEST:
            bad: Any = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(
                FieldViolation(str(v.field), str(v.description), str(getattr(v, "reason", "")))
                for v in bad.field_violations
            )
    return reason, domain, metadata, violations, details


def from_rpc_error(err: grpc.RpcError) -> StepdError:
    """Translates a failed gRPC call (sync or asyncio) into its typed error."""
    if isinstance(err, StepdError):
        return err
    call = cast(Any, err)
    try:
        code: grpc.StatusCode = call.code()
        message = str(call.details() or "")
        trailers = call.trailing_metadata() or ()
    except AttributeError:
        return StepdError(str(err))
    raw = b""
    for key, value in trailers:
        if key == _DETAILS_KEY and isinstance(value, bytes):
            raw = value
    reason, domain = "", ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    details: list[any_pb2.Any] = []
    if raw:
        try:
            reason, domain, metadata, violations, details = _decode_details(raw)
        except Exception:  # a malformed trailer must not hide the status itself
            pass
    cls = REASONS.get(reason)
    if cls is None:
        cls = Unavailable if code == grpc.StatusCode.UNAVAILABLE else StepdError
    exc = cls(
        message,
        code=code,
        reason=reason,
        domain=domain,
        metadata=metadata,
        field_violations=violations,
        details=details,
    )
    exc.__cause__ = err
    return exc


def from_stream_call(err: grpc.RpcError) -> StepdError:
    """Translates the error of a streaming call, keeping nothing of the call.

    grpc raises a stream's call object itself as its error, and the traceback
    it gains holds frames that hold the call: a cycle that only the
    interpreter's last collection frees. By then grpc's daemon threads may have
    died holding the call's lock, and the call's ``__del__`` would wait for it
    forever: a script that hangs as it exits. So the typed error drops the
    call (it carries the code, message and details already) and the call
    drops its traceback, to be freed as soon as the stream is let go.
    """
    exc = from_rpc_error(err)
    exc.__cause__ = None
    err.__traceback__ = None
    return exc


def from_stream_error(error: Any) -> StepdError:
    """Translates a ``StreamError`` event payload (a failed DebugInput on Subscribe)."""
    reason_value = int(error.reason)
    cls = error_class(reason_value)
    try:
        code = next(c for c in grpc.StatusCode if c.value[0] == int(error.code))
    except StopIteration:
        code = grpc.StatusCode.UNKNOWN
    metadata = {str(k): str(v) for k, v in error.metadata.items()}
    if error.key:
        metadata.setdefault("key", str(error.key))
    return cls(str(error.message), code=code, reason=cls.REASON or None, metadata=metadata)

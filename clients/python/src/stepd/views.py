"""Generated messages seen with their enum fields by name (stepd.enums)."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from stepd.enums import BY_PROTO_NAME, CommandKind, EndReason, PauseReason, SessionState
from stepd.v1 import pause_pb2, session_pb2, source_pb2

__all__ = ["Pause", "State", "View", "named"]


def named(message: Message, field: str) -> Any:
    """A field of a generated message, with enum values as stepd.enums members
    (a number this client does not know stays an int)."""
    value = getattr(message, field)
    descriptor = message.DESCRIPTOR.fields_by_name.get(field)
    if descriptor is None or descriptor.enum_type is None:
        return value
    enum = BY_PROTO_NAME.get(descriptor.enum_type.full_name)
    if enum is None:
        return value

    def member(number: int) -> Any:
        try:
            return enum(number)
        except ValueError:
            return number

    return [member(v) for v in value] if descriptor.is_repeated else member(value)


class View:
    """A generated message whose enum fields read by name; every other field
    reads as on the message, which is `.message`."""

    __slots__ = ("message",)

    def __init__(self, message: Message) -> None:
        self.message = message

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return named(self.message, name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, View):
            return bool(self.message == other.message)
        return bool(self.message == other)

    # Messages are mutable, so (like them) views are not hashable.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message})"


class Pause(View):
    """A pending pause (`stepd.v1.pause_pb2.Pause`) with `reason` and
    `input_type` by name: ``pause.reason == "BREAKPOINT"``."""

    message: pause_pb2.Pause

    def __init__(self, message: pause_pb2.Pause) -> None:
        super().__init__(message)

    @property
    def key(self) -> str:
        return self.message.key

    @property
    def session_id(self) -> str:
        return self.message.session_id

    @property
    def thread_id(self) -> int:
        return self.message.thread_id

    @property
    def revision(self) -> int:
        return self.message.revision

    @property
    def reason(self) -> PauseReason:
        return named(self.message, "reason")  # type: ignore[no-any-return]

    @property
    def input_type(self) -> list[CommandKind]:
        return named(self.message, "input_type")  # type: ignore[no-any-return]

    @property
    def location(self) -> source_pb2.Location:
        return self.message.location

    @property
    def debug_value(self) -> pause_pb2.DisplayValue:
        return self.message.debug_value

    @property
    def locals(self) -> dict[str, str]:
        """The paused frame's locals as printed, by name."""
        return {local.name: local.value.text for local in self.message.locals}

    def __repr__(self) -> str:
        where = ""
        if self.message.HasField("location"):
            loc = self.message.location
            where = f", at='{loc.path.rsplit('/', 1)[-1]}:{loc.line} {loc.function}'"
        elif self.message.HasField("point"):
            where = f", point='{self.message.point.kind}:{self.message.point.name}'"
        return f"Pause(key={self.key!r}, reason={self.reason!r}, revision={self.revision}{where})"


class State(View):
    """Where a session settled after Continue, Step or Pause
    (`stepd.v1.session_pb2.StableState`), with its enums by name."""

    message: session_pb2.StableState

    def __init__(self, message: session_pb2.StableState) -> None:
        super().__init__(message)

    @property
    def state(self) -> SessionState:
        return named(self.message, "state")  # type: ignore[no-any-return]

    @property
    def stop_reason(self) -> PauseReason:
        return named(self.message, "stop_reason")  # type: ignore[no-any-return]

    @property
    def end_reason(self) -> EndReason:
        return named(self.message, "end_reason")  # type: ignore[no-any-return]

    @property
    def pause(self) -> Pause | None:
        """The pause it stopped in, or None when it runs or ended."""
        return Pause(self.message.pause) if self.message.HasField("pause") else None

    @property
    def timed_out(self) -> bool:
        return self.message.timed_out

    def __repr__(self) -> str:
        return f"State(state={self.state!r}, stop_reason={self.stop_reason!r}, pause={self.pause!r})"

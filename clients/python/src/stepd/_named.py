"""The base of the API's enums by name (stepd.enums)."""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, TypeVar

_E = TypeVar("_E", bound="NamedEnum")


class NamedEnum(enum.IntEnum):
    """An API enum member: its wire number, equal to its names too.

    ``PauseReason.BREAKPOINT == "BREAKPOINT" == "pause_reason_breakpoint" == 1``;
    repr ``PauseReason.BREAKPOINT``, str ``BREAKPOINT``. Hashes as its number,
    so members and ints are interchangeable as dict keys.

    Comparing with a string that names no member of the enum raises
    ValueError (``pause.reason == "BREAKPIONT"`` is a typo, never just
    False). Type checkers see no string comparison at all: typed code
    compares members (``pause.reason == PauseReason.BREAKPOINT``), which
    mypy checks; names are for the REPL and untyped scripts.
    """

    @classmethod
    def prefix(cls) -> str:
        """The protobuf prefix of the values, e.g. "PAUSE_REASON_"."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).upper() + "_"

    @classmethod
    def of(cls: type[_E], value: int | str) -> _E:
        """The member for a number or a name (short or full, any case); ValueError when none."""
        if isinstance(value, str):
            name = value.strip().upper().replace("-", "_")
            member = cls.__members__.get(name.removeprefix(cls.prefix()))
            if member is None:
                raise ValueError(f"{value!r} is not a {cls.__name__}: one of {', '.join(cls.__members__)}")
            return member
        return cls(value)

    if not TYPE_CHECKING:
        # Hidden from type checkers so that mypy's strict equality flags
        # `member == "NAME"` (a typo there type-checks otherwise).

        def __eq__(self, other: object) -> bool:
            if isinstance(other, str):
                return self is type(self).of(other)
            return int.__eq__(self, other) is True

        def __ne__(self, other: object) -> bool:
            return not self.__eq__(other)

        def __hash__(self) -> int:
            return int.__hash__(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

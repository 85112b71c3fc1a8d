"""Probe breakpoint name globs: ``*``, ``?``, ``[...]``, ``[!...]`` (or
``[^...]``) and ``\\`` escapes, matched against the whole name, as the daemon
matches them. A glob is at most ``MAX_GLOB_BYTES`` long and matches in at most
(glob length × name length) steps, never by backtracking.
"""

from __future__ import annotations

import re
from typing import Callable

__all__ = ["MAX_GLOB_BYTES", "ConditionError", "check_len", "compile_glob"]

#: The longest glob accepted, in bytes of UTF-8 (as the daemon).
MAX_GLOB_BYTES = 1024


class ConditionError(ValueError):
    """A malformed condition or glob; the message says what is wrong. Here,
    with the globs, since a condition's ``matches`` takes a glob."""


def check_len(text: str, limit: int, what: str) -> None:
    # Characters are at most 4 bytes, so the encoding is needed only near the limit.
    if len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
        raise ConditionError(f"the {what} is longer than the limit of {limit} bytes")


_STAR = None  # a star among a glob's tokens
#: Any other token matches exactly one character: (True, the character) for a
#: literal, (False, a regex atom) for ``?`` and ``[...]``.
_Atom = tuple[bool, str]


def _glob_tokens(pattern: str) -> list[_Atom | None]:
    """The glob as a list of ``_STAR`` and atoms."""
    out: list[_Atom | None] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(_STAR)
        elif c == "?":
            out.append((False, "."))
        elif c == "\\":
            if i >= n:
                raise ConditionError("trailing '\\' escapes nothing")
            out.append((True, pattern[i]))
            i += 1
        elif c == "[":
            negated = i < n and pattern[i] in "!^"
            if negated:
                i += 1
            ranges: list[tuple[str, str]] = []
            while True:
                if i >= n:
                    raise ConditionError("unclosed '[' character class")
                lo = pattern[i]
                i += 1
                if lo == "]":
                    if ranges:
                        break
                    raise ConditionError("empty '[]' character class")
                if lo == "\\":
                    if i >= n:
                        raise ConditionError("trailing '\\' escapes nothing")
                    lo = pattern[i]
                    i += 1
                hi = lo
                if i < n and pattern[i] == "-":
                    i += 1
                    if i >= n:
                        raise ConditionError("unclosed '[' character class")
                    if pattern[i] == "]":
                        i += 1
                        ranges += [(lo, lo), ("-", "-")]
                        break
                    hi = pattern[i]
                    i += 1
                    if hi < lo:
                        raise ConditionError(f"range '{lo}-{hi}' is reversed")
                ranges.append((lo, hi))
            body = "".join(re.escape(a) if a == b else f"{re.escape(a)}-{re.escape(b)}" for a, b in ranges)
            out.append((False, f"[{'^' if negated else ''}{body}]"))
        else:
            out.append((True, c))
    return out


class _Segment:
    """A run of a glob between stars: a fixed number of characters, found by
    ``str.find`` when literal, else by a regex without repetition, so neither
    ever backtracks."""

    __slots__ = ("size", "literal", "regex")

    def __init__(self, atoms: list[_Atom]) -> None:
        self.size = len(atoms)
        plain = all(literal for literal, _ in atoms)
        self.literal: str | None = "".join(text for _, text in atoms) if plain else None
        self.regex: re.Pattern[str] | None = None
        if not plain:
            self.regex = re.compile("".join(re.escape(t) if lit else t for lit, t in atoms), re.S)

    def at(self, name: str, pos: int) -> bool:
        if self.literal is not None:
            return name.startswith(self.literal, pos)
        assert self.regex is not None
        return self.regex.match(name, pos) is not None

    def find(self, name: str, start: int, end: int) -> int:
        if self.literal is not None:
            return name.find(self.literal, start, end)
        assert self.regex is not None
        m = self.regex.search(name, start, end)
        return -1 if m is None else m.start()


def compile_glob(pattern: str) -> Callable[[str], bool]:
    """A matcher of whole names for a glob (``*``, ``?``, ``[...]``, ``[!...]``, ``\\``)."""
    check_len(pattern, MAX_GLOB_BYTES, "glob")
    if pattern in ("", "*"):
        return lambda name: True
    tokens = _glob_tokens(pattern)
    if not any(c in pattern for c in "*?[\\"):
        return pattern.__eq__
    # Split at the stars: the first segment must start the name, the last end
    # it, and each one between is taken at its leftmost place after the one
    # before (the leftmost leaves the most room for the rest), so a name is
    # read a bounded number of times per segment whatever the stars.
    segments: list[_Segment] = []
    run: list[_Atom] = []
    for token in tokens:
        if token is _STAR:
            segments.append(_Segment(run))
            run = []
        else:
            run.append(token)
    segments.append(_Segment(run))
    first, last = segments[0], segments[-1]
    if len(segments) == 1:
        return lambda name: len(name) == first.size and first.at(name, 0)
    middle = tuple(segments[1:-1])
    least = sum(s.size for s in segments)

    def matches(name: str) -> bool:
        end = len(name) - last.size
        if len(name) < least or not first.at(name, 0) or not last.at(name, end):
            return False
        start = first.size
        for segment in middle:
            found = segment.find(name, start, end)
            if found < 0:
                return False
            start = found + segment.size
        return True

    return matches

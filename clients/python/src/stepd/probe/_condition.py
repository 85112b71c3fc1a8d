"""Probe breakpoint conditions and name globs, evaluated locally.

The language is the one in ``docs/probe-conditions.md``; every implementation
(the daemon's validator, this library, the Go library) is held to the shared
vectors in ``clients/testdata/conditions.json``. A condition is compiled once
(when an ``Armed`` arrives) into a Python closure, so checking it at a point is
a few function calls.

The limits are the daemon's: a condition of at most ``MAX_CONDITION_BYTES``
bytes of UTF-8 nested at most ``MAX_CONDITION_DEPTH`` deep (each ``(`` and ``!``
is a level, and each level a few frames of this process's stack), a glob of at
most ``MAX_GLOB_BYTES``. Globs match in at most (glob length × name length)
steps, never by backtracking.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Union

__all__ = [
    "MAX_CONDITION_BYTES",
    "MAX_CONDITION_DEPTH",
    "MAX_GLOB_BYTES",
    "ConditionError",
    "Point",
    "compile_condition",
    "compile_glob",
    "evaluate",
]

#: The longest condition accepted, in bytes of UTF-8 (as the daemon).
MAX_CONDITION_BYTES = 4096
#: The deepest nesting of ``(`` and ``!`` accepted (as the daemon).
MAX_CONDITION_DEPTH = 32
#: The longest glob accepted, in bytes of UTF-8 (as the daemon).
MAX_GLOB_BYTES = 1024

#: What a compiled condition is called with: kind, name, value, labels.
Point = tuple[str, str, Any, Mapping[str, str]]
Predicate = Callable[[str, str, Any, Mapping[str, str]], bool]
_Getter = Callable[[str, str, Any, Mapping[str, str]], Any]


class ConditionError(ValueError):
    """A malformed condition or glob; the message says what is wrong."""


def _check_len(text: str, limit: int, what: str) -> None:
    # Characters are at most 4 bytes, so the encoding is needed only near the limit.
    if len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
        raise ConditionError(f"the {what} is longer than the limit of {limit} bytes")


# -- globs -----------------------------------------------------------------------


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
    _check_len(pattern, MAX_GLOB_BYTES, "glob")
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


# -- conditions --------------------------------------------------------------------

_Token = tuple[str, Any]  # ("op"|"ident"|"str"|"num", payload)
_TWO = ("==", "!=", "<=", ">=", "&&", "||")
_ONE = "<>!()[]."
_ROOTS = ("value", "name", "kind", "labels")
_Step = Union[str, int]


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text[i : i + 2] in _TWO:
            tokens.append(("op", text[i : i + 2]))
            i += 2
            continue
        if c in _ONE:
            tokens.append(("op", c))
            i += 1
            continue
        if c in "\"'":
            chars: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise ConditionError("unterminated string")
                d = text[i]
                if d == c:
                    break
                if d == "\\":
                    i += 1
                    if i >= n:
                        raise ConditionError("unterminated string")
                    d = {"n": "\n", "t": "\t"}.get(text[i], text[i])
                chars.append(d)
                i += 1
            i += 1
            tokens.append(("str", "".join(chars)))
            continue
        if c.isdigit() or (c == "-" and i + 1 < n and text[i + 1].isdigit()):
            start = i
            i += 1
            while i < n and (text[i].isdigit() or text[i] in ".eE"):
                i += 1
            try:
                tokens.append(("num", float(text[start:i])))
            except ValueError:
                raise ConditionError(f"bad number {text[start:i]!r}") from None
            continue
        if c.isalpha() or c == "_":
            start = i
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
            tokens.append(("ident", text[start:i]))
            continue
        raise ConditionError(f"unexpected character {c!r} at offset {i}")
    return tokens


def _truthy(v: Any) -> bool:
    if v is None or v is False:
        return False
    if v is True:
        return True
    if isinstance(v, (int, float, str, list, tuple, dict)):
        return bool(v)
    return True


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _equal(a: Any, b: Any) -> bool:
    if _is_num(a) and _is_num(b):
        return bool(float(a) == float(b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if a is None or b is None:
        return a is b
    return False


def _order(a: Any, b: Any) -> int | None:
    if _is_num(a) and _is_num(b):
        x, y = float(a), float(b)
    elif isinstance(a, str) and isinstance(b, str):
        x2, y2 = a, b
        return (x2 > y2) - (x2 < y2)
    else:
        return None
    if x != x or y != y:  # NaN
        return None
    return (x > y) - (x < y)


def _contains(a: Any, b: Any) -> bool:
    if isinstance(a, str):
        return isinstance(b, str) and b in a
    if isinstance(a, (list, tuple)):
        return any(_equal(item, b) for item in a)
    if isinstance(a, Mapping):
        return isinstance(b, str) and b in a
    return False


def _every(preds: list[Predicate]) -> Predicate:
    # A chain is one loop, not one closure per link: evaluating `a && b && …`
    # takes one frame of the stack however long the chain.
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda k, n, v, lb: a(k, n, v, lb) and b(k, n, v, lb)
    chain = tuple(preds)

    def every(k: str, n: str, v: Any, lb: Mapping[str, str]) -> bool:
        for p in chain:
            if not p(k, n, v, lb):
                return False
        return True

    return every


def _some(preds: list[Predicate]) -> Predicate:
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda k, n, v, lb: a(k, n, v, lb) or b(k, n, v, lb)
    chain = tuple(preds)

    def some(k: str, n: str, v: Any, lb: Mapping[str, str]) -> bool:
        for p in chain:
            if p(k, n, v, lb):
                return True
        return False

    return some


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0  # how many `(` and `!` enclose the current position

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_CONDITION_DEPTH:
            raise ConditionError(f"the condition nests deeper than the limit of {MAX_CONDITION_DEPTH} levels")

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def eat(self, op: str) -> bool:
        if self.peek() == ("op", op):
            self.pos += 1
            return True
        return False

    def or_(self) -> Predicate:
        alternatives = [self.and_()]
        while self.eat("||"):
            alternatives.append(self.and_())
        return _some(alternatives)

    def and_(self) -> Predicate:
        terms = [self.unary()]
        while self.eat("&&"):
            terms.append(self.unary())
        return _every(terms)

    def unary(self) -> Predicate:
        if self.eat("!"):
            self.deeper()
            inner = self.unary()
            self.depth -= 1
            return lambda k, n, v, lb: not inner(k, n, v, lb)
        if self.eat("("):
            self.deeper()
            inner = self.or_()
            if not self.eat(")"):
                raise ConditionError("missing ')'")
            self.depth -= 1
            return inner
        left = self.operand()
        token = self.peek()
        op = None
        if token is not None:
            if token[0] == "op" and token[1] in ("==", "!=", "<", "<=", ">", ">="):
                op = str(token[1])
            elif token[0] == "ident" and token[1] in ("contains", "matches"):
                op = str(token[1])
        if op is None:
            return lambda k, n, v, lb: _truthy(left(k, n, v, lb))
        self.pos += 1
        right_token = self.peek()
        right = self.operand()
        if op == "matches":
            if right_token is None or right_token[0] != "str":
                raise ConditionError("matches takes a string glob on its right")
            try:
                glob = compile_glob(str(right_token[1]))
            except ConditionError as err:
                raise ConditionError(f"bad glob after matches: {err}") from None
            return lambda k, n, v, lb: (lambda s: isinstance(s, str) and glob(s))(left(k, n, v, lb))
        if op == "==":
            return lambda k, n, v, lb: _equal(left(k, n, v, lb), right(k, n, v, lb))
        if op == "!=":
            return lambda k, n, v, lb: not _equal(left(k, n, v, lb), right(k, n, v, lb))
        if op == "contains":
            return lambda k, n, v, lb: _contains(left(k, n, v, lb), right(k, n, v, lb))
        test: Callable[[int], bool] = {
            "<": lambda o: o < 0,
            "<=": lambda o: o <= 0,
            ">": lambda o: o > 0,
            ">=": lambda o: o >= 0,
        }[op]

        def ordered(k: str, n: str, v: Any, lb: Mapping[str, str]) -> bool:
            o = _order(left(k, n, v, lb), right(k, n, v, lb))
            return o is not None and test(o)

        return ordered

    def operand(self) -> _Getter:
        token = self.peek()
        if token is None:
            raise ConditionError("the condition ends where a value is expected")
        self.pos += 1
        kind, payload = token
        if kind == "str" or kind == "num":
            literal = payload
            return lambda k, n, v, lb: literal
        if kind == "op":
            raise ConditionError(f"unexpected {payload!r} where a value is expected")
        word = str(payload)
        if word in ("true", "false", "null"):
            constant = {"true": True, "false": False, "null": None}[word]
            return lambda k, n, v, lb: constant
        if word not in _ROOTS:
            raise ConditionError(f"unknown name {word!r}: paths start with value, name, kind or labels")
        steps: list[_Step] = []
        while True:
            if self.eat("."):
                field = self.peek()
                if field is None or field[0] != "ident":
                    raise ConditionError("a field name must follow '.'")
                self.pos += 1
                steps.append(str(field[1]))
            elif self.eat("["):
                index = self.peek()
                if index is not None and index[0] == "num" and index[1] >= 0 and float(index[1]).is_integer():
                    steps.append(int(index[1]))
                elif index is not None and index[0] == "str":
                    steps.append(str(index[1]))
                else:
                    raise ConditionError("an index or a quoted key must follow '['")
                self.pos += 1
                if not self.eat("]"):
                    raise ConditionError("missing ']'")
            else:
                break
        root = _ROOTS.index(word)
        path = tuple(steps)

        def get(k: str, n: str, v: Any, lb: Mapping[str, str]) -> Any:
            current: Any = (v, n, k, lb)[root]
            for step in path:
                if isinstance(step, str):
                    current = current.get(step) if isinstance(current, Mapping) else None
                elif isinstance(current, (list, tuple)) and step < len(current):
                    current = current[step]
                else:
                    current = None
            return current

        return get


def compile_condition(text: str) -> Predicate:
    """Compiles a condition; raises :class:`ConditionError` when it is malformed.

    An empty condition is an error here (the daemon treats an empty
    ``condition`` field as "always"; callers check for that first).
    """
    _check_len(text, MAX_CONDITION_BYTES, "condition")
    parser = _Parser(_tokenize(text))
    predicate = parser.or_()
    if parser.pos != len(parser.tokens):
        raise ConditionError(f"unexpected {parser.tokens[parser.pos][1]!r} after a complete condition")

    def safe(k: str, n: str, v: Any, lb: Mapping[str, str]) -> bool:
        try:
            return bool(predicate(k, n, v, lb))
        except Exception:  # a condition that fails to evaluate does not hold
            return False

    return safe


def evaluate(condition: str, kind: str, name: str, value: Any, labels: Mapping[str, str] | None = None) -> bool:
    """Compiles and evaluates `condition` on one point (for tests and tools)."""
    return compile_condition(condition)(kind, name, value, labels or {})

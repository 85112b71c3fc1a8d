"""Probe breakpoint conditions, evaluated locally (name globs: ``_glob``).

The language is the one in ``docs/probe-conditions.md``; every implementation
(the daemon's validator, this library, the Go library) is held to the shared
vectors in ``clients/testdata/conditions.json``. A condition is compiled once
(when an ``Armed`` arrives) into a Python closure, so checking it at a point is
a few function calls.

The limits are the daemon's: a condition of at most ``MAX_CONDITION_BYTES``
bytes of UTF-8 nested at most ``MAX_CONDITION_DEPTH`` deep (each ``(`` and ``!``
is a level, and each level a few frames of this process's stack).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Union

from stepd.probe._glob import ConditionError, check_len, compile_glob

__all__ = [
    "MAX_CONDITION_BYTES",
    "MAX_CONDITION_DEPTH",
    "ConditionError",
    "Point",
    "compile_condition",
    "evaluate",
]

#: The longest condition accepted, in bytes of UTF-8 (as the daemon).
MAX_CONDITION_BYTES = 4096
#: The deepest nesting of ``(`` and ``!`` accepted (as the daemon).
MAX_CONDITION_DEPTH = 32

#: What a compiled condition is called with: kind, name, value, labels.
Point = tuple[str, str, Any, Mapping[str, str]]
Predicate = Callable[[str, str, Any, Mapping[str, str]], bool]
_Getter = Callable[[str, str, Any, Mapping[str, str]], Any]

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
    check_len(text, MAX_CONDITION_BYTES, "condition")
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

"""Points made by decorating a function, or around a block that may raise."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from typing import Any, Callable, Mapping, TypeVar, cast

from stepd.probe._frames import _Called, _Frame
from stepd.probe._outcome import _CONTINUED, Skipped, Stopped
from stepd.probe._point import _Points

_F = TypeVar("_F", bound=Callable[..., Any])


class _OnException:
    """``with probe.on_exception("tool", name=...) as point:`` — holds only if the block raises."""

    def __init__(self, probe: _Points, kind: str, name: str, editable: bool) -> None:
        self._probe = probe
        self._kind = kind
        self._name = name
        self._editable = editable
        #: The replacement a client injected (REPLACE), else None.
        self.value: Any = None
        #: Whether the exception was swallowed (SKIP or REPLACE).
        self.suppressed = False

    def __enter__(self) -> _OnException:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None) -> bool:
        if exc is None or isinstance(exc, (Skipped, Stopped)) or not isinstance(exc, Exception):
            return False
        frame = sys._getframe(1)
        message = str(exc) or type(exc).__name__
        value = {"type": type(exc).__name__, "message": message}
        try:
            resume = self._probe._point(
                self._kind, self._name, value, frame, editable=self._editable, exception_message=message
            )
        except Skipped:
            self.suppressed = True
            return True
        if resume is _CONTINUED:
            return False
        self.value = resume
        self.suppressed = True
        return True


class _Decorators(_Points):
    """``@probe.point(...)`` and ``with probe.on_exception(...)``."""

    def point(
        self,
        kind: str,
        name: str | None = None,
        *,
        editable: bool = True,
        on_result: bool = False,
        schema: Mapping[str, Any] | None = None,
        type_hint: Any = None,
    ) -> Callable[[_F], _F]:
        """Decorates a function (or coroutine function) with a pause point.

        By default the point holds on the call's arguments (a dict by parameter
        name, editable): INJECT replaces arguments, SKIP raises :class:`Skipped`
        instead of calling. With ``on_result=True`` it holds on the return value
        instead (INJECT replaces the result). EVAL sees the arguments.
        """

        def decorate(fn: _F) -> _F:
            point_name = name or fn.__name__
            signature = inspect.signature(fn)
            hint = type_hint if type_hint is not None else (None if on_result or schema is not None else "dict")
            code, f_globals = _Called.of(fn)

            def site(wrapper_frame: types.FrameType) -> _Frame:
                # The point is the user's function, not this wrapper.
                return wrapper_frame if code is None else _Called(code, f_globals, wrapper_frame)

            def arguments(bound: inspect.BoundArguments) -> dict[str, Any]:
                return {k: v for k, v in bound.arguments.items() if k not in ("self", "cls")}

            def call_with(bound: inspect.BoundArguments, replaced: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
                if isinstance(replaced, Mapping):
                    for key, item in replaced.items():
                        if key in signature.parameters:
                            bound.arguments[key] = item
                return bound.args, bound.kwargs

            if inspect.iscoroutinefunction(fn):

                @functools.wraps(fn)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    frame = site(sys._getframe(0))
                    if on_result:
                        result = await fn(*args, **kwargs)
                        if self._arming.idle:
                            self._coor(self._open_scopes())
                            return result
                        ns = {"result": result, **_bind_locals(signature, args, kwargs)}
                        out = await self._apoint(kind, point_name, result, f_globals, ns, frame, editable, schema, hint)
                        return result if out is _CONTINUED else out
                    if self._arming.idle:
                        self._coor(self._open_scopes())
                        return await fn(*args, **kwargs)
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    value = arguments(bound)
                    out = await self._apoint(kind, point_name, value, f_globals, dict(bound.arguments), frame, editable, schema, hint)
                    if out is not _CONTINUED:
                        args, kwargs = call_with(bound, out)
                    return await fn(*args, **kwargs)

                return cast(_F, async_wrapper)

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                frame = site(sys._getframe(0))
                if on_result:
                    result = fn(*args, **kwargs)
                    if self._arming.idle:
                        self._coor(self._open_scopes())
                        return result
                    ns = {"result": result, **_bind_locals(signature, args, kwargs)}
                    out = self._point(kind, point_name, result, frame, f_locals=ns, editable=editable, schema=schema, type_hint=hint)
                    return result if out is _CONTINUED else out
                if self._arming.idle:
                    self._coor(self._open_scopes())
                    return fn(*args, **kwargs)
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                value = arguments(bound)
                out = self._point(
                    kind, point_name, value, frame, f_locals=dict(bound.arguments), editable=editable,
                    schema=schema, type_hint=hint,
                )  # fmt: skip
                if out is not _CONTINUED:
                    args, kwargs = call_with(bound, out)
                return fn(*args, **kwargs)

            return cast(_F, wrapper)

        return decorate

    def on_exception(self, kind: str, name: str = "", *, editable: bool = False) -> _OnException:
        """A point that exists only when the block raises::

            with probe.on_exception("tool", name="Bash") as point:
                run()

        It holds (when armed) with the exception as its value and
        ``caught_msg`` = the exception's message; EVAL runs in the frame of
        the ``with``. CONTINUE re-raises; SKIP swallows the exception; INJECT
        swallows it and puts the value in ``point.value``; QUIT raises
        :class:`Stopped`.
        """
        return _OnException(self, kind, name, editable)


def _bind_locals(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError:
        return {}

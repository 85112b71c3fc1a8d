"""Where a probe's points say they are, on a real daemon: a decorated
function's point is the function (not the decorator's wrapper), and a scope
in an async generator its consumer stopped early neither leaks into the
consumer nor fails when the event loop closes the generator."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from typing import Any, AsyncIterator, Iterator

import pytest

import stepd
from conftest import Daemon
from probe_support import DEADLINE, Watcher
from stepd.probe import Probe

#: A module global, which EVAL at a decorated function's point must see.
GREETING = "hello from the module"


@pytest.fixture
def probe(daemon: Daemon) -> Iterator[Probe]:
    p = stepd.probe.connect(name="sites-test", labels={"run": uuid.uuid4().hex[:12]}, addr=daemon.tcp)
    assert p.connected, "the probe connected"
    yield p
    p.close()


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


def arm(client: stepd.Client, probe: Probe, kind: str) -> None:
    version = probe.arming_version
    client.add_breakpoint(label_selector=f"run={probe.labels['run']}", probe_kind=kind)
    assert probe.wait_armed(version, DEADLINE)


def in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as err:  # noqa: BLE001
            out["error"] = err

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_decorated_functions_point_is_the_function(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, "site")

    @probe.point("site")
    def greet(who: str) -> str:
        return f"{GREETING}, {who}"

    @probe.point("site", name="agreet")
    async def agreet(who: str) -> str:
        return who

    def caller() -> str:
        return greet("x")

    for fn, name, call in ((greet, "greet", caller), (agreet, "agreet", lambda: asyncio.run(agreet("y")))):
        t, out = in_thread(call)
        pause = watch.pause(probe.labels["run"], name=name)
        code = fn.__wrapped__.__code__  # type: ignore[attr-defined]
        at = pause.location
        assert (at.path, at.line, at.function, at.module) == (__file__, code.co_firstlineno, code.co_qualname, __name__)
        client.send_debug_input(pause.key, "stacktrace")
        frames = watch.wait("stack", lambda e: e.HasField("stack") and e.stack.key == pause.key).stack.frames
        assert frames[0].name == code.co_qualname
        assert all("stepd/probe" not in frame.location.path for frame in frames)
        if name == "greet":
            assert frames[1].name.endswith("caller")
            # EVAL sees the function's module, not the library's.
            answer = client.send_debug_input(pause.key, "eval", code="GREETING").pause.debug_value.text
            assert answer == repr(GREETING)
        client.send_debug_input(pause.key, "continue")
        t.join(DEADLINE)
        assert "error" not in out, out


def test_an_async_generator_stopped_early_leaves_no_scope(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, "after")

    async def stream() -> AsyncIterator[int]:
        async with probe.scope("stream"):
            for i in range(3):
                yield i

    async def consume() -> tuple[list[str], Any]:
        async for _ in stream():
            break  # the generator is left suspended inside its scope
        # The loop closes the dropped generator in a task of its own: wait for that.
        deadline = time.monotonic() + DEADLINE
        while probe.scope_path() and time.monotonic() < deadline:
            await asyncio.sleep(0)
        return probe.scope_path(), await probe.ahold("after", name="consumer", value=1)

    t, out = in_thread(asyncio.run, consume())
    pause = watch.pause(probe.labels["run"], name="consumer")
    assert list(pause.point.scope_path) == []
    assert len(pause.coor) == 1
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    assert out == {"value": ([], 1)}


def test_closing_a_scoped_async_generator_at_shutdown_raises_nothing(probe: Probe) -> None:
    errors: list[dict[str, Any]] = []
    unraisable: list[Any] = []

    async def stream() -> AsyncIterator[int]:
        async with probe.scope("stream"):
            for i in range(3):
                yield i

    async def main() -> int:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        kept = stream()
        first = await kept.__anext__()  # left open: asyncio.run closes it at shutdown
        return first

    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        assert asyncio.run(main()) == 0
    finally:
        sys.unraisablehook = old_hook
    assert errors == [] and unraisable == []
    assert probe.scope_path() == []

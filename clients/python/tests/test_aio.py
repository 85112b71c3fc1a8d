"""The asyncio client against the real stepd."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import stepd.aio
from conftest import Daemon, Proxy
from stepd import errors
from stepd.v1 import event_pb2

WAIT = 10.0


def kind(event: event_pb2.Event) -> str:
    return event.WhichOneof("payload") or ""


def test_handshake(daemon: Daemon) -> None:
    async def main() -> None:
        async with stepd.aio.Client(daemon.tcp) as c:
            pong = await c.ping()
            assert pong.protocol_version == "stepd.v1"
            assert uuid.UUID(pong.instance_id)
            assert (await c.get_status()).instance_id == pong.instance_id
        async with stepd.aio.Client(f"unix:{daemon.unix}") as c:
            assert (await c.ping()).instance_id == pong.instance_id

    asyncio.run(main())


def test_breakpoints_and_errors(daemon: Daemon) -> None:
    async def main() -> None:
        async with stepd.aio.Client(daemon.tcp) as c:
            bp = (await c.add_breakpoint(path="/aio.py", line=7, condition="ok")).breakpoint
            assert bp.spec.source.line == 7
            assert bp.id in [b.id for b in (await c.list_breakpoints()).breakpoints]
            assert (await c.disable_breakpoint(bp.id)).breakpoint.spec.enabled is False
            assert (await c.remove_breakpoint(bp.id)).breakpoint.id == bp.id
            with pytest.raises(errors.BreakpointNotFound):
                await c.remove_breakpoint(bp.id)
            with pytest.raises(errors.InvalidArgument) as info:
                await c.add_breakpoint(path="", line=1)
            assert [v.field for v in info.value.field_violations] == ["spec.source.path"]
            with pytest.raises(errors.PauseNotFound):
                await c.send_debug_input("nope", "continue")
            with pytest.raises(errors.InspectorNotFound):
                await c.clear("no-such-inspector")

    asyncio.run(main())


def test_events_snapshot_live_and_resume(daemon: Daemon, proxy: Proxy) -> None:
    async def main() -> None:
        async with stepd.aio.Client(daemon.tcp) as direct, stepd.aio.Client(proxy.addr) as via_proxy:
            async with via_proxy.events(channels=["breakpoints"]) as sub:
                snap = await sub.next(timeout=WAIT)
                assert kind(snap) == "snapshot"
                bp = (await direct.add_breakpoint(path="/aio-events.py", line=1)).breakpoint
                live = await sub.next(timeout=WAIT)
                assert kind(live) == "breakpoint_updated" and live.breakpoint_updated.breakpoint.id == bp.id

                proxy.cut()
                await direct.update_breakpoint(bp.id, enabled=False)
                await direct.remove_breakpoint(bp.id)
                proxy.restore()
                got = [await sub.next(timeout=WAIT) for _ in range(2)]
                assert [kind(e) for e in got] == ["breakpoint_updated"] * 2
                assert [e.breakpoint_updated.change for e in got] == [
                    event_pb2.BREAKPOINT_CHANGE_UPDATED,
                    event_pb2.BREAKPOINT_CHANGE_REMOVED,
                ]
                assert live.seq < got[0].seq < got[1].seq
                assert sub.reconnects == 1

                await sub.send_input("no-such-pause", "next")
                error = await sub.next(timeout=WAIT)
                assert kind(error) == "error"
                assert isinstance(errors.from_stream_error(error.error), errors.PauseNotFound)

            with pytest.raises(TimeoutError):
                await direct.wait_for_pause(timeout=0.3)

    asyncio.run(main())


def test_async_iteration_ends_on_shutdown(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = Daemon(tmp_path_factory.mktemp("aio-shutdown"), unix_socket=False)

    async def main() -> list[str]:
        seen: list[str] = []
        async with stepd.aio.Client(d.tcp) as c:
            async with c.events() as sub:
                async for event in sub:
                    seen.append(kind(event))
                    if kind(event) == "snapshot":
                        await c.shutdown()
        return seen

    try:
        # The daemon says it is going away before the stream ends.
        assert asyncio.run(asyncio.wait_for(main(), WAIT)) == ["snapshot", "reconnect"]
    finally:
        d.stop()

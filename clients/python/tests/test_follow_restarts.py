"""A subscription with follow_restarts goes on across a graceful restart
(SIGTERM) of the daemon on the same address; without it, it ends as before."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from pathlib import Path

import pytest

import stepd
import stepd.aio
from conftest import Daemon
from stepd.v1 import event_pb2

WAIT = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(sub: stepd.Subscription, kind: str) -> list[event_pb2.Event]:
    """Events up to and including the first of `kind`."""
    seen: list[event_pb2.Event] = []
    deadline = time.monotonic() + WAIT
    while not seen or seen[-1].WhichOneof("payload") != kind:
        seen.append(sub.next(timeout=max(0.0, deadline - time.monotonic())))
    return seen


def test_follows_a_daemon_restarted_on_the_same_address(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port()}"
    first = Daemon(tmp_path / "data", listen=addr, unix_socket=False)
    second: Daemon | None = None
    try:
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(stepd.Client(addr))
            following = client.events(channels=["breakpoints"], follow_restarts=True, reconnect_timeout=WAIT)
            plain = client.events(channels=["breakpoints"])
            old = following.next(timeout=WAIT).snapshot.instance_id
            assert plain.next(timeout=WAIT).snapshot.instance_id == old

            first.proc.send_signal(signal.SIGTERM)
            assert first.proc.wait(timeout=WAIT) == 0
            # Unchanged by default: told to reconnect, then the end.
            assert plain.next(timeout=WAIT).WhichOneof("payload") == "reconnect"
            with pytest.raises(StopIteration):
                plain.next(timeout=WAIT)

            second = Daemon(tmp_path / "data", listen=addr, unix_socket=False)
            # A channel of its own: the old connection backs off before it dials again.
            after = stack.enter_context(stepd.Client(addr, options=[("grpc.use_local_subchannel_pool", 1)]))
            new = after.ping().instance_id
            assert new != old
            resumed = until(following, "snapshot")
            assert resumed[0].WhichOneof("payload") == "reconnect"
            assert resumed[-1].snapshot.instance_id == new == following.instance_id
            assert following.reconnects >= 1

            bp = after.add_breakpoint(path="/restarted.py", line=1).breakpoint
            live = following.next(timeout=WAIT)
            assert live.breakpoint_updated.breakpoint.id == bp.id
            following.close()
            plain.close()
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_follows_a_daemon_that_is_not_back_yet_until_reconnect_timeout(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port()}"
    daemon = Daemon(tmp_path / "data", listen=addr, unix_socket=False)
    try:
        with stepd.Client(addr) as client:
            following = client.events(channels=["breakpoints"], follow_restarts=True, reconnect_timeout=1.0)
            following.next(timeout=WAIT)
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.proc.wait(timeout=WAIT) == 0
            assert following.next(timeout=WAIT).WhichOneof("payload") == "reconnect"
            with pytest.raises(stepd.errors.Unavailable, match="could not resume"):
                following.next(timeout=WAIT)
    finally:
        daemon.stop()


def test_the_asyncio_subscription_follows_a_restart_too(tmp_path: Path) -> None:
    addr = f"127.0.0.1:{free_port()}"
    first = Daemon(tmp_path / "data", listen=addr, unix_socket=False)
    daemons = [first]

    async def main() -> None:
        async with stepd.aio.Client(addr) as client:
            following = client.events(channels=["breakpoints"], follow_restarts=True, reconnect_timeout=WAIT)
            plain = client.events(channels=["breakpoints"])
            old = (await following.next(timeout=WAIT)).snapshot.instance_id
            await plain.next(timeout=WAIT)
            first.proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(first.proc.wait, WAIT) == 0
            assert (await plain.next(timeout=WAIT)).WhichOneof("payload") == "reconnect"
            with pytest.raises(StopAsyncIteration):
                await plain.next(timeout=WAIT)
            daemons.append(await asyncio.to_thread(Daemon, tmp_path / "data", listen=addr, unix_socket=False))
            deadline = time.monotonic() + WAIT
            event = await following.next(timeout=WAIT)
            while event.WhichOneof("payload") != "snapshot":
                event = await following.next(timeout=max(0.0, deadline - time.monotonic()))
            assert event.snapshot.instance_id not in ("", old) and following.reconnects >= 1
            await following.close()
            await plain.close()

    try:
        asyncio.run(main())
    finally:
        for d in daemons:
            d.stop()

"""follow_restarts through a real HAProxy in front of a daemon that is
restarted: the proxy resets the stream (RST_STREAM CANCEL) when it loses the
daemon, which is not the caller's own close, so the subscription goes on
with the daemon that comes back."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Iterator

import pytest

import stepd
import stepd.aio
from conftest import Daemon
from haproxy import Haproxy, free_port
from stepd.v1 import event_pb2

WAIT = 30.0


class Restartable:
    """A daemon on a fixed address and data directory, behind HAProxy."""

    def __init__(self, tmp_path: Path) -> None:
        self.addr = f"127.0.0.1:{free_port()}"
        self.data = tmp_path / "data"
        self.daemons = [Daemon(self.data, listen=self.addr, unix_socket=False)]
        self.proxy = Haproxy(self.addr, tmp_path / "haproxy")

    def restart(self, how: signal.Signals) -> Daemon:
        old = self.daemons[-1]
        old.proc.send_signal(how)
        old.proc.wait(timeout=WAIT)
        self.daemons.append(Daemon(self.data, listen=self.addr, unix_socket=False))
        return self.daemons[-1]

    def stop(self) -> None:
        self.proxy.stop()
        for d in self.daemons:
            d.stop()


@pytest.fixture
def behind_proxy(tmp_path: Path) -> Iterator[Restartable]:
    r = Restartable(tmp_path)
    yield r
    r.stop()


def snapshot_of(next_event: object, old: str) -> event_pb2.Event:
    """Reads until a snapshot of an instance other than `old`."""
    deadline = time.monotonic() + WAIT
    while True:
        event = next_event(timeout=max(0.0, deadline - time.monotonic()))  # type: ignore[operator]
        if event.WhichOneof("payload") == "snapshot" and event.snapshot.instance_id != old:
            return event  # type: ignore[no-any-return]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_follows_a_restart_through_haproxy(behind_proxy: Restartable, how: signal.Signals) -> None:
    with stepd.Client(behind_proxy.proxy.addr) as client:
        following = client.events(channels=["breakpoints"], follow_restarts=True, reconnect_timeout=WAIT)
        old = following.next(timeout=WAIT).snapshot.instance_id
        new_daemon = behind_proxy.restart(how)
        with stepd.Client(new_daemon.tcp) as direct:
            new = direct.ping().instance_id
            assert new != old
            resumed = snapshot_of(following.next, old)
            assert resumed.snapshot.instance_id == new == following.instance_id
            assert following.reconnects >= 1
            # And it is live on the new daemon.
            bp = direct.add_breakpoint(path="/behind_proxy.py", line=1).breakpoint
            deadline = time.monotonic() + WAIT
            event = following.next(timeout=WAIT)
            while event.WhichOneof("payload") != "breakpoint_updated":
                event = following.next(timeout=max(0.0, deadline - time.monotonic()))
            assert event.breakpoint_updated.breakpoint.id == bp.id
        following.close()
        # Closed by its caller, it ends at once.
        with pytest.raises(StopIteration):
            following.next(timeout=WAIT)


def test_the_asyncio_subscription_follows_a_restart_through_haproxy(behind_proxy: Restartable) -> None:
    async def main() -> None:
        async with stepd.aio.Client(behind_proxy.proxy.addr) as client:
            following = client.events(channels=["breakpoints"], follow_restarts=True, reconnect_timeout=WAIT)
            old = (await following.next(timeout=WAIT)).snapshot.instance_id
            new_daemon = await asyncio.to_thread(behind_proxy.restart, signal.SIGKILL)
            deadline = time.monotonic() + WAIT
            event = await following.next(timeout=WAIT)
            while event.WhichOneof("payload") != "snapshot" or event.snapshot.instance_id == old:
                event = await following.next(timeout=max(0.0, deadline - time.monotonic()))
            with stepd.Client(new_daemon.tcp) as direct:
                assert event.snapshot.instance_id == direct.ping().instance_id
            assert following.reconnects >= 1
            await following.close()

    asyncio.run(main())

"""EventService.Subscribe through the resuming iterator."""

from __future__ import annotations

import gc
import threading
from typing import Iterator

import grpc
import pytest

import stepd
from conftest import Daemon, Proxy
from stepd import errors
from stepd.v1 import event_pb2

WAIT = 10.0


def next_of(sub: stepd.Subscription, kind: str) -> event_pb2.Event:
    event = sub.next(timeout=WAIT)
    assert event.WhichOneof("payload") == kind, event
    return event


def bp_event(sub: stepd.Subscription) -> tuple[int, str, str]:
    event = next_of(sub, "breakpoint_updated")
    change = event_pb2.BreakpointChange.Name(event.breakpoint_updated.change).removeprefix("BREAKPOINT_CHANGE_")
    return event.seq, change, event.breakpoint_updated.breakpoint.id


def test_snapshot_then_live_events_in_order(client: stepd.Client) -> None:
    existing = client.add_breakpoint(path="/snap.py", line=1).breakpoint
    with client.events() as sub:
        snap = next_of(sub, "snapshot").snapshot
        assert snap.instance_id == client.ping().instance_id
        assert existing.id in [bp.id for bp in snap.breakpoints]
        assert sub.seq == snap.seq and sub.instance_id == snap.instance_id

        a = client.add_breakpoint(path="/live.py", line=3).breakpoint
        client.update_breakpoint(a.id, enabled=False)
        client.remove_breakpoint(a.id)
        events = [bp_event(sub) for _ in range(3)]
        assert [(change, id) for _, change, id in events] == [("ADDED", a.id), ("UPDATED", a.id), ("REMOVED", a.id)]
        seqs = [seq for seq, _, _ in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == 3 and seqs[0] > snap.seq
        assert sub.seq == seqs[-1]
    client.remove_breakpoint(existing.id)


def test_channel_filter(client: stepd.Client) -> None:
    with client.events(channels=["output"]) as sub:
        next_of(sub, "snapshot")
        client.remove_breakpoint(client.add_breakpoint(path="/filtered.py", line=1).breakpoint.id)
        with pytest.raises(TimeoutError):
            sub.next(timeout=0.5)
        # a new Watch replaces the filter and answers with a snapshot
        sub.watch(channels=["breakpoints"])
        next_of(sub, "snapshot")
        bp = client.add_breakpoint(path="/filtered.py", line=2).breakpoint
        assert bp_event(sub)[1:] == ("ADDED", bp.id)
        client.remove_breakpoint(bp.id)


def test_resume_after_dropped_connection_loses_nothing(daemon: Daemon, proxy: Proxy, client: stepd.Client) -> None:
    with stepd.Client(proxy.addr) as through_proxy, through_proxy.events(channels=["breakpoints"]) as sub:
        next_of(sub, "snapshot")
        first = client.add_breakpoint(path="/resume.py", line=1).breakpoint
        assert bp_event(sub)[1:] == ("ADDED", first.id)
        assert proxy.accepted == 1

        proxy.cut()  # the connection dies; the listener is gone too
        made = [client.add_breakpoint(path="/resume.py", line=n).breakpoint.id for n in (2, 3, 4)]
        client.update_breakpoint(made[0], enabled=False)
        client.remove_breakpoint(made[1])
        expected = [("ADDED", made[0]), ("ADDED", made[1]), ("ADDED", made[2]), ("UPDATED", made[0]), ("REMOVED", made[1])]
        proxy.restore()

        replayed = [bp_event(sub) for _ in expected]  # a snapshot or gap here would fail
        assert [(c, i) for _, c, i in replayed] == expected
        seqs = [s for s, _, _ in replayed]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert sub.reconnects == 1
        assert proxy.accepted == 2

        # live again, and nothing was delivered twice
        last = client.add_breakpoint(path="/resume.py", line=5).breakpoint
        assert bp_event(sub)[1:] == ("ADDED", last.id)
        with pytest.raises(TimeoutError):
            sub.next(timeout=0.3)
        for id in [first.id, made[0], made[2], last.id]:
            client.remove_breakpoint(id)


def test_iterating_reads_in_the_callers_thread_and_resumes(proxy: Proxy, client: stepd.Client) -> None:
    # `for event in sub` (no timeout) reads in the caller's thread; a watchdog
    # closing the subscription turns a hang into a failure.
    with stepd.Client(proxy.addr) as through_proxy, through_proxy.events(channels=["breakpoints"]) as sub:
        watchdog = threading.Timer(3 * WAIT, sub.close)
        watchdog.start()
        try:
            events = iter(sub)
            assert next(events).HasField("snapshot")
            first = client.add_breakpoint(path="/direct.py", line=1).breakpoint
            assert next(events).breakpoint_updated.breakpoint.id == first.id
            assert "stepd-events" not in [t.name for t in threading.enumerate()]

            proxy.cut()
            second = client.add_breakpoint(path="/direct.py", line=2).breakpoint
            proxy.restore()
            assert next(events).breakpoint_updated.breakpoint.id == second.id  # replayed
            assert sub.reconnects == 1
        finally:
            watchdog.cancel()
        # Closing from another thread ends the iteration.
        threading.Timer(0.2, sub.close).start()
        with pytest.raises(StopIteration):
            next(events)
    client.remove_breakpoint(first.id)
    client.remove_breakpoint(second.id)


def test_resume_from_another_instance_gets_gap_and_snapshot(client: stepd.Client) -> None:
    with client.events() as sub:
        current = next_of(sub, "snapshot").snapshot
    with client.events(resume_after_seq=5, resume_instance_id="not-this-daemon") as sub:
        gap = next_of(sub, "gap").gap
        assert gap.to_seq >= gap.from_seq
        snap = next_of(sub, "snapshot").snapshot
        assert snap.instance_id == current.instance_id
        assert snap.seq >= current.seq


def test_resume_with_cursor_replays_exactly_the_missed_events(client: stepd.Client) -> None:
    with client.events(channels=["breakpoints"]) as sub:
        snap = next_of(sub, "snapshot").snapshot
    missed = client.add_breakpoint(path="/missed.py", line=1).breakpoint
    with client.events(channels=["breakpoints"], resume_after_seq=snap.seq, resume_instance_id=snap.instance_id) as sub:
        assert bp_event(sub)[1:] == ("ADDED", missed.id)
    client.remove_breakpoint(missed.id)


def test_debug_input_on_the_stream(client: stepd.Client) -> None:
    with client.events() as sub:
        next_of(sub, "snapshot")
        sub.send_input("no-such-pause", "continue")
        error = next_of(sub, "error").error
        assert error.key == "no-such-pause"
        err = errors.from_stream_error(error)
        assert isinstance(err, errors.PauseNotFound)
        assert err.code.name == "NOT_FOUND"


def test_wait_for_pause_times_out_without_pauses(client: stepd.Client) -> None:
    assert len(client.list_pauses().pauses) == 0
    with pytest.raises(TimeoutError):
        client.wait_for_pause(timeout=0.5)


def live_calls() -> list[object]:
    """grpc's streaming call objects still alive, unreachable cycles included."""
    return [o for o in gc.get_objects() if isinstance(o, grpc._channel._Rendezvous)]


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No collection runs, so what only a collection would free stays countable."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_a_closed_subscription_leaves_no_call_to_the_last_collection(
    client: stepd.Client, collector_off: None
) -> None:
    # A call left in a cycle is freed by the interpreter's last collection,
    # whose __del__ can wait forever for a lock a dead grpc thread held: the
    # script hangs as it exits (errors.from_stream_call).
    before = live_calls()
    with client.events() as sub:  # read in a thread of its own
        sub.next(timeout=WAIT)
    with client.events() as sub:  # read in the caller's thread
        next(sub)
    with pytest.raises(TimeoutError):
        client.wait_for_pause(timeout=0.2)
    # Closed from another thread while a thread iterates: iteration just ends.
    sub = client.events()
    read: list[event_pb2.Event] = []
    first = threading.Event()

    def read_all() -> None:
        for event in sub:
            read.append(event)
            first.set()

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    assert first.wait(WAIT)
    sub.close()
    reader.join(WAIT)
    assert not reader.is_alive() and read[0].HasField("snapshot")
    del sub, reader
    # By identity: a call of an earlier test may be freed meanwhile.
    assert [c for c in live_calls() if not any(c is b for b in before)] == []


def test_heartbeats_are_opt_in(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = Daemon(tmp_path_factory.mktemp("hb"), "--heartbeat-interval", "100ms", unix_socket=False)
    try:
        with d.client() as c:
            with c.events(heartbeats=True) as sub:
                next_of(sub, "snapshot")
                assert next_of(sub, "heartbeat").heartbeat.last_seq >= sub.seq
            with c.events() as sub:
                next_of(sub, "snapshot")
                with pytest.raises(TimeoutError):
                    sub.next(timeout=0.5)
    finally:
        d.stop()


def test_a_stream_ended_for_what_it_left_unread_resumes_without_loss(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The daemon ends a stream holding more than 64 KiB its client has not
    # read (LIMIT_EXCEEDED, resume_after_seq); the subscription resumes from
    # its cursor and the reader gets every event once, in order.
    d = Daemon(tmp_path_factory.mktemp("unread"), "--subscriber-buffer-bytes", "65536", unix_socket=False)
    try:
        # Without BDP probing gRPC keeps its 64 KiB window, so what this
        # client does not read stays in the daemon.
        with d.client() as c, d.client(options=[("grpc.http2.bdp_probe", 0)]) as reader, reader.events(
            channels=["breakpoints"]
        ) as sub:
            events = iter(sub)  # read in this thread: nothing reads meanwhile
            assert next(events).HasField("snapshot")
            made = [
                c.add_breakpoint(function=f"f{n}", condition="c" * 4000).breakpoint.id for n in range(600)
            ]
            got = []
            for event in events:
                assert event.HasField("breakpoint_updated"), event  # no gap, no snapshot
                got.append(event.breakpoint_updated.breakpoint.id)
                if len(got) == len(made):
                    break
            assert got == made
            assert sub.reconnects >= 1
    finally:
        d.stop()


def test_stream_ends_on_shutdown(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = Daemon(tmp_path_factory.mktemp("shutdown"), unix_socket=False)
    try:
        with d.client() as c, c.events() as sub:
            next_of(sub, "snapshot")
            c.shutdown()
            # Told to reconnect, then the stream ends.
            assert sub.next(timeout=WAIT).HasField("reconnect")
            with pytest.raises(StopIteration):
                sub.next(timeout=WAIT)
            assert d.proc.wait(timeout=WAIT) == 0
    finally:
        d.stop()

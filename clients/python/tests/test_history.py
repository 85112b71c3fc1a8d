"""Session history (HistoryService.GetSessionHistory) through the client: a
probe session that held once and ended, read back whole, page by page and by
channel; a launched session's history from its handle; unknown sessions."""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
import uuid
from typing import Callable

import grpc
import pytest

import stepd
import stepd.aio
from conftest import REPO, Daemon
from probe_support import DEADLINE, Watcher
from stepd import errors
from stepd.v1 import event_pb2, session_pb2

# Which channel each recorded payload belongs to (event.proto's EventChannel).
CHANNEL_OF = {
    "session_started": "lifecycle",
    "session_updated": "lifecycle",
    "session_ended": "lifecycle",
    "thread_changed": "lifecycle",
    "stopped": "execution",
    "continued": "execution",
    "pause_resolved": "execution",
    "stack": "execution",
    "eval_error": "execution",
    "trace": "execution",
    "output": "output",
    "breakpoint_updated": "breakpoints",
    "observed": "probe",
    "enlighten": "probe",
    "tap": "inspector",
    "notification": "notifications",
}


def kind(event: event_pb2.Event) -> str:
    return event.WhichOneof("payload") or ""


def recorded(read: Callable[[], list[event_pb2.Event]]) -> list[event_pb2.Event]:
    """The history once its last event is the session's end: events are
    recorded a little after they are published, and no event says when."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            events = read()
        except errors.SessionNotFound:
            events = []  # nothing of it recorded yet
        if events and kind(events[-1]) == "session_ended":
            return events
        assert time.monotonic() < deadline, f"the history never ended: {[kind(e) for e in events]}"


@pytest.fixture(scope="module")
def ended(daemon: Daemon) -> tuple[str, list[event_pb2.Event]]:
    """A probe session that held once (answered SKIP), reported a value and
    ended; its id and every event of it a subscriber saw."""
    run = uuid.uuid4().hex[:12]
    with daemon.client(client_name="pytest-history") as client:
        watch = Watcher(client)
        try:
            with stepd.probe.connect(name="history", labels={"run": run}, addr=daemon.tcp) as probe:
                session = probe.session_id
                version = probe.arming_version
                bp = client.add_breakpoint(probe_kind="tool_call", label_selector=f"run={run}").breakpoint
                assert probe.wait_armed(version, DEADLINE)
                out: dict[str, object] = {}

                def hold() -> None:
                    try:
                        probe.hold("tool_call", name="Bash", value="rm -rf /tmp/x")
                    except stepd.Skipped as skipped:
                        out["skipped"] = skipped

                t = threading.Thread(target=hold, daemon=True)
                t.start()
                pause = watch.pause(run)
                client.send_debug_input(pause.key, "skip")
                t.join(DEADLINE)
                assert "skipped" in out
                probe.observe("tick", "n", 7)
                assert probe.flush(DEADLINE)
            watch.wait("session_ended", lambda e: e.HasField("session_ended") and e.session_id == session)
            client.remove_breakpoint(bp.id)
        finally:
            watch.close()
    return session, watch.find(lambda e: e.session_id == session)


def test_an_ended_session_reads_back_as_it_was_published(
    client: stepd.Client, ended: tuple[str, list[event_pb2.Event]]
) -> None:
    session, seen = ended
    events = recorded(lambda: list(client.session_history(session)))
    assert events == seen
    assert kind(events[0]) == "session_started"
    [stopped] = [e.stopped.pause for e in events if kind(e) == "stopped"]
    assert "rm -rf /tmp/x" in stopped.debug_value.text
    [resolved] = [e.pause_resolved for e in events if kind(e) == "pause_resolved"]
    assert resolved.key == stopped.key and resolved.by
    assert [e.observed.name for e in events if kind(e) == "observed"] == ["n"]


def test_pages_of_one_give_the_same_events(client: stepd.Client, ended: tuple[str, list[event_pb2.Event]]) -> None:
    session, _ = ended
    whole = recorded(lambda: list(client.session_history(session)))
    assert len(whole) > 2, "enough events for several pages"
    pages: list[int] = []
    real = client.history_stub.GetSessionHistory

    def counting(request: object, **kwargs: object) -> object:
        pages.append(1)
        return real(request, **kwargs)

    client.history_stub.GetSessionHistory = counting  # type: ignore[method-assign]
    try:
        one_by_one = list(client.session_history(session, page_size=1))
    finally:
        client.history_stub.GetSessionHistory = real  # type: ignore[method-assign]
    assert one_by_one == whole
    assert len(pages) == len(whole), "one request per event"


def test_channels_filter(client: stepd.Client, ended: tuple[str, list[event_pb2.Event]]) -> None:
    session, _ = ended
    whole = recorded(lambda: list(client.session_history(session)))
    for channels in (["lifecycle"], ["execution", "probe"], [event_pb2.EVENT_CHANNEL_EXECUTION]):
        names = [c if isinstance(c, str) else "execution" for c in channels]
        filtered = list(client.session_history(session, channels=channels, page_size=1))
        assert filtered, channels
        assert filtered == [e for e in whole if CHANNEL_OF.get(kind(e)) in names], channels


def test_the_asyncio_client_reads_the_same_history(
    daemon: Daemon, client: stepd.Client, ended: tuple[str, list[event_pb2.Event]]
) -> None:
    session, _ = ended
    whole = recorded(lambda: list(client.session_history(session)))

    async def main() -> tuple[list[event_pb2.Event], list[event_pb2.Event]]:
        async with stepd.aio.Client(daemon.tcp) as c:
            paged = [e async for e in c.session_history(session, page_size=2)]
            lifecycle = [e async for e in c.session_history(session, channels=["lifecycle"])]
            with pytest.raises(errors.SessionNotFound):
                [e async for e in c.session_history("no-such-session")]
            return paged, lifecycle

    paged, lifecycle = asyncio.run(main())
    assert paged == whole
    assert lifecycle == [e for e in whole if CHANNEL_OF.get(kind(e)) == "lifecycle"]


def test_an_unknown_session_is_not_found(client: stepd.Client) -> None:
    with pytest.raises(errors.SessionNotFound) as info:
        next(client.session_history("no-such-session"))
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.metadata["session_id"] == "no-such-session"
    with pytest.raises(errors.InvalidArgument) as bad:
        next(client.session_history(""))
    assert [v.field for v in bad.value.field_violations] == ["session_id"]


def test_a_launched_session_has_its_history(client: stepd.Client) -> None:
    loop = REPO / "tests" / "fixtures" / "python" / "loop.py"
    with client.events(channels=["lifecycle"]) as sub:
        with client.launch(str(loop), adapter="debugpy") as session:
            deadline = time.monotonic() + DEADLINE
            while True:
                event = sub.next(timeout=max(deadline - time.monotonic(), 0.001))
                if event.session_id == session.id and event.HasField("session_ended"):
                    break
            events = recorded(lambda: list(session.history()))
    assert kind(events[0]) == "session_started"
    printed = "".join(e.output.chunk.text for e in session.history(["output"]))
    assert "done total=20" in printed
    assert all(kind(e) == "output" for e in session.history(["output"], page_size=3))
    assert events[-1].session_ended.reason == session_pb2.END_REASON_EXITED


def listed_once_recorded(client: stepd.Client, run: str) -> list[session_pb2.Session]:
    """The ended sessions labelled run=`run`, once the end is on record (a
    session's record is written a little after it ends)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        sessions = list(client.ended_sessions(label_selector=f"run={run}"))
        if sessions:
            return sessions
        assert time.monotonic() < deadline, f"run={run} was never listed as ended"
        time.sleep(0.05)


def test_ended_sessions_are_listed_by_labels_time_and_page(
    daemon: Daemon, client: stepd.Client, ended: tuple[str, list[event_pb2.Event]]
) -> None:
    session, seen = ended
    [started] = [e.session_started.session for e in seen if kind(e) == "session_started"]
    run = started.labels["run"]
    [listed] = listed_once_recorded(client, run)
    assert listed.id == session
    assert listed.state == session_pb2.SESSION_STATE_ENDED
    assert listed.end_reason == session_pb2.END_REASON_PROBE_DISCONNECTED
    assert listed.replica_id == client.ping().instance_id
    assert listed.HasField("ended_at")

    # None ended after its end; none started before its start.
    after = listed.ended_at.ToDatetime() + datetime.timedelta(seconds=1)
    assert list(client.ended_sessions(label_selector=f"run={run}", since=after)) == []
    before = listed.started_at.ToDatetime() - datetime.timedelta(seconds=1)
    assert list(client.ended_sessions(label_selector=f"run={run}", until=before)) == []
    assert list(client.ended_sessions(label_selector=f"run={run}", until=listed.started_at)) == [listed]

    # Page after page, newest first, each once.
    ids = [s.id for s in client.ended_sessions(page_size=1)]
    assert session in ids
    assert ids == sorted(set(ids), reverse=True)

    with pytest.raises(errors.InvalidArgument):
        next(client.ended_sessions(label_selector="=nope"))

    async def main() -> list[session_pb2.Session]:
        async with stepd.aio.Client(daemon.tcp) as c:
            return [s async for s in c.ended_sessions(label_selector=f"run={run}", page_size=1)]

    assert asyncio.run(main()) == [listed]

"""Pauses followed across revisions: a loop that EVALs then continues answers
each pause exactly once, though every EVAL re-sends the pause."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import stepd
from conftest import Daemon
from probe_support import DEADLINE, Watcher
from stepd.views import named


def test_each_pause_is_answered_once_across_its_eval_revisions(daemon: Daemon, client: stepd.Client) -> None:
    run = uuid.uuid4().hex[:12]
    watch = Watcher(client)
    with stepd.probe.connect(name="revisions", labels={"run": run}, addr=daemon.tcp) as probe:
        version = probe.arming_version
        bp = client.add_breakpoint(label_selector=f"run={run}", probe_kind="step").breakpoint
        assert probe.wait_armed(version, DEADLINE)
        held: list[int] = []
        program = threading.Thread(target=lambda: held.extend(probe.hold("step", name=f"n{i}", value=i) for i in range(3)))
        answered: list[tuple[str, str]] = []
        with client.pauses([probe.session_id]) as pauses:
            program.start()
            for pause in pauses:
                assert pause.reason == "HOLD" and pause.revision == 0
                resent = pauses.answer(pause, "eval", code="_ * 10")
                assert resent is not None and (resent.key, resent.revision) == (pause.key, 1)
                assert resent.debug_value.text == str(10 * int(pause.point.name[1:]))
                assert pauses.answer(resent, "continue") is None
                answered.append((pause.key, resent.debug_value.text))
                if len(answered) == 3:
                    break
            program.join(DEADLINE)
        client.remove_breakpoint(bp.id)
    assert held == [0, 1, 2]
    assert [text for _, text in answered] == ["0", "10", "20"]
    keys = [key for key, _ in answered]
    # The stream carried every revision (what a plain loop over `stopped`
    # would have answered twice), and each pause resolved once, by CONTINUE.
    for key in keys:
        watch.resolved(key)
    stopped = Counter(
        e.stopped.pause.key for e in watch.find(lambda e: e.HasField("stopped") and e.stopped.pause.key in keys)
    )
    resolved = [e.pause_resolved for e in watch.find(lambda e: e.HasField("pause_resolved"))]
    assert stopped == {key: 2 for key in keys}
    assert sorted((r.key, str(named(r, "command"))) for r in resolved if r.key in keys) == sorted((k, "CONTINUE") for k in keys)
    assert not watch.find(lambda e: e.HasField("error"))
    watch.close()


def test_current_returns_the_latest_revision_until_answered(daemon: Daemon, client: stepd.Client) -> None:
    run = uuid.uuid4().hex[:12]
    with stepd.probe.connect(name="current", labels={"run": run}, addr=daemon.tcp) as probe:
        version = probe.arming_version
        bp = client.add_breakpoint(label_selector=f"run={run}", probe_kind="k").breakpoint
        assert probe.wait_armed(version, DEADLINE)
        out: list[object] = []
        program = threading.Thread(target=lambda: out.append(probe.hold("k", value={"a": 1})))
        program.start()
        with client.pauses([probe.session_id]) as pauses:
            first = pauses.current(DEADLINE)
            assert pauses.current(DEADLINE).key == first.key  # not answered: still current
            resent = pauses.answer(first, "stacktrace")
            assert resent is not None
            latest = pauses.current(DEADLINE)
            assert (latest.key, latest.revision) == (first.key, resent.revision) and resent.revision > first.revision
            assert pauses.answer(latest, "continue") is None
            program.join(DEADLINE)
            assert out == [{"a": 1}]
        client.remove_breakpoint(bp.id)

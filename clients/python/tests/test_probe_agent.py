"""The example agent (examples/agent_loop) as a separate process, driven through
a real daemon: every command at its pauses, edits the agent really uses, skip,
stop, step through a turn, breakpoints on one tool and on the sub-agent only,
the hold limit, a probe killed while held, and two clients racing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import pytest

import stepd
from conftest import Daemon
from probe_support import AgentRun, Watcher, new_run
from stepd.v1 import event_pb2, session_pb2

SIX_TIMES_SEVEN = "what is 6*7?"


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


@pytest.fixture
def agents(daemon: Daemon) -> Iterator[list[AgentRun]]:
    runs: list[AgentRun] = []
    yield runs
    for run in runs:
        run.kill()


def start(daemon: Daemon, agents: list[AgentRun], client: stepd.Client, *questions: str, **bps: dict[str, str]) -> AgentRun:
    """Adds the breakpoints (for this run only, by its label), then starts the agent."""
    run_id = new_run()
    selector = f"run={run_id}"
    for name, spec in bps.items():
        client.add_breakpoint(
            probe_kind=spec.get("kind", ""),
            probe_name=spec.get("name", ""),
            condition=spec.get("condition"),
            label_selector=f"{selector},{spec['labels']}" if "labels" in spec else selector,
        )
    # Started after its breakpoints exist, so a quick agent cannot pass them first.
    run = AgentRun(daemon.tcp, *questions, run=run_id)
    agents.append(run)
    return run


def go(run: AgentRun) -> tuple[int, str]:
    return run.finish()


def test_step_through_a_whole_turn(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, prompt={"kind": "prompt"})
    seen = []
    pause = watch.pause(run.run)
    while True:
        seen.append((pause.point.kind, list(pause.coor), list(pause.point.scope_path)))
        if pause.point.kind == "turn_end":
            client.send_debug_input(pause.key, "continue")
            break
        client.send_debug_input(pause.key, "next")
        pause = watch.pause(run.run)
    assert seen == [
        ("prompt", [0], ["turn"]),
        ("model_request", [1, 0], ["turn", "step"]),
        ("model_response", [2, 1], ["turn", "step"]),
        ("tool_call", [3, 2, 0], ["turn", "step", "tool"]),
        ("tool_result", [4, 3, 1], ["turn", "step", "tool"]),
        ("model_request", [5, 0], ["turn", "step"]),
        ("model_response", [6, 1], ["turn", "step"]),
        ("turn_end", [7], ["turn"]),
    ]
    rc, out = go(run)
    assert rc == 0 and "agent answer: The answer is 42" in out, out


def test_in_then_here_runs_to_a_coordinate(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, prompt={"kind": "prompt"})
    pause = watch.pause(run.run, kind="prompt")
    client.send_debug_input(pause.key, "in")
    pause = watch.pause(run.run)
    assert pause.point.kind == "model_request" and list(pause.coor) == [1, 0]
    client.send_debug_input(pause.key, "here", coor=[4, 3, 1])
    pause = watch.pause(run.run)
    assert (pause.point.kind, list(pause.coor)) == ("tool_result", [4, 3, 1])
    client.send_debug_input(pause.key, "continue")
    rc, out = go(run)
    assert rc == 0 and "The answer is 42" in out, out


def test_out_honours_breakpoints_unless_forced(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(
        daemon, agents, client, SIX_TIMES_SEVEN, "what is 2+3?",
        call={"kind": "tool_call"}, result={"kind": "tool_result"},
    )  # fmt: skip
    # Turn 1: OUT of the tool scope stops at the breakpoint on the way.
    pause = watch.pause(run.run, kind="tool_call")
    client.send_debug_input(pause.key, "out")
    pause = watch.pause(run.run)
    assert pause.point.kind == "tool_result"
    client.send_debug_input(pause.key, "continue")
    # Turn 2: OUT with force skips it and holds once the tool scope ended.
    pause = watch.pause(run.run, kind="tool_call")
    client.send_debug_input(pause.key, "out", force=True)
    pause = watch.pause(run.run)
    assert (pause.point.kind, list(pause.point.scope_path)) == ("model_request", ["turn", "step"])
    client.send_debug_input(pause.key, "continue")
    rc, out = go(run)
    assert rc == 0 and "The answer is 5" in out, out


def test_continue_scope_and_continue_all(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, "what is 2+3?", req={"kind": "model_request"})
    pause = watch.pause(run.run, kind="model_request")
    assert list(pause.coor) == [1, 0]
    # CONTINUE_SCOPE: no holds for the rest of this step; the next step holds again.
    client.send_debug_input(pause.key, "continue_scope")
    pause = watch.pause(run.run, kind="model_request")
    assert list(pause.coor) == [5, 0]
    # CONTINUE_ALL: nothing holds until the turn ends; the next turn holds again.
    client.send_debug_input(pause.key, "continue_all")
    pause = watch.pause(run.run, kind="model_request")
    assert list(pause.coor) == [1, 0]
    assert pause.point.payload.struct_value.fields["messages"].list_value.values[0].struct_value.fields[
        "content"
    ].string_value == "what is 2+3?"
    client.send_debug_input(pause.key, "continue")
    pause = watch.pause(run.run, kind="model_request")
    client.send_debug_input(pause.key, "continue")
    rc, out = go(run)
    assert rc == 0 and out.count("agent answer:") == 2, out


def test_trace_reports_every_point_without_holding(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, prompt={"kind": "prompt"})
    pause = watch.pause(run.run, kind="prompt")
    mark = len(watch.seen)
    client.send_debug_input(pause.key, "trace")
    ended = watch.wait("session_ended", lambda e: e.HasField("session_ended") and e.session_id == pause.session_id)
    traces = [e.trace for e in watch.seen[mark:] if e.HasField("trace") and e.session_id == pause.session_id]
    assert [list(t.coor) for t in traces] == [[1, 0], [2, 1], [3, 2, 0], [4, 3, 1], [5, 0], [6, 1], [7]]
    # Each step names the pause it started from, its point and where it is.
    assert [t.step for t in traces] == list(range(1, len(traces) + 1))
    assert all(t.key == pause.key and t.point.kind and t.location.path.endswith("agent.py") for t in traces), traces
    assert not any(e.HasField("stopped") for e in watch.seen[mark:] if e.session_id == pause.session_id)
    assert ended.session_ended.reason == session_pb2.END_REASON_PROBE_DISCONNECTED
    rc, out = go(run)
    assert rc == 0 and "The answer is 42" in out, out


def test_eval_runs_in_the_callers_frame_and_stacktrace(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, call={"kind": "tool_call"})
    pause = watch.pause(run.run, kind="tool_call")
    # `call` and `name` are locals of Agent.call_tool, the frame that called hold.
    evaluated = client.send_debug_input(pause.key, "eval", code="(name, call['args']['expression'])").pause
    assert evaluated.debug_value.text == "('calculator', '6*7')"
    assert evaluated.key == pause.key and evaluated.revision > 0
    # A failing EVAL fails the call; the pause stays, re-prompted.
    with pytest.raises(stepd.errors.AdapterError, match="NameError"):
        client.send_debug_input(pause.key, "eval", code="undefined_name")
    watch.wait("eval_error", lambda e: e.HasField("eval_error") and "NameError" in e.eval_error.message)
    assert [p.key for p in client.list_pauses(pause.session_id).pauses] == [pause.key]
    client.send_debug_input(pause.key, "stacktrace")
    stack = watch.wait("stack", lambda e: e.HasField("stack") and e.stack.key == pause.key).stack
    functions = [f.name for f in stack.frames]
    assert functions[:3] == ["Agent.call_tool", "Agent.turn", "main"], functions
    assert stack.frames[0].location.path.endswith("agent.py")
    client.send_debug_input(pause.key, "continue")
    rc, out = go(run)
    assert rc == 0 and "The answer is 42" in out, out


def test_edits_are_validated_and_used(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(
        daemon, agents, client, SIX_TIMES_SEVEN,
        req={"kind": "model_request"}, call={"kind": "tool_call"}, result={"kind": "tool_result"},
        resp={"kind": "model_response", "condition": "!value.tool_calls"},
    )  # fmt: skip
    pause = watch.pause(run.run, kind="model_request")
    # Not a model this agent knows: refused, and the pause stays.
    with pytest.raises(stepd.errors.InvalidValue):
        client.send_debug_input(pause.key, "inject", value={"model": "gpt-9", "effort": "low"})
    assert pause.key in [p.key for p in client.list_pauses().pauses]
    client.send_debug_input(pause.key, "inject", value={"model": "offline-large", "effort": "high"})
    pause = watch.pause(run.run, kind="tool_call")
    client.send_debug_input(pause.key, "inject", value={"expression": "6*6"})
    pause = watch.pause(run.run, kind="tool_result")
    assert pause.point.payload.string_value == "36"
    client.send_debug_input(pause.key, "inject", value="1000")
    pause = watch.pause(run.run, kind="model_request")
    client.send_debug_input(pause.key, "continue")
    pause = watch.pause(run.run, kind="model_response")
    assert pause.point.payload.struct_value.fields["text"].string_value == "The answer is 1000"
    client.send_debug_input(pause.key, "inject", value={"text": "forty-two, says the debugger", "tool_calls": []})
    rc, out = go(run)
    assert rc == 0, out
    assert "agent model offline-large (effort high): Let me use calculator." in out
    assert 'agent tool calculator {"expression": "6*6"}' in out
    assert "agent result calculator: 1000" in out
    assert "agent answer: forty-two, says the debugger" in out


def test_skip_a_tool_and_stop_a_turn(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, "what is 2+3?", call={"kind": "tool_call"}, end={"kind": "turn_end"})
    pause = watch.pause(run.run, kind="tool_call")
    client.send_debug_input(pause.key, "skip")
    pause = watch.pause(run.run, kind="turn_end")
    client.send_debug_input(pause.key, "continue")
    pause = watch.pause(run.run, kind="tool_call")
    client.send_debug_input(pause.key, "quit")
    resolved = watch.resolved(pause.key)
    assert resolved.command == stepd.v1.pause_pb2.COMMAND_KIND_QUIT
    rc, out = go(run)
    assert rc == 3, out
    assert "agent tool calculator skipped" in out
    assert "agent result calculator: (the tool call was skipped)" in out
    assert "agent stopped at tool_call calculator" in out
    assert "The answer is 5" not in out


def test_a_breakpoint_on_one_tool_only(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, "read my notes file", call={"kind": "tool_call", "name": "read_*"})
    pause = watch.pause(run.run)
    assert (pause.point.kind, pause.point.name) == ("tool_call", "read_file")
    assert pause.point.payload.struct_value.fields["path"].string_value == "notes.txt"
    client.send_debug_input(pause.key, "continue")
    watch.wait("the session's end", lambda e: e.HasField("session_ended") and e.session_id == pause.session_id)
    stops = [e for e in watch.seen if e.HasField("stopped") and e.stopped.pause.point.labels.get("run") == run.run]
    assert len(stops) == 1
    rc, out = go(run)
    assert rc == 0 and "The launch code is 0000." in out, out


def test_the_sub_agent_label_filter(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, "research stepd for me", call={"kind": "tool_call", "labels": "agent=sub"})
    pause = watch.pause(run.run)
    assert (pause.point.name, pause.point.labels["agent"]) == ("web_search", "sub")
    session = client.get_session(pause.session_id).session
    assert session.labels["agent"] == "sub" and session.name == "agent-test-sub"
    client.send_debug_input(pause.key, "inject", value={"query": "python"})
    rc, out = go(run)
    assert rc == 0, out
    # The main agent's research call did not hold; the sub-agent used the edit.
    assert len([e for e in watch.seen if e.HasField("stopped") and e.stopped.pause.point.labels.get("run") == run.run]) == 1
    assert "agent answer: The answer is Python is a programming language." in out


def test_observed_points_become_events(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, "research stepd for me")
    rc, out = go(run)
    assert rc == 0, out
    # Both probes flush their reports before they close; the sessions end after.
    ours: set[str] = set()
    ended: set[str] = set()

    def both_ended(e: event_pb2.Event) -> bool:
        if e.HasField("session_started") and e.session_started.session.labels.get("run") == run.run:
            ours.add(e.session_id)
        if e.HasField("session_ended") and e.session_id in ours:
            ended.add(e.session_id)
        return len(ended) == 2

    watch.wait("both sessions' end", both_ended)
    observed = [e.observed for e in watch.find(lambda e: e.HasField("observed"))]
    sources = [o for o in observed if o.kind == "web_source"]
    assert [s.value.struct_value.fields["url"].string_value for s in sources] == ["https://example.com/stepd"]
    assert list(sources[0].scope_path) == ["turn", "step", "tool"]
    assert sorted(o.name for o in observed if o.kind == "skill_loaded") == ["research", "web_search"]


def test_two_clients_racing_to_answer(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, prompt={"kind": "prompt"})
    pause = watch.pause(run.run, kind="prompt")
    results: list[str] = []
    barrier = threading.Barrier(2)

    def answer(name: str) -> None:
        with daemon.client(client_name=name) as c:
            barrier.wait()
            try:
                c.send_debug_input(pause.key, "continue")
                results.append("ok")
            except stepd.errors.AlreadyAnswered:
                results.append("ALREADY_ANSWERED")

    threads = [threading.Thread(target=answer, args=(f"racer-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(results) == ["ALREADY_ANSWERED", "ok"]
    assert watch.resolved(pause.key).by.startswith("uid:")  # the identity, not the name chosen
    rc, out = go(run)
    assert rc == 0, out


def test_a_probe_killed_while_held(daemon: Daemon, client: stepd.Client, watch: Watcher, agents: list[AgentRun]) -> None:
    run = start(daemon, agents, client, SIX_TIMES_SEVEN, prompt={"kind": "prompt"})
    pause = watch.pause(run.run, kind="prompt")
    run.proc.kill()  # SIGKILL
    resolved = watch.resolved(pause.key)
    assert resolved.by == "disconnect"
    ended = watch.wait("session_ended", lambda e: e.HasField("session_ended") and e.session_id == pause.session_id)
    assert ended.session_ended.reason == session_pb2.END_REASON_PROBE_DISCONNECTED
    # Nobody answered it: the pause ended with its session.
    with pytest.raises(stepd.errors.SessionEnded):
        client.send_debug_input(pause.key, "continue")


def test_the_hold_limit(tmp_path: Path, agents: list[AgentRun]) -> None:
    d = Daemon(tmp_path / "stepd", "--hold-limit", "500ms", unix_socket=False)
    try:
        with d.client() as c:
            w = Watcher(c)
            run_id = new_run()
            c.add_breakpoint(probe_kind="prompt", label_selector=f"run={run_id}")
            run = AgentRun(d.tcp, SIX_TIMES_SEVEN, run=run_id)
            agents.append(run)
            pause = w.pause(run.run, kind="prompt")
            resolved = w.resolved(pause.key, timeout=10)
            assert resolved.by == "hold-limit"
            assert w.find(lambda e: e.HasField("notification") and "limit" in e.notification.message)
            rc, out = run.finish()
            assert rc == 0 and "The answer is 42" in out, out
            w.close()
    finally:
        d.stop()


"""stepd.probe in this process against a real daemon: the condition vectors,
local decisions (no round trip for an unarmed point), threads, asyncio,
decorators, exception-only points, reports and drops, and a daemon restart."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import stepd
from conftest import REPO, Daemon, stepd_bin
from probe_support import DEADLINE, Watcher
from stepd.probe import ConditionError, Probe, compile_condition, compile_glob, evaluate
from stepd.v1 import pause_pb2

VECTORS = json.loads((REPO / "clients" / "testdata" / "conditions.json").read_text())
DECISIONS = json.loads((REPO / "clients" / "testdata" / "decisions.json").read_text())


@pytest.mark.parametrize("case", VECTORS["valid"], ids=lambda c: c["condition"])
def test_condition_vectors(case: dict[str, Any]) -> None:
    p = case["point"]
    assert evaluate(case["condition"], p["kind"], p["name"], p["value"], p.get("labels")) is case["result"]


@pytest.mark.parametrize("text", VECTORS["invalid"])
def test_malformed_conditions_are_rejected(text: str) -> None:
    with pytest.raises(ConditionError):
        compile_condition(text)


def test_the_daemon_validates_conditions_as_the_libraries_do(client: stepd.Client) -> None:
    """The daemon's validator (the Rust parser) accepts every valid vector
    and refuses every invalid one with INVALID_ARGUMENT, changing nothing."""
    before = len(client.list_breakpoints().breakpoints)
    added = []
    for case in VECTORS["valid"]:
        added.append(client.add_breakpoint(probe_kind="vector-check", condition=case["condition"]).breakpoint.id)
    for text in VECTORS["invalid"]:
        if not text:
            continue  # an empty condition is no condition
        with pytest.raises(stepd.errors.InvalidArgument):
            client.add_breakpoint(probe_kind="vector-check", condition=text)
    assert len(client.list_breakpoints().breakpoints) == before + len(VECTORS["valid"])
    for bp_id in added:
        client.remove_breakpoint(bp_id)


PATHOLOGICAL = VECTORS["pathological"]


def _built(parts: list[list[Any]]) -> str:
    return "".join(text * times for text, times in parts)


@pytest.mark.parametrize("case", PATHOLOGICAL["conditions"], ids=lambda c: c["about"])
def test_pathological_conditions(case: dict[str, Any]) -> None:
    """Inputs over the daemon's limits are refused here too, before they can
    exhaust the stack; those within them still evaluate."""
    text = _built(case["condition"])
    if not case["valid"]:
        with pytest.raises(ConditionError):
            compile_condition(text)
        return
    p = PATHOLOGICAL["point"]
    assert compile_condition(text)(p["kind"], p["name"], p["value"], {}) is case["result"]


@pytest.mark.parametrize("case", PATHOLOGICAL["globs"], ids=lambda c: c["about"])
def test_pathological_globs_match_in_bounded_time(case: dict[str, Any]) -> None:
    pattern, name = _built(case["glob"]), _built(case.get("name", []))
    started = time.monotonic()
    if case["valid"]:
        assert compile_glob(pattern)(name) is case["result"]
    else:
        with pytest.raises(ConditionError):
            compile_glob(pattern)
    assert time.monotonic() - started < PATHOLOGICAL["max_ms"] / 1000


def _reference_glob(pattern: str, name: str) -> bool:
    """The obvious backtracking matcher, over fnmatch's own translation, for
    small inputs only: the linear matcher must agree with it."""
    import fnmatch

    return re.fullmatch(fnmatch.translate(pattern.replace("[^", "[!")), name, re.S) is not None


def test_globs_agree_with_a_reference_on_small_inputs() -> None:
    import itertools
    import random

    rng = random.Random(7)
    alphabet = "ab*?"
    checked = 0
    for _ in range(3000):
        pattern = "".join(rng.choice(alphabet + "[]!-") for _ in range(rng.randint(0, 8)))
        name = "".join(rng.choice("ab?*") for _ in range(rng.randint(0, 8)))
        try:
            matcher = compile_glob(pattern)
        except ConditionError:
            continue
        if "[" in pattern or pattern in ("",):
            continue  # fnmatch reads some classes differently; the vectors cover them
        assert matcher(name) is _reference_glob(pattern, name), (pattern, name)
        checked += 1
    for pattern in map("".join, itertools.product("a*?", repeat=5)):
        for name in map("".join, itertools.product("ab", repeat=4)):
            assert compile_glob(pattern)(name) is _reference_glob(pattern, name), (pattern, name)
    assert checked > 1000


@pytest.mark.parametrize("case", DECISIONS["cases"], ids=lambda c: c["name"])
def test_decision_vectors(case: dict[str, Any]) -> None:
    """The decision table shared with the Go library: whether a point holds,
    and exactly which breakpoint ids its Hit reports (and whether it says it
    is outside the arming's request scope). A case with steps reaches its
    points in turn under the arming each decision leaves."""
    from stepd.probe._arming import _Arming, _OutsideScope, decide
    from stepd.v1 import breakpoint_pb2, probe_pb2

    armed = case["armed"]
    arming = _Arming.of(
        probe_pb2.Armed(
            mode=probe_pb2.ProbeMode.Value("PROBE_MODE_" + armed["mode"]),
            matchers=[probe_pb2.ArmedMatcher(**DECISIONS["matchers"][m]) for m in armed["matchers"]],
            depth=armed.get("depth", 0),
            target_coor=armed.get("target_coor", []),
            honour_breakpoints=armed["honour_breakpoints"],
            request_scope=[breakpoint_pb2.BaggageEntry(**e) for e in armed.get("request_scope", [])],
        )
    )
    for n, step in enumerate(case.get("steps", [case])):
        point = DECISIONS["points"][step["point"]]
        got, arming = decide(
            arming, point["kind"], point["name"], point["value"], point["depth"], list(point["coor"]), {}, point.get("baggage")
        )
        verdict = "pass" if got is None else "trace" if got is False else "hold"
        ids = got if isinstance(got, list) else []
        assert (verdict, list(ids)) == (step["verdict"], step["breakpoint_ids"]), n
        if verdict == "hold":
            assert isinstance(got, _OutsideScope) is step.get("outside_scope", False), n
        if "mode_after" in step:
            assert arming.mode == probe_pb2.ProbeMode.Value("PROBE_MODE_" + step["mode_after"]), n


@pytest.mark.parametrize(("mode", "after"), [("NONE", "BREAKPOINTS"), ("DEPTH", "STEP")])
def test_a_scoped_mode_ends_with_its_requests_scope_only(mode: str, after: str) -> None:
    """Another request leaving its scopes leaves a mode about one request as
    it was; that request's own scope ending ends it."""
    from opentelemetry import baggage, context

    import contextvars

    from stepd.probe._arming import _Arming
    from stepd.probe._probe import Probe
    from stepd.v1 import breakpoint_pb2, probe_pb2

    ana = [breakpoint_pb2.BaggageEntry(key="debug-session", value="ana")]
    # Only what scopes use: no stream.
    probe = Probe.__new__(Probe)
    probe._stack = contextvars.ContextVar("test-scopes", default=())
    probe._arming = _Arming.of(
        probe_pb2.Armed(mode=probe_pb2.ProbeMode.Value("PROBE_MODE_" + mode), depth=1, request_scope=ana)
    )
    for bag in ({}, {"debug-session": "bob"}):
        ctx = context.get_current()
        for key, value in bag.items():
            ctx = baggage.set_baggage(key, value, ctx)
        token = context.attach(ctx)
        with probe.scope("turn"):
            pass
        context.detach(token)
        assert probe._arming.mode == probe_pb2.ProbeMode.Value("PROBE_MODE_" + mode), bag
    token = context.attach(baggage.set_baggage("debug-session", "ana"))
    with probe.scope("turn"):
        pass
    context.detach(token)
    assert probe._arming.mode == probe_pb2.ProbeMode.Value("PROBE_MODE_" + after)
    # Back to breakpoints, the arming is about every request again; a step stays the request's.
    assert bool(probe._arming.scope) is (after == "STEP")


@pytest.mark.parametrize("mode", ["BREAKPOINTS", "STEP"])
def test_a_point_reads_the_requests_baggage_once(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """However many scoped breakpoints (and a request scope) a point is
    judged against, it reads the current context's baggage once."""
    from stepd.probe import _request_baggage
    from stepd.probe._arming import _Arming
    from stepd.probe._probe import Probe
    from stepd.v1 import breakpoint_pb2, probe_pb2

    reads = 0

    def counted() -> dict[str, object]:
        nonlocal reads
        reads += 1
        return {"debug-session": "ana"}

    monkeypatch.setattr(_request_baggage, "_from_otel", counted)
    ana = [breakpoint_pb2.BaggageEntry(key="debug-session", value="ana")]
    matchers = [
        probe_pb2.ArmedMatcher(breakpoint_id=f"bp-{i}", point_kind="tool", baggage=ana) for i in range(3)
    ]
    probe = Probe.__new__(Probe)
    probe.labels = {}
    probe._arming = _Arming.of(
        probe_pb2.Armed(
            mode=probe_pb2.ProbeMode.Value("PROBE_MODE_" + mode),
            matchers=matchers,
            honour_breakpoints=True,
            request_scope=ana if mode == "STEP" else [],
        )
    )
    ids = probe._decide("tool", "search", None, 1, [1])
    assert ids == ["bp-0", "bp-1", "bp-2"]
    assert reads == 1


@pytest.mark.parametrize(
    ("value", "text", "truncated"),
    [
        (5, "5", False),
        (None, "None", False),
        ("abc", "'abc'", False),
        ("x" * 400, "'" + "x" * 299, True),
        ([1, 2.5, None], "[1, 2.5, None]", False),
        (list(range(40)), "[" + ", ".join(map(str, range(30))) + ", ...]", True),
        ((7,), "(7,)", False),
        ({"a": [1]}, "{'a': [1]}", False),
    ],
)
def test_locals_are_displayed_bounded(value: Any, text: str, truncated: bool) -> None:
    from stepd.probe._frames import _display

    shown = _display(value)
    assert (shown.text, shown.truncated, shown.type) == (text, truncated, type(value).__name__)


def test_globs() -> None:
    assert compile_glob("web_*")("web_search") and not compile_glob("web_*")("xweb_search")
    assert compile_glob("[!a]?")("bc") and not compile_glob("[!a]?")("ac")
    assert compile_glob(r"a\*")("a*") and not compile_glob(r"a\*")("ab")
    assert compile_glob("")("anything") and compile_glob("Bash")("Bash") and not compile_glob("Bash")("bash")
    with pytest.raises(ConditionError):
        compile_glob("[abc")


# -- in-process probes -------------------------------------------------------------------------


@pytest.fixture
def probe(daemon: Daemon) -> Iterator[Probe]:
    run = uuid.uuid4().hex[:12]
    p = stepd.probe.connect(name="lib-test", labels={"run": run}, addr=daemon.tcp)
    assert p.connected, "the probe connected"
    yield p
    p.close()


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


def arm(client: stepd.Client, probe: Probe, **spec: Any) -> str:
    """Adds a probe breakpoint for this probe only and waits until the probe has it."""
    version = probe.arming_version
    bp = client.add_breakpoint(label_selector=f"run={probe.labels['run']}", **spec).breakpoint
    assert probe.wait_armed(version, DEADLINE)
    return bp.id


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


def test_an_unarmed_point_sends_nothing(probe: Probe, client: stepd.Client) -> None:
    sent: list[Any] = []
    real = probe._send

    def spy(message: Any) -> None:
        sent.append(message)
        real(message)

    probe._send = spy  # type: ignore[method-assign]
    try:
        with probe.scope("turn"):
            for i in range(1000):
                assert probe.hold("tool_call", name="Bash", value={"i": i}, editable=True) == {"i": i}
        # A breakpoint on another tool, or whose condition is false, decides locally too.
        arm(client, probe, probe_kind="tool_call", probe_name="Read", condition="value.i > 5000")
        for i in range(1000):
            probe.hold("tool_call", name="Bash", value={"i": i})
            probe.hold("tool_call", name="Read", value={"i": i})
    finally:
        probe._send = real  # type: ignore[method-assign]
    assert sent == []


def test_coordinates_scopes_and_a_pause_request(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    probe.hold("a")  # depth 0: a running index
    version = probe.arming_version

    def body() -> Any:
        with probe.scope("turn"):
            probe.observe("o", "x", 1)  # reports never count as points
            with probe.scope("step"):
                probe.hold("k", name="first")
                return probe.hold("k", name="second", value=[1, 2], editable=True, type_hint=list)

    # A Pause request arms step mode: the next point holds.
    client.pause(probe.session_id, wait=False)
    assert probe.wait_armed(version, DEADLINE)
    t, out = in_thread(body)
    pause = watch.pause(probe.labels["run"])
    assert (pause.point.name, list(pause.coor), list(pause.point.scope_path)) == ("first", [0, 0], ["turn", "step"])
    assert pause.reason == pause_pb2.PAUSE_REASON_HOLD
    client.send_debug_input(pause.key, "next")
    pause = watch.pause(probe.labels["run"])
    assert (pause.point.name, list(pause.coor)) == ("second", [1, 1])
    client.send_debug_input(pause.key, "inject", value=[3, 4, 5])
    t.join(DEADLINE)
    assert out == {"value": [3, 4, 5]}
    t, out = in_thread(lambda: probe.hold("after"))
    t.join(DEADLINE)
    assert out == {"value": None}  # INJECT went back to breakpoints only


def test_threads_hold_independently(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, probe_kind="work")
    threads = [in_thread(lambda i=i: probe.hold("work", f"w{i}", i, editable=True)) for i in range(2)]
    pauses = {p.point.name: p for p in (watch.pause(probe.labels["run"]) for _ in range(2))}
    assert set(pauses) == {"w0", "w1"}
    client.send_debug_input(pauses["w1"].key, "inject", value=10)
    threads[1][0].join(DEADLINE)
    assert threads[1][1] == {"value": 10}
    assert threads[0][0].is_alive()  # still held
    client.send_debug_input(pauses["w0"].key, "skip")
    threads[0][0].join(DEADLINE)
    assert isinstance(threads[0][1]["error"], stepd.Skipped)


def test_asyncio_holds_never_block_the_loop(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, probe_kind="model_request")

    @probe.point("model_request")
    async def call_model(model: str, effort: str = "low") -> str:
        await asyncio.sleep(0)
        return f"{model}/{effort}"

    async def main() -> tuple[str, int]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        async with probe.scope("turn"):
            result = await call_model("small")
        stop.set()
        await task
        return result, ticks

    answered: dict[str, Any] = {}

    def answer() -> None:
        pause = watch.pause(probe.labels["run"], kind="model_request")
        answered["pause"] = pause
        # The loop keeps running while held: EVAL is served by it, too.
        answered["eval"] = client.send_debug_input(pause.key, "eval", code="model + '!'").pause.debug_value.text
        client.send_debug_input(pause.key, "inject", value={"model": "large", "effort": "high"})

    t, _ = in_thread(answer)
    result, ticks = asyncio.run(main())
    t.join(DEADLINE)
    assert result == "large/high"
    assert answered["eval"] == "'small!'"
    assert ticks > 1
    assert list(answered["pause"].point.scope_path) == ["turn"]


def test_ahold_and_decorators(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, probe_kind="tool")

    @probe.point("tool")
    def add(a: int, b: int) -> int:
        return a + b

    @probe.point("tool", name="result_of_mul", on_result=True)
    def mul(a: int, b: int) -> int:
        return a * b

    t, out = in_thread(add, 1, 2)
    pause = watch.pause(probe.labels["run"], name="add")
    assert json.loads(pause.debug_value.text) == {"a": 1, "b": 2}
    client.send_debug_input(pause.key, "inject", value={"a": 40, "b": 2})
    t.join(DEADLINE)
    assert out == {"value": 42}

    t, out = in_thread(add, 1, 2)
    client.send_debug_input(watch.pause(probe.labels["run"], name="add").key, "skip")
    t.join(DEADLINE)
    assert isinstance(out["error"], stepd.Skipped)

    t, out = in_thread(mul, 6, 7)
    pause = watch.pause(probe.labels["run"], name="result_of_mul")
    assert pause.point.payload.number_value == 42
    client.send_debug_input(pause.key, "inject", value=43)
    t.join(DEADLINE)
    assert out == {"value": 43}

    async def coroutine() -> Any:
        return await probe.ahold("tool", name="async", value="x", editable=True)

    t, out = in_thread(asyncio.run, coroutine())
    client.send_debug_input(watch.pause(probe.labels["run"], name="async").key, "quit")
    t.join(DEADLINE)
    assert isinstance(out["error"], stepd.Stopped)


def test_exception_only_points(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, probe_kind="tool_error")

    def run(fail: bool) -> Any:
        secret = "in the frame"  # noqa: F841 - read by EVAL
        with probe.on_exception("tool_error", name="Bash") as point:
            if fail:
                raise ValueError("disk full")
            return "ran"
        return ("swallowed", point.value)

    assert run(False) == "ran"  # no exception: no point at all
    t, out = in_thread(run, True)
    pause = watch.pause(probe.labels["run"])
    assert pause.caught_msg == "disk full" and pause.reason == pause_pb2.PAUSE_REASON_EXCEPTION
    assert client.send_debug_input(pause.key, "eval", code="secret").pause.debug_value.text == "'in the frame'"
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    assert isinstance(out["error"], ValueError)  # CONTINUE re-raises
    t, out = in_thread(run, True)
    client.send_debug_input(watch.pause(probe.labels["run"]).key, "skip")
    t.join(DEADLINE)
    assert out == {"value": ("swallowed", None)}


def test_eval_can_be_refused(daemon: Daemon, client: stepd.Client, watch: Watcher) -> None:
    run = uuid.uuid4().hex[:12]
    with stepd.probe.connect(name="no-eval", labels={"run": run}, addr=daemon.tcp, eval=False) as p:
        arm(client, p, probe_kind="k")
        t, out = in_thread(p.hold, "k")
        pause = watch.pause(run)
        assert pause_pb2.COMMAND_KIND_EVAL not in pause.input_type
        client.send_debug_input(pause.key, "continue")
        t.join(DEADLINE)
        assert out == {"value": None}


def test_reports_are_batched_and_drops_become_a_gap(daemon: Daemon, client: stepd.Client, watch: Watcher) -> None:
    run = uuid.uuid4().hex[:12]
    with stepd.probe.connect(name="reports", labels={"run": run}, addr=daemon.tcp, buffer_size=100) as p:
        total = 20_000
        for i in range(total):
            p.observe("tick", "n", i)
        assert p.flush(DEADLINE)
        session = p.session_id
    watch.wait("session_ended", lambda e: e.HasField("session_ended") and e.session_id == session)
    observed = len(watch.find(lambda e: e.HasField("observed") and e.session_id == session))
    gaps = [e.gap.reason for e in watch.find(lambda e: e.HasField("gap") and e.session_id == session)]
    dropped = sum(int(r.split("dropped ")[1].split()[0]) for r in gaps)
    assert p.dropped_total > 0 and gaps
    assert observed + dropped == total and dropped == p.dropped_total


def test_no_daemon_means_no_holds(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    started = time.monotonic()
    with stepd.probe.connect(name="alone", addr=f"127.0.0.1:{port}") as p:
        assert not p.connected
        assert p.hold("k", value=1) == 1
        p.observe("o", "n", 1)
    # At once: a hold waiting for a daemon would last the 60 s reconnect
    # deadline; a loaded machine takes well under 15 s to go on.
    assert time.monotonic() - started < 15


def _start_fixed(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(stepd_bin()), "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir), "--no-unix-socket"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    assert line.startswith("stepd ready"), line
    return proc


def _kept_pause(c: stepd.Client, run: str) -> pause_pb2.Pause:
    """The pause of run `run`: in the first snapshot when the probe re-reported
    its hold before this subscription, else in the `stopped` event that follows."""
    with c.events() as sub:
        first = sub.next(timeout=DEADLINE)
        for pause in first.snapshot.pauses:
            if pause.point.labels.get("run") == run:
                return pause
        deadline = time.monotonic() + DEADLINE
        while True:
            event = sub.next(timeout=max(deadline - time.monotonic(), 0.01))
            if event.HasField("stopped") and event.stopped.pause.point.labels.get("run") == run:
                return event.stopped.pause


def test_a_hold_is_re_reported_to_a_restarted_daemon(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = f"127.0.0.1:{port}"
    proc = _start_fixed(tmp_path, port)
    try:
        with stepd.Client(addr) as c, stepd.probe.connect(name="kept", labels={"run": "kept"}, addr=addr) as p:
            w = Watcher(c)
            arm(c, p, probe_kind="k")
            t, out = in_thread(lambda: p.hold("k", "held", "original", editable=True))
            before = w.pause("kept")
            w.close()
            # The daemon dies while the point is held: the program keeps waiting.
            proc.kill()
            proc.wait()
            proc = _start_fixed(tmp_path, port)
            after = _kept_pause(c, "kept")
            assert after.original_id == before.original_id and after.key != before.key
            assert after.point.payload == before.point.payload
            assert t.is_alive() and out == {}
            c.send_debug_input(after.key, "inject", value="decided after the restart")
            t.join(DEADLINE)
            assert out == {"value": "decided after the restart"}
    finally:
        proc.kill()
        proc.wait()


def test_the_daemon_restarts_while_a_probe_is_connected(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = f"127.0.0.1:{port}"
    proc = _start_fixed(tmp_path, port)
    try:
        # Released at once when the stream drops (the explicit option; by
        # default the hold would wait for the daemon and be re-reported).
        probe = stepd.probe.connect(name="restart", labels={"run": "r"}, addr=addr, release_on_disconnect=True)
        with stepd.Client(addr) as c, probe as p:
            w = Watcher(c)
            arm(c, p, probe_kind="k")
            first_session = p.session_id
            t, out = in_thread(lambda: p.hold("k", "held", "original", editable=True))
            w.pause("r")
            w.close()
            # The daemon goes away while the point is held: it goes on, unchanged.
            proc.kill()
            proc.wait()
            t.join(DEADLINE)
            assert out == {"value": "original"}
            assert p.hold("k", value="while down") == "while down"  # disconnected: no hold
            version = p.arming_version
            proc = _start_fixed(tmp_path, port)
            # It reconnects by itself: a new session, armed with the stored breakpoint.
            assert p.wait_armed(version, DEADLINE)
            assert p.connections == 2 and p.session_id != first_session
            assert c.list_pauses().pauses == []  # the old hit was not re-sent
            w = Watcher(c)
            t, out = in_thread(lambda: p.hold("k", "again", "x", editable=True))
            pause = w.pause("r")
            c.send_debug_input(pause.key, "inject", value="edited")
            t.join(DEADLINE)
            assert out == {"value": "edited"}
            w.close()
    finally:
        proc.kill()
        proc.wait()

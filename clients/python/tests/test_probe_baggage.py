"""Breakpoints scoped to one request by its W3C baggage, against a real
daemon: the probe reads the request's baggage from the OpenTelemetry context
(or from what the program passes) and decides locally; the daemon refuses a
malformed selector with field violations; minting an entry."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Iterator

import pytest
from opentelemetry import baggage as otel_baggage
from opentelemetry import context as otel_context

import stepd
from conftest import Daemon
from probe_support import DEADLINE, Watcher
from stepd import errors
from stepd.probe import Probe
from stepd.probe._request_baggage import parse_header


@pytest.fixture
def probe(daemon: Daemon) -> Iterator[Probe]:
    p = stepd.probe.connect(name="baggage-test", labels={"run": uuid.uuid4().hex[:12]}, addr=daemon.tcp)
    assert p.wait_connected(DEADLINE), "the probe connected"
    yield p
    p.close()


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


def arm(client: stepd.Client, probe: Probe, **spec: Any) -> str:
    version = probe.arming_version
    bp = client.add_breakpoint(label_selector=f"run={probe.labels['run']}", **spec).breakpoint
    assert probe.wait_armed(version, DEADLINE)
    return bp.id


def in_request(entries: dict[str, str], fn: Any) -> Any:
    """Runs fn with entries as the current OpenTelemetry baggage, as a
    propagator leaves it for a request."""
    ctx = None
    for key, value in entries.items():
        ctx = otel_baggage.set_baggage(key, value, context=ctx)
    token = otel_context.attach(ctx) if ctx is not None else None
    try:
        return fn()
    finally:
        if token is not None:
            otel_context.detach(token)


def test_mint_baggage_makes_a_fresh_header_ready_entry() -> None:
    a, b = stepd.mint_baggage(), stepd.mint_baggage("tenant-debug")
    assert a.key == "debug-session" and len(a.value) == 16 and int(a.value, 16) >= 0
    assert a.header == f"baggage: debug-session={a.value}" and str(a) == f"debug-session={a.value}"
    assert b.key == "tenant-debug" and b.value != a.value


def test_parse_header_reads_what_a_propagator_would() -> None:
    assert parse_header("debug-session=ana;p=1, k2 = a%20b,broken, =x") == {"debug-session": "ana", "k2": "a b"}


def test_only_the_request_carrying_the_entry_holds(
    daemon: Daemon, probe: Probe, client: stepd.Client, watch: Watcher
) -> None:
    mine = stepd.mint_baggage()
    scoped = arm(client, probe, probe_kind="tool_call", probe_name="transfer", baggage=mine)
    run = probe.labels["run"]

    # Requests without baggage, or with someone else's, pass at once.
    assert probe.hold("tool_call", name="transfer", value=1) == 1
    other = stepd.mint_baggage()
    assert in_request({other.key: other.value}, lambda: probe.hold("tool_call", name="transfer", value=2)) == 2
    assert in_request({"tenant": mine.value}, lambda: probe.hold("tool_call", name="transfer", value=3)) == 3
    assert probe.hold("tool_call", name="transfer", value=4, baggage=str(other)) == 4

    # The request that carries it holds: from the OpenTelemetry context...
    out: dict[str, Any] = {}
    entries = {mine.key: mine.value, "other": "x"}
    t = threading.Thread(
        target=lambda: out.update(a=in_request(entries, lambda: probe.hold("tool_call", name="transfer", value=5))),
        daemon=True,
    )
    t.start()
    pause = watch.pause(run, name="transfer")
    assert list(pause.breakpoint_ids) == [scoped]
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    assert out == {"a": 5}

    # ... or from the header the program passes (properties and all).
    t = threading.Thread(
        target=lambda: out.update(b=probe.hold("tool_call", name="transfer", value=6, baggage=f"x=1,{mine};p=q")),
        daemon=True,
    )
    t.start()
    pause = watch.pause(run, name="transfer")
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    assert out["b"] == 6
    # The label selector still chooses the probes: one with other labels,
    # connected after the breakpoint (so its Welcome has the arming), never
    # holds, even in the request that carries the entry.
    elsewhere = stepd.probe.connect(name="baggage-test", labels={"run": uuid.uuid4().hex[:12]}, addr=daemon.tcp)
    try:
        assert elsewhere.wait_connected(DEADLINE)
        assert in_request(entries, lambda: elsewhere.hold("tool_call", name="transfer", value=7)) == 7
    finally:
        elsewhere.close()
    # Nothing else held in between.
    assert len(watch.find(lambda e: e.HasField("stopped") and e.stopped.pause.point.labels.get("run") == run)) == 2


def test_a_scoped_and_an_unscoped_breakpoint_on_one_point(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    mine = stepd.mint_baggage()
    scoped = arm(client, probe, probe_kind="tool_call", baggage={mine.key: mine.value}, condition="value.n > 1")
    everyone = arm(client, probe, probe_kind="tool_call", condition="value.n > 100")
    run = probe.labels["run"]
    # The scoped one's condition is false, the other's too: no hold, with or without the baggage.
    assert in_request({mine.key: mine.value}, lambda: probe.hold("tool_call", name="t", value={"n": 1})) == {"n": 1}
    # Another request where the unscoped one matches: it alone is reported.
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(a=probe.hold("tool_call", name="t", value={"n": 500})), daemon=True)
    t.start()
    pause = watch.pause(run, name="t")
    assert list(pause.breakpoint_ids) == [everyone]
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    # The scoped request with both conditions true reports both, in order.
    t = threading.Thread(
        target=lambda: out.update(b=in_request({mine.key: mine.value}, lambda: probe.hold("tool_call", name="t", value={"n": 500}))),
        daemon=True,
    )
    t.start()
    pause = watch.pause(run, name="t")
    assert list(pause.breakpoint_ids) == [scoped, everyone]
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    assert out == {"a": {"n": 500}, "b": {"n": 500}}


def test_a_malformed_selector_is_refused_field_by_field(client: stepd.Client) -> None:
    before = len(client.list_breakpoints().breakpoints)
    with pytest.raises(errors.InvalidArgument) as refused:
        client.add_breakpoint(probe_kind="tool_call", baggage={"bad key": "v", "ok": "a,b", "k": ""})
    fields = [v.field for v in refused.value.field_violations]
    assert fields == ["spec.probe.baggage[0].key", "spec.probe.baggage[1].value", "spec.probe.baggage[2].value"]
    assert len(client.list_breakpoints().breakpoints) == before

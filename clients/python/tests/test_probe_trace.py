"""Holds and Hellos carry the program's OpenTelemetry span (W3C Trace Context),
against a real daemon that traces: it exports to a port nobody listens on,
so spans are made and their ids stamped, and the ids it reports say which
parent it read. Jaeger end to end is tests/tests/otel.rs."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState, use_span

import stepd
from conftest import Daemon
from probe_support import DEADLINE, Watcher
from stepd.probe import Probe
from stepd.v1 import probe_pb2

TRACER = TracerProvider().get_tracer("stepd-probe-test")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "OTEL_EXPORTER_OTLP_TIMEOUT": "200"}
    d = Daemon(tmp_path_factory.mktemp("stepd-traced"), env=env)
    yield d
    d.stop()


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


def connected(daemon: Daemon, **options: Any) -> Probe:
    p = stepd.probe.connect(name="trace-test", labels={"run": uuid.uuid4().hex[:12]}, addr=daemon.tcp, **options)
    assert p.wait_connected(DEADLINE)
    return p


def arm(client: stepd.Client, probe: Probe) -> None:
    version = probe.arming_version
    client.add_breakpoint(label_selector=f"run={probe.labels['run']}", probe_kind="tool_call")
    assert probe.wait_armed(version, DEADLINE)


def hex_ids(sc: SpanContext) -> tuple[str, str]:
    return f"{sc.trace_id:032x}", f"{sc.span_id:016x}"


def traceparent(sc: SpanContext) -> str:
    # The SDK's spans may set flags beyond "sampled" (its random trace-id bit).
    trace, span = hex_ids(sc)
    return f"00-{trace}-{span}-{int(sc.trace_flags):02x}"


def held(probe: Probe, client: stepd.Client, watch: Watcher, hold: Any) -> tuple[probe_pb2.Hit, Any]:
    """Runs `hold` (which holds once) in a thread; the Hit it sent and its pause."""
    hits: list[probe_pb2.Hit] = []
    real = probe._send

    def spy(message: Any) -> None:
        if isinstance(message, probe_pb2.ConnectRequest) and message.HasField("hit"):
            hits.append(message.hit)
        real(message)

    probe._send = spy  # type: ignore[method-assign]
    try:
        t = threading.Thread(target=hold, daemon=True)
        t.start()
        pause = watch.pause(probe.labels["run"])
        client.send_debug_input(pause.key, "continue")
        t.join(DEADLINE)
        assert not t.is_alive()
    finally:
        probe._send = real  # type: ignore[method-assign]
    assert len(hits) == 1
    return hits[0], pause


def test_a_hold_carries_the_current_span(daemon: Daemon, client: stepd.Client, watch: Watcher) -> None:
    probe = connected(daemon)
    try:
        arm(client, probe)

        box: dict[str, Any] = {}

        def hold_and_keep() -> None:
            with TRACER.start_as_current_span("request") as span:
                box["span"] = span.get_span_context()
                probe.hold("tool_call", name="transfer", value={"to": "b"})

        hit, pause = held(probe, client, watch, hold_and_keep)
        trace, span = hex_ids(box["span"])
        assert hit.traceparent == traceparent(box["span"])
        assert hit.tracestate == ""
        # The daemon made the pause's span a child in the program's trace.
        assert pause.trace_id == trace
        assert len(pause.span_id) == 16 and pause.span_id != span

        # Outside any span a hold carries none: the pause is in the session's trace.
        hit, pause = held(probe, client, watch, lambda: probe.hold("tool_call", name="x"))
        assert (hit.traceparent, hit.tracestate) == ("", "")
        session = client.get_session(pause.session_id).session
        assert pause.trace_id == session.trace_id != trace
    finally:
        probe.close()


def test_tracestate_and_an_explicit_traceparent(daemon: Daemon, client: stepd.Client, watch: Watcher) -> None:
    probe = connected(daemon)
    try:
        arm(client, probe)
        remote = SpanContext(
            trace_id=0x0AF7651916CD43DD8448EB211C80319C,
            span_id=0xB7AD6B7169203331,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=TraceState([("vendor", "x")]),
        )

        def in_remote() -> None:
            with use_span(NonRecordingSpan(remote)):
                probe.hold("tool_call", name="a")

        hit, pause = held(probe, client, watch, in_remote)
        assert hit.traceparent == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert hit.tracestate == "vendor=x"
        assert pause.trace_id == "0af7651916cd43dd8448eb211c80319c"

        explicit = "00-11111111111111111111111111111111-2222222222222222-01"

        def overridden() -> None:
            with use_span(NonRecordingSpan(remote)):
                probe.hold("tool_call", name="b", traceparent=explicit)

        hit, pause = held(probe, client, watch, overridden)
        assert (hit.traceparent, pause.trace_id) == (explicit, "1" * 32)

        # A malformed one is the probe's to send and the daemon's to ignore.
        hit, pause = held(probe, client, watch, lambda: probe.hold("tool_call", name="c", traceparent="00-zz-01"))
        assert pause.trace_id == client.get_session(pause.session_id).session.trace_id
    finally:
        probe.close()


def test_an_ahold_carries_its_tasks_span(daemon: Daemon, client: stepd.Client, watch: Watcher) -> None:
    probe = connected(daemon)
    try:
        arm(client, probe)
        box: dict[str, Any] = {}

        async def main() -> None:
            with TRACER.start_as_current_span("request") as span:
                box["span"] = span.get_span_context()
                await probe.ahold("tool_call", name="async")

        hit, pause = held(probe, client, watch, lambda: asyncio.run(main()))
        trace, _ = hex_ids(box["span"])
        assert hit.traceparent == traceparent(box["span"])
        assert pause.trace_id == trace
    finally:
        probe.close()


def test_hello_carries_the_span_at_connect(daemon: Daemon, client: stepd.Client) -> None:
    with TRACER.start_as_current_span("startup") as span:
        trace, _ = hex_ids(span.get_span_context())
        probe = connected(daemon)
    try:
        assert client.get_session(probe.session_id).session.trace_id == trace
    finally:
        probe.close()
    explicit = "00-33333333333333333333333333333333-4444444444444444-01"
    probe = connected(daemon, traceparent=explicit)
    try:
        assert client.get_session(probe.session_id).session.trace_id == "3" * 32
    finally:
        probe.close()


def test_without_the_opentelemetry_api_a_probe_works_as_before(daemon: Daemon, tmp_path: Path) -> None:
    # A fresh interpreter where `import opentelemetry` fails.
    program = tmp_path / "no_otel.py"
    program.write_text(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import stepd.probe\n"
        "from stepd.probe import _trace\n"
        "assert _trace._otel is None\n"
        "assert _trace.current() == ('', '')\n"
        "p = stepd.probe.connect(name='no-otel', addr=sys.argv[1])\n"
        "assert p.wait_connected(20)\n"
        "assert p._hello_trace == (sys.argv[2], '')\n"
        "assert p.hold('tool_call', name='x', value=1) == 1\n"
        "p.close()\n"
        "print('ok')\n"
    )
    parent = "00-55555555555555555555555555555555-6666666666666666-01"
    env = {**os.environ, "TRACEPARENT": parent}
    env.pop("TRACESTATE", None)
    out = subprocess.run(
        [sys.executable, str(program), daemon.tcp, parent], env=env, capture_output=True, text=True, timeout=DEADLINE
    )
    assert (out.returncode, out.stdout.strip()) == (0, "ok"), out.stderr

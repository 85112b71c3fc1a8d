"""Holds the program gives up on (a cancelled ``ahold``, an interrupted
``hold``) and INJECT values refused by a point's JSON Schema, against a real
daemon."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import stepd
from stepd import errors
from conftest import Daemon
from probe_support import DEADLINE, Watcher
from stepd.probe import Probe
from stepd.v1 import pause_pb2


@pytest.fixture
def probe(daemon: Daemon) -> Iterator[Probe]:
    p = stepd.probe.connect(name="holds-test", labels={"run": uuid.uuid4().hex[:12]}, addr=daemon.tcp)
    assert p.wait_connected(DEADLINE), "the probe connected"
    yield p
    p.close()


@pytest.fixture
def watch(client: stepd.Client) -> Iterator[Watcher]:
    w = Watcher(client)
    yield w
    w.close()


def arm(client: stepd.Client, probe: Probe, **spec: Any) -> None:
    version = probe.arming_version
    client.add_breakpoint(label_selector=f"run={probe.labels['run']}", **spec)
    assert probe.wait_armed(version, DEADLINE)


def assert_withdrawn(client: stepd.Client, watch: Watcher, pause: pause_pb2.Pause) -> None:
    resolved = watch.resolved(pause.key)
    assert (resolved.by, resolved.command) == ("withdrawn", pause_pb2.COMMAND_KIND_UNSPECIFIED)
    # Nobody can answer a hold the program no longer waits for.
    with pytest.raises((errors.AlreadyAnswered, errors.PauseNotFound)):
        client.send_debug_input(pause.key, "continue")
    assert pause.key not in [p.key for p in client.list_pauses(pause.session_id).pauses]


def test_a_cancelled_ahold_is_withdrawn(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, probe_kind="tool")
    started = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> str:
        box["loop"] = asyncio.get_running_loop()
        box["cancel"] = cancel = asyncio.Event()
        task = asyncio.ensure_future(probe.ahold("tool", name="slow", value={"n": 1}, editable=True))
        started.set()
        await cancel.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "not cancelled"

    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(result=asyncio.run(main())), daemon=True)
    t.start()
    assert started.wait(DEADLINE)
    pause = watch.pause(probe.labels["run"], name="slow")
    box["loop"].call_soon_threadsafe(box["cancel"].set)
    t.join(DEADLINE)
    assert out == {"result": "cancelled"}
    assert_withdrawn(client, watch, pause)

    # The probe holds and is answered as before.
    t = threading.Thread(target=lambda: out.update(result=probe.hold("tool", name="next", value=2)), daemon=True)
    t.start()
    client.send_debug_input(watch.pause(probe.labels["run"], name="next").key, "continue")
    t.join(DEADLINE)
    assert out == {"result": 2}


INTERRUPTED = """
import signal
import sys
import stepd
from stepd import errors

# Ctrl-C as Python handles it by default, even when the test runs in the
# background, where the shell starts every process with SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

probe = stepd.probe.connect(name="interrupted", labels={"run": sys.argv[2]}, addr=sys.argv[1])
assert probe.wait_connected(20)
try:
    probe.hold("tool", name="held", value=1)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
sys.stdin.readline()  # the test has seen the pause resolve
probe.close()
"""


def start_held(
    daemon: Daemon, client: stepd.Client, script: Path, source: str
) -> tuple[str, subprocess.Popen[str]]:
    """Arms a tool point for a fresh run and starts `source` as that run's program."""
    run = uuid.uuid4().hex[:12]
    client.add_breakpoint(probe_kind="tool", label_selector=f"run={run}")
    script.write_text(source)
    proc = subprocess.Popen(
        [sys.executable, str(script), daemon.tcp, run],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return run, proc


def test_an_interrupted_hold_is_withdrawn(daemon: Daemon, client: stepd.Client, watch: Watcher, tmp_path: Path) -> None:
    run, proc = start_held(daemon, client, tmp_path / "interrupted.py", INTERRUPTED)
    try:
        pause = watch.pause(run, name="held")
        proc.send_signal(signal.SIGINT)  # Ctrl-C while the main thread is held
        try:
            assert_withdrawn(client, watch, pause)
        except (AssertionError, TimeoutError) as failed:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{failed}; the program said {out!r}, {err!r}") from failed
        out, err = proc.communicate("\n", timeout=DEADLINE)
        assert proc.returncode == 0, err
        assert out.strip() == "interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


INTERRUPTED_ELSEWHERE = """
import signal
import sys
import threading
import stepd

signal.signal(signal.SIGINT, signal.default_int_handler)

def interrupt_from_here():
    sys.stdin.readline()
    # The kernel may hand a process's SIGINT to any thread; this one takes it.
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

probe = stepd.probe.connect(name="interrupted", labels={"run": sys.argv[2]}, addr=sys.argv[1])
assert probe.wait_connected(20)
threading.Thread(target=interrupt_from_here, daemon=True).start()
try:
    probe.hold("tool", name="held", value=1)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
sys.stdin.readline()  # the test has seen the pause resolve
probe.close()
"""


def test_a_hold_is_withdrawn_when_another_thread_takes_the_interrupt(
    daemon: Daemon, client: stepd.Client, watch: Watcher, tmp_path: Path
) -> None:
    run, proc = start_held(daemon, client, tmp_path / "interrupted_elsewhere.py", INTERRUPTED_ELSEWHERE)
    try:
        pause = watch.pause(run, name="held")
        assert proc.stdin is not None
        proc.stdin.write("interrupt\n")
        proc.stdin.flush()
        assert_withdrawn(client, watch, pause)
        out, err = proc.communicate("\n", timeout=DEADLINE)
        assert proc.returncode == 0, err
        assert out.strip() == "interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_inject_violations_are_field_violations(probe: Probe, client: stepd.Client, watch: Watcher) -> None:
    arm(client, probe, probe_kind="tool")
    schema = {
        "type": "object",
        "required": ["cmd"],
        "properties": {
            "cmd": {"type": "string", "pattern": "^(ls|pwd)( |$)"},
            "notify": {"type": "string", "format": "email"},
            "mode": {"oneOf": [{"const": "fast"}, {"type": "integer", "minimum": 1}]},
        },
    }
    out: dict[str, Any] = {}
    value = {"cmd": "ls", "notify": "ops@example.com", "mode": "fast"}
    t = threading.Thread(
        target=lambda: out.update(result=probe.hold("tool", name="Bash", value=value, editable=True, schema=schema)),
        daemon=True,
    )
    t.start()
    pause = watch.pause(probe.labels["run"], name="Bash")
    with pytest.raises(errors.InvalidValue) as refused:
        client.send_debug_input(pause.key, "inject", value={"cmd": "rm -rf /", "notify": "nobody", "mode": 0})
    violations = {(v.field, v.reason) for v in refused.value.field_violations}
    assert violations == {
        ("command.inject.value.cmd", "INVALID_VALUE"),
        ("command.inject.value.notify", "INVALID_VALUE"),
        ("command.inject.value.mode", "INVALID_VALUE"),
    }
    assert all(v.description for v in refused.value.field_violations)
    # The pause stays, and a value that fits goes to the program.
    assert [p.key for p in client.list_pauses(probe.session_id).pauses] == [pause.key]
    client.send_debug_input(pause.key, "inject", value={"cmd": "pwd", "notify": "me@example.com", "mode": 2})
    t.join(DEADLINE)
    assert out == {"result": {"cmd": "pwd", "notify": "me@example.com", "mode": 2}}


def test_a_hold_past_the_daemons_limit_goes_on_at_once(tmp_path: Path) -> None:
    d = Daemon(tmp_path / "stepd", "--max-probe-pauses", "1", unix_socket=False)
    try:
        p = stepd.probe.connect(name="limits-test", labels={"run": uuid.uuid4().hex[:12]}, addr=d.tcp)
        try:
            assert p.wait_connected(DEADLINE), "the probe connected"
            with d.client() as c:
                arm(c, p, probe_kind="tool")
                w = Watcher(c)
                try:
                    first: dict[str, Any] = {}
                    t = threading.Thread(target=lambda: first.update(value=p.hold("tool", name="a", value=1)), daemon=True)
                    t.start()
                    pause = w.pause(p.labels["run"], name="a")
                    # The second hold is refused by the daemon: the program goes on with its value.
                    with pytest.warns(RuntimeWarning, match="did not hold"):
                        assert p.hold("tool", name="b", value=2) == 2
                    assert p.refused_total == 1
                    # The first is still held, and answered as usual.
                    c.send_debug_input(pause.key, "continue")
                    t.join(DEADLINE)
                    assert first == {"value": 1}
                finally:
                    w.close()
        finally:
            p.close()
    finally:
        d.stop()


def test_print_value_streams_a_held_value_and_its_errors_hold_no_call(
    probe: Probe, client: stepd.Client, watch: Watcher
) -> None:
    arm(client, probe, probe_kind="tool")
    value = {"query": "x" * 5000, "n": 7}
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(result=probe.hold("tool", name="print", value=value)), daemon=True)
    t.start()
    pause = watch.pause(probe.labels["run"], name="print")
    inspector = client.inspect(pause.session_id, pause_value=pause.key).rendering.inspector_id
    chunks = list(client.print_value(inspector, chunk_size=1024))
    assert len(chunks) > 1 and chunks[-1].last and not any(c.last for c in chunks[:-1])
    assert json.loads("".join(c.chunk for c in chunks)) == value
    with pytest.raises(errors.InspectorNotFound) as info:
        list(client.print_value("no-such-inspector"))
    # The typed error keeps nothing of grpc's call (errors.from_stream_call).
    assert info.value.__cause__ is None and info.value.__context__ is None
    client.send_debug_input(pause.key, "continue")
    t.join(DEADLINE)
    assert out == {"result": value}

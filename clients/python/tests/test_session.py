"""The Session handle over a real debugpy session: its methods, and that
leaving its block on an exception leaves no debuggee behind."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

import stepd
import stepd.aio
from conftest import REPO, Daemon
from probe_support import wait_until
from stepd.v1 import session_pb2

LOOP = REPO / "tests" / "fixtures" / "python" / "loop.py"
DEADLINE = 30.0


def line_of(path: Path, marker: str) -> int:
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if f"LINE: {marker}" in text:
            return number
    raise AssertionError(f"no marker {marker} in {path}")


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is gone: it runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def at_step(client: stepd.Client) -> Iterator[str]:
    """A breakpoint on the loop fixture's `step` line."""
    bp = client.add_breakpoint(path=str(LOOP), line=line_of(LOOP, "step")).breakpoint
    yield bp.id
    try:
        client.remove_breakpoint(bp.id)
    except stepd.errors.BreakpointNotFound:
        pass


def test_session_steps_evaluates_and_reads_output(client: stepd.Client, at_step: str) -> None:
    with client.launch(str(LOOP), adapter="debugpy") as session:
        # It still reads as the LaunchResponse it was before.
        assert isinstance(session.response, session_pb2.LaunchResponse)
        assert session.session.id == session.id
        assert [p.breakpoint_id for p in session.breakpoints] == [at_step]

        pause = session.wait_for_pause(DEADLINE)
        assert pause.reason == "BREAKPOINT" and pause.reason != "STEP"
        assert repr(pause.reason) == "PauseReason.BREAKPOINT"
        assert "reason=PauseReason.BREAKPOINT" in repr(pause) and "loop.py:" in repr(pause)
        assert session.locals() == {**session.locals(), "i": "0", "items": "[0, 1, 2]"}

        assert session.eval("i + 41") == "41"
        resent = session.wait_for_pause(DEADLINE)  # the same pause, re-sent with the result
        assert (resent.key, resent.revision) == (pause.key, pause.revision + 1)
        assert resent.debug_value.text == "41"

        stepped = session.step("over")
        assert stepped.stop_reason == "STEP" and repr(stepped.stop_reason) == "PauseReason.STEP"
        assert stepped.pause is not None and stepped.pause.location.line == line_of(LOOP, "step_return")
        assert session.wait_for_pause(DEADLINE).key == stepped.pause.key

        hit = session.continue_()
        assert hit.state == "STOPPED" and hit.stop_reason == "BREAKPOINT"
        assert hit.pause is not None and hit.pause.locals["i"] == "1"
        assert session.wait_for_pause(DEADLINE).key == hit.pause.key

        client.remove_breakpoint(at_step)
        ended = session.continue_()
        assert ended.state == "ENDED" and ended.end_reason == "EXITED"
        with pytest.raises(EOFError):
            session.wait_for_pause(DEADLINE)
        wait_until("the last output", lambda: "done total=20" in session.output())
        assert "i=0 total=0" in session.output(["stdout"])


def test_pause_interrupts_the_running_program(client: stepd.Client) -> None:
    busy = REPO / "tests" / "fixtures" / "python" / "busy.py"
    with client.launch(str(busy), adapter="debugpy") as session:
        state = session.pause()
        assert state.state == "STOPPED" and state.stop_reason == "PAUSE_REQUEST"
        assert state.pause is not None and session.wait_for_pause(DEADLINE).key == state.pause.key
        assert session.state == "STOPPED"
        # The pid known now: the one Launch answered may be 0 until the
        # adapter reports the process.
        pid = session.info().pid
        assert pid > 0 and alive(pid)
    # Leaving the block terminated the program, which would have run for a minute.
    wait_until(f"debuggee {pid} gone", lambda: not alive(pid), DEADLINE)
    assert session.info().state == session_pb2.SESSION_STATE_ENDED


CRASHING = textwrap.dedent(
    """
    import sys
    import stepd

    client = stepd.Client(sys.argv[1])
    if sys.argv[3] == "with":
        with client.launch(sys.argv[2], adapter="debugpy") as session:
            session.wait_for_pause(30)
            print(session.pid, flush=True)
            raise RuntimeError("the script fails while its debuggee is stopped")
    else:
        session = client.launch(sys.argv[2], adapter="debugpy")
        session.wait_for_pause(30)
        print(session.pid, flush=True)
        raise RuntimeError("the script fails while its debuggee is stopped")
    """
)


def crash(daemon: Daemon, how: str) -> int:
    """Runs a script that launches the loop, stops at the breakpoint and raises; the debuggee's pid."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", CRASHING, daemon.tcp, str(LOOP), how],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "the script fails" in result.stderr, result.stderr
    pid = int(result.stdout.split()[0])
    assert pid > 0
    return pid


def test_an_exception_in_the_block_leaves_no_debuggee(daemon: Daemon, client: stepd.Client, at_step: str) -> None:
    pid = crash(daemon, "with")
    wait_until(f"debuggee {pid} gone", lambda: not alive(pid), DEADLINE)
    stopped = [s for s in client.list_sessions().sessions if s.pid == pid]
    assert stopped == [], stopped


def test_without_the_block_the_debuggee_stays_stopped(daemon: Daemon, client: stepd.Client, at_step: str) -> None:
    # What the block prevents: the script is gone, its debuggee still stopped.
    pid = crash(daemon, "plain")
    try:
        assert alive(pid)
        [session] = [s for s in client.list_sessions().sessions if s.pid == pid]
        assert session.state == session_pb2.SESSION_STATE_STOPPED
    finally:
        for s in client.list_sessions().sessions:
            if s.pid == pid:
                client.disconnect(s.id, mode="terminate")
    wait_until(f"debuggee {pid} gone", lambda: not alive(pid), DEADLINE)


def test_the_asyncio_session_ends_its_debuggee_on_an_exception(daemon: Daemon, at_step: str) -> None:
    pids: list[int] = []

    async def main() -> None:
        async with stepd.aio.Client(daemon.tcp) as client:
            with pytest.raises(RuntimeError, match="fails"):
                async with await client.launch(str(LOOP), adapter="debugpy") as session:
                    assert session.session.id == session.id
                    pause = await session.wait_for_pause(DEADLINE)
                    assert pause.reason == "BREAKPOINT"
                    assert (await session.locals())["i"] == "0"
                    assert await session.eval("i + 1") == "1"
                    assert (await session.wait_for_pause(DEADLINE)).revision == pause.revision + 1
                    stepped = await session.step()
                    assert stepped.stop_reason == "STEP" and stepped.pause is not None
                    assert (await session.wait_for_pause(DEADLINE)).key == stepped.pause.key
                    pids.append((await session.info()).pid)
                    raise RuntimeError("the coroutine fails while its debuggee is stopped")

    asyncio.run(main())
    [pid] = pids
    assert pid > 0
    wait_until(f"debuggee {pid} gone", lambda: not alive(pid), DEADLINE)

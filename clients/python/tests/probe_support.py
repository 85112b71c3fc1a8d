"""Helpers of the probe tests: the example agent as a separate process, and an
event watcher that waits for pauses with deadlines (never sleeps)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Callable, Iterator

import stepd
from conftest import REPO
from stepd.v1 import event_pb2, pause_pb2

AGENT = REPO / "examples" / "agent_loop" / "agent.py"
DEADLINE = 20.0


class Watcher:
    """One Subscribe stream; keeps every event so tests can wait for any of them."""

    def __init__(self, client: stepd.Client) -> None:
        self.client = client
        self.sub = client.events()
        self.seen: list[event_pb2.Event] = []
        self._pos = 0
        first = self.sub.next(timeout=DEADLINE)
        assert first.HasField("snapshot")

    def close(self) -> None:
        self.sub.close()

    def _events(self, deadline: float) -> Iterator[event_pb2.Event]:
        while True:
            while self._pos < len(self.seen):
                self._pos += 1
                yield self.seen[self._pos - 1]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no matching event in time")
            self.seen.append(self.sub.next(timeout=remaining))

    def wait(self, what: str, match: Callable[[event_pb2.Event], bool], timeout: float = DEADLINE) -> event_pb2.Event:
        """The next event (after those already consumed) that matches."""
        try:
            for event in self._events(time.monotonic() + timeout):
                if match(event):
                    return event
        except TimeoutError:
            kinds = [e.WhichOneof("payload") for e in self.seen[-20:]]
            raise TimeoutError(f"no {what} within {timeout} s; last events: {kinds}") from None
        raise AssertionError("unreachable")

    def pause(self, run: str | None = None, timeout: float = DEADLINE, **point: str) -> pause_pb2.Pause:
        """The next new pause (revision 0) of run `run`, optionally of a point kind/name."""

        def match(e: event_pb2.Event) -> bool:
            if not e.HasField("stopped") or e.stopped.pause.revision != 0:
                return False
            p = e.stopped.pause
            if run is not None and p.point.labels.get("run") != run:
                return False
            return all(getattr(p.point, k) == v for k, v in point.items())

        return self.wait(f"pause {point or ''}", match, timeout).stopped.pause

    def resolved(self, key: str, timeout: float = DEADLINE) -> event_pb2.PauseResolved:
        return self.wait(
            f"pause_resolved {key}", lambda e: e.HasField("pause_resolved") and e.pause_resolved.key == key, timeout
        ).pause_resolved

    def find(self, match: Callable[[event_pb2.Event], bool]) -> list[event_pb2.Event]:
        """Every event received so far that matches."""
        return [e for e in self.seen if match(e)]

    def count(self, kind: str, after: int = 0) -> int:
        return sum(1 for e in self.seen[after:] if e.WhichOneof("payload") == kind)


def new_run() -> str:
    """A run id: the label that ties breakpoints to one agent process."""
    return uuid.uuid4().hex[:12]


class AgentRun:
    """The example agent, run as a separate process against the test daemon."""

    def __init__(self, addr: str, *questions: str, name: str = "agent-test", run: str = "") -> None:
        self.run = run or new_run()
        env = {**os.environ, "STEPD_ADDR": addr, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, str(AGENT), *questions, "--name", name, "--label", f"run={self.run}"]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @property
    def selector(self) -> str:
        return f"run={self.run}"

    def finish(self, timeout: float = DEADLINE) -> tuple[int, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"the agent did not finish: {out}\n{err}") from None
        return self.proc.returncode, out + err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def wait_until(what: str, check: Callable[[], bool], timeout: float = DEADLINE) -> None:
    """Polls a local condition (no daemon event exists for it) with a deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout} s")
        time.sleep(0.005)


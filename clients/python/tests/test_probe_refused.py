"""A probe whose credentials the daemon refuses tells its program once — a
warning on the ``stepd.probe`` logger and ``on_refused`` — and keeps trying
at its longest backoff, never in a busy loop; against a real stepd started
with --auth-tokens and a wrong, an expired and a revoked token."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import stepd
from conftest import Daemon, stepd_bin
from stepd.errors import StepdError, TokenExpired, Unauthenticated
from stepd.probe import Probe

WAIT = 20.0
#: The probe's backoff here: short, so a busy loop and a patient one differ
#: within a second.
BACKOFF = (0.05, 0.25)


def add_token(tokens: Path, name: str, role: str) -> str:
    out = subprocess.run(
        [str(stepd_bin()), "token", "add", name, role, "--file", str(tokens)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Daemon, Path]]:
    tokens = tmp_path / "tokens"
    add_token(tokens, "admin", "admin")
    daemon = Daemon(tmp_path / "data", "--auth-tokens", str(tokens), unix_socket=False)
    yield daemon, tokens
    daemon.stop()


class Told:
    """What the program was told, from the probe's thread."""

    def __init__(self) -> None:
        self.errors: list[StepdError] = []
        self.cond = threading.Condition()

    def __call__(self, err: StepdError) -> None:
        with self.cond:
            self.errors.append(err)
            self.cond.notify_all()

    def first(self) -> StepdError:
        with self.cond:
            assert self.cond.wait_for(lambda: self.errors, timeout=WAIT), "the program was never told"
            return self.errors[0]


def refused_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "stepd.probe" and "refuses its credentials" in r.getMessage()]


def keeps_trying_patiently(probe: Probe) -> None:
    """Three more attempts come (it keeps trying), and not many more than
    the backoff allows in the time they took (no busy loop)."""
    start, before = time.monotonic(), probe.attempts
    deadline = start + WAIT
    while probe.attempts < before + 3:
        assert time.monotonic() < deadline, "the probe stopped trying"
        time.sleep(0.05)
    # Wait one more backoff's worth, then count.
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        time.sleep(0.05)
    took = time.monotonic() - start
    made = probe.attempts - before
    assert made <= took / BACKOFF[1] + 3, f"{made} attempts in {took:.2f} s"


def test_a_wrong_token_is_told_once(secured: tuple[Daemon, Path], caplog: pytest.LogCaptureFixture) -> None:
    daemon, _ = secured
    caplog.set_level(logging.WARNING, logger="stepd.probe")
    told = Told()
    with stepd.probe.connect("wrong-token", addr=daemon.tcp, token="not-a-token", on_refused=told, backoff=BACKOFF) as probe:
        err = told.first()
        assert isinstance(err, Unauthenticated), repr(err)
        assert probe.refusal is err and not probe.connected
        keeps_trying_patiently(probe)
        assert len(told.errors) == 1, told.errors
        assert len(refused_lines(caplog)) == 1, refused_lines(caplog)
        assert "UNAUTHENTICATED" in refused_lines(caplog)[0]


def test_an_expired_token_is_told_once(secured: tuple[Daemon, Path], caplog: pytest.LogCaptureFixture) -> None:
    daemon, tokens = secured
    caplog.set_level(logging.WARNING, logger="stepd.probe")
    token = add_token(tokens, "old-probe", "probe")
    lines = tokens.read_text().splitlines()
    tokens.write_text("".join(line + (" expires=2001-01-01T00:00:00Z" if line.startswith("old-probe ") else "") + "\n" for line in lines))
    # Once the daemon has read the edited file (it watches it).
    deadline = time.monotonic() + WAIT
    with stepd.Client(daemon.tcp, token=token) as client:
        while True:
            try:
                client.ping()
            except TokenExpired:
                break
            assert time.monotonic() < deadline, "the expiry was never read"
            time.sleep(0.05)
    told = Told()
    with stepd.probe.connect("expired", addr=daemon.tcp, token=token, on_refused=told, backoff=BACKOFF) as probe:
        err = told.first()
        assert isinstance(err, TokenExpired), repr(err)
        assert err.metadata.get("identity") == "token:old-probe"
        keeps_trying_patiently(probe)
        assert len(told.errors) == 1 and len(refused_lines(caplog)) == 1


def test_a_token_revoked_while_connected_is_told_once(secured: tuple[Daemon, Path], caplog: pytest.LogCaptureFixture) -> None:
    daemon, tokens = secured
    caplog.set_level(logging.WARNING, logger="stepd.probe")
    token = add_token(tokens, "agent", "probe")
    told = Told()
    with stepd.probe.connect("revoked", addr=daemon.tcp, token=token, on_refused=told, backoff=BACKOFF) as probe:
        assert probe.wait_connected(WAIT) and probe.refusal is None
        subprocess.run([str(stepd_bin()), "token", "remove", "agent", "--file", str(tokens)], check=True, capture_output=True)
        # The daemon ends the stream (within 2 s of the edit); the next attempt is refused.
        err = told.first()
        assert isinstance(err, Unauthenticated), repr(err)
        assert not probe.connected
        keeps_trying_patiently(probe)
        assert len(told.errors) == 1 and len(refused_lines(caplog)) == 1

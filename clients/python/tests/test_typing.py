"""What mypy --strict and the running client make of typos and units: enum
names compared as strings, step kinds, the wait's timeout in seconds; and
every Python example of the project's README and this package's README
type-checks under mypy --strict."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Iterator

import pytest

import stepd
from conftest import REPO, Daemon
from stepd import _build
from stepd.enums import PauseReason, StepKind

PACKAGE = Path(__file__).resolve().parents[1]
READMES = [REPO / "README.md", PACKAGE / "README.md"]


def mypy(tmp_path: Path, name: str, source: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / name
    script.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(script)],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip


def errors_by_line(result: subprocess.CompletedProcess[str]) -> dict[int, str]:
    return {int(m[1]): m[2] for m in re.finditer(r"^[^:\n]+:(\d+): error: (.*)$", result.stdout, flags=re.M)}


TYPOS = '''\
import stepd
from stepd.enums import PauseReason


def check(session: stepd.Session, pause: stepd.Pause) -> None:
    print(pause.reason == PauseReason.BREAKPOINT)
    print(pause.reason == "BREAKPIONT")
    session.step("in")
    session.step("sideways")
    session.continue_(wait_timeout=2.5)
    session.continue_(wait_timeout="2.5")
'''


def test_mypy_refuses_typos_and_wrong_units(tmp_path: Path) -> None:
    result = mypy(tmp_path, "typos.py", TYPOS)
    found = errors_by_line(result)
    assert sorted(found) == [7, 9, 11], result.stdout
    assert "Non-overlapping equality check" in found[7]
    assert "sideways" in found[9]
    assert "wait_timeout" in found[11]


@pytest.mark.parametrize(
    ("readme", "n"),
    [(readme, n) for readme in READMES for n in range(len(re.findall(r"```python\n", readme.read_text())))],
    ids=lambda x: str(x.relative_to(REPO)) if isinstance(x, Path) else str(x),
)
def test_readme_python_examples_pass_mypy_strict(readme: Path, n: int, tmp_path: Path) -> None:
    block = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)[n]
    result = mypy(tmp_path, f"example_{n}.py", block)
    assert result.returncode == 0, f"{readme.name} example {n}:\n{block}\n{result.stdout}{result.stderr}"


def test_a_misspelt_name_is_an_error_at_run_time_too() -> None:
    assert PauseReason.BREAKPOINT == "BREAKPOINT" == PauseReason.BREAKPOINT  # names still compare
    assert PauseReason.BREAKPOINT != "step"
    with pytest.raises(ValueError, match="BREAKPIONT"):
        _ = PauseReason.BREAKPOINT == "BREAKPIONT"
    assert _build.step_kind("in") == StepKind.IN
    with pytest.raises(ValueError):
        _build.step_kind("sideways")  # type: ignore[arg-type]


@pytest.fixture
def probe(daemon: Daemon) -> Iterator[stepd.probe.Probe]:
    p = stepd.probe.connect(name="typing-test", labels={"run": uuid.uuid4().hex[:12]}, addr=daemon.tcp)
    assert p.connected
    yield p
    p.close()


def test_the_wait_is_in_seconds_and_the_old_milliseconds_still_work(client: stepd.Client, probe: stepd.probe.Probe) -> None:
    # No point ever comes: the daemon waits out the given time and says so.
    started = time.monotonic()
    state = client.pause(probe.session_id, wait_timeout=0.3).state
    assert state.timed_out
    assert 0.25 <= time.monotonic() - started < 10
    with pytest.warns(DeprecationWarning, match="wait_timeout_ms"):
        state = client.pause(probe.session_id, wait_timeout_ms=300).state
    assert state.timed_out
    with pytest.raises(TypeError):
        client.pause(probe.session_id, wait_timeout=1, wait_timeout_ms=1000)
    assert _build.wait_fields(True, 0.3)["until_stable"].timeout_ms == 300
    assert _build.wait_fields(True, 0)["until_stable"].timeout_ms == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client.pause(probe.session_id, wait_timeout=0.05)

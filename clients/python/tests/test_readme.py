"""The README's examples run against a real daemon."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import Daemon

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def check_example_output(stdout: str) -> None:
    lines = stdout.splitlines()
    assert lines[0].split()[1] == "stepd.v1"
    assert lines[1].startswith("snapshot at seq ")
    assert lines[2].endswith(" True")
    assert lines[3].startswith("INVALID_ARGUMENT StatusCode.INVALID_ARGUMENT")
    assert "spec.source.path must not be empty" in stdout


def check_session_output(stdout: str) -> None:
    assert stdout.splitlines() == [
        "True PauseReason.BREAKPOINT",
        "0 10",
        "BREAKPOINT 1",
        "ENDED",
        "total 3",
    ], stdout


def run_example(daemon: Daemon, script: str) -> str:
    env = {**os.environ, "STEPD_ADDR": daemon.tcp}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_readme_example_runs(daemon: Daemon) -> None:
    example, _session, errors_example, _probe = python_blocks()
    check_example_output(run_example(daemon, example + "\n" + errors_example))


def test_readme_session_example_runs(daemon: Daemon) -> None:
    check_session_output(run_example(daemon, python_blocks()[1]))


def test_readme_probe_example_runs(daemon: Daemon) -> None:
    assert run_example(daemon, python_blocks()[3]) == "calculator ran with {'expression': '6*7'}\n"

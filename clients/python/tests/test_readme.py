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


def test_readme_example_runs(daemon: Daemon) -> None:
    example, errors_example, _probe = python_blocks()
    script = example + "\n" + "client = stepd.Client()\n" + errors_example
    env = {**os.environ, "STEPD_ADDR": daemon.tcp}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[1] == "stepd.v1"
    assert lines[1].startswith("snapshot at seq ")
    assert lines[2].endswith(" True")
    assert lines[3].startswith("INVALID_ARGUMENT StatusCode.INVALID_ARGUMENT")
    assert "spec.source.path must not be empty" in result.stdout


def test_readme_probe_example_runs(daemon: Daemon) -> None:
    probe_example = python_blocks()[2]
    env = {**os.environ, "STEPD_ADDR": daemon.tcp}
    result = subprocess.run([sys.executable, "-c", probe_example], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "calculator ran with {'expression': '6*7'}\n"

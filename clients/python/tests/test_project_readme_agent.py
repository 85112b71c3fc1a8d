"""The project README's "Debug an agent loop in two minutes" section: its
Python snippet runs against a real daemon with the example agent (the console
block is run by tests/tests/readme.rs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, Daemon

README = REPO / "README.md"
SECTION = "## Debug an agent loop in two minutes"


def section(markdown: str) -> str:
    start = markdown.index(SECTION)
    end = markdown.find("\n## ", start + len(SECTION))
    return markdown[start : end if end != -1 else len(markdown)]


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", section(README.read_text()), flags=re.S | re.M)


def test_section_sits_before_configuration() -> None:
    text = README.read_text()
    assert text.index(SECTION) < text.index("## Configuration")
    body = section(text)
    assert "stepctl debug" in body and "```console" in body
    assert "/work/" not in body and "/home/" not in body


def test_python_snippet_runs(daemon: Daemon, tmp_path: Path) -> None:
    (snippet,) = python_blocks()
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    env = {**os.environ, "STEPD_ADDR": daemon.tcp}
    result = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["held at model_request [1, 0]", "held at model_request [5, 0]"], result.stdout
    assert "agent model offline-large (effort high): Let me use calculator." in lines
    assert lines[-1] == "agent answer: The answer is 42 (checked twice)", result.stdout
    with daemon.client() as client:
        assert not [b for b in client.list_breakpoints().breakpoints if b.spec.label_selector == "app=demo"]

"""The Python snippet of the project README's "Use it from Python / Go /
grpcurl" section runs against a real daemon."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO, Daemon

README = REPO / "README.md"
SECTION = "## Use it from Python / Go / grpcurl"


def section(markdown: str) -> str:
    start = markdown.index(SECTION)
    end = markdown.find("\n## ", start + len(SECTION))
    return markdown[start : end if end != -1 else len(markdown)]


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", section(README.read_text()), flags=re.S | re.M)


def test_section_has_one_python_snippet() -> None:
    blocks = python_blocks()
    assert len(blocks) == 1, blocks
    assert "client.events(" in blocks[0] and "errors.PauseNotFound" in blocks[0]


def test_python_snippet_runs(daemon: Daemon, tmp_path: Path) -> None:
    (snippet,) = python_blocks()
    script = tmp_path / "snippet.py"
    script.write_text(snippet)
    env = {**os.environ, "STEPD_ADDR": daemon.tcp}
    result = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4, result.stdout
    assert lines[0].startswith("stepd ") and len(lines[0].split()) == 2, lines[0]
    prefix, seq = lines[1].rsplit(" ", 1)
    assert prefix == "snapshot at seq" and int(seq) > 0, lines[1]
    word, event_seq, same = lines[2].split()
    assert (word, same) == ("event", "True"), lines[2]
    # The breakpoint event comes after the snapshot it was not part of.
    assert int(event_seq) > int(seq), (seq, event_seq)
    assert lines[3] == "PAUSE_NOT_FOUND p-unknown", lines[3]
    # The snippet's breakpoint is really in the daemon.
    with daemon.client() as client:
        bps = client.list_breakpoints().breakpoints
    assert any(b.spec.source.path == "/srv/app.py" and b.spec.condition == "user_id == 7" for b in bps), bps

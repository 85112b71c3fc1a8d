"""The committed generated code is exactly what scripts/gen-python produces."""

from __future__ import annotations

import filecmp
import importlib
import subprocess
import sys
from pathlib import Path

from conftest import REPO

COMMITTED = REPO / "clients" / "python" / "src" / "stepd" / "v1"


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    subprocess.run([str(REPO / "scripts" / "gen-python"), "--out", str(tmp_path)], check=True, cwd=REPO)
    fresh = tmp_path / "stepd" / "v1"
    fresh_files = sorted(p.name for p in fresh.iterdir())
    committed_files = sorted(p.name for p in COMMITTED.iterdir() if p.name != "__pycache__")
    assert fresh_files == committed_files, "run scripts/gen-python"
    _, mismatch, errors = filecmp.cmpfiles(fresh, COMMITTED, fresh_files, shallow=False)
    assert not mismatch and not errors, f"stale generated files {mismatch + errors}: run scripts/gen-python"
    fresh_enums = (tmp_path / "stepd" / "enums.py").read_text()
    assert fresh_enums == (COMMITTED.parent / "enums.py").read_text(), "stale stepd/enums.py: run scripts/gen-python"
    # one generated module per proto file, plus stubs
    protos = sorted(p.stem for p in (REPO / "proto" / "stepd" / "v1").glob("*.proto"))
    assert sorted(n.removesuffix("_pb2.py") for n in fresh_files if n.endswith("_pb2.py")) == protos


def test_generated_modules_import() -> None:
    for path in sorted(COMMITTED.glob("*_pb2*.py")):
        module = importlib.import_module(f"stepd.v1.{path.stem}")
        assert module.__name__.startswith("stepd.v1.")
    from stepd.v1 import event_pb2, event_pb2_grpc

    assert event_pb2.DESCRIPTOR.package == "stepd.v1"
    assert hasattr(event_pb2_grpc, "EventServiceStub")


def test_the_blocking_client_is_what_unasync_makes_of_the_asyncio_one() -> None:
    """client.py, session.py and _pauses.py are generated from their asyncio
    twins in stepd/aio (tools/unasync.py): an edit to either side alone fails."""
    tool = REPO / "clients" / "python" / "tools" / "unasync.py"
    check = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True, cwd=REPO)
    assert check.returncode == 0, check.stderr

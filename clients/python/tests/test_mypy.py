"""The wrapper type-checks with mypy --strict (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def test_mypy_strict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict"], cwd=PACKAGE, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout

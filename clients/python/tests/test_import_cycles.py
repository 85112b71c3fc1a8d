"""tools/check_imports.py: the client's modules import each other without a cycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO

TOOL = REPO / "clients" / "python" / "tools" / "check_imports.py"


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)


def package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_client_has_no_import_cycle() -> None:
    result = check()
    assert result.returncode == 0, result.stderr


def test_a_cycle_is_named(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "__init__.py": "from pkg.client import Client\n",
            "client.py": "from pkg import session\nclass Client: ...\n",
            "session.py": "import os\nfrom .sub.book import Book\n",
            "sub/__init__.py": "",
            "sub/book.py": "try:\n    from ..client import Client\nexcept ImportError:\n    pass\n",
        },
    )
    result = check(str(pkg))
    assert result.returncode == 1
    assert "import cycle: pkg.client -> pkg.session -> pkg.sub.book -> pkg.client" in result.stderr


def test_imports_for_annotations_and_in_functions_do_not_count(tmp_path: Path) -> None:
    pkg = package(
        tmp_path,
        {
            "__init__.py": "",
            "client.py": "from pkg.session import Session\n",
            "session.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.client import Client\n"
                "def later() -> None:\n    from pkg import client\n"
            ),
        },
    )
    assert check(str(pkg)).returncode == 0
    strict = check("--type-checking", str(pkg))
    assert strict.returncode == 1
    assert "import cycle: pkg.client -> pkg.session -> pkg.client" in strict.stderr

"""`python -m build` makes an sdist and a wheel; each installs in a fresh venv,
where the README's examples run against a real daemon and `mypy --strict`
checks a program using the client."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import Daemon

PACKAGE = Path(__file__).resolve().parents[1]
PINS = PACKAGE / "requirements-dev.txt"


def run(argv: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result  # type: ignore[no-any-return]


def pin(name: str) -> str:
    return re.search(rf"^{name}==\S+", PINS.read_text(), flags=re.M).group(0)  # type: ignore[union-attr]


def fresh_venv(path: Path) -> Path:
    venv.create(path, with_pip=True)
    return path / "bin" / "python"


def outside_env() -> dict[str, str]:
    """The environment without this checkout's sources on the path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("dist")
    # A copy, so the build's own files (build/, *.egg-info) stay out of the checkout.
    source = tmp_path_factory.mktemp("source") / "python"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".*"))
    # --no-isolation: the build uses the venv's pinned setuptools, nothing fetched.
    run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", out, source])
    [wheel] = out.glob("stepd-*.whl")
    [sdist] = out.glob("stepd-*.tar.gz")
    return wheel, sdist


def test_the_wheel_and_the_sdist_carry_the_typed_package(dist: tuple[Path, Path]) -> None:
    wheel, sdist = dist
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in ("stepd/py.typed", "stepd/enums.py", "stepd/session.py", "stepd/v1/pause_pb2.pyi", "stepd/aio/client.py"):
        assert want in names, want
    requires = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
    assert "Requires-Dist: types-protobuf" in requires and "Requires-Dist: grpcio" in requires
    members = {m.split("/", 1)[1] for m in tarfile.open(sdist).getnames() if "/" in m}
    assert {"pyproject.toml", "README.md", "src/stepd/enums.py", "src/stepd/py.typed"} <= members


def test_the_wheel_installs_and_its_readme_example_runs(dist: tuple[Path, Path], daemon: Daemon, tmp_path: Path) -> None:
    wheel, _ = dist
    py = fresh_venv(tmp_path / "venv")
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", PINS, wheel, pin("mypy")], env=outside_env())
    located = run([py, "-c", "import stepd; print(stepd.__file__)"], env=outside_env(), cwd=tmp_path)
    assert located.stdout.startswith(str(tmp_path / "venv")), located.stdout

    # The README's examples, from the installed wheel.
    from test_readme import python_blocks, check_example_output, check_session_output

    example, session_example, errors_example, _probe = python_blocks()
    env = {**outside_env(), "STEPD_ADDR": daemon.tcp}
    out = run([py, "-c", example + "\nclient = stepd.Client()\n" + errors_example], env=env, cwd=tmp_path)
    check_example_output(out.stdout)
    check_session_output(run([py, "-c", session_example], env=env, cwd=tmp_path).stdout)

    # mypy --strict over a user's program, with only what the wheel declared.
    script = tmp_path / "user.py"
    script.write_text((Path(__file__).parent / "typed_user.py").read_text())
    checked = subprocess.run(
        [py, "-m", "mypy", "--strict", "--no-incremental", str(script)],
        env=outside_env(), cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert checked.returncode == 0 and "Success" in checked.stdout, checked.stdout + checked.stderr


def test_the_sdist_installs(dist: tuple[Path, Path], tmp_path: Path) -> None:
    _, sdist = dist
    py = fresh_venv(tmp_path / "venv")
    run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c", PINS, sdist], env=outside_env())
    out = run([py, "-c", "import stepd, stepd.enums; print(stepd.__version__, stepd.enums.PauseReason(1))"],
              env=outside_env(), cwd=tmp_path)  # fmt: skip
    assert out.stdout.split() == ["0.1.0", "BREAKPOINT"]

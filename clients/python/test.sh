#!/usr/bin/env bash
# The Python client's suite: installs the package with its pinned test
# dependencies into the repository's tool venv (idempotently), then checks
# that the package's modules import each other without a cycle and that the
# blocking client is what tools/unasync.py makes of the asyncio one, and runs
# mypy --strict and pytest against the real stepd binary ($STEPD_BIN, default
# target/debug/stepd).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/.tools/venv"

[ -x "$venv/bin/python" ] || "$root/scripts/tools"
py="$venv/bin/python"

# Reinstall only when the package metadata or the pins changed.
stamp="$venv/.stepd-python-client.stamp"
want="$(cat "$here/pyproject.toml" "$here/requirements-dev.txt" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$py" -c "import stepd, pytest, mypy, build" 2>/dev/null; then
  echo "installing the Python client and its test dependencies" >&2
  "$py" -m pip install -q --disable-pip-version-check -r "$here/requirements-dev.txt"
  "$py" -m pip install -q --disable-pip-version-check --no-deps -e "$here"
  echo "$want" > "$stamp"
fi

export STEPD_BIN="${STEPD_BIN:-$root/target/debug/stepd}"
export PYTHONDONTWRITEBYTECODE=1
# The venv is shared between checkouts and its editable install points at one
# of them; this checkout's sources come first so its own code is what runs.
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"

cd "$here"
echo "-- import cycles"
"$py" tools/check_imports.py
echo "-- generated blocking client"
"$py" tools/unasync.py --check

echo "-- mypy --strict"
"$py" -m mypy --strict

echo "-- pytest"
set +e
"$py" -m pytest -q -p no:cacheprovider tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"

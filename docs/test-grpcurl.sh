#!/usr/bin/env bash
# Runs every `$ ` command of docs/grpcurl.md, in order, against a stepd daemon
# it starts for the run ($STEPD_BIN, default target/debug/stepd), and checks
# each exit status and output against the page's `<!-- expect: … -->` markers.
# The work is done by docs/grpcurl_doctest.py (Python standard library only).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
py="$root/.tools/venv/bin/python"
[ -x "$py" ] || py="$(command -v python3)"
exec "$py" "$here/grpcurl_doctest.py" "$@"

#!/usr/bin/env bash
# Builds what the stepd container image holds into PREFIX:
#
#   PREFIX/bin/stepd          the daemon
#   PREFIX/bin/dlv            (with dlv) the Go debug adapter
#   PREFIX/lib/python/        (with debugpy) debugpy, for PYTHONPATH
#
#   deploy/build.sh PREFIX [COMPONENT...]
#
# COMPONENTs are `stepd`, `debugpy` and `dlv`; with none, all three. Each is
# built with what its own stage of deploy/Dockerfile has (cargo, pip, go), so
# the Dockerfile runs this script once per stage, and the test command runs it
# on the host into a temporary prefix (deploy/test.sh), so the image's build
# steps are the ones CI runs.
#
# Environment:
#   STEPD_PROFILE     cargo profile of stepd (default release). CI passes
#                     dev to reuse the debug build it already has.
#   CARGO_TARGET_DIR  honoured, as cargo does (default ./target).
#   STEPD_PYTHON      the Python whose version debugpy is installed for
#                     (default python3); it must be the runtime image's.
#
# The adapters' versions are the ones scripts/tools pins for the tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if [ $# -lt 1 ]; then
  echo "usage: deploy/build.sh PREFIX [stepd] [debugpy] [dlv]" >&2
  exit 2
fi
prefix="$1"
shift
components=("$@")
[ ${#components[@]} -gt 0 ] || components=(stepd debugpy dlv)

pin() {
  local value
  value="$(sed -n "s/^$1=//p" "$root/scripts/tools")"
  if [ -z "$value" ]; then
    echo "deploy/build.sh: no $1 in scripts/tools" >&2
    exit 1
  fi
  echo "$value"
}

mkdir -p "$prefix/bin"
prefix="$(cd "$prefix" && pwd)"

for component in "${components[@]}"; do
  case "$component" in
    stepd)
      profile="${STEPD_PROFILE:-release}"
      echo "deploy/build.sh: stepd ($profile profile)" >&2
      (cd "$root" && cargo build --locked --profile "$profile" -p stepd --bin stepd)
      # cargo's directory for the dev profile is `debug`.
      dir="$profile"
      [ "$profile" = dev ] && dir=debug
      target="${CARGO_TARGET_DIR:-$root/target}"
      case "$target" in /*) ;; *) target="$root/$target" ;; esac
      install -m 0755 "$target/$dir/stepd" "$prefix/bin/stepd"
      ;;
    debugpy)
      version="$(pin DEBUGPY_VERSION)"
      python="${STEPD_PYTHON:-python3}"
      echo "deploy/build.sh: debugpy $version for $("$python" --version 2>&1)" >&2
      rm -rf "$prefix/lib/python"
      "$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
        --no-deps --target "$prefix/lib/python" "debugpy==$version"
      ;;
    dlv)
      version="$(pin DELVE_VERSION)"
      echo "deploy/build.sh: dlv $version" >&2
      # Static, so it runs on an image without a C library of its own.
      CGO_ENABLED=0 GOBIN="$prefix/bin" go install "github.com/go-delve/delve/cmd/dlv@$version"
      ;;
    *)
      echo "deploy/build.sh: unknown component $component (stepd, debugpy, dlv)" >&2
      exit 2
      ;;
  esac
done

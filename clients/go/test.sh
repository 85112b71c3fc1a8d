#!/usr/bin/env bash
# Tests of the Go client: generated code up to date, go vet, go test against
# the real stepd binary ($STEPD_BIN, default <repo>/target/debug/stepd).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

echo "-- generated code"
"$root/scripts/gen-go" --check

cd "$here"
echo "-- gofmt"
unformatted="$(gofmt -l stepd probe)"
if [ -n "$unformatted" ]; then
  echo "not gofmt-formatted: $unformatted" >&2
  exit 1
fi
echo "-- go vet"
go vet ./...
echo "-- go test"
go test -count=1 ./...

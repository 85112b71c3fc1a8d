#!/usr/bin/env bash
# Tests of the deployment artifacts, offline:
#   - helm lint of the chart, for each mode (deploy/helm/stepd/ci/*-values.yaml,
#     the PostgreSQL replica mode among them), and values it refuses;
#   - deploy/k8s/MODE.yaml equal to a fresh `helm template` of that mode
#     (`deploy/test.sh --update` rewrites them);
#   - deploy/build.sh, the Dockerfile's build steps, run on the host into a
#     temporary prefix, and the daemon it installs started with the chart's
#     layout: health answers, and Doctor finds the adapters it installed;
#   - every manifest decoded strictly into the Kubernetes API types, and the
#     chart's rules checked (deploy/validate, go test).
# Needs helm, grpcurl and go (scripts/tools), and cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

chart=deploy/helm/stepd
# Fixed, so a render does not depend on how helm was built.
kube_version=v1.33.0
update=false
[ "${1:-}" = "--update" ] && update=true

tmp="$(mktemp -d)"
daemon=""
cleanup() {
  if [ -n "$daemon" ]; then
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

render() {
  local mode="$1"
  echo "# Rendered from deploy/helm/stepd with ci/$mode-values.yaml by"
  echo "# \`deploy/test.sh --update\`; deploy/test.sh fails when it differs."
  helm template stepd "$chart" --namespace stepd --kube-version "$kube_version" \
    -f "$chart/ci/$mode-values.yaml"
}

echo "-- helm lint and template"
for values in "$chart"/ci/*-values.yaml; do
  mode="$(basename "$values" -values.yaml)"
  helm lint --quiet --strict --kube-version "$kube_version" -f "$values" "$chart" >/dev/null
  render "$mode" > "$tmp/$mode.yaml"
  if $update; then
    cp "$tmp/$mode.yaml" "deploy/k8s/$mode.yaml"
  elif ! diff -u "deploy/k8s/$mode.yaml" "$tmp/$mode.yaml"; then
    echo "deploy/k8s/$mode.yaml differs from the chart's render: run deploy/test.sh --update" >&2
    exit 1
  fi
done
helm lint --quiet --strict --kube-version "$kube_version" "$chart" >/dev/null
# Values stepd would refuse are refused at render time, naming the value.
refuse() {
  local want="$1"
  shift
  if out="$(helm template stepd "$chart" --kube-version "$kube_version" "$@" 2>&1)" || [[ "$out" != *"$want"* ]]; then
    echo "helm template $* should fail saying \"$want\"; it said: $out" >&2
    exit 1
  fi
}
refuse 'mode must be tls or mesh' --set mode=plain
refuse 'auth.clientRoles needs client identities' --set 'auth.clientRoles[0]=x admin'
refuse 'auth.clientRoles needs client identities' --set mode=mesh \
  --set mesh.trustForwardedClientCert=false --set 'auth.clientRoles[0]=x admin'
cluster=(--set mode=mesh --set cluster.enabled=true
  --set cluster.database.existingSecret=db --set cluster.peerToken.existingSecret=peer)
refuse 'cluster.replicas must be at least 2' "${cluster[@]}" --set cluster.replicas=1
refuse 'cluster.database.existingSecret must name' "${cluster[@]}" --set cluster.database.existingSecret=
refuse 'cluster.peerToken.existingSecret must name' "${cluster[@]}" --set cluster.peerToken.existingSecret=
refuse 'replicas keep their state in PostgreSQL' "${cluster[@]}" --set persistence.enabled=true
refuse 'must be at least drainTimeoutSeconds + 10' --set drainTimeoutSeconds=30
for committed in deploy/k8s/*.yaml; do
  if [ ! -f "$tmp/$(basename "$committed")" ]; then
    echo "$committed is not rendered from any $chart/ci/*-values.yaml" >&2
    exit 1
  fi
done

echo "-- deploy/build.sh into a temporary prefix"
# The dev profile reuses the debug build the test command already made; the
# image's release build is the same command with another profile.
STEPD_PROFILE=dev STEPD_PYTHON=/usr/bin/python3 deploy/build.sh "$tmp/opt/stepd" stepd debugpy dlv
prefix="$tmp/opt/stepd"

echo "-- the installed daemon, laid out as in the chart"
# The image's environment (deploy/Dockerfile), with the host's python3 (the
# image's is the runtime base's) and nothing else of the host's tools.
mkdir -p "$tmp/var/lib/stepd" "$tmp/etc/stepd/tokens"
: > "$tmp/etc/stepd/tokens/tokens"
mkfifo "$tmp/ready"
env -i HOME="$tmp" PATH="$prefix/bin:/usr/bin:/bin" \
  PYTHONPATH="$prefix/lib/python" PYTHONDONTWRITEBYTECODE=1 \
  "$prefix/bin/stepd" --listen=127.0.0.1:0 --health-listen=127.0.0.1:0 \
  --data-dir="$tmp/var/lib/stepd/data" --auth-tokens="$tmp/etc/stepd/tokens/tokens" \
  --log-format=json >"$tmp/ready" 2>"$tmp/stepd.log" &
daemon=$!
exec {ready}<"$tmp/ready"
line=""
if ! read -r -t 60 -u "$ready" line || [[ "$line" != "stepd ready "* ]]; then
  echo "the installed stepd did not become ready; its log:" >&2
  cat "$tmp/stepd.log" >&2
  exit 1
fi
tcp="$(sed -n 's/.* tcp=\([^ ]*\).*/\1/p' <<<"$line")"
health="$(sed -n 's/.* health=\([^ ]*\).*/\1/p' <<<"$line")"
# The health listener serves no reflection: its descriptors come from the
# main listener's.
grpcurl -plaintext -protoset-out "$tmp/health.protoset" "$tcp" describe grpc.health.v1.Health >/dev/null
status="$(grpcurl -plaintext -protoset "$tmp/health.protoset" -d '{"service": ""}' "$health" grpc.health.v1.Health/Check)"
if [[ "$status" != *'"SERVING"'* ]]; then
  echo "the installed stepd's health listener answers: $status" >&2
  exit 1
fi
grpcurl -plaintext "$tcp" stepd.v1.DaemonService/Doctor > "$tmp/doctor.json"
# Doctor must find the adapters build.sh installed, not some other copy.
python3 - "$tmp/doctor.json" "$prefix" "$(sed -n 's/^DEBUGPY_VERSION=//p' scripts/tools)" <<'PY'
import json, sys
doctor, prefix, debugpy_version = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
found = {a["adapter"]: a for a in doctor["adapters"]}
def check(name, ok, what):
    if found.get(name, {}).get("status") != "CHECK_STATUS_OK" or not ok(found[name]):
        sys.exit(f"Doctor of the installed stepd: {name} is not {what}: {found.get(name)}")
check("dlv", lambda a: a["command"][0] == f"{prefix}/bin/dlv", f"{prefix}/bin/dlv")
check("debugpy", lambda a: a["version"] == debugpy_version, f"debugpy {debugpy_version} from {prefix}/lib/python")
PY
kill "$daemon"
wait "$daemon" 2>/dev/null || true
daemon=""

echo "-- strict decoding and the chart's rules"
cd deploy/validate
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
  echo "not gofmt-formatted: $unformatted" >&2
  exit 1
fi
go vet ./...
STEPD_BIN="$prefix/bin/stepd" go test -count=1 ./...

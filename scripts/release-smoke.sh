#!/usr/bin/env bash
# The release smoke: what a user does with an installed release build of dkv,
# with nothing of this checkout but the binary.
#
#   cargo build --release, install both binaries (dkv and the kubectl plugin
#   kubectl-dkv) into a temporary root on the PATH, and from an empty
#   directory: `dkv local up` -> a 3-member TLS cluster -> `kubectl dkv
#   status` -> writes through `kubectl dkv etcdctl` -> an on-demand backup to
#   S3 (moto) -> `kubectl dkv restore` into a new cluster -> the writes read
#   back from the new cluster -> `dkv local down`.
#
# Every step is a kubectl or dkv command a user would type; a failing step
# prints what the cluster looked like and exits non-zero. scripts/test.sh runs
# it after the tests (CI); it also runs alone:  scripts/release-smoke.sh
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV="${DKV_VENV:-$ROOT/.venv}"

step="installing prerequisites"
step() {
  step=$1
  echo "== release smoke: $step"
}
WORK=""
MOTO_PID=""
stop_everything() {
  if [ -n "$WORK" ] && [ -f "$WORK/.dkv-local/kubeconfig" ]; then
    (cd "$WORK" && "$WORK/bin/dkv" local down >/dev/null 2>&1) || true
  fi
  if [ -n "$MOTO_PID" ]; then kill "$MOTO_PID" 2>/dev/null || true; fi
}
on_failure() {
  local status=$?
  trap - ERR
  set +e
  echo >&2
  echo "release smoke FAILED while: $step (exit $status, scripts/release-smoke.sh line $1)" >&2
  if [ -n "${KUBECONFIG:-}" ] && [ -f "${KUBECONFIG}" ]; then
    echo "-- what the cluster looked like:" >&2
    kubectl get dkv,dkvbackup,pods -o wide >&2
    for d in smoke smoke-restored; do
      kubectl get dkv "$d" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' >&2
    done
    kubectl get dkvbackup smoke-1 -o yaml >&2
    for pod in $(kubectl get pods -o name 2>/dev/null); do
      echo "-- last log lines of $pod:" >&2
      kubectl logs "$pod" --all-containers --tail=15 >&2
    done
    echo "-- the last lines of $WORK/.dkv-local/dkv-local.log:" >&2
    tail -n 30 "$WORK/.dkv-local/dkv-local.log" >&2
  fi
  stop_everything
  exit "$status"
}
trap 'on_failure $LINENO' ERR

scripts/install-prerequisites.sh
step "building the release binaries (cargo build --release)"
# CARGO_TARGET_DIR is honoured: scripts/test.sh builds these in a directory
# of their own, in the background while the tests run.
TARGET_DIR="$(realpath -m "${CARGO_TARGET_DIR:-target}")"
cargo build --release --locked -q -p dkv-operator --bin dkv -p kubectl-dkv --bin kubectl-dkv

step "installing them into a temporary root"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dkv-release-smoke.XXXXXX")"
install -D -m 0755 "$TARGET_DIR/release/dkv" "$WORK/bin/dkv"
install -D -m 0755 "$TARGET_DIR/release/kubectl-dkv" "$WORK/bin/kubectl-dkv"
# As a user installs a kubectl plugin: on the PATH, found by `kubectl dkv`.
export PATH="$WORK/bin:$PATH"
# The etcd releases scripts/install-prerequisites.sh fetched; without this the
# binary fetches its own into ~/.local/share/dkv/tools on first use.
export DKV_TOOLS_DIR="$ROOT/.tools"
cd "$WORK"
DKV="$WORK/bin/dkv"

step "an S3-compatible store (moto) with a bucket"
port="$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$WORK/moto.log" 2>&1 &
MOTO_PID=$!
for _ in $(seq 1 100); do
  curl -s -o /dev/null "http://127.0.0.1:$port/" && break
  sleep 0.2
done
"$VENV/bin/python" - "$port" <<'PY'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}",
                  aws_access_key_id="smoke", aws_secret_access_key="smoke",
                  region_name="us-east-1")
s3.create_bucket(Bucket="dkv-smoke")
PY

step "dkv local up (from an empty directory)"
"$DKV" local up --detach
export KUBECONFIG="$WORK/.dkv-local/kubeconfig"
source "$ROOT/scripts/lib/etcdctl-pod.sh"

step "a 3-member TLS cluster"
kubectl apply -f - <<YAML
apiVersion: v1
kind: Secret
metadata: {name: s3-creds}
type: Opaque
stringData:
  AWS_ACCESS_KEY_ID: smoke
  AWS_SECRET_ACCESS_KEY: smoke
  AWS_REGION: us-east-1
  AWS_ENDPOINT_URL: http://127.0.0.1:$port
  AWS_ALLOW_HTTP: "true"
---
apiVersion: dkv.io/v1beta1
kind: DistributedKV
metadata: {name: smoke}
spec:
  size: 3
  image: registry.k8s.io/etcd:3.5.16-0
  storage: {storageClassName: standard, size: 1Gi}
YAML
kubectl wait --for=condition=Available dkv/smoke --timeout=180s
kubectl get secret smoke-tls-client >/dev/null

step "kubectl dkv status (the installed plugin)"
# Available comes with a quorum; the page is checked with every member up.
kubectl wait --for=jsonpath='{.status.readyReplicas}'=3 dkv/smoke --timeout=180s
kubectl dkv status smoke | tee "$WORK/status.txt"
grep -q "3/3 ready" "$WORK/status.txt"
grep -q "RAFT INDEX" "$WORK/status.txt"

step "writes over TLS through kubectl dkv etcdctl"
kubectl dkv etcdctl smoke -- put smoke/first "written before the backup"
kubectl dkv etcdctl smoke -- put smoke/second "also before the backup"

step "an on-demand backup to S3"
kubectl apply -f - <<'YAML'
apiVersion: dkv.io/v1alpha1
kind: DistributedKVBackup
metadata: {name: smoke-1}
spec:
  cluster: smoke
  destination: {uri: "s3://dkv-smoke/smoke/", credentialsSecret: s3-creds}
YAML
kubectl wait --for=jsonpath='{.status.phase}'=Completed dkvbackup/smoke-1 --timeout=180s
kubectl get dkvbackup smoke-1

step "a new cluster restored from the backup (kubectl dkv restore)"
kubectl dkv restore smoke --from smoke-1 --as smoke-restored
kubectl wait --for=condition=Available dkv/smoke-restored --timeout=240s

step "the writes read back from the restored cluster"
got="$(etcdctl_pod smoke-restored smoke-get get --prefix smoke/)"
want="$(printf '%s\n' smoke/first "written before the backup" smoke/second "also before the backup")"
if [ "$got" != "$want" ]; then
  echo "the restored cluster holds:" >&2
  echo "$got" >&2
  echo "expected:" >&2
  echo "$want" >&2
  false
fi
echo "$got"

step "dkv local down"
"$DKV" local down
trap - ERR
kill "$MOTO_PID" 2>/dev/null || true
cd "$ROOT"
rm -rf "$WORK"
echo "== release smoke passed"

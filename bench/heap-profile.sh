#!/usr/bin/env bash
# Where the operator's heap goes with N clusters: the image's build of `dkv`
# (no local mode) with dhat's profiling allocator (feature `dhat-heap`), run
# against kube-local as bench/run.sh's footprint section runs it (N
# DistributedKVs, no kubelet), stopped with SIGTERM once quiet; prints the
# allocation sites that hold the most bytes at the heap's peak and at the end.
#
#   bench/heap-profile.sh            # 1000 clusters
#   bench/heap-profile.sh 100
#
# dhat counts heap bytes only (not the allocator's own retention, stacks or
# code pages) and slows allocation down; RSS figures come from bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-1000}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dkv-heap.XXXXXX")"
KL_PID=""
OP_PID=""
cleanup() {
  [ -n "$OP_PID" ] && kill "$OP_PID" 2>/dev/null || true
  [ -n "$KL_PID" ] && kill "$KL_PID" 2>/dev/null || true
}
trap cleanup EXIT

echo "== building (release, no local mode, dhat-heap) and kube-local"
cargo build --release --locked -q -p dkv-operator --no-default-features --features dhat-heap --bin dkv
cp target/release/dkv "$WORK/dkv-dhat"
cargo build --locked -q -p kube-local --bin kube-local

echo "== kube-local, the CRDs, $COUNT clusters"
target/debug/kube-local up --data-dir "$WORK/kube-local" >"$WORK/kube-local.log" 2>&1 &
KL_PID=$!
for _ in $(seq 1 150); do [ -f "$WORK/kube-local/kubeconfig" ] && break; sleep 0.2; done
export KUBECONFIG="$WORK/kube-local/kubeconfig"
"$WORK/dkv-dhat" crd | kubectl apply -f - >/dev/null
kubectl create namespace fleet >/dev/null

DKV_DHAT_OUT="$WORK/dhat-heap.json" RUST_LOG=warn "$WORK/dkv-dhat" operator \
  --metrics-addr=127.0.0.1:0 --leader-election=false --webhooks=false \
  --identity=heap-profile >"$WORK/operator.log" 2>&1 &
OP_PID=$!
sleep 3
for i in $(seq 0 $((COUNT - 1))); do
  printf -- '---\napiVersion: dkv.io/v1beta1\nkind: DistributedKV\nmetadata: {name: c%04d, namespace: fleet}\nspec: {size: 3, image: "registry.k8s.io/etcd:3.5.16-0", storage: {storageClassName: standard, size: 1Gi, reclaimPolicy: Delete}}\n' "$i"
done >"$WORK/clusters.yaml"
kubectl create -f "$WORK/clusters.yaml" >/dev/null

echo "== waiting until every cluster has a status for its generation"
for _ in $(seq 1 600); do
  done_count="$(kubectl get dkv -n fleet -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
print(sum(1 for d in items if d.get("status", {}).get("observedGeneration") == d["metadata"]["generation"]))')"
  [ "$done_count" -ge "$COUNT" ] && break
  sleep 1
done
sleep 10
echo "operator $(grep -E 'VmRSS|RssAnon|RssFile' /proc/$OP_PID/status | tr -s ' \n\t' ' ') (dhat's own bookkeeping included)"
# SIGUSR1: the profile is written now, with every cache still full ("at the
# end" below is this moment).
kill -USR1 "$OP_PID"
for _ in $(seq 1 100); do [ -s "$WORK/dhat-heap.json" ] && break; sleep 0.2; done
sleep 2
kill -TERM "$OP_PID"
wait "$OP_PID" || true
OP_PID=""

python3 - "$WORK/dhat-heap.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
frames = d["ftbl"]
mib = lambda b: b / 1048576

def site(pp):
    # What was allocated (the first frame past the allocator and std's
    # containers) and on whose behalf (the first frame in dkv's or kube's
    # code).
    names = [frames[f].split(": ", 1)[-1].split(" (")[0].strip() for f in pp["fs"]]
    skip = ("dhat::", "<dhat::", "alloc::", "<alloc::", "core::", "<core::", "__rust", "std::",
            "hashbrown::", "<hashbrown::", "[root]")
    what = next((n for n in names if not n.startswith(skip)), names[0] if names else "?")
    owner = next((n for n in names if n.lstrip("<").startswith(("dkv_operator", "kube_runtime", "kube_client"))), "")
    return f"{what[:90]}" + (f"  <- {owner[:90]}" if owner and owner != what else "")

print(f"heap at its peak: {mib(sum(p['gb'] for p in d['pps'])):.1f} MiB, "
      f"with every cache full (SIGUSR1): {mib(sum(p['eb'] for p in d['pps'])):.1f} MiB")
for key, label in (("gb", "at the peak"), ("eb", "with every cache full")):
    print(f"-- the sites holding the most bytes {label}:")
    by_site = {}
    for pp in d["pps"]:
        by_site[site(pp)] = by_site.get(site(pp), 0) + pp[key]
    for name, b in sorted(by_site.items(), key=lambda x: -x[1])[:15]:
        print(f"{mib(b):7.2f} MiB  {name}")
PY
echo "(profile: $WORK/dhat-heap.json — open it in dhat's viewer, dh_view.html)"

#!/usr/bin/env bash
# The local demo: dkv on kube-local, the local Kubernetes-API-compatible
# control plane, driven with kubectl exactly as on a real cluster.
#
# It starts `dkv local up` in the background (state in .dkv-local/), applies
# examples/distributedkv.yaml and shows what dkv made of it. It leaves the
# control plane running so you can keep using kubectl; stop it with
#   target/debug/dkv local down
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prerequisites.sh
echo "== building dkv"
cargo build -q -p dkv-operator --bin dkv
DKV=target/debug/dkv

"$DKV" local down >/dev/null 2>&1 || true
echo "== starting dkv local (kube-local + dkv CRDs + operator)"
"$DKV" local up --detach
export KUBECONFIG="$PWD/.dkv-local/kubeconfig"

echo "== kubectl apply -f examples/distributedkv.yaml"
kubectl apply -f examples/distributedkv.yaml
for _ in $(seq 1 50); do
  reason=$(kubectl get dkv example -o 'jsonpath={.status.conditions[?(@.type=="Progressing")].reason}' 2>/dev/null || true)
  [ -n "$reason" ] && break
  sleep 0.2
done

echo "== kubectl get dkv,statefulset,service,pdb"
kubectl get dkv,statefulset,service,poddisruptionbudget
echo "== kubectl describe dkv example (events)"
kubectl describe dkv example | sed -n '/^Events:/,$p'

cat <<'TXT'

dkv created the etcd StatefulSet, the peer and client Services and the
quorum-keeping PodDisruptionBudget, and reports the cluster as Creating.
kube-local does not run pods yet (its process kubelet is being built), so the
members stay at 0/3 ready here; on a real cluster they start and the cluster
turns Available.

Keep exploring:   export KUBECONFIG=$PWD/.dkv-local/kubeconfig; kubectl get dkv -w
Stop:             target/debug/dkv local down
TXT

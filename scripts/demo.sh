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
# kube-local keeps its state in .dkv-local/ across restarts; the demo starts
# from a clean local cluster and keeps the previous one's state aside.
if [ -d .dkv-local ]; then
  rm -rf .dkv-local.previous
  mv .dkv-local .dkv-local.previous
  echo "== previous local cluster state moved to .dkv-local.previous/"
fi
echo "== starting dkv local (kube-local + dkv CRDs + operator)"
"$DKV" local up --detach
export KUBECONFIG="$PWD/.dkv-local/kubeconfig"

echo "== kubectl apply -f examples/distributedkv.yaml"
kubectl apply -f examples/distributedkv.yaml
echo "== waiting for the three etcd members to form a cluster"
for _ in $(seq 1 120); do
  [ "$(kubectl get dkv example -o 'jsonpath={.status.readyReplicas}/{.status.phase}' 2>/dev/null)" = "3/Running" ] && break
  sleep 0.5
done
kubectl get dkv,pods,pvc

echo "== a write through member 0, read back from member 2 (real etcd, pod IPs)"
ETCDCTL=".tools/etcd-3.5/usr/bin/etcdctl"
ip0=$(kubectl get pod example-0 -o 'jsonpath={.status.podIP}')
ip2=$(kubectl get pod example-2 -o 'jsonpath={.status.podIP}')
ETCDCTL_API=3 "$ETCDCTL" --endpoints="http://$ip0:2379" put greeting "hello from dkv"
ETCDCTL_API=3 "$ETCDCTL" --endpoints="http://$ip2:2379" get greeting --print-value-only
ETCDCTL_API=3 "$ETCDCTL" --endpoints="http://$ip0:2379" member list -w table

echo "== scaling to 5 members (learner -> promote, one at a time)"
kubectl scale dkv example --replicas=5
for _ in $(seq 1 120); do
  [ "$(kubectl get dkv example -o 'jsonpath={.status.readyReplicas}/{.status.phase}')" = "5/Running" ] && break
  sleep 1
done
kubectl get dkv example
kubectl describe dkv example | sed -n '/^Events:/,$p'

cat <<'TXT'

That was a real etcd cluster (local processes started by kube-local's
kubelet) managed by dkv. Keep exploring:
  export KUBECONFIG=$PWD/.dkv-local/kubeconfig
  kubectl get dkv -w              # in another terminal
  kubectl scale dkv example --replicas=3
Stop:  target/debug/dkv local down
TXT

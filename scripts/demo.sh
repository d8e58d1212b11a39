#!/usr/bin/env bash
# The local demo: dkv on kube-local, the local Kubernetes-API-compatible
# control plane, driven with kubectl exactly as on a real cluster.
#
# It starts `dkv local up` in the background (state in .dkv-local/), applies
# examples/distributedkv.yaml and shows what dkv made of it. It leaves the
# control plane running so you can keep using kubectl; stop it with
#   target/debug/dkv local down
#
# It waits the way users should: `kubectl wait --for=condition=Available`,
# then starts clients at once, with no retries: Available promises that a
# client started at that moment reaches the cluster. If any step fails, the
# demo says which, shows what it saw, stops the local control plane and exits
# non-zero (CI runs it exactly like this).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

DKV=target/debug/dkv
# The etcd releases scripts/install-etcd.sh put in this checkout (an
# installed dkv fetches its own into ~/.local/share/dkv/tools).
export DKV_TOOLS_DIR="$PWD/.tools"
step="installing prerequisites"
# Prints the step's banner and remembers it for the failure report.
step() {
  step=$1
  echo "== $step"
}
on_failure() {
  local status=$?
  trap - ERR
  set +e
  echo >&2
  echo "demo FAILED while: $step (exit $status, scripts/demo.sh line $1)" >&2
  if [ -n "${KUBECONFIG:-}" ] && [ -f "${KUBECONFIG}" ]; then
    echo "-- what the cluster looked like:" >&2
    kubectl get dkv,pods -o wide >&2
    kubectl get dkv example -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' >&2
    for pod in $(kubectl get pods -o name 2>/dev/null | grep demo-); do
      echo "-- logs of $pod:" >&2
      kubectl logs "$pod" >&2
    done
    echo "-- the last lines of .dkv-local/dkv-local.log:" >&2
    tail -n 20 .dkv-local/dkv-local.log >&2
  fi
  echo "-- stopping the local control plane (state kept in .dkv-local/)" >&2
  "$DKV" local down >&2
  exit "$status"
}
trap 'on_failure $LINENO' ERR

scripts/install-prerequisites.sh --demo
step "building dkv and the kubectl plugin (kubectl dkv)"
cargo build -q -p dkv-operator --bin dkv -p kubectl-dkv --bin kubectl-dkv
# kubectl finds plugins on the PATH: `kubectl dkv` runs target/debug/kubectl-dkv.
export PATH="$PWD/target/debug:$PATH"

"$DKV" local down >/dev/null 2>&1 || true
# kube-local keeps its state in .dkv-local/ across restarts; the demo starts
# from a clean local cluster and keeps the previous one's state aside.
if [ -d .dkv-local ]; then
  rm -rf .dkv-local.previous
  mv .dkv-local .dkv-local.previous
  echo "== previous local cluster state moved to .dkv-local.previous/"
fi
step "starting dkv local (kube-local + dkv CRDs + operator)"
"$DKV" local up --detach
export KUBECONFIG="$PWD/.dkv-local/kubeconfig"

step "kubectl apply -f examples/distributedkv.yaml"
kubectl apply -f examples/distributedkv.yaml
step "kubectl wait --for=condition=Available dkv/example (the three members form a cluster)"
kubectl wait --for=condition=Available dkv/example --timeout=180s
kubectl get dkv,pods,pvc

step "the members spread over three nodes in three zones"
kubectl get nodes -L topology.kubernetes.io/zone
kubectl get pods -l app.kubernetes.io/instance=example,app.kubernetes.io/component=etcd -o wide
member_nodes=$(kubectl get pods -l app.kubernetes.io/instance=example,app.kubernetes.io/component=etcd \
  -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | wc -l)
if [ "$member_nodes" != 3 ]; then
  echo "the 3 members run on $member_nodes node(s), not one per node" >&2
  false
fi

# etcdctl_pod CLUSTER POD ARGS...: a client pod holding the cluster's client
# certificate, through the client Service.
source scripts/lib/etcdctl-pod.sh

step "TLS: the members' certificates come from the cluster's own CA"
kubectl get secrets -l dkv.io/cluster=example
step "a write and a read over TLS, from client pods holding example-tls-client"
etcdctl_pod example demo-put put greeting "hello from dkv"
etcdctl_pod example demo-get get greeting --print-value-only
etcdctl_pod example demo-members member list --write-out=table
step "plaintext is refused"
ip0=$(kubectl get pod example-0 -o 'jsonpath={.status.podIP}')
if ETCDCTL_API=3 .tools/etcd-3.5/usr/bin/etcdctl --endpoints="http://$ip0:2379" \
     --dial-timeout=2s --command-timeout=3s get greeting >/dev/null 2>&1; then
  echo "a plaintext client was answered" >&2
  false
fi
echo "plaintext client refused, as it should be"

step "scaling to 5 members (learner -> promote, one at a time)"
kubectl scale dkv example --replicas=5
# readyReplicas counts voting members that etcd reports healthy and whose
# pods are Ready: 5 means every new member joined, was promoted and serves.
kubectl wait --for=jsonpath='{.status.readyReplicas}'=5 dkv/example --timeout=240s
kubectl wait --for=condition=Available dkv/example --timeout=60s
kubectl get dkv example
kubectl describe dkv example | sed -n '/^Events:/,$p'
step "kubectl dkv status example (the plugin: members, conditions, backups, certificates)"
kubectl dkv status example

cat <<'TXT'

That was a real etcd cluster (local processes started by kube-local's
kubelet) managed by dkv. Keep exploring:
  export KUBECONFIG=$PWD/.dkv-local/kubeconfig
  kubectl get dkv -w              # in another terminal
  kubectl scale dkv example --replicas=3
  PATH=$PWD/target/debug:$PATH kubectl dkv status example
  PATH=$PWD/target/debug:$PATH kubectl dkv --help
Stop:  target/debug/dkv local down
TXT

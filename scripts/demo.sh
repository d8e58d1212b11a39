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

# A client pod: etcdctl with the cluster's client certificate (the Secret
# example-tls-client, as examples/etcd-client.yaml mounts it), through the
# client Service. Prints the command's output.
etcdctl_pod() {
  local name=$1; shift
  local args="" a
  for a in "$@"; do args="$args, \"$a\""; done
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  restartPolicy: Never
  containers:
  - name: etcdctl
    image: registry.k8s.io/etcd:3.5.16-0
    command: ["etcdctl", "--endpoints=https://example-client.default.svc:2379",
              "--cacert=/etc/etcd-client/ca.crt", "--cert=/etc/etcd-client/tls.crt",
              "--key=/etc/etcd-client/tls.key" $args]
    volumeMounts: [{name: client-tls, mountPath: /etc/etcd-client, readOnly: true}]
  volumes: [{name: client-tls, secret: {secretName: example-tls-client}}]
YAML
  kubectl wait --for=jsonpath='{.status.phase}'=Succeeded "pod/$name" --timeout=90s >/dev/null
  kubectl logs "$name"
}

echo "== TLS: the members' certificates come from the cluster's own CA"
kubectl get secrets -l dkv.io/cluster=example
echo "== a write and a read over TLS, from client pods holding example-tls-client"
etcdctl_pod demo-put put greeting "hello from dkv"
etcdctl_pod demo-get get greeting --print-value-only
etcdctl_pod demo-members member list --write-out=table
echo "== plaintext is refused"
ip0=$(kubectl get pod example-0 -o 'jsonpath={.status.podIP}')
if ETCDCTL_API=3 .tools/etcd-3.5/usr/bin/etcdctl --endpoints="http://$ip0:2379" \
     --dial-timeout=2s --command-timeout=3s get greeting >/dev/null 2>&1; then
  echo "a plaintext client was answered" >&2
  exit 1
fi
echo "plaintext client refused, as it should be"

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

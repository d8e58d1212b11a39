# Sourced by scripts/demo.sh and scripts/release-smoke.sh: etcdctl run the way
# a client in the cluster runs it, from a pod holding the cluster's client
# certificate (the Secret <cluster>-tls-client, as examples/etcd-client.yaml
# mounts it), through the client Service.

# etcdctl_pod CLUSTER POD ARGS...: runs `etcdctl ARGS...` against CLUSTER in
# a new pod named POD, waits for it to end and prints its output. A client
# that fails fails the caller: never retried.
etcdctl_pod() {
  local cluster=$1 name=$2
  shift 2
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
    command: ["etcdctl", "--endpoints=https://$cluster-client.default.svc:2379",
              "--cacert=/etc/etcd-client/ca.crt", "--cert=/etc/etcd-client/tls.crt",
              "--key=/etc/etcd-client/tls.key" $args]
    volumeMounts: [{name: client-tls, mountPath: /etc/etcd-client, readOnly: true}]
  volumes: [{name: client-tls, secret: {secretName: $cluster-tls-client}}]
YAML
  local phase=""
  for _ in $(seq 1 180); do
    phase=$(kubectl get pod "$name" -o 'jsonpath={.status.phase}')
    case "$phase" in Succeeded | Failed) break ;; esac
    sleep 0.5
  done
  kubectl logs "$name"
  if [ "$phase" != Succeeded ]; then
    echo "client pod $name ended as '${phase:-not started}'" >&2
    return 1
  fi
}

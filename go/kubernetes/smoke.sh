#!/usr/bin/env bash
# Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler from
# BINDIR on 127.0.0.1 only, check them, print their RSS, stop them and remove
# the temporary directory.
#
#   smoke.sh BINDIR            # e.g. a directory filled by build.sh
#
# etcd: $ETCD, else .tools/etcd-3.5/usr/bin/etcd of the repo, else etcd on PATH.
# Ports: ETCD_PORT (23791, peer +10), API_PORT (16443), KCM_PORT (20257),
# SCHED_PORT (20259).
set -euo pipefail

die() {
	echo "smoke.sh: error: $*" >&2
	exit 1
}

[[ $# -eq 1 ]] || die "usage: smoke.sh BINDIR"
bin=$(cd "$1" && pwd) || die "no directory $1"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
	[[ -x $bin/$b ]] || die "$bin/$b is missing (run build.sh first)"
done
for t in openssl curl kubectl; do
	command -v "$t" >/dev/null || die "'$t' is not on PATH"
done
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
etcd=${ETCD:-$repo/.tools/etcd-3.5/usr/bin/etcd}
[[ -x $etcd ]] || etcd=$(command -v etcd) || die "no etcd: set ETCD=/path/to/etcd (3.5 or newer)"

etcd_port=${ETCD_PORT:-23791}
api_port=${API_PORT:-16443}
kcm_port=${KCM_PORT:-20257}
sched_port=${SCHED_PORT:-20259}
ip=127.0.0.1

tmp=$(mktemp -d /tmp/k8sbuild-smoke.XXXXXX)
pids=()
cleanup() {
	# Stop in reverse start order (etcd last); SIGKILL after 20s.
	local i p t
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		p=${pids[i]}
		kill "$p" 2>/dev/null || continue
		for t in $(seq 1 40); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.5
		done
		kill -9 "$p" 2>/dev/null && echo "smoke.sh: process $p needed SIGKILL" >&2
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

# wait_for NAME PID URL [curl args...]: poll URL until it answers ok
# (etcd: {"health":"true",...}).
wait_for() {
	local name=$1 pid=$2 url=$3 i body
	shift 3
	for i in $(seq 1 120); do
		kill -0 "$pid" 2>/dev/null || {
			tail -20 "$tmp/$name.log" >&2
			die "$name exited"
		}
		body=$(curl -s --max-time 2 "$@" "$url" 2>/dev/null) || true
		if [[ $body == ok || $body == *'"health":"true"'* ]]; then
			echo "smoke.sh: $name healthy after ${i}s" >&2
			return
		fi
		sleep 1
	done
	tail -20 "$tmp/$name.log" >&2
	die "$name not healthy at $url after 120s"
}

rss() { awk '/^VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$1/status"; }

# Certificates: a CA, the apiserver's serving cert, a service-account key
# pair, and client certs for admin (system:masters), the controller manager
# and the scheduler.
cd "$tmp"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=smoke-ca \
	-keyout ca.key -out ca.crt 2>/dev/null
client_cert() { # NAME SUBJECT [extfile lines]
	openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
	printf '%s\n' "${@:3}" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
		-extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
client_cert apiserver /CN=kube-apiserver "subjectAltName=IP:$ip,DNS:localhost" \
	"extendedKeyUsage=serverAuth"
client_cert admin "/O=system:masters/CN=smoke-admin" "extendedKeyUsage=clientAuth"
client_cert kcm /CN=system:kube-controller-manager "extendedKeyUsage=clientAuth"
client_cert sched /CN=system:kube-scheduler "extendedKeyUsage=clientAuth"
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null

kubeconfig() { # NAME
	local k=$tmp/$1.kubeconfig
	kubectl --kubeconfig "$k" config set-cluster smoke --server "https://$ip:$api_port" \
		--certificate-authority ca.crt --embed-certs >/dev/null
	kubectl --kubeconfig "$k" config set-credentials "$1" --client-certificate "$1.crt" \
		--client-key "$1.key" --embed-certs >/dev/null
	kubectl --kubeconfig "$k" config set-context smoke --cluster smoke --user "$1" >/dev/null
	kubectl --kubeconfig "$k" config use-context smoke >/dev/null
}
kubeconfig admin
kubeconfig kcm
kubeconfig sched

"$etcd" --name smoke --data-dir "$tmp/etcd" \
	--listen-client-urls "http://$ip:$etcd_port" --advertise-client-urls "http://$ip:$etcd_port" \
	--listen-peer-urls "http://$ip:$((etcd_port + 10))" \
	--initial-advertise-peer-urls "http://$ip:$((etcd_port + 10))" \
	--initial-cluster "smoke=http://$ip:$((etcd_port + 10))" >"$tmp/etcd.log" 2>&1 &
etcd_pid=$!
pids+=("$etcd_pid")
wait_for etcd "$etcd_pid" "http://$ip:$etcd_port/health"

"$bin/kube-apiserver" \
	--etcd-servers "http://$ip:$etcd_port" \
	--bind-address $ip --advertise-address $ip --secure-port "$api_port" \
	--tls-cert-file apiserver.crt --tls-private-key-file apiserver.key \
	--client-ca-file ca.crt \
	--service-account-issuer "https://$ip:$api_port" \
	--service-account-key-file sa.pub --service-account-signing-key-file sa.key \
	--authorization-mode Node,RBAC \
	--service-cluster-ip-range 10.96.0.0/16 \
	--endpoint-reconciler-type none >"$tmp/kube-apiserver.log" 2>&1 &
api_pid=$!
pids+=("$api_pid")
wait_for kube-apiserver "$api_pid" "https://$ip:$api_port/readyz" \
	--cacert ca.crt --cert admin.crt --key admin.key

export KUBECONFIG=$tmp/admin.kubeconfig
kubectl get ns
kubectl version
echo "/version: $(curl -s --cacert ca.crt --cert admin.crt --key admin.key "https://$ip:$api_port/version" | tr -d ' \n')"

"$bin/kube-controller-manager" \
	--kubeconfig kcm.kubeconfig \
	--authentication-kubeconfig kcm.kubeconfig --authorization-kubeconfig kcm.kubeconfig \
	--bind-address $ip --secure-port "$kcm_port" --cert-dir "$tmp/kcm" \
	--root-ca-file ca.crt --service-account-private-key-file sa.key \
	--cluster-signing-cert-file ca.crt --cluster-signing-key-file ca.key \
	--use-service-account-credentials --leader-elect=false >"$tmp/kube-controller-manager.log" 2>&1 &
kcm_pid=$!
pids+=("$kcm_pid")

"$bin/kube-scheduler" \
	--kubeconfig sched.kubeconfig \
	--authentication-kubeconfig sched.kubeconfig --authorization-kubeconfig sched.kubeconfig \
	--bind-address $ip --secure-port "$sched_port" --cert-dir "$tmp/sched" \
	--leader-elect=false >"$tmp/kube-scheduler.log" 2>&1 &
sched_pid=$!
pids+=("$sched_pid")

wait_for kube-controller-manager "$kcm_pid" "https://$ip:$kcm_port/healthz" -k
wait_for kube-scheduler "$sched_pid" "https://$ip:$sched_port/healthz" -k

# The controller manager is working if it made the token controller's
# default service account and root CA config map in a new namespace.
kubectl create namespace smoke >/dev/null
for i in $(seq 1 60); do
	kubectl -n smoke get serviceaccount default >/dev/null 2>&1 &&
		kubectl -n smoke get configmap kube-root-ca.crt >/dev/null 2>&1 && break
	((i < 60)) || die "kube-controller-manager made no default service account in 60s"
	sleep 1
done
echo "smoke.sh: at ${SECONDS}s controller manager made serviceaccount smoke/default and configmap smoke/kube-root-ca.crt" >&2

sleep "${SETTLE:-20}"
echo "RSS after ${SETTLE:-20}s settled: etcd $(rss "$etcd_pid"), kube-apiserver $(rss "$api_pid")," \
	"kube-controller-manager $(rss "$kcm_pid"), kube-scheduler $(rss "$sched_pid")"
for p in "$api_pid" "$kcm_pid" "$sched_pid" "$etcd_pid"; do
	kill -0 "$p" || die "process $p died"
done
echo "smoke.sh: all healthy after ${SECONDS}s; stopping" >&2

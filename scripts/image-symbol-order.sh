#!/usr/bin/env bash
# Regenerates crates/dkv-operator/image-symbol-order.txt: the functions the
# operator runs from start-up to idle, which the image build (Dockerfile,
# bench/run.sh) asks the linker to place first and together.
#
# Why: the kernel maps a binary's code into a process 64 KiB around each page
# it touches, so the operator's resident memory at idle is mostly every 64 KiB
# window of code that holds one function it ran. Scattered over the binary,
# the ~2.4 MB it runs at idle made ~10 MiB resident; packed, they make ~3.
#
# How: the image binary runs against a kube-local with the CRDs installed,
# under valgrind's callgrind, for 60 s (start-up, the first lists and
# watches, idle, shutdown); every function it entered that the binary's
# symbol table names goes into the file. Names that later builds no longer
# have are skipped by the linker, so a stale file costs memory, never
# correctness. Run it after changes to what the operator does at start-up.
#
#   scripts/image-symbol-order.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=crates/dkv-operator/image-symbol-order.txt

command -v valgrind >/dev/null || {
  echo "valgrind is needed: apt-get install -y valgrind" >&2
  exit 1
}
# Built as the image builds it (the order changes where functions are, not
# which run or their names).
source scripts/lib/image-build.sh
build_image_binary
cargo build --release --locked -p kube-local --bin kube-local

WORK="$(mktemp -d)"
KUBE_LOCAL_PID=""
cleanup() {
  if [ -n "$KUBE_LOCAL_PID" ]; then kill "$KUBE_LOCAL_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

target/release/kube-local up --data-dir "$WORK/kube-local" >"$WORK/kube-local.log" 2>&1 &
KUBE_LOCAL_PID=$!
for _ in $(seq 1 100); do
  [ -f "$WORK/kube-local/kubeconfig" ] && break
  sleep 0.2
done
export KUBECONFIG="$WORK/kube-local/kubeconfig"
kubectl apply -k deploy/crds/ >/dev/null

# SIGINT after 60 s: the operator shuts down as on a pod's deletion.
timeout -s INT 60 valgrind --tool=callgrind --demangle=no \
  --callgrind-out-file="$WORK/callgrind.out" \
  target/image/dkv operator --metrics-addr=127.0.0.1:0 --webhooks=false \
  --operator-image=ghcr.io/dkv-io/dkv:symbol-order --leader-election=false \
  --identity=symbol-order >"$WORK/operator.log" 2>&1 || true
grep -q "starting DistributedKV controller" "$WORK/operator.log" || {
  echo "the operator did not start its controllers under valgrind:" >&2
  tail -n 20 "$WORK/operator.log" >&2
  exit 1
}

python3 - "$WORK/callgrind.out" target/image/dkv "$ROOT/$OUT" <<'EOF'
import re, subprocess, sys
profile, binary, out = sys.argv[1:4]
ran = set()
for line in open(profile, errors="replace"):
    m = re.match(r"^c?fn=\(\d+\) (.+)$", line.rstrip("\n"))
    if m:
        ran.add(m.group(1))
nm = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True)
code = {p[2] for p in (l.split() for l in nm.stdout.splitlines()) if len(p) == 3 and p[1] in "tTwW"}
names = sorted(ran & code)
with open(out, "w") as f:
    f.write("\n".join(names) + "\n")
print(f"{out}: {len(names)} functions")
EOF

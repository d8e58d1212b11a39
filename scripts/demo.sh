#!/usr/bin/env bash
# The local demo. Today it builds dkv and shows what the operator would create
# for examples/distributedkv.yaml, offline; the live demo on kube-local (a
# local Kubernetes-API-compatible control plane with real etcd pods) replaces
# this as soon as kube-local can run workloads.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prerequisites.sh
echo "== building dkv"
cargo build -q -p dkv-operator --bin dkv
DKV=target/debug/dkv

echo "== the API dkv installs (CRDs):"
"$DKV" crd | sed -n 's/^  name: /   CustomResourceDefinition /p'

echo "== what the operator builds for examples/distributedkv.yaml:"
cargo run -q -p dkv-operator --example plan -- examples/distributedkv.yaml

echo "== deploy/ manifests render and validate:"
scripts/validate-manifests.sh | tail -1

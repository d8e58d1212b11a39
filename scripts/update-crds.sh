#!/usr/bin/env bash
# Regenerates deploy/crds/ from the Rust types (crates/dkv-api).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q -p dkv-operator --bin dkv -- crd | python3 -c '
import sys
docs = sys.stdin.read().split("---\n")
names = ["distributedkv.yaml", "distributedkvbackup.yaml"]
assert len(docs) == len(names), f"expected {len(names)} CRDs, got {len(docs)}"
for name, doc in zip(names, docs):
    open(f"deploy/crds/{name}", "w").write(doc)
'
# The Helm chart ships the same CRDs (scripts/check-helm.sh checks the copies).
cp deploy/crds/distributedkv.yaml deploy/crds/distributedkvbackup.yaml charts/dkv/crds/
echo "deploy/crds/ and charts/dkv/crds/ updated"

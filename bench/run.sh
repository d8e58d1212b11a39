#!/usr/bin/env bash
# dkv's benchmarks, one command: installs what they need (etcd 3.4/3.5, moto, s3s-fs),
# builds the harness with cargo's `bench` profile (release: optimized, no
# debug info; a second build next to target/debug, ~2-3 GB) and the operator
# as the image ships it (profile `image`, target/image),
# runs every section and writes bench/results.md and bench/results.json.
#
#   bench/run.sh                       # everything (~30 min on 2 cores)
#   bench/run.sh --only footprint      # one section (footprint, ops, backup, continuous, standby, pitr, nodes, upgrade, releases)
#   bench/run.sh --counts 100 --backup-size-mib 256   # smaller, quicker
#
# Extra arguments go to the harness (`--help` lists them). Results of a
# partial run overwrite the files too: commit only full runs.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prerequisites.sh
# The backup section's S3 server (the harness would build it on first use too).
scripts/install-s3s-fs.sh
# etcd 3.6 and 3.7 for the releases section (built from Go modules once).
source scripts/lib/build-once.sh
build_etcd_releases

echo "== building (release profile)"
cargo build --release --locked -p dkv-backup --features testing --example backup_throughput
# The operator as the container image ships it (Dockerfile).
source scripts/lib/image-build.sh
build_image_binary
# kube-local as its own process, for its RSS with 3 nodes against 1 (nodes).
cargo build --release --locked -p kube-local --bin kube-local
cargo bench --locked -p dkv-operator --bench harness --no-run

echo "== running"
target="${CARGO_TARGET_DIR:-$PWD/target}"
rustc_version="$(rustc --version)"
cargo bench --locked -p dkv-operator --bench harness -- \
  --backup-example "$target/release/examples/backup_throughput" \
  --operator "$target/image/dkv" \
  --kube-local "$target/release/kube-local" \
  --build "cargo bench profile (release: opt-level 3, no debug info), $rustc_version, commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.toml Cargo.lock || echo ' + uncommitted changes')" \
  "$@"

# A full run (no arguments) also runs this build against the previous
# build's members on kube-local, the twin of the real control plane's run CI
# makes (left out of CI for its 11 to 24 minutes;
# previous_release_on_kubernetes.rs).
if [ $# -eq 0 ]; then
  echo "== this build against the previous build's members, on kube-local"
  cargo nextest run --locked -p dkv-operator --test it --run-ignored only \
    -E 'test(/^previous_release_on_kubernetes::/)'
  # The adoption of a running cluster with a 1 GiB database (#54): the
  # take-over's time and the writer's figures, on the console.
  echo "== adopting a running etcd cluster with a 1 GiB database"
  cargo nextest run --locked -p dkv-operator --test it --run-ignored only --no-capture \
    -E 'test(/^adoption_on_kube_local::a_1_gib_cluster_is_taken_over$/)'
fi

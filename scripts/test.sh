#!/usr/bin/env bash
# Sets up what the tests need on a fresh Debian machine, then runs every check
# CI runs: formatting, lints, all tests, and the deploy manifests against the
# official Kubernetes schemas. `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-prerequisites.sh

echo "== cargo fmt"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

echo "== deploy manifests"
scripts/validate-manifests.sh

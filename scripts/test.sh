#!/usr/bin/env bash
# Sets up what the tests need on a fresh Debian machine, then runs every check
# CI runs: formatting, module layering (no import cycles), unique type
# names in the operator, relative links in
# the docs, lints, all tests, the deploy manifests against the
# official Kubernetes schemas, the monitoring rules, their tests and the
# dashboard's queries, the demo, and a smoke test of the installed
# release build. `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase is announced with the minutes and seconds since the start, so a
# slow CI run says where its time went.
phase() {
  printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$1"
}

source scripts/lib/build-once.sh

# What builds dkv (protoc) and runs its members first: the release build for
# the smoke test starts now, in the background, at the lowest priority and
# in a target directory of its own (neither build waits for the other's
# lock). It is CI's longest single build; started here it uses the CPU the
# downloads, the Go builds' waits and the tests' waits on etcd leave idle,
# and is done by the time the smoke test needs it.
scripts/install-prerequisites.sh --demo
RELEASE_TARGET_DIR="$PWD/target/release-smoke"
RELEASE_BUILD_LOG="$(mktemp)"
CARGO_TARGET_DIR="$RELEASE_TARGET_DIR" nice -n 19 \
  cargo build --release --locked -q -p dkv-operator --bin dkv -p kubectl-dkv --bin kubectl-dkv \
  >"$RELEASE_BUILD_LOG" 2>&1 &
RELEASE_BUILD_PID=$!
trap 'kill "$RELEASE_BUILD_PID" 2>/dev/null || true; rm -f "$RELEASE_BUILD_LOG"' EXIT

scripts/install-prerequisites.sh
# The Azure and GCS servers of the backup tests (not the demo's: it needs no
# Go).
scripts/install-store-servers.sh

phase "cargo fmt"
cargo fmt --all -- --check

phase "import cycles between modules"
python3 scripts/module-cycles.py

phase "one name for one thing: every type of the operator named once"
python3 scripts/unique-names.py

phase "relative links in docs"
python3 scripts/check-links.py

phase "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
# The operator as the container image builds it: without local mode.
cargo clippy --locked -p dkv-operator --no-default-features --bin dkv -- -D warnings

phase "the real Kubernetes control plane for its tests (built from Go modules once, then cached)"
# `dkv local up --kubernetes 1.37` builds it on first use too; building it
# here keeps a long first build out of a test's time. With Go's caches warm
# (a machine that built it before) this takes seconds.
for release in 1.37:v1.37.2 1.34:v1.34.4; do
  build_once "$PWD/.tools/kubernetes-${release#*:}/bin" kube-apiserver go/kubernetes/build.sh "${release%%:*}"
done

phase "etcd 3.6 and 3.7 for their tests (built from Go modules once, then cached)"
# No Debian release carries them; `dkv local up --etcd 3.6` builds them on
# first use the same way. The demo needs neither (nor Go).
build_etcd_releases

phase "bbolt-poke, the corruption test's tool (built from Go modules once, then cached)"
# corruption_on_kube_local.rs changes a stopped member's data with it; the
# test would build it on first use too, in its own time.
build_once "${DKV_TOOLS_DIR:-$PWD/.tools}/bbolt-poke" bbolt-poke go/bbolt-poke/build.sh

phase "helm chart: lint, and the same objects as deploy/default (builds the helm the tests install with)"
scripts/check-helm.sh

# The tests against the previous build's members need that build, made from
# git once per member-side change (into .tools/dkv-previous): made here,
# alone, with the tests' own build (beside the other tests it took 26
# minutes of CI's two cores; alone 2 to 3).
phase "the previous member side's build, for the tests against its members"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast \
    -E 'test(=previous_release_on_kubernetes::the_previous_member_side_builds_and_runs)'
fi

phase "tests (the release build goes on in the background)"
# Every test that runs the operator records, for the secret scan below, the
# values of every Secret and everything people and log pipelines see.
DKV_SECRET_SCAN_DIR="$(mktemp -d)"
export DKV_SECRET_SCAN_DIR
trap 'kill "$RELEASE_BUILD_PID" 2>/dev/null || true; rm -rf "$DKV_SECRET_SCAN_DIR" "$RELEASE_BUILD_LOG"' EXIT
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

phase "secret scan (the logs, Events and objects of the whole test run)"
scripts/scan-secrets.py "$DKV_SECRET_SCAN_DIR"

phase "deploy manifests"
scripts/validate-manifests.sh

phase "monitoring: rules, rule tests, dashboard queries"
scripts/check-monitoring.sh

phase "the README's first command, exactly as a newcomer runs it"
# It reuses the debug build above; any failed step fails CI (the demo says
# which and stops its control plane). On success it leaves kube-local
# running for the user: stop it here.
# The binaries the tests built are removed first: the demo must build what it
# runs itself, as on a fresh clone.
rm -f target/debug/dkv target/debug/kubectl-dkv
scripts/demo.sh
target/debug/dkv local down

phase "the release build, installed, as a user runs it"
if ! wait "$RELEASE_BUILD_PID"; then
  cat "$RELEASE_BUILD_LOG" >&2
  echo "the release build failed" >&2
  exit 1
fi
CARGO_TARGET_DIR="$RELEASE_TARGET_DIR" scripts/release-smoke.sh
phase "done"

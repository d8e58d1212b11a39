#!/usr/bin/env bash
# Installs the system tools dkv's build, tests and local mode need, if they are
# missing. Idempotent and quiet when everything is there.
#
#   scripts/install-prerequisites.sh          # everything (the tests, the bench)
#   scripts/install-prerequisites.sh --demo   # only what the demo builds and runs
#
# The demo (scripts/demo.sh) needs the build's tools and etcd; the test
# runner (cargo-nextest), Prometheus and the S3 server are the tests' alone,
# and a newcomer's first command does not wait for them.
set -euo pipefail
demo_only=false
case "${1:-}" in
  --demo) demo_only=true ;;
  "") ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

need_apt=()
command -v kubectl >/dev/null 2>&1 || { echo "kubectl (v1.27+) is required and not on PATH" >&2; exit 1; }
# python3 with venv (ensurepip): the tests' .venv below and
# validate-manifests.sh need it; the demo does not.
$demo_only || { command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip, venv' >/dev/null 2>&1; } ||
  need_apt+=(python3 python3-venv)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
# etcd-client compiles etcd's protobuf definitions at build time.
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)

if ((${#need_apt[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Real etcd for the members, the demo's too (3.4 system-wide, 3.5 under
# .tools/).
"$(dirname "$0")/install-etcd.sh" >/dev/null
if $demo_only; then
  exit 0
fi

# cargo-nextest runs the suite (each test in a process of its own, as the
# tests expect; see .config/nextest.toml). Built from crates.io, pinned.
NEXTEST_PIN="${NEXTEST_PIN:-0.9.151}"
if ! cargo nextest --version 2>/dev/null | grep -q "cargo-nextest $NEXTEST_PIN"; then
  echo "installing cargo-nextest $NEXTEST_PIN (cargo install, a few minutes once)"
  cargo install --quiet --locked cargo-nextest --version "$NEXTEST_PIN"
fi

# Prometheus and promtool for scripts/check-monitoring.sh: Debian's
# `prometheus` package, unpacked under .tools/ rather than installed, so that
# its maintainer scripts start no Prometheus service (see the script).
"$(dirname "$0")/install-prometheus.sh" >/dev/null

# An S3-compatible server for the backup tests: moto's server mode, in the
# repository's Python venv (the one scripts/validate-manifests.sh uses;
# DKV_VENV overrides it). Pinned so test runs are reproducible.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DKV_VENV:-$ROOT/.venv}"
MOTO_PIN="${MOTO_PIN:-5.2.5}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "creating venv $VENV"
  python3 -m venv "$VENV"
fi
moto_installed="$("$VENV/bin/python" -c \
  'from importlib.metadata import version; print(version("moto"))' 2>/dev/null || true)"
if [[ "$moto_installed" != "$MOTO_PIN" || ! -x "$VENV/bin/moto_server" ]]; then
  echo "installing moto[server]==$MOTO_PIN into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "moto[server]==$MOTO_PIN"
fi


#!/usr/bin/env bash
# Installs s3s-fs, the S3 server the backup benchmark measures against (a
# Rust server storing objects as files: unlike moto, not the bottleneck of
# the measurement on the same machine), if it is missing. Idempotent and
# quiet when it is there. Only the benchmark needs it (bench/run.sh and the
# harness's backup section run this); the tests keep moto.
#
# Built from crates.io with `cargo install --locked` (Apache-2.0; a few
# minutes once) into the tools directory (DKV_TOOLS_DIR, else .tools), at
# S3S_FS_PIN: 0.14.1 is the last release that builds with Rust 1.95 (0.15
# and later need 1.96). Built aside and moved in whole, so an interrupted
# build is not taken for a finished one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${DKV_TOOLS_DIR:-$ROOT/.tools}"
S3S_FS_PIN="${S3S_FS_PIN:-0.14.1}"
DIR="$TOOLS/s3s-fs"

if [[ "$(cat "$DIR/VERSION" 2>/dev/null || true)" == "$S3S_FS_PIN" && -x "$DIR/bin/s3s-fs" ]]; then
  exit 0
fi
echo "installing s3s-fs $S3S_FS_PIN into $DIR (cargo install, a few minutes once)"
rm -rf "$DIR.partial"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
# A target directory of its own, removed afterwards: the build is not the
# workspace's and would otherwise stay in cargo's temporary directory.
CARGO_TARGET_DIR="$build" nice -n 10 cargo install --quiet --locked \
  --root "$DIR.partial" "s3s-fs@$S3S_FS_PIN" --features binary
echo "$S3S_FS_PIN" >"$DIR.partial/VERSION"
rm -rf "$DIR"
mv "$DIR.partial" "$DIR"

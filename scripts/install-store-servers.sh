#!/usr/bin/env bash
# Installs the Azure and Google Cloud Storage servers the backup tests run
# against (moto, the S3 one, comes with install-prerequisites.sh), if they
# are missing. Idempotent and quiet when both are there. Only the tests need
# them: scripts/test.sh runs this, the demo does not (it needs no Go).
#
# Both go to the tools directory (DKV_TOOLS_DIR, else .tools; where
# install-etcd.sh puts etcd), each reinstalled only when missing or when its
# pin moved:
# - Azurite, the Azure Blob Storage emulator, from npm (AZURITE_PIN).
# - fake-gcs-server, a Google Cloud Storage emulator, built from the Go
#   module proxy by go/fake-gcs-server/build.sh at the version its go.mod
#   requires (a minute once; seconds with Go's caches warm).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${DKV_TOOLS_DIR:-$ROOT/.tools}"

if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: nodejs npm"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
AZURITE_PIN="${AZURITE_PIN:-3.37.0}"
azurite_installed="$(node -p 'require(process.argv[1]).version' \
  "$TOOLS/azurite/node_modules/azurite/package.json" 2>/dev/null || true)"
if [[ "$azurite_installed" != "$AZURITE_PIN" || ! -x "$TOOLS/azurite/node_modules/.bin/azurite-blob" ]]; then
  echo "installing azurite@$AZURITE_PIN into $TOOLS/azurite"
  mkdir -p "$TOOLS/azurite"
  npm install --prefix "$TOOLS/azurite" --no-audit --no-fund --no-save --silent "azurite@$AZURITE_PIN"
fi

FAKE_GCS="$TOOLS/fake-gcs-server"
fake_gcs_pin="$(awk '$1 == "require" && $2 == "github.com/fsouza/fake-gcs-server" { print $3 }' \
  "$ROOT/go/fake-gcs-server/go.mod")"
if [[ "$(cat "$FAKE_GCS/VERSION" 2>/dev/null || true)" != "$fake_gcs_pin" || ! -x "$FAKE_GCS/fake-gcs-server" ]]; then
  # Where Debian's golang and the official tarball put go, if PATH lacks it.
  export PATH="$PATH:/usr/local/go/bin:/usr/lib/go/bin"
  rm -rf "$FAKE_GCS.partial"
  nice -n 10 bash "$ROOT/go/fake-gcs-server/build.sh" "$FAKE_GCS.partial"
  rm -rf "$FAKE_GCS"
  mv "$FAKE_GCS.partial" "$FAKE_GCS"
fi

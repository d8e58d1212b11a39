#!/usr/bin/env bash
# Installs the etcd versions dkv tests and the local demo run:
#   3.4.x  Debian bookworm's etcd-server/etcd-client: system packages
#          (/usr/bin, for tests that run etcd from PATH) and, the same way as
#          the others, unpacked into .tools/etcd-3.4/ (what `dkv local` maps)
#   3.5.x  Debian trixie's packages, fetched with a private apt configuration
#          (the system stays on bookworm) and unpacked into .tools/etcd-3.5/
#   3.5.30 Debian unstable's, the same way, into .tools/etcd-3.5.30/
# The layout is `dkv local`'s tools directory (DKV_TOOLS_DIR; an installed
# dkv keeps its own under ~/.local/share/dkv/tools and fills it on first use).
# Idempotent; prints where the binaries are.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${DKV_TOOLS_DIR:-$PWD/.tools}"
source scripts/lib/private-apt.sh
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  echo "installing etcd 3.4 (Debian bookworm)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server etcd-client >/dev/null
fi

# fetch SUITE TARGET: etcd-server and etcd-client of Debian's SUITE, through a
# private apt configuration (the system keeps its own suite), unpacked into
# TARGET.
fetch() {
  local suite=$1 target=$2
  local apt_dir="$TOOLS/apt-$suite" apt_opts
  mkdir -p "$target"
  private_apt "$apt_dir" "$suite"
  rm -f "$apt_dir"/archives/etcd-*.deb
  (cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" download etcd-server etcd-client >/dev/null)
  for deb in "$apt_dir"/archives/etcd-*.deb; do
    dpkg -x "$deb" "$target"
  done
}

old_line="$TOOLS/etcd-3.4"
if [ ! -x "$old_line/usr/bin/etcd" ]; then
  echo "fetching etcd 3.4 (Debian bookworm) into $old_line"
  fetch bookworm "$old_line"
fi
target="$TOOLS/etcd-3.5"
if [ ! -x "$target/usr/bin/etcd" ]; then
  echo "fetching etcd 3.5 (Debian trixie) into $target"
  fetch trixie "$target"
fi
# A later 3.5 patch release (Debian unstable), for patch-level upgrade tests
# (registry.k8s.io/etcd:3.5.30-0 maps to it).
latest="$TOOLS/etcd-3.5.30"
if [ ! -x "$latest/usr/bin/etcd" ]; then
  echo "fetching etcd 3.5.30 (Debian unstable) into $latest"
  fetch unstable "$latest"
  # The version is read whole first: `grep -q` stopping early would make
  # etcd's write fail and, under pipefail, the check report a mismatch.
  if ! grep -q 'etcd Version: 3.5.30$' <<<"$("$latest/usr/bin/etcd" --version)"; then
    echo "Debian unstable no longer has etcd 3.5.30 ($("$latest/usr/bin/etcd" --version | head -1)); update scripts/install-etcd.sh and kube-local's image map" >&2
  fi
fi
echo "etcd 3.4: $(command -v etcd) ($(etcd --version | head -1)), $old_line/usr/bin/etcd"
echo "etcd 3.5: $target/usr/bin/etcd ($("$target/usr/bin/etcd" --version | head -1))"
echo "etcd 3.5.30: $latest/usr/bin/etcd ($("$latest/usr/bin/etcd" --version | head -1))"

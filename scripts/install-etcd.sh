#!/usr/bin/env bash
# Installs the etcd versions dkv tests and the local demo run:
#   3.4.x  Debian bookworm's etcd-server/etcd-client (system packages, /usr/bin)
#   3.5.x  Debian trixie's packages, fetched with a private apt configuration
#          (the system stays on bookworm) and unpacked into .tools/etcd-3.5/
# Idempotent; prints where the binaries are.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${DKV_TOOLS_DIR:-$PWD/.tools}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  echo "installing etcd 3.4 (Debian bookworm)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server etcd-client >/dev/null
fi

target="$TOOLS/etcd-3.5"
if [ ! -x "$target/usr/bin/etcd" ]; then
  echo "fetching etcd 3.5 (Debian trixie) into $target"
  apt_dir="$TOOLS/apt-trixie"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$target"
  echo "deb http://deb.debian.org/debian trixie main" > "$apt_dir/sources.list"
  apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=-"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache::Archives=$apt_dir/archives"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
  )
  apt-get "${apt_opts[@]}" update -qq
  (cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" download etcd-server etcd-client >/dev/null)
  for deb in "$apt_dir"/archives/etcd-*.deb; do
    dpkg -x "$deb" "$target"
  done
fi
echo "etcd 3.4: $(command -v etcd) ($(etcd --version | head -1))"
echo "etcd 3.5: $target/usr/bin/etcd ($("$target/usr/bin/etcd" --version | head -1))"

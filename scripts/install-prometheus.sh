#!/usr/bin/env bash
# Makes Prometheus and promtool available to scripts/check-monitoring.sh.
#
# When both are on PATH they are used as they are. Otherwise Debian's
# `prometheus` package (bookworm) is downloaded and unpacked into
# .tools/prometheus/ (DKV_TOOLS_DIR overrides .tools) instead of installed
# system-wide: the package's maintainer scripts create a user and start a
# Prometheus service on :9090 where no systemd and no policy-rc.d stop them,
# which a test machine or a container does not want. The binaries are static
# Go programs and run from anywhere; only the web UI's JavaScript (which no
# check uses) comes from other packages.
#
# Idempotent; prints where the binaries are.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="${DKV_TOOLS_DIR:-$PWD/.tools}"
source scripts/lib/private-apt.sh
target="$TOOLS/prometheus"

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "prometheus: $(command -v prometheus), promtool: $(command -v promtool)"
  exit 0
fi

if [ ! -x "$target/usr/bin/prometheus" ] || [ ! -x "$target/usr/bin/promtool" ]; then
  echo "fetching prometheus (Debian bookworm) into $target"
  # A private apt configuration, as scripts/install-etcd.sh uses: the
  # system's own sources and state are neither read nor changed.
  apt_dir="$TOOLS/apt-prometheus"
  mkdir -p "$target"
  private_apt "$apt_dir" bookworm
  rm -f "$apt_dir"/archives/prometheus_*.deb
  (cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" download prometheus >/dev/null)
  debs=("$apt_dir"/archives/prometheus_*.deb)
  [ -f "${debs[0]}" ] || { echo "install-prometheus: apt-get download prometheus fetched nothing" >&2; exit 1; }
  dpkg -x "${debs[0]}" "$target"
fi

for bin in prometheus promtool; do
  "$target/usr/bin/$bin" --version >/dev/null 2>&1 ||
    { echo "install-prometheus: $target/usr/bin/$bin does not run" >&2; exit 1; }
done
echo "prometheus: $target/usr/bin/prometheus ($("$target/usr/bin/prometheus" --version 2>&1 | head -1))"
echo "promtool: $target/usr/bin/promtool"

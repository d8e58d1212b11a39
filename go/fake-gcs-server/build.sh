#!/usr/bin/env bash
# Build fake-gcs-server (a Google Cloud Storage emulator; the backup tests
# run against it) from the Go module proxy.
#
#   build.sh OUTDIR     # writes OUTDIR/fake-gcs-server
#
# The version is the one go.mod requires (github.com/fsouza/fake-gcs-server
# vX.Y.Z); to move to another: go get github.com/fsouza/fake-gcs-server@vX.Y.Z
# && go mod tidy, here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

go_module_build fake-gcs-server "$@"
module=github.com/fsouza/fake-gcs-server
version=$(go_required "$module")
[[ $version == v* ]] || die "no 'require $module vX.Y.Z' line in $here/go.mod"
go_fetch "$module $version"

echo "build.sh: building fake-gcs-server $version into $out" >&2
go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$out/fake-gcs-server" "$module" ||
	die "go build of fake-gcs-server $version failed (see the go output above)"
# The version built, for install-prerequisites.sh to tell when go.mod moved.
echo "$version" >"$out/VERSION"

"$out/fake-gcs-server" -help >/dev/null 2>&1 ||
	die "the fake-gcs-server just built in $out does not run"
ls -l "$out/fake-gcs-server" >&2

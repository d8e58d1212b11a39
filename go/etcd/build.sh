#!/usr/bin/env bash
# Build etcd's etcd, etcdctl and etcdutl of one release line from etcd's own
# Go modules on the module proxy.
#
#   build.sh 3.7 OUTDIR     # etcd release pinned in v3.7/go.mod
#   build.sh 3.6 OUTDIR     # etcd release pinned in v3.6/go.mod
#
# The release is the one vMINOR/go.mod requires (go.etcd.io/etcd/server/v3,
# etcdctl/v3 and etcdutl/v3 at the same vX.Y.Z); to move to another:
#   go get go.etcd.io/etcd/{server,etcdctl,etcdutl}/v3@vX.Y.Z && go mod tidy
# in that directory. etcd's server has no main package in any module (its
# main.go sits at the root of etcd's repository), so vMINOR/etcd/main.go
# calls the server's entry point, etcdmain.Main; etcdctl and etcdutl are
# main packages at their modules' roots.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

go_line_build etcd "$@"
moddir=$PWD
version=$(go_required go.etcd.io/etcd/server/v3)
[[ $version == v$minor.* ]] || die "no 'require go.etcd.io/etcd/server/v3 v$minor.x' line in $moddir/go.mod"
for module in etcdctl etcdutl; do
	[[ $(go_required "go.etcd.io/etcd/$module/v3") == "$version" ]] ||
		die "$moddir/go.mod requires go.etcd.io/etcd/$module/v3 at another version than the server's $version"
done
go_fetch "etcd $version"

# The release version is a constant of etcd's api module; etcd's own build
# stamps only the commit, which the proxy does not tell: left empty rather
# than etcd's "Not provided (use ./build instead of go build)".
ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA="

echo "build.sh: building etcd $version (etcd, etcdctl, etcdutl) into $out" >&2
go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$out/" \
	./etcd go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3 ||
	die "go build of etcd $version failed (see the go output above)"

# Each binary must report the release the images of that version map to.
reported=$("$out/etcd" --version) || die "the etcd just built in $out does not run"
grep -qx "etcd Version: ${version#v}" <<<"$reported" ||
	die "$out/etcd reports another version than ${version#v}: $(head -1 <<<"$reported")"
for tool in etcdctl etcdutl; do
	reported=$("$out/$tool" version) || die "the $tool just built in $out does not run"
	grep -qx "$tool version: ${version#v}" <<<"$reported" ||
		die "$out/$tool reports another version than ${version#v}: $(head -1 <<<"$reported")"
done
ls -l "$out"/etcd "$out"/etcdctl "$out"/etcdutl >&2

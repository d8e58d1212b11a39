#!/usr/bin/env bash
# Build bbolt-poke (see main.go): the tests use it to make one member's data
# differ from its peers' for etcd's corruption checks to find.
#
#   build.sh OUTDIR     # writes OUTDIR/bbolt-poke
#
# Needs Go on PATH; the bbolt version is the one go.mod requires.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

go_module_build bbolt-poke "$@"
go_fetch "bbolt-poke (go.etcd.io/bbolt $(go_required go.etcd.io/bbolt))"
go build -buildvcs=false -trimpath -o "$out/bbolt-poke.partial" . ||
	die "go build of bbolt-poke failed (see the go output above)"
mv "$out/bbolt-poke.partial" "$out/bbolt-poke"

#!/usr/bin/env bash
# Build the real Kubernetes control-plane binaries (kube-apiserver,
# kube-controller-manager, kube-scheduler) from the Go module proxy.
#
#   build.sh 1.37 OUTDIR     # Kubernetes version pinned in v1.37/go.mod
#   build.sh 1.34 OUTDIR     # Kubernetes version pinned in v1.34/go.mod
#
# The Kubernetes version comes from the module directory's go.mod (require
# k8s.io/kubernetes vX.Y.Z, staging modules replaced by v0.Y.Z); see NOTES.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$here/../lib.sh"

go_line_build Kubernetes "$@"
moddir=$PWD
version=$(go_required k8s.io/kubernetes)
[[ $version == v1.* ]] || die "no 'require k8s.io/kubernetes v1.x.y' line in $moddir/go.mod"
go_fetch "k8s.io/kubernetes $version"

date=$(go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes) ||
	die "cannot read the release date of k8s.io/kubernetes $version"
major=${version#v}
major=${major%%.*}
minor_num=${version#v*.}
minor_num=${minor_num%%.*}

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_num"
	ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean"
	[[ -z $date ]] || ldflags+=" -X $pkg.buildDate=$date"
done

echo "build.sh: building Kubernetes $version control plane into $out" >&2
go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$out/" \
	k8s.io/kubernetes/cmd/kube-apiserver \
	k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler ||
	die "go build of Kubernetes $version failed (see the go output above)"

ls -l "$out"/kube-apiserver "$out"/kube-controller-manager "$out"/kube-scheduler >&2

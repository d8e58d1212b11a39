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

die() {
	echo "build.sh: error: $*" >&2
	exit 1
}

[[ $# -eq 2 ]] || die "usage: build.sh MINOR OUTDIR (MINOR is one of: $(cd "$here" && ls -d v*/ | tr -d v/ | tr '\n' ' '))"
minor=${1#v}
out=$2
moddir=$here/v$minor
[[ -f $moddir/go.mod ]] || die "no module for Kubernetes $minor: $moddir/go.mod is missing"

command -v go >/dev/null 2>&1 ||
	die "'go' is not on PATH: install Go 1.26 or newer (e.g. /usr/local/go/bin) and retry"

mkdir -p "$out" || die "cannot create output directory $out"
out=$(cd "$out" && pwd)

cd "$moddir"
export CGO_ENABLED=0

# The Go version go.mod asks for, versus the go that would run.
need=$(awk '$1 == "go" { print $2; exit }' go.mod)
have=$(go env GOVERSION 2>&1) || die "'go env GOVERSION' failed in $moddir: $have"
have=${have#go}
if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
	die "Kubernetes $minor needs go >= $need, but go on PATH is $have (GOTOOLCHAIN=$(go env GOTOOLCHAIN)): put a newer go on PATH or export GOTOOLCHAIN=go$need or newer (served by the Go module proxy)"
fi

version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 } $1 == "k8s.io/kubernetes" { print $2 }' go.mod | head -1)
[[ $version == v1.* ]] || die "no 'require k8s.io/kubernetes v1.x.y' line in $moddir/go.mod"

# Fetch every module first, so a proxy failure is reported by module name.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! go mod download -json >"$log" 2>&1; then
	failed=$(awk -F'"' '
		/"Path":/    { p = $4 }
		/"Version":/ { v = $4 }
		/"Error":/   { e = $0; sub(/^[^:]*: "/, "", e); sub(/",?$/, "", e); print p "@" v ": " e }
	' "$log")
	[[ -n $failed ]] || failed=$(grep -v '^[[:space:]{}]' "$log")
	n=$(printf '%s\n' "$failed" | wc -l)
	failed=$(printf '%s\n' "$failed" | head -5)
	((n <= 5)) || failed+=$'\n'"(and $((n - 5)) more)"
	die "fetching the modules of k8s.io/kubernetes $version failed (GOPROXY=$(go env GOPROXY)):
$failed"
fi

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

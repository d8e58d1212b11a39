#!/usr/bin/env bash
# Build the helm command (the chart's lint and render checks use it) from the
# Go module proxy.
#
#   build.sh OUTDIR     # writes OUTDIR/helm
#
# The Helm version is the one go.mod requires (helm.sh/helm/v3 vX.Y.Z); to
# move to another: go get helm.sh/helm/v3@vX.Y.Z && go mod tidy, here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() {
	echo "build.sh: error: $*" >&2
	exit 1
}

[[ $# -eq 1 ]] || die "usage: build.sh OUTDIR"
out=$1

command -v go >/dev/null 2>&1 ||
	die "'go' is not on PATH: install Go 1.26 or newer (e.g. /usr/local/go/bin) and retry"

mkdir -p "$out" || die "cannot create output directory $out"
out=$(cd "$out" && pwd)

cd "$here"
export CGO_ENABLED=0

# The Go version go.mod asks for, versus the go that would run.
need=$(awk '$1 == "go" { print $2; exit }' go.mod)
have=$(go env GOVERSION 2>&1) || die "'go env GOVERSION' failed in $here: $have"
have=${have#go}
if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
	die "helm needs go >= $need, but go on PATH is $have (GOTOOLCHAIN=$(go env GOTOOLCHAIN)): put a newer go on PATH or export GOTOOLCHAIN=go$need or newer (served by the Go module proxy)"
fi

version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 } $1 == "helm.sh/helm/v3" { print $2 }' go.mod | head -1)
[[ $version == v3.* ]] || die "no 'require helm.sh/helm/v3 v3.x.y' line in $here/go.mod"

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
	die "fetching the modules of helm.sh/helm/v3 $version failed (GOPROXY=$(go env GOPROXY)):
$failed"
fi

# What Helm's own Makefile stamps in: the release version (else `helm
# version` says only "v3.22"), and the Kubernetes version of its client-go,
# which `helm template` reports as .Capabilities.KubeVersion and `helm lint`
# checks deprecated APIs against (else both assume 1.20).
client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go) ||
	die "cannot read the k8s.io/client-go version helm $version uses"
k8s_minor=${client_go#v0.}
k8s_minor=${k8s_minor%%.*}
[[ $k8s_minor =~ ^[0-9]+$ ]] || die "unexpected k8s.io/client-go version $client_go"

ldflags="-s -w"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=$version"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata="
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

echo "build.sh: building helm $version into $out" >&2
go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$out/helm" helm.sh/helm/v3/cmd/helm ||
	die "go build of helm $version failed (see the go output above)"

"$out/helm" version --template '{{.Version}}' >/dev/null ||
	die "the helm just built in $out does not run"
ls -l "$out/helm" >&2

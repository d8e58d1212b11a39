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
# shellcheck source=../lib.sh
source "$here/../lib.sh"

go_module_build helm "$@"
version=$(go_required helm.sh/helm/v3)
[[ $version == v3.* ]] || die "no 'require helm.sh/helm/v3 v3.x.y' line in $here/go.mod"
go_fetch "helm.sh/helm/v3 $version"

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

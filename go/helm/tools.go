//go:build tools

// Package helm pins the Helm command so that go mod tidy keeps its
// requirements; build.sh builds it from here.
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
)

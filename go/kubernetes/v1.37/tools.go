//go:build tools

// Package kubernetes pins the Kubernetes control-plane commands so that
// go mod tidy keeps their requirements; build.sh builds them from here.
package kubernetes

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)

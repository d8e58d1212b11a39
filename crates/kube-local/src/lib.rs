//! kube-local: a local Kubernetes-API-compatible control plane.

//go:build tools

// Package etcd pins etcdctl and etcdutl (main packages at their modules'
// roots) so that go mod tidy keeps their requirements; build.sh builds them
// from here, and etcd from ./etcd.
package etcd

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
)

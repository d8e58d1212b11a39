// Command etcd is etcd's server, built from etcd's own modules: its main
// package lives at the root of etcd's repository, which is no module of its
// own on the proxy, so this one calls the same entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

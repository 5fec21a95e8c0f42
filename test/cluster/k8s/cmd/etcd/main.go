// Command etcd is upstream etcd's server entry point, built inside this module so it shares one
// build (and one dependency graph) with the Kubernetes components.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

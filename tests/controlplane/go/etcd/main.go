// Command etcd is etcd's server, built from the pinned go.etcd.io/etcd/server/v3 module: the tests'
// control plane stores its objects here, as a cluster's does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }

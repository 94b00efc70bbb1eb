// Command etcd is the etcd server, built from its Go module so that tests and
// the local fleet need no downloaded binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain),
// built in the same module as Kubernetes so that one `go build` makes both.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

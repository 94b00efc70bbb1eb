// Command coredns is the cluster DNS of the real-node fleet's members
// (hack/realnode.sh dns): CoreDNS built from its Go module with only the
// plugins a member's kube-dns needs. CoreDNS's own main (coredns.go) imports
// core/plugin, which links every plugin (cloud DNS providers, etcd, ...);
// CoreDNS documents building with a chosen set of plugins by setting
// dnsserver.Directives and importing those plugins (core/dnsserver/zdirectives.go
// holds the default order, which the list below keeps).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives in the order of core/dnsserver/zdirectives.go (coredns v1.14.7):
// a plugin earlier in the list sees a query first.
var directives = []string{
	"ready",
	"health",
	"errors",
	"loadbalance",
	"cache",
	"kubernetes",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }

// Command coredns is CoreDNS v1.15.0 with every in-tree plugin plus global.
package main

import (
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/core/plugin" // every in-tree plugin
	"github.com/coredns/coredns/coremain"

	_ "github.com/globaldns/global/plugin/global"
	"github.com/globaldns/global/plugin/global/telemetry"
)

// after is the directive global follows: it answers its zones before anything that could
// forward or rewrite them, and right after the cluster's own names.
const after = "kubernetes"

// directives returns CoreDNS's directive order with global inserted right after `after`.
func directives(base []string) []string {
	i := slices.Index(base, after)
	if i < 0 {
		panic("coredns: no " + after + " directive to insert " + telemetry.Plugin + " after")
	}
	return slices.Insert(slices.Clone(base), i+1, telemetry.Plugin)
}

func main() {
	if err := dnsserver.SetDirectives(directives(dnsserver.Directives)); err != nil {
		panic(err)
	}
	coremain.Run()
}

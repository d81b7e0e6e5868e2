package main

import (
	"fmt"
	"strings"

	"github.com/coredns/caddy/caddyfile"
	"github.com/coredns/coredns/plugin"
	"github.com/miekg/dns"
)

// upstreams are NodeLocal DNSCache's ways of saying the node's resolvers.
var upstreams = []string{"__PILLAR__UPSTREAM__SERVERS__", "/etc/resolv.conf"}

// nodeLocalForwards says what is wrong with how blocks, NodeLocal DNSCache's Corefile, handles
// zone: "" when the most specific block for it (not the root's) forwards somewhere other than upstream.
func nodeLocalForwards(blocks []caddyfile.ServerBlock, zone string) string {
	best, bestKey, bestLabels := -1, "", 0
	for i, sb := range blocks {
		for _, k := range sb.Keys {
			for _, z := range plugin.Host(k).NormalizeExact() { // as CoreDNS reads a server block's key
				if n := dns.CountLabel(z); z != "." && dns.IsSubDomain(z, zone) && n > bestLabels {
					best, bestKey, bestLabels = i, z, n
				}
			}
		}
	}
	if best < 0 {
		return fmt.Sprintf("%s: NodeLocal DNSCache has no server block for it and sends it to the node's upstream resolvers", zone)
	}
	fwd := caddyfile.NewDispenserTokens("", blocks[best].Tokens["forward"])
	fwd.Next()
	args := fwd.RemainingArgs() // of its first forward: FROM TO...
	if len(args) < 2 {
		return fmt.Sprintf("%s: NodeLocal DNSCache's block %s does not forward it", zone, bestKey)
	}
	for _, to := range args[1:] {
		for _, u := range upstreams {
			if strings.Contains(to, u) {
				return fmt.Sprintf("%s: NodeLocal DNSCache's block %s forwards it to %s, the node's upstream resolvers", zone, bestKey, to)
			}
		}
	}
	return ""
}

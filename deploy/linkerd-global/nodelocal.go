package main

import (
	"fmt"
	"strings"

	"github.com/coredns/caddy/caddyfile"
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
			z := keyZone(k)
			if n := dns.CountLabel(z); z != "." && dns.IsSubDomain(z, zone) && n > bestLabels {
				best, bestKey, bestLabels = i, z, n
			}
		}
	}
	if best < 0 {
		return fmt.Sprintf("%s: NodeLocal DNSCache has no server block for it and sends it to the node's upstream resolvers", zone)
	}
	fwd := directives(blocks[best], "forward")
	if len(fwd) == 0 || len(fwd[0].Args) < 2 {
		return fmt.Sprintf("%s: NodeLocal DNSCache's block %s does not forward it", zone, bestKey)
	}
	for _, to := range fwd[0].Args[1:] {
		for _, u := range upstreams {
			if strings.Contains(to, u) {
				return fmt.Sprintf("%s: NodeLocal DNSCache's block %s forwards it to %s, the node's upstream resolvers", zone, bestKey, to)
			}
		}
	}
	return ""
}

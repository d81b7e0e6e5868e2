package global

import (
	"math/rand/v2"
	"net"
	"net/netip"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

func (g *Global) hdr(owner string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: g.ttl}
}

func (g *Global) soa(zone string, snap *index.Snapshot) *dns.SOA {
	return &dns.SOA{
		Hdr:     g.hdr(zone, dns.TypeSOA),
		Ns:      nameserver(zone),
		Mbox:    "hostmaster.dns." + zone,
		Serial:  snap.Serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  g.ttl,
	}
}

// addrs returns one A or AAAA record per record, in the index's (tier) order, each tier rotated
// by a random offset unless rotation is off: naive clients dial the first address, and the
// loadbalance plugin would shuffle the tiers away.
func (g *Global) addrs(owner string, rs []index.Record) []dns.RR {
	if len(rs) == 0 {
		return nil
	}
	out := make([]dns.RR, len(rs))
	off := 0
	if g.rotate && len(rs) > 1 {
		off = int(rand.Uint32() >> 1) // the runtime's per-thread generator: no lock, no allocation
	}
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && rs[j].Tier == rs[i].Tier {
			j++
		}
		for k, n := 0, j-i; k < n; k++ {
			out[i+k] = g.addr(owner, rs[i+(k+off)%n].Addr)
		}
		i = j
	}
	return out
}

func (g *Global) addr(owner string, a netip.Addr) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: g.hdr(owner, dns.TypeA), A: net.IP(a.AsSlice())}
	}
	return &dns.AAAA{Hdr: g.hdr(owner, dns.TypeAAAA), AAAA: net.IP(a.AsSlice())}
}

// srv returns one SRV record per target and port matching port/proto ("" matches any), and the
// targets' addresses as glue. Priority is the tier; targets of one tier share the weight equally.
func (g *Global) srv(owner string, zone string, k index.Key, v index.View, port, proto string) (answer, extra []dns.RR) {
	match := func(p index.Port) bool { return portMatches(p, port, proto) }
	var perTier [256]int
	for t := range v.Targets() {
		for _, p := range t.Ports {
			if match(p) {
				perTier[t.Tier]++
			}
		}
	}
	suffix := "." + g.scheme(zone).serviceDomain(k, zone)
	for t := range v.Targets() {
		target := ""
		for _, p := range t.Ports {
			if !match(p) {
				continue
			}
			if target == "" {
				target = t.Host + "." + t.Cluster + suffix
				extra = append(extra, g.addrs(target, t.A)...)
				extra = append(extra, g.addrs(target, t.AAAA)...)
			}
			answer = append(answer, &dns.SRV{
				Hdr:      g.hdr(owner, dns.TypeSRV),
				Priority: uint16(t.Tier),
				Weight:   uint16(max(1, 100/perTier[t.Tier])),
				Port:     uint16(p.Port),
				Target:   target,
			})
		}
	}
	return answer, extra
}

// glue returns the A and/or AAAA records of the addresses this server listens on.
func (g *Global) glue(owner string, types ...uint16) []dns.RR {
	var out []dns.RR
	for _, a := range g.nsAddrs {
		for _, t := range types {
			if a.Is4() == (t == dns.TypeA) {
				out = append(out, g.addr(owner, a))
			}
		}
	}
	return out
}

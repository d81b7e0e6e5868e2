package global

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"

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
	var recs records
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && rs[j].Tier == rs[i].Tier {
			j++
		}
		for k, n := 0, j-i; k < n; k++ {
			out[i+k] = recs.next(g, owner, rs[i+(k+off)%n].Addr(), len(rs)-i-k)
		}
		i = j
	}
	return out
}

// records hands out A and AAAA records, each with its address bytes, from one allocation per
// family and answer instead of two per record.
type records struct {
	a    []aRecord
	aaaa []aaaaRecord
}

type aRecord struct {
	dns.A
	ip [4]byte
}

type aaaaRecord struct {
	dns.AAAA
	ip [16]byte
}

// next returns the record of a, making room for up to left more of its family when it has none.
func (rs *records) next(g *Global, owner string, a netip.Addr, left int) dns.RR {
	if a.Is4() {
		if len(rs.a) == 0 {
			rs.a = make([]aRecord, left)
		}
		r := &rs.a[0]
		rs.a = rs.a[1:]
		r.ip = a.As4()
		r.A = dns.A{Hdr: g.hdr(owner, dns.TypeA), A: r.ip[:]}
		return &r.A
	}
	if len(rs.aaaa) == 0 {
		rs.aaaa = make([]aaaaRecord, left)
	}
	r := &rs.aaaa[0]
	rs.aaaa = rs.aaaa[1:]
	r.ip = a.As16()
	r.AAAA = dns.AAAA{Hdr: g.hdr(owner, dns.TypeAAAA), AAAA: r.ip[:]}
	return &r.AAAA
}

func (g *Global) addr(owner string, a netip.Addr) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: g.hdr(owner, dns.TypeA), A: net.IP(a.AsSlice())}
	}
	return &dns.AAAA{Hdr: g.hdr(owner, dns.TypeAAAA), AAAA: net.IP(a.AsSlice())}
}

// srv returns one SRV record per target and port matching port/proto ("" matches any), of the
// tiers policy p answers, and the targets' addresses as glue. Priority is the tier; targets of one
// tier share the weight equally. A first pass sizes everything, so the answer takes a handful of
// allocations, not a few per target: the records, the glue, and the target names cut from one string.
func (g *Global) srv(owner string, zone string, k index.Key, v index.View, port, proto string, p index.Policy) (answer, extra []dns.RR) {
	domain := g.scheme(zone).serviceDomain(k, zone)
	domainLen := 0
	for _, s := range domain {
		domainLen += len(s)
	}
	// The length of a target's name, <host>.<cluster>.<domain>: what the builder below writes.
	nameLen := func(t index.Target) int { return len(t.Host) + 1 + len(t.Cluster) + 1 + domainLen }
	// The targets, merged from both families once, each with its count of matching ports: on
	// the stack for the usual few.
	var buf [8]srvTarget
	targets := buf[:0]
	srvs, v4, v6, names := 0, 0, 0, 0
	for t := range v.Targets() {
		n := 0
		for _, p := range t.Ports {
			if portMatches(p, port, proto) {
				n++
			}
		}
		if n > 0 && len(targets) > 0 && t.Tier != targets[len(targets)-1].Tier && p.Full(srvs) {
			break
		}
		if n > 0 {
			targets = append(targets, srvTarget{t, n})
			srvs, v4, v6 = srvs+n, v4+len(t.A), v6+len(t.AAAA)
			names += nameLen(t)
		}
	}
	if srvs == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.Grow(names)
	for _, t := range targets {
		b.WriteString(t.Host)
		b.WriteByte('.')
		b.WriteString(t.Cluster)
		b.WriteByte('.')
		for _, s := range domain {
			b.WriteString(s)
		}
	}
	all := b.String()
	rrs := make([]dns.RR, srvs+v4+v6) // the answer and the glue, one allocation
	answer, extra = rrs[:0:srvs], rrs[srvs:srvs]
	srvRecords := make([]dns.SRV, srvs)
	glue := records{a: make([]aRecord, v4), aaaa: make([]aaaaRecord, v6)}
	weight := uint16(0)
	for i, t := range targets {
		if i == 0 || t.Tier != targets[i-1].Tier {
			// Targets come in tier order: the tier's records are this target's and the next ones'.
			inTier := 0
			for _, u := range targets[i:] {
				if u.Tier != t.Tier {
					break
				}
				inTier += u.srvs
			}
			weight = uint16(max(1, 100/inTier))
		}
		n := nameLen(t.Target)
		target := all[:n]
		all = all[n:]
		for _, r := range t.A {
			extra = append(extra, glue.next(g, target, r.Addr(), 0))
		}
		for _, r := range t.AAAA {
			extra = append(extra, glue.next(g, target, r.Addr(), 0))
		}
		for _, p := range t.Ports {
			if !portMatches(p, port, proto) {
				continue
			}
			srv := &srvRecords[len(answer)]
			*srv = dns.SRV{
				Hdr:      g.hdr(owner, dns.TypeSRV),
				Priority: uint16(t.Tier),
				Weight:   weight,
				Port:     uint16(p.Port),
				Target:   target,
			}
			answer = append(answer, srv)
		}
	}
	return answer, extra
}

// srvTarget is a target of an SRV answer and how many of its ports the question matches.
type srvTarget struct {
	index.Target
	srvs int
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

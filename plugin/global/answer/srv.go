package answer

import (
	"net"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/miekg/dns"
)

// srv returns one SRV record per target of kept, the records an answer keeps in tier order, and
// per port of it that name n asks for, and the targets' addresses as glue; domain is the service's
// name, where the targets' names end. Priority is the tier; targets of one tier share the weight
// equally. A first pass sizes everything, so the answer takes a handful of allocations, not a few
// per target: the records, the glue, and the target names cut from one string. Targets past what
// a reply of size bytes can hold are not made (the server truncates the reply and says so).
func (mk *Maker) srv(owner string, domain [5]string, kept index.View, n *name, replySize int) (answer, extra []dns.RR) {
	var buf [8]srvTarget // the usual few targets, on the stack
	targets, size := srvTargets(buf[:0], kept, n, domain, replySize)
	if size.srvs == 0 {
		return nil, nil
	}
	names := targetNames(targets, domain, size.names)
	rrs := make([]dns.RR, size.srvs+size.v4+size.v6) // the answer and the glue, one allocation
	answer, extra = rrs[:0:size.srvs], rrs[size.srvs:size.srvs]
	srvRecords := make([]dns.SRV, size.srvs)
	glue := records{a: make([]dns.A, size.v4), aaaa: make([]dns.AAAA, size.v6)}
	weight := uint16(0)
	for i := range targets {
		t := &targets[i] // not copied: a target is 64 bytes
		if i == 0 || t.Tier != targets[i-1].Tier {
			weight = tierWeight(targets[i:], size.lastTier)
		}
		target := names[:t.nameLen]
		names = names[t.nameLen:]
		for _, r := range t.A {
			extra = append(extra, glue.next(mk, target, r.Endpoint))
		}
		for _, r := range t.AAAA {
			extra = append(extra, glue.next(mk, target, r.Endpoint))
		}
		made := int32(0)
		for _, p := range t.Ports {
			if made == t.made {
				break // the rest would not fit
			}
			if n.ports.Matches(p) {
				srv := &srvRecords[len(answer)] // filled in place, as addrs
				srv.Hdr, srv.Priority, srv.Weight, srv.Port, srv.Target = mk.hdr(owner, dns.TypeSRV), uint16(t.Tier), weight, uint16(p.Port), target
				answer, made = append(answer, srv), made+1
			}
		}
	}
	return answer, extra
}

// srvTarget is a target of an SRV answer, how many of its ports the question matches, how many
// of those the answer holds (made: a reply has room for so many, however many ports a Service
// has), and the length of its name, <host>.<cluster>.<domain>.
type srvTarget struct {
	index.Target
	srvs, made, nameLen int32
}

// srvSize is what an SRV answer holds: SRV records, glue of each family, and the bytes of its
// target names; and the SRV records of its last tier, those of targets not made included.
type srvSize struct{ srvs, v4, v6, names, lastTier int }

// srvTargets appends to targets those of kept with a port n asks for, merged from both families
// once, until they fill a reply of size bytes, and returns what the answer made of them holds.
func srvTargets(targets []srvTarget, kept index.View, n *name, domain [5]string, replySize int) ([]srvTarget, srvSize) {
	domainLen := 0
	for _, s := range domain {
		domainLen += len(s)
	}
	var size srvSize
	least := 0 // the least bytes the targets so far take
	for t := range kept.Targets() {
		ports := matching(t.Ports, n)
		switch {
		case ports == 0:
		case least > replySize && t.Tier != targets[len(targets)-1].Tier:
			return targets, size // full, and the last tier counted whole
		case least > replySize:
			size.lastTier += ports // not made, but its tier's weights count it
		default:
			if len(targets) > 0 && t.Tier != targets[len(targets)-1].Tier {
				size.lastTier = 0
			}
			l := len(t.Host) + 1 + len(t.Cluster) + 1 + domainLen
			perSRV := minSRVRR + len(t.Host) + len(t.Cluster) + 4
			made := min(ports, (replySize-least)/perSRV+1) // and one more than fits: the server cuts, and says so
			targets = append(targets, srvTarget{t, int32(ports), int32(made), int32(l)})
			size.srvs, size.v4, size.v6, size.names = size.srvs+made, size.v4+len(t.A), size.v6+len(t.AAAA), size.names+l
			size.lastTier += ports
			least += made*perSRV + len(t.A)*minAddrRR + len(t.AAAA)*(minAddrRR+12)
		}
	}
	return targets, size
}

// matching counts the ports of ps that n asks for: all of them for a name without port labels,
// else at most one (a Service's and a slice's port names are unique), found by a scan that stops
// there.
func matching(ps []index.Port, n *name) int {
	q := &n.ports
	if q.Name == "" && q.Protocol == "" {
		return len(ps)
	}
	c := 0
	for i := range ps {
		if q.Matches(ps[i]) {
			if c++; q.Name != "" {
				break
			}
		}
	}
	return c
}

// targetNames returns the names of targets, one after another in one string of size bytes. The
// domain is written in pieces once, then copied whole from what is written.
func targetNames(targets []srvTarget, domain [5]string, size int) string {
	var b strings.Builder
	b.Grow(size)
	dom := ""
	for i := range targets {
		t := &targets[i]
		b.WriteString(t.Host)
		b.WriteByte('.')
		b.WriteString(t.Cluster)
		b.WriteByte('.')
		if dom != "" {
			b.WriteString(dom)
			continue
		}
		from := b.Len()
		for _, s := range domain {
			b.WriteString(s)
		}
		dom = b.String()[from:] // what is written stays: the builder only appends, within size
	}
	return b.String()
}

// tierWeight is the weight of each SRV record of the tier of targets[0]: the tier's records are
// its and the next ones' (targets come in tier order), and share 100 equally. The last tier made
// has last records, some of targets not made.
func tierWeight(targets []srvTarget, last int) uint16 {
	inTier := 0
	for i := range targets {
		if targets[i].Tier != targets[0].Tier {
			break
		}
		inTier += int(targets[i].srvs)
	}
	if targets[len(targets)-1].Tier == targets[0].Tier {
		inTier = last
	}
	return uint16(max(1, 100/inTier))
}

// records hands out A and AAAA records from one allocation per family and answer instead of one
// per record; their address bytes are the index's (Endpoint.IP).
type records struct {
	a    []dns.A
	aaaa []dns.AAAA
}

// next returns the record of endpoint e's address, with owner, from the room made for its family.
func (rs *records) next(mk *Maker, owner string, e *index.Endpoint) dns.RR {
	ip := e.IP()
	if len(ip) == net.IPv4len {
		r := &rs.a[0]
		rs.a = rs.a[1:]
		r.Hdr, r.A = mk.hdr(owner, dns.TypeA), ip // in place, as addrs
		return r
	}
	r := &rs.aaaa[0]
	rs.aaaa = rs.aaaa[1:]
	r.Hdr, r.AAAA = mk.hdr(owner, dns.TypeAAAA), ip
	return r
}

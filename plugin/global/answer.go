package global

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// recordMaker makes the records of answers from what they share: the options that shape them.
type recordMaker struct {
	ttl     uint32       // ttl
	rotate  bool         // rotate: addresses within each tier
	nsAddrs []netip.Addr // the addresses ns1.dns.<zone> answers with
}

func (mk *recordMaker) hdr(owner string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: owner, Rrtype: t, Class: dns.ClassINET, Ttl: mk.ttl}
}

// soa is zone's SOA record, in class class (CH for explanations).
func (mk *recordMaker) soa(zone string, snap *index.Snapshot, class uint16) *dns.SOA {
	soa := &dns.SOA{
		Hdr:     mk.hdr(zone, dns.TypeSOA),
		Ns:      nameserver(zone),
		Mbox:    "hostmaster.dns." + zone,
		Serial:  snap.Serial,
		Refresh: 7200,
		Retry:   1800,
		Expire:  86400,
		Minttl:  mk.ttl,
	}
	soa.Hdr.Class = class
	return soa
}

// addrs returns one A or AAAA record per record of rs (one family's, in the index's tier order),
// each tier rotated by a random offset unless rotation is off: naive clients dial the first
// address, and the loadbalance plugin would shuffle the tiers away. It makes no more than the
// reply to req can hold and one (the server truncates the reply to fit, and says so), and reads
// no further into a tier than that and its end: the work of an answer is bounded by the client's
// buffer, whatever the service's size. With share, each record is the one kept with its endpoint
// when that has owner's name (see shared).
func (mk *recordMaker) addrs(owner string, rs []index.Record, req *request.Request, share bool, kept *index.Kept) []dns.RR {
	if len(rs) == 0 {
		return nil
	}
	out := make([]dns.RR, fitting(len(rs), minAddrRR, req))
	off := 0
	if mk.rotate && len(rs) > 1 {
		off = int(rand.Uint32() >> 1) // the runtime's per-thread generator: no lock, no allocation
	}
	v4 := len(rs[0].IP()) == net.IPv4len
	if kept != nil && share {
		fromList(out, mk.listOf(kept, owner, rs, v4), rs, off)
		return out
	}
	var known *ownerName // owner, as the records found or made here have it (nil: none yet)
	for i, o := 0, 0; o < len(out) && i < len(rs); {
		j := tierEnd(rs, i)
		k := i + off%(j-i) // the tier, rs[i:j], from rs[k] on and around
		// In runs: from rs[k] to the tier's end, then from its start, as many as out holds.
		for n := min(j-i, len(out)-o); n > 0; k = i {
			run := rs[k:min(j, k+n)]
			for x := range run {
				if kr, ok := run[x].Rendered().(*shared); ok && kr.owner == known && kr.ttl == mk.ttl {
					out[o+x] = kr.rr
				} else {
					out[o+x], known = mk.addrOf(owner, known, &run[x], v4, share)
				}
			}
			o, n = o+len(run), n-len(run)
		}
		i = j
	}
	return out
}

// An answer's address records are shared: each endpoint keeps the record its answers last made
// of it (index.Rendered), and the next answer of the same name and TTL answers with that record
// instead of making one. A reply of 30 records then allocates its list of them, 480 bytes, not
// 2,400, and the collector's work goes with the bytes (BenchmarkServeDNS/client-10000: 1,600 ns
// to 770). Sharing records is what CoreDNS's file plugin does with its zone's: the plugins that
// change a reply (cache, rewrite) copy it first. Per-pod names keep nothing: each has its own
// owner, which would put out the record of the service's name.
//
// The records an answer makes share one ownerName, so that the next answer compares the names of
// the records it finds by address, and the bytes of each name only once.

// shared is an address record kept with its endpoint (the V of its index.Rendered), and what it
// was made for.
type shared struct {
	owner *ownerName
	ttl   uint32
	rr    dns.RR // of sharedA or sharedAAAA
}

// ownerName is the owner name of shared records, one per answer that made them.
type ownerName struct{ name string }

// sharedA and sharedAAAA are a shared record and what holds it, made in one allocation.
type sharedA struct {
	index.Rendered
	shared
	a dns.A
}

type sharedAAAA struct {
	index.Rendered
	shared
	aaaa dns.AAAA
}

// addrOf returns the address record of r (of IPv4 with v4) with owner's name, known (nil: not yet)
// as the answer has it, and owner as it has it from here: the record kept with r's endpoint when
// that has the name, else a new one, kept with the endpoint with share.
func (mk *recordMaker) addrOf(owner string, known *ownerName, r *index.Record, v4, share bool) (dns.RR, *ownerName) {
	if kr, ok := r.Rendered().(*shared); ok && kr.ttl == mk.ttl && kr.owner.name == owner {
		return kr.rr, kr.owner
	}
	switch {
	case !share && v4:
		return &dns.A{Hdr: mk.hdr(owner, dns.TypeA), A: r.IP()}, known
	case !share:
		return &dns.AAAA{Hdr: mk.hdr(owner, dns.TypeAAAA), AAAA: r.IP()}, known
	case known == nil:
		known = &ownerName{owner}
	}
	if v4 {
		k := &sharedA{a: dns.A{Hdr: mk.hdr(owner, dns.TypeA), A: r.IP()}}
		k.shared, k.V = shared{known, mk.ttl, &k.a}, &k.shared
		r.SetRendered(&k.Rendered)
		return &k.a, known
	}
	k := &sharedAAAA{aaaa: dns.AAAA{Hdr: mk.hdr(owner, dns.TypeAAAA), AAAA: r.IP()}}
	k.shared, k.V = shared{known, mk.ttl, &k.aaaa}, &k.shared
	r.SetRendered(&k.Rendered)
	return &k.aaaa, known
}

// tierEnd returns the end of the tier of rs[i] (rs in tier order): one read when the tier is that
// record alone, as a client's nearest tiers often are, or the rest, as a zonal name's records
// often are; else a bisection of the rest.
func tierEnd(rs []index.Record, i int) int {
	tier, next := rs[i].Tier, i+1
	switch {
	case next == len(rs) || rs[next].Tier != tier:
		return next
	case rs[len(rs)-1].Tier == tier:
		return len(rs)
	}
	return next + sort.Search(len(rs)-next, func(k int) bool { return rs[next+k].Tier != tier })
}

// answer renders selection s, of a name below the apex, into m.
func (mk *recordMaker) answer(state *request.Request, m *dns.Msg, s *selection) {
	qtype, owner, n := state.QType(), questionName(state.Req), &s.name
	switch {
	case s.ambiguous():
		mk.answerAmbiguous(state, m, s)
		return
	case !s.exists:
		m.Rcode = dns.RcodeNameError
	case n.form == formVersion:
		if qtype == dns.TypeTXT {
			m.Answer = []dns.RR{&dns.TXT{Hdr: mk.hdr(owner, dns.TypeTXT), Txt: []string{mcsVersion}}}
		}
	case s.view.Empty(), n.form == formProto: // empty non-terminals: NODATA
	case n.form == formSRV && qtype != dns.TypeSRV: // NODATA
	case qtype == dns.TypeA:
		m.Answer = mk.addrs(owner, counted(s.a), state, n.host == "", s.kept)
	case qtype == dns.TypeAAAA:
		m.Answer = mk.addrs(owner, counted(s.aaaa), state, n.host == "", s.kept)
	case qtype == dns.TypeSRV:
		mk.answerSRV(m, owner, s, state.Size())
	case qtype == dns.TypeANY:
		// RFC 8482: a subset is a fine answer to ANY; the addresses are what a client wants.
		if len(s.a) == 0 || len(s.aaaa) > 0 && s.aaaa[0].Tier < s.a[0].Tier {
			counted(s.aaaa)
		} else {
			counted(s.a)
		}
		m.Answer = append(mk.addrs(owner, s.a, state, n.host == "", s.kept), mk.addrs(owner, s.aaaa, state, n.host == "", s.kept)...)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{mk.soa(state.Zone, s.snap, dns.ClassINET)}
		return
	}
	if s.policy.Nearest > 0 {
		failedOver(s.svc, n)
	}
}

// answerSRV renders the SRV answer of s into m. Never inlined: its arguments would deepen the
// frame of answer, which every answer's stack holds (see ServeDNS).
//
//go:noinline
func (mk *recordMaker) answerSRV(m *dns.Msg, owner string, s *selection, size int) {
	m.Answer, m.Extra = mk.srv(owner, s.scheme.serviceDomain(s.svc.Key, s.zone), s.srv, &s.name, size)
	if len(m.Answer) > 0 { // targets come in tier order; Priority is the tier
		telemetry.Answered(uint8(m.Answer[0].(*dns.SRV).Priority))
	}
}

// counted counts an answer of rs (in tier order) by its nearest record's tier, and returns rs.
func counted(rs []index.Record) []index.Record {
	if len(rs) > 0 {
		telemetry.Answered(rs[0].Tier)
	}
	return rs
}

// failedOver counts an answer of svc under a nearest policy when it skipped a nearer tier for
// having no ready record: only a name of the whole service (not one cluster's, or one pod's) can.
func failedOver(svc *index.Service, n *name) {
	if n.cluster == "" && svc.Depleted() {
		telemetry.FailoverAnswers.Inc()
	}
}

// answerAmbiguous answers a short name that several namespaces have (s.ambiguous()): NXDOMAIN, not
// REFUSED: measured (docs/design.md), REFUSED sends clients on to every other nameserver in
// resolv.conf, public ones included, and applications see a temporary failure. A namespace of that
// name whose services answer, or the nameserver's name below it, keeps the name an empty
// non-terminal: NODATA. Either way with an Extended DNS Error naming the candidates, and never
// passed on by fallthrough.
func (mk *recordMaker) answerAmbiguous(state *request.Request, m *dns.Msg, s *selection) {
	if !s.exists {
		m.Rcode = dns.RcodeNameError
	}
	if state.QClass() == dns.ClassINET {
		m.Ns = []dns.RR{mk.soa(state.Zone, s.snap, dns.ClassINET)}
	}
	setEDE(state.Req, m, dns.ExtendedErrorCodeOther, fmt.Sprintf(
		"global: %s is ambiguous, it exists in namespaces %s: ask for %s.<namespace>.%s",
		s.name.svc, listed(s.namespaces()), s.name.svc, state.Zone))
}

// namespacesListed is how many namespaces an ambiguous name's Extended DNS Error names: whoever may
// create a namespace must not make the error, and the reply, as long as they like.
const namespacesListed = 4

// listed joins the first namespacesListed of nss, saying how many more there are.
func listed(nss []string) string {
	if len(nss) <= namespacesListed {
		return strings.Join(nss, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nss[:namespacesListed], ", "), len(nss)-namespacesListed)
}

// setEDE attaches an Extended DNS Error (RFC 8914) to m when the request speaks EDNS; the server
// then fits the OPT record to the client's.
func setEDE(req, m *dns.Msg, code uint16, text string) {
	o := req.IsEdns0()
	if o == nil {
		return
	}
	if m.IsEdns0() == nil {
		m.SetEdns0(o.UDPSize(), o.Do())
	}
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
}

// fitting is how many of n records of at least perRR bytes the reply to req holds beside its
// header and question, and one (nil: all n). Every reply holds 512 bytes: below what those hold,
// the question's EDNS0 size is not read.
func fitting(n, perRR int, req *request.Request) int {
	if req == nil || n <= 512/perRR+1 {
		return n
	}
	return min(n, (req.Size()-questionLen(req.Req))/perRR+1)
}

// questionLen is the least bytes the header and the question of a reply to r take: 12, the name
// and 4 for type and class. On the wire a name takes a byte more than its text ("a.b.": a length
// byte for each label instead of its dot, and the root's); a name with escapes, longer as text
// than on the wire, is counted as the root alone. Never more than the reply takes: the one record
// more than fit is what makes the server truncate the reply and say so.
func questionLen(r *dns.Msg) int {
	name := r.Question[0].Name
	wire := len(name) + 1
	if name == "." || strings.IndexByte(name, '\\') >= 0 {
		wire = 1
	}
	return 12 + wire + 4
}

// The least bytes a record takes in a reply, its owner name compressed to a pointer: 2 for it, 10
// for type, class, TTL and length, then the data. A reply of size bytes holds at most size/min.
const (
	minAddrRR = 2 + 10 + 4 // an A record (an AAAA record's 28 bytes are more)
	minSRVRR  = 2 + 10 + 6 // an SRV record, but its target: <host>.<cluster> then a pointer
)

// records hands out A and AAAA records from one allocation per family and answer instead of one
// per record; their address bytes are the index's (Endpoint.IP).
type records struct {
	a    []dns.A
	aaaa []dns.AAAA
}

// next returns the record of endpoint e's address, with owner, from the room made for its family.
func (rs *records) next(mk *recordMaker, owner string, e *index.Endpoint) dns.RR {
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

func (mk *recordMaker) addr(owner string, a netip.Addr) dns.RR {
	if a.Is4() {
		return &dns.A{Hdr: mk.hdr(owner, dns.TypeA), A: net.IP(a.AsSlice())}
	}
	return &dns.AAAA{Hdr: mk.hdr(owner, dns.TypeAAAA), AAAA: net.IP(a.AsSlice())}
}

// srv returns one SRV record per target of kept, the records an answer keeps in tier order, and
// per port of it that name n asks for, and the targets' addresses as glue; domain is the service's
// name, where the targets' names end. Priority is the tier; targets of one tier share the weight
// equally. A first pass sizes everything, so the answer takes a handful of allocations, not a few
// per target: the records, the glue, and the target names cut from one string. Targets past what
// a reply of size bytes can hold are not made (the server truncates the reply and says so).
func (mk *recordMaker) srv(owner string, domain [5]string, kept index.View, n *name, replySize int) (answer, extra []dns.RR) {
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
	if n.ports == (index.PortQuery{}) {
		return len(ps)
	}
	c := 0
	for i := range ps {
		if n.ports.Matches(ps[i]) {
			if c++; n.ports.Name != "" {
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

// glue returns the A and/or AAAA records of the addresses this server listens on.
func (mk *recordMaker) glue(owner string, types ...uint16) []dns.RR {
	var out []dns.RR
	for _, a := range mk.nsAddrs {
		for _, t := range types {
			if a.Is4() == (t == dns.TypeA) {
				out = append(out, mk.addr(owner, a))
			}
		}
	}
	return out
}

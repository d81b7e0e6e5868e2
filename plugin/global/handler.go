package global

import (
	"cmp"
	"context"
	"strings"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// ServeDNS implements plugin.Handler. Names in our zones are always answered here (`.global` is a
// public TLD: nothing leaks to the next plugin unless fallthrough says so, and only on NXDOMAIN).
// A name is parsed, what it selects computed once (choose.go), and the selection rendered as
// records (answer.go) or, in class CH, as its explanation (explain.go).
//
// The frames below are kept small, and rare work out of line: CoreDNS serves each UDP query on a
// new goroutine, whose stack starts at 2 KB and has grown to 4 KB unpacking the question. A plugin
// whose frames go some 2.4 KB below ServeDNS makes the runtime copy that stack to a bigger one, on
// every query, which costs more than an answer (stack_test.go measures it).
func (g *Global) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := lowerName(questionName(r))
	zone := matchZone(g.Zones, qname)
	if zone == "" {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, w, r)
	}
	state.Zone = zone

	m := newReply(r)
	m.Authoritative = true
	snap := g.index.Snapshot()
	chaos := state.QClass() == dns.ClassCHAOS && g.explain && g.mayExplain(w)
	final := false // an answer fallthrough must not pass on
	q, ecs := g.whoAsks(w, r)
	if chaos {
		q, ecs = g.explainedAs(r, q, ecs)
	}

	switch {
	case state.QClass() != dns.ClassINET && !chaos:
		// What the server answers when no plugin opens other classes.
		m.Authoritative = false
		m.Rcode = dns.RcodeRefused
	case r.Opcode != dns.OpcodeQuery:
		// The server passes NOTIFY on to plugins; there is nothing to notify us of.
		m.Authoritative = false
		m.Rcode = dns.RcodeNotImplemented
	case state.QType() == dns.TypeAXFR || state.QType() == dns.TypeIXFR:
		// Zone transfers are not offered: the zone is computed, not stored.
		m.Authoritative = false
		m.Rcode = dns.RcodeRefused
	default:
		final = g.respond(&state, m, snap, qname, q, chaos)
	}
	if ecs != nil {
		if len(m.Answer) == 0 {
			ecs.SourceScope = 0 // no records: nothing that depends on who asks
		}
		setSubnet(r, m, ecs)
	}

	if !final && m.Rcode == dns.RcodeNameError && g.Fall.Through(qname) {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, w, r)
	}
	if chaos || len(m.Answer) == 0 && hasEDE(m) { // an EDE comes with no records
		limitAmplification(&state, m)
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// maxAmplification is how many times the query's size an explanation, or a reply with an Extended
// DNS Error's text, may be over UDP: what the plugin writes beside the records asked for is long,
// and a spoofed source would turn it on a victim (RFC 5358).
const maxAmplification = 3

// hasEDE reports whether m carries an Extended DNS Error. Never inlined: most replies have no OPT
// record to look into, and the look would deepen every answer's stack (see ServeDNS).
//
//go:noinline
func hasEDE(m *dns.Msg) bool {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if _, ok := opt.(*dns.EDNS0_EDE); ok {
				return true
			}
		}
	}
	return false
}

// mayExplain reports whether the query's source may ask for explanations (explain_from).
func (g *Global) mayExplain(w dns.ResponseWriter) bool {
	if g.explainFrom == nil {
		return true
	}
	a, ok := remoteAddr(w)
	return ok && g.explainFrom.has(a)
}

// limitAmplification leaves m, over UDP, no larger than maxAmplification times the query: larger,
// it is truncated, without records or options (TC), and the client asks again over TCP (dig does
// by itself).
func limitAmplification(state *request.Request, m *dns.Msg) {
	if state.Proto() != "udp" {
		return
	}
	limit := maxAmplification * state.Req.Len()
	if m.Len() <= limit {
		return
	}
	m.Answer, m.Ns = nil, nil
	m.Truncated = true
	if o := m.IsEdns0(); o != nil && m.Len() > limit {
		o.Option = nil // an Extended DNS Error's text, told again over TCP
	}
}

// matchZone returns the longest of zones that qname is in, "" for none: plugin.Zones.Matches
// without its allocations (qname and zones are lower case and fully qualified).
func matchZone(zones []string, qname string) string {
	zone := ""
	for _, z := range zones {
		if len(z) > len(zone) && (z == "." || qname == z ||
			strings.HasSuffix(qname, z) && len(qname) > len(z) && qname[len(qname)-len(z)-1] == '.') {
			zone = z
		}
	}
	return zone
}

// reply is a response with room for its question: one allocation for both.
type reply struct {
	dns.Msg
	question [1]dns.Question
}

// newReply is new(dns.Msg).SetReply(r) in one allocation.
func newReply(r *dns.Msg) *dns.Msg {
	rep := &reply{}
	m := &rep.Msg
	m.Id, m.Response, m.Opcode = r.Id, true, r.Opcode
	if m.Opcode == dns.OpcodeQuery {
		m.RecursionDesired, m.CheckingDisabled = r.RecursionDesired, r.CheckingDisabled
	}
	if len(r.Question) > 0 {
		rep.question[0] = r.Question[0]
		m.Question = rep.question[:]
	}
	return m
}

// respond answers qname in class IN, or in class CH (chaos) with the explanation of the IN
// answer for the same name, from the same snapshot, with the same rcode: each form of name is
// dispatched here once, to its answer and its explanation (below the apex, by the selection:
// nameIs). It reports whether the name is an ambiguous short name, which fallthrough must not
// pass on.
func (g *Global) respond(state *request.Request, m *dns.Msg, snap *index.Snapshot, qname string, q querier, chaos bool) (ambiguous bool) {
	var s selection // the query's one: its name parsed, then what it selects
	n := &s.name
	g.scheme(state.Zone).parse(n, qname, state.Zone)
	var lines []string // the explanation
	switch {
	case n.form == formApex && chaos:
		lines = g.explainApex(snap)
	case n.form == formApex:
		g.apex(state, m, snap)
	case n.form == formNameserver && chaos:
		lines = explainNameserver(questionName(state.Req), g.nsAddrs)
	case n.form == formNameserver:
		g.nameserver(state, m, snap)
	case !g.index.Ready():
		// Never NXDOMAIN before the first sync: the name may well exist.
		m.Authoritative = false
		m.Rcode = dns.RcodeServerFailure
		if !chaos {
			setEDE(state.Req, m, dns.ExtendedErrorCodeNotReady, "global: waiting for the Kubernetes API")
			return false
		}
		lines = explainUnsynced()
	case chaos:
		g.selectName(&s, snap, state.Zone, dns.TypeTXT, q, nil)
		switch ambiguous = s.ambiguous(); {
		case ambiguous:
			g.answerAmbiguous(state, m, &s)
		case !s.exists:
			m.Rcode = dns.RcodeNameError
		}
		lines = explainSelection(&s, state.Size())
	default:
		g.selectName(&s, snap, state.Zone, state.QType(), q, state)
		g.answer(state, m, &s)
		return s.ambiguous()
	}
	if chaos {
		g.explanation(state, m, snap, lines)
	}
	return ambiguous
}

// explanation renders lines, the explanation of a name, into m: TXT records of class CH (for a
// TXT or ANY question), else the zone's SOA.
func (g *Global) explanation(state *request.Request, m *dns.Msg, snap *index.Snapshot, lines []string) {
	if q := state.QType(); q == dns.TypeTXT || q == dns.TypeANY {
		for _, l := range lines {
			m.Answer = append(m.Answer, &dns.TXT{
				Hdr: dns.RR_Header{Name: questionName(state.Req), Rrtype: dns.TypeTXT, Class: dns.ClassCHAOS},
				Txt: split(l),
			})
		}
	}
	if len(m.Answer) == 0 && m.Rcode != dns.RcodeRefused && m.Rcode != dns.RcodeServerFailure {
		m.Ns = []dns.RR{g.soa(state.Zone, snap, dns.ClassCHAOS)}
	}
}

// explainApex is the apex's explanation (explainReplica). Never inlined: the replica's state would
// deepen respond's frame, below which every answer is made (see ServeDNS).
//
//go:noinline
func (g *Global) explainApex(snap *index.Snapshot) []string { return explainReplica(g.replica(), snap) }

// replica is what the apex's explanation says of this replica.
func (g *Global) replica() replica {
	rep := replica{synced: g.index.Ready(), leader: "none", writer: g.writer != nil, topology: g.index.Topology(),
		version: coremain.CoreVersion + "+" + cmp.Or(coremain.GitCommit, "unknown")}
	if g.writer != nil {
		if l := g.leader.Load(); l != nil {
			rep.leader, rep.leading = *l, *l == g.identity
		}
	}
	return rep
}

// apex answers the zone's own name: SOA, NS, and NODATA for anything else.
func (g *Global) apex(state *request.Request, m *dns.Msg, snap *index.Snapshot) {
	switch state.QType() {
	case dns.TypeSOA:
		m.Answer = []dns.RR{g.soa(state.Zone, snap, dns.ClassINET)}
	case dns.TypeNS:
		ns := nameserver(state.Zone)
		m.Answer = []dns.RR{&dns.NS{Hdr: g.hdr(questionName(state.Req), dns.TypeNS), Ns: ns}}
		m.Extra = g.glue(ns, dns.TypeA, dns.TypeAAAA)
	default:
		m.Ns = []dns.RR{g.soa(state.Zone, snap, dns.ClassINET)}
	}
}

// nameserver answers ns1.dns.<zone> with the addresses this server listens on.
func (g *Global) nameserver(state *request.Request, m *dns.Msg, snap *index.Snapshot) {
	if q := state.QType(); q == dns.TypeA || q == dns.TypeAAAA {
		m.Answer = g.glue(questionName(state.Req), q)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{g.soa(state.Zone, snap, dns.ClassINET)}
	}
}

package global

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// ServeDNS implements plugin.Handler. Names in our zones are always answered here (`.global` is a
// public TLD: nothing leaks to the next plugin unless fallthrough says so, and only on NXDOMAIN).
func (g *Global) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := strings.ToLower(questionName(r))
	zone := matchZone(g.Zones, qname)
	if zone == "" {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, w, r)
	}
	state.Zone = zone

	m := newReply(r)
	m.Authoritative = true
	snap := g.index.Snapshot()
	chaos := state.QClass() == dns.ClassCHAOS && g.explain
	final := false // an answer fallthrough must not pass on

	switch n := g.scheme(zone).parse(qname, zone); {
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
	case chaos:
		g.explainName(state, m, snap, n)
	case n.kind == kindApex:
		g.apex(state, m, snap)
	case n.kind == kindNameserver:
		g.nameserver(state, m, snap)
	default:
		if !g.index.Ready() {
			// Never NXDOMAIN before the first sync: the name may well exist.
			m.Authoritative = false
			m.Rcode = dns.RcodeServerFailure
			setEDE(r, m, dns.ExtendedErrorCodeNotReady, "global: waiting for the Kubernetes API")
			break
		}
		final = !g.answer(state, m, snap, n)
	}

	if !final && m.Rcode == dns.RcodeNameError && g.Fall.Through(qname) {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, w, r)
	}
	w.WriteMsg(m)
	return dns.RcodeSuccess, nil
}

// questionName is the question's name as it came (unpacked names are in presentation form
// already): what request.Request's QName computes, without formatting it again for every use.
func questionName(r *dns.Msg) string {
	if len(r.Question) == 0 {
		return "."
	}
	return r.Question[0].Name
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

// answer fills m for a name below the apex; ok is false for an ambiguous short name.
func (g *Global) answer(state request.Request, m *dns.Msg, snap *index.Snapshot, n name) (ok bool) {
	qtype, owner := state.QType(), questionName(state.Req)
	svc, view, ok := g.find(state, m, snap, n)
	if !ok { // ambiguous short name: m holds the answer
		return false
	}

	// The policy chooses among the records a name has, never whether it has any: rcodes are all's.
	pol, _ := g.policyOf(state.Zone, svc)
	switch {
	case n.kind == kindSRV && qtype == dns.TypeSRV && !view.Empty():
		// The name exists exactly when it has an SRV record: the answer decides, in one pass.
		if m.Answer, m.Extra = g.srv(owner, state.Zone, svc.Key, view, n.port, n.proto, pol); len(m.Answer) == 0 {
			m.Rcode = dns.RcodeNameError
		}
	case !exists(snap, n, view):
		m.Rcode = dns.RcodeNameError
	case n.kind == kindVersion:
		if qtype == dns.TypeTXT {
			m.Answer = []dns.RR{&dns.TXT{Hdr: g.hdr(owner, dns.TypeTXT), Txt: []string{mcsVersion}}}
		}
	case view.Empty(), n.kind == kindProto: // empty non-terminals: NODATA
	case n.kind == kindSRV: // and not an SRV question: NODATA
	case qtype == dns.TypeA:
		m.Answer = g.addrs(owner, counted(pol.Keep(view.A)))
	case qtype == dns.TypeAAAA:
		m.Answer = g.addrs(owner, counted(pol.Keep(view.AAAA)))
	case qtype == dns.TypeSRV:
		m.Answer, m.Extra = g.srv(owner, state.Zone, svc.Key, view, "", "", pol)
	case qtype == dns.TypeANY:
		// RFC 8482: a subset is a fine answer to ANY; the addresses are what a client wants.
		a, aaaa := pol.Keep(view.A), pol.Keep(view.AAAA)
		if len(a) == 0 || len(aaaa) > 0 && aaaa[0].Tier < a[0].Tier {
			counted(aaaa)
		} else {
			counted(a)
		}
		m.Answer = append(g.addrs(owner, a), g.addrs(owner, aaaa)...)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{g.soa(state.Zone, snap)}
		return true
	}
	if srv, ok := m.Answer[0].(*dns.SRV); ok { // targets come in tier order; Priority is the tier
		telemetry.Answered(uint8(srv.Priority))
	}
	if pol.Nearest > 0 {
		failedOver(svc, n)
	}
	return true
}

// counted counts an answer of rs (in tier order) by its nearest record's tier, and returns rs.
func counted(rs []index.Record) []index.Record {
	if len(rs) > 0 {
		telemetry.Answered(rs[0].Tier)
	}
	return rs
}

// find returns the global service name n refers to (nil when there is none) and the view of it
// that n names; ok is false when n is an ambiguous short name, answered in m.
func (g *Global) find(state request.Request, m *dns.Msg, snap *index.Snapshot, n name) (svc *index.Service, view index.View, ok bool) {
	if svc, ok = g.service(state, m, snap, n); !ok || svc == nil {
		return svc, view, ok
	}
	return svc, viewOf(svc, n), true
}

// viewOf is the view of svc that n names: one pod's, one cluster's or the whole service's.
func viewOf(svc *index.Service, n name) index.View {
	var view index.View
	switch {
	case n.host != "":
		view, _ = svc.Host(n.cluster, n.host)
	case n.cluster != "":
		view, _ = svc.Cluster(n.cluster)
	default:
		view = svc.All()
	}
	return view
}

// exists reports whether name n, whose view is view, exists. As in RFC 8020, nothing exists below
// a name that does not: a name exists when it answers, or when it is an empty non-terminal above
// one that does. Kubernetes DNS answers NXDOMAIN for a headless service without ready endpoints;
// so does this plugin, and so for everything below it. A one-label name may be a namespace with a
// global service that answers, or dns.<zone> above the nameserver's name; _<proto>.<svc> exists
// when some port of a ready endpoint has that protocol, _<port>._<proto>.<svc> when one is that.
func exists(snap *index.Snapshot, n name, view index.View) bool {
	switch {
	case n.kind == kindVersion, n.kind == kindAboveNameserver:
		return true
	case n.kind == kindNamespace && n.ns == "":
		return snap.Answers()
	case n.kind == kindNamespace:
		return snap.HasNamespace(n.ns)
	case view.Empty():
		return n.kind == kindService && n.short && (n.svc == nameserverParent || snap.HasNamespace(n.svc))
	case n.kind == kindProto, n.kind == kindSRV:
		for t := range view.Targets() {
			if slices.ContainsFunc(t.Ports, func(p index.Port) bool { return portMatches(p, n.port, n.proto) }) {
				return true
			}
		}
		return false
	}
	return true
}

// portMatches reports whether p is port name port ("" for any) of protocol proto ("" for any).
func portMatches(p index.Port, port, proto string) bool {
	return (port == "" || p.Name == port) && (proto == "" || strings.EqualFold(p.Protocol, proto))
}

// service finds the global service a name refers to: nil when there is none. A short name that
// several namespaces have, with no prefer_namespaces entry among them, is answered in m as NXDOMAIN
// with an Extended DNS Error naming the candidates, and ok is false: it must never silently pick
// one, and never falls through.
func (g *Global) service(state request.Request, m *dns.Msg, snap *index.Snapshot, n name) (svc *index.Service, ok bool) {
	if n.svc == "" { // not a service's name
		return nil, true
	}
	if !n.short {
		return snap.Service(index.Key{Namespace: n.ns, Name: n.svc}), true
	}
	named := snap.Named(n.svc)
	switch len(named) {
	case 0:
		return nil, true
	case 1:
		return named[0], true
	}
	if svc = preferred(g.preferNamespaces, named); svc != nil {
		return svc, true
	}
	// NXDOMAIN, not REFUSED: measured (docs/design.md), REFUSED sends clients on to every other
	// nameserver in resolv.conf, public ones included, and applications see a temporary
	// failure. A namespace of that name whose services answer, or the nameserver's name below
	// it, keeps the name an empty non-terminal: NODATA.
	if !snap.HasNamespace(n.svc) && n.svc != nameserverParent {
		m.Rcode = dns.RcodeNameError
	}
	m.Ns = []dns.RR{g.soa(state.Zone, snap)}
	setEDE(state.Req, m, dns.ExtendedErrorCodeOther, fmt.Sprintf(
		"global: %s is ambiguous, it exists in namespaces %s: ask for %s.<namespace>.%s",
		n.svc, strings.Join(index.Namespaces(named), ", "), n.svc, state.Zone))
	return nil, false
}

// preferred returns the service of the first namespace of order that candidates has, or nil.
func preferred(order []string, candidates []*index.Service) *index.Service {
	for _, ns := range order {
		for _, c := range candidates {
			if c.Namespace == ns {
				return c
			}
		}
	}
	return nil
}

// apex answers the zone's own name: SOA, NS, and NODATA for anything else.
func (g *Global) apex(state request.Request, m *dns.Msg, snap *index.Snapshot) {
	switch state.QType() {
	case dns.TypeSOA:
		m.Answer = []dns.RR{g.soa(state.Zone, snap)}
	case dns.TypeNS:
		ns := nameserver(state.Zone)
		m.Answer = []dns.RR{&dns.NS{Hdr: g.hdr(questionName(state.Req), dns.TypeNS), Ns: ns}}
		m.Extra = g.glue(ns, dns.TypeA, dns.TypeAAAA)
	default:
		m.Ns = []dns.RR{g.soa(state.Zone, snap)}
	}
}

// nameserver answers ns1.dns.<zone> with the addresses this server listens on.
func (g *Global) nameserver(state request.Request, m *dns.Msg, snap *index.Snapshot) {
	if q := state.QType(); q == dns.TypeA || q == dns.TypeAAAA {
		m.Answer = g.glue(questionName(state.Req), q)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{g.soa(state.Zone, snap)}
	}
}

func nameserver(zone string) string { return nameserverLabel + "." + zone }

// setEDE attaches an Extended DNS Error (RFC 8914) to m when the request speaks EDNS; the server
// then fits the OPT record to the client's.
func setEDE(req, m *dns.Msg, code uint16, text string) {
	o := req.IsEdns0()
	if o == nil {
		return
	}
	m.SetEdns0(o.UDPSize(), o.Do())
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
}

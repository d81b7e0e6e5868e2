package global

import (
	"cmp"
	"context"
	"strings"

	"github.com/globaldns/global/plugin/global/answer"

	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// ServeDNS implements plugin.Handler. Names in our zones are always answered here (`.global` is a
// public TLD: nothing leaks to the next plugin unless fallthrough says so, and only on NXDOMAIN).
// Who asks is learned here, and the name answered by the answer path (package answer: its name
// parsed, what it selects computed once, and rendered as records or, in class CH, as its
// explanation).
//
// The frames below are kept small, and rare work out of line: CoreDNS serves each UDP query on a
// new goroutine, whose stack starts at 2 KB and has grown to 4 KB unpacking the question. A plugin
// whose frames go some 2.4 KB below ServeDNS makes the runtime copy that stack to a bigger one, on
// every query, which costs more than an answer (stack_test.go measures it).
func (g *Global) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	qname := answer.LowerName(answer.QuestionName(r))
	zone := matchZone(g.Zones, qname)
	if zone == "" {
		return plugin.NextOrFailure(g.Name(), g.Next, ctx, w, r)
	}
	state.Zone = zone

	m := newReply(r)
	m.Authoritative = true
	snap := g.Index.Snapshot()
	chaos := state.QClass() == dns.ClassCHAOS && g.MayExplain(w)
	final := false // an answer fallthrough must not pass on
	q, ecs := g.WhoAsks(w, r)
	if chaos {
		q, ecs = g.ExplainedAs(r, q, ecs)
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
		final = g.Respond(&state, m, snap, qname, q, chaos)
	}
	if ecs != nil {
		if len(m.Answer) == 0 {
			ecs.SourceScope = 0 // no records: nothing that depends on who asks
		}
		answer.SetSubnet(r, m, ecs)
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

// replica adds to rep, the apex's explanation of this replica, its writer, leader and version.
func (g *Global) replica(rep *answer.Replica) {
	rep.Writer = g.writer != nil
	rep.Version = coremain.CoreVersion + "+" + cmp.Or(coremain.GitCommit, "unknown")
	if g.writer != nil {
		if l := g.leader.Load(); l != nil {
			rep.Leader, rep.Leading = *l, *l == g.identity
		}
	}
}

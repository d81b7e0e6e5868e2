// Package answer is the plugin's answer path: a query's name, who asks it, what it selects from
// an index snapshot (the view it reads and the policy that cuts it), the records of the reply and
// the reply's explanation. Its files follow a query's way down, each using only those below it:
// respond.go dispatches a name to its reply or explanation (explain.go); reply.go makes the IN
// reply of address records (addresses.go) or SRV records (srv.go), with what every record shares
// (maker.go); view.go chooses what a name selects, the service, its view and policy, into a
// selection (selection.go), ranked from who asks (asker.go); names.go parses the name.
//
// The plugin (package global) reads the Corefile into an Answerer and serves DNS with it.
//
// Frames are kept small, and rare work out of line: CoreDNS serves each UDP query on a new
// goroutine, whose stack has grown to 4 KB unpacking the question; frames some 2.4 KB below the
// plugin's ServeDNS make the runtime copy that stack to a bigger one, on every query, which costs
// more than an answer (the plugin's stack_test.go measures it).
package answer

import (
	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// Answerer answers the names of the plugin's zones from its index: the options that shape
// answers, each set by the Corefile's reader (the plugin's config.go), and where they are read.
type Answerer struct {
	Chooser              // names, policy, prefer_namespaces: what names select
	Maker                // ttl, rotate: how records are made
	Asker                // client_locality, client_ecs_from: who asks, by the locator the plugin builds
	Explain     bool     // explain: answer CH TXT with the explanation of a name
	ExplainFrom Networks // explain_from: who may ask for explanations; nil: anyone

	Index   *index.Index   // what names answer
	Replica func(*Replica) // adds to the apex's explanation what the plugin knows of the replica beyond its index
}

// MayExplain reports whether the query received on w may be answered with explanations: explain
// is on and its source is one explain_from trusts.
func (a *Answerer) MayExplain(w dns.ResponseWriter) bool {
	if !a.Explain {
		return false
	}
	if a.ExplainFrom == nil {
		return true
	}
	src, ok := remoteAddr(w)
	return ok && a.ExplainFrom.has(src)
}

// Respond answers qname in class IN, or in class CH (chaos) with the explanation of the IN
// answer for the same name, from the same snapshot, with the same rcode: each form of name is
// dispatched here once, to its answer and its explanation (below the apex, by the selection:
// nameIs). It reports whether the name is an ambiguous short name, which fallthrough must not
// pass on.
func (a *Answerer) Respond(state *request.Request, m *dns.Msg, snap *index.Snapshot, qname string, q Querier, chaos bool) (ambiguous bool) {
	var s selection // the query's one: its name parsed, then what it selects
	n := &s.name
	a.scheme(state.Zone).parse(n, qname, state.Zone)
	var lines []string // the explanation
	switch {
	case n.form == formApex && chaos:
		lines = a.explainApex(snap)
	case n.form == formApex:
		a.apex(state, m, snap)
	case n.form == formNameserver && chaos:
		lines = explainNameserver(QuestionName(state.Req), a.NSAddrs)
	case n.form == formNameserver:
		a.nameserver(state, m, snap)
	case !a.Index.Ready():
		// Never NXDOMAIN before the first sync: the name may well exist.
		m.Authoritative = false
		m.Rcode = dns.RcodeServerFailure
		if !chaos {
			setEDE(state.Req, m, dns.ExtendedErrorCodeNotReady, "global: waiting for the Kubernetes API")
			return false
		}
		lines = explainUnsynced()
	case chaos:
		a.selectName(&s, snap, state.Zone, dns.TypeTXT, q, nil)
		switch ambiguous = s.ambiguous(); {
		case ambiguous:
			a.answerAmbiguous(state, m, &s)
		case !s.exists:
			m.Rcode = dns.RcodeNameError
		}
		lines = explainSelection(&s, state.Size())
	default:
		a.selectName(&s, snap, state.Zone, state.QType(), q, state)
		a.answer(state, m, &s)
		return s.ambiguous()
	}
	if chaos {
		a.explanation(state, m, snap, lines)
	}
	return ambiguous
}

// explanation renders lines, the explanation of a name, into m: TXT records of class CH (for a
// TXT or ANY question), else the zone's SOA.
func (a *Answerer) explanation(state *request.Request, m *dns.Msg, snap *index.Snapshot, lines []string) {
	if q := state.QType(); q == dns.TypeTXT || q == dns.TypeANY {
		for _, l := range lines {
			m.Answer = append(m.Answer, &dns.TXT{
				Hdr: dns.RR_Header{Name: QuestionName(state.Req), Rrtype: dns.TypeTXT, Class: dns.ClassCHAOS},
				Txt: split(l),
			})
		}
	}
	if len(m.Answer) == 0 && m.Rcode != dns.RcodeRefused && m.Rcode != dns.RcodeServerFailure {
		m.Ns = []dns.RR{a.soa(state.Zone, snap, dns.ClassCHAOS)}
	}
}

// explainApex is the apex's explanation (explainReplica). Never inlined: the replica's state would
// deepen respond's frame, below which every answer is made (see the package doc).
//
//go:noinline
func (a *Answerer) explainApex(snap *index.Snapshot) []string {
	rep := Replica{Synced: a.Index.Ready(), Leader: "none", Topology: a.Index.Topology()}
	if a.Replica != nil {
		a.Replica(&rep)
	}
	return explainReplica(rep, snap)
}

// apex answers the zone's own name: SOA, NS, and NODATA for anything else.
func (a *Answerer) apex(state *request.Request, m *dns.Msg, snap *index.Snapshot) {
	switch state.QType() {
	case dns.TypeSOA:
		m.Answer = []dns.RR{a.soa(state.Zone, snap, dns.ClassINET)}
	case dns.TypeNS:
		ns := nameserver(state.Zone)
		m.Answer = []dns.RR{&dns.NS{Hdr: a.hdr(QuestionName(state.Req), dns.TypeNS), Ns: ns}}
		m.Extra = a.glue(ns, dns.TypeA, dns.TypeAAAA)
	default:
		m.Ns = []dns.RR{a.soa(state.Zone, snap, dns.ClassINET)}
	}
}

// nameserver answers ns1.dns.<zone> with the addresses this server listens on.
func (a *Answerer) nameserver(state *request.Request, m *dns.Msg, snap *index.Snapshot) {
	if q := state.QType(); q == dns.TypeA || q == dns.TypeAAAA {
		m.Answer = a.glue(QuestionName(state.Req), q)
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{a.soa(state.Zone, snap, dns.ClassINET)}
	}
}

package answer

import (
	"fmt"
	"strings"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// answer renders selection s, of a name below the apex, into m.
func (mk *Maker) answer(state *request.Request, m *dns.Msg, s *selection) {
	qtype, owner, n := state.QType(), QuestionName(state.Req), &s.name
	switch {
	case s.ambiguous():
		mk.answerAmbiguous(state, m, s)
		return
	case !s.exists:
		m.Rcode = dns.RcodeNameError
	case s.kind == kindVersion:
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
// frame of answer, which every answer's stack holds (see the package doc).
//
//go:noinline
func (mk *Maker) answerSRV(m *dns.Msg, owner string, s *selection, size int) {
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
func (mk *Maker) answerAmbiguous(state *request.Request, m *dns.Msg, s *selection) {
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

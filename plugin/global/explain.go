package global

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/coremain"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// explainName answers a query in class CH (with `explain on`, the default): TXT records that say
// why the IN answer for the same name is what it is, from the same snapshot, with the same rcode.
// dig CH TXT foo.db.global is the debugger: a summary first, then one record per endpoint in the
// name's scope, answered or left out (and why), in tier order. The zone's apex tells this
// replica's state. Nothing here is on the IN path.
func (g *Global) explainName(state request.Request, m *dns.Msg, snap *index.Snapshot, n name) {
	var lines []string
	switch {
	case n.kind == kindApex:
		lines = g.explainReplica(snap)
	case n.kind == kindNameserver:
		lines = []string{"nameserver=" + questionName(state.Req) + " addrs=" + joinAddrs(g.nsAddrs)}
	case !g.index.Ready():
		m.Authoritative = false
		m.Rcode = dns.RcodeServerFailure
		lines = []string{"synced=false: waiting for the Kubernetes API; IN answers SERVFAIL until then"}
	default:
		svc, view, ok := g.find(state, m, snap, n)
		if !ok {
			lines = g.explainAmbiguous(snap, n)
			break
		}
		if !exists(snap, n, view) {
			m.Rcode = dns.RcodeNameError
		}
		lines = g.explainService(state.Zone, snap, n, svc, m.Rcode == dns.RcodeNameError)
	}
	if q := state.QType(); q == dns.TypeTXT || q == dns.TypeANY {
		for _, l := range lines {
			m.Answer = append(m.Answer, &dns.TXT{
				Hdr: dns.RR_Header{Name: questionName(state.Req), Rrtype: dns.TypeTXT, Class: dns.ClassCHAOS},
				Txt: split(l),
			})
		}
	}
	if len(m.Answer) == 0 && m.Rcode != dns.RcodeRefused && m.Rcode != dns.RcodeServerFailure {
		soa := g.soa(state.Zone, snap)
		soa.Hdr.Class = dns.ClassCHAOS
		m.Ns = []dns.RR{soa}
	}
}

// explainReplica is the apex's explanation: this replica's state, then per member cluster its
// tier and record counts.
func (g *Global) explainReplica(snap *index.Snapshot) []string {
	type counts struct{ tier, records, ready, notReady, terminating, gatewayDown int }
	clusters := map[string]*counts{}
	topo := g.index.Topology()
	records := 0
	for _, k := range snap.Keys() {
		for r := range snap.Service(k).Records().All() {
			c := clusters[r.Cluster]
			if c == nil {
				c = &counts{tier: int(r.Tier)}
				clusters[r.Cluster] = c
			}
			records++
			switch r.State() {
			case index.StateReady:
				c.ready++
			case index.StateTerminating:
				c.terminating++
			case index.StateGatewayDown:
				c.gatewayDown++
			default:
				c.notReady++
			}
		}
	}
	leader, leading := "none", false
	if g.writer != nil {
		if l := g.leader.Load(); l != nil {
			leader, leading = *l, *l == g.identity
		}
	}
	lines := []string{fmt.Sprintf("synced=%t services=%d records=%d serial=%d age=%d cluster=%s named-by=%s leader=%s leading=%t writer=%t version=%s",
		g.index.Ready(), snap.Len(), records, snap.Serial, age(snap.Published), topo.Local, topo.NamedBy(), leader, leading, g.writer != nil,
		coremain.CoreVersion+"+"+cmp.Or(coremain.GitCommit, "unknown"))}
	names := slices.SortedFunc(maps.Keys(clusters), func(a, b string) int {
		return cmp.Or(cmp.Compare(clusters[a].tier, clusters[b].tier), cmp.Compare(a, b))
	})
	for _, c := range names {
		n := clusters[c]
		lines = append(lines, fmt.Sprintf("cluster=%s tier=%d why=%s locality=%s from=%s ready=%d not-ready=%d terminating=%d gateway-down=%d",
			c, n.tier, topo.Why(c), topo.DescribeLocality(c), cmp.Or(topo.From(c), "nothing"), n.ready, n.notReady, n.terminating, n.gatewayDown))
	}
	return lines
}

// explainAmbiguous explains a short name that several namespaces have: each candidate's summary.
func (g *Global) explainAmbiguous(snap *index.Snapshot, n name) []string {
	candidates := snap.Named(n.svc)
	lines := []string{fmt.Sprintf("name=%s ambiguous=true namespaces=%s: ask for %s.<namespace>, or list one in prefer_namespaces",
		n.svc, strings.Join(index.Namespaces(candidates), ","), n.svc)}
	for _, svc := range candidates {
		lines = append(lines, g.explainService("", snap, name{kind: kindService, svc: n.svc, ns: svc.Namespace}, svc, false)[0])
	}
	return lines
}

// explainService is the explanation of a name of global service svc (nil: none), the summary
// first. nxdomain says the IN answer is NXDOMAIN.
func (g *Global) explainService(zone string, snap *index.Snapshot, n name, svc *index.Service, nxdomain bool) []string {
	switch {
	case n.kind == kindNone && g.scheme(zone) == schemeMCS:
		return []string{"exists=false: not a name of this zone (names mcs): [<hostname>.<clusterid>.]<svc>.<ns>.svc, [_<port>.]_<proto>.<svc>.<ns>.svc, dns-version; <clusterid>.<svc>.<ns>.svc must not exist"}
	case n.kind == kindNone:
		return []string{"exists=false: not a name of this zone: [[<host>.]<cluster>.]<svc>.<ns>, [_<port>.]_<proto>.<svc>.<ns> or their short forms"}
	case n.kind == kindVersion:
		return []string{"exists=true: the version of the Multi-Cluster Services DNS specification this zone answers, " + mcsVersion}
	case n.kind == kindAboveNameserver, svc == nil && n.short && n.svc == nameserverParent && !nxdomain:
		return []string{"exists=true: an empty non-terminal above the zone's nameserver, " + nameserver(zone)}
	case n.kind == kindNamespace && nxdomain:
		return []string{fmt.Sprintf("exists=false: no global service answers in namespace %q", n.ns)}
	case n.kind == kindNamespace:
		return []string{fmt.Sprintf("exists=true: an empty non-terminal: global services answer in namespace %q", n.ns)}
	case svc == nil && nxdomain:
		return []string{fmt.Sprintf("exists=false: no global service %s", serviceName(n))}
	case svc == nil:
		return []string{fmt.Sprintf("exists=true: an empty non-terminal: namespace %s has global services that answer", n.svc)}
	}
	topo := g.index.Topology()
	member := map[string]string{}
	for _, m := range svc.Members {
		member[topo.ClusterOf(m)] = m.Namespace + "/" + m.Name
	}
	pol, from := g.policyOf(zone, svc)
	kept := keptTiers(pol, svc, n)
	var lines []string
	answered, leftOut := 0, 0
	for r := range svc.Records().All() {
		if (n.cluster != "" && r.Cluster != n.cluster) || (n.host != "" && r.Host != n.host) {
			continue
		}
		state := strings.ReplaceAll(r.State(), "_", "-")
		port := ""
		if n.kind == kindSRV || n.kind == kindProto {
			var ports []string
			for _, p := range r.Ports {
				if portMatches(p, n.port, n.proto) {
					ports = append(ports, strconv.Itoa(int(p.Port)))
				}
			}
			if port = " port=" + strings.Join(ports, ","); len(ports) == 0 {
				port = ""
				if state == index.StateReady {
					state = "no-matching-port"
				}
			}
		}
		if state == index.StateReady && !kept.has(r) {
			state = "beyond-nearest"
		}
		if state == index.StateReady {
			answered++
		} else {
			leftOut++
		}
		lines = append(lines, fmt.Sprintf("addr=%s host=%s cluster=%s tier=%d why=%s member=%s state=%s%s",
			r.Addr(), r.Host, r.Cluster, r.Tier, topo.Why(r.Cluster), member[r.Cluster], state, port))
	}
	summary := fmt.Sprintf("service=%s records=%d left-out=%d synced=%t serial=%d age=%d policy=%s from=%s",
		svc.Key, answered, leftOut, g.index.Ready(), snap.Serial, age(svc.Built()), strings.ReplaceAll(pol.String(), " ", "-"), from)
	if nxdomain {
		summary += " exists=false: no ready record here"
	}
	return append(append([]string{summary}, explainTiers(pol, svc, n, kept)...), lines...)
}

// tierSet is a set of tiers (there are at most maxTopologyKeys+2).
type tierSet uint32

func (s tierSet) with(t uint8) tierSet    { return s | 1<<t }
func (s tierSet) holds(t uint8) bool      { return s&(1<<t) != 0 }
func (s tierSet) union(o tierSet) tierSet { return s | o }

// answered is, for a name of a service, the tiers a policy answers: of A records, of AAAA
// records, or, for SRV names, of targets.
type answered struct{ a, aaaa, srv tierSet }

// has reports whether r's tier is answered for r's family (any family for SRV names).
func (k answered) has(r *index.Record) bool {
	switch {
	case k.srv != 0:
		return k.srv.holds(r.Tier)
	case r.Family() == index.IPv4:
		return k.a.holds(r.Tier)
	}
	return k.aaaa.holds(r.Tier)
}

// keptTiers returns the tiers policy p answers for name n of svc, as answer and srv choose them.
func keptTiers(p index.Policy, svc *index.Service, n name) answered {
	view := viewOf(svc, n)
	var k answered
	if n.kind == kindSRV || n.kind == kindProto {
		srvs := 0
		for t := range view.Targets() {
			ports := 0
			for _, port := range t.Ports {
				if portMatches(port, n.port, n.proto) {
					ports++
				}
			}
			if ports > 0 && k.srv != 0 && !k.srv.holds(t.Tier) && p.Full(srvs) {
				break
			}
			if ports > 0 {
				k.srv, srvs = k.srv.with(t.Tier), srvs+ports
			}
		}
		return k
	}
	for _, r := range p.Keep(view.A) {
		k.a = k.a.with(r.Tier)
	}
	for _, r := range p.Keep(view.AAAA) {
		k.aaaa = k.aaaa.with(r.Tier)
	}
	return k
}

// explainTiers says, under a nearest policy, which tiers of members name n of svc answers, and why
// each other is left out.
func explainTiers(p index.Policy, svc *index.Service, n name, k answered) []string {
	if p.Nearest == 0 {
		return nil
	}
	view := viewOf(svc, n)
	type tier struct {
		clusters []string
		ready    int
	}
	tiers := map[uint8]*tier{}
	for _, c := range svc.Clusters() {
		if n.cluster != "" && c.Name != n.cluster {
			continue
		}
		t := tiers[c.Tier]
		if t == nil {
			t = &tier{}
			tiers[c.Tier] = t
		}
		t.clusters = append(t.clusters, c.Name)
	}
	for _, rs := range [][]index.Record{view.A, view.AAAA} {
		for _, r := range rs {
			tiers[r.Tier].ready++
		}
	}
	all := k.a.union(k.aaaa).union(k.srv)
	var lines []string
	for _, t := range slices.Sorted(maps.Keys(tiers)) {
		line := fmt.Sprintf("tier=%d clusters=%s ready=%d answered=%t", t, strings.Join(tiers[t].clusters, ","), tiers[t].ready, all.holds(t))
		switch {
		case all.holds(t):
		case tiers[t].ready == 0:
			line += " why=no-ready-record"
		default:
			line += fmt.Sprintf(" why=nearer-tiers-hold-%d", p.Nearest)
		}
		lines = append(lines, line)
	}
	return lines
}

// serviceName is the <ns>/<svc> a name asks for, or the bare name of a short one.
func serviceName(n name) string {
	if n.short {
		return n.svc + " in any namespace"
	}
	return n.ns + "/" + n.svc
}

// age is the whole seconds since t.
func age(t time.Time) int64 { return int64(time.Since(t).Seconds()) }

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// split cuts s into the 255-byte strings a TXT record holds.
func split(s string) []string {
	var out []string
	for len(s) > 255 {
		out, s = append(out, s[:255]), s[255:]
	}
	return append(out, s)
}

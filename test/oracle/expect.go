package oracle

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Expected is what the README says a question is answered.
type Expected struct {
	Rcode int
	// Tiers are the answer's records, nearest tier first, each tier in the README's order (tier,
	// cluster, host, address) before rotation; an SRV answer's in no order within a tier.
	Tiers [][]RR
	Type  uint16 // of the records: A, AAAA or SRV
	// Glue is, for an SRV answer, each target's addresses.
	Glue map[string][]netip.Addr
	SOA  string // the zone whose SOA the authority section holds, "" for none
	EDE  string // what an Extended DNS Error says, "" for none
}

// RR is one record of an answer: an address, or an SRV record's priority, port and target.
type RR struct {
	Addr     netip.Addr
	Priority int
	Port     int32
	Target   string
}

func (r RR) String() string {
	if r.Target != "" {
		return fmt.Sprintf("%d %d %s", r.Priority, r.Port, r.Target)
	}
	return r.Addr.String()
}

// Expect returns what the plugin answers q in w.
func (w *World) Expect(q Question) Expected {
	e := Expected{Rcode: dns.RcodeSuccess, SOA: q.Zone}
	s, ambiguous := w.resolve(q)
	if ambiguous != nil { // the first four namespaces, and how many more
		listed := strings.Join(ambiguous[:min(4, len(ambiguous))], ", ")
		if len(ambiguous) > 4 {
			listed += fmt.Sprintf(" and %d more", len(ambiguous)-4)
		}
		e.EDE = fmt.Sprintf("global: %s is ambiguous, it exists in namespaces %s: ask for %s.<namespace>.%s",
			strings.ToLower(q.Svc), listed, strings.ToLower(q.Svc), q.Zone)
	}
	// A name of no service, or of no ready record, exists only as the empty non-terminal of a
	// namespace whose services answer (the short name <ns>.<zone>); a zonal one never.
	if s == nil || !w.answers(s) {
		if q.Zonal != "" || q.NS != "" || q.Form != FormService || !w.namespaceAnswers(q.Svc) {
			e.Rcode = dns.RcodeNameError
		}
		return e
	}
	picked, exists := w.pick(s, q.base())
	if !exists {
		e.Rcode = dns.RcodeNameError
		return e
	}
	if q.Zonal != "" {
		in := slices.DeleteFunc(slices.Clone(picked), func(r record) bool { return !strings.EqualFold(r.zone, q.TopoZone) })
		if len(in) > 0 || q.Zonal == "pin" {
			picked = in
		}
	}
	switch {
	case q.Form == FormProto:
	case q.Type == dns.TypeA || q.Type == dns.TypeAAAA:
		if q.Form == FormService {
			e.Type, e.Tiers = q.Type, w.addresses(s, picked, q)
		}
	case q.Type == dns.TypeSRV:
		e.Type = dns.TypeSRV
		e.Tiers, e.Glue = w.srv(s, picked, q)
	}
	if len(e.Tiers) > 0 {
		e.SOA = ""
	}
	return e
}

// resolve returns the global service q's name is of, nil for none; and for a short name that
// several namespaces have, none preferred, their namespaces.
func (w *World) resolve(q Question) (*Service, []string) {
	if q.NS != "" {
		return w.service(q.NS, q.Svc), nil
	}
	named := w.named(q.Svc)
	switch len(named) {
	case 0:
		return nil, nil
	case 1:
		return named[0], nil
	}
	for _, ns := range w.PreferNamespaces {
		for _, s := range named {
			if s.Namespace == ns {
				return s, nil
			}
		}
	}
	var nss []string
	for _, s := range named {
		nss = append(nss, s.Namespace)
	}
	return nil, nss
}

// pick returns the ready records of s that name q (not zonal) holds, and whether it exists: a
// name exists when it has records, or is an empty non-terminal above one that has (_<proto>).
func (w *World) pick(s *Service, q Question) ([]record, bool) {
	var out []record
	for _, r := range w.records(s) {
		switch {
		case !r.ready:
		case q.Cluster != "" && !strings.EqualFold(q.Cluster, r.cluster):
		case q.Host != "" && !strings.EqualFold(q.Host, r.host):
		case q.Form == FormSRV && !hasPort(r, q.Port, q.Proto):
		case q.Form == FormProto && !hasPort(r, "", q.Proto):
		default:
			out = append(out, r)
		}
	}
	return out, len(out) > 0
}

// hasPort reports whether r has a port named name ("": any) of protocol proto (tcp, udp, sctp).
func hasPort(r record, name, proto string) bool {
	for p := range r.ports {
		if (name == "" || strings.EqualFold(p.Name, name)) && strings.EqualFold(p.Protocol, proto) {
			return true
		}
	}
	return false
}

// tierOf returns r's tier in answers to q: from the client, when client_locality knows it, else
// from the cluster.
func (w *World) tierOf(r record, client *Node) int {
	if client != nil {
		return w.clientTier(r, client)
	}
	return w.tier(r)
}

// nearest is the policy of zone: N of `policy nearest N`, 0 for all.
func (w *World) nearest(zone string) int {
	if n, ok := w.Policies[zone]; ok {
		return n
	}
	return w.Policies[""]
}

// addresses returns the A or AAAA answer of records rs of s, by tier, cut by the zone's policy.
func (w *World) addresses(s *Service, rs []record, q Question) [][]RR {
	client := w.client(q)
	byTier := map[int][]record{}
	for _, r := range rs {
		if r.addr.Is4() == (q.Type == dns.TypeA) {
			t := w.tierOf(r, client)
			byTier[t] = append(byTier[t], r)
		}
	}
	var out [][]RR
	count, n := 0, w.nearest(q.Zone)
	for _, t := range slices.Sorted(maps.Keys(byTier)) {
		if n > 0 && count >= n {
			break
		}
		tier := byTier[t]
		slices.SortFunc(tier, func(a, b record) int {
			return cmp.Or(strings.Compare(a.cluster, b.cluster), strings.Compare(a.host, b.host), a.addr.Compare(b.addr))
		})
		var rrs []RR
		for _, r := range tier {
			rrs = append(rrs, RR{Addr: r.addr, Priority: t})
		}
		out, count = append(out, rrs), count+len(rrs)
	}
	return out
}

// srv returns the SRV answer of records rs of s for q (one SRV per target, pod and cluster, and
// port q asks for; the priority its tier) by tier, cut by the zone's policy counting targets,
// and each target's addresses.
func (w *World) srv(s *Service, rs []record, q Question) ([][]RR, map[string][]netip.Addr) {
	client := w.client(q)
	type target struct {
		name  string
		tier  int
		ports []int32
	}
	targets := map[string]*target{}
	glue := map[string][]netip.Addr{}
	for _, r := range rs {
		name := r.host + "." + r.cluster + "." + strings.ToLower(s.Name+"."+s.Namespace) + "." + q.Zone
		t := targets[name]
		if t == nil {
			t = &target{name: name, tier: w.tierOf(r, client)}
			targets[name] = t
		}
		glue[name] = append(glue[name], r.addr)
		for p, port := range r.ports {
			if (q.Form != FormSRV || strings.EqualFold(p.Name, q.Port) && strings.EqualFold(p.Protocol, q.Proto)) && !slices.Contains(t.ports, port) {
				t.ports = append(t.ports, port)
			}
		}
	}
	byTier := map[int][]RR{}
	counts := map[int]int{}
	for _, t := range targets {
		for _, p := range t.ports {
			byTier[t.tier] = append(byTier[t.tier], RR{Priority: t.tier, Port: p, Target: t.name})
		}
		if len(t.ports) > 0 {
			counts[t.tier]++
		} else {
			delete(glue, t.name)
		}
	}
	var out [][]RR
	count, n := 0, w.nearest(q.Zone)
	for _, t := range slices.Sorted(maps.Keys(byTier)) {
		if n > 0 && count >= n {
			break
		}
		out, count = append(out, byTier[t]), count+counts[t]
	}
	kept := map[string][]netip.Addr{}
	for _, tier := range out {
		for _, r := range tier {
			kept[r.Target] = glue[r.Target]
		}
	}
	return out, kept
}

package answer

import (
	"math"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// Chooser chooses what names answer: the options that decide it.
type Chooser struct {
	Policies         Policies // policy: by zone, the zones' policies; under "", the instance's
	PreferNamespaces []string // prefer_namespaces: the order in which short names pick a namespace
	MCSZones         []string // names mcs: the zones with MCS names; the others have .global's
}

// scheme returns the naming scheme of zone.
func (c *Chooser) scheme(zone string) scheme { return schemeOf(c.MCSZones, zone) }

// selectName computes into s, a zero selection but for its parsed name, what that name, parsed
// under zone, selects from snap for a question req of qtype (nil and dns.TypeTXT in class CH, an
// explanation: every answer's records, unbounded) asked by q: everything an answer or an
// explanation of it says. (Into s, not returned: a selection is some 400 bytes, made once on the
// caller's stack.)
func (c *Chooser) selectName(s *selection, snap *index.Snapshot, zone string, qtype uint16, q Querier, req *request.Request) {
	s.zone, s.scheme, s.snap, s.Querier = zone, c.scheme(zone), snap, q
	if s.name.svc != "" {
		s.svc, s.candidates = c.service(snap, zone, &s.name)
	}
	c.choose(s, qtype, viewLimit(s.svc, req))
}

// choose sets what s's service answers for its name and qtype, no more than limit records of a
// family: the view, the policy and the records kept, and what the name is and whether it exists.
func (c *Chooser) choose(s *selection, qtype uint16, limit int) {
	n := &s.name
	reshape, answers := false, false
	var v index.View // one, not one per call on the stack (see the package doc)
	switch {
	case s.svc == nil:
	case n.zonal == zonalNone && n.host == "" && !n.form.ofPorts() && (s.client != nil || cut(s.svc, limit)):
		// Ranked whole from the client (the ranked view is empty where the cluster's is), or a
		// service bigger than the view: the index remembers the view, of whole tiers, so that
		// rotation spreads over the whole nearest tier.
		v = s.svc.NearestKept(&s.kept, n.cluster, "", 0, s.client, limit)
	case n.zonal != zonalNone && n.form == formService && n.host == "":
		// A zonal name exists where its service's name does: whether that has records, read
		// without the view of them, which reshape replaces.
		reshape, answers = true, s.svc.Answers(n.cluster)
	default:
		v = s.svc.Select(n.cluster, n.host, portFilter(s, limit), limit)
		reshape = n.zonal != zonalNone || s.client != nil
	}
	s.view = v
	// What the name is, and whether it exists, by the cluster's view.
	s.kind, s.exists = nameIs(s.snap, n, s.svc, s.view, answers || !v.Empty())
	if reshape {
		s.reshape(limit)
	}
	// The policy chooses among the records a name has, never whether it has any: rcodes are all's.
	s.policy, s.from = c.policyOf(s.zone, s.svc)
	if qtype != dns.TypeSRV && qtype != dns.TypeAAAA {
		s.a = s.policy.Keep(s.view.A)
	}
	if qtype != dns.TypeSRV && qtype != dns.TypeA {
		s.aaaa = s.policy.Keep(s.view.AAAA)
	}
	if qtype != dns.TypeA && qtype != dns.TypeAAAA {
		s.srv = s.policy.KeepTargets(s.view, &n.ports)
	}
}

// recordLimit is the most records of one family an answer of size bytes can hold, and one (the
// server truncates a reply that does not fit, and says so): no more are read. At least 100: a
// tier's SRV records share a weight of 100, 1 each from 100 on, so that 100 read tell the weight
// of any tier. Without a bound (an explanation), all.
func recordLimit(size int) int {
	if size == 0 {
		return math.MaxInt
	}
	return max(size/minAddrRR+1, 100)
}

// viewLimit is recordLimit of the reply to req (nil: an explanation, unbounded) for service svc.
// A service of fewer than 100 records is read whole whatever the bound, so its reply's size is
// not read: reading the EDNS0 option costs as much as a small answer's selection.
func viewLimit(svc *index.Service, req *request.Request) int {
	if req == nil || svc == nil || svc.Len() < 100 {
		return math.MaxInt
	}
	return recordLimit(req.Size())
}

// The least bytes a record takes in a reply, its owner name compressed to a pointer: 2 for it, 10
// for type, class, TTL and length, then the data. A reply of size bytes holds at most size/min.
const (
	minAddrRR = 2 + 10 + 4 // an A record (an AAAA record's 28 bytes are more)
	minSRVRR  = 2 + 10 + 6 // an SRV record, but its target: <host>.<cluster> then a pointer
)

// reshape makes the view of a zonal name or a client-ranked answer: the records of the name's
// topology zone (a prefer name's, when it has some), ranked from the client, no more than limit
// of each family (both, whatever the question: one remembered view answers A, AAAA and SRV), and
// of an SRV name of a big service, only those with a port it asks for (portFilter), as the
// cluster's view. The index reads only what the answer holds (Service.Nearest); one endpoint's
// few records are ranked as they are.
func (s *selection) reshape(limit int) {
	n := &s.name
	zone := ""
	if n.zonal != zonalNone {
		s.zoned = n.zonal == zonalPin || s.zoneHolds()
		if s.zoned {
			zone = n.topoZone
		}
	}
	var v index.View // one, not one per call on the stack (see the package doc)
	if n.host == "" && (s.client != nil || zone != "") && !filtersPorts(s, limit) {
		v = s.svc.NearestKept(&s.kept, n.cluster, zone, 0, s.client, limit)
	} else {
		v = s.reshapeRare(zone, limit)
	}
	s.view = v
}

// reshapeRare is reshape's view of one pod's name; of an SRV name of a big service, whose view
// keeps only records with its port; and of a prefer name falling back to every record of its
// name. Never inlined, as zoneHolds.
//
//go:noinline
func (s *selection) reshapeRare(zone string, limit int) index.View {
	n := &s.name
	switch {
	case n.host != "" && s.client != nil:
		return s.rankedHost(limit)
	case n.host != "" && zone != "":
		return s.svc.Select(n.cluster, n.host, s.inZone, limit)
	case n.host != "" || !cut(s.svc, limit):
		return s.svc.Select(n.cluster, n.host, nil, limit)
	case filtersPorts(s, limit):
		m := *n // the filter's copy, which the walk keeps: not the selection, on the caller's stack
		return s.svc.Nearest(m.cluster, zone, 0, s.client, m.matches, limit)
	}
	return s.svc.NearestKept(&s.kept, n.cluster, zone, 0, s.client, limit)
}

// portFilter is what the view of an SRV name keeps when its service holds more records than an
// answer holds (limit): those with a port the name asks for, else the few read could all be
// records without one. Otherwise nothing is filtered: answers skip such records as they go.
func portFilter(s *selection, limit int) func(*index.Record) bool {
	if !filtersPorts(s, limit) {
		return nil
	}
	return s.name.matches
}

// filtersPorts reports whether portFilter filters.
func filtersPorts(s *selection, limit int) bool {
	return s.name.form.ofPorts() && cut(s.svc, limit)
}

// cut reports whether a view of svc may be cut at limit records of a family: svc has more.
func cut(svc *index.Service, limit int) bool { return svc.Len() > limit }

// rankedHost is the view of one pod's name ranked from the client, in the name's topology zone
// when zoned. Never inlined, as zoneHolds.
//
//go:noinline
func (s *selection) rankedHost(limit int) index.View {
	var keep func(*index.Record) bool
	if s.zoned {
		keep = s.inZone
	}
	all := s.svc.Select(s.name.cluster, s.name.host, keep, math.MaxInt)
	topo := s.svc.Topology()
	return index.View{A: topo.Ranked(all.A, s.client, limit), AAAA: topo.Ranked(all.AAAA, s.client, limit)}
}

// zoneHolds reports whether the name's topology zone holds a record the name answers. Apart, so
// that the copy of the name its filter keeps is made for zonal names only, not for every answer
// ranked from the client; never inlined, so that its frame is not reserved for every answer ranked
// from the client either (see the package doc).
//
//go:noinline
func (s *selection) zoneHolds() bool {
	n := s.name
	if n.host != "" {
		return !s.svc.Select(n.cluster, n.host, s.inZoneAndMatches, 1).Empty()
	}
	return !s.svc.Nearest(n.cluster, n.topoZone, 0, nil, n.matches, 1).Empty()
}

// inZoneAndMatches reports whether record r is in the name's topology zone with a port it asks for.
func (s *selection) inZoneAndMatches(r *index.Record) bool { return s.name.matches(r) && s.inZone(r) }

// service finds the global service a name of one refers to: nil when there is none. A short name
// that several namespaces have, with no prefer_namespaces entry among them, refers to none of them:
// it must never silently pick one. Their selections are returned, for the explanation.
func (c *Chooser) service(snap *index.Snapshot, zone string, n *name) (*index.Service, []selection) {
	if !n.short {
		return snap.Service(index.Key{Namespace: n.ns, Name: n.svc}), nil
	}
	named := snap.Named(n.svc)
	switch len(named) {
	case 0:
		return nil, nil
	case 1:
		return named[0], nil
	}
	if svc := preferred(c.PreferNamespaces, named); svc != nil {
		return svc, nil
	}
	candidates := make([]selection, len(named))
	for i, svc := range named {
		candidates[i] = selection{name: name{form: formService, svc: n.svc, ns: svc.Namespace}, zone: zone, scheme: c.scheme(zone), snap: snap, svc: svc}
		c.choose(&candidates[i], dns.TypeTXT, math.MaxInt)
	}
	return nil, candidates
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

// policyOf returns the policy of answers for svc (nil: none) in zone, and who set it: the zone's,
// else the service owner's, else the instance's.
func (c *Chooser) policyOf(zone string, svc *index.Service) (index.Policy, policySetter) {
	if p, ok := c.Policies.Get(zone); ok {
		return p, fromZone
	}
	if svc != nil {
		if p, ok := svc.Policy(); ok {
			return p, fromAnnotation
		}
	}
	p, _ := c.Policies.Get("")
	return p, fromDefault
}

package global

import (
	"math"

	"github.com/globaldns/global/plugin/global/index"

	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// chooser chooses what names answer: the options that decide it.
type chooser struct {
	policies         policies // policy: by zone, the zones' policies; under "", the instance's
	preferNamespaces []string // prefer_namespaces: the order in which short names pick a namespace
	mcsZones         []string // names mcs: the zones with MCS names; the others have .global's
}

// scheme returns the naming scheme of zone.
func (c *chooser) scheme(zone string) scheme { return schemeOf(c.mcsZones, zone) }

// selectName computes into s, a zero selection but for its parsed name, what that name, parsed
// under zone, selects from snap for a question req of qtype (nil and dns.TypeTXT in class CH, an
// explanation: every answer's records, unbounded) asked by q: everything an answer or an
// explanation of it says. (Into s, not returned: a selection is some 400 bytes, made once on the
// caller's stack.)
func (c *chooser) selectName(s *selection, snap *index.Snapshot, zone string, qtype uint16, q querier, req *request.Request) {
	s.zone, s.scheme, s.snap, s.querier = zone, c.scheme(zone), snap, q
	if s.name.svc != "" {
		s.svc, s.candidates = c.service(snap, zone, &s.name)
	}
	c.choose(s, qtype, viewLimit(s.svc, req))
}

// choose sets what s's service answers for its name and qtype, no more than limit records of a
// family: the view, the policy and the records kept, and what the name is and whether it exists.
func (c *chooser) choose(s *selection, qtype uint16, limit int) {
	n := &s.name
	reshape, answers := false, false
	var v index.View // one, not one per call on the stack (see ServeDNS)
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

// service finds the global service a name of one refers to: nil when there is none. A short name
// that several namespaces have, with no prefer_namespaces entry among them, refers to none of them:
// it must never silently pick one. Their selections are returned, for the explanation.
func (c *chooser) service(snap *index.Snapshot, zone string, n *name) (*index.Service, []selection) {
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
	if svc := preferred(c.preferNamespaces, named); svc != nil {
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
func (c *chooser) policyOf(zone string, svc *index.Service) (index.Policy, policySetter) {
	if p, ok := c.policies.get(zone); ok {
		return p, fromZone
	}
	if svc != nil {
		if p, ok := svc.Policy(); ok {
			return p, fromAnnotation
		}
	}
	p, _ := c.policies.get("")
	return p, fromDefault
}

// policies are the policies of a plugin's zones and its own (zone ""): a few, looked up on every
// query without hashing. The zones are the plugin's own strings, which compare at a glance.
type policies []zonePolicy

type zonePolicy struct {
	zone   string
	policy index.Policy
}

// policiesOf returns the policies of m.
func policiesOf(m map[string]index.Policy) policies {
	var out policies
	for z, p := range m {
		out.set(z, p)
	}
	return out
}

// get returns the policy of zone, and whether it has one.
func (ps policies) get(zone string) (index.Policy, bool) {
	for i := range ps {
		if ps[i].zone == zone {
			return ps[i].policy, true
		}
	}
	return index.Policy{}, false
}

// set sets the policy of zone.
func (ps *policies) set(zone string, p index.Policy) {
	for i := range *ps {
		if (*ps)[i].zone == zone {
			(*ps)[i].policy = p
			return
		}
	}
	*ps = append(*ps, zonePolicy{zone, p})
}

// nameIs says what name n is, whose global service is svc (nil: none) and view view (answers:
// the name's scope has ready records, in view unless n is a zonal name), and whether it exists:
// each form of name is dispatched here, once. As in RFC 8020, nothing exists below a
// name that does not: a name exists when it answers, or when it is an empty non-terminal above one
// that does. Kubernetes DNS answers NXDOMAIN for a headless service without ready endpoints; so
// does this plugin, and so for everything below it. A one-label name may be a namespace with a
// global service that answers, or dns.<zone> above the nameserver's name; _<proto>.<svc> exists
// when some port of a ready endpoint has that protocol, _<port>._<proto>.<svc> when one is that.
func nameIs(snap *index.Snapshot, n *name, svc *index.Service, view index.View, answers bool) (nameKind, bool) {
	short := n.form == formService && n.short
	switch {
	case n.form == formNone:
		return kindNone, false
	case n.zonal != zonalNone && svc == nil: // a zonal name exists where its service's name does
		return kindNoService, false
	case n.form == formVersion:
		return kindVersion, true
	case n.form == formAboveNameserver, svc == nil && short && n.svc == nameserverParent:
		return kindAboveNameserver, true
	case n.form == formNamespace && n.ns == "":
		return kindNamespace, snap.Answers()
	case n.form == formNamespace:
		return kindNamespace, snap.HasNamespace(n.ns)
	case svc == nil && short && snap.HasNamespace(n.svc):
		return kindNamespaceOfServices, true
	case svc == nil:
		return kindNoService, false
	case !answers: // a short name's namespace keeps it, not its zonal names, which are the service's
		return kindService, short && n.zonal == zonalNone && (n.svc == nameserverParent || snap.HasNamespace(n.svc))
	case n.form.ofPorts():
		return kindService, anyMatches(view.A, n) || anyMatches(view.AAAA, n)
	}
	return kindService, true
}

// anyMatches reports whether n matches a record of rs.
func anyMatches(rs []index.Record, n *name) bool {
	for i := range rs {
		if n.matches(&rs[i]) {
			return true
		}
	}
	return false
}

package global

import (
	"math"
	"strings"

	"github.com/globaldns/global/plugin/global/index"
)

// selection is what a query name selects from one snapshot, computed once (choose.go) and
// rendered twice: as the IN answer (handler.go with answer.go) and as its explanation in class
// CH (explain.go), which therefore never disagree.
type selection struct {
	name   name
	zone   string
	scheme scheme
	snap   *index.Snapshot

	// svc is the global service the name is of; nil for a name of none. A short name that several
	// namespaces have, none of them preferred, selects none: candidates holds the selection of each.
	svc        *index.Service
	candidates []selection

	// querier is the client the answer is ranked from, when known: then every record's tier is
	// the client's (Topology.ClientTier), not the cluster's.
	querier

	// view is the ready records of the scope the name names (one pod's, one cluster's, all), of
	// its topology zone only when zoned (a zonal name's pin, or its prefer with records there),
	// in answer order.
	view  index.View
	zoned bool
	kept  *index.Kept // what answers keep with view, when the index remembers it (Service.NearestKept)

	policy index.Policy
	from   policySetter

	// a and aaaa are the records the address answers hold, prefixes of view.A and view.AAAA: the
	// nearest whole tiers the policy keeps, counting each record (one member's address of that
	// family) once. srv holds the records whose targets the SRV answer holds, prefixes of both: the
	// nearest whole tiers the policy keeps, counting each target (one member, whatever its ports
	// and addresses) with a port the name asks for once. Each is set only for the questions that
	// use it (all of them for an explanation).
	a, aaaa []index.Record
	srv     index.View

	// exists says whether the name exists (RFC 8020): it has records, or is an empty non-terminal
	// above a name that has. kind says what the name is: a global service's, or which other.
	exists bool
	kind   nameKind
}

// nameKind is what a name of a zone is: a global service's name, or which other (what its
// explanation says of it). The selection decides it, once, with whether the name exists.
type nameKind uint8

const (
	kindService             nameKind = iota // a global service's (its view may be empty)
	kindNone                                // no name of the zone's scheme
	kindVersion                             // dns-version (names mcs)
	kindAboveNameserver                     // dns.<zone>, above the nameserver's name
	kindNamespace                           // <ns>.<zone> (or <ns>.svc.<zone>)
	kindNoService                           // no global service of that name
	kindNamespaceOfServices                 // a short name that is a namespace whose services answer
)

// ambiguous reports whether the name is a short name that several namespaces have.
func (s *selection) ambiguous() bool { return len(s.candidates) > 0 }

// namespaces returns the namespaces of an ambiguous name's candidates, sorted.
func (s *selection) namespaces() []string {
	out := make([]string, len(s.candidates))
	for i, c := range s.candidates {
		out[i] = c.svc.Namespace
	}
	return out
}

// answers reports whether record r, one of the service's, is in the answer to the name: ready,
// in the name's scope, with a port the name asks for, and of a tier kept. An address name's
// records are those of its A and AAAA answers; an SRV name's, its SRV answer's; _<proto> names
// answer nothing (their records are those of the _<port>._<proto> names below).
func (s *selection) answers(r *index.Record) bool {
	switch s.name.form {
	case formProto:
		return false
	case formSRV:
		return s.inSRV(r)
	}
	return s.inView(r) && keeps(s.a, s.aaaa, r.Family(), s.tier(r))
}

// inSRV reports whether record r is an address of a target of the SRV answer to the name.
func (s *selection) inSRV(r *index.Record) bool {
	return s.inView(r) && s.name.matches(r) && keeps(s.srv.A, s.srv.AAAA, r.Family(), s.tier(r))
}

// inView reports whether record r is in the view: ready, in the name's scope and zone.
func (s *selection) inView(r *index.Record) bool {
	return r.Ready && s.name.scopes(r) && (!s.zoned || s.inZone(r))
}

// inZone reports whether record r is in the topology zone of the name, a zonal one.
func (s *selection) inZone(r *index.Record) bool {
	return strings.EqualFold(s.svc.Topology().ZoneOf(r), s.name.topoZone)
}

// tier returns the tier of record r in this answer: the client's view of it, or the cluster's.
func (s *selection) tier(r *index.Record) uint8 {
	if s.client != nil {
		return s.svc.Topology().ClientTier(r, s.client)
	}
	return r.Tier
}

// keeps reports whether a record of family f and tier t, ready, in scope, is of a tier kept in a
// (IPv4) or aaaa (IPv6): prefixes of the view's records, in tier order.
func keeps(a, aaaa []index.Record, f index.Family, t uint8) bool {
	kept := a
	if f == index.IPv6 {
		kept = aaaa
	}
	return len(kept) > 0 && t <= kept[len(kept)-1].Tier
}

// answersTier reports whether the answer to the name holds records of tier t.
func (s *selection) answersTier(t uint8) bool {
	kept := [2][]index.Record{s.a, s.aaaa}
	if s.name.form.ofPorts() {
		kept = [2][]index.Record{s.srv.A, s.srv.AAAA}
	}
	for _, rs := range kept {
		for i := range rs {
			if rs[i].Tier == t {
				return true
			}
		}
	}
	return false
}

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
	var v index.View // one, not one per call on the stack (see ServeDNS)
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
// from the client either (see ServeDNS).
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

// querier is who asks, when the answer is ranked from the client: where it runs, and how that
// was learned (client_locality's source: ecs, node or pod). A nil client is the cluster's view:
// learned is "" without client_locality, "none" when no source told.
type querier struct {
	client  *index.Client
	learned string
}

// policySetter says who set the policy of an answer.
type policySetter uint8

const (
	fromDefault    policySetter = iota // the instance's, `policy MODE` without zones (all unless set)
	fromAnnotation                     // the service owner's, index.AnnotationPolicy
	fromZone                           // the zone's, `policy MODE ZONES...`
)

var policySetters = [...]string{fromDefault: "default", fromAnnotation: "annotation", fromZone: "zone"}

func (s policySetter) String() string { return policySetters[s] }

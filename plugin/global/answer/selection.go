package answer

import (
	"fmt"
	"strings"

	"github.com/globaldns/global/plugin/global/index"
)

// selection is what a query name selects from one snapshot, computed once (view.go) and
// rendered twice: as the IN reply (reply.go) and as its explanation in class CH (explain.go),
// which therefore never disagree.
type selection struct {
	name   name
	zone   string
	scheme scheme
	snap   *index.Snapshot

	// svc is the global service the name is of; nil for a name of none. A short name that several
	// namespaces have, none of them preferred, selects none: candidates holds the selection of each.
	svc        *index.Service
	candidates []selection

	// Querier is the client the answer is ranked from, when known: then every record's tier is
	// the client's (Topology.ClientTier), not the cluster's.
	Querier

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

// what says what a name that is no global service's is, or why it does not exist: its
// explanation, beside whether it exists.
func (s *selection) what() string {
	n := &s.name
	switch {
	case s.kind == kindNone && s.scheme == schemeMCS:
		return "not a name of this zone (names mcs): [<hostname>.<clusterid>.]<svc>.<ns>.svc, [_<port>.]_<proto>.<svc>.<ns>.svc, dns-version; <clusterid>.<svc>.<ns>.svc must not exist"
	case s.kind == kindNone:
		return "not a name of this zone: [[<host>.]<cluster>.]<svc>.<ns>, [_<port>.]_<proto>.<svc>.<ns> or their short forms"
	case s.kind == kindVersion:
		return "the version of the Multi-Cluster Services DNS specification this zone answers, " + mcsVersion
	case s.kind == kindAboveNameserver:
		return "an empty non-terminal above the zone's nameserver, " + nameserver(s.zone)
	case s.kind == kindNamespace && !s.exists:
		return fmt.Sprintf("no global service answers in namespace %q", n.ns)
	case s.kind == kindNamespace:
		return fmt.Sprintf("an empty non-terminal: global services answer in namespace %q", n.ns)
	case s.kind == kindNamespaceOfServices:
		return "an empty non-terminal: namespace " + n.svc + " has global services that answer"
	}
	return "no global service " + n.service()
}

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

// policySetter says who set the policy of an answer.
type policySetter uint8

const (
	fromDefault    policySetter = iota // the instance's, `policy MODE` without zones (all unless set)
	fromAnnotation                     // the service owner's, index.AnnotationPolicy
	fromZone                           // the zone's, `policy MODE ZONES...`
)

var policySetters = [...]string{fromDefault: "default", fromAnnotation: "annotation", fromZone: "zone"}

func (s policySetter) String() string { return policySetters[s] }

// Policies are the policies of a plugin's zones and its own (zone ""): a few, looked up on every
// query without hashing. The zones are the plugin's own strings, which compare at a glance.
type Policies []zonePolicy

type zonePolicy struct {
	zone   string
	policy index.Policy
}

// PoliciesOf returns the policies of m.
func PoliciesOf(m map[string]index.Policy) Policies {
	var out Policies
	for z, p := range m {
		out.Set(z, p)
	}
	return out
}

// Get returns the policy of zone, and whether it has one.
func (ps Policies) Get(zone string) (index.Policy, bool) {
	for i := range ps {
		if ps[i].zone == zone {
			return ps[i].policy, true
		}
	}
	return index.Policy{}, false
}

// Set sets the policy of zone.
func (ps *Policies) Set(zone string, p index.Policy) {
	for i := range *ps {
		if (*ps)[i].zone == zone {
			(*ps)[i].policy = p
			return
		}
	}
	*ps = append(*ps, zonePolicy{zone, p})
}

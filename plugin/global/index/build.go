package index

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Build assembles the global service k from its members and their slices; nil when it has no member.
func (t *Topology) Build(k Key, src Source) *Service { return t.Rebuild(nil, k, src) }

// finish sets what s keeps of its records' places and its members' slices once they are built.
func (s *Service) finish(slicesOf [][]*Slice) {
	s.annotate(slicesOf)
	s.depleted = s.computeDepleted()
}

// members starts building k: its accepted members and their slices. s is nil when k has no member.
func (t *Topology) members(k Key, src Source) (s *Service, slicesOf [][]*Slice) {
	members := src.Members(k)
	if len(members) == 0 {
		return nil, nil
	}
	s = &Service{Key: k, built: time.Now().UnixNano(), topo: t}
	if s.Members = t.acceptMembers(k, members, &s.Warnings); len(s.Members) == 0 {
		return nil, nil
	}
	slicesOf = make([][]*Slice, len(s.Members))
	for i, m := range s.Members {
		slicesOf[i] = src.Slices(m)
	}
	return s, slicesOf
}

// generations reads the generation of each member's per-pod mirrors (0 for a local one): before
// they are read, so that a later change makes them stale. Only a big service keeps them.
func generations(members []*Member, src Source) []uint64 {
	gens := make([]uint64, len(members))
	for i, m := range members {
		if !m.Local() {
			gens[i] = src.PodMirrorGeneration(m)
		}
	}
	return gens
}

// build makes s's records from every slice of its members: a full rebuild. gens, when read
// already, are its members' generations.
func (t *Topology) build(s *Service, slicesOf [][]*Slice, src Source, gens []uint64) {
	total, ordinals := 0, 0
	for _, sls := range slicesOf {
		ordinals += len(sls)
		for _, sl := range sls {
			total += len(sl.Endpoints)
		}
	}
	var inc *incremental
	if total >= incrementalMin {
		if gens == nil {
			gens = generations(s.Members, src)
		}
		inc = &incremental{gens: gens, slices: make([]*Slice, 0, ordinals), owners: make([]int32, 0, ordinals), order: make([][]int32, len(s.Members))}
	}
	rs := make([]Record, 0, total) // exactly: a snapshot lives long, spare capacity is waste
	ordinal := uint32(0)
	for i, m := range s.Members {
		rb := t.recordsOf(m, src)
		for _, sl := range slicesOf[i] {
			rs = rb.add(rs, sl, ordinal, nil, &s.Warnings)
			if inc != nil {
				inc.slices, inc.owners = append(inc.slices, sl), append(inc.owners, int32(i))
				inc.order[i] = append(inc.order[i], int32(ordinal))
			}
			ordinal++
		}
	}
	slices.SortFunc(rs, compareRecords)
	switch d := dedupe(rs); {
	case len(d) < len(rs):
		// Copies of an endpoint (a slice being rebalanced, for a moment): rare, so a service
		// that has them is built whole until they go.
		s.records, inc = slices.Clone(d), nil
	case inc != nil:
		inc.parts = partsOf(rs)
	default:
		s.records = rs
	}
	s.inc = inc
	s.locate(t)
	s.warnDuplicateHosts(s.All())
	if inc != nil {
		inc.counts = s.countRecords()
	}
}

// recordBuilder makes the records of one member's slices.
type recordBuilder struct {
	m       *Member
	cluster string
	tier    uint8
	pods    liveness
	origin  *Origin
}

func (t *Topology) recordsOf(m *Member, src Source) recordBuilder {
	rb := recordBuilder{m: m, cluster: t.ClusterOf(m)}
	if !m.Local() {
		rb.pods = newLiveness(src.PodMirrors(m))
	}
	rb.tier = t.Tier(rb.cluster)
	return rb
}

// add appends the records of slice sl, whose ordinal is ordinal, to rs: of every endpoint, or of
// those that only marks.
func (rb *recordBuilder) add(rs []Record, sl *Slice, ordinal uint32, only []bool, warn *[]Warning) []Record {
	ports := sl.Ports
	if !rb.m.Local() {
		ports = mirrorPorts(rb.m, sl, warn)
	}
	// Port lists are interned: slices of one member nearly always share one origin.
	if rb.origin == nil || !samePorts(rb.origin.Ports, ports) {
		rb.origin = rb.m.originOf(rb.cluster, ports)
	}
	for e := range sl.Endpoints {
		if only != nil && !only[e] {
			continue
		}
		ep := &sl.Endpoints[e]
		r := Record{Endpoint: ep, Origin: rb.origin, Tier: rb.tier, Gateway: rb.pods.of(ep.Addr()), slice: ordinal}
		if up := r.Gateway == GatewayUp; r.Gateway != GatewayUnknown && (ep.Ready != up || ep.Serving != up) {
			gated := ep.clone()
			gated.Ready, gated.Serving = up, up
			r.Endpoint = &gated
		}
		rs = append(rs, r)
	}
	return rs
}

// liveness answers, by address, whether a mirror's per-pod mirror is up: sorted, so a service of
// thousands of records builds no map.
type liveness []PodMirror

// newLiveness sorts pods, which Source.PodMirrors hands over, in place.
func newLiveness(pods []PodMirror) liveness {
	slices.SortFunc(pods, func(a, b PodMirror) int { return a.Addr.Compare(b.Addr) })
	return pods
}

func (l liveness) of(addr netip.Addr) Gateway {
	i, ok := slices.BinarySearchFunc(l, addr, func(p PodMirror, a netip.Addr) int { return p.Addr.Compare(a) })
	switch {
	case !ok:
		return GatewayUnknown
	case l[i].Ready:
		return GatewayUp
	}
	return GatewayDown
}

// acceptMembers orders members (local first, then by cluster) and drops the ones that would make
// names ambiguous: a mirror claiming this cluster's name, or a second mirror from the same cluster.
func (t *Topology) acceptMembers(k Key, in []*Member, warn *[]Warning) []*Member {
	ms := slices.Clone(in)
	// Of one cluster's mirrors, the one Linkerd's service mirror names, <svc>-<cluster>, first.
	named := func(m *Member) int {
		if m.Name == k.Name+"-"+m.Cluster {
			return 0
		}
		return 1
	}
	slices.SortFunc(ms, func(a, b *Member) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(named(a), named(b)), cmp.Compare(a.Name, b.Name))
	})
	out := ms[:0]
	for _, m := range ms {
		switch {
		case !m.Local() && m.Cluster == t.Local:
			warnf(warn, ReasonClusterNameClash, "mirror %s/%s claims this cluster's name %q: skipped", m.Namespace, m.Name, m.Cluster)
		case !m.Local() && t.Linked != nil && !t.Linked[m.Cluster]:
			warnf(warn, ReasonUnlinkedCluster, "mirror %s/%s claims cluster %q, which no Linkerd Link names: skipped", m.Namespace, m.Name, m.Cluster)
		case len(out) > 0 && out[len(out)-1].Cluster == m.Cluster:
			warnf(warn, ReasonDuplicateMirror, "mirror %s/%s is a second member from cluster %q (kept %s): skipped", m.Namespace, m.Name, m.Cluster, out[len(out)-1].Name)
		default:
			out = append(out, m)
		}
	}
	return out
}

// servicePorts maps a mirror slice's ports (the remote target ports) to the mirror Service's ports
// by name: the per-pod ClusterIP behind each address listens on the Service port, not the target port.
// mirrorPorts is servicePorts for mirror m's slice sl, warning also of the addresses sl left out
// for having no hostname.
func mirrorPorts(m *Member, sl *Slice, warn *[]Warning) []Port {
	if sl.Unnamed > 0 {
		warnf(warn, ReasonUnnamedMirrorAddress, "mirror %s/%s: %d address(es) without a hostname left out: not pods, but the gateway's "+
			"address, which Linkerd's service mirror writes into a headless mirror when the remote Service changes, until the remote "+
			"Endpoints do", m.Namespace, m.Name, sl.Unnamed)
	}
	return servicePorts(m, sl.Ports, warn)
}

func servicePorts(m *Member, ports []Port, warn *[]Warning) []Port {
	// Usually the names are the Service's, in its order: share its ports, allocate nothing.
	if slices.EqualFunc(ports, m.Ports, func(a, b Port) bool { return a.Name == b.Name }) {
		return m.Ports
	}
	out := make([]Port, 0, len(ports))
	for _, p := range ports {
		i := slices.IndexFunc(m.Ports, func(sp Port) bool { return sp.Name == p.Name })
		if i < 0 {
			warnf(warn, ReasonPortMismatch, "mirror %s/%s: endpoint port %q has no Service port of that name: skipped", m.Namespace, m.Name, p.Name)
			continue
		}
		out = append(out, m.Ports[i])
	}
	return out
}

// dedupe drops, from sorted records, the second copies of an endpoint (the same address of the
// same host in one cluster): an address may sit in two slices for a moment (slice rebalancing).
// The copy kept is ready if either is. Copies of equal readiness are adjacent; a not-ready copy
// of a ready record is found in the ready ones, sorted by the same order. No map: this is in
// every build of every service.
func dedupe(rs []Record) []Record {
	out, ready := rs[:0], 0
	for i := range rs {
		r := rs[i]
		if n := len(out); n > 0 && out[n-1].Ready == r.Ready && compareEndpoints(out[n-1], r) == 0 {
			continue
		}
		if !r.Ready {
			if _, found := slices.BinarySearchFunc(out[:ready], r, compareEndpoints); found {
				continue
			}
		} else {
			ready = len(out) + 1
		}
		out = append(out, r)
	}
	return out
}

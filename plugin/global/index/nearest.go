package index

import (
	"strings"
)

// Answers of one topology zone (zonal names) and answers ranked from the client read only the
// records they return, nearest first, not the whole service: a linked cluster's records share
// one tier and one zone, and a local record's tier from a client depends on two things alone,
// whether it is on the client's node and whether it is in the client's zone. So the local ready
// records are grouped by node and by zone (placements, made once per version of a service, on the
// first such question), and an answer walks, tier by tier, the groups of that tier.

// placements are where a service's local ready records are, per address family (by node and by
// zone, each list in answer order, pointing into the records, which are as immutable as the
// version of the service), and what a walk needs of its linked clusters. Immutable once made.
type placements struct {
	family [2]localPlaces // IPv4, IPv6
	// mirrors is where the local cluster's records go among the mirrors, sorted by cluster, in an
	// answer's tier: how many mirrors' names sort before this cluster's.
	localAt int
	// zones are the mirrors' zone localities, as s.clusters (the local member's, if any, "").
	zones []string
}

type localPlaces struct {
	byNode map[string][]*Record
	byZone map[string][]*Record
}

// places returns s's placements, made on first use.
func (s *Service) places() *placements {
	if p := s.placed.Load(); p != nil {
		return p
	}
	p := &placements{zones: make([]string, len(s.clusters))}
	for i := range s.clusters {
		name := s.clusterName(i)
		if !s.Members[i].Local() {
			p.zones[i] = s.topo.Zone(name)
			if name < s.topo.Local {
				p.localAt++
			}
		}
	}
	rs := s.Records()
	for f := range p.family {
		if len(s.clusters) == 0 || !s.Members[0].Local() {
			break
		}
		lp := localPlaces{byNode: map[string][]*Record{}, byZone: map[string][]*Record{}}
		run := s.clusters[0].span(f)
		for r := range rs.Slice(int(run[0]), int(run[1])).All() {
			if r.Local == nil {
				continue
			}
			if r.Local.NodeName != "" {
				lp.byNode[r.Local.NodeName] = append(lp.byNode[r.Local.NodeName], r)
			}
			if r.Local.Zone != "" {
				lp.byZone[r.Local.Zone] = append(lp.byZone[r.Local.Zone], r)
			}
		}
		p.family[f] = lp
	}
	s.placed.CompareAndSwap(nil, p)
	return s.placed.Load()
}

// span returns the run of family f (0: IPv4, 1: IPv6).
func (c *clusterRun) span(f int) [2]int32 {
	if f == 0 {
		return c.a
	}
	return c.aaaa
}

// Nearest returns the ready records of a scope of s (cluster "": every member's, else one
// cluster's) of family (0: both), in topology zone zone when it is not "" (compared as DNS names
// are, ignoring case), that keep admits (nil: all), no more than limit of each family, in answer
// order: ranked from client c when it is not nil, each record then with its tier from c
// (Topology.ClientTier), in the order Topology.Ranked gives; else the index's order. It reads the
// records it returns, and at most as many more: for a client, those of nearer tiers when a
// farther tier holds local records.
func (s *Service) Nearest(cluster, zone string, family Family, c *Client, keep func(*Record) bool, limit int) View {
	w := nearestWalk{s: s, p: s.places(), rs: s.Records(), zone: zone, c: c, keep: keep, limit: limit}
	if c != nil {
		w.tiers, w.czone = c.tiersFrom(s.topo), c.Zone()
	}
	var buf [12]run
	runs := w.plan(cluster, buf[:0])
	var v View
	if family != IPv6 {
		v.A = w.family(runs, 0)
	}
	if family != IPv4 {
		v.AAAA = w.family(runs, 1)
	}
	return v
}

// nearestWalk is one Nearest question.
type nearestWalk struct {
	s     *Service
	p     *placements
	rs    Records
	zone  string
	c     *Client
	czone string       // c's zone
	tiers *clientTiers // c's, when c is not nil
	keep  func(*Record) bool
	limit int
}

// run is a cluster's ready records (s.clusters[i]'s) in an answer, with their tier. An answer's
// runs are nearest first: the local cluster's once per tier of its kinds of record.
type run struct {
	i    int
	tier uint8
}

// plan appends to runs the runs of the clusters in scope, by tier, each tier's in cluster order
// (the mirrors are in cluster order in s.clusters; this cluster's goes where its name sorts).
func (w *nearestWalk) plan(cluster string, runs []run) []run {
	s, p := w.s, w.p
	local := len(s.clusters) > 0 && s.Members[0].Local()
	first := 0
	if local {
		first = 1
	}
	// Each mirror's tier, once; 255: not in the answer.
	var buf [16]uint8
	tiers := buf[:0]
	if n := len(s.clusters) - first; n > len(buf) {
		tiers = make([]uint8, 0, n)
	}
	top := uint8(0)
	for i := first; i < len(s.clusters); i++ {
		t := w.mirrorTier(cluster, i)
		if t != 255 {
			top = max(top, t)
		}
		tiers = append(tiers, t)
	}
	localIn := local && (cluster == "" || s.topo.Local == cluster)
	if localIn {
		top = max(top, w.tiersOfLocal()[1])
	}
	for t := uint8(0); t <= top; t++ {
		for j, mt := range tiers {
			if j == p.localAt && localIn && w.localHas(t) {
				runs = append(runs, run{i: 0, tier: t})
			}
			if mt == t {
				runs = append(runs, run{i: first + j, tier: t})
			}
		}
		if len(tiers) == p.localAt && localIn && w.localHas(t) {
			runs = append(runs, run{i: 0, tier: t})
		}
	}
	return runs
}

// mirrorTier returns the tier in the answer of mirror s.clusters[i], 255 when it is not in it: out
// of scope, without ready records, or not in the zone asked.
func (w *nearestWalk) mirrorTier(cluster string, i int) uint8 {
	s := w.s
	c := &s.clusters[i]
	switch {
	case c.a[1] == c.a[0] && c.aaaa[1] == c.aaaa[0]:
		return 255
	case cluster != "" && s.Members[i].Cluster != cluster:
		return 255
	case w.zone != "" && !strings.EqualFold(w.p.zones[i], w.zone):
		return 255 // a linked cluster's records are all in its zone
	case w.c != nil:
		return w.tiers.of(s.Members[i].Cluster)
	}
	at := c.a[0]
	if c.a[1] == c.a[0] {
		at = c.aaaa[0]
	}
	return w.rs.At(int(at)).Tier // the index's tier: its cluster's
}

// tiersOfLocal returns the nearest and the farthest tier of the local cluster's records.
func (w *nearestWalk) tiersOfLocal() [2]uint8 {
	if w.c == nil {
		return [2]uint8{0, 0}
	}
	lo, hi := uint8(255), uint8(0)
	for _, byZone := range w.tiers.local {
		for _, t := range byZone {
			lo, hi = min(lo, t), max(hi, t)
		}
	}
	return [2]uint8{lo, hi}
}

// localHas reports whether the local cluster's records may be of tier t: without a client, its
// index tier, 0; with one, any of its four kinds' tiers.
func (w *nearestWalk) localHas(t uint8) bool {
	if w.c == nil {
		return t == 0
	}
	for _, byZone := range w.tiers.local {
		for _, kt := range byZone {
			if kt == t {
				return true
			}
		}
	}
	return false
}

// localKind returns whether local record r is on the client's node and in its zone, as 0 or 1.
func (w *nearestWalk) localKind(r *Record) (node, zone int) {
	if r.Local == nil {
		return 0, 0
	}
	if r.Local.NodeName != "" && r.Local.NodeName == w.c.Node {
		node = 1
	}
	if z := r.Local.Zone; z != "" && z == w.czone {
		zone = 1
	}
	return node, zone
}

// family returns the answer's records of family f (0: IPv4, 1: IPv6), from runs.
func (w *nearestWalk) family(runs []run, f int) []Record {
	// Room for the records, made once: as many as the runs hold (the local cluster's counted
	// once), or the limit.
	n, local := 0, false
	for _, r := range runs {
		if w.s.Members[r.i].Local() {
			if local {
				continue
			}
			local = true
		}
		span := w.s.clusters[r.i].span(f)
		n += int(span[1] - span[0])
	}
	var out []Record
	if n > 0 {
		out = make([]Record, 0, min(n, w.limit))
	}
	for _, r := range runs {
		if len(out) == w.limit {
			break
		}
		span := w.s.clusters[r.i].span(f)
		if span[0] == span[1] {
			continue
		}
		if w.s.Members[r.i].Local() {
			out = w.takeLocal(out, f, span, r.tier)
		} else {
			out = w.take(out, span, nil, r.tier)
		}
	}
	return out
}

// takeLocal appends the local records of tier t (all of them without a client), from span, to
// out, walking the smallest group that holds them: the client's node's, a zone's, or the span.
func (w *nearestWalk) takeLocal(out []Record, f int, span [2]int32, t uint8) []Record {
	places := w.p.family[f]
	if w.c == nil {
		if w.zone == "" {
			return w.take(out, span, nil, t)
		}
		return w.takeList(out, zoneGroup(places, w.zone), nil, t)
	}
	// Which kinds of local record have this tier: on the client's node or not, in its zone or not.
	var kinds [2][2]bool
	onNode, inZone, all := true, true, true
	for node := range 2 {
		for zone := range 2 {
			if kinds[node][zone] = w.tiers.local[node][zone] == t; kinds[node][zone] {
				onNode, inZone = onNode && node == 1, inZone && zone == 1
			} else {
				all = false
			}
		}
	}
	of := func(rec *Record) bool {
		n, z := w.localKind(rec)
		return (all || kinds[n][z]) && (w.zone == "" || rec.Local != nil && strings.EqualFold(rec.Local.Zone, w.zone))
	}
	// A group all of whose kinds are of this tier needs no filter (when no zone is asked).
	unfiltered := func(group bool) func(*Record) bool {
		if group && w.zone == "" {
			return nil
		}
		return of
	}
	switch {
	case onNode:
		return w.takeList(out, places.byNode[w.c.Node], unfiltered(kinds[1][0] && kinds[1][1]), t)
	case w.zone != "":
		return w.takeList(out, zoneGroup(places, w.zone), of, t)
	case inZone:
		return w.takeList(out, places.byZone[w.czone], unfiltered(kinds[0][1] && kinds[1][1]), t)
	}
	// The kinds farthest from the client, neither on its node nor in its zone: every record of a
	// nearer kind was answered before (or the answer is full), so those skipped here are at most
	// those answered.
	return w.take(out, span, of, t)
}

// zoneGroup returns the local records in zone (ignoring case), in answer order.
func zoneGroup(p localPlaces, zone string) []*Record {
	var out []*Record
	for z, g := range p.byZone {
		if !strings.EqualFold(z, zone) {
			continue
		}
		if out == nil {
			out = g
			continue
		}
		// Zones differing in case only: merged, in answer order.
		merged := make([]*Record, 0, len(out)+len(g))
		for len(out) > 0 && len(g) > 0 {
			if compareEndpoints(*out[0], *g[0]) < 0 {
				merged, out = append(merged, out[0]), out[1:]
			} else {
				merged, g = append(merged, g[0]), g[1:]
			}
		}
		out = append(append(merged, out...), g...)
	}
	return out
}

// take appends to out, until it holds w.limit, the records of span that of admits (nil: all) and
// w.keep admits, with tier t.
func (w *nearestWalk) take(out []Record, span [2]int32, of func(*Record) bool, t uint8) []Record {
	for p := range w.rs.Slice(int(span[0]), int(span[1])).Parts() {
		for k := range p {
			if len(out) == w.limit {
				return out
			}
			out = w.add(out, &p[k], of, t)
		}
	}
	return out
}

// takeList is take over the records of list.
func (w *nearestWalk) takeList(out []Record, list []*Record, of func(*Record) bool, t uint8) []Record {
	for _, r := range list {
		if len(out) == w.limit {
			break
		}
		out = w.add(out, r, of, t)
	}
	return out
}

// add appends r, with tier t, to out if of and w.keep admit it.
func (w *nearestWalk) add(out []Record, r *Record, of func(*Record) bool, t uint8) []Record {
	if (of != nil && !of(r)) || (w.keep != nil && !w.keep(r)) {
		return out
	}
	rec := *r
	rec.Tier = t
	return append(out, rec)
}

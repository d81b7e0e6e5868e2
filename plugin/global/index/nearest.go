package index

import (
	"math/bits"
	"strings"
	"sync/atomic"
)

// Answers of one topology zone (zonal names) and answers ranked from the client read only the
// records they return, nearest first, not the whole service: a linked cluster's records share
// one tier and one zone, and a local record's tier from a client depends on two things alone,
// whether it is on the client's node and whether it is in the client's zone. So the local ready
// records are grouped by node and by zone (placements, made once per version of a service, on the
// first such question), and an answer walks, tier by tier, the groups of that tier.

// places returns s's placements, made on first use. The making is out of line, as all the work of
// a query's rare paths here: a frame is reserved whole on every call, and a query's goroutine starts
// with a small stack, which grows by a copy (see the plugin's ServeDNS).
func (s *Service) places() *placements {
	if p := s.placed.Load(); p != nil {
		return p
	}
	return s.place()
}

// place makes s's placements (places).
func (s *Service) place() *placements {
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
		for node := range lp.byNode {
			if p.hosts == nil {
				p.hosts = map[uint64]struct{}{}
			}
			p.hosts[nodeHash(node)] = struct{}{}
		}
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
// farther tier holds local records. Without keep, the answer is remembered (memo.go), and holds
// whole tiers: the tier of the limit-th record to its end, so that an answer rotated within a
// tier spreads over all of it (see NearestKept); the view returned is shared, and must not be
// changed.
func (s *Service) Nearest(cluster, zone string, family Family, c *Client, keep func(*Record) bool, limit int) View {
	if keep != nil {
		k := memoKey{cluster: cluster, zone: zone, family: family, limit: limit}
		return s.walked(s.places(), &k, c, s.tiersOf(c), keep)
	}
	return s.NearestKept(nil, cluster, zone, family, c, limit)
}

// NearestKept is Nearest without keep, the answer remembered, and sets *kept (when kept is not
// nil) to what readers keep with it. Its view ends at a tier's end: at least limit records of a
// family (or all), then the rest of the last one's tier. A reply holds no more than limit, but
// rotated within a tier it may start anywhere in it, and its clients, dialing the first
// address, must spread over the whole tier. Read once and remembered, a tier costs its reading
// once per remembered answer, and 24 bytes a record while remembered; the answers read from it
// only what they hold.
func (s *Service) NearestKept(kept **Kept, cluster, zone string, family Family, c *Client, limit int) View {
	p, tiers := s.places(), s.tiersOf(c)
	k, h := memoKey{cluster: cluster, zone: zone, family: family, limit: limit}, uint64(0)
	if c != nil {
		k.class, h = tiers.class, tiers.classHash
		if _, ok := p.hosts[tiers.nodeHash]; ok {
			k.node, h = c.Node, h^tiers.nodeHash
		}
	}
	slot := p.memo.slot(&k, h)
	e := slot.Load()
	if e == nil || e.key != k {
		e = s.remember(slot, &k, p, c, tiers)
	}
	if kept != nil {
		*kept = &e.kept
	}
	return e.view
}

// tiersOf returns the tiers client c (nil: none) sees of s's records, nil for none.
func (s *Service) tiersOf(c *Client) *clientTiers {
	if c == nil {
		return nil
	}
	return c.tiersFrom(s.topo)
}

// remember walks the answer of k, and keeps it in slot. Never inlined, for walked's reason.
//
//go:noinline
func (s *Service) remember(slot *atomic.Pointer[memoEntry], k *memoKey, p *placements, c *Client, tiers *clientTiers) *memoEntry {
	e := &memoEntry{key: *k, view: s.walk(p, k.zone, c, tiers, nil, k.limit).view(k.cluster, k.family)}
	slot.Store(e)
	return e
}

// walked walks the answer of the Nearest question k (its node and class unread) with keep, cut
// at the limit. Never inlined: the walk's frames would deepen Nearest's, which every ranked and
// zonal query calls, for answers the memo mostly holds.
//
//go:noinline
func (s *Service) walked(p *placements, k *memoKey, c *Client, tiers *clientTiers, keep func(*Record) bool) View {
	w := s.walk(p, k.zone, c, tiers, keep, k.limit)
	w.cut = true
	return w.view(k.cluster, k.family)
}

// walk returns the walk of a Nearest question, of whole tiers.
func (s *Service) walk(p *placements, zone string, c *Client, tiers *clientTiers, keep func(*Record) bool, limit int) *nearestWalk {
	w := &nearestWalk{s: s, p: p, rs: s.Records(), zone: zone, c: c, tiers: tiers, keep: keep, limit: limit}
	if c != nil {
		w.czone = c.Zone()
	}
	return w
}

// view walks the answer of cluster's records of family.
func (w *nearestWalk) view(cluster string, family Family) View {
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
	cut   bool // cut at limit, else end at the end of the limit-th record's tier
}

// full reports whether out, of the answer's records so far, is full before a record of tier t.
func (w *nearestWalk) full(out []Record, t uint8) bool {
	return len(out) >= w.limit && (w.cut || len(out) == 0 || out[len(out)-1].Tier != t)
}

// The kinds of local record, as bits: on the client's node or not, in its zone or not.
const (
	atNodeZone = 1 << iota // on the node, in the zone
	atNode                 // on the node, not in the zone
	atZone                 // in the zone, not on the node
	atElse                 // neither
	atAny      = atNodeZone | atNode | atZone | atElse
)

// kindsOf returns the kinds of local record of tier t from the client.
func (w *nearestWalk) kindsOf(t uint8) uint8 {
	l := &w.tiers.local
	var k uint8
	for bit, kt := range [4]uint8{l[1][1], l[1][0], l[0][1], l[0][0]} {
		if kt == t {
			k |= 1 << bit
		}
	}
	return k
}

// plan appends to runs the runs of the clusters in scope, by tier, each tier's in cluster order
// (the mirrors are in cluster order in s.clusters; this cluster's goes where its name sorts).
func (w *nearestWalk) plan(cluster string, runs []run) []run {
	s, p := w.s, w.p
	local := len(s.clusters) > 0 && s.Members[0].Local() && (cluster == "" || s.topo.Local == cluster)
	first := 0
	if len(s.clusters) > 0 && s.Members[0].Local() {
		first = 1
	}
	// Each mirror's tier, once (255: not in the answer), and the tiers there are, as bits.
	var buf [16]uint8
	tiers := buf[:0]
	if n := len(s.clusters) - first; n > len(buf) {
		tiers = make([]uint8, 0, n)
	}
	var present uint64
	for i := first; i < len(s.clusters); i++ {
		t := w.mirrorTier(cluster, i)
		if t < 64 {
			present |= 1 << t
		}
		tiers = append(tiers, t)
	}
	if local {
		if w.c == nil {
			present |= 1 // the local cluster's index tier
		} else {
			for _, byZone := range w.tiers.local {
				for _, t := range byZone {
					present |= 1 << t
				}
			}
		}
	}
	for ; present != 0; present &= present - 1 {
		t := uint8(bits.TrailingZeros64(present))
		var kinds uint8 // of the local records of this tier: without a client, all at tier 0
		switch {
		case w.c != nil:
			kinds = w.kindsOf(t)
		case t == 0:
			kinds = atAny
		}
		for j := 0; j <= len(tiers); j++ {
			if j == p.localAt && local && kinds != 0 {
				runs = append(runs, run{i: 0, tier: t, local: true, kinds: kinds})
			}
			if j < len(tiers) && tiers[j] == t {
				runs = append(runs, run{i: first + j, tier: t})
			}
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

// localKind returns the kind of local record r from the client, as its bit.
func (w *nearestWalk) localKind(r *Record) uint8 {
	node, zone := false, false
	if r.Local != nil {
		node = r.Local.NodeName != "" && r.Local.NodeName == w.c.Node
		zone = r.Local.Zone != "" && r.Local.Zone == w.czone
	}
	switch {
	case node && zone:
		return atNodeZone
	case node:
		return atNode
	case zone:
		return atZone
	}
	return atElse
}

// family returns the answer's records of family f (0: IPv4, 1: IPv6), from runs.
func (w *nearestWalk) family(runs []run, f int) []Record {
	// Room for the records, made once: as many as the runs hold (the local cluster's counted
	// once), or the limit.
	n, local := 0, false
	for _, r := range runs {
		if r.local {
			if local {
				continue
			}
			local = true
		}
		span := w.s.clusters[r.i].span(f)
		n += int(span[1] - span[0])
	}
	if n == 0 {
		return nil
	}
	out := make([]Record, 0, min(n, w.limit))
	for _, r := range runs {
		if w.full(out, r.tier) {
			break
		}
		span := w.s.clusters[r.i].span(f)
		if span[0] == span[1] {
			continue
		}
		if r.local {
			out = w.takeLocal(out, f, span, r)
		} else {
			out = w.take(out, w.rs.Slice(int(span[0]), int(span[1])), 0, r.tier)
		}
	}
	return out
}

// takeLocal appends the local records of run r (all of them without a client), from span, to out,
// walking the smallest group that holds them: the client's node's, a zone's, or the span.
func (w *nearestWalk) takeLocal(out []Record, f int, span [2]int32, r run) []Record {
	places := &w.p.family[f]
	switch {
	case w.c == nil && w.zone == "":
		return w.take(out, w.rs.Slice(int(span[0]), int(span[1])), 0, r.tier)
	case w.c == nil:
		return w.takeList(out, zoneGroup(places, w.zone), 0, r.tier)
	case r.kinds&^(atNodeZone|atNode) == 0: // on the node: its group, filtered unless both kinds
		return w.takeList(out, places.byNode[w.c.Node], filterUnless(r.kinds, atNodeZone|atNode, w.zone), r.tier)
	case w.zone != "":
		return w.takeList(out, zoneGroup(places, w.zone), r.kinds, r.tier)
	case r.kinds&^(atNodeZone|atZone) == 0:
		return w.takeList(out, places.byZone[w.czone], filterUnless(r.kinds, atNodeZone|atZone, w.zone), r.tier)
	}
	// The kinds farthest from the client, neither on its node nor in its zone: every record of a
	// nearer kind was answered before (or the answer is full), so those skipped here are at most
	// those answered.
	return w.take(out, w.rs.Slice(int(span[0]), int(span[1])), r.kinds, r.tier)
}

// filterUnless is kinds, the filter of a group of the kinds group, or 0 (no filter) when kinds is
// all of them and no zone is asked.
func filterUnless(kinds, group uint8, zone string) uint8 {
	if kinds == group && zone == "" {
		return 0
	}
	return kinds
}

// zoneGroup returns the local records in zone (ignoring case), in answer order.
func zoneGroup(p *localPlaces, zone string) []*Record {
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

// take appends to out, until it holds w.limit, the records of rs of the kinds kinds (0: any) that
// w.keep admits, with tier t.
func (w *nearestWalk) take(out []Record, rs Records, kinds uint8, t uint8) []Record {
	for p := range rs.Parts() {
		for k := range p {
			if w.full(out, t) {
				return out
			}
			out = w.add(out, &p[k], kinds, t)
		}
	}
	return out
}

// takeList is take over the records of list.
func (w *nearestWalk) takeList(out []Record, list []*Record, kinds uint8, t uint8) []Record {
	for _, r := range list {
		if w.full(out, t) {
			break
		}
		out = w.add(out, r, kinds, t)
	}
	return out
}

// add appends r, with tier t, to out if it is of the kinds kinds (0: any; a local record), in the
// zone asked and admitted by w.keep.
func (w *nearestWalk) add(out []Record, r *Record, kinds uint8, t uint8) []Record {
	if kinds != 0 && (kinds&w.localKind(r) == 0 || w.zone != "" && (r.Local == nil || !strings.EqualFold(r.Local.Zone, w.zone))) {
		return out
	}
	if w.keep != nil && !w.keep(r) {
		return out
	}
	rec := *r
	rec.Tier = t
	return append(out, rec)
}

package index

import (
	"cmp"
	"slices"
	"sync"
)

// update makes s, whose members are prev's, from prev and the slices that changed since: the
// records of slices that went and of endpoints that changed are found and dropped, the new ones
// sorted and inserted where they belong, in copies of the parts they touch; the other parts are
// shared with prev. A slice that replaced one of the same endpoints (an EndpointSlice update:
// hostnames and addresses in the same order, some conditions changed) contributes only the
// endpoints that changed: its others' records are equal and stay (they point at their parts'
// own copies of their endpoints). When a member's per-pod mirrors changed (gens, read before
// them), the records whose gateway state changed are made again the same way. It returns false
// when a full rebuild is due: the changes hold a quarter of the records, the service is no
// longer big, or an endpoint is in it twice.
func (t *Topology) update(prev, s *Service, slicesOf [][]*Slice, src Source, gens []uint64) bool {
	mg := newMerge(t, prev, s, src)
	defer mg.put()
	mg.readLiveness(gens)
	mg.classify(slicesOf, gens)
	mg.pair()
	mg.recheckGateways()
	mg.release()
	// A merge as costly as a full rebuild, or one that leaves the service below incrementalMin.
	if n := mg.all.Len(); (mg.changed+mg.gone)*4 > n || n+mg.changed-mg.gone < incrementalMin {
		return false
	}
	// A record to drop that prev has not: never seen (a big service has each endpoint of its
	// slices once), but a full rebuild is right whatever prev holds.
	if !mg.drop() {
		return false
	}
	mg.insert()
	mg.place()
	// A new slice brought a copy of an endpoint: a service with copies is built whole (parts hold
	// each endpoint once; the build keeps one copy, see dedupe).
	if mg.copies() {
		return false
	}
	s.relocate(t, prev, mg.dels, mg.fresh)
	mg.warnHosts()
	return true
}

// merge is one update under way: what it merges, what its phases found, and their working memory.
type merge struct {
	t             *Topology
	prev, s       *Service
	src           Source
	old, inc      *incremental // prev's and s's
	all           Records      // prev's
	regated       bool         // some member's per-pod mirrors changed
	changed, gone int          // records added, and dropped
	scratch
}

// scratch is an update's working memory, kept for the next update: a big service's update runs
// cold (its records were last touched a change ago), and there a fresh allocation tends to take
// the allocator's slow path. Only what the new service keeps is allocated.
type scratch struct {
	builders []recordBuilder // by member; made first for those whose per-pod mirrors changed
	fate     []uint8         // by old ordinal: dropped unless kept or renewed
	adds     []added
	renewals []*renewal // by old ordinal
	free     []uint32   // ordinals of no slice, for new ones
	origins  []Origin   // each member's cluster, for the search
	tiers    []uint8    // each member's
	dels     []int      // the indexes in prev's records of those that go, sorted
	fresh    []Record   // the new records, sorted
	pos, at  []int      // by new record: before which of prev's it goes, and where it went
}

var merges = sync.Pool{New: func() any { return new(merge) }}

// newMerge starts the update of s from prev, taking its working memory from the pool.
func newMerge(t *Topology, prev, s *Service, src Source) *merge {
	mg := merges.Get().(*merge)
	mg.t, mg.prev, mg.s, mg.src, mg.old, mg.all = t, prev, s, src, prev.inc, prev.Records()
	return mg
}

// put returns mg to the pool, holding no pointer into services or slices.
func (mg *merge) put() {
	sc := &mg.scratch
	sc.builders, sc.adds, sc.renewals = scrub(sc.builders), scrub(sc.adds), scrub(sc.renewals)
	sc.origins, sc.fresh = scrub(sc.origins), scrub(sc.fresh)
	*mg = merge{scratch: *sc}
	merges.Put(mg)
}

// reuse returns a with n zero elements (and room to append), allocated only when a has no room.
func reuse[T any](a []T, n int) []T {
	if cap(a) < n {
		return make([]T, n, max(n, 2*cap(a)))
	}
	a = a[:n]
	clear(a)
	return a
}

// scrub zeroes a's whole capacity, so that it holds no pointer, and drops one that a rare big
// update grew past what updates need.
func scrub[T any](a []T) []T {
	if cap(a) > 4096 {
		return nil
	}
	clear(a[:cap(a)])
	return a
}

// readLiveness reads, once, the liveness of the members whose per-pod mirrors changed (gens,
// against old's), for the records to compare and the new ones.
func (mg *merge) readLiveness(gens []uint64) {
	mg.builders = reuse(mg.builders, len(mg.s.Members))
	for i, m := range mg.s.Members {
		if gens[i] != mg.old.gens[i] {
			mg.builders[i], mg.regated = mg.t.recordsOf(m, mg.src), true
		}
	}
}

// classify finds each member's slices among old's: one old had is kept (its records stay), another
// is added. The new service's incremental starts as old's.
func (mg *merge) classify(slicesOf [][]*Slice, gens []uint64) {
	old, s := mg.old, mg.s
	fate := reuse(mg.fate, len(old.slices))
	adds := reuse(mg.adds, 0)
	order := make([][]int32, len(slicesOf)) // the new order: -1 for a slice not placed yet
	for i, sls := range slicesOf {
		order[i] = old.match(i, sls)
		for j, sl := range sls {
			if o := order[i][j]; o >= 0 {
				fate[o] = fateKept
				if m := s.Members[i]; !m.Local() {
					mirrorPorts(m, sl, &s.Warnings) // the warnings only: its records are kept
				}
				continue
			}
			adds = append(adds, added{member: i, at: j, slice: sl})
		}
	}
	mg.fate, mg.adds = fate, adds
	mg.inc = &incremental{gens: gens, slices: slices.Clone(old.slices), owners: slices.Clone(old.owners), order: order, counts: slices.Clone(old.counts), merged: true}
}

// pair pairs each added slice (of the first maxPairings) with a slice of its member that went,
// when it renews it (see renew): then it takes over its ordinal and adds only the endpoints that
// changed.
func (mg *merge) pair() {
	old, fate := mg.old, mg.fate
	renewals := reuse(mg.renewals, len(old.slices))
	mg.renewals = renewals
	for a := range mg.adds {
		add := &mg.adds[a]
		for o, sl := range old.slices {
			if a >= maxPairings {
				break
			}
			if sl == nil || fate[o] != fateDropped || int(old.owners[o]) != add.member {
				continue
			}
			if rn := renew(sl, add.slice); rn != nil {
				fate[o], renewals[o], add.renews = fateRenewed, rn, rn
				rn.ordinal = uint32(o)
				mg.inc.slices[o] = add.slice
				mg.changed += rn.changed
				mg.gone += rn.changed
				break
			}
		}
		if add.renews == nil {
			mg.changed += len(add.slice.Endpoints)
		}
	}
}

// recheckGateways makes a record whose gateway state changed again, as if its endpoint had: its
// slice is renewed (by itself, when kept).
func (mg *merge) recheckGateways() {
	if !mg.regated {
		return
	}
	old, fate, renewals, builders := mg.old, mg.fate, mg.renewals, mg.builders
	for r := range mg.all.All() {
		o := r.slice
		rb := &builders[old.owners[o]]
		if rb.m == nil || fate[o] == fateDropped || rb.pods.of(r.Addr()) == r.Gateway {
			continue
		}
		rn := renewals[o]
		if rn == nil {
			rn = renew(old.slices[o], old.slices[o])
			rn.ordinal = o
			fate[o], renewals[o] = fateRenewed, rn
			mg.adds = append(mg.adds, added{member: int(old.owners[o]), at: -1, slice: old.slices[o], renews: rn, same: true})
		}
		if e, ok := rn.index(r.Host, r.addr); ok && !rn.differs[e] {
			rn.differs[e] = true
			rn.changed++
			mg.changed++
			mg.gone++
		}
	}
}

// release frees the ordinals of the slices that went, whose records go, for the added slices.
func (mg *merge) release() {
	inc, fate, free := mg.inc, mg.fate, reuse(mg.free, 0)
	for o, sl := range mg.old.slices {
		if sl != nil && fate[o] == fateDropped {
			mg.gone += len(sl.Endpoints)
			inc.slices[o] = nil
		}
		if inc.slices[o] == nil {
			free = append(free, uint32(o))
		}
	}
	mg.free = free
}

// drop finds the records that go, of the slices that went and of the endpoints that changed in
// renewed ones, and uncounts them. false when one is not in prev.
func (mg *merge) drop() bool {
	mg.origins, mg.tiers = reuse(mg.origins, len(mg.s.Members)), reuse(mg.tiers, len(mg.s.Members))
	for i, m := range mg.s.Members {
		mg.origins[i].Cluster = mg.t.ClusterOf(m)
		mg.tiers[i] = mg.t.Tier(mg.origins[i].Cluster)
	}
	fate, renewals := mg.fate, mg.renewals
	mg.dels = reuse(mg.dels, 0)
	for o, sl := range mg.old.slices {
		switch {
		case sl != nil && fate[o] == fateDropped:
			for e := range sl.Endpoints {
				if !mg.dropRecord(uint32(o), &sl.Endpoints[e]) {
					return false
				}
			}
		case renewals[o] != nil:
			rn := renewals[o]
			for e, d := range rn.differs {
				if d && !mg.dropRecord(uint32(o), &rn.old.Endpoints[e]) {
					return false
				}
			}
		}
	}
	slices.Sort(mg.dels)
	return true
}

// dropRecord drops the record of endpoint ep of slice ordinal o: found by its endpoint, in
// either readiness (a per-pod mirror makes a ready endpoint's record not ready, or a not-ready
// one's ready).
func (mg *merge) dropRecord(o uint32, ep *Endpoint) bool {
	m := mg.old.owners[o]
	i, r := findRecord(mg.all, int(mg.prev.ready), Record{Endpoint: ep, Origin: &mg.origins[m], Tier: mg.tiers[m]}, o)
	if r != nil {
		mg.dels = append(mg.dels, i)
		count(mg.inc.counts, mg.prev, r, -1)
	}
	return r != nil
}

// insert makes the new records: a renewed slice's of its endpoints that changed, another added
// slice's of all its endpoints, under a free ordinal or a new one.
func (mg *merge) insert() {
	s, inc, free := mg.s, mg.inc, mg.free
	fresh := reuse(mg.fresh, 0)
	for _, a := range mg.adds {
		rb := &mg.builders[a.member]
		if rb.m == nil {
			*rb = mg.t.recordsOf(s.Members[a.member], mg.src)
		}
		if a.renews != nil {
			warn := &s.Warnings
			if a.same {
				warn = new([]Warning) // made when it was found kept
			} else {
				inc.order[a.member][a.at] = int32(a.renews.ordinal)
			}
			fresh = rb.add(fresh, a.slice, a.renews.ordinal, a.renews.differs, warn)
			continue
		}
		o := uint32(len(inc.slices))
		if len(free) > 0 {
			o, free = free[0], free[1:]
			inc.slices[o], inc.owners[o] = a.slice, int32(a.member)
		} else {
			inc.slices, inc.owners = append(inc.slices, a.slice), append(inc.owners, int32(a.member))
		}
		inc.order[a.member][a.at] = int32(o)
		fresh = rb.add(fresh, a.slice, o, nil, &s.Warnings)
	}
	mg.fresh = fresh
}

// place sorts the new records, counts them, and makes s's parts: prev's without the records that
// go and with the new ones where they belong, in copies of the parts they touch.
func (mg *merge) place() {
	all, fresh := mg.all, mg.fresh
	slices.SortFunc(fresh, compareRecords)
	pos := reuse(mg.pos, len(fresh))
	for i := range fresh {
		pos[i] = all.search(0, all.Len(), func(r *Record) bool { return compareRecords(*r, fresh[i]) > 0 })
		count(mg.inc.counts, mg.prev, &fresh[i], 1)
	}
	mg.pos, mg.at = pos, reuse(mg.at, len(fresh))
	mg.inc.parts = mg.old.parts.edit(mg.dels, fresh, pos, mg.at)
	mg.s.inc = mg.inc
}

// copies reports whether a new record has a copy in s. Only a new slice can bring a copy of an
// endpoint: a renewed one lists the endpoints it replaces, whose records were dropped.
func (mg *merge) copies() bool {
	rs := mg.s.Records()
	for i := range mg.fresh {
		if o := mg.fresh[i].slice; (int(o) >= len(mg.renewals) || mg.renewals[o] == nil) && hasCopy(rs, mg.at[i]) {
			return true
		}
	}
	return false
}

// warnHosts warns of duplicate hostnames: what prev warned of, if still so, and the new ready
// records' own: a record's addresses of its family are its neighbours.
func (mg *merge) warnHosts() {
	s, rs, fresh, at := mg.s, mg.s.Records(), mg.fresh, mg.at
	for _, w := range mg.prev.Warnings {
		if w.Reason == ReasonDuplicateHost {
			s.warnIfDuplicateHost(w.cluster, w.host)
		}
	}
	for i := range fresh {
		if r := &fresh[i]; r.Ready && (at[i] > 0 && sameRun(rs.At(at[i]-1), r) || at[i]+1 < rs.Len() && sameRun(rs.At(at[i]+1), r)) {
			s.warnDuplicateHost(r.Cluster, r.Host)
		}
	}
}

// added is a slice that an update adds records of.
type added struct {
	member, at int // at: its index in its member's slices (-1: a kept one)
	slice      *Slice
	renews     *renewal
	same       bool // a kept slice, renewed for its gateway states: its warnings are made
}

// The fates of a big service's slices in an update.
const (
	fateDropped = iota
	fateKept
	fateRenewed
)

// maxPairings bounds the slices an update tries to pair with the ones they replaced: each try
// looks at every slice that went.
const maxPairings = 16

// match returns the ordinal that each of sls, member i's slices now, had in old (-1 for a slice
// it did not have). Source.Slices keeps its order, so the lists are compared from both ends: the
// slices between can only be some of those between in old, compared one by one when few.
func (old *incremental) match(i int, sls []*Slice) []int32 {
	prev, at := old.order[i], make([]int32, len(sls))
	a := 0
	for a < len(sls) && a < len(prev) && old.slices[prev[a]] == sls[a] {
		at[a] = prev[a]
		a++
	}
	b, c := len(sls), len(prev)
	for b > a && c > a && old.slices[prev[c-1]] == sls[b-1] {
		b, c = b-1, c-1
		at[b] = prev[c]
	}
	mid := prev[a:c]
	var m map[*Slice]int32
	if (b-a)*len(mid) > 64 {
		m = make(map[*Slice]int32, len(mid))
		for _, o := range mid {
			m[old.slices[o]] = o
		}
	}
	for j := a; j < b; j++ {
		at[j] = -1
		if m != nil {
			if o, ok := m[sls[j]]; ok {
				at[j] = o
			}
			continue
		}
		for _, o := range mid {
			if old.slices[o] == sls[j] {
				at[j] = o
				break
			}
		}
	}
	return at
}

// renewal is a slice that replaced one of the same endpoints, in the same order.
type renewal struct {
	old     *Slice
	ordinal uint32              // the replaced slice's, which the new one takes over
	at      map[endpointKey]int // each endpoint's index in both, made when first needed
	differs []bool              // by index: the endpoint changed (its record is made again)
	changed int                 // how many did
}

// index returns the index in both slices of the endpoint of host and addr.
func (rn *renewal) index(host string, addr [16]byte) (int, bool) {
	if rn.at == nil {
		rn.at = make(map[endpointKey]int, len(rn.old.Endpoints))
		for i := range rn.old.Endpoints {
			e := &rn.old.Endpoints[i]
			rn.at[endpointKey{e.Host, e.addr}] = i
		}
	}
	i, ok := rn.at[endpointKey{host, addr}]
	return i, ok
}

type endpointKey struct {
	host string
	addr [16]byte
}

// renew pairs next with old, the slice it replaced, when they list the same endpoints (hostname
// and address) in the same order: then only the endpoints that changed need new records. nil
// when they do not. Each endpoint is in old once, as old is a slice of a big service, which has
// no endpoint twice (see incremental.parts).
func renew(old, next *Slice) *renewal {
	if old.Family != next.Family || len(old.Endpoints) != len(next.Endpoints) || !slices.Equal(old.Ports, next.Ports) {
		return nil
	}
	rn := &renewal{old: old, differs: make([]bool, len(old.Endpoints))}
	for i := range old.Endpoints {
		a, b := &old.Endpoints[i], &next.Endpoints[i]
		if a.Host != b.Host || a.addr != b.addr || a.is4 != b.is4 {
			return nil
		}
		if !sameEndpoint(a, b) {
			rn.differs[i] = true
			rn.changed++
		}
	}
	return rn
}

// findRecord returns where in rs, a big service's records whose first ready are ready, the
// record of slice ordinal o for probe's endpoint is, and the record; -1 and nil when there is none.
// Both readinesses are searched: a mirror record's per-pod mirror decides it, not its endpoint.
func findRecord(rs Records, ready int, probe Record, o uint32) (int, *Record) {
	for _, span := range [][2]int{{0, ready}, {ready, rs.Len()}} {
		i := rs.search(span[0], span[1], func(r *Record) bool { return compareEndpoints(*r, probe) >= 0 })
		if i < span[1] {
			if r := rs.At(i); compareEndpoints(*r, probe) == 0 && r.slice == o {
				return i, r
			}
		}
	}
	return -1, nil
}

// hasCopy reports whether the record at index i of sorted rs has another copy in rs, of either
// readiness: what dedupe would drop. A copy of the same readiness is a neighbour.
func hasCopy(rs Records, i int) bool {
	n := rs.Len()
	r := rs.At(i)
	if i > 0 && compareRecords(*rs.At(i - 1), *r) == 0 || i+1 < n && compareRecords(*rs.At(i + 1), *r) == 0 {
		return true
	}
	other := !r.Ready
	j := rs.search(0, n, func(x *Record) bool { return cmp.Or(trueFirst(x.Ready, other), compareEndpoints(*x, *r)) >= 0 })
	return j < n && rs.At(j).Ready == other && compareEndpoints(*rs.At(j), *r) == 0
}

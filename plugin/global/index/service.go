package index

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Service is one global service as published in a Snapshot. It is immutable: a change builds a new one.
type Service struct {
	Key
	// Members are the accepted member Services: the local one first, then mirrors by cluster.
	Members []*Member
	// records holds every address of every member, ready or not, ordered: ready first, then IPv4
	// before IPv6, then by tier, cluster, host and address (see Records); a big one's are in
	// inc.parts instead.
	records []Record
	// Warnings lists surprising input met while building (skipped members, duplicate hostnames, ...).
	Warnings []Warning

	v4, ready int32        // Records[:v4] are the ready IPv4 records, Records[v4:ready] the IPv6 ones
	depleted  bool         // see Depleted
	clusters  []clusterRun // each member's cluster (as Members): where its ready records are
	built     int64        // when it was built, in Unix nanoseconds
	topo      *Topology    // what it was built with
	inc       *incremental // nil below incrementalMin records
}

// Built returns when the service was built: the last change of any of its objects.
func (s *Service) Built() time.Time { return time.Unix(0, s.built) }

// answers is 1 when s has a ready record, else 0 (also for nil).
func (s *Service) answers() int {
	if s == nil || s.ready == 0 {
		return 0
	}
	return 1
}

// clusterRun locates one member cluster's ready records: Records() a[0] to a[1] (IPv4), aaaa[0] to
// aaaa[1]; and has what its slices carry for mesh-aware clients. One per member of every service:
// int32 offsets (no service has 2^31 records), and the cluster's name is its member's (see
// clusterName).
type clusterRun struct {
	a, aaaa     [2]int32
	annotations *Annotations // the first of the member's slices' (see annotate); nil: none
}

// clusterName returns the name of the cluster of s.clusters[i].
func (s *Service) clusterName(i int) string { return s.topo.ClusterOf(s.Members[i]) }

// Records returns every address of every member, ready or not, ordered: ready first, then IPv4
// before IPv6, then by tier, cluster, host and address. Views are runs of it.
func (s *Service) Records() Records {
	if s.inc != nil {
		return s.inc.parts.all()
	}
	return RecordsOf(s.records)
}

// All returns the ready records of every member.
func (s *Service) All() View { return s.view(0, int(s.v4), int(s.v4), int(s.ready)) }

// view returns the view of records a to b (IPv4) and c to d (IPv6).
func (s *Service) view(a, b, c, d int) View {
	if s.inc != nil {
		ps := s.inc.parts
		return View{A: ps.slice(0, a, b).Flat(), AAAA: ps.slice(0, c, d).Flat()}
	}
	return View{A: s.records[a:b:b], AAAA: s.records[c:d:d]}
}

// Cluster returns the ready records of one member cluster; ok is false when no member is from it.
func (s *Service) Cluster(cluster string) (View, bool) {
	if c := s.cluster(cluster); c != nil {
		return s.view(int(c.a[0]), int(c.a[1]), int(c.aaaa[0]), int(c.aaaa[1])), true
	}
	return View{}, false
}

func (s *Service) cluster(name string) *clusterRun {
	if i := s.clusterIndex(name); i >= 0 {
		return &s.clusters[i]
	}
	return nil
}

// clusterIndex returns the index in s.clusters of cluster name; -1 when no member is from it.
func (s *Service) clusterIndex(name string) int {
	for i := range s.clusters {
		if s.clusterName(i) == name {
			return i
		}
	}
	return -1
}

// Host returns the ready records of one endpoint; ok is false when it has none. They are in
// one part of a big service: found without a copy.
func (s *Service) Host(cluster, host string) (View, bool) {
	var v View
	if c := s.cluster(cluster); c != nil {
		rs := s.Records()
		v = View{A: hostRun(rs.Slice(int(c.a[0]), int(c.a[1])), host), AAAA: hostRun(rs.Slice(int(c.aaaa[0]), int(c.aaaa[1])), host)}
	}
	return v, !v.Empty()
}

// hostRun returns the records of host in rs, one cluster's records sorted by host.
func hostRun(rs Records, host string) []Record {
	head := rs.flat
	if rs.ps != nil { // a big service's: from the part that holds them all
		i := rs.search(0, rs.Len(), func(r *Record) bool { return r.Host >= host })
		head, _ = rs.Slice(i, rs.Len()).next()
	} else {
		head = head[sort.Search(len(head), func(i int) bool { return head[i].Host >= host }):]
	}
	j := 0
	for j < len(head) && head[j].Host == host {
		j++
	}
	return head[:j:j]
}

// Warning is surprising input met while building a service: Reason is a metric label, Detail a log line.
type Warning struct {
	Reason, Detail string
	cluster, host  string // of a duplicate hostname
}

// Reasons for warnings.
const (
	ReasonClusterNameClash = "cluster_name_clash"
	ReasonDuplicateMirror  = "duplicate_mirror"
	ReasonPortMismatch     = "port_mismatch"
	ReasonDuplicateHost    = "duplicate_hostname"
	// ReasonUnnamedMirrorAddress: a headless mirror lists addresses without hostnames.
	ReasonUnnamedMirrorAddress = "mirror_address_without_hostname"
)

func warnf(ws *[]Warning, reason, format string, args ...any) {
	*ws = append(*ws, Warning{Reason: reason, Detail: fmt.Sprintf(format, args...)})
}

// Build assembles the global service k from its members and their slices; nil when it has no member.
func (t *Topology) Build(k Key, src Source) *Service { return t.Rebuild(nil, k, src) }

// Rebuild assembles the global service k again after a change; prev is what it was (nil: new).
// A big service whose members are the same is rebuilt from the slices and the per-pod mirrors
// that changed, merged into prev's sorted records (see update): a change costs what it changes,
// not the service's size.
func (t *Topology) Rebuild(prev *Service, k Key, src Source) *Service {
	s, slicesOf := t.members(k, src)
	if s == nil {
		return nil
	}
	var gens []uint64
	if prev != nil && prev.inc != nil && prev.topo == t && slices.Equal(prev.Members, s.Members) {
		w := len(s.Warnings)
		if gens = generations(s.Members, src); t.update(prev, s, slicesOf, src, gens) {
			s.finish(slicesOf)
			return s
		}
		s.Warnings = s.Warnings[:w] // made again by build
	}
	t.build(s, slicesOf, src, gens)
	s.finish(slicesOf)
	return s
}

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
	if s.Members = t.acceptMembers(members, &s.Warnings); len(s.Members) == 0 {
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
			gated := *ep
			gated.Ready, gated.Serving = up, up
			r.Endpoint = &gated
		}
		rs = append(rs, r)
	}
	return rs
}

// incrementalMin is the number of records from which a service keeps what an incremental
// rebuild needs: below it a full rebuild takes microseconds.
const incrementalMin = 256

// incremental is what a big service keeps so that a change to a few of its slices is merged into
// its records instead of sorting them all again.
type incremental struct {
	gens   []uint64        // Source.PodMirrorGeneration of each member, read before its per-pod mirrors
	slices []*Slice        // by ordinal (Record.slice); nil: free
	owners []int32         // by ordinal: the index in Members of the slice's member
	order  [][]int32       // by member: the ordinals of its slices, in the order Source.Slices gave them
	parts  *parts          // the records (no endpoint twice: a service with copies is not incremental)
	counts []clusterCounts // Records by member cluster (as clusters) and state, for health
	merged bool            // built by update, not whole (for tests)
}

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
	old := prev.inc
	sc := scratches.Get().(*scratch)
	defer sc.put()
	// Members whose per-pod mirrors changed: their liveness, read once, for the records to compare
	// and the new ones.
	builders := sc.builders.make(len(s.Members))
	regated := false
	for i, m := range s.Members {
		if gens[i] != old.gens[i] {
			builders[i], regated = t.recordsOf(m, src), true
		}
	}
	fate := sc.fate.make(len(old.slices)) // of each old slice: dropped unless kept or renewed
	adds := sc.adds.make(0)
	order := make([][]int32, len(slicesOf)) // the new order: -1 for a slice not placed yet
	for i, sls := range slicesOf {
		order[i] = old.match(i, sls)
		for j, sl := range sls {
			if o := order[i][j]; o >= 0 {
				fate[o] = kept
				if m := s.Members[i]; !m.Local() {
					mirrorPorts(m, sl, &s.Warnings) // the warnings only: its records are kept
				}
				continue
			}
			adds = append(adds, added{member: i, at: j, slice: sl})
		}
	}
	inc := &incremental{gens: gens, slices: slices.Clone(old.slices), owners: slices.Clone(old.owners), order: order, counts: slices.Clone(old.counts), merged: true}
	renewals := sc.renewals.make(len(old.slices))
	changed, gone := 0, 0 // records added, and dropped
	for a := range adds {
		add := &adds[a]
		for o, sl := range old.slices {
			if a >= maxPairings {
				break
			}
			if sl == nil || fate[o] != dropped || int(old.owners[o]) != add.member {
				continue
			}
			if rn := renew(sl, add.slice); rn != nil {
				fate[o], renewals[o], add.renews = renewed, rn, rn
				rn.ordinal = uint32(o)
				inc.slices[o] = add.slice
				changed += rn.changed
				gone += rn.changed
				break
			}
		}
		if add.renews == nil {
			changed += len(add.slice.Endpoints)
		}
	}
	// A record whose gateway state changed is made again, as if its endpoint had: its slice is
	// renewed (by itself, when kept).
	all := prev.Records()
	for r := range all.All() {
		if !regated {
			break
		}
		o := r.slice
		rb := &builders[old.owners[o]]
		if rb.m == nil || fate[o] == dropped || rb.pods.of(r.Addr()) == r.Gateway {
			continue
		}
		rn := renewals[o]
		if rn == nil {
			rn = renew(old.slices[o], old.slices[o])
			rn.ordinal = o
			fate[o], renewals[o] = renewed, rn
			adds = append(adds, added{member: int(old.owners[o]), at: -1, slice: old.slices[o], renews: rn, same: true})
		}
		if e, ok := rn.index(r.Host, r.addr); ok && !rn.differs[e] {
			rn.differs[e] = true
			rn.changed++
			changed++
			gone++
		}
	}
	free := sc.free.make(0)
	for o, sl := range old.slices {
		if sl != nil && fate[o] == dropped {
			gone += len(sl.Endpoints)
			inc.slices[o] = nil
		}
		if inc.slices[o] == nil {
			free = append(free, uint32(o))
		}
	}
	sc.free.keep(free)
	if (changed+gone)*4 > all.Len() || all.Len()+changed-gone < incrementalMin {
		return false
	}

	// The records that go: found by their endpoint, in either readiness (a per-pod mirror makes a
	// ready endpoint's record not ready, or a not-ready one's ready).
	origins := sc.origins.make(len(s.Members)) // each member's cluster, for the search
	tiers := sc.tiers.make(len(s.Members))
	for i, m := range s.Members {
		origins[i].Cluster = t.ClusterOf(m)
		tiers[i] = t.Tier(origins[i].Cluster)
	}
	dels := sc.dels.make(0)
	drop := func(o uint32, ep *Endpoint) bool {
		m := old.owners[o]
		i, r := findRecord(all, int(prev.ready), Record{Endpoint: ep, Origin: &origins[m], Tier: tiers[m]}, o)
		if r != nil {
			dels = append(dels, i)
			count(inc.counts, prev, r, -1)
		}
		return r != nil
	}
	for o, sl := range old.slices {
		switch {
		case sl != nil && fate[o] == dropped:
			for e := range sl.Endpoints {
				if !drop(uint32(o), &sl.Endpoints[e]) {
					return false
				}
			}
		case renewals[o] != nil:
			rn := renewals[o]
			for e, d := range rn.differs {
				if d && !drop(uint32(o), &rn.old.Endpoints[e]) {
					return false
				}
			}
		}
	}
	slices.Sort(dels)

	// The new records, sorted, and where each goes among the old.
	fresh := sc.fresh.make(0)
	for _, a := range adds {
		rb := &builders[a.member]
		if rb.m == nil {
			*rb = t.recordsOf(s.Members[a.member], src)
		}
		if a.renews != nil {
			warn := &s.Warnings
			if a.same {
				warn = new([]Warning) // made when it was found kept
			} else {
				order[a.member][a.at] = int32(a.renews.ordinal)
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
		order[a.member][a.at] = int32(o)
		fresh = rb.add(fresh, a.slice, o, nil, &s.Warnings)
	}
	slices.SortFunc(fresh, compareRecords)
	pos := sc.pos.make(len(fresh))
	for i := range fresh {
		pos[i] = all.search(0, all.Len(), func(r *Record) bool { return compareRecords(*r, fresh[i]) > 0 })
		count(inc.counts, prev, &fresh[i], 1)
	}

	sc.adds.keep(adds)
	sc.dels.keep(dels)
	sc.fresh.keep(fresh)
	// Where each new record went.
	at := sc.at.make(len(fresh))
	inc.parts = prev.inc.parts.edit(dels, fresh, pos, at)
	s.inc = inc
	rs := s.Records()
	// Only a new slice can bring a copy of an endpoint: a renewed one lists the endpoints it
	// replaces, whose records were dropped.
	for i := range fresh {
		if o := fresh[i].slice; (int(o) >= len(renewals) || renewals[o] == nil) && hasCopy(rs, at[i]) {
			return false
		}
	}
	s.relocate(t, prev, dels, fresh)
	// Hostnames: what prev warned of, if still so, and the new ready records' own: a record's
	// addresses of its family are its neighbours.
	for _, w := range prev.Warnings {
		if w.Reason == ReasonDuplicateHost {
			s.warnIfDuplicateHost(w.cluster, w.host)
		}
	}
	for i := range fresh {
		if r := &fresh[i]; r.Ready && (at[i] > 0 && sameRun(rs.At(at[i]-1), r) || at[i]+1 < rs.Len() && sameRun(rs.At(at[i]+1), r)) {
			s.warnDuplicateHost(r.Cluster, r.Host)
		}
	}
	return true
}

// added is a slice that an update adds records of.
type added struct {
	member, at int // at: its index in its member's slices (-1: a kept one)
	slice      *Slice
	renews     *renewal
	same       bool // a kept slice, renewed for its gateway states: its warnings are made
}

// scratch is an update's working memory, kept for the next update: a big service's update runs
// cold (its records were last touched a change ago), and there a fresh allocation tends to take
// the allocator's slow path. Only what the new service keeps is allocated.
type scratch struct {
	builders buffer[recordBuilder]
	fate     buffer[uint8]
	adds     buffer[added]
	renewals buffer[*renewal]
	free     buffer[uint32]
	origins  buffer[Origin]
	tiers    buffer[uint8]
	dels     buffer[int]
	fresh    buffer[Record]
	pos, at  buffer[int]
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// put returns sc to the pool, holding no pointer into services or slices.
func (sc *scratch) put() {
	sc.builders.clear()
	sc.adds.clear()
	sc.renewals.clear()
	sc.origins.clear()
	sc.fresh.clear()
	scratches.Put(sc)
}

// buffer is one array of a scratch.
type buffer[T any] struct{ a []T }

// make returns the array with n zero elements (and room to append).
func (b *buffer[T]) make(n int) []T {
	if cap(b.a) < n {
		b.a = make([]T, n, max(n, 2*cap(b.a)))
		return b.a
	}
	b.a = b.a[:n]
	clear(b.a)
	return b.a
}

// keep takes back the array after appends that may have grown it.
func (b *buffer[T]) keep(a []T) { b.a = a }

// clear zeroes the array's whole capacity, so that it holds no pointer, and drops one that a
// rare big update grew past what updates need.
func (b *buffer[T]) clear() {
	if cap(b.a) > 4096 {
		b.a = nil
		return
	}
	clear(b.a[:cap(b.a)])
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

// The fates of a big service's slices in an update.
const (
	dropped = iota
	kept
	renewed
)

// maxPairings bounds the slices an update tries to pair with the ones they replaced: each try
// looks at every slice that went.
const maxPairings = 16

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

// sameEndpoint reports whether a and b are equal, their placements compared by value.
func sameEndpoint(a, b *Endpoint) bool {
	if a.Local != b.Local && (a.Local == nil || b.Local == nil || *a.Local != *b.Local) {
		return false
	}
	x, y := *a, *b
	x.Local, y.Local = nil, nil
	return x == y
}

// warnIfDuplicateHost warns of host in cluster if it has several ready addresses of one family.
func (s *Service) warnIfDuplicateHost(cluster, host string) {
	if v, _ := s.Host(cluster, host); len(v.A) > 1 || len(v.AAAA) > 1 {
		s.warnDuplicateHost(cluster, host)
	}
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

// countRecords counts s's records by member cluster (as s.clusters) and state.
func (s *Service) countRecords() []clusterCounts {
	counts := make([]clusterCounts, len(s.clusters))
	for r := range s.Records().All() {
		count(counts, s, r, 1)
	}
	return counts
}

// count adds sign to the count, in counts (as s.clusters), of r's cluster and state.
func count(counts []clusterCounts, s *Service, r *Record, sign int) {
	if i := s.clusterIndex(r.Cluster); i >= 0 {
		counts[i].add(r, s.topo.Local, sign)
	}
}

// samePorts reports whether a and b are the same list (not only equal ones).
func samePorts(a, b []Port) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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
func (t *Topology) acceptMembers(in []*Member, warn *[]Warning) []*Member {
	ms := slices.Clone(in)
	slices.SortFunc(ms, func(a, b *Member) int {
		if c := cmp.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out := ms[:0]
	for _, m := range ms {
		switch {
		case !m.Local() && m.Cluster == t.Local:
			warnf(warn, ReasonClusterNameClash, "mirror %s/%s claims this cluster's name %q: skipped", m.Namespace, m.Name, m.Cluster)
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

// compareRecords is the order of a service's records: ready first, then IPv4 before IPv6, tier,
// cluster, host and address.
func compareRecords(a, b Record) int {
	if c := trueFirst(a.Ready, b.Ready); c != 0 {
		return c
	}
	return compareEndpoints(a, b)
}

// trueFirst orders true before false.
func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
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

// compareEndpoints is compareRecords without readiness: the order of records of one readiness.
// The sort of a big service is mostly this function: strings.Compare, not cmp.Compare (one
// comparison of the strings, not two), and records of one Origin share their cluster.
func compareEndpoints(a, b Record) int {
	if c := trueFirst(a.is4, b.is4); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Tier, b.Tier); c != 0 {
		return c
	}
	if a.Origin != b.Origin {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
	}
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	return bytes.Compare(a.addr[:], b.addr[:])
}

// locate finds the views DNS answers from in the sorted records, so queries never sort: by
// binary search, as the records are sorted by readiness, family, tier and cluster.
func (s *Service) locate(t *Topology) {
	rs := s.Records()
	ready := rs.search(0, rs.Len(), func(r *Record) bool { return !r.Ready })
	v4 := rs.search(0, ready, func(r *Record) bool { return !r.is4 })
	s.ready, s.v4 = int32(ready), int32(v4)
	s.clusters = make([]clusterRun, 0, len(s.Members))
	for _, m := range s.Members {
		c := t.ClusterOf(m)
		tier := t.Tier(c)
		s.clusters = append(s.clusters, clusterRun{a: span(rs, 0, v4, tier, c), aaaa: span(rs, v4, ready, tier, c)})
	}
}

// relocate sets s's views from prev's, which s is made from by deleting prev's records dels
// (indexes, sorted) and inserting fresh: a view's bound is where a key would go in the sorted
// records, so it moves by the deleted records before it and the inserted ones that sort before
// it. No record is read but the fresh ones: a big service's are mostly out of the cache by now.
func (s *Service) relocate(t *Topology, prev *Service, dels []int, fresh []Record) {
	shift := func(at int32, b bound) int32 {
		n := int(at) - sort.SearchInts(dels, int(at))
		for i := range fresh {
			if b.above(&fresh[i]) {
				n++
			}
		}
		return int32(n)
	}
	s.v4 = shift(prev.v4, bound{four: true, last: true})
	s.ready = shift(prev.ready, bound{last: true})
	s.clusters = slices.Clone(prev.clusters)
	for i := range s.clusters {
		c, name := &s.clusters[i], s.clusterName(i)
		b := bound{tier: t.Tier(name), cluster: name}
		for _, four := range [2]bool{true, false} {
			run := &c.aaaa
			if b.four = four; four {
				run = &c.a
			}
			b.end = false
			run[0] = shift(run[0], b)
			b.end = true
			run[1] = shift(run[1], b)
		}
	}
}

// bound is a bound of a view in a service's records: in the ready records of one family, at the
// start or the end of the run of one cluster (of tier), or after them all (last).
type bound struct {
	four    bool // IPv4, else IPv6
	tier    uint8
	cluster string
	end     bool
	last    bool
}

// above reports whether r sorts before b.
func (b bound) above(r *Record) bool {
	switch {
	case !r.Ready:
		return false
	case r.is4 != b.four:
		return r.is4 // every ready IPv4 record sorts before the IPv6 ones
	case b.last:
		return true
	}
	k := cmp.Or(cmp.Compare(r.Tier, b.tier), strings.Compare(r.Cluster, b.cluster))
	return k < 0 || b.end && k == 0
}

// warnDuplicateHosts warns of each endpoint in v that has several addresses of one family.
func (s *Service) warnDuplicateHosts(v View) {
	for t := range v.Targets() {
		if len(t.A) > 1 || len(t.AAAA) > 1 {
			s.warnDuplicateHost(t.Cluster, t.Host)
		}
	}
}

func (s *Service) warnDuplicateHost(cluster, host string) {
	w := Warning{ReasonDuplicateHost, fmt.Sprintf("cluster %q has several endpoints with hostname %q: its per-pod name answers all of them", cluster, host), cluster, host}
	if !slices.Contains(s.Warnings, w) {
		s.Warnings = append(s.Warnings, w)
	}
}

// span returns where the records of cluster (of tier tier) are in rs[from:to], one family's
// ready records.
func span(rs Records, from, to int, tier uint8, cluster string) [2]int32 {
	at := func(r *Record) int { return cmp.Or(cmp.Compare(r.Tier, tier), strings.Compare(r.Cluster, cluster)) }
	i := rs.search(from, to, func(r *Record) bool { return at(r) >= 0 })
	j := rs.search(i, to, func(r *Record) bool { return at(r) > 0 })
	return [2]int32{int32(i), int32(j)}
}

package index

import (
	"cmp"
	"context"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globaldns/global/plugin/global/telemetry"
)

// Snapshot is an immutable view of every global service. Readers load it once per query and
// never lock. Its services are in a trie of their names' hashes, 16 ways at each level, whose
// leaves hold at most leafMax names: publishing a change copies the branches on the name's path
// (log16 of the number of names, at 16 pointers each) and one leaf of leafMax names at most, not
// every service, however many there are.
type Snapshot struct {
	root       *trieNode
	len        int            // global services
	namespaces map[string]int // namespace -> number of global services in it that answer
	ownsNS     bool           // namespaces is this snapshot's own copy (while it is being made)
	// Serial changes whenever the snapshot does (seconds since the epoch, strictly increasing).
	Serial uint32
	// Published is when the snapshot replaced the previous one.
	Published time.Time
	clusters  map[string]ClusterRecords // member clusters' counts, as published
}

// Clusters returns the counts of each member cluster of the snapshot's global services. Shared:
// do not change.
func (s *Snapshot) Clusters() map[string]ClusterRecords { return s.clusters }

// trieNode is a branch, whose kids are by the next 4 bits of a name's hash (nil: no name there), or
// a leaf of names (kids nil).
type trieNode struct {
	kids *[fanout]*trieNode
	leaf shard
}

const (
	fanout = 16
	// leafMax is the most names a leaf holds before it splits into a branch: a change copies one
	// leaf, and a lookup searches one.
	leafMax = 16
	// depthMax is the deepest a name's 64-bit hash reaches; a leaf there holds what it must.
	depthMax = 64 / 4
)

// shard is a leaf's global services, by name, sorted by their names' hashes: a change copies it
// (one memmove of 32 bytes a name, no rehashing), and the leaves are most of the snapshot's own
// memory (a map of a few names is several times their size). The hash is kept beside the services
// so a search compares numbers in the leaf, and reads a name (its service's, elsewhere in memory)
// only to confirm: with 100,000 names, comparing strings missed the cache at every step.
type shard []entry

// entry is the global services of one name: one per namespace, sorted by namespace, never none.
// Its name is theirs, not stored again, and the services are found in one step, not through a
// separate table of namespaces.
type entry struct {
	hash     uint64
	services []*Service
}

func (e *entry) name() string { return e.services[0].Name }

// find returns where name, of hash h, is or would be in sh.
func (sh shard) find(name string, h uint64) (int, bool) {
	i, _ := slices.BinarySearchFunc(sh, h, func(e entry, h uint64) int { return cmp.Compare(e.hash, h) })
	for ; i < len(sh) && sh[i].hash == h; i++ { // names whose hashes are equal, in any order
		if sh[i].name() == name {
			return i, true
		}
	}
	return i, false
}

var nameSeed = maphash.MakeSeed()

func hashOf(name string) uint64 { return maphash.String(nameSeed, name) }

// kid is where the names of hash h go below a branch at depth.
func kid(h uint64, depth int) int { return int(h >> (4 * depth) % fanout) }

// Named returns the global services called name, one per namespace, sorted by namespace. Shared:
// do not change.
func (s *Snapshot) Named(name string) []*Service {
	n, h := s.root, hashOf(name)
	for depth := 0; n != nil && n.kids != nil; depth++ {
		n = n.kids[kid(h, depth)]
	}
	if n == nil {
		return nil
	}
	if at, ok := n.leaf.find(name, h); ok {
		return n.leaf[at].services
	}
	return nil
}

// Service returns the global service k, or nil.
func (s *Snapshot) Service(k Key) *Service {
	for _, svc := range s.Named(k.Name) {
		if svc.Namespace == k.Namespace {
			return svc
		}
	}
	return nil
}

// Namespaces returns the namespaces of svcs, the services of one name from Named: sorted.
func Namespaces(svcs []*Service) []string {
	var out []string
	for _, svc := range svcs {
		out = append(out, svc.Namespace)
	}
	return out
}

// HasNamespace reports whether namespace ns has at least one global service that answers (has a
// ready record): <ns>.<zone> exists only then (RFC 8020: nothing below a name that does not exist).
func (s *Snapshot) HasNamespace(ns string) bool { return s.namespaces[ns] > 0 }

// Answers reports whether any global service has a ready record.
func (s *Snapshot) Answers() bool { return len(s.namespaces) > 0 }

// Len returns the number of global services.
func (s *Snapshot) Len() int { return s.len }

// Keys returns every global service's key, in no particular order.
func (s *Snapshot) Keys() []Key {
	out := make([]Key, 0, s.len)
	s.root.leaves(func(leaf shard) {
		for _, e := range leaf {
			for _, svc := range e.services {
				out = append(out, svc.Key)
			}
		}
	})
	return out
}

// leaves calls f with every leaf below n.
func (n *trieNode) leaves(f func(shard)) {
	switch {
	case n == nil:
	case n.kids != nil:
		for _, k := range n.kids {
			k.leaves(f)
		}
	default:
		f(n.leaf)
	}
}

func emptySnapshot() *Snapshot { return &Snapshot{namespaces: map[string]int{}} }

// Index maintains the Snapshot. Watch events mark global services dirty with Changed; one
// publisher rebuilds the dirty ones from the Source and swaps in a new snapshot. Events that arrive
// while it works are coalesced into the next round.
type Index struct {
	topo atomic.Pointer[Topology]
	src  Source
	snap atomic.Pointer[Snapshot]

	mu       sync.Mutex
	dirty    map[Key]time.Time // first unpublished event per key
	pending  time.Time         // the oldest event in dirty
	inFlight time.Time         // the oldest event of the publication in progress, if any
	started  bool              // the watcher has delivered the initial state
	wake     chan struct{}
	ready    atomic.Bool
	synced   chan struct{} // closed when ready turns true

	pubMu   sync.Mutex // one publisher at a time
	records health     // records per member cluster and state, for metrics and logs
	subs    []func(Key)
}

// New returns an empty index that builds global services from src, ranked by topo.
func New(topo *Topology, src Source) *Index {
	ix := &Index{src: src, dirty: map[Key]time.Time{}, wake: make(chan struct{}, 1), synced: make(chan struct{}), records: newHealth()}
	ix.topo.Store(topo)
	ix.snap.Store(emptySnapshot())
	telemetry.Synced.Set(0)
	return ix
}

// Topology returns the topology the index ranks clusters by now.
func (ix *Index) Topology() *Topology { return ix.topo.Load() }

// SetTopology ranks clusters by topo from now on: every global service is built again with it (a
// service's tiers, the cluster names of its local records, its zones all follow), and every one
// the source has members of, published or not: a member the old topology refused (a mirror of a
// cluster no Link named yet) may be one now. Nothing happens when topo equals the current one.
func (ix *Index) SetTopology(topo *Topology) {
	if ix.topo.Load().Equal(topo) {
		return
	}
	ix.topo.Store(topo)
	keys := append(ix.snap.Load().Keys(), ix.src.Services()...)
	now := time.Now()
	ix.mu.Lock()
	for _, k := range keys {
		ix.markLocked(k, now)
	}
	ix.mu.Unlock()
	ix.signal()
}

// Snapshot returns the current snapshot.
func (ix *Index) Snapshot() *Snapshot { return ix.snap.Load() }

// Ready reports whether the index has published the state the watcher saw at its initial sync.
func (ix *Index) Ready() bool { return ix.ready.Load() }

// Synced returns a channel closed once Ready is true.
func (ix *Index) Synced() <-chan struct{} { return ix.synced }

// Subscribe registers f to be called, from the publisher, with the key of every global service
// that a published snapshot changed. Call before Run.
func (ix *Index) Subscribe(f func(Key)) { ix.subs = append(ix.subs, f) }

// Changed marks global service k as needing a rebuild. Safe for concurrent use; cheap.
func (ix *Index) Changed(k Key) {
	now := time.Now()
	ix.mu.Lock()
	ix.markLocked(k, now)
	ix.mu.Unlock()
	ix.signal()
}

// markLocked records k's first unpublished event, at now. ix.mu is held.
func (ix *Index) markLocked(k Key, now time.Time) {
	if _, ok := ix.dirty[k]; ok {
		return
	}
	if len(ix.dirty) == 0 {
		ix.pending = now
		if ix.inFlight.IsZero() { // else the publication in progress holds older events
			telemetry.UnpublishedChange.Set(seconds(now))
		}
	}
	ix.dirty[k] = now
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Start tells the index that the watcher's caches hold the initial state; the next publication
// makes the index Ready. Before Start nothing is built: the initial lists are built once, in bulk.
func (ix *Index) Start() {
	ix.mu.Lock()
	ix.started = true
	ix.mu.Unlock()
	ix.signal()
}

func (ix *Index) signal() {
	select {
	case ix.wake <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is done.
func (ix *Index) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ix.wake:
			ix.Publish()
		}
	}
}

// Publish rebuilds every dirty global service and publishes the result. Run calls it; tests may
// call it directly to publish synchronously.
func (ix *Index) Publish() {
	ix.pubMu.Lock()
	defer ix.pubMu.Unlock()

	ix.mu.Lock()
	if !ix.started {
		ix.mu.Unlock()
		return
	}
	dirty := ix.dirty
	ix.dirty = map[Key]time.Time{}
	if len(dirty) > 0 {
		ix.inFlight = ix.pending
	}
	ix.mu.Unlock()

	if len(dirty) > 0 {
		ix.publishDirty(dirty)
		ix.mu.Lock()
		ix.inFlight = time.Time{}
		if len(ix.dirty) == 0 {
			telemetry.UnpublishedChange.Set(0)
		} else {
			telemetry.UnpublishedChange.Set(seconds(ix.pending))
		}
		ix.mu.Unlock()
	}
	if !ix.ready.Swap(true) {
		telemetry.Synced.Set(1)
		close(ix.synced)
	}
}

// publishDirty builds the next snapshot from the last with the dirty global services rebuilt,
// stores it, and tells the subscribers which changed.
func (ix *Index) publishDirty(dirty map[Key]time.Time) {
	old := ix.snap.Load()
	next := &Snapshot{
		root:       old.root, // shared until changed
		len:        old.len,
		namespaces: old.namespaces, // likewise
		Serial:     max(old.Serial+1, uint32(time.Now().Unix())),
		Published:  time.Now(),
	}
	changed := make([]Key, 0, len(dirty))
	topo := ix.topo.Load()
	for k := range dirty {
		prev := old.Service(k)
		svc := topo.Rebuild(prev, k, ix.src)
		if prev == nil && svc == nil {
			continue
		}
		changed = append(changed, k)
		next.set(old, k, prev, svc)
		ix.account(prev, svc)
	}
	next.clusters = ix.records.snapshot()
	ix.snap.Store(next)
	ix.records.report(topo)

	now := time.Now()
	for _, t := range dirty {
		telemetry.ProgrammingDuration.Observe(now.Sub(t).Seconds())
	}
	telemetry.Services.Set(float64(next.len))
	for _, k := range changed {
		for _, f := range ix.subs {
			f(k)
		}
	}
}

// set replaces prev with svc (nil: removed) under k in s, which is being made from old: copy on
// write, the nodes on k's path and the namespaces map are copied once per publication (a node
// that is still old's at the same place has not been copied yet; one made in this publication
// is s's own).
func (s *Snapshot) set(old *Snapshot, k Key, prev, svc *Service) {
	h := hashOf(k.Name)
	at, depth := s.path(old, h)
	leaf := *at
	e, had := leaf.leaf.find(k.Name, h)

	var svcs []*Service
	if had {
		svcs = leaf.leaf[e].services
	}
	i, found := slices.BinarySearchFunc(svcs, k.Namespace, func(s *Service, ns string) int { return strings.Compare(s.Namespace, ns) })
	switch {
	case svc == nil:
		s.len--
		svcs = slices.Delete(slices.Clone(svcs), i, i+1)
	case !found:
		s.len++
		svcs = slices.Insert(slices.Clone(svcs), i, svc)
	default:
		svcs = slices.Clone(svcs)
		svcs[i] = svc
	}
	switch {
	case len(svcs) == 0:
		leaf.leaf = slices.Delete(leaf.leaf, e, e+1)
		if len(leaf.leaf) == 0 {
			*at = nil
		}
	case had:
		leaf.leaf[e].services = svcs
	default:
		leaf.leaf = slices.Insert(leaf.leaf, e, entry{h, svcs})
		if len(leaf.leaf) > leafMax && depth < depthMax {
			*at = leaf.split(depth)
		}
	}

	if d := svc.answers() - prev.answers(); d != 0 {
		if !s.ownsNS {
			s.namespaces, s.ownsNS = maps.Clone(old.namespaces), true
		}
		if s.namespaces[k.Namespace] += d; s.namespaces[k.Namespace] <= 0 {
			delete(s.namespaces, k.Namespace)
		}
	}
}

// path makes s's nodes on the path of hash h its own, copying those still old's, down to the leaf
// (made when there is none): it returns where the leaf hangs, and its depth.
func (s *Snapshot) path(old *Snapshot, h uint64) (at **trieNode, depth int) {
	at, was := &s.root, old.root
	for {
		n := *at
		switch {
		case n == nil:
			n = &trieNode{}
		case n == was:
			n = n.copy()
		}
		*at = n
		if n.kids == nil {
			return at, depth
		}
		if was != nil && was.kids != nil {
			was = was.kids[kid(h, depth)]
		} else {
			was = nil
		}
		at = &n.kids[kid(h, depth)]
		depth++
	}
}

// copy returns a copy of n to change: a leaf with room for one more name (a snapshot lives long).
func (n *trieNode) copy() *trieNode {
	if n.kids != nil {
		return newBranch(n.kids)
	}
	leaf := make(shard, len(n.leaf), len(n.leaf)+1)
	copy(leaf, n.leaf)
	return &trieNode{leaf: leaf}
}

// newBranch returns a branch of kids (nil: none yet), node and kids in one allocation.
func newBranch(kids *[fanout]*trieNode) *trieNode {
	b := new(struct {
		n    trieNode
		kids [fanout]*trieNode
	})
	if kids != nil {
		b.kids = *kids
	}
	b.n.kids = &b.kids
	return &b.n
}

// split makes leaf n, at depth, a branch of leaves, each name in the kid of its hash's next bits.
func (n *trieNode) split(depth int) *trieNode {
	b := newBranch(nil)
	for _, e := range n.leaf { // in order: each new leaf is sorted too
		k := &b.kids[kid(e.hash, depth)]
		if *k == nil {
			*k = &trieNode{}
		}
		(*k).leaf = append((*k).leaf, e)
	}
	return b
}

// account updates the per-cluster record counts and logs the warnings svc has that prev had not,
// so a surprising object is reported once, not on every rebuild.
func (ix *Index) account(prev, svc *Service) {
	ix.records.add(prev, -1)
	ix.records.add(svc, 1)
	if svc == nil {
		return
	}
	for _, w := range svc.Warnings {
		if prev == nil || !slices.Contains(prev.Warnings, w) {
			telemetry.Log.Warningf("%s: %s", svc.Key, w.Detail)
			telemetry.Skipped.WithLabelValues(w.Reason).Inc()
		}
	}
}

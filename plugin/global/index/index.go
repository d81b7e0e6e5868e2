package index

import (
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
// never lock. Its services are sharded by name in a three-level tree of 4,096 shards, so that
// publishing a change copies three branches of pointers and one shard of about N/4,096 names, not
// every service: up to a million global services, the cost of a change does not grow with their
// number.
type Snapshot struct {
	root       *branch[*branch[*branch[*shard]]]
	len        int            // global services
	namespaces map[string]int // namespace -> number of global services in it that answer
	ownsNS     bool           // namespaces is this snapshot's own copy (while it is being made)
	// Serial changes whenever the snapshot does (seconds since the epoch, strictly increasing).
	Serial uint32
	// Published is when the snapshot replaced the previous one.
	Published time.Time
}

// fanout is the width of each level: fanout³ = 4,096 shards, about 25 names each at 100,000.
const fanout = 16

type branch[T any] [fanout]T

// shard holds the global services whose names hash to it, sorted by name: not a map, as a change
// copies the shard on its path (one memmove of 24 bytes a name, no rehashing) and the shards are
// most of the snapshot's own memory (a map of a few names is several times their size).
type shard []entry

type entry struct {
	name string
	*named
}

// find returns where name is, or would be, in sh.
func (sh shard) find(name string) (int, bool) {
	return slices.BinarySearchFunc(sh, name, func(e entry, name string) int { return strings.Compare(e.name, name) })
}

// named is the global services of one name: one per namespace, sorted by namespace. Immutable.
type named struct {
	namespaces []string
	services   []*Service
}

var shardSeed = maphash.MakeSeed()

// path returns where the services called name are: the shard at root[i][j][k].
func path(name string) (i, j, k uint64) {
	h := maphash.String(shardSeed, name)
	return h % fanout, h / fanout % fanout, h / (fanout * fanout) % fanout
}

func (s *Snapshot) named(name string) *named {
	i, j, k := path(name)
	sh := *s.root[i][j][k]
	if at, ok := sh.find(name); ok {
		return sh[at].named
	}
	return nil
}

// Service returns the global service k, or nil.
func (s *Snapshot) Service(k Key) *Service {
	n := s.named(k.Name)
	if n == nil {
		return nil
	}
	for i, ns := range n.namespaces {
		if ns == k.Namespace {
			return n.services[i]
		}
	}
	return nil
}

// Namespaces returns the namespaces, sorted, that have a global service called name.
func (s *Snapshot) Namespaces(name string) []string {
	if n := s.named(name); n != nil {
		return n.namespaces
	}
	return nil
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
	for _, b := range s.root {
		for _, bb := range b {
			for _, sh := range bb {
				for _, e := range *sh {
					for _, ns := range e.namespaces {
						out = append(out, Key{Namespace: ns, Name: e.name})
					}
				}
			}
		}
	}
	return out
}

func emptySnapshot() *Snapshot {
	// Every branch and shard is shared until a change copies it: an empty snapshot is 4 objects.
	var leaf branch[*shard]
	empty := shard{}
	for i := range leaf {
		leaf[i] = &empty
	}
	var mid branch[*branch[*shard]]
	for i := range mid {
		mid[i] = &leaf
	}
	var root branch[*branch[*branch[*shard]]]
	for i := range root {
		root[i] = &mid
	}
	return &Snapshot{root: &root, namespaces: map[string]int{}}
}

// Index maintains the Snapshot. Watch events mark global services dirty with Changed; one
// publisher rebuilds the dirty ones from the Source and swaps in a new snapshot. Events that arrive
// while it works are coalesced into the next round.
type Index struct {
	topo *Topology
	src  Source
	snap atomic.Pointer[Snapshot]

	mu      sync.Mutex
	dirty   map[Key]time.Time // first unpublished event per key
	started bool              // the watcher has delivered the initial state
	wake    chan struct{}
	ready   atomic.Bool
	synced  chan struct{} // closed when ready turns true

	pubMu   sync.Mutex // one publisher at a time
	records health     // records per member cluster and state, for metrics and logs
	subs    []func(Key)
}

// New returns an empty index that builds global services from src, ranked by topo.
func New(topo *Topology, src Source) *Index {
	ix := &Index{topo: topo, src: src, dirty: map[Key]time.Time{}, wake: make(chan struct{}, 1), synced: make(chan struct{}), records: newHealth(topo)}
	ix.snap.Store(emptySnapshot())
	return ix
}

// Topology returns the topology the index ranks clusters by.
func (ix *Index) Topology() *Topology { return ix.topo }

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
	if _, ok := ix.dirty[k]; !ok {
		ix.dirty[k] = now
	}
	ix.mu.Unlock()
	ix.signal()
}

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
	ix.mu.Unlock()

	if len(dirty) > 0 {
		ix.publish(dirty)
	}
	if !ix.ready.Swap(true) {
		close(ix.synced)
	}
}

func (ix *Index) publish(dirty map[Key]time.Time) {
	old := ix.snap.Load()
	next := &Snapshot{
		root:       old.root, // shared until changed
		len:        old.len,
		namespaces: old.namespaces, // likewise
		Serial:     max(old.Serial+1, uint32(time.Now().Unix())),
		Published:  time.Now(),
	}
	changed := make([]Key, 0, len(dirty))
	for k := range dirty {
		prev := old.Service(k)
		svc := ix.topo.Rebuild(prev, k, ix.src)
		if prev == nil && svc == nil {
			continue
		}
		changed = append(changed, k)
		next.set(old, k, prev, svc)
		ix.account(prev, svc)
	}
	ix.snap.Store(next)
	ix.records.report()

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
// write, the branches and the shard on k's path and the namespaces map are copied once per
// publication (what is still old's has not been copied yet).
func (s *Snapshot) set(old *Snapshot, k Key, prev, svc *Service) {
	i, j, l := path(k.Name)
	if s.root == old.root {
		r := *s.root
		s.root = &r
	}
	if s.root[i] == old.root[i] {
		b := *s.root[i]
		s.root[i] = &b
	}
	if s.root[i][j] == old.root[i][j] {
		b := *s.root[i][j]
		s.root[i][j] = &b
	}
	if s.root[i][j][l] == old.root[i][j][l] {
		o := *old.root[i][j][l]
		sh := make(shard, len(o), len(o)+1) // exactly, or one more: a snapshot lives long
		copy(sh, o)
		s.root[i][j][l] = &sh
	}
	sh := s.root[i][j][l]
	e, had := sh.find(k.Name)

	n := named{}
	if had {
		n = *(*sh)[e].named
	}
	at, found := slices.BinarySearch(n.namespaces, k.Namespace)
	switch {
	case svc == nil:
		s.len--
		n.namespaces, n.services = slices.Delete(slices.Clone(n.namespaces), at, at+1), slices.Delete(slices.Clone(n.services), at, at+1)
	case !found:
		s.len++
		n.namespaces, n.services = slices.Insert(slices.Clone(n.namespaces), at, k.Namespace), slices.Insert(slices.Clone(n.services), at, svc)
	default:
		n.services = slices.Clone(n.services)
		n.services[at] = svc
	}
	switch {
	case len(n.namespaces) == 0:
		*sh = slices.Delete(*sh, e, e+1)
	case had:
		(*sh)[e].named = &n
	default:
		*sh = slices.Insert(*sh, e, entry{k.Name, &n})
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

package index

import (
	"context"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globaldns/global/plugin/global/telemetry"
)

// Snapshot is an immutable view of every global service. Readers load it once per query and
// never lock. Its services are sharded by name in a two-level tree, so that publishing a change
// copies a branch of pointers and one shard of about N/1024 services, not every service: up to
// hundreds of thousands of global services, the cost of a change does not grow with their number.
type Snapshot struct {
	branches   [fanout]*branch
	len        int            // global services
	namespaces map[string]int // namespace -> number of global services in it that answer
	// Serial changes whenever the snapshot does (seconds since the epoch, strictly increasing).
	Serial uint32
	// Published is when the snapshot replaced the previous one.
	Published time.Time
}

// fanout is the width of each level: fanout² = 1,024 shards, about 100 services each at 100,000
// (more would cost memory at 10,000: each shard has two maps).
const fanout = 32

type branch [fanout]*shard

// shard holds the global services whose names hash to it.
type shard struct {
	services map[Key]*Service
	names    map[string][]string // service name -> namespaces that have it, sorted
}

var shardSeed = maphash.MakeSeed()

// shardOf returns where the services called name are: branch i, shard j.
func shardOf(name string) (i, j uint64) {
	h := maphash.String(shardSeed, name)
	return h % fanout, h / fanout % fanout
}

func (s *Snapshot) shard(name string) *shard {
	i, j := shardOf(name)
	return s.branches[i][j]
}

// Service returns the global service k, or nil.
func (s *Snapshot) Service(k Key) *Service { return s.shard(k.Name).services[k] }

// Namespaces returns the namespaces, sorted, that have a global service called name.
func (s *Snapshot) Namespaces(name string) []string { return s.shard(name).names[name] }

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
	for _, b := range s.branches {
		for _, sh := range b {
			for k := range sh.services {
				out = append(out, k)
			}
		}
	}
	return out
}

func emptySnapshot() *Snapshot {
	s := &Snapshot{namespaces: map[string]int{}}
	empty := &shard{services: map[Key]*Service{}, names: map[string][]string{}} // copied before any change
	for i := range s.branches {
		b := &branch{}
		for j := range b {
			b[j] = empty
		}
		s.branches[i] = b
	}
	return s
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
		branches:   old.branches, // shared until changed
		len:        old.len,
		namespaces: maps.Clone(old.namespaces),
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
		// Copy on write: the branch and the shard this publication changes, once each (what is
		// still the old snapshot's has not been copied yet).
		i, j := shardOf(k.Name)
		if next.branches[i] == old.branches[i] {
			b := *next.branches[i]
			next.branches[i] = &b
		}
		if sh := next.branches[i][j]; sh == old.branches[i][j] {
			next.branches[i][j] = &shard{services: maps.Clone(sh.services), names: maps.Clone(sh.names)}
		}
		next.set(k, prev, svc)
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

// set replaces prev with svc (nil: removed) under k, in a shard and namespaces map s copied for
// this change; the slices in names are shared with older snapshots, so they are copied before
// they change.
func (s *Snapshot) set(k Key, prev, svc *Service) {
	sh := s.shard(k.Name)
	switch {
	case svc == nil:
		s.len--
		delete(sh.services, k)
		sh.names[k.Name] = slices.DeleteFunc(slices.Clone(sh.names[k.Name]), func(ns string) bool { return ns == k.Namespace })
		if len(sh.names[k.Name]) == 0 {
			delete(sh.names, k.Name)
		}
	case prev == nil:
		s.len++
		sh.services[k] = svc
		ns := slices.Clone(sh.names[k.Name])
		i, _ := slices.BinarySearch(ns, k.Namespace)
		sh.names[k.Name] = slices.Insert(ns, i, k.Namespace)
	default:
		sh.services[k] = svc
	}
	if d := svc.answers() - prev.answers(); d != 0 {
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

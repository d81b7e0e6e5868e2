package writer

import (
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// tracker is the stale-cache guard of Kubernetes' EndpointSlice controllers: it remembers every
// slice we wrote until the informer shows the write, so a sync never acts on a cache that lacks
// our own last write (it would rewrite, or fail on, what we just wrote). It is not
// k8s.io/endpointslice's EndpointSliceTracker: that one groups slices by their service-name label,
// while a global service's slices may belong to two Services at once (an old service_suffix's being
// deleted), and it waits for an echo forever, where a lost one must not block a service (echoTimeout).
type tracker struct {
	mu      sync.Mutex
	pending map[string]write // namespace/name
	now     func() time.Time
}

// write is one of our writes not yet seen in the cache.
type write struct {
	generation int64 // deletedGeneration for a delete
	at         time.Time
}

const (
	deletedGeneration = -1
	// echoTimeout bounds how long a write waits for its echo: an echo can be lost for good (the
	// object changed and went away between two relists), and must not block its service forever.
	echoTimeout = 30 * time.Second
)

func newTracker() *tracker { return &tracker{pending: map[string]write{}, now: time.Now} }

func (t *tracker) wrote(es *discoveryv1.EndpointSlice)   { t.set(es, es.Generation) }
func (t *tracker) deleted(es *discoveryv1.EndpointSlice) { t.set(es, deletedGeneration) }

func (t *tracker) set(es *discoveryv1.EndpointSlice, gen int64) {
	t.mu.Lock()
	t.pending[es.Namespace+"/"+es.Name] = write{gen, t.now()}
	t.mu.Unlock()
}

// observe is called with every cached slice event: once the cache shows what we wrote (or
// anything newer), the slice is no longer pending.
func (t *tracker) observe(obj any, gone bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, gone = d.Obj, true
	}
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	key := es.Namespace + "/" + es.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.pending[key]; ok && (gone || (w.generation != deletedGeneration && es.Generation >= w.generation)) {
		delete(t.pending, key)
	}
}

// stale reports whether the cached slices of Service ns/svc lack a write of ours: a slice at an
// older generation, one we deleted still there, or one we created not there yet.
func (t *tracker) stale(ns, svc string, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return false
	}
	now := t.now()
	for key, w := range t.pending {
		if now.Sub(w.at) > echoTimeout {
			delete(t.pending, key)
		}
	}
	seen := make(map[string]bool, len(cached))
	for _, es := range cached {
		key := es.Namespace + "/" + es.Name
		seen[key] = true
		if w, ok := t.pending[key]; ok && (w.generation == deletedGeneration || es.Generation < w.generation) {
			return true
		}
	}
	// Our slices of svc are named <svc>-<cluster>-<family>-<i>.
	prefix := ns + "/" + svc + "-"
	for key, w := range t.pending {
		if w.generation != deletedGeneration && !seen[key] && strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

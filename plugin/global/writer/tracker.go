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
	generation      int64  // deletedGeneration for a delete
	resourceVersion string // what the write returned ("" for a delete)
	at              time.Time
}

const (
	deletedGeneration = -1
	// echoTimeout bounds how long a write waits for its echo: an echo can be lost for good (the
	// object changed and went away between two relists), and must not block its service forever.
	echoTimeout = 30 * time.Second
)

func newTracker() *tracker { return &tracker{pending: map[string]write{}, now: time.Now} }

func (t *tracker) wrote(es *discoveryv1.EndpointSlice) {
	t.set(es, write{es.Generation, es.ResourceVersion, t.now()})
}
func (t *tracker) deleted(es *discoveryv1.EndpointSlice) {
	t.set(es, write{deletedGeneration, "", t.now()})
}

func (t *tracker) set(es *discoveryv1.EndpointSlice, w write) {
	t.mu.Lock()
	t.pending[es.Namespace+"/"+es.Name] = w
	t.mu.Unlock()
}

// observe is called with every cached slice event: once the cache shows what we wrote (or
// anything newer), the slice is no longer pending. It reports whether the event is exactly the
// echo of our own write (the object at the resourceVersion the write returned, or the deletion
// we made): that needs no sync, as the object is what the sync that wrote it wanted.
func (t *tracker) observe(obj any, gone bool) (own bool) {
	tombstone := false
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, gone, tombstone = d.Obj, true, true
	}
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return false
	}
	key := es.Namespace + "/" + es.Name
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.pending[key]
	if !ok {
		return false
	}
	if gone || (w.generation != deletedGeneration && es.Generation >= w.generation) {
		delete(t.pending, key)
	}
	if w.generation == deletedGeneration {
		return gone && !tombstone // a tombstone: a relist missed what happened in between
	}
	return !gone && es.ResourceVersion == w.resourceVersion
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

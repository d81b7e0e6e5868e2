package watch

import (
	"hash/maphash"
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"k8s.io/client-go/tools/cache"
)

// The reflectors write into one objectStore, by namespace, through a reflectorStore each. What
// each kind of object keeps, and how the index reads it, is in the file named for it:
// services.go (local members and headless mirrors), endpointslices.go, podmirrors.go (Linkerd's
// per-pod mirrors and their slices).

// kind is the API kind a reflector lists: Services or EndpointSlices.
type kind uint8

const (
	kindService kind = iota
	kindSlice
)

// reflectorStore is the store one reflector writes into (cache.ReflectorStore): it converts
// each object and hands it to the objectStore, which keeps it only where the index reads it.
type reflectorStore struct {
	objects   *objectStore
	namespace string // the reflector's; "" for all
	kind      kind
	src       source
	transform func(any) (any, error)
	problems  *problemLog   // what transform reported, per object
	synced    chan struct{} // closed by the first Replace: the initial list
	once      sync.Once
}

var _ cache.TransformingStore = (*reflectorStore)(nil)

func (t *reflectorStore) convert(obj any) (object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, _ := t.transform(obj) // never fails
	x, ok := o.(object)
	if !ok {
		telemetry.Log.Warningf("watch: unexpected %T from the API: ignored", obj)
	}
	return x, ok
}

// Add implements cache.ReflectorStore.
func (t *reflectorStore) Add(obj any) error { return t.Update(obj) }

// Update implements cache.ReflectorStore.
func (t *reflectorStore) Update(obj any) error {
	if o, ok := t.convert(obj); ok {
		t.objects.apply(t, []object{o}, nil)
	}
	return nil
}

// Delete implements cache.ReflectorStore.
func (t *reflectorStore) Delete(obj any) error {
	if o, ok := t.convert(obj); ok {
		m := o.objectMeta()
		t.objects.apply(t, nil, []objectRef{{m.namespace, t.key(m.name)}})
		t.problems.forget(m.namespace, m.name)
	}
	return nil
}

// Replace implements cache.ReflectorStore: the reflector's full list, at start and on relists.
// Objects whose version did not change are not touched, so a relist rebuilds only what changed.
func (t *reflectorStore) Replace(list []any, _ string) error {
	objs := make([]object, 0, len(list))
	for _, obj := range list {
		if o, ok := t.convert(obj); ok {
			objs = append(objs, o)
		}
	}
	t.objects.replace(t, objs)
	t.problems.retain(objs)
	t.once.Do(func() { close(t.synced) })
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (t *reflectorStore) Resync() error { return nil }

// Transformer implements cache.TransformingStore: the reflector's temporary store of a streamed
// initial list keeps converted objects, not whole API objects.
func (t *reflectorStore) Transformer() cache.TransformFunc { return t.transform }

// objectStore holds every reflector's objects, by namespace, indexed as the index reads them.
// One lock: writes are short (one object), reads copy what they return.
type objectStore struct {
	mu          sync.RWMutex
	byNamespace map[string]*namespaceObjects
	sink        Sink
	stamps      uint64 // per-pod mirror changes so far: each stamps its podMirrorList (under mu)
}

// namespaceObjects is one namespace's objects.
type namespaceObjects struct {
	local           map[string]*service       // local member Services, by name
	mirrors         map[string]*service       // headless mirrors, by name
	mirrorsOf       map[string][]*service     // headless mirrors, by global service name
	podMirrors      map[uint64]*podMirror     // per-pod mirrors, by podID of their name
	podMirrorLists  map[string]*podMirrorList // per-pod mirrors, by headless mirror name
	localSlices     sourceSlices              // the local Services'
	mirrorSlices    sourceSlices              // the headless (and ClusterIP) mirrors'
	podMirrorSlices map[uint64]podAndReady    // per-pod mirrors' slices, by nameID of their name
}

func newObjectStore() *objectStore { return &objectStore{byNamespace: map[string]*namespaceObjects{}} }

func (s *objectStore) setSink(sink Sink) {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
}

// objectsIn returns namespace ns's objects, made if missing.
func (s *objectStore) objectsIn(ns string) *namespaceObjects {
	sp := s.byNamespace[ns]
	if sp == nil {
		sp = &namespaceObjects{
			local: map[string]*service{}, mirrors: map[string]*service{}, mirrorsOf: map[string][]*service{},
			podMirrors: map[uint64]*podMirror{}, podMirrorLists: map[string]*podMirrorList{},
			localSlices:     newSourceSlices(),
			mirrorSlices:    newSourceSlices(),
			podMirrorSlices: map[uint64]podAndReady{},
		}
		s.byNamespace[ns] = sp
	}
	return sp
}

// affected collects the global services one write affects, to notify once the lock is released.
type affected map[index.Key]struct{}

func (c affected) add(k index.Key, ok bool) {
	if ok {
		c[k] = struct{}{}
	}
}

// apply puts objs into t's part of the store and deletes dels from it, then notifies the sink.
func (s *objectStore) apply(t *reflectorStore, objs []object, dels []objectRef) {
	c := affected{}
	s.mu.Lock()
	for _, d := range dels {
		s.remove(t, d.namespace, d.key, c)
	}
	for _, o := range objs {
		m := o.objectMeta()
		if s.updateSlice(t, o, c) {
			continue
		}
		s.remove(t, m.namespace, t.key(m.name), c) // whatever it was before
		s.put(t, o, c)
	}
	sink := s.sink
	s.mu.Unlock()
	if sink != nil {
		for k := range c {
			sink.Changed(k)
		}
	}
}

// replace makes objs t's whole part of the store: what is not in it is deleted, what changed is
// put, what is the same is left alone.
func (s *objectStore) replace(t *reflectorStore, objs []object) {
	s.mu.RLock()
	listed := make(map[objectRef]bool, len(objs))
	var changed []object
	for _, o := range objs {
		m := o.objectMeta()
		listed[objectRef{m.namespace, keyOf(o)}] = true
		if !s.unchanged(t, o) {
			changed = append(changed, o)
		}
	}
	var gone []objectRef
	for ns, sp := range s.byNamespace {
		if t.namespace != "" && ns != t.namespace {
			continue // another reflector's
		}
		for _, k := range sp.keys(t) {
			if d := (objectRef{ns, k}); !listed[d] {
				gone = append(gone, d)
			}
		}
	}
	s.mu.RUnlock()
	// Another write between the two locks is a later event of the same reflector: there is none,
	// the reflector calls its store from one goroutine.
	s.apply(t, changed, gone)
}

// objectKey identifies an object of a reflector in a namespace: by name (Services), or by nameID
// of the name: per-pod mirrors and every slice, whose maps are the biggest (a string key in a map
// takes 16 bytes, and a name of its own for per-pod mirrors).
type objectKey struct {
	name string
	id   uint64
}

// key is every key an object called name may have in t: Linkerd's mirror Services are headless
// mirrors (by name) or per-pod mirrors (by id), and one may turn into the other.
func (t *reflectorStore) key(name string) objectKey {
	switch {
	case t.kind == kindSlice:
		return objectKey{id: nameID(name)}
	case t.kind == kindService && t.src == fromMirror:
		return objectKey{name: name, id: podID(name)}
	}
	return objectKey{name: name}
}

// keyOf is the key under which o is kept.
func keyOf(o object) objectKey {
	switch o.(type) {
	case *podMirrorService:
		return objectKey{id: podID(o.objectMeta().name)}
	case *podMirrorSlice, *slice:
		return objectKey{id: nameID(o.objectMeta().name)}
	}
	return objectKey{name: o.objectMeta().name}
}

// nameSeed keys nameID; random, so no one can choose names that collide. Two of 100,000 names
// collide with a probability of about 3e-10.
var nameSeed = maphash.MakeSeed()

func nameID(name string) uint64 { return maphash.String(nameSeed, name) }

// podID is the nameID of a per-pod mirror, without its low bit, which podAndReady uses.
func podID(name string) uint64 { return nameID(name) &^ 1 }

// objectRef names one object of a reflector: in a namespace, by its key.
type objectRef struct {
	namespace string
	key       objectKey
}

// unchanged reports whether t holds o as it is: the same version, or for the per-pod mirrors,
// which keep none, the same content.
func (s *objectStore) unchanged(t *reflectorStore, o object) bool {
	m := o.objectMeta()
	sp := s.byNamespace[m.namespace]
	if sp == nil {
		return false
	}
	var kept uint64 // the version kept, 0 for none
	switch o := o.(type) {
	case *podMirrorService:
		return sp.podMirrorServiceUnchanged(m.name, o)
	case *podMirrorSlice:
		return sp.podMirrorSliceUnchanged(m.name, o)
	case *service:
		kept = sp.serviceVersion(t.src, m.name)
	case *slice:
		kept = sp.sliceVersion(t.src, m.name)
	}
	return kept != 0 && kept == m.version
}

// keys returns the keys of t's objects in sp.
func (sp *namespaceObjects) keys(t *reflectorStore) []objectKey {
	var out []objectKey
	switch {
	case t.kind == kindService && t.src == fromLocal:
		out = serviceKeys(out, sp.local)
	case t.kind == kindService:
		out = sp.podMirrorKeys(serviceKeys(out, sp.mirrors))
	case t.src == fromPodMirror:
		out = sp.podMirrorSliceKeys(out)
	default:
		out = sp.sliceKeys(t.src, out)
	}
	return out
}

// remove deletes t's object k in ns, if any, recording the global services it affected.
func (s *objectStore) remove(t *reflectorStore, ns string, k objectKey, c affected) {
	sp := s.byNamespace[ns]
	if sp == nil {
		return
	}
	switch {
	case t.kind == kindService && t.src == fromLocal:
		sp.removeLocal(k.name, c)
	case t.kind == kindService:
		sp.removeMirror(k.name, c)
		s.removePodMirror(sp, k.id, c)
	case t.src == fromPodMirror:
		s.removePodMirrorSlice(sp, k.id, c)
	default:
		sp.removeSlice(ns, t.src, k.id, c)
	}
}

// put adds t's object o (whose name is not in the store), recording the global services it
// affects.
func (s *objectStore) put(t *reflectorStore, o object, c affected) {
	m := o.objectMeta()
	sp := s.objectsIn(m.namespace)
	switch o := o.(type) {
	case *service:
		sp.putService(t.src, o, c)
	case *podMirrorService:
		s.putPodMirrorService(sp, o, c)
	case *podMirrorSlice:
		s.putPodMirrorSlice(sp, o, c)
	case *slice:
		sp.putSlice(t.src, o, c)
	}
}

// drop removes o from list k of m, deleting the key when the list empties.
func drop[T comparable](m map[string][]T, k string, o T) {
	list := slices.DeleteFunc(m[k], func(e T) bool { return e == o })
	if len(list) == 0 {
		delete(m, k)
		return
	}
	m[k] = list
}

package watch

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	"k8s.io/client-go/tools/cache"
)

// kind is the API kind a table holds.
type kind uint8

const (
	kindService kind = iota
	kindSlice
)

// table is the store one reflector writes into (cache.ReflectorStore): it converts each object
// and hands it to the state, which keeps it only where the index reads it.
type table struct {
	state     *state
	namespace string // the reflector's; "" for all
	kind      kind
	src       source
	transform func(any) (any, error)
	synced    chan struct{} // closed by the first Replace: the initial list
	once      sync.Once
}

var _ cache.TransformingStore = (*table)(nil)

func (t *table) convert(obj any) (object, bool) {
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
func (t *table) Add(obj any) error { return t.Update(obj) }

// Update implements cache.ReflectorStore.
func (t *table) Update(obj any) error {
	if o, ok := t.convert(obj); ok {
		t.state.apply(t, []object{o}, nil)
	}
	return nil
}

// Delete implements cache.ReflectorStore.
func (t *table) Delete(obj any) error {
	if o, ok := t.convert(obj); ok {
		m := o.objectMeta()
		t.state.apply(t, nil, []objectRef{{m.namespace, t.key(m.name)}})
	}
	return nil
}

// Replace implements cache.ReflectorStore: the reflector's full list, at start and on relists.
// Objects whose version did not change are not touched, so a relist rebuilds only what changed.
func (t *table) Replace(list []any, _ string) error {
	objs := make([]object, 0, len(list))
	for _, obj := range list {
		if o, ok := t.convert(obj); ok {
			objs = append(objs, o)
		}
	}
	t.state.replace(t, objs)
	t.once.Do(func() { close(t.synced) })
	return nil
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (t *table) Resync() error { return nil }

// Transformer implements cache.TransformingStore: the reflector's temporary store of a streamed
// initial list keeps converted objects, not whole API objects.
func (t *table) Transformer() cache.TransformFunc { return t.transform }

// state holds every table's objects, by namespace, indexed as the index reads them. One lock:
// writes are short (one object), reads copy what they return.
type state struct {
	mu     sync.RWMutex
	spaces map[string]*space
	sink   Sink
}

// space is one namespace's objects.
type space struct {
	local        map[string]*service   // local member Services, by name
	mirrors      map[string]*service   // headless mirrors, by name
	mirrorsOf    map[string][]*service // headless mirrors, by global service name
	pods         map[string]*pod       // per-pod mirrors, by name
	roots        map[string]*root      // per-pod mirrors, by headless mirror name
	localSlices  sliceTable
	mirrorSlices sliceTable            // the headless (and ClusterIP) mirrors'
	podSlices    map[uint64]podSliceOf // per-pod mirrors' slices, by sliceID of their name
}

// root is the per-pod mirrors of one headless mirror.
type root struct {
	name string
	pods []*pod
}

// sliceTable is the slices of one source, by name and by Service.
type sliceTable struct {
	byName map[string]*slice
	of     map[string][]*slice
}

// pod is a per-pod mirror: its Service (root nil until seen) and how many of its EndpointSlices
// there are, and have a ready endpoint. One entry for both kinds, 64 bytes: there is one per
// mirror record.
type pod struct {
	name          string // its key in space.pods, shared
	root          *root  // the headless mirror
	ip            netip.Addr
	version       uint64 // the Service's
	slices, ready int32
}

// podSliceOf is what is kept of a per-pod mirror's slice.
type podSliceOf struct {
	pod     *pod
	version uint64
	ready   bool
}

func newState() *state { return &state{spaces: map[string]*space{}} }

func (s *state) setSink(sink Sink) {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
}

func (s *state) space(ns string) *space {
	sp := s.spaces[ns]
	if sp == nil {
		sp = &space{
			local: map[string]*service{}, mirrors: map[string]*service{}, mirrorsOf: map[string][]*service{},
			pods: map[string]*pod{}, roots: map[string]*root{},
			localSlices:  sliceTable{byName: map[string]*slice{}, of: map[string][]*slice{}},
			mirrorSlices: sliceTable{byName: map[string]*slice{}, of: map[string][]*slice{}},
			podSlices:    map[uint64]podSliceOf{},
		}
		s.spaces[ns] = sp
	}
	return sp
}

// changes collects the global services one write affects, to notify once the lock is released.
type changes map[index.Key]struct{}

func (c changes) add(k index.Key, ok bool) {
	if ok {
		c[k] = struct{}{}
	}
}

// apply puts objs into t's part of the state and deletes dels from it, then notifies the sink.
func (s *state) apply(t *table, objs []object, dels []objectRef) {
	c := changes{}
	s.mu.Lock()
	for _, d := range dels {
		s.remove(t, d.namespace, d.key, c)
	}
	for _, o := range objs {
		m := o.objectMeta()
		s.remove(t, m.namespace, t.key(m.name), c)
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

// replace makes objs t's whole part of the state: what is not in it is deleted, what changed is
// put, what has the same version is left alone.
func (s *state) replace(t *table, objs []object) {
	s.mu.RLock()
	listed := make(map[objectRef]bool, len(objs))
	var changed []object
	for _, o := range objs {
		m := o.objectMeta()
		k := t.key(m.name)
		listed[objectRef{m.namespace, k}] = true
		if v, ok := s.version(t, m.namespace, k); !ok || v != m.version || v == 0 {
			changed = append(changed, o)
		}
	}
	var gone []objectRef
	for ns, sp := range s.spaces {
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

// objectKey identifies an object of a table in a namespace: by name, or, for per-pod mirrors'
// slices, by sliceID of the name (kept instead of the name: there is one per mirror record).
type objectKey struct {
	name string
	id   uint64
}

func (t *table) key(name string) objectKey {
	if t.kind == kindSlice && t.src == fromPodMirror {
		return objectKey{id: sliceID(name)}
	}
	return objectKey{name: name}
}

// sliceSeed keys sliceID; random, so no one can choose names that collide. Two of 100,000 names
// collide with a probability of about 3e-10.
var sliceSeed = maphash.MakeSeed()

func sliceID(name string) uint64 { return maphash.String(sliceSeed, name) }

// objectRef names one object of a table: in a namespace, by its key.
type objectRef struct {
	namespace string
	key       objectKey
}

// version returns the version of t's object k in ns, if t has it.
func (s *state) version(t *table, ns string, k objectKey) (uint64, bool) {
	name := k.name
	sp := s.spaces[ns]
	if sp == nil {
		return 0, false
	}
	switch {
	case t.kind == kindService && t.src == fromLocal:
		if o, ok := sp.local[name]; ok {
			return o.version, true
		}
	case t.kind == kindService:
		if o, ok := sp.mirrors[name]; ok {
			return o.version, true
		}
		if p, ok := sp.pods[name]; ok && p.root != nil {
			return p.version, true
		}
	case t.src == fromPodMirror:
		if o, ok := sp.podSlices[k.id]; ok {
			return o.version, true
		}
	default:
		if o, ok := sp.sliceTable(t.src).byName[name]; ok {
			return o.version, true
		}
	}
	return 0, false
}

// keys returns the keys of t's objects in sp.
func (sp *space) keys(t *table) []objectKey {
	var out []objectKey
	add := func(name string) { out = append(out, objectKey{name: name}) }
	switch {
	case t.kind == kindService && t.src == fromLocal:
		for name := range sp.local {
			add(name)
		}
	case t.kind == kindService:
		for name := range sp.mirrors {
			add(name)
		}
		for name, p := range sp.pods {
			if p.root != nil {
				add(name)
			}
		}
	case t.src == fromPodMirror:
		for id := range sp.podSlices {
			out = append(out, objectKey{id: id})
		}
	default:
		for name := range sp.sliceTable(t.src).byName {
			add(name)
		}
	}
	return out
}

func (sp *space) sliceTable(src source) *sliceTable {
	if src == fromLocal {
		return &sp.localSlices
	}
	return &sp.mirrorSlices
}

// mirrorKey is the global service of headless mirror name, if it is one.
func (sp *space) mirrorKey(name string) (index.Key, bool) {
	if m := sp.mirrors[name]; m != nil {
		return m.global, true
	}
	return index.Key{}, false
}

// sliceKey is the global service that a slice of Service name (of source src) belongs to.
func (sp *space) sliceKey(ns string, src source, name string) (index.Key, bool) {
	if src == fromLocal {
		return index.Key{Namespace: ns, Name: name}, true
	}
	return sp.mirrorKey(name)
}

// remove deletes t's object k in ns, if any, recording the global services it affected.
func (s *state) remove(t *table, ns string, k objectKey, c changes) {
	name := k.name
	sp := s.spaces[ns]
	if sp == nil {
		return
	}
	switch {
	case t.kind == kindService && t.src == fromLocal:
		if o, ok := sp.local[name]; ok {
			delete(sp.local, name)
			c.add(o.global, true)
		}
	case t.kind == kindService:
		if o, ok := sp.mirrors[name]; ok {
			delete(sp.mirrors, name)
			drop(sp.mirrorsOf, o.global.Name, o)
			c.add(o.global, true)
		}
		if p, ok := sp.pods[name]; ok && p.root != nil {
			r := p.root
			if r.pods = slices.DeleteFunc(r.pods, func(e *pod) bool { return e == p }); len(r.pods) == 0 {
				delete(sp.roots, r.name)
			}
			c.add(sp.mirrorKey(r.name))
			p.root, p.ip, p.version = nil, netip.Addr{}, 0
			sp.dropPod(p)
		}
	case t.src == fromPodMirror:
		if o, ok := sp.podSlices[k.id]; ok {
			delete(sp.podSlices, k.id)
			p := o.pod
			p.slices--
			if o.ready {
				p.ready--
			}
			c.add(p.rootKey(sp))
			sp.dropPod(p)
		}
	default:
		table := sp.sliceTable(t.src)
		if o, ok := table.byName[name]; ok {
			delete(table.byName, name)
			drop(table.of, o.service, o)
			c.add(sp.sliceKey(ns, t.src, o.service))
		}
	}
}

// put adds t's object o (whose name is not in the state), recording the global services it affects.
func (s *state) put(t *table, o object, c changes) {
	m := o.objectMeta()
	sp := s.space(m.namespace)
	switch o := o.(type) {
	case *service:
		if o.member == nil {
			return // not a member of anything: not kept
		}
		if t.src == fromLocal {
			sp.local[m.name] = o
		} else {
			sp.mirrors[m.name] = o
			sp.mirrorsOf[o.global.Name] = append(sp.mirrorsOf[o.global.Name], o)
		}
		c.add(o.global, true)
	case *podMirror:
		r := sp.roots[o.root]
		if r == nil {
			r = &root{name: o.root}
			sp.roots[o.root] = r
		}
		p := sp.pod(m.name)
		p.root, p.ip, p.version = r, o.ip, m.version
		r.pods = append(r.pods, p)
		c.add(sp.mirrorKey(r.name))
	case *podSlice:
		if o.pod == "" {
			return
		}
		p := sp.pod(o.pod)
		p.slices++
		if o.ready {
			p.ready++
		}
		sp.podSlices[sliceID(m.name)] = podSliceOf{pod: p, version: m.version, ready: o.ready}
		c.add(p.rootKey(sp))
	case *slice:
		if o.service == "" {
			return
		}
		table := sp.sliceTable(t.src)
		table.byName[m.name] = o
		table.of[o.service] = append(table.of[o.service], o)
		c.add(sp.sliceKey(m.namespace, t.src, o.service))
	}
}

// pod returns the per-pod mirror entry of name, made if missing: a slice may come before its
// Service.
func (sp *space) pod(name string) *pod {
	p := sp.pods[name]
	if p == nil {
		p = &pod{name: name}
		sp.pods[name] = p
	}
	return p
}

// rootKey is the global service of p's headless mirror, once both are known.
func (p *pod) rootKey(sp *space) (index.Key, bool) {
	if p.root == nil {
		return index.Key{}, false
	}
	return sp.mirrorKey(p.root.name)
}

// dropPod deletes a per-pod mirror entry that has neither a Service nor a slice left.
func (sp *space) dropPod(p *pod) {
	if p.root == nil && p.slices <= 0 {
		delete(sp.pods, p.name)
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

func (s *state) members(k index.Key) []*index.Member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.spaces[k.Namespace]
	if sp == nil {
		return nil
	}
	var out []*index.Member
	if o := sp.local[k.Name]; o != nil {
		out = append(out, o.member)
	}
	for _, o := range sp.mirrorsOf[k.Name] {
		out = append(out, o.member)
	}
	return out
}

func (s *state) slices(m *index.Member) []*index.Slice {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.spaces[m.Namespace]
	if sp == nil {
		return nil
	}
	src := fromMirror
	if m.Local() {
		src = fromLocal
	}
	of := sp.sliceTable(src).of[m.Name]
	out := make([]*index.Slice, 0, len(of))
	for _, o := range of {
		if o.slice != nil {
			out = append(out, o.slice)
		}
	}
	return out
}

func (s *state) podMirrors(m *index.Member) []index.PodMirror {
	if m.Local() {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.spaces[m.Namespace]
	if sp == nil {
		return nil
	}
	r := sp.roots[m.Name]
	if r == nil {
		return nil
	}
	out := make([]index.PodMirror, 0, len(r.pods))
	for _, p := range r.pods {
		out = append(out, index.PodMirror{Addr: p.ip, Ready: p.ready > 0})
	}
	return out
}

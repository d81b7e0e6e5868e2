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
	problems  *problemLog   // what transform reported, per object
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
		t.problems.forget(m.namespace, m.name)
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
	t.problems.retain(objs)
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
	stamps uint64 // per-pod mirror changes so far: each stamps its root (under mu)
}

// space is one namespace's objects.
type space struct {
	local        map[string]*service   // local member Services, by name
	mirrors      map[string]*service   // headless mirrors, by name
	mirrorsOf    map[string][]*service // headless mirrors, by global service name
	pods         map[uint64]*pod       // per-pod mirrors, by podID of their name
	roots        map[string]*root      // per-pod mirrors, by headless mirror name
	localSlices  sliceTable
	mirrorSlices sliceTable            // the headless (and ClusterIP) mirrors'
	podSlices    map[uint64]podSliceOf // per-pod mirrors' slices, by nameID of their name
}

// root is the per-pod mirrors of one headless mirror, a list linked through pod.next (a slice
// of pointers would be one more allocation per headless mirror).
type root struct {
	name  string
	first *pod
	gen   uint64 // the stamp of the last change to its list or its pods' readiness
}

// stamp records a change to r's per-pod mirrors (nil: a per-pod mirror not linked to one yet,
// which no answer reads). Under the state's write lock.
func (s *state) stamp(r *root) {
	if r != nil {
		s.stamps++
		r.gen = s.stamps
	}
}

// sliceTable is the slices of one source, by nameID of their name and by Service: nearly every
// Service has one slice, so the first is kept apart from the rest (a list per Service would be
// one more allocation, and a bigger map entry, per Service).
type sliceTable struct {
	byName map[uint64]*slice
	first  map[string]*slice     // by Service
	more   map[string][]sliceRef // by Service, when it has more than one
}

// sliceRef is a slice in a Service's list, with what the index reads of it at hand: a Service of
// many slices is read on each change of one, and its other slices are long out of the cache.
type sliceRef struct {
	obj   *slice
	slice *index.Slice
}

func newSliceTable() sliceTable {
	return sliceTable{byName: map[uint64]*slice{}, first: map[string]*slice{}, more: map[string][]sliceRef{}}
}

func (st *sliceTable) add(o *slice) {
	st.byName[nameID(o.name)] = o
	if st.first[o.service] == nil {
		st.first[o.service] = o
	} else {
		st.more[o.service] = append(st.more[o.service], sliceRef{o, o.slice})
	}
}

// replace puts n, of the same name and Service as o, in o's place.
func (st *sliceTable) replace(o, n *slice) {
	st.byName[nameID(n.name)] = n
	if st.first[o.service] == o {
		st.first[o.service] = n
		return
	}
	list := st.more[o.service]
	list[slices.IndexFunc(list, func(r sliceRef) bool { return r.obj == o })] = sliceRef{n, n.slice}
}

func (st *sliceTable) remove(o *slice) {
	delete(st.byName, nameID(o.name))
	if st.first[o.service] != o {
		st.dropMore(o.service, o)
		return
	}
	rest := st.more[o.service]
	if len(rest) == 0 {
		delete(st.first, o.service)
		return
	}
	last := rest[len(rest)-1].obj
	st.first[o.service] = last
	st.dropMore(o.service, last)
}

func (st *sliceTable) dropMore(service string, o *slice) {
	list := slices.DeleteFunc(st.more[service], func(r sliceRef) bool { return r.obj == o })
	if len(list) == 0 {
		delete(st.more, service)
		return
	}
	st.more[service] = list
}

// pod is a per-pod mirror: its Service (root nil until seen) and how many of its EndpointSlices
// there are, and have a ready endpoint. One entry for both kinds, 48 bytes, with neither name nor
// version: there is one per mirror record, and what a relist compares is its content.
type pod struct {
	root          *root // the headless mirror
	next          *pod  // in root's list
	ip            netip.Addr
	slices, ready int32
}

// podSliceOf is what is kept of a per-pod mirror's slice: whose (podID of the per-pod mirror)
// and whether it counts as ready (the low bit), in one word: there is one per mirror record.
type podSliceOf uint64

func newPodSliceOf(pod string, ready bool) podSliceOf {
	if ready {
		return podSliceOf(podID(pod) | 1)
	}
	return podSliceOf(podID(pod))
}

func (o podSliceOf) pod() uint64 { return uint64(o) &^ 1 }
func (o podSliceOf) ready() bool { return o&1 == 1 }

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
			pods: map[uint64]*pod{}, roots: map[string]*root{},
			localSlices:  newSliceTable(),
			mirrorSlices: newSliceTable(),
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
		if s.update(t, o, c) {
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

// replace makes objs t's whole part of the state: what is not in it is deleted, what changed is
// put, what is the same is left alone.
func (s *state) replace(t *table, objs []object) {
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

// objectKey identifies an object of a table in a namespace: by name (Services), or by nameID of
// the name: per-pod mirrors and every slice, whose tables are the biggest (a string key in a map
// takes 16 bytes, and a name of its own for per-pod mirrors).
type objectKey struct {
	name string
	id   uint64
}

// key is every key an object called name may have in t: Linkerd's mirror Services are headless
// mirrors (by name) or per-pod mirrors (by id), and one may turn into the other.
func (t *table) key(name string) objectKey {
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
	case *podMirror:
		return objectKey{id: podID(o.objectMeta().name)}
	case *podSlice, *slice:
		return objectKey{id: nameID(o.objectMeta().name)}
	}
	return objectKey{name: o.objectMeta().name}
}

// nameSeed keys nameID; random, so no one can choose names that collide. Two of 100,000 names
// collide with a probability of about 3e-10.
var nameSeed = maphash.MakeSeed()

func nameID(name string) uint64 { return maphash.String(nameSeed, name) }

// podID is the nameID of a per-pod mirror, without its low bit, which podSliceOf uses.
func podID(name string) uint64 { return nameID(name) &^ 1 }

// objectRef names one object of a table: in a namespace, by its key.
type objectRef struct {
	namespace string
	key       objectKey
}

// unchanged reports whether t holds o as it is: the same version, or for the per-pod mirrors,
// which keep none, the same content.
func (s *state) unchanged(t *table, o object) bool {
	m := o.objectMeta()
	sp := s.spaces[m.namespace]
	if sp == nil {
		return false
	}
	var kept uint64 // the version kept, 0 for none
	switch o := o.(type) {
	case *podMirror:
		p := sp.pods[podID(m.name)]
		return p != nil && p.root != nil && p.root.name == o.root && p.ip == o.ip
	case *podSlice:
		ps, ok := sp.podSlices[nameID(m.name)]
		return ok && ps == newPodSliceOf(o.pod, o.ready)
	case *service:
		e := sp.mirrors[m.name]
		if t.src == fromLocal {
			e = sp.local[m.name]
		}
		if e != nil {
			kept = e.version
		}
	case *slice:
		if e := sp.sliceTable(t.src).byName[nameID(m.name)]; e != nil && e.name == m.name {
			kept = e.version
		}
	}
	return kept != 0 && kept == m.version
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
		for id, p := range sp.pods {
			if p.root != nil {
				out = append(out, objectKey{id: id})
			}
		}
	case t.src == fromPodMirror:
		for id := range sp.podSlices {
			out = append(out, objectKey{id: id})
		}
	default:
		for id := range sp.sliceTable(t.src).byName {
			out = append(out, objectKey{id: id})
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
		return m.key(), true
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
			c.add(o.key(), true)
		}
	case t.kind == kindService:
		if o, ok := sp.mirrors[name]; ok {
			delete(sp.mirrors, name)
			drop(sp.mirrorsOf, o.global, o)
			c.add(o.key(), true)
		}
		if p, ok := sp.pods[k.id]; ok && p.root != nil {
			r := p.root
			if r.unlink(p); r.first == nil {
				delete(sp.roots, r.name)
			}
			s.stamp(r)
			c.add(sp.mirrorKey(r.name))
			p.root, p.ip = nil, netip.Addr{}
			sp.dropPod(k.id, p)
		}
	case t.src == fromPodMirror:
		if o, ok := sp.podSlices[k.id]; ok {
			delete(sp.podSlices, k.id)
			p := sp.pods[o.pod()]
			p.slices--
			if o.ready() {
				p.ready--
			}
			s.stamp(p.root)
			c.add(p.rootKey(sp))
			sp.dropPod(o.pod(), p)
		}
	default:
		table := sp.sliceTable(t.src)
		if o, ok := table.byName[k.id]; ok {
			table.remove(o)
			c.add(sp.sliceKey(ns, t.src, o.service))
		}
	}
}

// update puts o, a slice, in place of the one of its name when that is of the same Service, and
// reports whether it did: the slice keeps its place in the Service's list, which the index matches
// a member's slices by (removed and added again, it would move to the end, and each after it one
// place, so that a change of one slice looked like a change of half of them).
func (s *state) update(t *table, o object, c changes) bool {
	n, ok := o.(*slice)
	if !ok || n.service == "" || t.kind != kindSlice || t.src == fromPodMirror {
		return false
	}
	m := o.objectMeta()
	sp := s.spaces[m.namespace]
	if sp == nil {
		return false
	}
	table := sp.sliceTable(t.src)
	old, ok := table.byName[nameID(m.name)]
	if !ok || old.service != n.service {
		return false
	}
	table.replace(old, n)
	c.add(sp.sliceKey(m.namespace, t.src, n.service))
	return true
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
			sp.mirrorsOf[o.global] = append(sp.mirrorsOf[o.global], o)
		}
		c.add(o.key(), true)
	case *podMirror:
		r := sp.roots[o.root]
		if r == nil {
			r = &root{name: o.root}
			sp.roots[o.root] = r
		}
		p := sp.pod(podID(m.name))
		p.root, p.ip, p.next, r.first = r, o.ip, r.first, p
		s.stamp(r)
		c.add(sp.mirrorKey(r.name))
	case *podSlice:
		if o.pod == "" {
			return
		}
		p := sp.pod(podID(o.pod))
		p.slices++
		if o.ready {
			p.ready++
		}
		s.stamp(p.root)
		sp.podSlices[nameID(m.name)] = newPodSliceOf(o.pod, o.ready)
		c.add(p.rootKey(sp))
	case *slice:
		if o.service == "" {
			return
		}
		table := sp.sliceTable(t.src)
		table.add(o)
		c.add(sp.sliceKey(m.namespace, t.src, o.service))
	}
}

// pod returns the per-pod mirror entry of id, made if missing: a slice may come before its
// Service.
func (sp *space) pod(id uint64) *pod {
	p := sp.pods[id]
	if p == nil {
		p = &pod{}
		sp.pods[id] = p
	}
	return p
}

// unlink takes p out of r's list.
func (r *root) unlink(p *pod) {
	for at := &r.first; *at != nil; at = &(*at).next {
		if *at == p {
			*at, p.next = p.next, nil
			return
		}
	}
}

// rootKey is the global service of p's headless mirror, once both are known.
func (p *pod) rootKey(sp *space) (index.Key, bool) {
	if p.root == nil {
		return index.Key{}, false
	}
	return sp.mirrorKey(p.root.name)
}

// dropPod deletes a per-pod mirror entry that has neither a Service nor a slice left.
func (sp *space) dropPod(id uint64, p *pod) {
	if p.root == nil && p.slices <= 0 {
		delete(sp.pods, id)
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
	st := sp.sliceTable(src)
	first, more := st.first[m.Name], st.more[m.Name]
	if first == nil {
		return nil
	}
	out := make([]*index.Slice, 0, 1+len(more))
	for _, r := range more {
		if r.slice != nil {
			out = append(out, r.slice)
		}
	}
	if first.slice != nil {
		out = append(out, first.slice)
	}
	return out
}

// podMirrorGeneration is the stamp of m's per-pod mirrors: 0 when it has none.
func (s *state) podMirrorGeneration(m *index.Member) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sp := s.spaces[m.Namespace]; sp != nil {
		if r := sp.roots[m.Name]; r != nil {
			return r.gen
		}
	}
	return 0
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
	var out []index.PodMirror
	for p := r.first; p != nil; p = p.next {
		out = append(out, index.PodMirror{Addr: p.ip, Ready: p.ready > 0})
	}
	return out
}

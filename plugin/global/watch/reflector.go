package watch

import (
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/telemetry"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// reflectorStore is the store one reflector writes into (cache.ReflectorStore): it converts
// each object and hands it to the objectStore, which keeps it only where the index reads it.
type reflectorStore struct {
	objects   *objectStore
	namespace string // the reflector's; "" for all
	kind      kind
	src       feed
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

// transform returns the conversion of one source's objects, reporting their problems to log. It
// must never fail (an error would stall the reflector) and must be idempotent (objects streamed
// at start are converted twice).
func transform(src feed, log *problemLog) func(any) (any, error) {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Service:
			o.Namespace = internString(namespaces, o.Namespace)
			p := problems{log: log, meta: &o.ObjectMeta}
			defer p.report()
			m := slimMeta(&o.ObjectMeta)
			if src != fromMirror {
				member, global := localMember(o, &p)
				return &service{meta: m, member: member, global: global.Name}, nil
			}
			if headless, ip := podMirrorOf(o, &p); headless != "" {
				return &podMirrorService{meta: m, headless: headless, ip: ip}, nil
			}
			member, global := mirrorMember(o, &p)
			return &service{meta: m, member: member, global: global.Name}, nil
		case *discoveryv1.EndpointSlice:
			o.Namespace = internString(namespaces, o.Namespace)
			p := problems{log: log, meta: &o.ObjectMeta}
			defer p.report()
			m, svc := slimMeta(&o.ObjectMeta), o.Labels[discoveryv1.LabelServiceName]
			if svc == "" {
				p.add(ReasonNoServiceLabel, "no "+discoveryv1.LabelServiceName+" label")
			}
			if src == fromPodMirror {
				ready := slices.ContainsFunc(o.Endpoints, func(e discoveryv1.Endpoint) bool { return ptr.Deref(e.Conditions.Ready, true) })
				return &podMirrorSlice{meta: m, pod: svc, ready: ready}, nil
			}
			s := &slice{meta: m, service: svc}
			if svc != "" {
				s.slice = convertSlice(o, src == fromMirror, &p)
			}
			if s.slice != nil && src == fromMirror {
				s.slice.Annotations = mirrorSliceAnnotations(o, &p)
			}
			return s, nil
		}
		return obj, nil // already converted
	}
}

// updateSlice puts o, a slice, in place of the one of its name when that is of the same
// Service, and reports whether it did: the slice keeps its place in the Service's list, which the
// index matches a member's slices by (removed and added again, it would move to the end, and each
// after it one place, so that a change of one slice looked like a change of half of them).
func (s *objectStore) updateSlice(t *reflectorStore, o object, c affected) bool {
	n, ok := o.(*slice)
	if !ok || n.service == "" || t.kind != kindSlice || t.src == fromPodMirror {
		return false
	}
	m := o.objectMeta()
	sp := s.byNamespace[m.namespace]
	if sp == nil {
		return false
	}
	ss := sp.slicesOf(t.src)
	old, ok := ss.byName[nameID(m.name)]
	if !ok || old.service != n.service {
		return false
	}
	ss.replace(old, n)
	c.add(sp.sliceKey(m.namespace, t.src, n.service))
	return true
}

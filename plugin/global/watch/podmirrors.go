package watch

import (
	"net/netip"

	"github.com/globaldns/global/plugin/global/index"

	"k8s.io/apimachinery/pkg/runtime"
)

// Linkerd's per-pod mirrors (cluster_watcher_headless.go createEndpointMirrorService): a ClusterIP
// Service per record of a headless mirror, whose EndpointSlice is ready while the linked
// cluster's gateway is (linkerd.go tells them from the other mirrors). Only their liveness counts:
// it is kept per record, and stamped per headless mirror, so the index rebuilds only the global
// services whose per-pod mirrors changed.

// podMirrorService is one of Linkerd's per-pod mirrors (a ClusterIP Service): the headless mirror
// it belongs to and its ClusterIP, the address of the record whose liveness it tells.
type podMirrorService struct {
	meta
	headless string
	ip       netip.Addr
}

// podMirrorSlice is an EndpointSlice of a per-pod mirror: only whether it has a ready endpoint
// counts.
type podMirrorSlice struct {
	meta
	pod   string // the per-pod mirror, its kubernetes.io/service-name
	ready bool
}

// DeepCopyObject implements runtime.Object: the stored objects are never mutated, so a shallow
// copy is a deep copy.
func (s *podMirrorService) DeepCopyObject() runtime.Object { c := *s; return &c }

// DeepCopyObject implements runtime.Object, as podMirrorService's.
func (s *podMirrorSlice) DeepCopyObject() runtime.Object { c := *s; return &c }

func newPodAndReady(pod string, ready bool) podAndReady {
	if ready {
		return podAndReady(podID(pod) | 1)
	}
	return podAndReady(podID(pod))
}

func (o podAndReady) pod() uint64 { return uint64(o) &^ 1 }
func (o podAndReady) ready() bool { return o&1 == 1 }

// stamp records a change to l's per-pod mirrors (nil: a per-pod mirror not linked to one yet,
// which no answer reads). Under the store's write lock.
func (s *objectStore) stamp(l *podMirrorList) {
	if l != nil {
		s.stamps++
		l.gen = s.stamps
	}
}

// podMirror returns the per-pod mirror entry of id, made if missing: a slice may come before its
// Service.
func (sp *namespaceObjects) podMirror(id uint64) *podMirror {
	p := sp.podMirrors[id]
	if p == nil {
		p = &podMirror{}
		sp.podMirrors[id] = p
	}
	return p
}

// unlink takes p out of l.
func (l *podMirrorList) unlink(p *podMirror) {
	for at := &l.first; *at != nil; at = &(*at).next {
		if *at == p {
			*at, p.next = p.next, nil
			return
		}
	}
}

// globalKey is the global service of p's headless mirror, once both are known.
func (p *podMirror) globalKey(sp *namespaceObjects) (index.Key, bool) {
	if p.list == nil {
		return index.Key{}, false
	}
	return sp.mirrorKey(p.list.headless)
}

// dropPodMirror deletes a per-pod mirror entry that has neither a Service nor a slice left.
func (sp *namespaceObjects) dropPodMirror(id uint64, p *podMirror) {
	if p.list == nil && p.slices <= 0 {
		delete(sp.podMirrors, id)
	}
}

func (sp *namespaceObjects) podMirrorServiceUnchanged(name string, o *podMirrorService) bool {
	p := sp.podMirrors[podID(name)]
	return p != nil && p.list != nil && p.list.headless == o.headless && p.ip == o.ip
}

func (sp *namespaceObjects) podMirrorSliceUnchanged(name string, o *podMirrorSlice) bool {
	ps, ok := sp.podMirrorSlices[nameID(name)]
	return ok && ps == newPodAndReady(o.pod, o.ready)
}

func (sp *namespaceObjects) podMirrorKeys(out []objectKey) []objectKey {
	for id, p := range sp.podMirrors {
		if p.list != nil {
			out = append(out, objectKey{id: id})
		}
	}
	return out
}

func (sp *namespaceObjects) podMirrorSliceKeys(out []objectKey) []objectKey {
	for id := range sp.podMirrorSlices {
		out = append(out, objectKey{id: id})
	}
	return out
}

// removePodMirror unlinks the Service of per-pod mirror id from its headless mirror's list.
func (s *objectStore) removePodMirror(sp *namespaceObjects, id uint64, c affected) {
	if p, ok := sp.podMirrors[id]; ok && p.list != nil {
		l := p.list
		if l.unlink(p); l.first == nil {
			delete(sp.podMirrorLists, l.headless)
		}
		s.stamp(l)
		c.add(sp.mirrorKey(l.headless))
		p.list, p.ip = nil, netip.Addr{}
		sp.dropPodMirror(id, p)
	}
}

func (s *objectStore) removePodMirrorSlice(sp *namespaceObjects, id uint64, c affected) {
	if o, ok := sp.podMirrorSlices[id]; ok {
		delete(sp.podMirrorSlices, id)
		p := sp.podMirrors[o.pod()]
		p.slices--
		if o.ready() {
			p.ready--
		}
		s.stamp(p.list)
		c.add(p.globalKey(sp))
		sp.dropPodMirror(o.pod(), p)
	}
}

func (s *objectStore) putPodMirrorService(sp *namespaceObjects, o *podMirrorService, c affected) {
	l := sp.podMirrorLists[o.headless]
	if l == nil {
		l = &podMirrorList{headless: o.headless}
		sp.podMirrorLists[o.headless] = l
	}
	p := sp.podMirror(podID(o.name))
	p.list, p.ip, p.next, l.first = l, o.ip, l.first, p
	s.stamp(l)
	c.add(sp.mirrorKey(l.headless))
}

func (s *objectStore) putPodMirrorSlice(sp *namespaceObjects, o *podMirrorSlice, c affected) {
	if o.pod == "" {
		return
	}
	p := sp.podMirror(podID(o.pod))
	p.slices++
	if o.ready {
		p.ready++
	}
	s.stamp(p.list)
	sp.podMirrorSlices[nameID(o.name)] = newPodAndReady(o.pod, o.ready)
	c.add(p.globalKey(sp))
}

// podMirrorGeneration is the stamp of m's per-pod mirrors: 0 when it has none.
func (s *objectStore) podMirrorGeneration(m *index.Member) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sp := s.byNamespace[m.Namespace]; sp != nil {
		if l := sp.podMirrorLists[m.Name]; l != nil {
			return l.gen
		}
	}
	return 0
}

func (s *objectStore) podMirrors(m *index.Member) []index.PodMirror {
	if m.Local() {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.byNamespace[m.Namespace]
	if sp == nil {
		return nil
	}
	l := sp.podMirrorLists[m.Name]
	if l == nil {
		return nil
	}
	var out []index.PodMirror
	for p := l.first; p != nil; p = p.next {
		// A per-pod mirror whose EndpointSlice is not seen yet tells nothing: Linkerd writes its
		// Endpoints with it, and kube-controller-manager mirrors them into a slice moments later,
		// often after the headless mirror's new address. Until then the headless mirror's own
		// readiness stands, which Linkerd wrote with the gateway's state: answered as down
		// meanwhile, a new record would be written not ready, then ready, two writes for one.
		if p.slices > 0 {
			out = append(out, index.PodMirror{Addr: p.ip, Ready: p.ready > 0})
		}
	}
	return out
}

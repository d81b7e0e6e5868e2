package watch

import (
	"github.com/globaldns/global/plugin/global/index"

	"k8s.io/apimachinery/pkg/runtime"
)

// The Services that are members of global services: the local ones the export selector selects,
// and Linkerd's headless mirrors (linkerd.go tells them apart from the other mirrors).

func (s *service) key() index.Key { return index.Key{Namespace: s.namespace, Name: s.global} }

// DeepCopyObject implements runtime.Object: the stored objects are never mutated, so a shallow
// copy is a deep copy.
func (s *service) DeepCopyObject() runtime.Object { c := *s; return &c }

// serviceVersion is the version kept of Service name of source src; 0 for none.
func (sp *namespaceObjects) serviceVersion(src feed, name string) uint64 {
	e := sp.mirrors[name]
	if src == fromLocal {
		e = sp.local[name]
	}
	if e != nil {
		return e.version
	}
	return 0
}

// serviceKeys appends the keys of the Services of m (local or mirrors) to out.
func serviceKeys(out []objectKey, m map[string]*service) []objectKey {
	for name := range m {
		out = append(out, objectKey{name: name})
	}
	return out
}

// mirrorKey is the global service of headless mirror name, if it is one.
func (sp *namespaceObjects) mirrorKey(name string) (index.Key, bool) {
	if m := sp.mirrors[name]; m != nil {
		return m.key(), true
	}
	return index.Key{}, false
}

func (sp *namespaceObjects) removeLocal(name string, c affected) {
	if o, ok := sp.local[name]; ok {
		delete(sp.local, name)
		c.add(o.key(), true)
	}
}

func (sp *namespaceObjects) removeMirror(name string, c affected) {
	if o, ok := sp.mirrors[name]; ok {
		delete(sp.mirrors, name)
		drop(sp.mirrorsOf, o.global, o)
		c.add(o.key(), true)
	}
}

// putService adds o, of source src, when it is a member of a global service.
func (sp *namespaceObjects) putService(src feed, o *service, c affected) {
	if o.member == nil {
		return // not a member of anything: not kept
	}
	if src == fromLocal {
		sp.local[o.name] = o
	} else {
		sp.mirrors[o.name] = o
		sp.mirrorsOf[o.global] = append(sp.mirrorsOf[o.global], o)
	}
	c.add(o.key(), true)
}

func (s *objectStore) members(k index.Key) []*index.Member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sp := s.byNamespace[k.Namespace]
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

// services returns every global service that has a member Service kept, a local one or a
// headless mirror, some maybe twice.
func (s *objectStore) services() []index.Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []index.Key
	for _, sp := range s.byNamespace {
		for _, o := range sp.local {
			out = append(out, o.key())
		}
		for _, ms := range sp.mirrorsOf { // a key twice is marked once
			out = append(out, ms[0].key())
		}
	}
	return out
}

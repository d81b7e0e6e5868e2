package watch

import (
	"slices"
	"sync"
)

// secondary maps a key to the cached objects that have it, kept by the informers' handlers.
// client-go's indexers would do, but they keep a set per indexed value: with a value per Service
// or two, the sets were a third of the plugin's memory.
type secondary[T interface{ objectName() string }] struct {
	key func(T) (string, bool)
	mu  sync.RWMutex
	by  map[string][]T
}

func newSecondary[T interface{ objectName() string }](key func(T) (string, bool)) *secondary[T] {
	return &secondary[T]{key: key, by: map[string][]T{}}
}

func (s *service) objectName() string { return s.name }
func (s *slice) objectName() string   { return s.name }

// set adds o, or replaces the object of the same name. Lists are copied, never changed in place:
// readers may hold one.
func (x *secondary[T]) set(o T) {
	k, ok := x.key(o)
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	list := x.by[k]
	if i := slices.IndexFunc(list, func(e T) bool { return e.objectName() == o.objectName() }); i >= 0 {
		list = slices.Clone(list)
		list[i] = o
	} else {
		list = append(list[:len(list):len(list)], o)
	}
	x.by[k] = list
}

func (x *secondary[T]) delete(o T) {
	k, ok := x.key(o)
	if !ok {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	list := slices.DeleteFunc(slices.Clone(x.by[k]), func(e T) bool { return e.objectName() == o.objectName() })
	if len(list) == 0 {
		delete(x.by, k)
		return
	}
	x.by[k] = list
}

func (x *secondary[T]) get(k string) []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.by[k]
}

// update keeps x in line with one informer event about obj (present: added or updated).
func (x *secondary[T]) update(obj any, present bool) {
	o, ok := obj.(T)
	if !ok || x == nil {
		return
	}
	if present {
		x.set(o)
	} else {
		x.delete(o)
	}
}

func globalOf(s *service) (string, bool) { return s.global.String(), s.member != nil }
func serviceOf(s *slice) (string, bool)  { return s.namespace + "/" + s.service, s.service != "" }
func podMirrorOwner(s *service) (string, bool) {
	return s.namespace + "/" + s.podOf, s.podOf != ""
}

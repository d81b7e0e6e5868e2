package watch

import (
	"runtime"
	"strings"
	"sync"
	"unsafe"
	"weak"

	"github.com/globaldns/global/plugin/global/index"
)

// interner keeps one copy of values that recur across objects, so the cache does not hold
// thousands of equal copies: every object of a namespace repeats its name, nearly every Service
// and slice of a mesh has one of a few port lists. It holds its copies weakly: a copy, and its
// entry, go when no object holds it any more, so what was seen and is gone (a tenant's Service
// updated with new ports hundreds of times) costs nothing. Bounded, against hostile input: past
// max live values it stops adding and returns values as they are.
type interner[E any] struct {
	mu     sync.Mutex
	values map[string]weakSlice[E]
	max    int
}

// weakSlice is a weak reference to a slice: its first element's, and its length.
type weakSlice[E any] struct {
	first weak.Pointer[E]
	n     int
}

// interned is what the cleanup of an interned copy needs to forget it: its key and which copy.
type interned[E any] struct {
	key string
	w   weakSlice[E]
}

func newInterner[E any](max int) *interner[E] {
	return &interner[E]{values: map[string]weakSlice[E]{}, max: max}
}

// get returns the one copy of v, whose key is key, taking v as it when there is none.
func (i *interner[E]) get(key string, v []E) []E {
	if c, ok := i.lookup(key); ok {
		return c
	}
	return i.add(key, v)
}

// lookup returns the copy of key, if one is kept.
func (i *interner[E]) lookup(key string) ([]E, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if w, ok := i.values[key]; ok {
		if first := w.first.Value(); first != nil {
			return unsafe.Slice(first, w.n), true
		}
	}
	return nil, false
}

// add makes v the copy of key, unless max are kept, and returns v.
func (i *interner[E]) add(key string, v []E) []E {
	if len(v) == 0 {
		return v
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if len(i.values) >= i.max {
		return v
	}
	w := weakSlice[E]{weak.Make(&v[0]), len(v)}
	i.values[key] = w
	runtime.AddCleanup(&v[0], i.forget, interned[E]{key, w})
	return v
}

// forget drops the entry of a copy no object holds any more, unless another took its key.
func (i *interner[E]) forget(c interned[E]) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.values[c.key] == c.w {
		delete(i.values, c.key)
	}
}

// len returns how many copies are kept.
func (i *interner[E]) len() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.values)
}

var (
	namespaces      = newInterner[byte](10000)
	places          = newInterner[byte](100000) // zones and node names
	portLists       = newInterner[index.Port](10000)
	annotationLists = newInterner[index.Annotation](10000)
)

// internString returns the one copy of s held by in: made a copy of its own when it is the first,
// so that it keeps no larger buffer s may be part of alive.
func internString(in *interner[byte], s string) string {
	if s == "" {
		return s
	}
	b, ok := in.lookup(s)
	if !ok {
		c := strings.Clone(s)
		b = in.add(c, unsafe.Slice(unsafe.StringData(c), len(c)))
	}
	return unsafe.String(&b[0], len(b))
}

// internAnnotations returns the one copy of as; nil when as is empty.
func internAnnotations(as index.Annotations) index.Annotations {
	if len(as) == 0 {
		return nil
	}
	var key strings.Builder
	for _, a := range as {
		key.WriteString(a.Key)
		key.WriteByte(0)
		key.WriteString(a.Value)
		key.WriteByte(0)
		if a.Relative {
			key.WriteByte(1)
		}
	}
	return annotationLists.get(key.String(), as)
}

func internPorts(ps []index.Port) []index.Port {
	if len(ps) == 0 {
		return nil
	}
	return portLists.get(index.PortsKey(ps), ps)
}

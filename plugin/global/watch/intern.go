package watch

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/globaldns/global/plugin/global/index"
)

// interner keeps one copy of values that recur across objects, so the cache does not hold
// thousands of equal copies: every object of a namespace repeats its name, nearly every Service
// and slice of a mesh has one of a few port lists. Bounded, against hostile input: past max
// distinct values it stops adding and returns values as they are.
type interner[V any] struct {
	values sync.Map // key -> V
	n      atomic.Int64
	max    int64
}

func (i *interner[V]) get(key string, v V) V {
	if x, ok := i.values.Load(key); ok {
		return x.(V)
	}
	if i.n.Load() >= i.max {
		return v
	}
	x, loaded := i.values.LoadOrStore(key, v)
	if !loaded {
		i.n.Add(1)
	}
	return x.(V)
}

var (
	namespaces      = &interner[string]{max: 10000}
	places          = &interner[string]{max: 100000} // zones and node names
	portLists       = &interner[[]index.Port]{max: 10000}
	annotationLists = &interner[*index.Annotations]{max: 10000}
)

// internAnnotations returns the one copy of as; nil when as is empty.
func internAnnotations(as index.Annotations) *index.Annotations {
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
	return annotationLists.get(key.String(), &as)
}

func internPorts(ps []index.Port) []index.Port {
	if len(ps) == 0 {
		return nil
	}
	return portLists.get(index.PortsKey(ps), ps)
}

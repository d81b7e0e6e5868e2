package writer

import (
	"cmp"
	"maps"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// The placement rules, the way Kubernetes' EndpointSlice reconcilers place endpoints, so that a
// change touches as few slices as possible:
//
//   - an endpoint stays in the slice that holds it while it has the slice's ports (holds), changed
//     in place;
//   - the endpoints no slice holds, in compareRest's order, fill the first slice with their ports
//     and room, then the first emptied one (whose ports change), then a new slice of the lowest
//     free index (fill);
//   - emptied slices are deleted (prune).
//
// A whole sync applies them to the slices the cache holds and every desired endpoint (placeGroup),
// a sync from a plan to the slices it wrote and what changed since (plan.apply): the same layout
// either way (TestPlacementMatchesWhole).

// placed is one desired slice: its index in the group, its ports and its endpoints.
type placed struct {
	index     int
	ports     []discoveryv1.EndpointPort
	portsKey  string
	endpoints []discoveryv1.Endpoint
}

// layout is one group's slices, by index, and where each endpoint is.
type layout struct {
	slices []placed
	at     map[endpointID]int // index of the slice that holds the endpoint
}

// endpointID is what identifies an endpoint across writes: its hostname and address.
type endpointID struct{ hostname, addr string }

func idOf(e *discoveryv1.Endpoint) endpointID {
	return endpointID{ptr.Deref(e.Hostname, ""), e.Addresses[0]}
}

// placeGroup places want, a group's desired endpoints, in the group's slices as the cache holds
// them (by index).
func placeGroup(want []endpoint, cached map[int]*discoveryv1.EndpointSlice, max int) *layout {
	byID := make(map[endpointID]*endpoint, len(want))
	for i := range want {
		byID[idOf(&want[i].ep)] = &want[i]
	}
	l := &layout{slices: make([]placed, 0, len(cached)), at: make(map[endpointID]int, len(want))}
	for _, i := range slices.Sorted(maps.Keys(cached)) {
		l.keep(i, cached[i], byID, max)
	}
	rest := make([]*endpoint, 0, len(byID))
	for _, e := range byID {
		rest = append(rest, e)
	}
	l.fill(rest, max)
	l.prune()
	return l
}

// keep makes slice i of the cached slice es: those of its endpoints that stay, as wanted now and
// in their order, up to max. It takes them out of want.
func (l *layout) keep(i int, es *discoveryv1.EndpointSlice, want map[endpointID]*endpoint, max int) {
	// Sized as it was: appended to, 100 endpoints would be copied seven times.
	sl := placed{index: i, portsKey: portsKey(es.Ports), endpoints: make([]discoveryv1.Endpoint, 0, min(len(es.Endpoints), max))}
	for j := range es.Endpoints {
		if len(es.Endpoints[j].Addresses) == 0 {
			continue
		}
		id := idOf(&es.Endpoints[j])
		if e, ok := want[id]; ok && sl.holds(e) && len(sl.endpoints) < max {
			sl.ports = e.ports
			sl.endpoints = append(sl.endpoints, e.ep)
			l.at[id] = i
			delete(want, id)
		}
	}
	l.slices = append(l.slices, sl)
}

// update changes endpoint id, in slice i, to e (nil: it is gone). It stays there, changed in
// place, while it has the slice's ports; otherwise it leaves, and update reports false: e is to be
// placed again (fill).
func (l *layout) update(id endpointID, i int, e *endpoint) bool {
	sl := l.slice(i)
	j := slices.IndexFunc(sl.endpoints, func(x discoveryv1.Endpoint) bool { return idOf(&x) == id })
	if e != nil && sl.holds(e) {
		sl.endpoints[j] = e.ep
		return true
	}
	sl.endpoints = slices.Delete(sl.endpoints, j, j+1)
	delete(l.at, id)
	return false
}

// holds reports whether e stays in sl, the slice that holds it: while it has sl's ports.
func (sl *placed) holds(e *endpoint) bool { return e.portsKey == sl.portsKey }

// fill places rest, the endpoints no slice holds, in compareRest's order: each in the first slice
// with its ports and room, else the first emptied one, else a new one. It returns the indexes of
// the slices it changed (with repeats).
func (l *layout) fill(rest []*endpoint, max int) []int {
	slices.SortFunc(rest, compareRest)
	changed := make([]int, 0, len(rest))
	for _, e := range rest {
		i := slices.IndexFunc(l.slices, func(sl placed) bool { return sl.portsKey == e.portsKey && len(sl.endpoints) < max })
		if i < 0 {
			// A slice emptied by this change is reused (its ports change in place) before a new one.
			i = slices.IndexFunc(l.slices, func(sl placed) bool { return len(sl.endpoints) == 0 })
		}
		if i < 0 {
			i = l.insert()
		}
		sl := &l.slices[i]
		sl.portsKey, sl.ports = e.portsKey, e.ports
		sl.endpoints = append(sl.endpoints, e.ep)
		l.at[idOf(&e.ep)] = sl.index
		changed = append(changed, sl.index)
	}
	return changed
}

// compareRest orders the endpoints that no slice holds, as they fill slices.
func compareRest(a, b *endpoint) int {
	return cmp.Or(cmp.Compare(a.portsKey, b.portsKey), cmp.Compare(a.id, b.id))
}

// insert adds an empty slice of the lowest free index, and returns its position.
func (l *layout) insert() int {
	i := 0
	for i < len(l.slices) && l.slices[i].index == i {
		i++
	}
	l.slices = slices.Insert(l.slices, i, placed{index: i})
	return i
}

// prune drops the emptied slices: they are deleted.
func (l *layout) prune() {
	l.slices = slices.DeleteFunc(l.slices, func(sl placed) bool { return len(sl.endpoints) == 0 })
}

// slice returns the slice of index i, nil when there is none.
func (l *layout) slice(i int) *placed {
	at, ok := slices.BinarySearchFunc(l.slices, i, func(sl placed, x int) int { return cmp.Compare(sl.index, x) })
	if !ok {
		return nil
	}
	return &l.slices[at]
}

package writer

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/index"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A sync computes a global service's whole desired state and compares every slice of it: at
// 10,000 endpoints that is milliseconds and megabytes of garbage for each change of one endpoint,
// and the garbage has the process collect on nearly every change. So a sync of a big service
// (index.Service.Big) leaves a plan: its slices as placed and written. The next sync, when the
// cache shows exactly those slices at the versions written (nobody else touched them), applies
// what changed in the index since (index.Changes) the way place would, and writes only the
// slices that changed: a change costs what it changes. Anything else (an edit or deletion by
// someone else, another writer, members or owner changed, an endpoint's hostname coming or
// going, a failed write) and the sync is whole, and leaves a new plan.

// plan is what a sync wrote for one slice set of a big global service.
type plan struct {
	svc     *index.Service // the version written
	owner   types.UID      // of the slices' owner (the -global Service, the ServiceImport)
	names   map[clusterHost]string
	groups  map[group]*groupPlan
	written map[string]string // the resourceVersion of each slice, by name, as written or found equal
}

// groupPlan is one group's slices, by index, and where each endpoint is.
type groupPlan struct {
	slices []placed
	at     map[endpointID]int // index of the slice that holds the endpoint
}

// endpointID is what identifies an endpoint across writes: its hostname and address.
type endpointID struct{ hostname, addr string }

func idOf(e *discoveryv1.Endpoint) endpointID { return endpointID{*e.Hostname, e.Addresses[0]} }

// newPlan starts the plan of a whole sync of s; names are the -global hostnames that are not
// <host>-<cluster> (nil for MCS slices).
func newPlan(s *index.Service, owner types.UID, names map[clusterHost]string) *plan {
	return &plan{svc: s, owner: owner, names: names, groups: map[group]*groupPlan{}, written: map[string]string{}}
}

// add records group g's slices, placed and written.
func (p *plan) add(g group, ps []placed) {
	slices.SortFunc(ps, func(a, b placed) int { return cmp.Compare(a.index, b.index) })
	gp := &groupPlan{slices: ps, at: map[endpointID]int{}}
	for _, sl := range ps {
		for i := range sl.endpoints {
			gp.at[idOf(&sl.endpoints[i])] = sl.index
		}
	}
	p.groups[g] = gp
}

// exceptions returns the names that are not <host>-<cluster>: what a plan keeps of them (nil
// for none: MCS slices).
func exceptions(names map[clusterHost]string) map[clusterHost]string {
	if names == nil {
		return nil
	}
	out := map[clusterHost]string{}
	for k, n := range names {
		if n != k.name() {
			out[k] = n
		}
	}
	return out
}

// hostname is r's endpoint hostname.
func (p *plan) hostname(r *index.Record) string {
	k := clusterHost{r.Cluster, r.Host}
	switch n, ok := p.names[k]; {
	case p.names == nil: // MCS slices
		return r.Host
	case ok:
		return n
	}
	return k.name()
}

// current reports whether have, our slices of the set as cached, are exactly what p wrote.
func (p *plan) current(have []*discoveryv1.EndpointSlice) bool {
	if len(have) != len(p.written) {
		return false
	}
	for _, es := range have {
		if rv, ok := p.written[es.Name]; !ok || rv != es.ResourceVersion {
			return false
		}
	}
	return true
}

// change is one endpoint that changed in one group: it went from slice at (-1: it is new), and
// is endpoint now (nil: it is gone).
type change struct {
	g        group
	id       endpointID
	at       int
	endpoint *endpoint
}

// changes returns what changed in p's slices from p.svc to s, and false when a whole sync is due:
// the members, their slices' annotations, the topology, or which hostnames the service has, changed. Nothing of
// p is modified.
func (p *plan) changes(s *index.Service) ([]change, bool) {
	if !slices.Equal(p.svc.Members, s.Members) || !index.SameAnnotations(p.svc, s) || p.svc.Topology() != s.Topology() {
		return nil, false
	}
	gone, came, ok := index.Changes(p.svc, s)
	if !ok {
		return nil, false
	}
	// The same hosts, so the same hostnames: a new one may make another's ambiguous.
	hosts := map[clusterHost]int{}
	for i := range gone {
		hosts[clusterHost{gone[i].Cluster, gone[i].Host}]++
	}
	for i := range came {
		hosts[clusterHost{came[i].Cluster, came[i].Host}]--
	}
	for _, n := range hosts {
		if n != 0 {
			return nil, false
		}
	}
	type key struct {
		g  group
		id endpointID
	}
	out := make([]change, 0, len(gone)+len(came))
	went := make(map[key]int, len(gone)) // where in out
	for i := range gone {
		r := &gone[i]
		c := change{g: groupOf(r), id: endpointID{p.hostname(r), r.Addr().String()}}
		gp := p.groups[c.g]
		if gp == nil {
			return nil, false
		}
		if c.at, ok = gp.at[c.id]; !ok {
			return nil, false
		}
		went[key{c.g, c.id}] = len(out)
		out = append(out, c)
	}
	d := newDesire(s.Topology(), s.Namespace)
	for i := range came {
		r := &came[i]
		hn, addr := p.hostname(r), r.Addr().String()
		e := d.endpoint(r, []string{addr}, &hn)
		c := change{g: groupOf(r), id: endpointID{hn, addr}, at: -1, endpoint: &e}
		if w, ok := went[key{c.g, c.id}]; ok {
			out[w].endpoint = c.endpoint // the same endpoint, changed
			continue
		}
		out = append(out, c) // new: a big service has no endpoint twice
	}
	return out, true
}

// apply makes p's slices what place would make of them with the changes, and returns the indexes
// of the slices it changed, by group: an endpoint still there, with the ports of its slice,
// changes in place; the others that went leave their slices; then the new ones, in place's order,
// fill the first slices with room and their ports, then the first emptied, then new ones.
func (p *plan) apply(cs []change, max int) map[group][]int {
	touched := map[group][]int{}
	touch := func(g group, i int) {
		if !slices.Contains(touched[g], i) {
			touched[g] = append(touched[g], i)
		}
	}
	var rest []*change
	for i := range cs {
		c := &cs[i]
		if c.at >= 0 {
			gp := p.groups[c.g]
			sl := gp.slice(c.at)
			at := sl.find(c.id)
			touch(c.g, c.at)
			if c.endpoint != nil && c.endpoint.portsKey == sl.portsKey {
				sl.endpoints[at] = c.endpoint.ep
				continue
			}
			sl.endpoints = slices.Delete(sl.endpoints, at, at+1)
			delete(gp.at, c.id)
		}
		if c.endpoint != nil {
			rest = append(rest, c)
		}
	}
	slices.SortFunc(rest, func(a, b *change) int { return compareRest(a.endpoint, b.endpoint) })
	for _, c := range rest {
		e := c.endpoint
		gp := p.group(c.g)
		i := slices.IndexFunc(gp.slices, func(sl placed) bool { return sl.portsKey == e.portsKey && len(sl.endpoints) < max })
		if i < 0 {
			// A slice emptied by this change is reused (its ports change in place) before a new one.
			i = slices.IndexFunc(gp.slices, func(sl placed) bool { return len(sl.endpoints) == 0 })
		}
		if i < 0 {
			n := placed{index: nextFree(gp.slices)}
			i, _ = slices.BinarySearchFunc(gp.slices, n.index, func(sl placed, x int) int { return cmp.Compare(sl.index, x) })
			gp.slices = slices.Insert(gp.slices, i, n)
		}
		sl := &gp.slices[i]
		sl.portsKey, sl.ports = e.portsKey, e.ports
		sl.endpoints = append(sl.endpoints, e.ep)
		gp.at[c.id] = sl.index
		touch(c.g, sl.index)
	}
	return touched
}

func (p *plan) group(g group) *groupPlan {
	gp := p.groups[g]
	if gp == nil {
		gp = &groupPlan{at: map[endpointID]int{}}
		p.groups[g] = gp
	}
	return gp
}

// slice returns the slice of index i.
func (gp *groupPlan) slice(i int) *placed {
	at, _ := slices.BinarySearchFunc(gp.slices, i, func(sl placed, x int) int { return cmp.Compare(sl.index, x) })
	return &gp.slices[at]
}

// find returns where the endpoint id is in p.
func (p *placed) find(id endpointID) int {
	return slices.IndexFunc(p.endpoints, func(e discoveryv1.Endpoint) bool { return idOf(&e) == id })
}

// syncPlan writes set's slices for s from p, which the cache shows written (have): false when it
// cannot (nothing was written then, and p is as it was). On an error, p is no longer what the
// API holds: the caller drops it.
func (r *reconciler) syncPlan(ctx context.Context, k index.Key, set sliceSet, s *index.Service, have []*discoveryv1.EndpointSlice, p *plan) (bool, error) {
	if p.owner != set.owner.UID || !p.current(have) {
		return false, nil
	}
	cs, ok := p.changes(s)
	if !ok {
		return false, nil
	}
	touched := p.apply(cs, r.cfg.MaxEndpoints)
	p.svc = s
	byName := make(map[string]*discoveryv1.EndpointSlice, len(have))
	for _, es := range have {
		byName[es.Name] = es
	}
	groups := make([]group, 0, len(touched))
	for g := range touched {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, compareGroups)
	// Creates and updates first, deletions last, as a whole sync does.
	var errs []error
	var emptied []*discoveryv1.EndpointSlice
	for _, g := range groups {
		gp := p.groups[g]
		slices.Sort(touched[g])
		for _, i := range touched[g] {
			sl := gp.slice(i)
			cur := byName[sliceName(set.prefix, g, i)]
			if len(sl.endpoints) == 0 {
				if cur != nil {
					emptied = append(emptied, cur)
				}
				continue
			}
			desired := set.slice(g, *sl)
			rv, err := r.writeSlice(ctx, k, set, cur, desired)
			errs = append(errs, err)
			p.written[desired.Name] = rv
		}
		gp.slices = slices.DeleteFunc(gp.slices, func(sl placed) bool { return len(sl.endpoints) == 0 })
		if len(gp.slices) == 0 {
			delete(p.groups, g)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return true, err
	}
	for _, es := range emptied {
		errs = append(errs, r.deleteSlice(ctx, es))
		delete(p.written, es.Name)
	}
	return true, errors.Join(errs...)
}

// plans holds the plans of the global services whose last sync succeeded, by slice set.
type plans struct {
	mu sync.Mutex
	m  map[planKey]*plan
}

type planKey struct {
	index.Key
	set string // sliceSet.blocks
}

// take removes and returns k's plan (nil: none): a sync that fails leaves none.
func (ps *plans) take(k planKey) *plan {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[k]
	delete(ps.m, k)
	return p
}

func (ps *plans) put(k planKey, p *plan) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[planKey]*plan{}
	}
	ps.m[k] = p
}

// reset forgets every plan: a new term starts from the whole state.
func (ps *plans) reset() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.m = nil
}

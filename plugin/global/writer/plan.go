package writer

import (
	"maps"
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/index"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A whole sync computes a global service's whole desired state and compares every slice of it:
// at 10,000 endpoints that is milliseconds and megabytes of garbage for each change of one
// endpoint, and the garbage has the process collect on nearly every change. So a sync of a big
// service (index.Service.Big) leaves a plan: its slices as placed and written. The next sync,
// when the cache shows exactly those slices at the versions written (nobody else touched them),
// places what changed in the index since (index.Changes) by the same rules (layout.go), and
// writes only the slices that changed: a change costs what it changes. Anything else (an edit or
// deletion by someone else, another writer, members or owner changed, an endpoint's hostname
// coming or going, a failed write) and the sync is whole, and leaves a new plan.

// plan is what a sync wrote for one slice set of a big global service.
type plan struct {
	svc     *index.Service // the version written
	owner   types.UID      // of the slices' owner (the -global Service, the ServiceImport)
	names   map[clusterHost]string
	groups  map[group]*layout
	written map[string]string // the resourceVersion of each slice, by name, as written or found equal
}

// newPlan starts the plan of a whole sync of s; names are the -global hostnames that are not
// <host>-<cluster> (nil for MCS slices).
func newPlan(s *index.Service, owner types.UID, names map[clusterHost]string) *plan {
	return &plan{svc: s, owner: owner, names: names, groups: map[group]*layout{}, written: map[string]string{}}
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
// the members, their slices' annotations, the topology, or which hostnames the service has,
// changed. Nothing of p is modified.
func (p *plan) changes(s *index.Service) ([]change, bool) {
	if !slices.Equal(p.svc.Members, s.Members) || !index.SameAnnotations(p.svc, s) || p.svc.Topology() != s.Topology() {
		return nil, false
	}
	gone, came, ok := index.Changes(p.svc, s)
	if !ok || !sameHosts(gone, came) {
		return nil, false
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
		l := p.groups[c.g]
		if l == nil {
			return nil, false
		}
		if c.at, ok = l.at[c.id]; !ok {
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

// sameHosts reports whether the records that came have the hosts of those that went, so the same
// hostnames: a new host may make another's ambiguous.
func sameHosts(gone, came []index.Record) bool {
	hosts := map[clusterHost]int{}
	for i := range gone {
		hosts[clusterHost{gone[i].Cluster, gone[i].Host}]++
	}
	for i := range came {
		hosts[clusterHost{came[i].Cluster, came[i].Host}]--
	}
	for _, n := range hosts {
		if n != 0 {
			return false
		}
	}
	return true
}

// apply places the changes in p's layouts as placeGroup would place the whole state, and returns
// the slices it changed, in order.
func (p *plan) apply(cs []change, max int) []position {
	changed := map[group][]int{}
	rest := map[group][]*endpoint{}
	for i := range cs {
		c := &cs[i]
		if c.at >= 0 {
			changed[c.g] = append(changed[c.g], c.at)
			if p.groups[c.g].update(c.id, c.at, c.endpoint) {
				continue
			}
		}
		if c.endpoint != nil {
			rest[c.g] = append(rest[c.g], c.endpoint)
		}
	}
	for g, r := range rest {
		changed[g] = append(changed[g], p.group(g).fill(r, max)...)
	}
	for g := range changed {
		l := p.groups[g]
		l.prune()
		if len(l.slices) == 0 {
			delete(p.groups, g)
		}
	}
	return positions(changed)
}

func (p *plan) group(g group) *layout {
	l := p.groups[g]
	if l == nil {
		l = &layout{at: map[endpointID]int{}}
		p.groups[g] = l
	}
	return l
}

// slice returns the slice at, nil when p holds none there.
func (p *plan) slice(at position) *placed {
	if l := p.groups[at.g]; l != nil {
		return l.slice(at.index)
	}
	return nil
}

// position is where a slice is: its group and index.
type position struct {
	g     group
	index int
}

// positions lists the slices of indexes, by group and index, once each.
func positions(indexes map[group][]int) []position {
	groups := slices.SortedFunc(maps.Keys(indexes), compareGroups)
	var out []position
	for _, g := range groups {
		is := indexes[g]
		slices.Sort(is)
		for _, i := range slices.Compact(is) {
			out = append(out, position{g, i})
		}
	}
	return out
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

package writer

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// testEndpoint is the desired endpoint of hostname hn, address addr and port 5432+port.
func testEndpoint(hn, addr string, port int, ready bool) endpoint {
	ps, key := slicePorts([]index.Port{{Name: "db", Port: int32(5432 + port), Protocol: "TCP"}})
	return endpoint{id: hn + "/" + addr, ports: ps, portsKey: key, ep: discoveryv1.Endpoint{
		Addresses: []string{addr}, Hostname: &hn, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}}
}

func endpoints(n, port int) []endpoint {
	out := make([]endpoint, n)
	for i := range out {
		out[i] = testEndpoint(fmt.Sprintf("h%03d", i), fmt.Sprintf("10.%d.0.%d", port, i), port, true)
	}
	return out
}

// cachedOf is what the cache holds once l's slices are written.
func cachedOf(l *layout) map[int]*discoveryv1.EndpointSlice {
	out := map[int]*discoveryv1.EndpointSlice{}
	for _, sl := range l.slices {
		out[sl.index] = &discoveryv1.EndpointSlice{Endpoints: slices.Clone(sl.endpoints), Ports: sl.ports}
	}
	return out
}

func ids(l *layout) map[int][]string {
	out := map[int][]string{}
	for _, sl := range l.slices {
		for _, e := range sl.endpoints {
			out[sl.index] = append(out[sl.index], *e.Hostname)
		}
	}
	return out
}

func TestPlace(t *testing.T) {
	want := endpoints(250, 0)
	first := placeGroup(want, nil, 100)
	if len(first.slices) != 3 || len(first.slices[0].endpoints) != 100 || len(first.slices[2].endpoints) != 50 {
		t.Fatalf("250 endpoints: %d slices", len(first.slices))
	}
	current := ids(first)

	// Nothing changed: the same slices, the same order.
	if again := ids(placeGroup(want, cachedOf(first), 100)); fmt.Sprint(again) != fmt.Sprint(current) {
		t.Error("no change moved endpoints")
	}

	// One endpoint goes, one comes: only the slices holding them change.
	changed := append(slices.Clone(want[:150]), want[151:]...)
	changed = append(changed, testEndpoint("new", "10.1.0.1", 0, true))
	after := ids(placeGroup(changed, cachedOf(first), 100))
	if fmt.Sprint(after[0]) != fmt.Sprint(current[0]) {
		t.Error("slice 0 changed though none of its endpoints did")
	}
	if len(after[1]) != 100 || slices.Contains(after[1], "h150") || !slices.Contains(after[1], "new") {
		t.Errorf("slice 1 should lose h150 and take the new endpoint: %v", after[1])
	}
	if fmt.Sprint(after[2]) != fmt.Sprint(current[2]) {
		t.Error("slice 2 changed")
	}

	// Slices fuller than max (max was lowered) keep max endpoints; the others move.
	over := placeGroup(want, cachedOf(first), 30)
	if ids(over)[0][29] != "h029" || len(over.slices) != 9 || over.slice(3) == nil || ids(over)[3][0] != "h030" {
		t.Errorf("slices of 30 from slices of 100: %v", ids(over))
	}

	// Endpoints with other ports get slices of their own; an emptied slice is reused in place.
	mixed := append(slices.Clone(want[:100]), endpoints(3, 1)...)
	res := placeGroup(mixed, cachedOf(first), 100)
	if len(res.slices) != 2 || res.slices[0].portsKey != want[0].portsKey || res.slice(1) == nil ||
		res.slice(1).portsKey != mixed[100].portsKey || len(res.slice(1).endpoints) != 3 {
		t.Errorf("mixed ports: %v", ids(res))
	}
}

// TestPlacementMatchesWhole changes a group's endpoints at random (readiness, ports, endpoints
// coming and going, a few at once, slices of 1 to 6) and places the changes in the layout the
// last step made, as a sync from a plan does (plan.apply); and the whole desired state in that
// layout as the cache holds it, as a whole sync does (placeGroup). Both must make the same slices,
// endpoint for endpoint and in the same order, and apply must name exactly the slices that differ
// from the cache's: what the writer writes.
func TestPlacementMatchesWhole(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 29))
		max, c := 1+rng.IntN(6), newChurn(rng)
		p := newPlan(nil, "", nil)
		for _, g := range c.groups {
			p.groups[g] = placeGroup(c.endpoints(g), nil, max)
		}
		for step := range 50 {
			cached := map[group]map[int]*discoveryv1.EndpointSlice{}
			for _, g := range c.groups {
				cached[g] = cachedOf(layoutOf(p, g))
			}
			cs := c.change(p)
			dirty := p.apply(cs, max)
			var differ []position
			for _, g := range c.groups {
				whole := placeGroup(c.endpoints(g), cached[g], max)
				if d := sameLayout(layoutOf(p, g), whole); d != "" {
					t.Fatalf("seed %d, step %d, %v: from changes, not as whole: %s", seed, step, g, d)
				}
				differ = append(differ, differing(g, cached[g], whole)...)
			}
			if fmt.Sprint(dirty) != fmt.Sprint(differ) {
				t.Fatalf("seed %d, step %d: changed %v, differ %v", seed, step, dirty, differ)
			}
		}
	}
}

// layoutOf is p's layout of g, empty when p has none.
func layoutOf(p *plan, g group) *layout {
	if l := p.groups[g]; l != nil {
		return l
	}
	return &layout{at: map[endpointID]int{}}
}

// sameLayout describes how a and b differ; "" when they do not.
func sameLayout(a, b *layout) string {
	if !maps.Equal(a.at, b.at) {
		return fmt.Sprintf("endpoints at %v, whole %v", a.at, b.at)
	}
	if len(a.slices) != len(b.slices) {
		return fmt.Sprintf("slices %v, whole %v", ids(a), ids(b))
	}
	for i := range a.slices {
		x, y := a.slices[i], b.slices[i]
		if x.index != y.index || x.portsKey != y.portsKey || portsKey(x.ports) != portsKey(y.ports) || !endpointsEqual(x.endpoints, y.endpoints) {
			return fmt.Sprintf("slice %d: %+v, whole %+v", x.index, x, y)
		}
	}
	return ""
}

// differing lists the slices of group g where l differs from cached.
func differing(g group, cached map[int]*discoveryv1.EndpointSlice, l *layout) []position {
	var out []position
	for _, sl := range l.slices {
		if es := cached[sl.index]; es == nil || portsKey(es.Ports) != sl.portsKey || !endpointsEqual(es.Endpoints, sl.endpoints) {
			out = append(out, position{g, sl.index})
		}
	}
	for i := range cached {
		if l.slice(i) == nil {
			out = append(out, position{g, i})
		}
	}
	slices.SortFunc(out, func(a, b position) int { return cmp.Compare(a.index, b.index) })
	return out
}

// churn is the desired endpoints of two groups, which change at random.
type churn struct {
	rng    *rand.Rand
	groups []group
	want   map[group]map[endpointID]endpoint
	next   int
}

func newChurn(rng *rand.Rand) *churn {
	c := &churn{rng: rng, groups: []group{{"a", discoveryv1.AddressTypeIPv4}, {"b", discoveryv1.AddressTypeIPv6}}, want: map[group]map[endpointID]endpoint{}}
	for _, g := range c.groups {
		c.want[g] = map[endpointID]endpoint{}
		for range 5 + rng.IntN(30) {
			c.add(g)
		}
	}
	return c
}

// add adds a new endpoint to g, of one of three ports; hostnames are prefixes of one another
// (h1, h1-0, h10), and addresses too.
func (c *churn) add(g group) endpoint {
	c.next++
	hn := fmt.Sprintf("h%d", c.next/2)
	if c.next%2 == 1 {
		hn += "-0"
	}
	e := testEndpoint(hn, fmt.Sprintf("10.0.%d.%d", c.next/250, c.next%250), c.rng.IntN(3), c.rng.IntN(4) > 0)
	c.want[g][idOf(&e.ep)] = e
	return e
}

func (c *churn) endpoints(g group) []endpoint { return slices.Collect(maps.Values(c.want[g])) }

// change makes one to four changes of endpoints, each once, and returns them as plan.changes
// would.
func (c *churn) change(p *plan) []change {
	var out []change
	changed := map[endpointID]bool{}
	for range 1 + c.rng.IntN(4) {
		g := c.groups[c.rng.IntN(len(c.groups))]
		ids := slices.SortedFunc(maps.Keys(c.want[g]), func(a, b endpointID) int {
			return cmp.Or(cmp.Compare(a.hostname, b.hostname), cmp.Compare(a.addr, b.addr))
		})
		op := c.rng.IntN(10)
		if op < 2 || len(ids) == 0 {
			e := c.add(g)
			changed[idOf(&e.ep)] = true
			out = append(out, change{g: g, id: idOf(&e.ep), at: -1, endpoint: &e})
			continue
		}
		id := ids[c.rng.IntN(len(ids))]
		if changed[id] {
			continue
		}
		changed[id] = true
		e := c.want[g][id]
		switch {
		case op < 6: // readiness
			e.ep.Conditions.Ready = ptr.To(!*e.ep.Conditions.Ready)
		case op < 8: // other ports: it moves
			next := testEndpoint(id.hostname, id.addr, c.rng.IntN(3), *e.ep.Conditions.Ready)
			if next.portsKey == e.portsKey {
				next = testEndpoint(id.hostname, id.addr, 3, *e.ep.Conditions.Ready)
			}
			e = next
		default: // gone
			delete(c.want[g], id)
			out = append(out, change{g: g, id: id, at: p.groups[g].at[id]})
			continue
		}
		c.want[g][id] = e
		out = append(out, change{g: g, id: id, at: p.groups[g].at[id], endpoint: &e})
	}
	return out
}

// BenchmarkPlace places the 10,000 desired endpoints of BenchmarkDesiredEndpoints' service in the
// 100 slices that already hold them: what every whole sync of it does after computing them.
func BenchmarkPlace(b *testing.B) {
	_, _, _, _, svc := bigGlobalService(10000)
	var want []endpoint
	for _, w := range desiredEndpoints(svc, hostnames(svc.Records())) {
		want = w
	}
	cached := cachedOf(placeGroup(want, nil, 100))
	b.ReportAllocs()
	for b.Loop() {
		if n := len(placeGroup(want, cached, 100).slices); n != 100 {
			b.Fatal(n)
		}
	}
}

package index_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
)

// TestMergeMatchesBuildRandom drives many seeded random services through random sequences of
// changes and checks after each that merging it into the previous build (Topology.Rebuild) gives
// what building it from scratch does. Beside TestRebuildMatchesBuild's one shape, each seed draws
// its own: sizes on both sides of the size that makes a service big, slices of 5 to 100, dual-stack
// pods (an IPv4 and an IPv6 slice of the same hostnames), several ports, local placements, per-pod
// mirrors or none; and a step may make several changes at once, more than the merge pairs, or
// enough to cross the size either way. A failure names its seed: rerun it alone with
// -run 'TestMergeMatchesBuildRandom/seed=N$'.
func TestMergeMatchesBuildRandom(t *testing.T) {
	seeds, steps := 64, 120
	if testing.Short() {
		seeds = 16
	}
	total, merged, whole := 0, 0, 0 // steps; merged; rebuilt whole though the merge was tried
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			m := newMergeModel(seed)
			topo := indextest.Topology()
			prev := topo.Build(m.key, m.src)
			given := map[*index.Slice]bool{}
			for step := range steps {
				what := m.step()
				var sls []*index.Slice
				for _, mb := range m.members {
					for _, sl := range m.src.Slices(mb) {
						if !given[sl] {
							given[sl] = true
							sls = append(sls, sl)
						}
					}
				}
				m.given = append(m.given, sls...)
				got, want := topo.Rebuild(prev, m.key, m.src), topo.Build(m.key, m.src)
				fail := func(format string, args ...any) {
					t.Helper()
					t.Fatalf("seed %d, step %d (%s): %s", seed, step, what, fmt.Sprintf(format, args...))
				}
				if d := index.DiffServices(got, want); d != "" {
					fail("merged, not as built whole: %s", d)
				}
				if d := index.CheckViews(got); d != "" {
					fail("%s", d)
				}
				if d := index.PointsInto(got, m.given); d != "" {
					fail("%s", d)
				}
				if gone, came, ok := index.Changes(prev, got); ok {
					if d := index.CheckChanges(prev, got, gone, came); d != "" {
						fail("changes: %s", d)
					}
				}
				total++
				switch {
				case index.Merged(prev, got):
					merged++
				case prev.Big() && got != nil && slices.Equal(prev.Members, got.Members):
					whole++
				}
				prev = got
			}
		})
	}
	t.Logf("%d steps: %d merged, %d rebuilt whole after trying to merge", total, merged, whole)
	// The merge, and its ways back to a whole rebuild, must be what was tested.
	if merged < total/3 || whole < total/20 {
		t.Errorf("%d steps: only %d merged and %d rebuilt whole after trying", total, merged, whole)
	}
}

// mergeModel is a random global service and the changes made to it, its shape drawn from its seed.
type mergeModel struct {
	rng     *rand.Rand
	src     *indextest.Source
	key     index.Key
	members []*index.Member // as the source has them
	given   []*index.Slice  // every slice the source ever had
	copies  []*index.Slice  // slices holding a copy of another's endpoint, to go in a later step

	next      int     // for hostnames and addresses never used
	dual      float64 // the share of pods with an IPv6 address beside their IPv4 one
	sliceSize int
	pods      bool // mirrors have per-pod mirrors
	ports     []index.Port
}

func newMergeModel(seed uint64) *mergeModel {
	rng := rand.New(rand.NewPCG(seed, 29))
	m := &mergeModel{rng: rng, src: indextest.New(), key: index.Key{Namespace: "db", Name: "big"},
		dual: []float64{0, 0, 0.3, 1}[rng.IntN(4)], sliceSize: []int{5, 20, 50, 100}[rng.IntN(4)], pods: rng.IntN(4) > 0,
		ports: []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}}
	if rng.IntN(2) == 0 {
		m.ports = append(m.ports, index.Port{Name: "metrics", Port: 9090, Protocol: "TCP"})
	}
	// About 100 to 500 records in all: some seeds start below the size of a big service, some
	// above, and changes cross it.
	clusters := []string{""}
	for _, c := range []string{"west", "north", "south"} {
		if rng.IntN(2) == 0 {
			clusters = append(clusters, c)
		}
	}
	per := (100 + rng.IntN(400)) / len(clusters)
	for _, c := range clusters {
		m.addMember(c, c, per)
	}
	return m
}

// addMember adds a member of cluster, named by suffix, with slices of about n records.
func (m *mergeModel) addMember(cluster, suffix string, n int) {
	name := m.key.Name
	if suffix != "" {
		name += "-" + suffix
	}
	mb := &index.Member{Namespace: m.key.Namespace, Name: name, Origin: index.Origin{Cluster: cluster, Ports: m.ports}}
	m.src.Add(m.key, mb, m.pods2slices(mb, n)...)
	m.members = append(m.members, mb)
	m.podMirrors(mb, 0)
}

// pods2slices makes slices of about n records of new pods of mb: their IPv4 addresses, and the
// IPv6 ones of those that have one in slices of their own.
func (m *mergeModel) pods2slices(mb *index.Member, n int) []*index.Slice {
	var v4, v6 []index.Endpoint
	for len(v4)+len(v6) < n {
		e4, e6, dual := m.pod(mb)
		v4 = append(v4, e4)
		if dual {
			v6 = append(v6, e6)
		}
	}
	var out []*index.Slice
	for _, eps := range [][]index.Endpoint{v4, v6} {
		for len(eps) > 0 {
			k := min(len(eps), m.sliceSize)
			out = append(out, m.slice(mb, eps[:k:k]))
			eps = eps[k:]
		}
	}
	return out
}

// pod returns the endpoints of a new pod of mb: IPv4, and IPv6 when dual.
func (m *mergeModel) pod(mb *index.Member) (e4, e6 index.Endpoint, dual bool) {
	m.next++
	host := fmt.Sprintf("p-%d", m.next)
	e4 = indextest.Endpoint(host, fmt.Sprintf("10.%d.%d.%d", m.next/65536, m.next/256%256, m.next%256))
	e6 = indextest.Endpoint(host, fmt.Sprintf("fd00::%x", m.next))
	if m.rng.IntN(5) == 0 {
		e4 = indextest.NotReady(e4)
		e4.Terminating = m.rng.IntN(2) == 0
		e6.Ready, e6.Serving, e6.Terminating = e4.Ready, e4.Serving, e4.Terminating
	}
	if mb.Local() {
		p := &index.Placement{Zone: "z1", NodeName: fmt.Sprint("n-", m.rng.IntN(3)), Pod: host}
		e4.Local, e6.Local = p, p
	}
	return e4, e6, m.rng.Float64() < m.dual
}

// slice returns a slice of eps, of the family of the first, with the ports a slice of mb has: a
// mirror's carry the remote target ports.
func (m *mergeModel) slice(mb *index.Member, eps []index.Endpoint) *index.Slice {
	ports := m.ports
	if !mb.Local() {
		ports = slices.Clone(ports)
		for i := range ports {
			ports[i].Port += 10000
		}
	}
	return indextest.Slice(ports, eps...)
}

// podMirrors gives every endpoint of mirror mb a per-pod mirror, down ones down in a hundred
// (when the seed's mirrors have them).
func (m *mergeModel) podMirrors(mb *index.Member, down int) {
	if !mb.Local() && m.pods {
		m.src.SetPodMirrorsOf(mb, func() bool { return m.rng.IntN(100) >= down })
	}
}

// step makes one to three random changes, as one batch of events, and says what they were.
func (m *mergeModel) step() string {
	var what []string
	// A copy of an endpoint (a slice being rebalanced) lasts a step or a few.
	for i := 0; i < len(m.copies); i++ {
		if m.rng.IntN(2) == 0 {
			what = append(what, m.dropSlice(m.copies[i]))
			m.copies = slices.Delete(m.copies, i, i+1)
			i--
		}
	}
	n := 1
	if m.rng.IntN(4) == 0 {
		n += 1 + m.rng.IntN(2)
	}
	for range n {
		what = append(what, m.change())
	}
	return strings.Join(what, ", ")
}

// dropSlice drops sl from whichever member has it.
func (m *mergeModel) dropSlice(sl *index.Slice) string {
	for _, mb := range m.members {
		sls := m.src.Slices(mb)
		if i := slices.Index(sls, sl); i >= 0 {
			m.src.SetSlices(mb, slices.Delete(slices.Clone(sls), i, i+1)...)
			return "a copy goes"
		}
	}
	return "a copy went with its member"
}

// edit replaces slice i of mb's sls with a copy changed by f, which gets its own endpoints.
func (m *mergeModel) edit(mb *index.Member, sls []*index.Slice, i int, f func(sl *index.Slice)) {
	sl := *sls[i]
	sl.Endpoints = slices.Clone(sl.Endpoints)
	f(&sl)
	sls[i] = &sl
	m.src.SetSlices(mb, sls...)
}

// change makes one random change and says what it was.
func (m *mergeModel) change() string {
	rng := m.rng
	mb := m.members[rng.IntN(len(m.members))]
	sls := slices.Clone(m.src.Slices(mb))
	if len(sls) == 0 {
		m.src.SetSlices(mb, m.pods2slices(mb, 1+rng.IntN(30))...)
		return "slices come to an empty member"
	}
	i := rng.IntN(len(sls))
	e := func(sl *index.Slice) *index.Endpoint { return &sl.Endpoints[rng.IntN(len(sl.Endpoints))] }
	switch op := rng.IntN(100); {
	case op < 25: // endpoints' readiness flips: the common change
		k := 1 + rng.IntN(3)
		m.edit(mb, sls, i, func(sl *index.Slice) {
			for range k {
				ep := e(sl)
				ep.Ready, ep.Serving = !ep.Ready, !ep.Ready
			}
		})
		return fmt.Sprintf("%d readiness flips", k)
	case op < 30: // serving or terminating alone
		m.edit(mb, sls, i, func(sl *index.Slice) {
			ep := e(sl)
			ep.Serving, ep.Terminating = !ep.Serving, !ep.Terminating
		})
		return "serving and terminating"
	case op < 34 && mb.Local(): // a placement: an equal one anew, or another node
		same := rng.IntN(2) == 0
		m.edit(mb, sls, i, func(sl *index.Slice) {
			ep := e(sl)
			p := *ep.Local
			if !same {
				p.NodeName += "x"
			}
			ep.Local = &p
		})
		return fmt.Sprintf("a placement (equal %v)", same)
	case op < 38: // an equal slice anew (an update that changed nothing we keep)
		m.edit(mb, sls, i, func(*index.Slice) {})
		return "an equal slice"
	case op < 44: // an endpoint comes or goes, anywhere in the slice
		m.edit(mb, sls, i, func(sl *index.Slice) {
			if j := rng.IntN(len(sl.Endpoints)); len(sl.Endpoints) > 1 && rng.IntN(2) == 0 {
				sl.Endpoints = slices.Delete(sl.Endpoints, j, j+1)
				return
			}
			e4, e6, _ := m.pod(mb)
			if sl.Family == index.IPv6 {
				e4 = e6
			}
			sl.Endpoints = slices.Insert(sl.Endpoints, rng.IntN(len(sl.Endpoints)+1), e4)
		})
		return "an endpoint comes or goes"
	case op < 47: // a hostname or an address changes
		host := rng.IntN(2) == 0
		m.edit(mb, sls, i, func(sl *index.Slice) {
			m.next++
			ep, v := e(sl), fmt.Sprintf("fd00::%x", m.next)
			if host {
				ep.Host += "r"
			} else if ep.Addr().Is4() {
				v = fmt.Sprintf("10.%d.%d.%d", 100+m.next/65536, m.next/256%256, m.next%256)
			}
			if !host {
				a := indextest.Endpoint("", v)
				ep.SetAddr(a.Addr())
			}
		})
		return fmt.Sprintf("a hostname or an address (host %v)", host)
	case op < 53: // slices come
		k := 1 + rng.IntN(m.sliceSize)
		m.src.SetSlices(mb, slices.Insert(sls, rng.IntN(len(sls)+1), m.pods2slices(mb, k)...)...)
		return fmt.Sprintf("slices of %d records come", k)
	case op < 58 && len(sls) > 1: // a slice goes
		m.src.SetSlices(mb, slices.Delete(sls, i, i+1)...)
		return "a slice goes"
	case op < 61: // every slice of the member updated at once: more than the merge pairs
		for j := range sls {
			m.edit(mb, sls, j, func(sl *index.Slice) {
				if ep := e(sl); rng.IntN(3) == 0 {
					ep.Ready, ep.Serving = !ep.Ready, !ep.Ready
				}
			})
		}
		return fmt.Sprintf("all %d slices updated", len(sls))
	case op < 63: // many small slices come
		var more []*index.Slice
		for range 17 + rng.IntN(8) {
			more = append(more, m.pods2slices(mb, 1)...)
		}
		m.src.SetSlices(mb, append(sls, more...)...)
		return fmt.Sprintf("%d small slices come", len(more))
	case op < 66 && len(sls) > 1: // rebalancing: a slice split, or two made one
		j := (i + 1) % len(sls)
		if a, b := sls[i], sls[j]; a.Family == b.Family && rng.IntN(2) == 0 {
			joined := m.slice(mb, slices.Concat(a.Endpoints, b.Endpoints))
			sls[i] = joined
			m.src.SetSlices(mb, slices.Delete(sls, j, j+1)...)
			return "two slices made one"
		}
		if eps := sls[i].Endpoints; len(eps) > 1 {
			k := len(eps) / 2
			sls[i] = m.slice(mb, eps[:k:k])
			m.src.SetSlices(mb, slices.Insert(sls, i+1, m.slice(mb, eps[k:]))...)
		}
		return "a slice split"
	case op < 69: // an endpoint moves to another slice of its family, in one change
		from := sls[i]
		j := slices.IndexFunc(sls, func(sl *index.Slice) bool { return sl != from && sl.Family == from.Family })
		if j < 0 || len(from.Endpoints) < 2 {
			return "no endpoint to move"
		}
		k := rng.IntN(len(from.Endpoints))
		ep := from.Endpoints[k]
		m.edit(mb, sls, i, func(sl *index.Slice) { sl.Endpoints = slices.Delete(sl.Endpoints, k, k+1) })
		m.edit(mb, sls, j, func(sl *index.Slice) { sl.Endpoints = append(sl.Endpoints, ep) })
		return "an endpoint moves"
	case op < 73: // a copy of an endpoint in a slice of its own, ready or not, for a while
		ep := *e(sls[i])
		if rng.IntN(2) == 0 {
			ep = indextest.NotReady(ep)
		}
		c := &index.Slice{Family: sls[i].Family, Ports: sls[i].Ports, Endpoints: []index.Endpoint{ep}}
		m.copies = append(m.copies, c)
		m.src.SetSlices(mb, append(sls, c)...)
		return "a copy of an endpoint"
	case op < 76: // a second address under a hostname, ready
		e4, e6, _ := m.pod(mb)
		if sls[i].Family == index.IPv6 {
			e4 = e6
		}
		e4.Host, e4.Ready, e4.Serving, e4.Terminating = e(sls[i]).Host, true, true, false
		m.src.SetSlices(mb, append(sls, m.slice(mb, []index.Endpoint{e4}))...)
		return "a duplicate hostname"
	case op < 80: // a slice's ports: another number (local), a name the Service has not (mirror)
		m.edit(mb, sls, i, func(sl *index.Slice) {
			sl.Ports = slices.Clone(sl.Ports)
			p := &sl.Ports[rng.IntN(len(sl.Ports))]
			switch {
			case mb.Local():
				p.Port++
			case p.Name == "other":
				p.Name = "db"
			default:
				p.Name = "other"
			}
		})
		return "a slice's ports"
	case op < 82 && len(sls) > 2: // the source lists them in another order
		rng.Shuffle(len(sls), func(i, j int) { sls[i], sls[j] = sls[j], sls[i] })
		m.src.SetSlices(mb, sls...)
		return "another order"
	case op < 87 && !mb.Local() && m.pods && len(m.src.PodMirrors(mb)) > 0: // per-pod mirrors flip
		pods := m.src.PodMirrors(mb)
		k := 1 + rng.IntN(3)
		for range k {
			p := &pods[rng.IntN(len(pods))]
			p.Ready = !p.Ready
		}
		m.src.SetPodMirrors(mb, pods...)
		return fmt.Sprintf("%d per-pod mirrors flip", k)
	case op < 90 && !mb.Local(): // the gateway: per-pod mirrors all anew, going down or up; or none
		if rng.IntN(4) == 0 {
			m.src.SetPodMirrors(mb)
			return "no per-pod mirrors"
		}
		down := []int{0, 0, 50, 100}[rng.IntN(4)]
		m.podMirrors(mb, down)
		return fmt.Sprintf("per-pod mirrors anew, %d%% down", down)
	case op < 92 && !mb.Local(): // a mirror slice's addresses without hostname, or its annotations
		m.edit(mb, sls, i, func(sl *index.Slice) {
			if rng.IntN(2) == 0 {
				sl.Unnamed = int32(rng.IntN(3))
			} else {
				sl.Annotations = &index.Annotations{{Key: index.AnnotationGatewayIdentity, Value: fmt.Sprint("gateway-", rng.IntN(3))}}
			}
		})
		return "a mirror slice's unnamed addresses or annotations"
	case op < 94: // half the slices of every member go, or as many come: across the size of a big service
		shrink := rng.IntN(2) == 0
		for _, mb := range m.members {
			sls := slices.Clone(m.src.Slices(mb))
			if shrink {
				sls = sls[:(len(sls)+1)/2]
			} else {
				sls = append(sls, m.pods2slices(mb, 20+rng.IntN(100))...)
			}
			m.src.SetSlices(mb, sls...)
		}
		return fmt.Sprintf("every member's slices halve (%v) or grow", shrink)
	case op < 96 && len(m.members) > 1: // a member goes
		j := 1 + rng.IntN(len(m.members)-1)
		m.src.Remove(m.key, m.members[j])
		m.members = slices.Delete(m.members, j, j+1)
		return "a member goes"
	case op < 98: // a member that is skipped comes: one naming this cluster, or a second from a cluster
		if rng.IntN(2) == 0 {
			m.addMember("east", "clash", 10)
		} else {
			c := m.members[rng.IntN(len(m.members))].Cluster
			if c == "" {
				c = "west"
			}
			m.addMember(c, c+"-2", 10)
		}
		return "a skipped member comes"
	default: // a member comes (or comes back)
		for _, c := range []string{"west", "north", "south"} {
			if !slices.ContainsFunc(m.members, func(mb *index.Member) bool { return mb.Cluster == c }) {
				m.addMember(c, c, 20+rng.IntN(150))
				return "a member comes"
			}
		}
		return "nothing"
	}
}

package index_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
)

// TestRebuildMatchesBuild changes a big global service at random, one or a few slices at a time
// (readiness, addresses, hostnames, copies of an endpoint in two slices, IPv6, slices coming and
// going, per-pod mirrors going down, members coming and going), and after every change checks
// that rebuilding it from the previous build (merged, when it may) answers exactly what building
// it from scratch does.
func TestRebuildMatchesBuild(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			r := newRandomService(rng)
			topo := indextest.Topology()
			prev := topo.Build(r.Key, r.Src)
			merged, told := 0, 0
			var given []*index.Slice // every slice the source ever had
			for step := range 300 {
				what := r.change()
				for _, m := range r.Members {
					given = append(given, r.Src.Slices(m)...)
				}
				got, want := topo.Rebuild(prev, r.Key, r.Src), topo.Build(r.Key, r.Src)
				if d := index.DiffServices(got, want); d != "" {
					t.Fatalf("step %d (%s): rebuilt from the previous build, not as built whole: %s", step, what, d)
				}
				if d := index.CheckViews(got); d != "" {
					t.Fatalf("step %d (%s): %s", step, what, d)
				}
				if d := index.PointsInto(got, given); d != "" {
					t.Fatalf("step %d (%s): %s", step, what, d)
				}
				if index.Merged(prev, got) {
					merged++
				}
				if gone, came, ok := index.Changes(prev, got); ok {
					if d := index.CheckChanges(prev, got, gone, came); d != "" {
						t.Fatalf("step %d (%s): changes: %s", step, what, d)
					}
					told++
				} else if index.Merged(prev, got) {
					t.Fatalf("step %d (%s): merged, but its changes not told", step, what)
				}
				prev = got
			}
			// The merge must have been what was tested, most of the time.
			if merged < 150 || told < merged {
				t.Fatalf("only %d of 300 rebuilds merged, %d changes told", merged, told)
			}
		})
	}
}

// randomService is a global service of a few hundred endpoints in slices of up to 40, local and
// mirrored, that change at random.
type randomService struct {
	*indextest.RandomService
	copied *index.Member // whose last slice holds a copy of an endpoint, gone in the next change
}

func newRandomService(rng *rand.Rand) *randomService {
	r := &randomService{RandomService: indextest.NewRandomService(rng)}
	for _, cluster := range []string{"", "west", "north"} {
		r.addMember(cluster)
	}
	return r
}

func (r *randomService) addMember(cluster string) {
	var sls []*index.Slice
	for range 6 {
		sls = append(sls, r.slice(30))
	}
	r.AddMember(cluster, sls...)
}

// slice is a new slice of n endpoints, IPv6 one time in five.
func (r *randomService) slice(n int) *index.Slice {
	v6 := r.Rand.IntN(5) == 0
	eps := make([]index.Endpoint, 0, n)
	for range n {
		eps = append(eps, r.endpoint(v6))
	}
	return indextest.Slice(r.Ports, eps...)
}

// endpoint is a new endpoint, not ready one time in four (terminating one time in two of those).
func (r *randomService) endpoint(v6 bool) index.Endpoint {
	e := r.Endpoint(v6)
	if r.Rand.IntN(4) == 0 {
		e = indextest.NotReady(e)
		e.Terminating = r.Rand.IntN(2) == 0
	}
	return e
}

// change makes one random change and says what it was.
func (r *randomService) change() string {
	if m := r.copied; m != nil { // a rebalancing ends: a service with copies is built whole
		r.copied = nil
		if slices.Contains(r.Members, m) {
			sls := r.Src.Slices(m)
			r.Src.SetSlices(m, sls[:len(sls)-1]...)
			return "the copy goes"
		}
	}
	m := r.Members[r.Rand.IntN(len(r.Members))]
	sls := slices.Clone(r.Src.Slices(m))
	pick := func() int { return r.Rand.IntN(len(sls)) }
	switch op := r.Rand.IntN(100); {
	case op < 45 && len(sls) > 0: // one endpoint's readiness flips: the common change
		i := pick()
		sl := *sls[i]
		sl.Endpoints = slices.Clone(sl.Endpoints)
		e := &sl.Endpoints[r.Rand.IntN(len(sl.Endpoints))]
		e.Ready, e.Serving = !e.Ready, !e.Ready
		sls[i] = &sl
		r.Src.SetSlices(m, sls...)
		return "readiness flip"
	case op < 60 && len(sls) > 0: // endpoints come and go in one slice
		i := pick()
		sl := *sls[i]
		sl.Endpoints = slices.Clone(sl.Endpoints)
		if len(sl.Endpoints) > 1 && r.Rand.IntN(2) == 0 {
			sl.Endpoints = slices.Delete(sl.Endpoints, 0, 1)
		} else {
			sl.Endpoints = append(sl.Endpoints, r.endpoint(sl.Family == index.IPv6))
		}
		sls[i] = &sl
		r.Src.SetSlices(m, sls...)
		return "endpoints come and go"
	case op < 65 && len(sls) > 0: // a copy of another slice's endpoint, ready or not (rebalancing)
		from := sls[pick()]
		e := from.Endpoints[r.Rand.IntN(len(from.Endpoints))]
		if r.Rand.IntN(2) == 0 {
			e = indextest.NotReady(e)
		}
		sls = append(sls, &index.Slice{Family: from.Family, Ports: from.Ports, Endpoints: []index.Endpoint{e}})
		r.Src.SetSlices(m, sls...)
		r.copied = m
		return "a copy of an endpoint"
	case op < 72 && len(sls) > 0: // a second address under a hostname: a duplicate hostname
		from := sls[pick()]
		e := r.endpoint(from.Family == index.IPv6)
		e.Host = from.Endpoints[0].Host
		e.Ready, e.Serving = true, true
		sls = append(sls, &index.Slice{Family: from.Family, Ports: from.Ports, Endpoints: []index.Endpoint{e}})
		r.Src.SetSlices(m, sls...)
		return "a duplicate hostname"
	case op < 74 && m.Local() && len(sls) > 0: // a local slice's port changes: its records' ports
		i := pick()
		sl := *sls[i]
		sl.Ports = []index.Port{{Name: "db", Port: sl.Ports[0].Port + 1, Protocol: "TCP"}}
		sls[i] = &sl
		r.Src.SetSlices(m, sls...)
		return "a port changes"
	case op < 80 && len(sls) > 1: // a slice goes
		i := pick()
		r.Src.SetSlices(m, slices.Delete(sls, i, i+1)...)
		return "a slice goes"
	case op < 84 && len(sls) > 2: // the source lists them in another order
		r.Rand.Shuffle(len(sls), func(i, j int) { sls[i], sls[j] = sls[j], sls[i] })
		r.Src.SetSlices(m, sls...)
		return "another order"
	case op < 88: // a slice comes
		r.Src.SetSlices(m, append(sls, r.slice(1+r.Rand.IntN(30)))...)
		return "a slice comes"
	case op < 91 && !m.Local(): // the gateway: per-pod mirrors go down or up
		r.PodMirrors(m, []int{0, 50, 100}[r.Rand.IntN(3)])
		return "per-pod mirrors"
	case op < 94 && !m.Local() && len(r.Src.PodMirrors(m)) > 0: // one per-pod mirror flips
		pods := r.Src.PodMirrors(m)
		p := &pods[r.Rand.IntN(len(pods))]
		p.Ready = !p.Ready
		r.Src.SetPodMirrors(m, pods...)
		return "one per-pod mirror"
	case op < 95 && !m.Local() && len(sls) > 0: // a mirror slice's addresses without hostname, or its annotations
		i := pick()
		sl := *sls[i]
		if r.Rand.IntN(2) == 0 {
			sl.Unnamed = int32(r.Rand.IntN(3))
		} else {
			sl.Annotations = &index.Annotations{{Key: index.AnnotationGatewayIdentity, Value: fmt.Sprint("gateway-", r.Rand.IntN(3))}}
		}
		sls[i] = &sl
		r.Src.SetSlices(m, sls...)
		return "a mirror slice's unnamed addresses or annotations"
	case op < 96 && len(r.Members) > 2: // a member goes (two stay: the service stays big enough to merge)
		i := r.Rand.IntN(len(r.Members))
		r.Src.Remove(r.Key, r.Members[i])
		r.Members = slices.Delete(r.Members, i, i+1)
		return "a member goes"
	default: // a member comes (or comes back), with its own slices
		for _, c := range []string{"", "west", "north", "south"} {
			if !slices.ContainsFunc(r.Members, func(m *index.Member) bool { return m.Cluster == c }) {
				r.addMember(c)
				return "a member comes"
			}
		}
		return "nothing"
	}
}

// TestSnapshotCopyOnWrite publishes random additions, changes and removals of global services
// (enough names to split leaves, names in several namespaces) and checks every snapshot against
// a model after each publication, and that older snapshots still show what they did.
func TestSnapshotCopyOnWrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	src := indextest.New()
	ix := index.New(indextest.Topology(), src)
	ix.Start()
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	members := map[index.Key]*index.Member{}
	type view struct {
		snap  *index.Snapshot
		ready map[index.Key]int // A records per global service
	}
	var history []view
	check := func(v view) {
		t.Helper()
		s := v.snap
		if s.Len() != len(v.ready) || len(s.Keys()) != len(v.ready) {
			t.Fatalf("Len %d, Keys %d, want %d", s.Len(), len(s.Keys()), len(v.ready))
		}
		nss := map[string][]string{}
		answering := map[string]bool{}
		for k, n := range v.ready {
			svc := s.Service(k)
			if svc == nil || len(svc.All().A) != n {
				t.Fatalf("%v: %v, want %d records", k, svc, n)
			}
			nss[k.Name] = append(nss[k.Name], k.Namespace)
			answering[k.Namespace] = answering[k.Namespace] || n > 0
		}
		for name, want := range nss {
			slices.Sort(want)
			if got := index.Namespaces(s.Named(name)); !slices.Equal(got, want) {
				t.Fatalf("Namespaces(%s) = %v, want %v", name, got, want)
			}
		}
		for _, ns := range []string{"a", "b", "c"} {
			if s.HasNamespace(ns) != answering[ns] {
				t.Fatalf("HasNamespace(%s) = %v, want %v", ns, s.HasNamespace(ns), answering[ns])
			}
		}
		if s.Service(index.Key{Namespace: "zz", Name: "s1"}) != nil || index.Namespaces(s.Named("none")) != nil {
			t.Fatal("a service that never was")
		}
		if most, limit := index.LargestLeaf(s); most > limit {
			t.Fatalf("a leaf of %d names: they split beyond %d", most, limit)
		}
	}
	ready := map[index.Key]int{}
	for range 200 {
		for range 1 + rng.IntN(20) {
			k := index.Key{Namespace: []string{"a", "b"}[rng.IntN(2)], Name: fmt.Sprint("s", rng.IntN(300))}
			if rng.IntN(5) == 0 { // a namespace of few services, that answers or not
				k = index.Key{Namespace: "c", Name: fmt.Sprint("s", rng.IntN(3))}
			}
			if m := members[k]; m != nil && rng.IntN(3) == 0 {
				src.Remove(k, m)
				delete(members, k)
				delete(ready, k)
			} else {
				n := rng.IntN(3) // 0: none ready
				var eps []index.Endpoint
				for e := range 2 {
					ep := indextest.Endpoint(fmt.Sprint("p", e), fmt.Sprintf("10.0.%d.%d", rng.IntN(250), e))
					if e >= n {
						ep = indextest.NotReady(ep)
					}
					eps = append(eps, ep)
				}
				if m == nil {
					members[k] = src.Add(k, &index.Member{Namespace: k.Namespace, Name: k.Name, Origin: index.Origin{Ports: ports}}, indextest.Slice(ports, eps...))
				} else {
					src.SetSlices(m, indextest.Slice(ports, eps...))
				}
				ready[k] = min(n, 2)
			}
			ix.Changed(k)
		}
		ix.Publish()
		history = append(history, view{ix.Snapshot(), maps.Clone(ready)})
		for _, v := range history[max(0, len(history)-5):] {
			check(v)
		}
	}
	check(history[0])
}

// TestRebuildMergesPodMirrorChanges: per-pod mirrors changing under another global service's
// mirror leave a big service merging; its own mirror's changing one at a time (Linkerd rewrites
// them as remote pods' readiness or the gateway's changes) are merged too, only the records whose
// gateway state changed made again; most of them changing at once rebuilds it whole.
func TestRebuildMergesPodMirrorChanges(t *testing.T) {
	r := newRandomService(rand.New(rand.NewPCG(9, 9)))
	other := index.Key{Namespace: "db", Name: "other"}
	om := r.Src.Add(other, &index.Member{Namespace: "db", Name: "other-west", Origin: index.Origin{Cluster: "west", Ports: r.Ports}},
		indextest.Slice(r.Ports, indextest.Endpoint("o-0", "10.200.0.1")))
	topo := indextest.Topology()
	prev := topo.Build(r.Key, r.Src)
	rebuild := func(what string, merged bool) {
		t.Helper()
		got := topo.Rebuild(prev, r.Key, r.Src)
		if index.Merged(prev, got) != merged {
			t.Fatalf("%s: merged %v, want %v", what, index.Merged(prev, got), merged)
		}
		if d := index.DiffServices(got, topo.Build(r.Key, r.Src)); d != "" {
			t.Fatalf("%s: %s", what, d)
		}
		prev = got
	}
	local, west := r.Members[0], r.Members[1]
	for i := range 10 {
		r.Src.SetPodMirrors(om, indextest.PodMirror("10.200.0.1", i%2 == 0))
		sls := slices.Clone(r.Src.Slices(local))
		sl := *sls[0]
		sl.Endpoints = slices.Clone(sl.Endpoints)
		sl.Endpoints[0].Ready = !sl.Endpoints[0].Ready
		sls[0] = &sl
		r.Src.SetSlices(local, sls...)
		rebuild("another service's per-pod mirror and a local endpoint", true)
	}
	pods := r.Src.PodMirrors(west)
	for i := range 20 {
		pods[i*7%len(pods)].Ready = !pods[i*7%len(pods)].Ready
		r.Src.SetPodMirrors(west, slices.Clone(pods)...)
		rebuild("one of its own per-pod mirrors", true)
	}
	for i := range pods {
		pods[i].Ready = false
	}
	r.Src.SetPodMirrors(west, pods...)
	rebuild("its gateway down", false)
}

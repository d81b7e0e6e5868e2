package writer

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/telemetry"
	"github.com/globaldns/global/test/testkit"

	"github.com/prometheus/client_golang/prometheus/testutil"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestPlanMatchesWholeSync changes a big global service at random (readiness, addresses, pods
// moving, per-pod mirrors going down, ports, endpoints coming and going, a hostname shared by two
// clusters) and syncs it after each change as the writer does, from its plan when it may; and a
// second writer, on an API of its own, syncs it whole each time. After every change both APIs
// must hold the same slices, endpoint for endpoint and in the same order: what the changes wrote
// is what a whole sync writes. A change of one endpoint's readiness must write one slice at most,
// and most syncs must be made from the plan. With serviceimports on, the MCS slices too.
func TestPlanMatchesWholeSync(t *testing.T) {
	for _, mcs := range []bool{false, true} {
		for seed := range uint64(16) {
			t.Run(fmt.Sprintf("mcs=%v/seed=%d", mcs, seed), func(t *testing.T) {
				newR := newTestReconciler
				if mcs {
					newR = func(...runtime.Object) (*reconciler, *fake.Clientset) {
						r, _ := newMCSReconciler(t)
						return r, r.client.(*fake.Clientset)
					}
				}
				r, client := newR()
				whole, wholeClient := newR()
				// Slices of 20: groups of several slices, with room in more than one.
				r.cfg.MaxEndpoints, whole.cfg.MaxEndpoints = 20, 20
				b := newBigService(rand.New(rand.NewPCG(seed, 2)))
				topo := indextest.Topology()
				topo.Locality["0-west"] = map[string]string{index.ZoneKey: "z7"}
				svc := topo.Build(b.Key, b.Src)
				ctx := context.Background()
				sync := func(r *reconciler, client *fake.Clientset) {
					t.Helper()
					if err := r.sync(ctx, b.Key, svc); err != nil {
						t.Fatal(err)
					}
					echo(t, r, client, mcs)
				}
				// Both start from the same whole sync: each later sync of whole places what changed
				// among the slices it wrote, as a sync from the plan must.
				sync(r, client)
				sync(whole, wholeClient)
				fromChanges := 0
				for step := range 150 {
					what, most := b.change()
					if step%17 == 5 { // someone else edits one of the slices: undone by a whole sync
						foreignEdit(t, client)
						echo(t, r, client, mcs)
						what, most = what+", and someone's edit", 0
					}
					svc = topo.Rebuild(svc, b.Key, b.Src)
					if !svc.Big() {
						t.Fatalf("step %d (%s): the service is no longer big", step, what)
					}
					before, written := testutil.ToFloat64(telemetry.WriterSliceSyncs.WithLabelValues("changes")), writes(client)
					sync(r, client)
					if testutil.ToFloat64(telemetry.WriterSliceSyncs.WithLabelValues("changes")) > before {
						fromChanges++
						if n := writes(client) - written; most > 0 && n > most*(1+testkit.Btoi(mcs)) {
							t.Errorf("step %d (%s): %d writes, want at most %d slices per set", step, what, n, most)
						}
					}
					for _, set := range []string{blocksGlobal, blocksMCS} {
						if p := r.plans.m[planKey{b.Key, set}]; p != nil {
							if d := planRules(p); d != "" {
								t.Fatalf("step %d (%s): the %s plan: %s", step, what, set, d)
							}
						}
					}
					whole.plans.reset()
					sync(whole, wholeClient)
					if d := sameSlices(t, client, wholeClient); d != "" {
						t.Fatalf("step %d (%s): written from changes, not as written whole: %s", step, what, d)
					}
				}
				// Of 150 changes, about one in six brings or takes a hostname: those are whole.
				if fromChanges < 100 {
					t.Errorf("%d syncs of 150 made from changes", fromChanges)
				}
			})
		}
	}
}

// planRules describes how p breaks its rules: each group's slices by index, none empty, and
// where each endpoint is known; "" when it does not.
func planRules(p *plan) string {
	for g, l := range p.groups {
		n := 0
		for i, sl := range l.slices {
			if i > 0 && l.slices[i-1].index >= sl.index || len(sl.endpoints) == 0 {
				return fmt.Sprintf("%v: slice %d of %d", g, i, len(l.slices))
			}
			for j := range sl.endpoints {
				if at, ok := l.at[idOf(&sl.endpoints[j])]; !ok || at != sl.index {
					return fmt.Sprintf("%v: %v in slice %d, known in %d (%v)", g, idOf(&sl.endpoints[j]), sl.index, at, ok)
				}
				n++
			}
		}
		if len(l.at) != n {
			return fmt.Sprintf("%v: %d endpoints known, %d in slices", g, len(l.at), n)
		}
	}
	return ""
}

// TestPlanApply places what changed as a whole sync would from the written slices: an endpoint
// whose conditions changed stays where it is; a new one goes to the first slice with room and its
// ports, then to the first emptied, then to a new slice of the lowest free index; an emptied slice
// is dropped.
func TestPlanApply(t *testing.T) {
	g := group{"west", discoveryv1.AddressTypeIPv4}
	ep := func(host string, ready bool) endpoint {
		hn, addr := host+"-west", "10.0.0."+host[1:]
		return endpoint{id: hn + "/" + addr, portsKey: "db/5432/TCP,", ep: discoveryv1.Endpoint{Addresses: []string{addr}, Hostname: &hn, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}}
	}
	// Slices 0 and 2 (1 was deleted), of 2 endpoints at most.
	p := newPlan(nil, "", map[clusterHost]string{})
	p.groups[g] = &layout{at: map[endpointID]int{}, slices: []placed{
		{index: 0, portsKey: "db/5432/TCP,", endpoints: []discoveryv1.Endpoint{ep("h1", true).ep, ep("h2", true).ep}},
		{index: 2, portsKey: "db/5432/TCP,", endpoints: []discoveryv1.Endpoint{ep("h3", true).ep, ep("h4", true).ep}},
	}}
	for _, sl := range p.groups[g].slices {
		for i := range sl.endpoints {
			p.groups[g].at[idOf(&sl.endpoints[i])] = sl.index
		}
	}
	layout := func() string {
		var out []string
		for _, sl := range p.groups[g].slices {
			var hs []string
			for _, e := range sl.endpoints {
				hs = append(hs, fmt.Sprintf("%s:%v", (*e.Hostname)[:2], *e.Conditions.Ready))
			}
			out = append(out, fmt.Sprintf("%d[%s]", sl.index, strings.Join(hs, " ")))
		}
		return strings.Join(out, " ")
	}
	step := func(cs []change, want, touched string) {
		t.Helper()
		var got []int
		for _, at := range p.apply(cs, 2) {
			got = append(got, at.index)
		}
		if l := layout(); l != want || fmt.Sprint(got) != touched {
			t.Errorf("%s, touched %v; want %s, touched %s", l, got, want, touched)
		}
		if d := planRules(p); d != "" {
			t.Error(d)
		}
	}
	// A change of host's endpoint, in slice at (-1: none), to ready (nil: gone).
	ch := func(host string, at int, ready *bool) change {
		e := ep(host, ptr.Deref(ready, true))
		c := change{g: g, id: idOf(&e.ep), at: at}
		if ready != nil {
			c.endpoint = &e
		}
		return c
	}
	yes, no := ptr.To(true), ptr.To(false)
	// h2 not ready: in place.
	step([]change{ch("h2", 0, no)}, "0[h1:true h2:false] 2[h3:true h4:true]", "[0]")
	// No room: h5 makes slice 1, the lowest free index.
	step([]change{ch("h5", -1, yes)}, "0[h1:true h2:false] 1[h5:true] 2[h3:true h4:true]", "[1]")
	// h1 goes, h6 comes: the first slice with room is 0 again.
	step([]change{ch("h1", 0, nil), ch("h6", -1, yes)}, "0[h2:false h6:true] 1[h5:true] 2[h3:true h4:true]", "[0]")
	// h5 goes and h7 comes with other ports: slice 1, emptied, takes it and its ports.
	h7 := ch("h7", -1, yes)
	h7.endpoint.portsKey = "db/5433/TCP,"
	step([]change{ch("h5", 1, nil), h7}, "0[h2:false h6:true] 1[h7:true] 2[h3:true h4:true]", "[1]")
	if sl := p.groups[g].slice(1); sl.portsKey != "db/5433/TCP," {
		t.Errorf("slice 1's ports %q", sl.portsKey)
	}
	// h7 goes: slice 1, emptied, is dropped (and deleted).
	step([]change{ch("h7", 1, nil)}, "0[h2:false h6:true] 2[h3:true h4:true]", "[1]")
}

// sameSlices describes how the slices in a and b differ; "" when they do not.
func sameSlices(t *testing.T, a, b *fake.Clientset) string {
	t.Helper()
	list := func(c *fake.Clientset) map[string]discoveryv1.EndpointSlice {
		l, err := c.DiscoveryV1().EndpointSlices("db").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]discoveryv1.EndpointSlice{}
		for _, es := range l.Items {
			out[es.Name] = es
		}
		return out
	}
	x, y := list(a), list(b)
	for name, es := range x {
		other, ok := y[name]
		switch {
		case !ok:
			return name + " is not in the whole sync's"
		case !apiequality.Semantic.DeepEqual(es.Endpoints, other.Endpoints) || !apiequality.Semantic.DeepEqual(es.Ports, other.Ports):
			return fmt.Sprintf("%s: %s, whole: %s", name, endpointList(es), endpointList(other))
		case !maps.Equal(es.Labels, other.Labels) || !maps.Equal(es.Annotations, other.Annotations):
			return fmt.Sprintf("%s: labels %v, annotations %v, whole: %v, %v", name, es.Labels, es.Annotations, other.Labels, other.Annotations)
		}
	}
	for name := range y {
		if _, ok := x[name]; !ok {
			return name + " is only in the whole sync's"
		}
	}
	return ""
}

func endpointList(es discoveryv1.EndpointSlice) string {
	var out []string
	for _, e := range es.Endpoints {
		out = append(out, fmt.Sprintf("%s/%s ready=%v", *e.Hostname, e.Addresses[0], *e.Conditions.Ready))
	}
	return strings.Join(out, " ")
}

// foreignEdit flips the readiness of the first endpoint of one of the slices in client, as
// someone else's write would.
func foreignEdit(t *testing.T, client *fake.Clientset) {
	t.Helper()
	ctx := context.Background()
	l, err := client.DiscoveryV1().EndpointSlices("db").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) == 0 {
		t.Fatal("no slice to edit", err)
	}
	es := &l.Items[len(l.Items)/2]
	es.Endpoints[0].Conditions.Ready = ptr.To(!*es.Endpoints[0].Conditions.Ready)
	if _, err := client.DiscoveryV1().EndpointSlices("db").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// echo feeds the store what the API holds now, as its informers would, and the tracker the
// events: the next sync starts from what the last one wrote.
func echo(t *testing.T, r *reconciler, client *fake.Clientset, mcs bool) {
	t.Helper()
	ctx := context.Background()
	sc := r.store.scopes[""]
	list, err := client.DiscoveryV1().EndpointSlices("db").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	there := map[string]bool{}
	for i := range list.Items {
		es := &list.Items[i]
		there[es.Name] = true
		if old, ok, _ := sc.slices.GetStore().Get(es); !ok || old.(*discoveryv1.EndpointSlice).ResourceVersion != es.ResourceVersion {
			testkit.Must(t, sc.slices.GetStore().Update(es))
			r.tracker.observe(es, false)
		}
	}
	for _, obj := range sc.slices.GetStore().List() {
		if es := obj.(*discoveryv1.EndpointSlice); !there[es.Name] {
			testkit.Must(t, sc.slices.GetStore().Delete(es))
			r.tracker.observe(es, true)
		}
	}
	svcs, err := client.CoreV1().Services("db").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		testkit.Must(t, sc.services.GetStore().Update(&svcs.Items[i]))
	}
	if mcs { // the ServiceImport informer runs: wait until it shows the ServiceImport
		deadline := time.Now().Add(30 * time.Second)
		for len(sc.imports.GetStore().List()) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the ServiceImport never showed in the informer")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// bigService is a global service of about 400 endpoints in slices of 30, local (with placements)
// and mirrored (with per-pod mirrors), IPv4 and IPv6, that changes at random.
type bigService struct{ *indextest.RandomService }

func newBigService(rng *rand.Rand) *bigService {
	b := &bigService{indextest.NewRandomService(rng)}
	// "0-west" and "west": host c in the one and c-0 in the other are both c-0-west, which the
	// -global slices must tell apart (hashed).
	for _, cluster := range []string{"", "west", "north", "0-west"} {
		var sls []*index.Slice
		for s := range 4 {
			var eps []index.Endpoint
			for range 30 {
				eps = append(eps, b.endpoint(cluster == "", s == 3))
			}
			sls = append(sls, indextest.Slice(b.Ports, eps...))
		}
		switch cluster {
		case "0-west":
			sls[0].Endpoints[0].Host = "c"
		case "west":
			sls[0].Endpoints[0].Host = "c-0"
		}
		if cluster != "" {
			annotate(sls, "gateway."+cluster)
		}
		b.AddMember(cluster, sls...)
	}
	return b
}

// endpoint is a new endpoint, placed on one of three nodes when local.
func (b *bigService) endpoint(local, v6 bool) index.Endpoint {
	e := b.Endpoint(v6)
	if local {
		e.Local = &index.Placement{Zone: "z1", NodeName: fmt.Sprintf("node-%d", b.Last()%3), Pod: e.Host}
	}
	return e
}

// annotate gives a mirror's slices Linkerd's annotations, with that gateway identity.
func annotate(sls []*index.Slice, identity string) {
	for _, sl := range sls {
		sl.Annotations = &index.Annotations{{Key: index.AnnotationGatewayIdentity, Value: identity}, {Key: index.AnnotationRemoteFQName, Value: "big.db.svc.cluster.local"}}
	}
}

// change makes one random change, says what it was and how many slices of a set it may write
// (0: any number).
func (b *bigService) change() (string, int) {
	m := b.Members[b.Rand.IntN(len(b.Members))]
	sls := slices.Clone(b.Src.Slices(m))
	i := b.Rand.IntN(len(sls))
	sl := *sls[i]
	sl.Endpoints = slices.Clone(sl.Endpoints)
	e := &sl.Endpoints[b.Rand.IntN(len(sl.Endpoints))]
	if b.Rand.IntN(10) == 0 { // the hostname two clusters share, whatever m is
		m = b.Members[3-2*b.Rand.IntN(2)] // 0-west or west
		sls = slices.Clone(b.Src.Slices(m))
		i = 0
		sl = *sls[0]
		sl.Endpoints = slices.Clone(sl.Endpoints)
		e = &sl.Endpoints[0]
	}
	what, most := "", 1
	switch op := b.Rand.IntN(100); {
	case op < 50:
		e.Ready, e.Serving = !e.Ready, !e.Ready
		what = "readiness flip"
	case op < 62: // a pod restarts with another address
		e.SetAddr(b.Addr(!e.Addr().Is4()))
		what, most = "another address", 2 // it leaves its slice, and joins the first with room
	case op < 68 && m.Local(): // a pod moves to another node
		p := *e.Local
		p.NodeName += "x"
		e.Local = &p
		what = "another node"
	case op < 74 && !m.Local(): // the gateway: per-pod mirrors go down or up
		b.PodMirrors(m, []int{0, 30, 100}[b.Rand.IntN(3)])
		return "per-pod mirrors", 0
	case op < 78 && m.Local(): // a slice's port: its endpoints move to slices of that port
		sl.Ports = []index.Port{{Name: "db", Port: sl.Ports[0].Port + 1, Protocol: "TCP"}}
		what, most = "a port", 0
	case op < 80: // hosts x and x-0 come in 0-west and west: both are x-0-west, hashed
		x := b.Next()
		for j, c := range []int{3, 1} {
			m := b.Members[c]
			sls := slices.Clone(b.Src.Slices(m))
			sl := *sls[0]
			e := b.endpoint(m.Local(), false)
			e.Host = fmt.Sprintf("x%d%s", x, []string{"", "-0"}[j])
			sl.Endpoints = append(slices.Clone(sl.Endpoints), e)
			sls[0] = &sl
			b.Src.SetSlices(m, sls...)
		}
		return "two hosts of one name", 0
	case op < 82 && !m.Local(): // linked again, with another gateway identity
		for j := range sls {
			c := *sls[j]
			sls[j] = &c
		}
		annotate(sls, fmt.Sprintf("gateway.%s.%d", m.Cluster, b.Next()))
		b.Src.SetSlices(m, sls...)
		return "another gateway identity", 0
	case op < 84: // an endpoint comes: a new hostname
		sl.Endpoints = append(sl.Endpoints, b.endpoint(m.Local(), sl.Family == index.IPv6))
		what, most = "an endpoint comes", 0
	case op < 90 && len(sl.Endpoints) > 1: // an endpoint goes
		sl.Endpoints = slices.Delete(sl.Endpoints, 1, 2)
		what, most = "an endpoint goes", 0
	default: // the same slice again: nothing to write
		what, most = "the same", 0
	}
	sls[i] = &sl
	b.Src.SetSlices(m, sls...)
	return what, most
}

package global

import (
	"context"
	"fmt"
	"maps"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/contract"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/watch"

	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// discard is a ResponseWriter that drops the reply: the benchmarks measure the plugin. Its
// remote address is made once, as a server's is.
type discard struct {
	*test.ResponseWriter
	remote net.Addr
}

func (discard) WriteMsg(*dns.Msg) error { return nil }

func (d discard) RemoteAddr() net.Addr { return d.remote }

// BenchmarkServeDNS measures the query path of every name form, so regressions show as allocs/op.
func BenchmarkServeDNS(b *testing.B) {
	g := newGlobal(b, source())
	g.Rotate = true // the default
	g.Zones = []string{"global.", "near.global."}
	g.Policies = answer.PoliciesOf(map[string]index.Policy{"near.global.": {Nearest: 1}})
	for _, q := range []struct {
		name, qname string
		qtype       uint16
	}{
		{"service", "foo.db.global.", dns.TypeA},
		{"nearest", "foo.db.near.global.", dns.TypeA},
		{"short", "foo.global.", dns.TypeA},
		{"cluster", "west.foo.db.global.", dns.TypeA},
		{"pod", "foo-0.west.foo.db.global.", dns.TypeA},
		{"srv", "_db._tcp.foo.db.global.", dns.TypeSRV},
		{"nodata", "foo.db.global.", dns.TypeTXT},
		{"nxdomain", "nope.db.global.", dns.TypeA},
	} {
		b.Run(q.name, func(b *testing.B) { benchServe(b, g, q.qname, q.qtype, "") })
	}
	// Ranked from a client on a node (6 A records over 5 tiers), and a zonal name; the client found
	// by the locator the plugin runs with.
	z := zonedGlobal(b, contract.Sources{Node: true})
	z.Rotate = true
	z.Locator = benchLocator(b)
	b.Run("client", func(b *testing.B) { benchServe(b, z, "zz.db.global.", dns.TypeA, "10.1.0.1") })
	b.Run("zonal", func(b *testing.B) { benchServe(b, z, "za.pin._zone.zz.db.global.", dns.TypeA, "") })
	// SRV of a service of 10,010 endpoints, over UDP as srv: what a reply holds is made, no more.
	b.Run("srv-10000", func(b *testing.B) { benchServe(b, bigGlobal(b), "_db._tcp.big.db.global.", dns.TypeSRV, "") })
	// A service of 10 and of 10,000 local endpoints over three zones and six nodes: its name, ranked
	// from a node, and a zonal name; each reads what the reply holds, whatever the service's size.
	for _, n := range []int{10, 10000} {
		g := spreadGlobal(b, n)
		b.Run(fmt.Sprintf("service-%d", n), func(b *testing.B) { benchServe(b, g, "spread.db.global.", dns.TypeA, "") })
		b.Run(fmt.Sprintf("client-%d", n), func(b *testing.B) { benchServe(b, g, "spread.db.global.", dns.TypeA, "10.1.0.1") })
		b.Run(fmt.Sprintf("zonal-%d", n), func(b *testing.B) { benchServe(b, g, "zb.pin._zone.spread.db.global.", dns.TypeA, "") })
	}
}

// spreadGlobal is the plugin answering db/spread, a service of n local endpoints spread over nodes
// n1 to n6, two in each of zones za, zb and zc, and a linked cluster west (za), with client_locality
// node (n1 at 10.1.0.1, in za).
func spreadGlobal(b testing.TB, n int) *Global {
	spread := index.Key{Namespace: "db", Name: "spread"}
	src := indextest.New()
	var sls []*index.Slice
	for s := 0; s*100 < n; s++ {
		var eps []index.Endpoint
		for e := s * 100; e < min(n, (s+1)*100); e++ {
			node := e % 6
			eps = append(eps, indextest.Placed(indextest.Endpoint(fmt.Sprintf("spread-%d", e), fmt.Sprintf("10.2.%d.%d", e/250, e%250)),
				[]string{"za", "zb", "zc"}[node/2], fmt.Sprintf("n%d", node+1)))
		}
		sls = append(sls, indextest.Slice(dbPort, eps...))
	}
	src.Add(spread, &index.Member{Namespace: "db", Name: "spread", Origin: index.Origin{Ports: dbPort}}, sls...)
	src.Add(spread, &index.Member{Namespace: "db", Name: "spread-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("spread-0", "10.96.1.1"), indextest.Endpoint("spread-1", "10.96.1.2")))
	ix := index.New(zonedTopology(), src)
	ix.Changed(spread)
	ix.Start()
	ix.Publish()
	return &Global{Zones: []string{"global."}, Next: test.NextHandler(dns.RcodeNameError, nil), Answerer: answer.Answerer{Maker: answer.Maker{TTL: 5, Rotate: true},
		Asker: answer.Asker{Sources: contract.Sources{Node: true}, Locator: benchLocator(b)}, Index: ix}}
}

// benchLocator is the locator the plugin runs with (watch.Clients), over a fake API of fakeLocator's
// Nodes (fakeNodes: their names, addresses and labels) and the default forwarder Service with
// fakeForwarder's address: a ranked query's lookups cost what they cost in a server.
func benchLocator(b testing.TB) *watch.Clients {
	fwd := strings.Split(contract.DefaultForwarders()[0], "/")
	objs := []k8sruntime.Object{&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: fwd[0], Name: fwd[1] + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: fwd[1]}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fakeForwarder.String()}}}}}
	for addr, c := range fakeNodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.Node, Labels: c.Labels},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr.String()}}}})
	}
	api := fake.NewSimpleClientset(objs...)
	c := watch.NewClients(api, nodeKeys(zonedTopology().ClientKeys), false, contract.DefaultForwarders(), nil)
	// Stopped once its tables are made: they stay, and the fake API and the informers' caches,
	// which no server's queries read, leave the heap the benchmarks' collections mark.
	ctx, cancel := context.WithCancel(context.Background())
	synced := make(chan struct{})
	go c.Run(ctx, synced)
	<-synced
	cancel()
	for addr, want := range fakeNodes {
		if got := c.Node(addr); got == nil || got.Node != want.Node || !maps.Equal(got.Labels, want.Labels) {
			b.Fatalf("the locator holds %+v at %s, want %+v", got, addr, want)
		}
	}
	if !c.Forwarder(fakeForwarder) {
		b.Fatal("the locator does not hold the forwarder")
	}
	return c
}

// benchServe measures g answering qname from address from ("": the test writer's).
func benchServe(b *testing.B, g *Global, qname string, qtype uint16, from string) {
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	ctx := context.Background()
	tw := &test.ResponseWriter{RemoteIP: from}
	var w dns.ResponseWriter = discard{tw, tw.RemoteAddr()} // boxed once, not per query
	b.ReportAllocs()
	for b.Loop() {
		g.ServeDNS(ctx, w, m)
	}
}

// BenchmarkPublish is one index update (one global service rebuilt, a snapshot published) among
// N global services: the snapshot is a trie, so a change copies one path of log16 N branches and a
// leaf, not the services. The changed service is each in turn (changing=all), or one of the same
// 1,000 spread over the N (changing=1000). Last, an index of 1,000 is measured beside the index of
// 100,000, still held (beside=100000): the index work of 1,000 in the heap of 100,000. What that
// adds over 1,000 alone is what a bigger heap costs (the collector marking it, caches and address
// translation missing in it), not the index.
func BenchmarkPublish(b *testing.B) {
	run := func(name string, ix *index.Index, keys []index.Key, changing int) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			n := len(keys)
			for b.Loop() {
				ix.Changed(keys[i%changing*(n/changing)])
				ix.Publish()
				i++
			}
		})
	}
	var big *index.Index
	for _, n := range []int{1000, 10000, 100000} {
		ix, keys := publishIndex(n)
		run(fmt.Sprintf("services=%d/changing=all", n), ix, keys, n)
		if n > 1000 {
			run(fmt.Sprintf("services=%d/changing=1000", n), ix, keys, 1000)
		}
		big = ix
	}
	ix, keys := publishIndex(1000)
	run(fmt.Sprintf("services=1000/beside=%d", big.Snapshot().Len()), ix, keys, len(keys))
	runtime.KeepAlive(big)
}

// publishIndex returns a published index of n global services, each of three members (this
// cluster, west and north) of three endpoints, and their keys.
func publishIndex(n int) (*index.Index, []index.Key) {
	src := indextest.New()
	ix := index.New(indextest.Topology(), src)
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	var keys []index.Key
	for i := range n {
		k := index.Key{Namespace: "db", Name: fmt.Sprintf("s%d", i)}
		for c, cluster := range []string{"", "west", "north"} {
			var eps []index.Endpoint
			for e := range 3 {
				eps = append(eps, indextest.Endpoint(fmt.Sprintf("p-%d", e), fmt.Sprintf("10.%d.%d.%d", c*10+e, i/250%250, i%250)))
			}
			src.Add(k, &index.Member{Namespace: "db", Name: k.Name + "-" + cluster, Origin: index.Origin{Cluster: cluster, Ports: ports}}, indextest.Slice(ports, eps...))
		}
		keys = append(keys, k)
		ix.Changed(k)
	}
	ix.Start()
	ix.Publish()
	return ix, keys
}

// BenchmarkRebuild is one change to a global service of N endpoints (one member, slices of 100):
// one endpoint of one slice turns not ready or ready again (a new slice, as an update is), and
// the service is rebuilt and published.
func BenchmarkRebuild(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			src := indextest.New()
			ix := index.New(indextest.Topology(), src)
			ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
			k := index.Key{Namespace: "db", Name: "big"}
			var sls []*index.Slice
			for s := 0; s*100 < n; s++ {
				var eps []index.Endpoint
				for e := s * 100; e < min(n, (s+1)*100); e++ {
					eps = append(eps, indextest.Endpoint(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.1.%d.%d", e/250, e%250)))
				}
				sls = append(sls, indextest.Slice(ports, eps...))
			}
			m := src.Add(k, &index.Member{Namespace: "db", Name: "big", Origin: index.Origin{Ports: ports}}, sls...)
			ix.Changed(k)
			ix.Start()
			ix.Publish()
			// Each slice in turn, as it is and with its first endpoint's readiness flipped.
			flipped := indextest.FirstNotReady(sls)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				cur := slices.Clone(sls)
				if j := i % len(sls); i/len(sls)%2 == 0 {
					cur[j] = flipped[j]
				}
				src.SetSlices(m, cur...)
				ix.Changed(k)
				ix.Publish()
				i++
			}
		})
	}
}

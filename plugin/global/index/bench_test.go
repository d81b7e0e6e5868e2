package index_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
)

// benchService is a global service of n endpoints per member in slices of 100: this cluster's
// and, with mirrored, west's, whose endpoints each have a per-pod mirror.
func benchService(n int, mirrored bool) (*indextest.Source, index.Key, []*index.Member) {
	src := indextest.New()
	k := index.Key{Namespace: "db", Name: "big"}
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	clusters := []string{""}
	if mirrored {
		clusters = append(clusters, "west")
	}
	var ms []*index.Member
	for c, cluster := range clusters {
		var sls []*index.Slice
		for s := 0; s*100 < n; s++ {
			var eps []index.Endpoint
			for e := s * 100; e < min(n, (s+1)*100); e++ {
				eps = append(eps, indextest.Endpoint(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.%d.%d.%d", c+1, e/250, e%250)))
			}
			sls = append(sls, indextest.Slice(ports, eps...))
		}
		name := k.Name
		if cluster != "" {
			name += "-" + cluster
		}
		m := src.Add(k, &index.Member{Namespace: "db", Name: name, Origin: index.Origin{Cluster: cluster, Ports: ports}}, sls...)
		if cluster != "" {
			src.SetPodMirrorsOf(m, func() bool { return true })
		}
		ms = append(ms, m)
	}
	return src, k, ms
}

// BenchmarkMerge is one change to a big global service merged into its previous build
// (Topology.Rebuild), and, for scale, the service built whole:
//   - flip: one endpoint of one slice turns not ready or ready again (a new slice, as an
//     update is);
//   - slice: a slice of 100 comes, then goes;
//   - podmirror: one per-pod mirror of the mirror member turns down or up again (a gateway change);
//   - build: the whole build of the service.
func BenchmarkMerge(b *testing.B) {
	topo := indextest.Topology()
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("flip/endpoints=%d", n), func(b *testing.B) {
			src, k, ms := benchService(n, false)
			sls := src.Slices(ms[0])
			flipped := indextest.FirstNotReady(sls)
			prev := topo.Build(k, src)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				cur := slices.Clone(sls)
				if j := i % len(sls); i/len(sls)%2 == 0 {
					cur[j] = flipped[j]
				}
				src.SetSlices(ms[0], cur...)
				prev = topo.Rebuild(prev, k, src)
				i++
			}
		})
	}
	b.Run("slice/endpoints=10000", func(b *testing.B) {
		src, k, ms := benchService(10000, false)
		sls := src.Slices(ms[0])
		extra := sls[0]
		var eps []index.Endpoint
		for e := range 100 {
			eps = append(eps, indextest.Endpoint(fmt.Sprintf("extra-%d", e), fmt.Sprintf("10.9.%d.%d", e/250, e%250)))
		}
		extra = indextest.Slice(extra.Ports, eps...)
		more := append(slices.Clone(sls), extra)
		prev := topo.Build(k, src)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%2 == 0 {
				src.SetSlices(ms[0], more...)
			} else {
				src.SetSlices(ms[0], sls...)
			}
			prev = topo.Rebuild(prev, k, src)
			i++
		}
	})
	b.Run("podmirror/endpoints=2x5000", func(b *testing.B) {
		src, k, ms := benchService(5000, true)
		pods := src.PodMirrors(ms[1])
		prev := topo.Build(k, src)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p := &pods[i*7%len(pods)]
			p.Ready = !p.Ready
			src.SetPodMirrors(ms[1], pods...)
			prev = topo.Rebuild(prev, k, src)
			i++
		}
	})
	b.Run("build/endpoints=10000", func(b *testing.B) {
		src, k, _ := benchService(10000, false)
		b.ReportAllocs()
		for b.Loop() {
			topo.Build(k, src)
		}
	})
}

// BenchmarkRankedMemory is what answers ranked from clients keep beside a local service of 10,000
// endpoints on 100 nodes over 3 zones: its records grouped by node and zone (placed-B/record), and
// the answers remembered (memo-B/answer) once clients on each node have asked, each answer holding
// up to 100 records of a family (what a 512-byte reply is read for). Live heap after a full GC.
func BenchmarkRankedMemory(b *testing.B) {
	const n, nodes, limit = 10000, 100, 100
	zones := []string{"za", "zb", "zc"}
	src := indextest.New()
	k := index.Key{Namespace: "db", Name: "big"}
	var sls []*index.Slice
	for s := 0; s*100 < n; s++ {
		var eps []index.Endpoint
		for e := s * 100; e < (s+1)*100; e++ {
			node := e % nodes
			eps = append(eps, indextest.Placed(indextest.Endpoint(fmt.Sprintf("big-%d", e), fmt.Sprintf("10.1.%d.%d", e/250, e%250)),
				zones[node%3], fmt.Sprintf("node-%d", node)))
		}
		sls = append(sls, indextest.Slice(dbPort, eps...))
	}
	src.Add(k, &index.Member{Namespace: "db", Name: "big", Origin: index.Origin{Ports: dbPort}}, sls...)
	var clients []*index.Client
	for i := range nodes {
		clients = append(clients, &index.Client{Node: fmt.Sprintf("node-%d", i), Labels: map[string]string{index.ZoneKey: zones[i%3]}})
	}
	live := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	all := func(*index.Record) bool { return true }
	for range b.N {
		b.StopTimer()
		ix := index.New(indextest.Topology(), src)
		ix.Changed(k)
		ix.Start()
		ix.Publish()
		svc := ix.Snapshot().Service(k)
		before := live()
		b.StartTimer()
		svc.Nearest("", "", 0, clients[0], all, 1) // a filter: placed, nothing remembered
		b.StopTimer()
		placed := live()
		for _, c := range clients { // each client's tiers, which are the client's, not the answers'
			svc.Nearest("", "", 0, c, all, 1)
		}
		tiered := live()
		for _, c := range clients {
			if v := svc.Nearest("", "", 0, c, nil, limit); len(v.A) != limit {
				b.Fatalf("%s: %d records", c.Node, len(v.A))
			}
		}
		remembered := live()
		b.ReportMetric(float64(placed-before)/n, "placed-B/record")
		b.ReportMetric(float64(remembered-tiered)/float64(index.Remembered(svc)), "memo-B/answer")
		b.ReportMetric(float64(index.Remembered(svc)), "answers")
		runtime.KeepAlive(ix)
		b.StartTimer()
	}
}

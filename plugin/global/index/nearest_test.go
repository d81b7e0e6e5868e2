package index_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
)

// nearestOracle is what Nearest must return, computed the way answers were before it: every record
// of the scope read, filtered, ranked from the client by Topology.Ranked (a sort of them all).
func nearestOracle(svc *index.Service, cluster, zone string, c *index.Client, keep func(*index.Record) bool, limit int) index.View {
	topo := svc.Topology()
	admit := func(r *index.Record) bool {
		return (zone == "" || strings.EqualFold(topo.ZoneOf(r), zone)) && (keep == nil || keep(r))
	}
	all := svc.Select(cluster, "", admit, math.MaxInt)
	if c != nil {
		all = index.View{A: topo.Ranked(all.A, c, math.MaxInt), AAAA: topo.Ranked(all.AAAA, c, math.MaxInt)}
	}
	return index.View{A: upTo(all.A, limit, keep == nil), AAAA: upTo(all.AAAA, limit, keep == nil)}
}

// upTo returns the first limit records of rs, in tier order, and with whole the rest of the last
// one's tier: a remembered answer's (Service.NearestKept).
func upTo(rs []index.Record, limit int, whole bool) []index.Record {
	n := min(limit, len(rs))
	for whole && n > 0 && n < len(rs) && rs[n].Tier == rs[n-1].Tier {
		n++
	}
	return rs[:n]
}

// TestNearestIsRanked: over random services (local pods on nodes and zones, some unplaced, both
// families; linked clusters at random localities), topologies (the client keys in any order,
// custom ones among them), clients, scopes, zones, filters and limits, Nearest returns exactly
// what ranking every record returned, tier by tier; small and big (parted) services alike.
func TestNearestIsRanked(t *testing.T) {
	seed := uint64(rand.Int64())
	rng := rand.New(rand.NewPCG(seed, 1))
	zones := []string{"za", "zb", "ZA", "zc", ""}
	nodes := []string{"n1", "n2", "n3", "n4", ""}
	checked := 0
	for round := range 60 {
		keys := slices.Clone([]string{index.HostnameKey, index.ZoneKey, index.ClusterKey, index.RegionKey, "rack"})
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		keys = keys[:1+rng.IntN(len(keys))]
		topo := indextest.Topology()
		topo.ClientKeys = keys
		topo.Locality["east"]["rack"] = "r1"
		for _, cl := range []string{"west", "north", "south"} {
			topo.Locality[cl] = map[string]string{index.ZoneKey: zones[rng.IntN(len(zones))], index.RegionKey: []string{"us-east-1", "eu"}[rng.IntN(2)], "rack": []string{"r1", "r2"}[rng.IntN(2)]}
		}
		src := indextest.New()
		n := []int{3, 12, 300}[round%3] // 300: a big service, in parts
		var local []index.Endpoint
		for i := range n {
			addr := fmt.Sprintf("10.%d.%d.%d", rng.IntN(2), i/250, i%250+1)
			if rng.IntN(5) == 0 {
				addr = fmt.Sprintf("fd00::%x", i+1)
			}
			e := indextest.Endpoint(fmt.Sprintf("foo-%d", rng.IntN(n)), addr)
			if rng.IntN(6) > 0 {
				e = indextest.Placed(e, zones[rng.IntN(len(zones))], nodes[rng.IntN(len(nodes))])
			}
			if rng.IntN(10) == 0 {
				e = indextest.NotReady(e)
			}
			local = append(local, e)
		}
		var v4, v6 []index.Endpoint
		for _, e := range local {
			if e.Addr().Is4() {
				v4 = append(v4, e)
			} else {
				v6 = append(v6, e)
			}
		}
		src.Add(foo, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: dbPort}}, indextest.Slice(dbPort, v4...), indextest.Slice(dbPort, v6...))
		for _, cl := range []string{"west", "north", "south"} {
			var eps []index.Endpoint
			for i := range rng.IntN(8) {
				eps = append(eps, indextest.Endpoint(fmt.Sprintf("foo-%d", i), fmt.Sprintf("10.96.%d.%d", len(cl), i+1)))
			}
			src.Add(foo, &index.Member{Namespace: "db", Name: "foo-" + cl, Origin: index.Origin{Cluster: cl, Ports: dbPort}}, indextest.Slice(targetPort, eps...))
		}
		ix := index.New(topo, src)
		ix.Changed(foo)
		ix.Start()
		ix.Publish()
		svc := ix.Snapshot().Service(foo)
		// Answers says what Select's view says of each scope, whatever the service's size: a
		// cluster without ready records, or none at all, has none.
		for _, cluster := range []string{"", "east", "west", "north", "south", "nowhere"} {
			if got, want := svc.Answers(cluster), !svc.Select(cluster, "", nil, math.MaxInt).Empty(); got != want {
				t.Fatalf("seed %d round %d: Answers(%q) = %v, its view says %v", seed, round, cluster, got, want)
			}
		}
		for range 40 {
			var c *index.Client
			if rng.IntN(4) > 0 {
				c = &index.Client{Node: nodes[rng.IntN(len(nodes))], Labels: map[string]string{index.ZoneKey: zones[rng.IntN(len(zones))],
					index.RegionKey: []string{"us-east-1", "eu", ""}[rng.IntN(3)], "rack": []string{"r1", "r2"}[rng.IntN(2)]}}
			}
			zone := ""
			if rng.IntN(3) == 0 {
				zone = zones[rng.IntN(len(zones)-1)]
			}
			if c == nil && zone == "" {
				zone = "za"
			}
			cluster := []string{"", "", "east", "west"}[rng.IntN(4)]
			var keep func(*index.Record) bool
			if rng.IntN(4) == 0 {
				keep = func(r *index.Record) bool { return r.Addr().As16()[15]%3 != 0 }
			}
			limit := []int{1, 2, 5, 100, math.MaxInt}[rng.IntN(5)]
			family := []index.Family{0, index.IPv4, index.IPv6}[rng.IntN(3)]
			// Asked again, the answer is remembered (without keep); asked from a twin on a node
			// without records, one of its class may be shared: each must still be right.
			for _, asker := range []*index.Client{c, c, twin(c, "n9")} {
				got, want := svc.Nearest(cluster, zone, family, asker, keep, limit), nearestOracle(svc, cluster, zone, asker, keep, limit)
				if keep == nil { // the remembered answer, and what readers keep with it: the same until replaced
					var k1, k2 *index.Kept
					v := svc.NearestKept(&k1, cluster, zone, family, asker, limit)
					k1.SetRendered(index.IPv6, &index.Rendered{V: round})
					svc.NearestKept(&k2, cluster, zone, family, asker, limit)
					if k1 != k2 || k2.Rendered(index.IPv6) != round || k2.Rendered(index.IPv4) != nil ||
						!slices.Equal(describe(v.A), describe(got.A)) || !slices.Equal(describe(v.AAAA), describe(got.AAAA)) {
						t.Fatalf("seed %d round %d: NearestKept is not Nearest's remembered answer", seed, round)
					}
					k1.SetRendered(index.IPv6, nil)
				}
				switch family {
				case index.IPv4:
					want.AAAA = nil
				case index.IPv6:
					want.A = nil
				}
				for f, pair := range [][2][]index.Record{{got.A, want.A}, {got.AAAA, want.AAAA}} {
					if g, w := describe(pair[0]), describe(pair[1]); !slices.Equal(g, w) {
						t.Fatalf("seed %d round %d: keys %v, client %+v, scope %q, zone %q, limit %d, family %d:\n got %q\nwant %q",
							seed, round, keys, asker, cluster, zone, limit, f, g, w)
					}
				}
			}
			checked++
		}
	}
	t.Logf("%d questions, seed %d", checked, seed)
}

// twin returns a client with c's labels on node (nil for nil).
func twin(c *index.Client, node string) *index.Client {
	if c == nil {
		return nil
	}
	return &index.Client{Node: node, Labels: c.Labels}
}

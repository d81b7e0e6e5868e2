package index_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
)

// The cluster's own objects fill what the Corefile leaves out; what it says wins, and each
// disagreement is a warning; a cluster's locality comes whole from one source.
func TestTopologyWith(t *testing.T) {
	corefile := &index.Topology{Local: "local", Unnamed: true, Keys: index.DefaultKeys, Locality: map[string]map[string]string{
		"west": {index.ZoneKey: "z1", index.RegionKey: "r1"},
	}}
	d := index.Discovered{
		Cluster: "east",
		Links: map[string]map[string]string{
			"west":  {index.RegionKey: "r2"},
			"north": {index.RegionKey: "r1"},
			"south": {},
		},
		Nodes: map[string]string{index.ZoneKey: "z1", index.RegionKey: "r1"},
	}
	got, warnings := corefile.With(d)
	if got.Local != "east" || got.Unnamed || got.LocalFrom != index.FromClusterProperty {
		t.Errorf("this cluster: %q unnamed %v from %s", got.Local, got.Unnamed, got.LocalFrom)
	}
	for cluster, want := range map[string]string{"east": "region:r1,zone:z1 nodes", "west": "region:r1,zone:z1 corefile", "north": "region:r1 link", "south": "none "} {
		if g := got.DescribeLocality(cluster) + " " + got.From(cluster); g != want {
			t.Errorf("%s: %s, want %s", cluster, g, want)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `cluster "west" is at region:r1,zone:z1 in the Corefile`) {
		t.Errorf("warnings %q", warnings)
	}
	for cluster, want := range map[string]uint8{"east": 0, "west": 1, "north": 2, "south": 3} {
		if tier := got.Tier(cluster); tier != want {
			t.Errorf("tier of %s: %d, want %d", cluster, tier, want)
		}
	}
	if corefile.Local != "local" || len(corefile.Locality) != 1 {
		t.Errorf("With changed the Corefile's topology: %+v", corefile)
	}

	// A named cluster keeps its name; a ClusterProperty that disagrees is a warning.
	named := &index.Topology{Local: "east", Keys: index.DefaultKeys}
	if got, w := named.With(index.Discovered{Cluster: "east-1"}); got.Local != "east" || got.LocalFrom != index.FromCorefile || len(w) != 1 {
		t.Errorf("named: %q from %s, warnings %q", got.Local, got.LocalFrom, w)
	}
	if got, w := named.With(index.Discovered{}); !got.Equal(named) || len(w) != 0 {
		t.Errorf("nothing discovered: %+v, warnings %q", got, w)
	}
}

// A new topology rebuilds every service whole: its tiers follow, a big one's too (its next
// change is not merged into records of the old tiers).
func TestSetTopology(t *testing.T) {
	src := scenario()
	big := index.Key{Namespace: "db", Name: "big"}
	west := src.Add(big, &index.Member{Namespace: "db", Name: "big-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}})
	var eps []index.Endpoint
	for i := range 300 {
		eps = append(eps, indextest.Endpoint(fmt.Sprint("big-", i), fmt.Sprintf("10.97.%d.%d", i/256, i%256)))
	}
	src.SetSlices(west, indextest.Slice(dbPort, eps...))
	ix := index.New(indextest.Topology(), src)
	ix.Changed(foo)
	ix.Changed(big)
	ix.Start()
	ix.Publish()
	tiers := func(k index.Key) []string {
		var out []string
		for _, r := range ix.Snapshot().Service(k).All().A {
			if s := fmt.Sprint(r.Cluster, "=", r.Tier); !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out
	}
	if got := tiers(foo); !slices.Equal(got, []string{"east=0", "west=1", "north=2"}) {
		t.Fatalf("tiers %v", got)
	}
	before := ix.Snapshot().Service(big)

	topo := indextest.Topology()
	topo.Locality["west"] = map[string]string{index.ZoneKey: "z9", index.RegionKey: "r9"}
	ix.SetTopology(topo)
	ix.Publish()
	if got := tiers(foo); !slices.Equal(got, []string{"east=0", "north=2", "west=3"}) {
		t.Errorf("tiers after the change %v", got)
	}
	after := ix.Snapshot().Service(big)
	if after.Topology() != topo || index.Merged(before, after) || tiers(big)[0] != "west=3" {
		t.Errorf("the big service: topology %p (want %p), merged %v, tiers %v", after.Topology(), topo, index.Merged(before, after), tiers(big))
	}
	// The same topology again changes nothing.
	serial := ix.Snapshot().Serial
	ix.SetTopology(topo)
	ix.Publish()
	if ix.Snapshot().Service(big) != after {
		t.Errorf("an equal topology rebuilt the services (serial %d -> %d)", serial, ix.Snapshot().Serial)
	}
}

// A service whose only members a topology refuses (mirrors of a cluster no Link names) is not
// published, and is published once a topology accepts them, with no change to its own objects
// (a Link made after its mirrors, Links readable at last); and goes again when they are refused.
func TestSetTopologyAcceptsMembers(t *testing.T) {
	src := indextest.New()
	only := index.Key{Namespace: "db", Name: "only"}
	src.Add(only, &index.Member{Namespace: "db", Name: "only-north", Origin: index.Origin{Cluster: "north", Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("only-0", "10.96.9.1")))
	linked := func(clusters ...string) *index.Topology {
		topo := indextest.Topology()
		topo.Linked = map[string]bool{}
		for _, c := range clusters {
			topo.Linked[c] = true
		}
		return topo
	}
	var notified []index.Key
	ix := index.New(linked("west"), src)
	ix.Subscribe(func(k index.Key) { notified = append(notified, k) })
	ix.Changed(only)
	ix.Start()
	ix.Publish()
	if svc := ix.Snapshot().Service(only); svc != nil {
		t.Fatalf("a mirror of an unlinked cluster is a member: %v", describe(svc.All().A))
	}
	ix.SetTopology(linked("west", "north"))
	ix.Publish()
	svc := ix.Snapshot().Service(only)
	if svc == nil || !slices.Equal(describe(svc.All().A), []string{"2 north only-0 10.96.9.1"}) {
		t.Fatalf("north linked: the service is %v", svc)
	}
	if !slices.Equal(notified, []index.Key{only}) {
		t.Errorf("subscribers (the writer) were told %v, want %v", notified, []index.Key{only})
	}
	ix.SetTopology(linked("west"))
	ix.Publish()
	if svc := ix.Snapshot().Service(only); svc != nil {
		t.Errorf("north unlinked again: the service is still %v", describe(svc.All().A))
	}
}

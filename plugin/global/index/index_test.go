package index_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/telemetry"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var (
	foo    = index.Key{Namespace: "db", Name: "foo"}
	dbPort = []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	// A mirror's endpoints carry the remote target port; its Service carries the port to dial.
	targetPort = []index.Port{{Name: "db", Port: 15432, Protocol: "TCP"}}
)

func TestTier(t *testing.T) {
	topo := indextest.Topology()
	for cluster, want := range map[string]uint8{"east": 0, "west": 1, "north": 2, "south": 3, "unknown": 3} {
		if got := topo.Tier(cluster); got != want {
			t.Errorf("Tier(%s) = %d, want %d", cluster, got, want)
		}
	}
	// Without this cluster's own locality nothing matches.
	delete(topo.Locality, "east")
	if got := topo.Tier("west"); got != 3 {
		t.Errorf("Tier(west) without local locality = %d, want 3", got)
	}
}

// scenario is the core setup: a local StatefulSet (one pod not ready) and mirrors from three
// clusters at three distances, one of them entirely not ready.
func scenario() *indextest.Source {
	src := indextest.New()
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort,
			indextest.Endpoint("foo-0", "10.0.0.3"),
			indextest.Endpoint("foo-1", "10.0.0.1"),
			indextest.NotReady(indextest.Endpoint("foo-2", "10.0.0.2"))))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-north", Origin: index.Origin{Cluster: "north", Ports: dbPort}},
		indextest.Slice(targetPort, indextest.Endpoint("foo-0", "10.96.1.1")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice(targetPort,
			indextest.Endpoint("foo-1", "10.96.0.10"),
			indextest.Endpoint("foo-0", "10.96.0.20")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-south", Origin: index.Origin{Cluster: "south", Ports: dbPort}},
		indextest.Slice(targetPort, indextest.NotReady(indextest.Endpoint("foo-0", "10.96.2.1"))))
	return src
}

func describe(rs []index.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d %s %s %s", r.Tier, r.Cluster, r.Host, r.Addr())
	}
	return out
}

func TestBuildOrdersByTier(t *testing.T) {
	svc := indextest.Topology().Build(foo, scenario())
	want := []string{
		"0 east foo-0 10.0.0.3",
		"0 east foo-1 10.0.0.1",
		"1 west foo-0 10.96.0.20",
		"1 west foo-1 10.96.0.10",
		"2 north foo-0 10.96.1.1",
	}
	if got := describe(svc.All().A); !slices.Equal(got, want) {
		t.Errorf("A order:\n got %q\nwant %q", got, want)
	}
	if svc.Records().Len() != 7 {
		t.Errorf("Records holds %d, want all 7 (not-ready ones too, for the writer)", svc.Records().Len())
	}
	if n := len(svc.All().AAAA); n != 0 {
		t.Errorf("AAAA has %d records", n)
	}

	var targets []string
	for tg := range svc.All().Targets() {
		targets = append(targets, fmt.Sprintf("%d %s.%s %v", tg.Tier, tg.Host, tg.Cluster, tg.Ports[0].Port))
	}
	wantTargets := []string{"0 foo-0.east 5432", "0 foo-1.east 5432", "1 foo-0.west 5432", "1 foo-1.west 5432", "2 foo-0.north 5432"}
	if !slices.Equal(targets, wantTargets) {
		t.Errorf("targets (mirror ports must be the Service's, not the target port):\n got %q\nwant %q", targets, wantTargets)
	}
}

func TestViews(t *testing.T) {
	svc := indextest.Topology().Build(foo, scenario())

	west, ok := svc.Cluster("west")
	if !ok || !slices.Equal(describe(west.A), []string{"1 west foo-0 10.96.0.20", "1 west foo-1 10.96.0.10"}) || len(slices.Collect(west.Targets())) != 2 {
		t.Errorf("Cluster(west) = %v, %v", describe(west.A), ok)
	}
	east, _ := svc.Cluster("east")
	if len(east.A) != 2 {
		t.Errorf("local cluster view has %d ready records, want 2", len(east.A))
	}
	south, ok := svc.Cluster("south")
	if !ok || !south.Empty() {
		t.Errorf("Cluster(south) = %v, %v: a member without ready endpoints is known and empty", south, ok)
	}
	if _, ok := svc.Cluster("nowhere"); ok {
		t.Error("Cluster(nowhere) found")
	}

	pod, ok := svc.Host("west", "foo-1")
	if !ok || !slices.Equal(describe(pod.A), []string{"1 west foo-1 10.96.0.10"}) || len(slices.Collect(pod.Targets())) != 1 {
		t.Errorf("Host(west, foo-1) = %v, %v", describe(pod.A), ok)
	}
	for _, h := range [][2]string{{"east", "foo-2"}, {"west", "foo-9"}, {"nowhere", "foo-0"}} {
		if v, ok := svc.Host(h[0], h[1]); ok || !v.Empty() {
			t.Errorf("Host(%s, %s) found: not-ready or unknown endpoints have no records", h[0], h[1])
		}
	}
}

func TestBuildDualStackAndDuplicates(t *testing.T) {
	src := indextest.New()
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: dbPort}},
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "10.0.0.1")),
		indextest.Slice(dbPort, indextest.Endpoint("foo-0", "fd00::1"), indextest.Endpoint("foo-9", "fd00::9")),
		// The same endpoint in a second slice, for a moment, not ready there; two copies of a
		// ready one and of a not-ready one.
		indextest.Slice(dbPort, indextest.NotReady(indextest.Endpoint("foo-0", "10.0.0.1")), indextest.Endpoint("foo-9", "fd00::9"),
			indextest.NotReady(indextest.Endpoint("foo-5", "10.0.0.5"))),
		indextest.Slice(dbPort, indextest.NotReady(indextest.Endpoint("foo-5", "10.0.0.5"))),
	)
	svc := indextest.Topology().Build(foo, src)
	if svc.Records().Len() != 4 || svc.Records().At(3).Host != "foo-5" {
		t.Fatalf("got %d records, want 4 (duplicate addresses merged): %v", svc.Records().Len(), describe(svc.Records().Flat()))
	}
	all := svc.All()
	targets := slices.Collect(all.Targets())
	if len(all.A) != 1 || len(all.AAAA) != 2 || len(targets) != 2 {
		t.Fatalf("A %d AAAA %d targets %d, want 1 2 2", len(all.A), len(all.AAAA), len(targets))
	}
	if tg := targets[0]; len(tg.A) != 1 || len(tg.AAAA) != 1 {
		t.Errorf("the dual-stack target has %d A and %d AAAA, want 1 and 1", len(tg.A), len(tg.AAAA))
	}
	if tg := targets[1]; tg.Host != "foo-9" || len(tg.A) != 0 || len(tg.AAAA) != 1 {
		t.Errorf("the IPv6-only target: %s with %d A and %d AAAA, want foo-9 with 0 and 1", tg.Host, len(tg.A), len(tg.AAAA))
	}
}

func TestBuildSkipsAmbiguousMembers(t *testing.T) {
	src := indextest.New()
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice(targetPort, indextest.Endpoint("foo-0", "10.96.0.1")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-west-2", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice(targetPort, indextest.Endpoint("foo-0", "10.96.0.2")))
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-east", Origin: index.Origin{Cluster: "east", Ports: dbPort}},
		indextest.Slice(targetPort, indextest.Endpoint("foo-0", "10.96.0.3")))
	svc := indextest.Topology().Build(foo, src)
	if got := describe(svc.All().A); !slices.Equal(got, []string{"1 west foo-0 10.96.0.1"}) {
		t.Errorf("A = %q: want only the first mirror of west, and no mirror claiming east", got)
	}
	var reasons []string
	for _, w := range svc.Warnings {
		reasons = append(reasons, w.Reason)
	}
	slices.Sort(reasons)
	if want := []string{index.ReasonClusterNameClash, index.ReasonDuplicateMirror}; !slices.Equal(reasons, want) {
		t.Errorf("warnings %q, want %q", reasons, want)
	}
}

func TestBuildPortMismatch(t *testing.T) {
	src := indextest.New()
	src.Add(foo, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: dbPort}},
		indextest.Slice([]index.Port{{Name: "db", Port: 1, Protocol: "TCP"}, {Name: "admin", Port: 2, Protocol: "TCP"}},
			indextest.Endpoint("foo-0", "10.96.0.1")))
	svc := indextest.Topology().Build(foo, src)
	if ps := slices.Collect(svc.All().Targets())[0].Ports; !slices.Equal(ps, dbPort) {
		t.Errorf("ports %v, want only the Service port matched by name %v", ps, dbPort)
	}
	if len(svc.Warnings) != 1 || svc.Warnings[0].Reason != index.ReasonPortMismatch {
		t.Errorf("warnings %v", svc.Warnings)
	}
}

func TestIndexPublishes(t *testing.T) {
	src := scenario()
	ix := index.New(indextest.Topology(), src)
	var notified []index.Key
	ix.Subscribe(func(k index.Key) { notified = append(notified, k) })

	ix.Changed(foo)
	ix.Publish()
	if ix.Ready() || ix.Snapshot().Len() != 0 {
		t.Fatal("published before Start: the initial state must be built once, in bulk")
	}
	ix.Start()
	ix.Publish()
	snap := ix.Snapshot()
	if !ix.Ready() || snap.Service(foo) == nil {
		t.Fatalf("after Start: ready %v, foo %v", ix.Ready(), snap.Service(foo))
	}
	if ns := index.Namespaces(snap.Named("foo")); !slices.Equal(ns, []string{"db"}) || !snap.HasNamespace("db") {
		t.Errorf("Namespaces(Named(foo)) = %v, HasNamespace(db) = %v", ns, snap.HasNamespace("db"))
	}

	// The same name in a second namespace; then the first one goes away.
	other := index.Key{Namespace: "app", Name: "foo"}
	m := src.Add(other, &index.Member{Namespace: "app", Name: "foo", Origin: index.Origin{Ports: dbPort}})
	ix.Changed(other)
	ix.Publish()
	if ns := index.Namespaces(ix.Snapshot().Named("foo")); !slices.Equal(ns, []string{"app", "db"}) {
		t.Errorf("Namespaces(Named(foo)) = %v, want [app db]", ns)
	}
	if ns := index.Namespaces(snap.Named("foo")); !slices.Equal(ns, []string{"db"}) {
		t.Errorf("an older snapshot changed: %v", ns)
	}
	src.Remove(other, m)
	ix.Changed(other)
	ix.Publish()
	if s := ix.Snapshot(); s.Service(other) != nil || s.HasNamespace("app") || !slices.Equal(index.Namespaces(s.Named("foo")), []string{"db"}) {
		t.Errorf("after removal: %v %v %v", s.Service(other), s.HasNamespace("app"), index.Namespaces(s.Named("foo")))
	}
	if want := []index.Key{foo, other, other}; !slices.Equal(notified, want) {
		t.Errorf("notified %v, want %v", notified, want)
	}
	if ix.Snapshot().Serial <= snap.Serial {
		t.Errorf("serial did not increase: %d -> %d", snap.Serial, ix.Snapshot().Serial)
	}

	// A key that neither was nor is a global service publishes nothing new.
	before := ix.Snapshot()
	ix.Changed(index.Key{Namespace: "db", Name: "nothing"})
	ix.Publish()
	if len(notified) != 3 || ix.Snapshot().Len() != before.Len() {
		t.Errorf("a no-op change notified or changed the snapshot")
	}
}

// A mirror record is answered exactly while its per-pod mirror (Linkerd's gateway liveness) is
// ready, whatever the headless mirror says; without a per-pod mirror it keeps the headless mirror's
// readiness.
func TestBuildGatewayLiveness(t *testing.T) {
	src := scenario()
	west := src.Members(foo)[2]
	if west.Name != "foo-west" {
		t.Fatalf("scenario changed: %s", west.Name)
	}
	src.SetPodMirrors(west, indextest.PodMirror("10.96.0.20", true), indextest.PodMirror("10.96.0.10", false))
	svc := indextest.Topology().Build(foo, src)
	if got := describe(svc.All().A); !slices.Equal(got, []string{
		"0 east foo-0 10.0.0.3", "0 east foo-1 10.0.0.1", "1 west foo-0 10.96.0.20", "2 north foo-0 10.96.1.1",
	}) {
		t.Errorf("A = %q: want west's foo-1 left out", got)
	}
	states := map[string]string{}
	for r := range svc.Records().All() {
		states[r.Cluster+"/"+r.Host] = r.State()
		if r.Gateway == index.GatewayDown && (r.Ready || r.Serving) {
			t.Errorf("%s/%s: gateway down but ready %v serving %v", r.Cluster, r.Host, r.Ready, r.Serving)
		}
	}
	want := map[string]string{
		"east/foo-0": "ready", "east/foo-1": "ready", "east/foo-2": "not_ready",
		"west/foo-0": "ready", "west/foo-1": "gateway_down",
		"north/foo-0": "ready", // no per-pod mirror: the headless mirror's readiness
		"south/foo-0": "not_ready",
	}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("states %v\nwant   %v", states, want)
	}
	if _, ok := svc.Host("west", "foo-1"); ok {
		t.Error("the per-pod name of a record whose gateway is down answers")
	}
	// The watcher's cached endpoint is shared, never changed.
	for _, sl := range src.Slices(west) {
		for _, e := range sl.Endpoints {
			if !e.Ready || !e.Serving {
				t.Errorf("the source endpoint %s was changed", e.Host)
			}
		}
	}
	src.SetPodMirrors(west, indextest.PodMirror("10.96.0.20", true), indextest.PodMirror("10.96.0.10", true))
	if n := len(indextest.Topology().Build(foo, src).All().A); n != 5 {
		t.Errorf("gateway up again: %d A records, want 5", n)
	}
	// South's headless mirror lists foo-0 as not ready, as Linkerd leaves it after rewriting it
	// while the gateway was down; its per-pod mirror, ready again, is the current word.
	south := src.Members(foo)[3]
	src.SetPodMirrors(south, indextest.PodMirror("10.96.2.1", true))
	svc = indextest.Topology().Build(foo, src)
	if r, ok := svc.Host("south", "foo-0"); !ok || !r.A[0].Ready || !r.A[0].Serving || r.A[0].State() != index.StateReady {
		t.Errorf("south/foo-0, not ready in the headless mirror, its per-pod mirror ready: answered %v (%+v)", ok, r)
	}
	for _, sl := range src.Slices(south) {
		if sl.Endpoints[0].Ready {
			t.Error("the source endpoint of south/foo-0 was changed")
		}
	}
	src.SetPodMirrors(south, indextest.PodMirror("10.96.2.1", false))
	if _, ok := indextest.Topology().Build(foo, src).Host("south", "foo-0"); ok {
		t.Error("south/foo-0 answered with its per-pod mirror not ready")
	}
}

// The records gauges count per cluster and state; a cluster going down or coming back is one event.
func TestIndexClusterHealth(t *testing.T) {
	src := scenario()
	west := src.Members(foo)[2]
	ix := index.New(indextest.Topology(), src)
	ix.Start()
	publish := func() {
		ix.Changed(foo)
		ix.Publish()
	}
	gauge := func(cluster, state string) float64 {
		return testutil.ToFloat64(telemetry.Records.WithLabelValues(cluster, state))
	}
	src.SetPodMirrors(west, indextest.PodMirror("10.96.0.20", true), indextest.PodMirror("10.96.0.10", true))
	publish()
	if gauge("west", "ready") != 2 || gauge("east", "ready") != 2 || gauge("east", "not_ready") != 1 || gauge("south", "not_ready") != 1 {
		t.Errorf("gauges: west ready %v, east ready %v not ready %v, south not ready %v",
			gauge("west", "ready"), gauge("east", "ready"), gauge("east", "not_ready"), gauge("south", "not_ready"))
	}
	if n := testutil.ToFloat64(telemetry.RecordsWithoutPodMirror.WithLabelValues("north")); n != 1 {
		t.Errorf("north's records without a per-pod mirror: %v, want 1", n)
	}
	if n := testutil.ToFloat64(telemetry.RecordsWithoutPodMirror.WithLabelValues("west")); n != 0 {
		t.Errorf("west's records without a per-pod mirror: %v, want 0", n)
	}

	src.SetPodMirrors(west, indextest.PodMirror("10.96.0.20", false), indextest.PodMirror("10.96.0.10", false))
	publish()
	if gauge("west", "ready") != 0 || gauge("west", "gateway_down") != 2 || testutil.ToFloat64(telemetry.ClusterDown.WithLabelValues("west")) != 1 {
		t.Errorf("west down: ready %v, gateway down %v, cluster_down %v", gauge("west", "ready"), gauge("west", "gateway_down"),
			testutil.ToFloat64(telemetry.ClusterDown.WithLabelValues("west")))
	}
	src.SetPodMirrors(west, indextest.PodMirror("10.96.0.20", true), indextest.PodMirror("10.96.0.10", true))
	publish()
	if gauge("west", "ready") != 2 || testutil.ToFloat64(telemetry.ClusterDown.WithLabelValues("west")) != 0 {
		t.Errorf("west back: ready %v, cluster_down %v", gauge("west", "ready"), testutil.ToFloat64(telemetry.ClusterDown.WithLabelValues("west")))
	}
	if testutil.ToFloat64(telemetry.ClusterUnnamed) != 0 {
		t.Error("cluster_unnamed set with a named cluster")
	}
}

// synced turns 1 at the first publication; the oldest unpublished event's time is shown until a
// publication holds it, so a stuck publisher can be told from a quiet mesh.
func TestPublicationGauges(t *testing.T) {
	synced := func() float64 { return testutil.ToFloat64(telemetry.Synced) }
	unpublished := func() float64 { return testutil.ToFloat64(telemetry.UnpublishedChange) }
	ix := index.New(indextest.Topology(), scenario())
	if synced() != 0 {
		t.Errorf("synced %v before the first sync", synced())
	}
	before := float64(time.Now().UnixNano()) / 1e9
	ix.Changed(foo)
	ix.Changed(foo) // the first event of a key is the one waiting
	first := unpublished()
	if first < before || first > before+60 {
		t.Errorf("unpublished since %v, want about %v", first, before)
	}
	ix.Publish() // before Start nothing is published
	if unpublished() != first || synced() != 0 {
		t.Errorf("before Start: unpublished %v synced %v", unpublished(), synced())
	}
	ix.Start()
	ix.Publish()
	if unpublished() != 0 || synced() != 1 {
		t.Errorf("published: unpublished %v synced %v", unpublished(), synced())
	}
	ix.Changed(foo)
	if unpublished() < first {
		t.Errorf("a new change: unpublished since %v, want after %v", unpublished(), first)
	}
	ix.Publish()
	if unpublished() != 0 {
		t.Errorf("published again: unpublished %v", unpublished())
	}
}

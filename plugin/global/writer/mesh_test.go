package writer

import (
	"context"
	"maps"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/test/testkit"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The -global Service carries its first member's opaque ports; a linked cluster's slices its
// mirror's gateway identity and remote name; this cluster's slices none; no slice Linkerd's
// cluster-name label. A change of them is one update of what carries them; annotations of ours that
// someone else added stay; nothing changed, nothing is written.
func TestReconcilerCarriesMeshConfig(t *testing.T) {
	ctx := context.Background()
	k := index.Key{Namespace: "db", Name: "foo"}
	ports := []index.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	src := indextest.New()
	localSlice := indextest.Slice(ports, indextest.Endpoint("foo-0", "10.0.0.1"))
	local := src.Add(k, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: ports},
		Settings: &index.Settings{Annotations: index.Annotations{{Key: index.AnnotationOpaquePorts, Value: "5432"}}}}, localSlice)
	west := src.Add(k, &index.Member{Namespace: "db", Name: "foo-west", Origin: index.Origin{Cluster: "west", Ports: ports}})
	remote := func(identity string) *index.Slice {
		sl := indextest.Slice(ports, indextest.Endpoint("foo-0", "10.96.0.1"))
		sl.Annotations = &index.Annotations{{Key: index.AnnotationGatewayIdentity, Value: identity}, {Key: index.AnnotationRemoteFQName, Value: "foo.db.svc.cluster.local"}}
		return sl
	}
	src.SetSlices(west, remote("gateway.west"))
	topo := indextest.Topology()
	s := topo.Build(k, src)

	r, client := newTestReconciler()
	sync := func() int {
		t.Helper()
		before := writes(client)
		testkit.Must(t, r.sync(ctx, k, s))
		echo(t, r, client, false)
		return writes(client) - before
	}
	check := func(opaque, identity string) {
		t.Helper()
		svc, err := client.CoreV1().Services("db").Get(ctx, "foo-global", metav1.GetOptions{})
		testkit.Must(t, err)
		want := map[string]string{index.AnnotationOpaquePorts: opaque}
		if opaque == "" {
			want = nil
		}
		if !maps.Equal(svc.Annotations, want) {
			t.Errorf("Service annotations %v, want %v", svc.Annotations, want)
		}
		east, err := client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-global-east-ipv4-0", metav1.GetOptions{})
		testkit.Must(t, err)
		if _, ok := east.Labels["mirror.linkerd.io/cluster-name"]; ok || len(east.Annotations) != 0 {
			t.Errorf("this cluster's slice: labels %v, annotations %v", east.Labels, east.Annotations)
		}
		es, err := client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-global-west-ipv4-0", metav1.GetOptions{})
		testkit.Must(t, err)
		want = map[string]string{index.AnnotationGatewayIdentity: identity, index.AnnotationRemoteFQName: "foo.db.svc.cluster.local", "example.com/x": "kept"}
		if _, edited := es.Annotations["example.com/x"]; !edited {
			delete(want, "example.com/x")
		}
		if _, ok := es.Labels["mirror.linkerd.io/cluster-name"]; ok || !maps.Equal(es.Annotations, want) {
			t.Errorf("west's slice: labels %v, annotations %v, want %v", es.Labels, es.Annotations, want)
		}
	}
	if n := sync(); n != 3 {
		t.Errorf("%d writes, want 3 (the Service, two slices)", n)
	}
	check("5432", "gateway.west")
	if n := sync(); n != 0 {
		t.Errorf("%d writes with nothing changed", n)
	}

	// Someone annotates our slice: it stays; then west is linked anew, and the owner changes the
	// opaque ports.
	es, err := client.DiscoveryV1().EndpointSlices("db").Get(ctx, "foo-global-west-ipv4-0", metav1.GetOptions{})
	testkit.Must(t, err)
	es.Annotations["example.com/x"] = "kept"
	_, err = client.DiscoveryV1().EndpointSlices("db").Update(ctx, es, metav1.UpdateOptions{})
	testkit.Must(t, err)
	echo(t, r, client, false)
	if n := sync(); n != 0 {
		t.Errorf("%d writes after a foreign annotation", n)
	}
	src.SetSlices(west, remote("gateway.west.2"))
	s = topo.Rebuild(s, k, src)
	if n := sync(); n != 1 {
		t.Errorf("%d writes for a new gateway identity, want 1", n)
	}
	check("5432", "gateway.west.2")
	src.Remove(k, local)
	src.Add(k, &index.Member{Namespace: "db", Name: "foo", Origin: index.Origin{Ports: ports}}, localSlice)
	s = topo.Rebuild(s, k, src)
	if n := sync(); n != 1 {
		t.Errorf("%d writes for the opaque ports removed, want 1", n)
	}
	check("", "gateway.west.2")
}

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/utils/ptr"
)

// TestWatcherFeedsIndex runs the watcher and the index in process against the real API server,
// whose lists and watches honour label selectors (client-go's fake ignores them on watches): each
// reflector is given, both in its initial state and on its watch, an object only its label
// selector keeps out, and must leave it out. The initial state comes from a list read item by item
// (watch/list.go), whatever client-go's WatchListClient gate says: both settings run.
func TestWatcherFeedsIndex(t *testing.T) {
	t.Parallel()
	for _, streamed := range []bool{true, false} {
		t.Run(map[bool]string{true: "WatchList", false: "List"}[streamed], func(t *testing.T) {
			clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, streamed)
			watcherFeedsIndex(t)
		})
	}
}

func watcherFeedsIndex(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t)
	exported := map[string]string{"mirror.linkerd.io/exported": "true"}
	mirrored := map[string]string{watch.LabelMirroredService: "true", watch.LabelClusterName: "west"}
	// What each selector keeps out: a headless Service without the export label (and its slice);
	// an exported Service's slice without it; a headless "mirror" without mirrored-service=true.
	decoys := func(suffix string) {
		createService(t, ns, "bar"+suffix, nil, nil)
		createSlice(t, ns, "bar"+suffix, "bar"+suffix+"-1", nil, "10.244.9.1")
		createService(t, ns, "qux"+suffix, exported, nil)
		createSlice(t, ns, "qux"+suffix, "qux"+suffix+"-1", nil, "10.244.9.2")
		createService(t, ns, "baz"+suffix+"-west", map[string]string{watch.LabelClusterName: "west"},
			map[string]string{watch.AnnotationRemoteFQName: "baz" + suffix + "." + ns + ".svc.cluster.local"})
	}
	decoys("")
	// A mirror's slice before its Service: the Service's event must pick it up.
	createSlice(t, ns, "foo-west", "foo-west-1", mirrored, "10.96.0.1")

	w, err := watch.New(client(), []string{ns}, watch.DefaultExportSelector)
	testkit.Must(t, err)
	ix := index.New(&index.Topology{Local: "east"}, w)
	go ix.Run(ctx)
	go func() {
		if err := w.Run(ctx, ix); err != nil {
			t.Error(err)
		}
	}()
	addrs := func(name string) ([]string, bool) {
		s := ix.Snapshot().Service(index.Key{Namespace: ns, Name: name})
		if s == nil {
			return nil, false
		}
		var out []string
		for _, r := range s.All().A {
			out = append(out, r.Addr().String())
		}
		slices.Sort(out)
		return out, true
	}
	// The decoys of suffix are kept out: not a global service, or one without the stray record.
	keptOut := func(suffix string) {
		t.Helper()
		for _, name := range []string{"bar" + suffix, "baz" + suffix} {
			if a, ok := addrs(name); ok {
				t.Errorf("%s is a global service (records %v): a label selector let its objects in", name, a)
			}
		}
		if a, ok := addrs("qux" + suffix); !ok || len(a) != 0 {
			t.Errorf("qux%s: global service %v with records %v, want one without records", suffix, ok, a)
		}
	}
	harness.Eventually(t, "the first sync", func() error {
		if !ix.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	keptOut("") // the initial lists are complete once the index is ready

	createService(t, ns, "foo-west", mirrored, map[string]string{watch.AnnotationRemoteFQName: "foo." + ns + ".svc.cluster.local"})
	wantAddrs(t, addrs, "foo", "10.96.0.1")
	createSlice(t, ns, "foo-west", "foo-west-2", mirrored, "10.96.0.2")
	wantAddrs(t, addrs, "foo", "10.96.0.1", "10.96.0.2")

	// The same decoys on the watches, then markers through the same reflectors: a watch delivers
	// in resourceVersion order, so once a marker is in, each decoy made before it was either
	// delivered or kept out by the API server.
	decoys("2")
	createService(t, ns, "marker", exported, nil)
	createSlice(t, ns, "marker", "marker-1", exported, "10.244.9.3")
	createService(t, ns, "marker-west", mirrored, map[string]string{watch.AnnotationRemoteFQName: "marker." + ns + ".svc.cluster.local"})
	createSlice(t, ns, "marker-west", "marker-west-1", mirrored, "10.96.0.3")
	wantAddrs(t, addrs, "marker", "10.244.9.3", "10.96.0.3")
	keptOut("2")

	// An exported ClusterIP Service of the same name is never a member; the global service goes
	// with its last member.
	local := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "foo", Labels: exported},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}
	_, err = client().CoreV1().Services(ns).Create(ctx, local, metav1.CreateOptions{})
	testkit.Must(t, err)
	testkit.Must(t, client().CoreV1().Services(ns).Delete(ctx, "foo-west", metav1.DeleteOptions{}))
	harness.Eventually(t, "foo to go with its last member", func() error {
		if a, ok := addrs("foo"); ok {
			return fmt.Errorf("foo is still a global service: %v", a)
		}
		return nil
	})
}

func wantAddrs(t *testing.T, addrs func(string) ([]string, bool), name string, want ...string) {
	t.Helper()
	harness.Eventually(t, name+"'s records", func() error {
		if got, _ := addrs(name); !slices.Equal(got, want) {
			return fmt.Errorf("%s answers %v, want %v", name, got, want)
		}
		return nil
	})
}

// createService creates a headless selector-less Service with one db port.
func createService(t *testing.T, ns, name string, labels, annotations map[string]string) {
	t.Helper()
	_, err := client().CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
}

// createSlice creates a slice of Service service with labels (and the service-name label) and one
// ready endpoint per address.
func createSlice(t *testing.T, ns, service, name string, labels map[string]string, addrs ...string) {
	t.Helper()
	l := map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "test"}
	for k, v := range labels {
		l[k] = v
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: l},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
	}
	for i, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Hostname: ptr.To(fmt.Sprintf("%s-%d", name, i))})
	}
	_, err := client().DiscoveryV1().EndpointSlices(ns).Create(context.Background(), es, metav1.CreateOptions{})
	testkit.Must(t, err)
}

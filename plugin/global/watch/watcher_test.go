package watch

import (
	"context"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func mirrorSlice(name, service, addr string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, LabelMirroredService: "true", LabelClusterName: "west"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](15432)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Hostname: ptr.To("foo-0")}},
	}
}

// The client-go fake is enough to see the informer wiring feed the index; the real API server
// proves the rest (test/integration).
func TestWatcherFeedsIndex(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The slice exists before its Service: the Service's event must pick it up.
	client := fake.NewClientset(mirrorSlice("foo-west-1", "foo-west", "10.96.0.1"))
	w, err := New(client, nil, DefaultExportSelector)
	if err != nil {
		t.Fatal(err)
	}
	ix := index.New(&index.Topology{Local: "east"}, w)
	go ix.Run(ctx)
	go w.Run(ctx, ix)

	foo := index.Key{Namespace: "db", Name: "foo"}
	addrs := func() []string {
		s := ix.Snapshot().Service(foo)
		if s == nil {
			return nil
		}
		var out []string
		for _, r := range s.All().A {
			out = append(out, r.Addr().String())
		}
		return out
	}
	waitFor(t, "ready", func() bool { return ix.Ready() })

	if _, err := client.CoreV1().Services("db").Create(ctx, mirrorService("foo-west", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mirror's slice", func() bool { return len(addrs()) == 1 && addrs()[0] == "10.96.0.1" })

	if _, err := client.DiscoveryV1().EndpointSlices("db").Create(ctx, mirrorSlice("foo-west-2", "foo-west", "10.96.0.2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second slice", func() bool { return len(addrs()) == 2 })

	// A ClusterIP service of the same name is never a member.
	local := mirrorService("foo", func(s *corev1.Service) {
		s.Labels = map[string]string{"mirror.linkerd.io/exported": "true"}
		s.Spec.ClusterIP = "10.96.0.100"
	})
	if _, err := client.CoreV1().Services("db").Create(ctx, local, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Services("db").Delete(ctx, "foo-west", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the global service to go with its last member", func() bool { return ix.Snapshot().Service(foo) == nil })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

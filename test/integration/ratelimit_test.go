package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// TestWriterOwnRateLimit's load and rate: 2,000 global services (4,000 objects to write) load here
// in 3 s, and at 0.1 requests a second, once its burst of 100 is spent, the writer never gets
// through them. client-go's token bucket queues only the requests waiting on it: behind the
// writer's 4 workers' writes, a shared bucket makes any other request wait 40 s. The deadline is
// far above a change's usual few milliseconds plus client-go's reconnect backoff (up to a few
// seconds after the outage), and clearly below that. (At the default 50 a second the same queue
// costs 80 ms.)
const (
	rateLimitServices = 2000
	rateLimitQPS      = 0.1
	rateLimitDeadline = 20 * time.Second
)

// TestWriterOwnRateLimit: the writer's first sync of a large mesh is one write per object, at the
// client's rate limit. It must not hold up DNS. client-go never rate-limits watches, streamed
// initial lists included, but it does rate-limit lists: where the API server cannot stream them
// (WatchListClient off here), a watch that comes back too late to resume (410 Gone, as after an
// API server restart) relists with a LIST request. With one client, one token bucket, for both,
// each such LIST waits behind the writer's queued writes; with its own, a change to an unrelated
// global service reaches DNS as soon as the watches are back.
func TestWriterOwnRateLimit(t *testing.T) {
	t.Parallel()
	cp := harness.Start(t) // of its own: this test restarts the API server
	ctx := context.Background()
	ns := "ratelimit"
	testkit.Must(t, harness.EnsureNamespace(ctx, cp.Client, ns))
	t0 := time.Now()
	loadGlobalServices(t, cp, ns, rateLimitServices)
	t.Logf("loaded %d global services in %v", rateLimitServices, time.Since(t0).Round(time.Millisecond))

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(`global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        lease %[1]s writer
        cluster east
        apiserver_qps %[2]v
        apiserver_burst 100
        startup_timeout 1m
    }
}
`, ns, rateLimitQPS), harness.WithEnv("KUBE_FEATURE_WatchListClient=false"))
	s0 := "s0." + ns + ".global."
	eventuallyExpect(t, c, s0, dns.TypeA, dns.RcodeSuccess, "A "+loadedAddr(0))
	// The writer has spent most of its burst (a shared one also paid for the watches' lists), and
	// its backlog takes the rest in milliseconds: from then on its writes wait on the rate.
	harness.Eventually(t, "the writer's burst spent", func() error {
		if n := counter(t, c, `coredns_global_endpointslice_changes_total{operation="create"}`); n < 80 {
			return fmt.Errorf("%v creates", n)
		}
		return nil
	})

	restarted := time.Now()
	cp.StopAPIServer()
	testkit.Must(t, cp.StartAPIServer(ctx))
	t.Logf("API server restarted in %v", time.Since(restarted).Round(time.Millisecond))
	// A change written straight to the slice, not through kube-controller-manager, whose own
	// watches come back at their own pace.
	es, err := cp.Client.DiscoveryV1().EndpointSlices(ns).Get(ctx, "s0-x", metav1.GetOptions{})
	testkit.Must(t, err)
	es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.199.0.1"}, Hostname: ptr.To("s0-1")})
	_, err = cp.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
	testkit.Must(t, err)
	changed := time.Now()
	harness.EventuallyWithin(t, 5*harness.Patience, "the change in DNS", func() error {
		return expect(t, c, s0, dns.TypeA, dns.RcodeSuccess, "A "+loadedAddr(0), "A 10.199.0.1")
	})
	latency := time.Since(changed)
	creates := counter(t, c, `coredns_global_endpointslice_changes_total{operation="create"}`)
	t.Logf("a change reached DNS %v after it was written, with the writer at %v of %d creates", latency.Round(time.Millisecond), creates, 2*rateLimitServices)
	if latency > rateLimitDeadline {
		t.Errorf("a change took %v to reach DNS while the writer was busy, want under %v", latency.Round(time.Millisecond), rateLimitDeadline)
	}
}

// loadedAddr is the address of global service i of loadGlobalServices.
func loadedAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d", 200+i/65536, i/256%256, i%256) }

// loadGlobalServices creates n global services in ns as cheaply as the API allows: an exported
// headless selector-less Service and one slice of one endpoint each (no ClusterIP to allocate).
func loadGlobalServices(t *testing.T, cp *harness.ControlPlane, ns string, n int) {
	t.Helper()
	rc := rest.CopyConfig(cp.Config)
	rc.QPS, rc.Burst = 5000, 10000 // loading, not measuring, the API server
	c, err := kubernetes.NewForConfig(rc)
	testkit.Must(t, err)
	ctx := context.Background()
	exported := map[string]string{"mirror.linkerd.io/exported": "true"}
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("s%d", i)
				_, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: exported},
					Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
				}, metav1.CreateOptions{})
				if err == nil {
					_, err = c.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
						ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Labels: map[string]string{
							discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "test", "mirror.linkerd.io/exported": "true"}},
						AddressType: discoveryv1.AddressTypeIPv4,
						Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
						Endpoints: []discoveryv1.Endpoint{{Addresses: []string{loadedAddr(i)},
							Hostname: ptr.To(name + "-0")}},
					}, metav1.CreateOptions{})
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

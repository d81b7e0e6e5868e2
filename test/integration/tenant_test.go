package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// churnCorefile watches one namespace, with the pprof plugin to force a collection before the heap
// is read.
const churnCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    pprof {{.Pprof}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        endpointslices off
        cluster east
    }
}
`

// chartMemoryLimit is the memory limit the chart gives a replica (values.yaml resources).
const chartMemoryLimit = 512 << 20

// TestTenantChurnIsBounded: whoever may edit Services in a namespace cannot grow every replica's
// memory: an exported headless Service of 16,000 ports and a 200 KB annotation, updated 50 times
// with new ports and a new annotation each time, keeps the heap in use below the chart's limit
// throughout, and once it is deleted, within twice what it was before (after a forced
// collection each time).
func TestTenantChurnIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(churnCorefile, ns))
	harness.Eventually(t, "synced", func() error { return metricIs(t, c, "coredns_global_synced", "1") })
	before := heapInUse(t, c)

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "churn", Labels: map[string]string{harness.LabelExported: "true"}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	churn := func(i int) {
		svc.Spec.Ports = svc.Spec.Ports[:0]
		for p := range 16000 {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "p" + strconv.Itoa(p), Port: int32(1 + (p+i)%60000), Protocol: corev1.ProtocolTCP})
		}
		svc.Annotations = map[string]string{"config.linkerd.io/opaque-ports": strconv.Itoa(i) + strings.Repeat(",1", 100000)}
	}
	churn(0)
	_, err := client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	testkit.Must(t, err)
	peak := 0.0
	for i := 1; i <= 50; i++ {
		testkit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := client().CoreV1().Services(ns).Get(ctx, "churn", metav1.GetOptions{})
			if err != nil {
				return err
			}
			churn(i)
			cur.Spec.Ports, cur.Annotations = svc.Spec.Ports, svc.Annotations
			_, err = client().CoreV1().Services(ns).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}))
		if i%25 == 0 {
			if peak = max(peak, heapInUse(t, c)); peak > chartMemoryLimit {
				t.Fatalf("after %d updates the heap in use is %.0f MiB, over the chart's limit of %d MiB", i, peak/(1<<20), chartMemoryLimit>>20)
			}
		}
	}
	// A member without endpoints: a global service all the same, until its Service goes (after
	// its updates: one watch, in order).
	harness.Eventually(t, "the churning Service seen", func() error { return metricIs(t, c, "coredns_global_services", "1") })
	testkit.Must(t, client().CoreV1().Services(ns).Delete(ctx, "churn", metav1.DeleteOptions{}))
	harness.Eventually(t, "the churning Service gone", func() error { return metricIs(t, c, "coredns_global_services", "0") })
	if v := c.Metric(t, `coredns_global_skipped_total{reason="too_many_ports"}`); v == "" || v == "0" {
		t.Errorf("too_many_ports skipped %q times, want some", v)
	}
	after := heapInUse(t, c)
	t.Logf("heap in use: %.1f MiB before, at most %.1f MiB during 50 updates, %.1f MiB after the deletion", before/(1<<20), peak/(1<<20), after/(1<<20))
	if after > 2*before {
		t.Errorf("the heap in use is %.1f MiB once the Service is deleted, more than twice the %.1f MiB before", after/(1<<20), before/(1<<20))
	}
}

// metricIs checks that sample of c's metrics has value want.
func metricIs(t *testing.T, c *harness.CoreDNS, sample, want string) error {
	if v := c.Metric(t, sample); v != want {
		return fmt.Errorf("%s is %q, want %s", sample, v, want)
	}
	return nil
}

// heapInUse returns c's heap in use after a forced collection (the pprof plugin's heap profile
// with gc=1 collects first).
func heapInUse(t *testing.T, c *harness.CoreDNS) float64 {
	t.Helper()
	harness.Get(t, "http://"+c.PprofAddr+"/debug/pprof/heap?gc=1")
	v, err := strconv.ParseFloat(c.Metric(t, "go_memstats_heap_inuse_bytes"), 64)
	testkit.Must(t, err)
	return v
}

// burstCorefile writes the global services of two namespaces, with the writer's default rate.
const burstCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s %[2]s
        lease %[1]s writer
        cluster east
    }
}
`

// TestTenantBurstDoesNotStallOthers: one namespace's burst of new global services does not make
// another namespace's wait behind it. 1,000 exported headless Services made at once in one
// namespace queue 1,000 syncs on the writer's client (50 requests a second): the one Service made
// in another namespace after them has its -global Service written after at most 100 more of the
// burst's (two seconds of the writer's requests), while some are still to come, not after them all.
func TestTenantBurstDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	burst, other := namespace(t), namespace(t)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(burstCorefile, burst, other))
	harness.Eventually(t, "leading", func() error { return metricIs(t, c, "coredns_global_leader", "1") })
	exported := func(ns, name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{harness.LabelExported: "true"}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}}}
	}
	var made sync.WaitGroup
	for w := range 16 {
		made.Go(func() {
			for i := w; i < 1000; i += 16 {
				_, err := client().CoreV1().Services(burst).Create(ctx, exported(burst, fmt.Sprint("s", i)), metav1.CreateOptions{})
				testkit.Must(t, err)
			}
		})
	}
	made.Wait()
	writtenOfBurst := func() int {
		l, err := client().CoreV1().Services(burst).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=coredns-global"})
		testkit.Must(t, err)
		return len(l.Items)
	}
	before := writtenOfBurst()
	_, err := client().CoreV1().Services(other).Create(ctx, exported(other, "mine"), metav1.CreateOptions{})
	testkit.Must(t, err)
	harness.Eventually(t, other+"/mine-global written", func() error {
		_, err := client().CoreV1().Services(other).Get(ctx, "mine-global", metav1.GetOptions{})
		return err
	})
	after := writtenOfBurst()
	t.Logf("%s/mine-global written when %d of the burst's 1,000 were (%d when it was made)", other, after, before)
	// With the burst's syncs queued before it, first come first served, it would come after them all.
	if after == 1000 || after-before > 100 {
		t.Errorf("%s/mine-global was written after %d more of the burst's -global Services (%d of 1,000 then): it waited behind them", other, after-before, after)
	}
}

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestBigServiceChanges changes a global service big enough (300 local endpoints in ten
// EndpointSlices, and a Linkerd mirror) for the index to merge a change into its records instead
// of rebuilding them whole, and checks every answer after each change, over TCP: endpoints turning
// not ready, a slice coming with a not-ready copy of a ready endpoint and going again, and the
// linked cluster's gateway going down and up in between, which the merges that follow must keep.
func TestBigServiceChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	exported := map[string]string{"mirror.linkerd.io/exported": "true"}
	_, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Labels: exported},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	addr := func(e int) string { return fmt.Sprintf("10.70.%d.%d", e/200, e%200+1) }
	// slice writes a slice of the endpoints [from, to) of big, those in notReady not ready, and
	// more endpoints after them.
	slice := func(name string, from, to int, notReady []int, more ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				discoveryv1.LabelServiceName: "big", discoveryv1.LabelManagedBy: "test", "mirror.linkerd.io/exported": "true"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
		}
		for e := from; e < to; e++ {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{addr(e)}, Hostname: ptr.To(fmt.Sprintf("big-%d", e)),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(!slices.Contains(notReady, e))},
			})
		}
		es.Endpoints = append(es.Endpoints, more...)
		return es
	}
	// part is the i-th slice of 30 (a change to one is small enough to be merged).
	part := func(i int, notReady ...int) *discoveryv1.EndpointSlice {
		return slice(fmt.Sprint("big-", i), 30*i, 30*i+30, notReady)
	}
	for i := range 10 {
		_, err := client().DiscoveryV1().EndpointSlices(ns).Create(ctx, part(i), metav1.CreateOptions{})
		testkit.Must(t, err)
	}
	west, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "big", "west", true, true))
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))

	name := "big." + ns + ".global."
	// answers checks big's A records (as a set: the order is the tiers', tested elsewhere) and
	// that the per-pod names of the local endpoints in gone answer NXDOMAIN.
	answers := func(local []int, westUp bool, gone ...int) func() error {
		var want []string
		for _, e := range local {
			want = append(want, "A "+addr(e))
		}
		if westUp {
			want = append(want, "A "+west.ClusterIPs["big-0"], "A "+west.ClusterIPs["big-1"])
		}
		slices.Sort(want)
		return func() error {
			m := ask(t, c, "tcp", name, dns.TypeA)
			got := harness.Render(m.Answer)
			slices.Sort(got)
			if m.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
				return fmt.Errorf("%s A over TCP: %s, %d records, want %d (first difference: %s)", name, dns.RcodeToString[m.Rcode], len(got), len(want), firstDifference(got, want))
			}
			for _, e := range gone {
				if err := expect(t, c, fmt.Sprintf("big-%d.east.%s", e, name), dns.TypeA, dns.RcodeNameError); err != nil {
					return err
				}
			}
			if !westUp {
				return expect(t, c, "west."+name, dns.TypeA, dns.RcodeNameError)
			}
			return expect(t, c, "big-1.west."+name, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["big-1"])
		}
	}
	all := func(except ...int) []int {
		var out []int
		for e := range 300 {
			if !slices.Contains(except, e) {
				out = append(out, e)
			}
		}
		return out
	}
	update := func(es *discoveryv1.EndpointSlice) {
		t.Helper()
		_, err := client().DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
		testkit.Must(t, err)
	}

	harness.Eventually(t, "all 302 endpoints", answers(all(), true))

	update(part(3, 105))
	harness.Eventually(t, "big-105 not ready", answers(all(105), true, 105))

	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", false, nil)
	testkit.Must(t, err)
	harness.Eventually(t, "west's gateway down", answers(all(105), false, 105))

	update(part(6, 207))
	harness.Eventually(t, "big-207 not ready, west still down", answers(all(105, 207), false, 105, 207))

	// A slice with 10 new endpoints and a not-ready copy of big-0 (as when endpoints move between
	// slices): big-0 stays answered.
	copyOf0 := discoveryv1.Endpoint{Addresses: []string{addr(0)}, Hostname: ptr.To("big-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}
	_, err = client().DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("big-d", 300, 310, nil, copyOf0), metav1.CreateOptions{})
	testkit.Must(t, err)
	withD := append(all(105, 207), 300, 301, 302, 303, 304, 305, 306, 307, 308, 309)
	harness.Eventually(t, "a slice of 10 more and a copy", answers(withD, false, 105, 207))

	// Now the ready big-0 goes from its slice: its not-ready copy in big-d is what is left of it.
	update(slice("big-0", 1, 30, nil))
	harness.Eventually(t, "big-0 only a not-ready copy", answers(slices.DeleteFunc(slices.Clone(withD), func(e int) bool { return e == 0 }), false, 0, 105, 207))

	testkit.Must(t, client().DiscoveryV1().EndpointSlices(ns).Delete(ctx, "big-d", metav1.DeleteOptions{}))
	update(part(0))
	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", true, nil)
	testkit.Must(t, err)
	harness.Eventually(t, "big-d gone, big-0 back, west up", answers(all(105, 207), true, 105, 207))
}

// firstDifference names the first record in one sorted list and not in the other.
func firstDifference(got, want []string) string {
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok {
			return "unwanted " + g
		}
	}
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			return "missing " + w
		}
	}
	return "none (the order?)"
}

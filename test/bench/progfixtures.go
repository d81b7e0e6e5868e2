package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/globaldns/global/plugin/global/writer"
	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// progFixtures creates the four scenarios' services.
func progFixtures(ctx context.Context, c kubernetes.Interface) ([]scenario, error) {
	ports := []harness.Port{{Name: "db", Port: 5432}}
	mirror, err := mirrorScenario(ctx, c, ports)
	if err != nil {
		return nil, err
	}
	pod, err := podScenario(ctx, c, ports)
	if err != nil {
		return nil, err
	}
	out := []scenario{mirror, pod}
	// EndpointSlices written directly (by some controller), 10 and 10,000 endpoints, 100 a slice:
	// the same path at both sizes.
	for _, n := range []int{10, 10000} {
		s, err := sliceScenario(ctx, c, n)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// mirrorScenario is a Linkerd mirror of 10 endpoints; a change is a remote pod turning not
// ready, or ready again, as the service mirror writes it (harness.UpdateMirror): out of the
// headless mirror with its per-pod mirror, or back in with a new one.
func mirrorScenario(ctx context.Context, c kubernetes.Interface, ports []harness.Port) (scenario, error) {
	m := harness.Mirror{Namespace: progNS, Service: "m10", Cluster: "west", Ports: ports}
	for i := range 10 {
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("m10-%d", i), Ready: true})
	}
	if _, err := harness.CreateMirror(ctx, c, m); err != nil {
		return scenario{}, err
	}
	return scenario{name: "mirror Endpoints (Linkerd)", svc: "m10", cluster: "west", n: 10, gone: true,
		flip: func(ctx context.Context, k int, ready bool) (time.Time, error) {
			m.Endpoints[k].Ready = ready
			objs, err := harness.UpdateMirror(ctx, c, m)
			if err != nil {
				return time.Time{}, err
			}
			return objs.Written, nil
		}}, nil
}

// podScenario is a local StatefulSet of 10 pods; a change is a pod's Ready condition, as a
// kubelet writes it.
func podScenario(ctx context.Context, c kubernetes.Interface, ports []harness.Port) (scenario, error) {
	if err := harness.CreateNode(ctx, c, harness.Node{Name: "prog-node", Zone: "us-east-1a", Region: "us-east-1"}); err != nil {
		return scenario{}, err
	}
	sts := harness.StatefulSet{Namespace: progNS, Service: "l10", Ports: ports}
	for i := range 10 {
		sts.Pods = append(sts.Pods, harness.Pod{Name: fmt.Sprintf("l10-%d", i), Node: "prog-node", IP: fmt.Sprintf("10.244.50.%d", i+1), Ready: true})
	}
	if err := harness.CreateStatefulSet(ctx, c, sts); err != nil {
		return scenario{}, err
	}
	return scenario{name: "local pod readiness", svc: "l10", cluster: "east", n: 10,
		flip: func(ctx context.Context, k int, ready bool) (time.Time, error) {
			return time.Time{}, harness.SetPodReady(ctx, c, progNS, fmt.Sprintf("l10-%d", k), ready)
		}}, nil
}

// sliceScenario is a service of n endpoints in EndpointSlices written directly; a change is one
// endpoint's Ready condition in its slice.
func sliceScenario(ctx context.Context, c kubernetes.Interface, n int) (scenario, error) {
	svc := fmt.Sprintf("e%d", n)
	if n == 10000 {
		svc = "e10k"
	}
	slices, err := directSlices(ctx, c, svc, n)
	if err != nil {
		return scenario{}, err
	}
	return scenario{name: sliceUpdate, svc: svc, cluster: "east", n: n,
		flip: func(ctx context.Context, k int, ready bool) (time.Time, error) {
			es := slices[k/100]
			es.Endpoints[k%100].Conditions.Ready = ptr.To(ready)
			upd, err := c.DiscoveryV1().EndpointSlices(progNS).Update(ctx, es, metav1.UpdateOptions{})
			if err == nil {
				slices[k/100] = upd
			}
			return time.Time{}, err
		}}, nil
}

// directSlices creates a selector-less exported headless Service svc and n endpoints in slices of
// 100, as a custom controller would.
func directSlices(ctx context.Context, c kubernetes.Interface, svc string, n int) ([]*discoveryv1.EndpointSlice, error) {
	exported := map[string]string{"mirror.linkerd.io/exported": "true"}
	if _, err := c.CoreV1().Services(progNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc, Labels: exported},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var out []*discoveryv1.EndpointSlice
	for s := 0; s*100 < n; s++ {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", svc, s), Labels: map[string]string{
				discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "bench", "mirror.linkerd.io/exported": "true"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
		}
		for e := s * 100; e < min(n, (s+1)*100); e++ {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 60+len(svc), e/250, e%250+1)},
				Hostname:   ptr.To(fmt.Sprintf("%s-%d", svc, e)),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			})
		}
		created, err := c.DiscoveryV1().EndpointSlices(progNS).Create(ctx, es, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		out = append(out, created)
	}
	return out, nil
}

// programmingHist is the plugin's own share of a change: watch event to published index.
const programmingHist = "coredns_global_programming_duration_seconds"

// programmed returns the plugin's own programming time of one change: what the programming
// histogram's sum gained since before, per observation gained (usually one). The answer can be
// served a moment before the observation is made, so it polls.
func programmed(addr string, before map[string]float64) (float64, error) {
	const hist = programmingHist
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := metrics(addr)
		if err != nil {
			return 0, err
		}
		if n := m[hist+"_count"] - before[hist+"_count"]; n > 0 {
			return (m[hist+"_sum"] - before[hist+"_sum"]) / n, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s gained no observation", hist)
		}
		time.Sleep(time.Millisecond)
	}
}

// writtenVersions returns the resource version of every Service and EndpointSlice the plugin
// wrote in the programming namespace, by kind and name.
func writtenVersions(ctx context.Context, c kubernetes.Interface) (map[string]string, error) {
	opts := metav1.ListOptions{LabelSelector: writer.LabelManagedBy + "=" + writer.ManagedBy}
	svcs, err := c.CoreV1().Services(progNS).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	sls, err := c.DiscoveryV1().EndpointSlices(progNS).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range svcs.Items {
		out["Service "+s.Name] = s.ResourceVersion
	}
	for _, s := range sls.Items {
		out["EndpointSlice "+s.Name] = s.ResourceVersion
	}
	return out, nil
}

// settledVersions waits until two looks at the written objects, two seconds apart, agree.
func settledVersions(ctx context.Context, c kubernetes.Interface) (map[string]string, error) {
	last, err := writtenVersions(ctx, c)
	for deadline := time.Now().Add(time.Minute); err == nil && time.Now().Before(deadline); {
		time.Sleep(2 * time.Second)
		var now map[string]string
		if now, err = writtenVersions(ctx, c); err == nil && maps.Equal(now, last) {
			return now, nil
		}
		last = now
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the written objects kept changing for a minute with nothing changing")
}

// waitPod polls until the per-pod name answers (ready) or is NXDOMAIN (not ready).
func waitPod(ctx context.Context, addr, qname string, ready bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, rcode, err := count(addr, qname, "udp")
		if err == nil && (ready && n > 0 || !ready && rcode == dns.RcodeNameError) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never became ready=%v", qname, ready)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// writtenHosts maps every written endpoint hostname of s's -global Service to its slice.
func writtenHosts(ctx context.Context, c kubernetes.Interface, s scenario) (map[string]string, error) {
	list, err := c.DiscoveryV1().EndpointSlices(progNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.svc + "-global"})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, es := range list.Items {
		for _, e := range es.Endpoints {
			out[ptr.Deref(e.Hostname, "")] = es.Name
		}
	}
	return out, nil
}

// writtenState says, for a failure, where hostname is in s's written slices and as what.
func writtenState(ctx context.Context, c kubernetes.Interface, s scenario, hostname string) string {
	list, err := c.DiscoveryV1().EndpointSlices(progNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.svc + "-global"})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, es := range list.Items {
		for _, e := range es.Endpoints {
			if ptr.Deref(e.Hostname, "") == hostname {
				out = append(out, fmt.Sprintf("%s (resourceVersion %s, generation %d): ready=%v", es.Name, es.ResourceVersion, es.Generation, ptr.Deref(e.Conditions.Ready, true)))
			}
		}
	}
	return fmt.Sprintf("%s in the written slices: %v", hostname, out)
}

// waitWritten polls until the -global slices of s hold n endpoints.
func waitWritten(ctx context.Context, c kubernetes.Interface, s scenario, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		hosts, err := writtenHosts(ctx, c, s)
		if err == nil && len(hosts) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s-global never had %d endpoints (%d, %v)", s.svc, n, len(hosts), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitWrittenReady polls the written slice until hostname's ready condition is ready; with gone,
// until hostname is there (ready) or not.
func waitWrittenReady(ctx context.Context, c kubernetes.Interface, slice, hostname string, ready, gone bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		es, err := c.DiscoveryV1().EndpointSlices(progNS).Get(ctx, slice, metav1.GetOptions{})
		if err == nil {
			there := slices.ContainsFunc(es.Endpoints, func(e discoveryv1.Endpoint) bool {
				return ptr.Deref(e.Hostname, "") == hostname && (gone || ptr.Deref(e.Conditions.Ready, true) == ready)
			})
			if there == (ready || !gone) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("written slice %s never showed %s ready=%v (%v)", slice, hostname, ready, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
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

const programmingCorefile = `global:PORT near.global:PORT {
    bind 127.0.0.1
    prometheus METRICS
    global global near.global {
        kubeconfig KUBECONFIG
        namespaces prog
        lease prog writer
        cluster east
        policy nearest near.global
    }
}
`

const progNS = "prog"

// scenario is one way a global service's endpoints change.
type scenario struct {
	name, svc, cluster string // cluster: where the endpoints are (east: local)
	n                  int    // endpoints
	// flip changes endpoint k's readiness; it returns when it wrote what the answer follows (zero:
	// when it was called).
	flip func(ctx context.Context, k int, ready bool) (time.Time, error)
	gone bool // an endpoint that is not ready leaves the written slices (a mirror's)
}

func (s scenario) host(k int) string { return fmt.Sprintf("%s-%d", s.svc, k) }

func programming(ctx context.Context, cp *harness.ControlPlane, o options, r *report) error {
	c := cp.Client
	if err := harness.EnsureNamespace(ctx, c, progNS); err != nil {
		return err
	}
	scenarios, err := progFixtures(ctx, c)
	if err != nil {
		return err
	}
	if err := gatewayFixtures(ctx, c); err != nil {
		return err
	}
	west, err := failoverFixtures(ctx, c)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	mport, err := freePort()
	if err != nil {
		return err
	}
	corefile := render(programmingCorefile, "PORT", port, "METRICS", "127.0.0.1:"+mport, "KUBECONFIG", cp.Kubeconfig)
	dir := filepath.Join(o.work, "coredns-programming")
	dns1, err := harness.StartCoreDNSProcess(corefile, dir, nil)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			dns1.Stop()
		}
	}()
	for _, s := range scenarios {
		if err := waitWritten(ctx, c, s, s.n); err != nil {
			return err
		}
	}

	dnsSec := section{
		title: "Programming latency",
		intro: fmt.Sprintf("From the API write that changes one endpoint's readiness until `bin/coredns` answers the change (a per-pod name "+
			"turning NXDOMAIN or back, polled over UDP), %d changes per row (%d in the EndpointSlice update rows, whose plugin shares are compared: "+
			"a p99 of 200 is their second largest); and the plugin's own "+
			"`coredns_global_programming_duration_seconds` (watch event to published index) for the same changes, each change's own "+
			"(the histogram's sum and count read before and after it, so exact, not a bucket's estimate). The mirror row is a remote "+
			"pod turning not ready (or ready) as Linkerd's service mirror writes it, out of (or into) the headless mirror with its per-pod "+
			"mirror, timed from the headless mirror's Endpoints write, and includes kube-controller-manager mirroring it into an "+
			"EndpointSlice; the pod row, the endpointslice controller.", o.changes, o.compareChanges),
		header: []string{"Change", "Endpoints", "p50", "p99", "plugin p50", "plugin p99"},
	}
	wSec := section{
		title: "Writer cost",
		intro: "The same changes, until the written `<svc>-global` EndpointSlice shows them, and the API writes they cost " +
			"(`coredns_global_endpointslice_changes_total`).",
		header: []string{"Change", "Endpoints", "p50", "p99", "API writes per change"},
	}
	var p99s []string
	var writerP99 float64
	var maxWrites float64
	pluginP99 := map[int]float64{} // the EndpointSlice update rows', by endpoints
	for _, s := range scenarios {
		where, err := writtenHosts(ctx, c, s)
		if err != nil {
			return err
		}
		before, err := metrics(dns1.MetricsAddr)
		if err != nil {
			return err
		}
		var dnsLat, writeLat, pluginLat []float64
		changes := o.changes
		if s.name == sliceUpdate {
			changes = o.compareChanges
		}
		for i := range changes {
			k := (i / 2 * 7) % s.n // each endpoint goes down, then up again
			ready := i%2 == 1
			m0, err := metrics(dns1.MetricsAddr)
			if err != nil {
				return err
			}
			t0 := time.Now()
			written, err := s.flip(ctx, k, ready)
			if err != nil {
				return err
			}
			if !written.IsZero() {
				t0 = written
			}
			if err := waitPod(ctx, dns1.Addr, fmt.Sprintf("%s.%s.%s.%s.global.", s.host(k), s.cluster, s.svc, progNS), ready); err != nil {
				return err
			}
			dnsLat = append(dnsLat, time.Since(t0).Seconds())
			share, err := programmed(dns1.MetricsAddr, m0)
			if err != nil {
				return err
			}
			pluginLat = append(pluginLat, share)
			if err := waitWrittenReady(ctx, c, where[s.host(k)+"-"+s.cluster], s.host(k)+"-"+s.cluster, ready, s.gone); err != nil {
				return err
			}
			writeLat = append(writeLat, time.Since(t0).Seconds())
		}
		after, err := metrics(dns1.MetricsAddr)
		if err != nil {
			return err
		}
		writes := 0.0
		for _, op := range []string{"create", "update", "delete"} {
			k := `coredns_global_endpointslice_changes_total{operation="` + op + `"}`
			writes += after[k] - before[k]
		}
		perChange := writes / float64(changes)
		if s.name == sliceUpdate {
			pluginP99[s.n] = quantile(pluginLat, .99)
		}
		dnsSec.rows = append(dnsSec.rows, []string{s.name, fmt.Sprint(s.n), ms(quantile(dnsLat, .5)), ms(quantile(dnsLat, .99)),
			ms(quantile(pluginLat, .5)), ms(quantile(pluginLat, .99))})
		wSec.rows = append(wSec.rows, []string{s.name, fmt.Sprint(s.n), ms(quantile(writeLat, .5)), ms(quantile(writeLat, .99)), fmt.Sprintf("%.2f", perChange)})
		p99s = append(p99s, fmt.Sprintf("%s (%s, %d endpoints)", ms(quantile(dnsLat, .99)), s.name, s.n))
		writerP99 = max(writerP99, quantile(writeLat, .99))
		maxWrites = max(maxWrites, perChange)
		fmt.Printf("%-40s %5d endpoints: DNS p99 %s, writer p99 %s, %.2f writes/change\n", s.name, s.n, ms(quantile(dnsLat, .99)), ms(quantile(writeLat, .99)), perChange)
	}

	for _, g := range gatewayCases {
		if err := waitAnswers(ctx, dns1.Addr, fmt.Sprintf("%s.%s.global.", g.svc, progNS), g.n); err != nil {
			return err
		}
	}
	gwSec, gwGoals, err := gatewayRows(ctx, c, dns1.Addr, dns1.MetricsAddr)
	if err != nil {
		return err
	}
	foSec, foP99, err := failoverRow(ctx, c, dns1.Addr, west, o.changes)
	if err != nil {
		return err
	}

	// A restart with nothing changed writes nothing. The rows above end on a DNS answer, which
	// comes before the writer's write: wait until the written objects hold still, so a write
	// the old process had not made yet is not counted against the new one.
	before, err := settledVersions(ctx, c)
	if err != nil {
		return err
	}
	dns1.Stop()
	stopped = true
	t0 := time.Now()
	dns2, err := harness.StartCoreDNSProcess(corefile, dir+"-restart", nil)
	if err != nil {
		return err
	}
	defer dns2.Stop()
	var m map[string]float64
	for {
		if m, err = metrics(dns2.MetricsAddr); err == nil && m["coredns_global_leader"] == 1 &&
			m[`coredns_global_writer_syncs_total{result="success"}`] >= float64(len(scenarios)+len(gatewayCases)+1) {
			break
		}
		if time.Since(t0) > 2*time.Minute {
			return fmt.Errorf("the restarted writer never synced: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	m, _ = metrics(dns2.MetricsAddr)
	restartWrites := m[`coredns_global_endpointslice_changes_total{operation="create"}`] + m[`coredns_global_endpointslice_changes_total{operation="update"}`] +
		m[`coredns_global_endpointslice_changes_total{operation="delete"}`]
	after, err := writtenVersions(ctx, c)
	if err != nil {
		return err
	}
	var rewritten []string
	for name, v := range after {
		if before[name] != v {
			rewritten = append(rewritten, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			rewritten = append(rewritten, name+" (deleted)")
		}
	}
	slices.Sort(rewritten)
	wSec.intro += fmt.Sprintf(" A restart with nothing changed, once the new process led and synced every service: **%.0f writes**.", restartWrites)
	if len(rewritten) > 0 {
		wSec.intro += " Changed: " + strings.Join(rewritten, ", ") + "."
	}

	r.add(dnsSec)
	r.add(gwSec)
	r.add(foSec)
	r.add(wSec)
	r.goal("Programming latency p99, 10 and 10,000 endpoints", "≤ 100 ms, the same at both", joinComma(p99s))
	r.goal("Programming, the plugin's own share p99: one change in a service of 10,000 endpoints vs 10 (EndpointSlice update)", "≤ 2× the 10-endpoint figure",
		fmt.Sprintf("%s vs %s (%.1f×)", ms(pluginP99[10000]), ms(pluginP99[10]), pluginP99[10000]/pluginP99[10]))
	r.goal("Gateway down or up → DNS, p99 after each per-pod mirror's Endpoints write, 3 and 1,000 pods", "≤ 100 ms", joinComma(gwGoals))
	r.goal("Nearest tier empties → the next tier is answered, p99 from the API write", "≤ 100 ms", foP99)
	r.goal("Writer: change to written slice, p99", "≤ 1 s", ms(writerP99))
	r.goal("Writer: API writes per single-endpoint change", "1", fmt.Sprintf("%.2f (the most of any row)", maxWrites))
	r.goal("Writer: writes on a restart with nothing changed", "0", fmt.Sprintf("%.0f", restartWrites))
	return nil
}

func joinComma(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}

const sliceUpdate = "EndpointSlice update"

// progFixtures creates the four scenarios' services.
func progFixtures(ctx context.Context, c kubernetes.Interface) ([]scenario, error) {
	ports := []harness.Port{{Name: "db", Port: 5432}}
	var out []scenario

	// A Linkerd mirror of 10 endpoints; a change is a remote pod turning not ready, or ready
	// again, as the service mirror writes it (harness.UpdateMirror): out of the headless mirror
	// with its per-pod mirror, or back in with a new one.
	m := harness.Mirror{Namespace: progNS, Service: "m10", Cluster: "west", Ports: ports}
	for i := range 10 {
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("m10-%d", i), Ready: true})
	}
	if _, err := harness.CreateMirror(ctx, c, m); err != nil {
		return nil, err
	}
	out = append(out, scenario{name: "mirror Endpoints (Linkerd)", svc: "m10", cluster: "west", n: 10, gone: true,
		flip: func(ctx context.Context, k int, ready bool) (time.Time, error) {
			m.Endpoints[k].Ready = ready
			objs, err := harness.UpdateMirror(ctx, c, m)
			if err != nil {
				return time.Time{}, err
			}
			return objs.Written, nil
		}})

	// A local StatefulSet of 10 pods; a change is a pod's Ready condition, as a kubelet writes it.
	if err := harness.CreateNode(ctx, c, harness.Node{Name: "prog-node", Zone: "us-east-1a", Region: "us-east-1"}); err != nil {
		return nil, err
	}
	sts := harness.StatefulSet{Namespace: progNS, Service: "l10", Ports: ports}
	for i := range 10 {
		sts.Pods = append(sts.Pods, harness.Pod{Name: fmt.Sprintf("l10-%d", i), Node: "prog-node", IP: fmt.Sprintf("10.244.50.%d", i+1), Ready: true})
	}
	if err := harness.CreateStatefulSet(ctx, c, sts); err != nil {
		return nil, err
	}
	out = append(out, scenario{name: "local pod readiness", svc: "l10", cluster: "east", n: 10,
		flip: func(ctx context.Context, k int, ready bool) (time.Time, error) {
			return time.Time{}, harness.SetPodReady(ctx, c, progNS, fmt.Sprintf("l10-%d", k), ready)
		}})

	// EndpointSlices written directly (by some controller), 10 and 10,000 endpoints, 100 a slice:
	// the same path at both sizes.
	for _, n := range []int{10, 10000} {
		svc := fmt.Sprintf("e%d", n)
		if n == 10000 {
			svc = "e10k"
		}
		slices, err := directSlices(ctx, c, svc, n)
		if err != nil {
			return nil, err
		}
		out = append(out, scenario{name: sliceUpdate, svc: svc, cluster: "east", n: n,
			flip: func(ctx context.Context, k int, ready bool) (time.Time, error) {
				es := slices[k/100]
				es.Endpoints[k%100].Conditions.Ready = ptr.To(ready)
				upd, err := c.DiscoveryV1().EndpointSlices(progNS).Update(ctx, es, metav1.UpdateOptions{})
				if err == nil {
					slices[k/100] = upd
				}
				return time.Time{}, err
			}})
	}
	return out, nil
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

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// writerCorefile is the writer tests' Corefile: like corefile, writing, with a lease per test so
// that tests never wait on each other. Lease timings are client-go's defaults.
const writerCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        rotate off
        lease %[1]s writer
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
        locality north zone=eu-north-1a region=eu-north-1
    }
}
`

// written returns our Service and its slices by name, nil Service when there is none.
func written(t *testing.T, ns string) (*corev1.Service, map[string]discoveryv1.EndpointSlice) {
	t.Helper()
	ctx := context.Background()
	svc, err := client().CoreV1().Services(ns).Get(ctx, "foo-global", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		svc = nil
	} else {
		testkit.Must(t, err)
	}
	list, err := client().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=foo-global"})
	testkit.Must(t, err)
	out := map[string]discoveryv1.EndpointSlice{}
	for _, es := range list.Items {
		out[es.Name] = es
	}
	return svc, out
}

// describeSlice renders what a slice says, one endpoint a line, for exact comparison.
func describeSlice(es discoveryv1.EndpointSlice) string {
	var b strings.Builder
	var ports []string
	for _, p := range es.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d/%s", deref(p.Name), *p.Port, deref(p.Protocol)))
	}
	fmt.Fprintf(&b, "%s %s ports=%s\n", es.Name, es.AddressType, strings.Join(ports, ","))
	for _, e := range es.Endpoints {
		target := ""
		if e.TargetRef != nil {
			target = e.TargetRef.Kind + "/" + e.TargetRef.Namespace + "/" + e.TargetRef.Name
		}
		fmt.Fprintf(&b, "  %s %s ready=%v serving=%v terminating=%v zone=%s node=%s target=%s\n", deref(e.Hostname), strings.Join(e.Addresses, ","),
			*e.Conditions.Ready, *e.Conditions.Serving, *e.Conditions.Terminating, deref(e.Zone), deref(e.NodeName), target)
	}
	return b.String()
}

func deref[T ~string](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return string(*p)
}

func describeAll(sl map[string]discoveryv1.EndpointSlice) string {
	names := slices.Sorted(maps.Keys(sl))
	var b strings.Builder
	for _, n := range names {
		b.WriteString(describeSlice(sl[n]))
	}
	return b.String()
}

// versions maps every written object to its resourceVersion: any write changes one.
func versions(t *testing.T, ns string) map[string]string {
	svc, sl := written(t, ns)
	out := map[string]string{}
	if svc != nil {
		out["service"] = svc.ResourceVersion
	}
	for n, es := range sl {
		out[n] = es.ResourceVersion
	}
	return out
}

// counter returns one counter sample of c's /metrics as a number: 0 while absent (nothing counted).
func counter(t *testing.T, c *harness.CoreDNS, sample string) float64 {
	t.Helper()
	v := c.Metric(t, sample)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseFloat(v, 64)
	testkit.Must(t, err)
	return n
}

// The writer's counters the tests read.
const (
	syncedOK     = `coredns_global_writer_syncs_total{result="success"}`
	syncedClash  = `coredns_global_writer_syncs_total{result="conflict"}`
	wroteUpdates = `coredns_global_endpointslice_changes_total{operation="update"}`
)

func TestWriterObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	// north's gateway is down: its record is written, not ready (mesh-aware clients see the truth).
	down := mirror(ns, "north", true)
	down.GatewayDown = true
	north, err := harness.CreateMirror(ctx, client(), down)
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))

	pod := func(name string) string { return "Pod/" + ns + "/" + name }
	want := fmt.Sprintf(`foo-global-east-ipv4-0 IPv4 ports=db:15432/TCP
  foo-0-east 10.244.1.10 ready=true serving=true terminating=false zone=us-east-1a node=%[1]s-a target=%[2]s
  foo-1-east 10.244.2.11 ready=true serving=true terminating=false zone=us-east-1b node=%[1]s-b target=%[3]s
  foo-2-east 10.244.1.12 ready=false serving=false terminating=false zone=us-east-1a node=%[1]s-a target=%[4]s
foo-global-north-ipv4-0 IPv4 ports=db:5432/TCP
  foo-0-north %[6]s ready=false serving=false terminating=false zone=eu-north-1a node=<nil> target=
foo-global-west-ipv4-0 IPv4 ports=db:5432/TCP
  foo-0-west %[5]s ready=true serving=true terminating=false zone=us-east-1b node=<nil> target=
`, ns, pod("foo-0"), pod("foo-1"), pod("foo-2"), west.ClusterIPs["foo-0"], north.ClusterIPs["foo-0"])
	harness.Eventually(t, "the written slices", func() error {
		if _, sl := written(t, ns); describeAll(sl) != want {
			return fmt.Errorf("slices:\n%s\nwant:\n%s", describeAll(sl), want)
		}
		return nil
	})

	svc, sl := written(t, ns)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil || len(svc.Spec.Ports) != 1 ||
		svc.Spec.Ports[0].Name != "db" || svc.Spec.Ports[0].Port != 5432 {
		t.Errorf("Service spec %+v", svc.Spec)
	}
	// The writer is the lease: writerCorefile's is <ns>/writer.
	if svc.Labels["app.kubernetes.io/managed-by"] != "coredns-global" || svc.Labels["globaldns.io/global-service"] != "foo" ||
		svc.Labels["globaldns.io/writer"] != ns+".writer" {
		t.Errorf("Service labels %v", svc.Labels)
	}
	for name, es := range sl {
		cluster := strings.Split(strings.TrimPrefix(name, "foo-global-"), "-")[0]
		wantLabels := map[string]string{
			"kubernetes.io/service-name":             "foo-global",
			"endpointslice.kubernetes.io/managed-by": "global.globaldns.io",
			"app.kubernetes.io/managed-by":           "coredns-global",
			"globaldns.io/global-service":            "foo",
			"globaldns.io/source-cluster":            cluster,
			"globaldns.io/writer":                    ns + ".writer",
			corev1.IsHeadlessService:                 "", // kube-proxy ignores the slice
		}
		// A linked cluster's slices carry what Linkerd's destination reads of its own mirrors'.
		var wantAnnotations map[string]string
		if cluster != "east" {
			wantAnnotations = map[string]string{
				harness.AnnotationRemoteSvcFqName:       "foo." + ns + ".svc.cluster.local",
				harness.AnnotationRemoteGatewayIdentity: harness.GatewayIdentity,
			}
		}
		if fmt.Sprint(es.Labels) != fmt.Sprint(wantLabels) || !maps.Equal(es.Annotations, wantAnnotations) {
			t.Errorf("%s labels %v, annotations %v, want %v and %v", name, es.Labels, es.Annotations, wantLabels, wantAnnotations)
		}
		if ref := metav1.GetControllerOf(&es); ref == nil || ref.UID != svc.UID || ref.Kind != "Service" {
			t.Errorf("%s is not owned by the Service: %v", name, es.OwnerReferences)
		}
	}
	testkit.Must(t, expect(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11", "A "+west.ClusterIPs["foo-0"]))

	// The cluster's own DNS (CoreDNS's kubernetes plugin) answers from what was written.
	kube := harness.StartCoreDNS(t, cp, `cluster.local:{{.Port}} {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig {{.Kubeconfig}}
        namespaces `+ns+`
    }
}
`)
	svcName := "foo-global." + ns + ".svc.cluster.local."
	harness.Eventually(t, "the kubernetes plugin's answer", func() error {
		return expectAnyOrder(t, kube, svcName, dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11", "A "+west.ClusterIPs["foo-0"])
	})
	testkit.Must(t, expect(t, kube, "foo-0-west."+svcName, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"]))
	testkit.Must(t, expect(t, kube, "foo-1-east."+svcName, dns.TypeA, dns.RcodeSuccess, "A 10.244.2.11"))

	// Members removed while no replica runs: the next one to lead deletes what was written.
	c.Stop()
	testkit.Must(t, client().CoreV1().Services(ns).Delete(ctx, "foo", metav1.DeleteOptions{}))
	testkit.Must(t, harness.DeleteMirror(ctx, client(), ns, "foo", "west"))
	testkit.Must(t, harness.DeleteMirror(ctx, client(), ns, "foo", "north"))
	harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	harness.Eventually(t, "the written objects to go", func() error {
		if svc, sl := written(t, ns); svc != nil || len(sl) != 0 {
			return fmt.Errorf("still there: service %v, %d slices", svc != nil, len(sl))
		}
		return nil
	})
}

// TestWriterNewTermAfterLostLease: another holder takes the Lease from the running leader; it
// stops leading, takes the Lease again once that holder lets it expire, and the new term writes
// what changes next. (Deleting the Lease would not do: client-go's renewal creates it again within
// the same term. TestTermsDoNotOverlap covers a new term starting before the last has returned.)
func TestWriterNewTermAfterLostLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	westSlice := func(want ...string) func() error {
		return func() error {
			_, sl := written(t, ns)
			var got []string
			for _, e := range sl["foo-global-west-ipv4-0"].Endpoints {
				got = append(got, *e.Hostname)
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("west's slice has %v, want %v", got, want)
			}
			return nil
		}
	}
	harness.Eventually(t, "the first term's writes", westSlice("foo-0-west", "foo-1-west"))

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := client().CoordinationV1().Leases(ns).Get(ctx, "writer", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Spec.HolderIdentity = ptrTo("someone-else")
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		_, err = client().CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	testkit.Must(t, err)
	harness.EventuallyLong(t, "a second term", func() error {
		if n := strings.Count(c.Logs(), "leads (lease "+ns+"/writer)"); n < 2 {
			return fmt.Errorf("%d terms", n)
		}
		return nil
	})
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "west", true, false))
	testkit.Must(t, err)
	harness.Eventually(t, "the second term's writes", westSlice("foo-0-west"))
}

// TestWriterRenamedPort: a linked cluster exposes the local db:5432 as postgres:5432. The written
// Service must still be valid (the API rejects two ports of one number and protocol), so every
// cluster's slice gets written.
func TestWriterRenamedPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	m := mirror(ns, "west", true)
	m.Ports = []harness.Port{{Name: "postgres", Port: 5432}}
	_, err := harness.CreateMirror(ctx, client(), m)
	testkit.Must(t, err)
	harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	harness.Eventually(t, "both clusters' slices", func() error {
		svc, sl := written(t, ns)
		if svc == nil || len(sl) != 2 {
			return fmt.Errorf("service %v, slices:\n%s", svc != nil, describeAll(sl))
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "db" || svc.Spec.Ports[0].Port != 5432 {
			return fmt.Errorf("service ports %v: want the local db:5432 alone", svc.Spec.Ports)
		}
		return nil
	})
}

// TestWriterRestoresItsService: someone adds a selector to the written Service (Kubernetes'
// EndpointSlice controller would then write slices beside ours), then makes it an ExternalName:
// the writer restores both.
func TestWriterRestoresItsService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	restored := func() error {
		svc, _ := written(t, ns)
		if svc == nil || len(svc.Spec.Selector) > 0 || svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			return fmt.Errorf("service %+v", svc)
		}
		return nil
	}
	harness.Eventually(t, "the written Service", restored)
	for _, edit := range []func(*corev1.Service){
		func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "theirs"} },
		func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "db.example.com"
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = "", nil, nil, nil
		},
	} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := client().CoreV1().Services(ns).Get(ctx, "foo-global", metav1.GetOptions{})
			if err != nil {
				return err
			}
			edit(svc)
			_, err = client().CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		})
		testkit.Must(t, err)
		harness.Eventually(t, "the Service restored", restored)
	}
}

// TestWriterRestoresItsSlices: someone edits a written slice (an endpoint made not ready, one
// dropped), then deletes one: the writer restores each. Its own writes' echoes are not synced
// again; these edits, at other resourceVersions, must be.
func TestWriterRestoresItsSlices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	const name = "foo-global-west-ipv4-0"
	var want string
	harness.Eventually(t, "the written slice", func() error {
		_, sl := written(t, ns)
		es, ok := sl[name]
		if !ok || len(es.Endpoints) != 2 {
			return fmt.Errorf("slices:\n%s", describeAll(sl))
		}
		want = sortedLines(describeSlice(es))
		return nil
	})
	restored := func() error { // in any order: the writer appends what it puts back
		if _, sl := written(t, ns); sortedLines(describeSlice(sl[name])) != want {
			return fmt.Errorf("slice %s:\n%s\nwant:\n%s", name, describeSlice(sl[name]), want)
		}
		return nil
	}
	for _, edit := range []func(*discoveryv1.EndpointSlice){
		func(es *discoveryv1.EndpointSlice) { es.Endpoints[0].Conditions.Ready = ptr.To(false) },
		func(es *discoveryv1.EndpointSlice) { es.Endpoints = es.Endpoints[1:] },
	} {
		testkit.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			es, err := client().DiscoveryV1().EndpointSlices(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			edit(es)
			_, err = client().DiscoveryV1().EndpointSlices(ns).Update(ctx, es, metav1.UpdateOptions{})
			return err
		}))
		harness.Eventually(t, "the slice restored after an edit", restored)
	}
	testkit.Must(t, client().DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	harness.Eventually(t, "the slice restored after its deletion", restored)
}

func sortedLines(s string) string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestWriterWritesLittle: one endpoint change is one slice update; a restart with nothing
// changed writes nothing; 250 endpoints make 3 slices of at most 100.
func TestWriterWritesLittle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	_, err = harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	// debug: the writer logs every write with its reason, which a failure below shows.
	tmpl := strings.Replace(fmt.Sprintf(writerCorefile, ns), "    global {", "    debug\n    global {", 1)
	c := harness.StartCoreDNS(t, cp, tmpl)
	harness.Eventually(t, "three clusters' slices", func() error {
		if _, sl := written(t, ns); len(sl) != 3 || len(sl["foo-global-west-ipv4-0"].Endpoints) != 2 {
			return fmt.Errorf("slices:\n%s", describeAll(sl))
		}
		return nil
	})
	before := versions(t, ns)
	_, sl := written(t, ns)
	westGen := sl["foo-global-west-ipv4-0"].Generation

	// west's foo-1 becomes not ready (Linkerd drops it): only west's slice is written, once.
	updates := counter(t, c, wroteUpdates)
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "west", true, false))
	testkit.Must(t, err)
	harness.Eventually(t, "west's slice to drop foo-1", func() error {
		_, sl := written(t, ns)
		if eps := sl["foo-global-west-ipv4-0"].Endpoints; len(eps) != 1 || *eps[0].Hostname != "foo-0-west" {
			return fmt.Errorf("slices:\n%s", describeAll(sl))
		}
		if counter(t, c, wroteUpdates) <= updates {
			return fmt.Errorf("the update is not counted yet")
		}
		return nil
	})
	afterSync(t, c, ns, "foo-global-west-ipv4-0")
	if n := counter(t, c, wroteUpdates); n != updates+1 {
		t.Errorf("%v updates for one endpoint change, want 1", n-updates)
	}
	after := versions(t, ns)
	for name, rv := range before {
		if changed := after[name] != rv; changed != (name == "foo-global-west-ipv4-0") {
			t.Errorf("%s: resourceVersion %s -> %s", name, rv, after[name])
		}
	}
	if _, sl := written(t, ns); sl["foo-global-west-ipv4-0"].Generation != westGen+1 {
		t.Errorf("west's slice went from generation %d to %d: want exactly one write", westGen, sl["foo-global-west-ipv4-0"].Generation)
	}

	// A restart with nothing changed writes nothing.
	c.Stop()
	before = versions(t, ns)
	c = harness.StartCoreDNS(t, cp, tmpl)
	// The term's first sync of foo runs on full caches (the term waits for them) and counts its
	// writes before itself: once it is counted, whatever a restart would write has been written.
	harness.Eventually(t, "the new process to lead and sync", func() error {
		if c.Metric(t, "coredns_global_leader") != "1" || c.Metric(t, syncedOK) == "" {
			return fmt.Errorf("leader %q, syncs %q", c.Metric(t, "coredns_global_leader"), c.Metric(t, syncedOK))
		}
		return nil
	})
	if after := versions(t, ns); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a restart with nothing changed wrote:\n%v\n%v\n%s", before, after, writesLogged(c))
	}
	// Nor do the syncs that follow: after markers on each slice (someone else's annotation, which
	// the writer leaves), and after a change of the local Service that changes nothing written.
	for _, slice := range []string{"foo-global-east-ipv4-0", "foo-global-west-ipv4-0", "foo-global-north-ipv4-0", "foo-global-east-ipv4-0"} {
		afterSync(t, c, ns, slice)
	}
	synced := counter(t, c, syncedOK)
	annotateService(t, ns, "foo", map[string]string{"example.com/tick": "1"})
	harness.Eventually(t, "a sync after the local Service changed", func() error {
		if n := counter(t, c, syncedOK); n <= synced {
			return fmt.Errorf("%v syncs", n)
		}
		return nil
	})
	if n := writesOf(t, c); n != 0 {
		t.Errorf("%v writes in the syncs after a restart with nothing changed (%v of them):\n%s", n, counter(t, c, syncedOK), writesLogged(c))
	}

	// 250 endpoints from one cluster: 3 slices of at most 100.
	writes := writesOf(t, c)
	ready := make([]bool, 250)
	for i := range ready {
		ready[i] = true
	}
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "north", ready...))
	testkit.Must(t, err)
	harness.Eventually(t, "north in 3 slices", func() error {
		_, sl := written(t, ns)
		var n, count int
		for name, es := range sl {
			if strings.HasPrefix(name, "foo-global-north-") {
				count++
				n += len(es.Endpoints)
				if len(es.Endpoints) > 100 {
					return fmt.Errorf("%s has %d endpoints", name, len(es.Endpoints))
				}
			}
		}
		if count != 3 || n != 250 {
			return fmt.Errorf("north: %d endpoints in %d slices", n, count)
		}
		return nil
	})
	afterSync(t, c, ns, "foo-global-north-ipv4-0")
	// The slice that held north's one endpoint is updated, two are created: nothing else.
	if n := writesOf(t, c) - writes; n != 3 {
		t.Errorf("250 endpoints in north: %v writes, want 3", n)
	}
}

// TestWriterPodMirrorSliceLate: a new remote pod is written once, though kube-controller-manager
// mirrors its per-pod mirror into an EndpointSlice after the headless mirror's new address (held
// here with the skip-mirror label, as long as the test needs): until that slice comes, the headless
// mirror's readiness stands, and its coming changes nothing written.
func TestWriterPodMirrorSliceLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	harness.Eventually(t, "west's foo-0 written", writtenReady(t, ns, "west", map[string]bool{"foo-0-west": true}))
	afterSync(t, c, ns, "foo-global-west-ipv4-0")
	writes := writesOf(t, c)
	without := `coredns_global_records_without_pod_mirror{cluster="west"}`

	m := mirror(ns, "west", true, true)
	m.HoldPodSlices = true
	objs, err := harness.UpdateMirror(ctx, client(), m)
	testkit.Must(t, err)
	both := []string{"A " + objs.ClusterIPs["foo-0"], "A " + objs.ClusterIPs["foo-1"]}
	eventuallyExpect(t, c, "west.foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, both...)
	harness.Eventually(t, "west's foo-1 written ready", writtenReady(t, ns, "west", map[string]bool{"foo-0-west": true, "foo-1-west": true}))
	if v := c.Metric(t, without); v != "1" {
		t.Errorf("records without a per-pod mirror's slice: %q, want 1", v)
	}

	testkit.Must(t, harness.ReleasePodSlices(ctx, client(), objs))
	harness.Eventually(t, "foo-1-west's slice seen", func() error {
		if v := c.Metric(t, without); v != "0" {
			return fmt.Errorf("records without a per-pod mirror's slice: %q", v)
		}
		return nil
	})
	afterSync(t, c, ns, "foo-global-west-ipv4-0")
	if n := writesOf(t, c) - writes; n != 1 {
		t.Errorf("%v writes for one new remote pod, want 1", n)
	}
	testkit.Must(t, expect(t, c, "west.foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, both...))
}

// writtenReady checks cluster's endpoints in the written foo-global slices of ns: want says, by
// hostname, which there are and which are ready and serving.
func writtenReady(t *testing.T, ns, cluster string, want map[string]bool) func() error {
	return func() error {
		_, sl := written(t, ns)
		got := map[string]bool{}
		for _, es := range sl {
			if es.Labels["globaldns.io/source-cluster"] != cluster {
				continue
			}
			for _, e := range es.Endpoints {
				got[*e.Hostname] = *e.Conditions.Ready && *e.Conditions.Serving
			}
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("%s's written endpoints %v, want %v:\n%s", cluster, got, want, describeAll(sl))
		}
		return nil
	}
}

// writesOf is how many writes of objects c has made (created, updated, deleted).
// writesLogged returns the writes c's writer logged (at debug) with their reasons.
func writesLogged(c *harness.CoreDNS) string {
	var out []string
	for _, l := range strings.Split(c.Tail(10000), "\n") {
		if strings.Contains(l, "writer: creating ") || strings.Contains(l, "writer: updating ") || strings.Contains(l, "writer: deleting ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func writesOf(t *testing.T, c *harness.CoreDNS) float64 {
	n := 0.0
	for _, op := range []string{"create", "update", "delete"} {
		n += counter(t, c, `coredns_global_endpointslice_changes_total{operation="`+op+`"}`)
	}
	return n
}

// TestWriterLeavesForeignObjectsAlone: a foo-global this project did not create is never
// modified; the conflict is reported (log, metric, Event) and DNS keeps working.
func TestWriterLeavesForeignObjectsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	foreign, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "foo-global", Labels: map[string]string{"team": "theirs"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": "theirs"}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	before, err := json.Marshal(foreign)
	testkit.Must(t, err)
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))
	harness.Eventually(t, "the conflict reported", func() error {
		if v := c.Metric(t, "coredns_global_writer_conflicts"); v != "1" {
			return fmt.Errorf("conflicts %q", v)
		}
		events, err := client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=foo-global,reason=GlobalServiceConflict"})
		if err != nil || len(events.Items) == 0 {
			return fmt.Errorf("no Event: %v", err)
		}
		return nil
	})
	testkit.Must(t, expect(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"]))

	// More changes, more chances to touch it: once DNS answers the change, the index has queued
	// foo for the writer, and a sync of it that ends in the conflict again is the evidence that
	// the writer looked at the change.
	clashes := counter(t, c, syncedClash)
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	eventuallyExpect(t, c, "foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+harnessIP(t, ns, "foo-1-west"))
	harness.Eventually(t, "a sync of the change", func() error {
		if n := counter(t, c, syncedClash); n <= clashes {
			return fmt.Errorf("%v conflicting syncs, want more than %v", n, clashes)
		}
		return nil
	})
	now, err := client().CoreV1().Services(ns).Get(ctx, "foo-global", metav1.GetOptions{})
	testkit.Must(t, err)
	after, err := json.Marshal(now)
	testkit.Must(t, err)
	if string(after) != string(before) {
		t.Errorf("the foreign Service changed:\n%s\n%s", before, after)
	}
	_, sl := written(t, ns) // the endpointslice controller's slice of the foreign Service
	for name, es := range sl {
		if es.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
			t.Errorf("slice %s written for a Service that is not ours: %v", name, es.Labels)
		}
	}
	if n := strings.Count(c.Logs(), "is not managed by coredns-global"); n != 1 {
		t.Errorf("the conflict is logged %d times, want once", n)
	}
}

// afterSync waits, instead of pausing, for evidence that the writer has processed everything up
// to now, the echoes of its own writes included: a sync of ns's foo that succeeds after this call.
// One is sure to come: the test annotates slice, one of our objects, and every event on those
// queues their global service (the writer manages no annotations, so it writes nothing for it).
// A sync that starts after our last write succeeds only with that write's echo in its cache
// (until then the stale-cache guard fails it as stale), so any write the echo would cause has been
// made, and counted, when it ends. Call it once the writes it follows are counted.
func afterSync(t *testing.T, c *harness.CoreDNS, ns, slice string) {
	t.Helper()
	ctx := context.Background()
	synced := counter(t, c, syncedOK)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.globaldns.io/marker":"%d"}}}`, time.Now().UnixNano())
	_, err := client().DiscoveryV1().EndpointSlices(ns).Patch(ctx, slice, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	testkit.Must(t, err)
	harness.Eventually(t, "a sync after the marker", func() error {
		if n := counter(t, c, syncedOK); n <= synced {
			return fmt.Errorf("%v successful syncs, want more than %v", n, synced)
		}
		return nil
	})
}

// harnessIP returns the ClusterIP of a per-pod mirror Service.
func harnessIP(t *testing.T, ns, name string) string {
	svc, err := client().CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	testkit.Must(t, err)
	return svc.Spec.ClusterIP
}

// TestWriterHandover: two replicas, one lease. Killing the holder hands the lease over once it
// expires; stopping it gracefully hands it over at once; DNS on the survivors never fails.
func TestWriterHandover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	tmpl := fmt.Sprintf(writerCorefile, ns)
	a, b := harness.StartCoreDNS(t, cp, tmpl), harness.StartCoreDNS(t, cp, tmpl)

	converged := func(want int) {
		harness.Eventually(t, fmt.Sprintf("west's slice with %d endpoints", want), func() error {
			if _, sl := written(t, ns); len(sl["foo-global-west-ipv4-0"].Endpoints) != want {
				return fmt.Errorf("slices:\n%s", describeAll(sl))
			}
			return nil
		})
	}
	first := waitLeader(t, a, b)
	converged(1)
	survivor := a
	if first == a {
		survivor = b
	}

	// kill -9: the lease must expire before the survivor takes over; the survivor's DNS never
	// notices.
	load := dnsLoad(survivor, "foo."+ns+".global.")
	killed := time.Now()
	first.Kill()
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "west", true, true))
	testkit.Must(t, err)
	if waitLeader(t, survivor) != survivor {
		t.Fatal("the survivor did not take the lease")
	}
	t.Logf("after kill -9 the survivor led in %v", time.Since(killed).Round(100*time.Millisecond))
	converged(2)
	if sent, failed := load(); failed != 0 || sent == 0 {
		t.Errorf("kill -9 of the leader: %d of %d queries to the survivor failed", failed, sent)
	}

	// Graceful: a third replica, then SIGTERM the leader; it releases the lease on the way out.
	third := harness.StartCoreDNS(t, cp, tmpl)
	if third.Metric(t, "coredns_global_leader") == "1" {
		t.Fatal("a new replica took a held lease")
	}
	load = dnsLoad(third, "foo."+ns+".global.")
	stopped := time.Now()
	testkit.Must(t, survivor.Signal(syscall.SIGTERM))
	waitLeader(t, third)
	t.Logf("after SIGTERM the third replica led in %v", time.Since(stopped).Round(100*time.Millisecond))
	harness.Eventually(t, "the new leader's first sync", func() error {
		if third.Metric(t, `coredns_global_writer_syncs_total{result="success"}`) == "" {
			return fmt.Errorf("no sync yet")
		}
		return nil
	})
	for _, op := range []string{"create", "update", "delete"} { // nothing changed while it took over
		if v := third.Metric(t, `coredns_global_endpointslice_changes_total{operation="`+op+`"}`); v != "" {
			t.Errorf("a leader change with nothing changed: %s %s writes", v, op)
		}
	}
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "west", true, true, true))
	testkit.Must(t, err)
	converged(3)
	if sent, failed := load(); failed != 0 || sent == 0 {
		t.Errorf("graceful handover: %d of %d queries to the new leader failed", failed, sent)
	}
}

// dnsLoad queries qname on c every few milliseconds until the returned function is called, which
// returns how many queries were sent and how many did not get a NOERROR answer with records.
func dnsLoad(c *harness.CoreDNS, qname string) func() (sent, failed int64) {
	var s, f atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		cl := &dns.Client{Timeout: time.Second}
		m := new(dns.Msg)
		m.SetQuestion(qname, dns.TypeA)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			s.Add(1)
			if r, _, err := cl.Exchange(m, c.Addr); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				f.Add(1)
			}
		}
	}()
	return func() (int64, int64) {
		close(stop)
		<-done
		return s.Load(), f.Load()
	}
}

// TestWriterTerminatingNamespace: in a namespace being deleted, the API refuses every create; the
// writer drops the global service, as Kubernetes' EndpointSlice reconcilers do, instead of warning
// and retrying until the namespace is gone. A finalizer on the mirror holds the namespace in
// Terminating with the global service still in the index.
func TestWriterTerminatingNamespace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, leases := namespace(t), namespace(t) // the lease must outlive ns
	m := mirror(ns, "west", true)
	_, err := harness.CreateMirror(ctx, client(), m)
	testkit.Must(t, err)
	const hold = "test.globaldns.io/hold"
	setFinalizers := func(f ...string) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := client().CoreV1().Services(ns).Get(ctx, "foo-west", metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Finalizers = f
			_, err = client().CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		})
		testkit.Must(t, err)
	}
	setFinalizers(hold)
	t.Cleanup(func() { setFinalizers() }) // let the namespace go

	corefile := strings.Replace(fmt.Sprintf(writerCorefile, ns), "lease "+ns+" writer", "lease "+leases+" writer", 1)
	c := harness.StartCoreDNS(t, cp, corefile)
	harness.Eventually(t, "the written Service", func() error {
		if svc, sl := written(t, ns); svc == nil || len(sl) != 1 {
			return fmt.Errorf("service %v, %d slices", svc != nil, len(sl))
		}
		return nil
	})

	// The namespace controller deletes what it can, our Service included; the mirror stays.
	testkit.Must(t, client().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	harness.Eventually(t, "the global service dropped", func() error {
		if v := c.Metric(t, `coredns_global_writer_syncs_total{result="terminating"}`); v == "" {
			return fmt.Errorf("not dropped; errors %q", c.Metric(t, `coredns_global_writer_syncs_total{result="error"}`))
		}
		return nil
	})
	if v := c.Metric(t, `coredns_global_writer_syncs_total{result="error"}`); v != "" {
		t.Errorf("%s syncs failed in a terminating namespace", v)
	}
	logs := c.Logs()
	if n := strings.Count(logs, "namespace "+ns+" is terminating"); n != 1 {
		t.Errorf("the terminating namespace is logged %d times, want once", n)
	}
	if strings.Contains(logs, "[WARNING] plugin/global: writer:") {
		t.Errorf("the writer warned:\n%s", logs)
	}
}

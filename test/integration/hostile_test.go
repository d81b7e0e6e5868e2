package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// rawMirror creates a headless mirror Service and its v1 Endpoints as a (possibly confused)
// service mirror would, with the cluster label and remote name annotation given ("" for none).
func rawMirror(t *testing.T, ns, name, clusterLabel, fqName string, ips ...string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": clusterLabel}
	annotations := map[string]string{}
	if fqName != "" {
		annotations["mirror.linkerd.io/remote-svc-fq-name"] = fqName
	}
	_, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	var addrs []corev1.EndpointAddress
	for i, ip := range ips {
		addrs = append(addrs, corev1.EndpointAddress{IP: ip, Hostname: fmt.Sprintf("p-%d", i)})
	}
	_, err = client().CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Subsets:    []corev1.EndpointSubset{{Addresses: addrs, Ports: []corev1.EndpointPort{{Name: "db", Port: 15432}}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
}

// TestHostileClusterState: surprising objects are skipped or handled as documented, each with one
// log line and a metric, and never disturb the other global services.
func TestHostileClusterState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, other := namespace(t), namespace(t)
	// The bystander: it must answer throughout.
	bar, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "bar", "west", true))
	testkit.Must(t, err)
	tmpl := strings.Replace(fmt.Sprintf(corefile, ns+" "+other), "    bind 127.0.0.1\n", "    bind 127.0.0.1\n    prometheus {{.Metrics}}\n", 1)
	c := harness.StartCoreDNS(t, cp, tmpl)
	bystander := func() {
		t.Helper()
		testkit.Must(t, expect(t, c, "bar."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A "+bar.ClusterIPs["bar-0"]))
	}
	harness.Eventually(t, "the bystander", func() error {
		return expect(t, c, "bar."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A "+bar.ClusterIPs["bar-0"])
	})
	skipped := func(reason string) string { return c.Metric(t, `coredns_global_skipped_total{reason="`+reason+`"}`) }
	logged := func(s string) int { return strings.Count(c.Logs(), s) }

	t.Run("two mirrors of one service from one cluster", func(t *testing.T) {
		rawMirror(t, ns, "dup-west", "west", "dup."+ns+".svc.cluster.local", "10.99.0.1")
		rawMirror(t, ns, "dup-west-again", "west", "dup."+ns+".svc.cluster.local", "10.99.0.2")
		eventuallyExpect(t, c, "dup."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.99.0.1") // the first by name
		harness.Eventually(t, "the metric", func() error {
			if skipped("duplicate_mirror") != "1" || logged("dup-west-again is a second member") != 1 {
				return fmt.Errorf("metric %q, logged %d times", skipped("duplicate_mirror"), logged("dup-west-again is a second member"))
			}
			return nil
		})
		bystander()
	})

	t.Run("a mirror without remote-svc-fq-name", func(t *testing.T) {
		m := mirrorOf(ns, "nofq", "west", true)
		m.OmitFQName = true
		nofq, err := harness.CreateMirror(ctx, client(), m)
		testkit.Must(t, err)
		eventuallyExpect(t, c, "nofq."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A "+nofq.ClusterIPs["nofq-0"])
		if skipped("mirror_name_from_suffix") == "" || logged("nofq-west: no mirror.linkerd.io/remote-svc-fq-name annotation") != 1 {
			t.Errorf("metric %q, log:\n%s", skipped("mirror_name_from_suffix"), c.Logs())
		}
		bystander()
	})

	t.Run("a bad object updated again and again is reported once", func(t *testing.T) {
		number := func(v string) float64 { f, _ := strconv.ParseFloat(v, 64); return f }
		withProblems := func() float64 { return number(c.Metric(t, `coredns_global_objects_with_problems{kind="Service"}`)) }
		counted, gauge := number(skipped("mirror_without_cluster_label")), withProblems()
		rawMirror(t, ns, "rep-west", "", "rep."+ns+".svc.cluster.local", "10.99.9.1")
		harness.Eventually(t, "the unlabelled mirror counted", func() error {
			if n := number(skipped("mirror_without_cluster_label")) - counted; n != 1 || withProblems()-gauge != 1 {
				return fmt.Errorf("counted %v, objects with problems %v", n, withProblems()-gauge)
			}
			return nil
		})
		services := client().CoreV1().Services(ns)
		for i := range 5 {
			s, err := services.Get(ctx, "rep-west", metav1.GetOptions{})
			testkit.Must(t, err)
			s.Annotations["touched"] = strconv.Itoa(i)
			_, err = services.Update(ctx, s, metav1.UpdateOptions{})
			testkit.Must(t, err)
		}
		// Fixed last: once it answers, the watch has seen every update before the fix.
		s, err := services.Get(ctx, "rep-west", metav1.GetOptions{})
		testkit.Must(t, err)
		s.Labels["mirror.linkerd.io/cluster-name"] = "west"
		_, err = services.Update(ctx, s, metav1.UpdateOptions{})
		testkit.Must(t, err)
		eventuallyExpect(t, c, "rep."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.99.9.1")
		if n := number(skipped("mirror_without_cluster_label")) - counted; n != 1 {
			t.Errorf("6 versions of one bad object counted %v times", n)
		}
		if n := logged(ns + "/rep-west: no mirror.linkerd.io/cluster-name label"); n != 1 {
			t.Errorf("logged %d times", n)
		}
		if g := withProblems() - gauge; g != 0 {
			t.Errorf("fixed, objects with problems %v", g)
		}
		bystander()
	})

	t.Run("cluster names with dots or capitals", func(t *testing.T) {
		rawMirror(t, ns, "dots-west-eu", "west.eu", "dots."+ns+".svc.cluster.local", "10.99.1.1")
		rawMirror(t, ns, "caps-north", "NORTH", "caps."+ns+".svc.cluster.local", "10.99.2.1")
		// Capitals fold to lower case, as DNS does; a dot cannot be one label: skipped.
		eventuallyExpect(t, c, "p-0.north.caps."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.99.2.1")
		harness.Eventually(t, "the dotted cluster skipped", func() error {
			if skipped("invalid_cluster_name") != "1" || logged(`cluster name "west.eu" is not a DNS label`) != 1 {
				return fmt.Errorf("metric %q, logged %d", skipped("invalid_cluster_name"), logged(`cluster name "west.eu" is not a DNS label`))
			}
			return nil
		})
		testkit.Must(t, expect(t, c, "dots."+ns+".global.", dns.TypeA, dns.RcodeNameError))
		bystander()
	})

	t.Run("an endpoint hostname that is not a DNS label", func(t *testing.T) {
		// The API server refuses it (so the plugin never sees one from a real cluster); the
		// conversion of a cache that held one is tested in plugin/global/watch.
		_, err := client().DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "badhost", Labels: map[string]string{discoveryv1.LabelServiceName: "bar-west", "mirror.linkerd.io/mirrored-service": "true"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.99.3.1"}, Hostname: ptr.To("Bad_Host")}},
		}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "hostname") {
			t.Errorf("the API server accepted a hostname that is not a DNS label: %v", err)
		}
		bystander()
	})

	t.Run("a local Service that stops being headless", func(t *testing.T) {
		testkit.Must(t, harness.CreateNode(ctx, client(), harness.Node{Name: ns + "-flip", Zone: "us-east-1a", Region: "us-east-1"}))
		testkit.Must(t, harness.CreateStatefulSet(ctx, client(), harness.StatefulSet{Namespace: ns, Service: "flip", Ports: dbPorts,
			Pods: []harness.Pod{{Name: "flip-0", Node: ns + "-flip", IP: "10.244.7.1", Ready: true}}}))
		west, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "flip", "west", true))
		testkit.Must(t, err)
		flip := "flip." + ns + ".global."
		eventuallyExpect(t, c, flip, dns.TypeA, dns.RcodeSuccess, "A 10.244.7.1", "A "+west.ClusterIPs["flip-0"])
		// clusterIP is immutable: the Service is replaced by a ClusterIP one of the same name.
		svc, err := client().CoreV1().Services(ns).Get(ctx, "flip", metav1.GetOptions{})
		testkit.Must(t, err)
		testkit.Must(t, client().CoreV1().Services(ns).Delete(ctx, "flip", metav1.DeleteOptions{}))
		svc.ResourceVersion, svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", "", nil
		_, err = client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		testkit.Must(t, err)
		eventuallyExpect(t, c, flip, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["flip-0"])
		testkit.Must(t, expect(t, c, "east."+flip, dns.TypeA, dns.RcodeNameError))
		// And back.
		testkit.Must(t, client().CoreV1().Services(ns).Delete(ctx, "flip", metav1.DeleteOptions{}))
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		_, err = client().CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		testkit.Must(t, err)
		eventuallyExpect(t, c, flip, dns.TypeA, dns.RcodeSuccess, "A 10.244.7.1", "A "+west.ClusterIPs["flip-0"])
		bystander()
	})

	t.Run("10,000 endpoints in one member", func(t *testing.T) {
		// A selector-less exported Service whose slices another controller writes, 100 to a slice.
		_, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "big", Labels: map[string]string{"mirror.linkerd.io/exported": "true"}},
			Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
		}, metav1.CreateOptions{})
		testkit.Must(t, err)
		for s := range 100 {
			es := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", s), Labels: map[string]string{
					discoveryv1.LabelServiceName: "big", discoveryv1.LabelManagedBy: "someone-else", "mirror.linkerd.io/exported": "true"}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
			}
			for e := range 100 {
				i := s*100 + e
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.98.%d.%d", i/250, i%250+1)}, Hostname: ptr.To(fmt.Sprintf("big-%d", i))})
			}
			_, err := client().DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
			testkit.Must(t, err)
		}
		eventuallyExpect(t, c, "big-9999.east.big."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.98.39.250")
		// Over TCP, as many as fit in 64 KiB, nearest first, TC set; over UDP, what fits the buffer.
		r := ask(t, c, "tcp", "big."+ns+".global.", dns.TypeA)
		if !r.Truncated || len(r.Answer) < 3000 {
			t.Errorf("10,000 records over TCP: %d answers, TC %v", len(r.Answer), r.Truncated)
		}
		r = ask(t, c, "udp", "_db._tcp.big."+ns+".global.", dns.TypeSRV)
		if !r.Truncated || len(r.Answer) == 0 || r.Rcode != dns.RcodeSuccess {
			t.Errorf("SRV over UDP: %d answers, TC %v, %s", len(r.Answer), r.Truncated, dns.RcodeToString[r.Rcode])
		}
		bystander()
	})

	t.Run("a namespace deleted while its services are indexed", func(t *testing.T) {
		gone, err := harness.CreateMirror(ctx, client(), mirrorOf(other, "gone", "west", true))
		testkit.Must(t, err)
		eventuallyExpect(t, c, "gone."+other+".global.", dns.TypeA, dns.RcodeSuccess, "A "+gone.ClusterIPs["gone-0"])
		testkit.Must(t, client().CoreV1().Namespaces().Delete(ctx, other, metav1.DeleteOptions{}))
		eventuallyExpect(t, c, "gone."+other+".global.", dns.TypeA, dns.RcodeNameError)
		// Once its Services are gone too, the namespace is no longer an empty non-terminal.
		eventuallyExpect(t, c, other+".global.", dns.TypeA, dns.RcodeNameError)
		bystander()
	})

	if logs := c.Logs(); strings.Contains(logs, "panic") {
		t.Errorf("panic in the log:\n%s", logs)
	}
}

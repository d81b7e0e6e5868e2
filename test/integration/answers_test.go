package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIPv6(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	testkit.Must(t, harness.CreateNode(ctx, client(), harness.Node{Name: ns + "-a", Zone: "us-east-1a", Region: "us-east-1"}))
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), harness.StatefulSet{
		Namespace: ns, Service: "foo", Ports: dbPorts, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Pods: []harness.Pod{{Name: "foo-0", Node: ns + "-a", IP: "10.244.1.10", IPv6: "fd00:244::10", Ready: true}},
	}))
	m := mirror(ns, "west", true)
	m.IPv6 = true
	west, err := harness.CreateMirror(ctx, client(), m)
	testkit.Must(t, err)
	if !strings.Contains(west.ClusterIPs["foo-0"], ":") {
		t.Fatalf("the IPv6 mirror's per-pod ClusterIP is %q", west.ClusterIPs["foo-0"])
	}

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))
	fooNS := "foo." + ns + ".global."
	eventuallyExpect(t, c, fooNS, dns.TypeAAAA, dns.RcodeSuccess, "AAAA fd00:244::10", "AAAA "+west.ClusterIPs["foo-0"])
	// The IPv4 slice is written apart from the IPv6 one: waited for too.
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10")
	testkit.Must(t, expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess)) // NODATA: west is IPv6 only
	testkit.Must(t, expect(t, c, "foo-0.east."+fooNS, dns.TypeAAAA, dns.RcodeSuccess, "AAAA fd00:244::10"))

	// One SRV per pod, not per address; glue of both families.
	testkit.Must(t, expect(t, c, "_db._tcp."+fooNS, dns.TypeSRV, dns.RcodeSuccess,
		"SRV 0 100 15432 foo-0.east."+fooNS, "SRV 2 100 5432 foo-0.west."+fooNS))
	r := ask(t, c, "tcp", "_db._tcp."+fooNS, dns.TypeSRV)
	if got := harness.Render(r.Extra); !slices.Equal(got, []string{"A 10.244.1.10", "AAAA fd00:244::10", "AAAA " + west.ClusterIPs["foo-0"]}) {
		t.Errorf("glue %q", got)
	}
}

func TestShortNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns1, ns2 := namespace(t), namespace(t)
	a, err := harness.CreateMirror(ctx, client(), harness.Mirror{Namespace: ns1, Service: "bar", Cluster: "west", Ports: dbPorts,
		Endpoints: []harness.RemoteEndpoint{{Hostname: "bar-0", Ready: true}}})
	testkit.Must(t, err)
	b, err := harness.CreateMirror(ctx, client(), harness.Mirror{Namespace: ns2, Service: "bar", Cluster: "west", Ports: dbPorts,
		Endpoints: []harness.RemoteEndpoint{{Hostname: "bar-0", Ready: true}}})
	testkit.Must(t, err)

	both := fmt.Sprintf(corefile, ns1+" "+ns2)
	c := harness.StartCoreDNS(t, cp, both)
	eventuallyExpect(t, c, "bar."+ns2+".global.", dns.TypeA, dns.RcodeSuccess, "A "+b.ClusterIPs["bar-0"])
	eventuallyExpect(t, c, "bar."+ns1+".global.", dns.TypeA, dns.RcodeSuccess, "A "+a.ClusterIPs["bar-0"])

	// Never a silent pick: NXDOMAIN, with an Extended DNS Error naming both namespaces; over UDP,
	// where that is more than three times the query, cut (TC) for the client to ask over TCP.
	q := new(dns.Msg)
	q.SetQuestion("bar.global.", dns.TypeA)
	q.SetEdns0(4096, false)
	if r := ask(t, c, "udp", "bar.global.", dns.TypeA); r.Rcode != dns.RcodeNameError || !r.Truncated || len(r.Answer)+len(r.Ns) != 0 || r.Len() > 3*q.Len() {
		t.Fatalf("udp: ambiguous short name answered %s, TC %t, %d bytes (the query %d): %v", dns.RcodeToString[r.Rcode], r.Truncated, r.Len(), q.Len(), r)
	}
	r := ask(t, c, "tcp", "bar.global.", dns.TypeA)
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Fatalf("tcp: ambiguous short name answered %s %v", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if ede := extendedError(r); ede == nil || !strings.Contains(ede.ExtraText, ns1) || !strings.Contains(ede.ExtraText, ns2) {
		t.Fatalf("tcp: EDE %v does not name %s and %s", ede, ns1, ns2)
	}

	// prefer_namespaces makes the short name deterministic.
	preferred := strings.Replace(both, "cluster east", "cluster east\n        prefer_namespaces "+ns2, 1)
	p := harness.StartCoreDNS(t, cp, preferred)
	eventuallyExpect(t, p, "bar.global.", dns.TypeA, dns.RcodeSuccess, "A "+b.ClusterIPs["bar-0"])
	testkit.Must(t, expect(t, p, "_db._tcp.bar.global.", dns.TypeSRV, dns.RcodeSuccess, "SRV 2 100 5432 bar-0.west.bar."+ns2+".global."))

	// Watching one namespace only, the short name is not ambiguous.
	one := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns1))
	eventuallyExpect(t, one, "bar.global.", dns.TypeA, dns.RcodeSuccess, "A "+a.ClusterIPs["bar-0"])
}

func extendedError(m *dns.Msg) *dns.EDNS0_EDE {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return e
			}
		}
	}
	return nil
}

// TestBigAnswer: 200 records in three tiers. UDP keeps the best-tier prefix that fits the
// client's buffer and sets TC; TCP returns them all, in the same order.
func TestBigAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	testkit.Must(t, harness.CreateNode(ctx, client(), harness.Node{Name: ns + "-a", Zone: "us-east-1a", Region: "us-east-1"}))
	sts := harness.StatefulSet{Namespace: ns, Service: "foo", Ports: dbPorts}
	local := map[string]bool{}
	for i := range 20 {
		ip := fmt.Sprintf("10.244.3.%d", i+1)
		sts.Pods = append(sts.Pods, harness.Pod{Name: fmt.Sprintf("foo-%d", i), Node: ns + "-a", IP: ip, Ready: true})
		local[ip] = true
	}
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), sts))
	tiers := map[string]int{}
	for i := range local {
		tiers[i] = 0
	}
	for cluster, tier := range map[string]int{"west": 2, "north": 3} {
		ready := make([]bool, 90)
		for i := range ready {
			ready[i] = true
		}
		objs, err := harness.CreateMirror(ctx, client(), mirror(ns, cluster, ready...))
		testkit.Must(t, err)
		for _, ip := range objs.ClusterIPs {
			tiers[ip] = tier
		}
	}

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))
	qname := "foo." + ns + ".global."
	var full []dns.RR
	harness.Eventually(t, "all 200 records over TCP", func() error {
		full = ask(t, c, "tcp", qname, dns.TypeA).Answer
		if len(full) != 200 {
			return fmt.Errorf("%d records", len(full))
		}
		return nil
	})
	last := 0
	for i, rr := range full {
		tier := tiers[rr.(*dns.A).A.String()]
		if tier < last {
			t.Fatalf("record %d (%s) is tier %d after tier %d", i, rr, tier, last)
		}
		last = tier
	}

	// 200 compressed A records take about 3.3 KB: they fit a 4096-byte buffer, not 1232.
	for _, size := range []uint16{0, 512, 1232, 4096} {
		m := new(dns.Msg)
		m.SetQuestion(qname, dns.TypeA)
		if size > 0 {
			m.SetEdns0(size, false)
		}
		r := c.Exchange(t, m, "udp")
		if size == 4096 {
			if r.Truncated || !slices.Equal(harness.Render(r.Answer), harness.Render(full)) {
				t.Errorf("buffer 4096: TC=%v with %d records, want the whole answer", r.Truncated, len(r.Answer))
			}
			continue
		}
		if !r.Truncated || len(r.Answer) == 0 || len(r.Answer) >= 200 {
			t.Errorf("buffer %d: TC=%v with %d records, want TC and a non-empty prefix", size, r.Truncated, len(r.Answer))
			continue
		}
		if got, want := harness.Render(r.Answer), harness.Render(full[:len(r.Answer)]); !slices.Equal(got, want) {
			t.Errorf("buffer %d: the UDP answer is not the best-tier prefix of the full answer:\n%q\n%q", size, got, want)
		}
		r.Compress = true
		if l := r.Len(); l > max(int(size), 512) {
			t.Errorf("buffer %d: %d-byte reply", size, l)
		}
		t.Logf("buffer %d: %d records over UDP", size, len(r.Answer))
	}

	// The explanation of the same name: over UDP no more than 3 times the query, so TC and no
	// records; over TCP all of it (a summary and 200 records).
	testkit.Must(t, noAmplification(qname, askCH(t, c, "udp", qname, 1232)))
	if r := askCH(t, c, "tcp", qname, 1232); r.Truncated || len(r.Answer) != 201 {
		t.Errorf("CH TXT over TCP: TC=%v with %d records, want all 201", r.Truncated, len(r.Answer))
	}

	// Rotated (the default), a truncated answer still holds the nearest tier first, all of it.
	rotating := harness.StartCoreDNS(t, cp, strings.Replace(fmt.Sprintf(corefile, ns), "        rotate off\n", "", 1))
	harness.Eventually(t, "all 200 records over TCP, rotating", func() error {
		if n := len(ask(t, rotating, "tcp", qname, dns.TypeA).Answer); n != 200 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})
	for range 10 {
		m := new(dns.Msg)
		m.SetQuestion(qname, dns.TypeA)
		m.SetEdns0(1232, false)
		r := rotating.Exchange(t, m, "udp")
		if !r.Truncated || len(r.Answer) <= len(local) {
			t.Fatalf("rotating, buffer 1232: TC=%v with %d records", r.Truncated, len(r.Answer))
		}
		last := 0
		for i, rr := range r.Answer {
			ip := rr.(*dns.A).A.String()
			if tier := tiers[ip]; tier < last || (i < len(local)) != local[ip] {
				t.Fatalf("rotating, buffer 1232: record %d (%s, tier %d) out of tier order: %q", i, ip, tier, harness.Render(r.Answer))
			} else {
				last = tier
			}
		}
	}
}

// TestNotSynced: with an API that never answers, names in the zone are SERVFAIL (never NXDOMAIN),
// /ready says not ready, and the apex still answers.
func TestNotSynced(t *testing.T) {
	t.Parallel()
	dead, err := cp.KubeconfigFor("x") // a valid kubeconfig ...
	testkit.Must(t, err)
	kc := strings.Replace(readFile(t, dead), cp.APIServerURL(), "https://"+freeAddr(t), 1) // ... for an API that is not there
	path := writeFile(t, "kubeconfig", kc)
	ready := freeAddr(t)
	c := harness.StartCoreDNS(t, nil, `global:{{.Port}} {
    bind 127.0.0.1
    ready `+ready+`
    global {
        kubeconfig `+path+`
        startup_timeout 1s
    }
}
`)
	for _, proto := range []string{"udp", "tcp"} {
		r := ask(t, c, proto, "foo.db.global.", dns.TypeA)
		if r.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: unsynced answer %s, want SERVFAIL", proto, dns.RcodeToString[r.Rcode])
		}
		if ede := extendedError(r); ede == nil || ede.InfoCode != dns.ExtendedErrorCodeNotReady {
			t.Errorf("%s: EDE %v, want Not Ready", proto, ede)
		}
	}
	testkit.Must(t, expect(t, c, "global.", dns.TypeNS, dns.RcodeSuccess, "NS ns1.dns.global."))
	resp, err := http.Get("http://" + ready + "/ready")
	testkit.Must(t, err)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("/ready is 200 while the API is unsynced")
	}
}

// TestReadyAndMetrics: /ready turns 200 once synced; metrics count services and records per
// cluster; a malformed mirror is skipped with one log line and a metric, and breaks nothing.
func TestReadyAndMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, west := fooAndWest(t)
	// A headless "mirror" without a cluster label.
	_, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "broken-x", Labels: map[string]string{"mirror.linkerd.io/mirrored-service": "true"}},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 1}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)

	tmpl := strings.Replace(fmt.Sprintf(corefile, ns), "    bind 127.0.0.1\n", "    bind 127.0.0.1\n    ready {{.Ready}}\n    prometheus {{.Metrics}}\n", 1)
	c := harness.StartCoreDNS(t, cp, tmpl) // waits for /ready 200
	eventuallyExpect(t, c, "west.foo."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+west.ClusterIPs["foo-1"])

	harness.Eventually(t, "metrics", func() error {
		body := harness.Get(t, "http://"+c.MetricsAddr+"/metrics")
		for _, want := range []string{
			"coredns_global_services 1\n",
			`coredns_global_records{cluster="east",state="ready"} 2` + "\n",
			`coredns_global_records{cluster="east",state="not_ready"} 1` + "\n",
			`coredns_global_records{cluster="west",state="ready"} 2` + "\n",
			`coredns_global_records{cluster="west",state="gateway_down"} 0` + "\n",
			`coredns_global_records_without_pod_mirror{cluster="west"} 0` + "\n",
			`coredns_global_cluster_down{cluster="west"} 0` + "\n",
			`coredns_global_skipped_total{reason="mirror_without_cluster_label"} 1` + "\n",
			"coredns_global_programming_duration_seconds_count",
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %q in\n%s", want, grep(body, "coredns_global_"))
			}
		}
		return nil
	})
	if n := strings.Count(c.Logs(), "broken-x"); n != 1 {
		t.Errorf("the malformed Service is logged %d times, want once:\n%s", n, c.Logs())
	}
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

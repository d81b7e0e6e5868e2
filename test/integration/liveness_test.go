package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestGatewayLiveness follows Linkerd's gateway liveness as the real service mirror writes it: the
// headless mirror stays ready, the per-pod mirrors of a cluster whose gateway fails its probe turn
// not ready (harness.SetGateway), and that cluster leaves every answer and turns not ready in the
// written slices, without a failed query, while the other clusters are untouched.
func TestGatewayLiveness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, west := fooAndWest(t)
	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	// An IPv6 service from both linked clusters, for AAAA.
	six := map[string]*harness.MirrorObjects{}
	for _, cluster := range []string{"west", "north"} {
		m := mirrorOf(ns, "six", cluster, true)
		m.IPv6 = true
		six[cluster], err = harness.CreateMirror(ctx, client(), m)
		testkit.Must(t, err)
	}
	tmpl := strings.Replace(fmt.Sprintf(writerCorefile, ns), "    bind 127.0.0.1\n", "    bind 127.0.0.1\n    ready {{.Ready}}\n", 1)
	c := harness.StartCoreDNS(t, cp, tmpl)

	fooNS := "foo." + ns + ".global."
	sixNS := "six." + ns + ".global."
	local := []string{"A 10.244.1.10", "A 10.244.2.11"}
	westA := []string{"A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"]}
	northA := []string{"A " + north.ClusterIPs["foo-0"]}
	srv := func(host, cluster string, prio int) string {
		weight := map[string]int{"west": 50, "north": 100}[cluster]
		return fmt.Sprintf("SRV %d %d 5432 %s.%s.%s", prio, weight, host, cluster, fooNS)
	}
	localSRV := []string{"SRV 0 50 15432 foo-0.east." + fooNS, "SRV 0 50 15432 foo-1.east." + fooNS}
	westSRV := []string{srv("foo-0", "west", 2), srv("foo-1", "west", 2)}
	northSRV := []string{srv("foo-0", "north", 3)}
	// up checks every answer with west's gateway alive (or, alive false, dead).
	up := func(alive bool) error {
		checks := []error{
			expect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, westA, northA)...),
			expect(t, c, fooNS, dns.TypeSRV, dns.RcodeSuccess, slices.Concat(localSRV, westSRV, northSRV)...),
			expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, westA...),
			expect(t, c, "foo-1.west."+fooNS, dns.TypeA, dns.RcodeSuccess, westA[1]),
			expect(t, c, "west."+fooNS, dns.TypeSRV, dns.RcodeSuccess, westSRV...),
			expect(t, c, sixNS, dns.TypeAAAA, dns.RcodeSuccess, "AAAA "+six["west"].ClusterIPs["six-0"], "AAAA "+six["north"].ClusterIPs["six-0"]),
		}
		if !alive {
			checks = []error{
				expect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, northA)...),
				expect(t, c, fooNS, dns.TypeSRV, dns.RcodeSuccess, slices.Concat(localSRV, northSRV)...),
				expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeNameError),
				expect(t, c, "foo-1.west."+fooNS, dns.TypeA, dns.RcodeNameError),
				expect(t, c, "west."+fooNS, dns.TypeSRV, dns.RcodeNameError),
				expect(t, c, sixNS, dns.TypeAAAA, dns.RcodeSuccess, "AAAA "+six["north"].ClusterIPs["six-0"]),
			}
		}
		// Whatever west's state, the other clusters answer as before.
		checks = append(checks,
			expect(t, c, "east."+fooNS, dns.TypeA, dns.RcodeSuccess, local...),
			expect(t, c, "north."+fooNS, dns.TypeA, dns.RcodeSuccess, northA...))
		for _, err := range checks {
			if err != nil {
				return err
			}
		}
		return writtenReadiness(t, ns, alive)
	}
	podMirrors := 3 // west's per-pod mirrors: foo-0, foo-1, six-0
	setGateway := func(alive bool) {
		t.Helper()
		n, err := harness.SetGatewayIn(ctx, client(), ns, "west", alive, nil)
		testkit.Must(t, err)
		if n != podMirrors {
			t.Fatalf("SetGateway rewrote %d Endpoints, want %d", n, podMirrors)
		}
	}
	harness.Eventually(t, "west up", func() error { return up(true) })

	all, westDown, westIPs := addrsOf(local, westA, northA), addrsOf(local, northA), addrsOf(westA)
	load := newPool(fooNS, all, c)
	defer load.stop()

	load.expect(westDown, westIPs) // west's records go one per-pod mirror at a time
	setGateway(false)
	harness.Eventually(t, "west down", func() error { return up(false) })
	load.expect(westDown)
	load.await(t, 500)
	harness.Eventually(t, "one log line and the metrics of west going down", func() error {
		if n := strings.Count(c.Logs(), `cluster "west" is down`); n != 1 {
			return fmt.Errorf("%d lines", n)
		}
		if v, w := c.Metric(t, `coredns_global_cluster_down{cluster="west"}`), c.Metric(t, `coredns_global_records{cluster="west",state="gateway_down"}`); v != "1" || w != "3" {
			return fmt.Errorf("cluster_down %q, gateway_down records %q", v, w)
		}
		return nil
	})
	load.check(t, "gateway down")

	load.expect(westDown, westIPs)
	setGateway(true)
	harness.Eventually(t, "west back", func() error { return up(true) })
	load.expect(all)
	load.await(t, 500)
	harness.Eventually(t, "one log line for west coming back", func() error {
		if n := strings.Count(c.Logs(), `cluster "west" is back`); n != 1 {
			return fmt.Errorf("%d lines", n)
		}
		return nil
	})
	load.check(t, "gateway up")

	// Flaps, faster than a second: the last state wins.
	load.expect(westDown, westIPs)
	setGateway(false)
	setGateway(true)
	harness.Eventually(t, "west up after down/up", func() error { return up(true) })
	setGateway(false)
	setGateway(true)
	setGateway(false)
	harness.Eventually(t, "west down after down/up/down", func() error { return up(false) })
	load.await(t, 500)
	load.check(t, "flaps")

	// A record without a per-pod mirror (not created yet, or a Linkerd without them) keeps the
	// headless mirror's readiness: west's foo-1 answers again though its gateway is down.
	load.expect(addrsOf(local), westIPs, addrsOf(northA))
	testkit.Must(t, harness.DeletePodMirror(ctx, client(), ns, "foo-1", "west"))
	podMirrors--
	eventuallyExpect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, westA[1])
	if v := c.Metric(t, `coredns_global_records_without_pod_mirror{cluster="west"}`); v != "1" {
		t.Errorf("records without a per-pod mirror: %q, want 1", v)
	}
	setGateway(true)
	eventuallyExpect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, westA...)

	// north's foo-0 turns not ready there: Linkerd takes it out of the headless mirror and deletes
	// its per-pod mirror.
	_, err = harness.UpdateMirror(ctx, client(), mirror(ns, "north", false))
	testkit.Must(t, err)
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, westA)...)
	load.expect(addrsOf(local, westA))
	load.await(t, 500)
	load.check(t, "per-pod mirror removed, remote pod not ready")
}

// addrsOf is the addresses of rendered A records ("A 10.0.0.1"), of every list.
func addrsOf(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		for _, rr := range l {
			out = append(out, strings.TrimPrefix(rr, "A "))
		}
	}
	return out
}

// TestGatewayBlip follows Linkerd through the hole in its liveness signal (linkerd2
// multicluster/service-mirror, every version since 2.12): while west's gateway is down, a remote
// change rewrites west's headless mirrors with every address not ready (UpdateMirror with
// GatewayDown: createOrUpdateHeadlessEndpoints -> updateMirrorEndpoints -> updateReadiness), and
// when the gateway returns only the per-pod mirrors turn ready again (repairEndpoints skips headless
// mirrors): west's peers are back in every name and ready in the written slices all the same,
// while the remote pod that really is not ready (out of the headless mirror) stays out.
func TestGatewayBlip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	foo, six := mirror(ns, "west", true, true, true), mirrorOf(ns, "six", "west", true, true)
	six.IPv6 = true
	west, err := harness.CreateMirror(ctx, client(), foo)
	testkit.Must(t, err)
	westSix, err := harness.CreateMirror(ctx, client(), six)
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(writerCorefile, ns))

	fooNS, sixNS := "foo."+ns+".global.", "six."+ns+".global."
	local := []string{"A 10.244.1.10", "A 10.244.2.11"}
	westA := func(hosts ...string) []string {
		var out []string
		for _, h := range hosts {
			out = append(out, "A "+west.ClusterIPs[h])
		}
		return out
	}
	srv := func(hosts ...string) []string {
		out := []string{"SRV 0 50 15432 foo-0.east." + fooNS, "SRV 0 50 15432 foo-1.east." + fooNS}
		for _, h := range hosts {
			out = append(out, fmt.Sprintf("SRV 2 %d 5432 %s.west.%s", 100/len(hosts), h, fooNS))
		}
		return out
	}
	// answers checks every name form with west's peers hosts answered, six's sixes, and the others
	// not.
	answers := func(hosts, sixes []string) func() error {
		return func() error {
			checks := []error{
				expect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, westA(hosts...))...),
				expect(t, c, "_db._tcp."+fooNS, dns.TypeSRV, dns.RcodeSuccess, srv(hosts...)...),
			}
			for _, h := range []string{"foo-0", "foo-1", "foo-2"} {
				if slices.Contains(hosts, h) {
					checks = append(checks, expect(t, c, h+".west."+fooNS, dns.TypeA, dns.RcodeSuccess, westA(h)...))
				} else {
					checks = append(checks, expect(t, c, h+".west."+fooNS, dns.TypeA, dns.RcodeNameError))
				}
			}
			var aaaa []string
			for _, h := range sixes {
				aaaa = append(aaaa, "AAAA "+westSix.ClusterIPs[h])
			}
			if len(hosts) == 0 {
				checks = append(checks,
					expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeNameError),
					expect(t, c, sixNS, dns.TypeAAAA, dns.RcodeNameError))
			} else {
				checks = append(checks,
					expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, westA(hosts...)...),
					expect(t, c, sixNS, dns.TypeAAAA, dns.RcodeSuccess, aaaa...))
			}
			return errors.Join(checks...)
		}
	}
	harness.Eventually(t, "west up", answers([]string{"foo-0", "foo-1", "foo-2"}, []string{"six-0", "six-1"}))

	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", false, nil)
	testkit.Must(t, err)
	harness.Eventually(t, "west down", answers(nil, nil))
	// While it is down, foo-2 and six-1 turn not ready in west.
	foo.Endpoints[2].Ready, six.Endpoints[1].Ready = false, false
	foo.GatewayDown, six.GatewayDown = true, true
	_, err = harness.UpdateMirror(ctx, client(), foo)
	testkit.Must(t, err)
	_, err = harness.UpdateMirror(ctx, client(), six)
	testkit.Must(t, err)
	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", true, nil)
	testkit.Must(t, err)
	// The headless mirrors still say not ready, and say so until the next remote change.
	for _, name := range []string{"foo-west", "six-west"} {
		testkit.Must(t, harness.WaitForSlices(ctx, client(), ns, name, func(s []discoveryv1.EndpointSlice) bool {
			return len(s) == 1 && len(s[0].Endpoints) == 1+testkit.Btoi(name == "foo-west") && !slices.ContainsFunc(s[0].Endpoints, func(e discoveryv1.Endpoint) bool { return *e.Conditions.Ready })
		}))
	}
	harness.Eventually(t, "west back", answers([]string{"foo-0", "foo-1"}, []string{"six-0"}))
	harness.Eventually(t, "west written ready", writtenReady(t, ns, "west", map[string]bool{"foo-0-west": true, "foo-1-west": true}))
	// The index follows the slices' watch events: polled, as every other state here.
	harness.Eventually(t, "the explanation of west back", func() error {
		return explains(t, c, fooNS, dns.RcodeSuccess, "records=4 left-out=1",
			"host=foo-1 cluster=west tier=2 why=region:us-east-1 member="+ns+"/foo-west state=ready")
	})
}

// writtenReadiness checks the written foo-global slices: west's endpoints ready and serving
// as alive says, every other endpoint as it always is here (east's foo-2 is a not-ready pod).
func writtenReadiness(t *testing.T, ns string, alive bool) error {
	_, sl := written(t, ns)
	n := 0
	for _, es := range sl {
		for _, e := range es.Endpoints {
			n++
			want := *e.Hostname != "foo-2-east"
			if es.Labels["globaldns.io/source-cluster"] == "west" {
				want = alive
			}
			if *e.Conditions.Ready != want || *e.Conditions.Serving != want {
				return fmt.Errorf("%s: ready %v serving %v, want %v:\n%s", *e.Hostname, *e.Conditions.Ready, *e.Conditions.Serving, want, describeAll(sl))
			}
		}
	}
	if n != 6 {
		return fmt.Errorf("%d written endpoints, want 6:\n%s", n, describeAll(sl))
	}
	return nil
}

// TestUnnamedClusterWarns: with mirrors present and no `cluster` in the Corefile, pods asking for
// their own per-cluster names under the name other clusters use would get NXDOMAIN: say so.
func TestUnnamedClusterWarns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	tmpl := strings.Replace(fmt.Sprintf(corefile, ns), "        cluster east\n", "", 1)
	tmpl = strings.Replace(tmpl, "    bind 127.0.0.1\n", "    bind 127.0.0.1\n    prometheus {{.Metrics}}\n", 1)
	c := harness.StartCoreDNS(t, cp, tmpl)
	if v := c.Metric(t, "coredns_global_cluster_unnamed"); v != "0" {
		t.Errorf("cluster_unnamed %q without mirrors, want 0", v)
	}
	_, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	harness.Eventually(t, "the warning", func() error {
		if n := strings.Count(c.Logs(), "names no cluster"); n != 1 || c.Metric(t, "coredns_global_cluster_unnamed") != "1" {
			return fmt.Errorf("%d log lines, metric %q", n, c.Metric(t, "coredns_global_cluster_unnamed"))
		}
		return nil
	})
}

// TestRemoteServiceChange: when the remote Service itself changes (an annotation edited there),
// Linkerd's service mirror rewrites the headless mirror as if it were a ClusterIP mirror, with the
// gateway's address and no hostname, until the next remote Endpoints change
// (harness.UpdateMirrorService). That address is not a peer: it is never answered nor written, it
// is reported once, and west's peers come back with its Endpoints.
func TestRemoteServiceChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	west := mirror(ns, "west", true, true)
	westObjs := meshIn(t, client(), ns, west)
	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	tmpl := strings.Replace(fmt.Sprintf(writerCorefile, ns), "    bind 127.0.0.1\n", "    bind 127.0.0.1\n    ready {{.Ready}}\n", 1)
	c := harness.StartCoreDNS(t, cp, tmpl)

	fooNS := "foo." + ns + ".global."
	local := []string{"A 10.244.1.10", "A 10.244.2.11"}
	westA := []string{"A " + westObjs.ClusterIPs["foo-0"], "A " + westObjs.ClusterIPs["foo-1"]}
	northA := []string{"A " + north.ClusterIPs["foo-0"]}
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, westA, northA)...)
	load := newPool(fooNS, addrsOf(local, westA, northA), c)
	defer load.stop()
	load.expect(addrsOf(local, northA), addrsOf(westA)) // never the gateway's address

	west.Annotations = map[string]string{"example.com/team": "db"}
	testkit.Must(t, harness.UpdateMirrorService(ctx, client(), west))
	harness.Eventually(t, "west left out, the gateway never answered", func() error {
		return errors.Join(
			expect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, northA)...),
			expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeNameError),
			expect(t, c, "_db._tcp."+fooNS, dns.TypeSRV, dns.RcodeSuccess,
				"SRV 0 50 15432 foo-0.east."+fooNS, "SRV 0 50 15432 foo-1.east."+fooNS, "SRV 3 100 5432 foo-0.north."+fooNS),
			notWritten(t, ns, harness.GatewayIP))
	})
	harness.Eventually(t, "one warning", func() error {
		if n := strings.Count(c.Logs(), "without a hostname left out"); n != 1 {
			return fmt.Errorf("%d log lines", n)
		}
		if v := c.Metric(t, `coredns_global_skipped_total{reason="mirror_address_without_hostname"}`); v != "1" {
			return fmt.Errorf("skipped_total %q", v)
		}
		return nil
	})
	load.await(t, 300)

	// The next remote Endpoints change gives the headless mirror its addresses back.
	_, err = harness.UpdateMirror(ctx, client(), west)
	testkit.Must(t, err)
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, slices.Concat(local, westA, northA)...)
	load.check(t, "remote Service changed")
}

// notWritten checks that no written foo-global slice of ns holds address addr.
func notWritten(t *testing.T, ns, addr string) error {
	_, sl := written(t, ns)
	for _, es := range sl {
		for _, e := range es.Endpoints {
			if slices.Contains(e.Addresses, addr) {
				return fmt.Errorf("%s written:\n%s", addr, describeAll(sl))
			}
		}
	}
	return nil
}

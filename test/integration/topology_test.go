package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// bareCorefile names no cluster and no locality: the cluster's objects tell them.
const bareCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    global {
        kubeconfig {{.Kubeconfig}}
        endpointslices off
        rotate off
%s    }
}
`

// linkedControlPlane starts a control plane of the test's own, with namespace ns and Linkerd's
// multicluster namespace, where Links live, and a client of the Links.
func linkedControlPlane(t *testing.T, ns string) (*harness.ControlPlane, dynamic.Interface) {
	t.Helper()
	own := harness.Start(t)
	dyn, err := dynamic.NewForConfig(own.Config)
	testkit.Must(t, err)
	for _, n := range []string{ns, harness.LinkerdNamespace} {
		testkit.Must(t, harness.EnsureNamespace(context.Background(), own.Client, n))
	}
	return own, dyn
}

// TestTopologyFromTheCluster: with neither `cluster` nor `locality` in the Corefile, this
// cluster's name comes from its ClusterProperty cluster.clusterset.k8s.io, each linked cluster's
// locality from its Linkerd Link's labels, and this cluster's from the labels all its Nodes share;
// a change of them re-ranks the clusters at once; without the CRDs the Nodes still tell; what the
// Corefile says wins, and a disagreement is one warning. On a control plane of its own: the
// ClusterProperty names the whole cluster.
func TestTopologyFromTheCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ns = "db"
	own, dyn := linkedControlPlane(t, ns)
	c := own.Client
	localFooIn(t, c, ns) // on two Nodes of us-east-1, in zones a and b
	for _, cluster := range []string{"west", "north", "far"} {
		_, err := harness.CreateMirror(ctx, c, mirror(ns, cluster, true))
		testkit.Must(t, err)
	}
	fooNS := "foo." + ns + ".global."
	// priorities checks the SRV priority (tier) of each cluster's targets.
	priorities := func(d *harness.CoreDNS, want map[string]uint16) func() error {
		return func() error {
			r := ask(t, d, "udp", "_db._tcp."+fooNS, dns.TypeSRV)
			got := map[string]uint16{}
			for _, rr := range r.Answer {
				if srv, ok := rr.(*dns.SRV); ok {
					got[strings.Split(srv.Target, ".")[1]] = srv.Priority
				}
			}
			if !maps.Equal(got, want) {
				return fmt.Errorf("SRV priorities by cluster %v, want %v", got, want)
			}
			return nil
		}
	}

	// Without the CRDs: no name (the default, local), and the Nodes' region, which no linked
	// cluster has a locality to match.
	bare := harness.StartCoreDNS(t, own, fmt.Sprintf(bareCorefile, ""))
	harness.Eventually(t, "answers without the CRDs", priorities(bare, map[string]uint16{"local": 0, "west": 3, "north": 3, "far": 3}))
	testkit.Must(t, explains(t, bare, "global.", dns.RcodeSuccess, "cluster=local named-by=default", "cluster=local tier=0 why=local locality=region:us-east-1 from=nodes"))

	testkit.Must(t, own.InstallTopologyCRDs(ctx))
	testkit.Must(t, harness.SetClusterProperty(ctx, dyn, "east"))
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "west", map[string]string{"topology.kubernetes.io/region": "us-east-1"}))
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "north", map[string]string{"topology.kubernetes.io/region": "eu-north-1", "topology.kubernetes.io/zone": "eu-north-1a"}))
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "far", nil))
	d := harness.StartCoreDNS(t, own, fmt.Sprintf(bareCorefile, ""))
	harness.Eventually(t, "the discovered topology", priorities(d, map[string]uint16{"east": 0, "west": 2, "north": 3, "far": 3}))
	testkit.Must(t, expect(t, d, "foo-1.east."+fooNS, dns.TypeA, dns.RcodeSuccess, "A 10.244.2.11"))
	testkit.Must(t, explains(t, d, "global.", dns.RcodeSuccess, "cluster=east named-by=clusterproperty",
		"cluster=east tier=0 why=local locality=region:us-east-1 from=nodes",
		"cluster=west tier=2 why=region:us-east-1 locality=region:us-east-1 from=link",
		"cluster=north tier=3 why=none locality=region:eu-north-1,zone:eu-north-1a from=link",
		"cluster=far tier=3 why=none locality=none from=nothing"))
	harness.Eventually(t, "one warning for far", func() error {
		if n := strings.Count(d.Logs(), `linked cluster "far" has no locality`); n != 1 {
			return fmt.Errorf("%d warnings", n)
		}
		return nil
	})

	// north moves to this region: re-ranked while running.
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "north", map[string]string{"topology.kubernetes.io/region": "us-east-1"}))
	harness.Eventually(t, "north re-ranked", priorities(d, map[string]uint16{"east": 0, "west": 2, "north": 2, "far": 3}))

	// The Corefile wins, and says so once.
	over := harness.StartCoreDNS(t, own, fmt.Sprintf(bareCorefile, "        cluster east\n        locality west region=eu-west-1\n"))
	harness.Eventually(t, "the Corefile's locality", priorities(over, map[string]uint16{"east": 0, "west": 3, "north": 2, "far": 3}))
	harness.Eventually(t, "one warning for west", func() error {
		if n := strings.Count(over.Logs(), `cluster "west" is at region:eu-west-1 in the Corefile (`+"`locality`"+`) and at region:us-east-1 by its Link`); n != 1 {
			return fmt.Errorf("%d warnings:\n%s", n, over.Logs())
		}
		return nil
	})
}

// linkedCorefile is bareCorefile naming this cluster, with metrics.
const linkedCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        endpointslices off
        rotate off
        cluster east
    }
}
`

// linkedWriterCorefile is linkedCorefile with the writer on.
var linkedWriterCorefile = strings.Replace(linkedCorefile, "endpointslices off", "endpointslices on", 1)

// writtenAddresses checks that the writer's Service name in ns exists with EndpointSlices of
// exactly addrs, or, without addrs, that neither does.
func writtenAddresses(c kubernetes.Interface, ns, name string, addrs ...string) func() error {
	return func() error {
		ctx := context.Background()
		_, err := c.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case len(addrs) == 0 && err == nil:
			return fmt.Errorf("Service %s/%s still there", ns, name)
		case len(addrs) == 0 && !apierrors.IsNotFound(err), len(addrs) > 0 && err != nil:
			return fmt.Errorf("Service %s/%s: %v", ns, name, err)
		}
		list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return err
		}
		var got []string
		for _, es := range list.Items {
			for _, e := range es.Endpoints {
				got = append(got, e.Addresses...)
			}
		}
		if !testkit.SameSet(got, addrs) {
			return fmt.Errorf("the slices of %s/%s hold %v, want %v", ns, name, got, addrs)
		}
		return nil
	}
}

// TestOnlyLinkedClustersMirror: where Linkerd's Link CRD is served, a Service is a mirror of a
// cluster only while a Link names that cluster (Links live in Linkerd's namespace, an admin's):
// anyone who may create a Service cannot add members by labelling it as a mirror. Of two
// Services claiming one cluster, the one Linkerd names (<svc>-<cluster>) wins, whatever sorts
// first. On a control plane of its own: the CRD changes every mirror's fate.
func TestOnlyLinkedClustersMirror(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ns = "db"
	own, dyn := linkedControlPlane(t, ns)
	c := own.Client
	localFooIn(t, c, ns)
	testkit.Must(t, own.InstallTopologyCRDs(ctx))
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "west", nil))
	west, err := harness.CreateMirror(ctx, c, mirror(ns, "west", true))
	testkit.Must(t, err)
	evil, err := harness.CreateMirror(ctx, c, mirror(ns, "evil", true))
	testkit.Must(t, err)
	// foo-a: a Service anyone could make in the namespace, labelled as west's mirror of foo, which
	// sorts before Linkerd's foo-west.
	_, err = harness.CreateMirror(ctx, c, mirror(ns, "a", true))
	testkit.Must(t, err)
	svc, err := c.CoreV1().Services(ns).Get(ctx, "foo-a", metav1.GetOptions{})
	testkit.Must(t, err)
	svc.Labels[harness.LabelClusterName] = "west"
	_, err = c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
	testkit.Must(t, err)

	// bar: a global service whose only member is a mirror of late, made before late's Link.
	late, err := harness.CreateMirror(ctx, c, mirrorOf(ns, "bar", "late", true))
	testkit.Must(t, err)

	d := harness.StartCoreDNS(t, own, linkedWriterCorefile)
	fooNS := "foo." + ns + ".global."
	local := []string{"A 10.244.1.10", "A 10.244.2.11"}
	eventuallyExpect(t, d, fooNS, dns.TypeA, dns.RcodeSuccess, append(local, "A "+west.ClusterIPs["foo-0"])...)
	harness.Eventually(t, "the skipped mirrors counted", func() error {
		for _, reason := range []string{"unlinked_cluster", "duplicate_mirror"} {
			if v := d.Metric(t, `coredns_global_skipped_total{reason="`+reason+`"}`); v == "" || v == "0" {
				return fmt.Errorf("skipped_total{reason=%q} is %q", reason, v)
			}
		}
		if !strings.Contains(d.Logs(), `mirror db/foo-evil claims cluster "evil", which no Linkerd Link names: skipped`) {
			return fmt.Errorf("no warning of foo-evil:\n%s", d.Logs())
		}
		return nil
	})
	// A Link for evil: its mirror is a member; west's Link deleted: west's is not.
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "evil", nil))
	eventuallyExpect(t, d, fooNS, dns.TypeA, dns.RcodeSuccess, append(local, "A "+evil.ClusterIPs["foo-0"], "A "+west.ClusterIPs["foo-0"])...)
	testkit.Must(t, dyn.Resource(harness.LinkResource).Namespace(harness.LinkerdNamespace).Delete(ctx, "west", metav1.DeleteOptions{}))
	eventuallyExpect(t, d, fooNS, dns.TypeA, dns.RcodeSuccess, append(local, "A "+evil.ClusterIPs["foo-0"])...)
	testkit.Must(t, expect(t, d, "west."+fooNS, dns.TypeA, dns.RcodeNameError))

	// late's Link made after its mirror: bar, of no member before, answers and is written; the
	// Link deleted, and made again.
	barNS, lateIP := "bar."+ns+".global.", late.ClusterIPs["bar-0"]
	testkit.Must(t, expect(t, d, barNS, dns.TypeA, dns.RcodeNameError))
	for range 2 {
		testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "late", nil))
		eventuallyExpect(t, d, barNS, dns.TypeA, dns.RcodeSuccess, "A "+lateIP)
		harness.Eventually(t, "bar-global written", writtenAddresses(c, ns, "bar-global", lateIP))
		testkit.Must(t, dyn.Resource(harness.LinkResource).Namespace(harness.LinkerdNamespace).Delete(ctx, "late", metav1.DeleteOptions{}))
		eventuallyExpect(t, d, barNS, dns.TypeA, dns.RcodeNameError)
		harness.Eventually(t, "bar-global deleted", writtenAddresses(c, ns, "bar-global"))
	}
	testkit.Must(t, harness.ApplyLink(ctx, dyn, harness.LinkerdNamespace, "late", nil))
	eventuallyExpect(t, d, barNS, dns.TypeA, dns.RcodeSuccess, "A "+lateIP)

	// A Link in another namespace is anyone's: its cluster's mirror is no member, even with the zone
	// of this cluster's nodes, which would rank it first.
	testkit.Must(t, harness.EnsureNamespace(ctx, c, "shop"))
	testkit.Must(t, harness.ApplyLink(ctx, dyn, "shop", "fake", map[string]string{"topology.kubernetes.io/zone": "us-east-1a"}))
	_, err = harness.CreateMirror(ctx, c, mirror(ns, "fake", true))
	testkit.Must(t, err)
	harness.Eventually(t, "the mirror of the Link in shop skipped", func() error {
		if !strings.Contains(d.Logs(), `mirror db/foo-fake claims cluster "fake", which no Linkerd Link names`) {
			return fmt.Errorf("no warning of foo-fake:\n%s", d.Logs())
		}
		return nil
	})
	testkit.Must(t, expect(t, d, fooNS, dns.TypeA, dns.RcodeSuccess, append(local, "A "+evil.ClusterIPs["foo-0"])...))
	testkit.Must(t, expect(t, d, "fake."+fooNS, dns.TypeA, dns.RcodeNameError))

	// A replica whose credentials may not read Links, where the API serves them: no linked cluster's
	// mirror counts (the local members answer), and the gauge and a log line say why.
	const user = "no-links"
	harness.RunKubectl(t, own, "", "create", "clusterrole", user, "--verb=list,watch",
		"--resource=services,endpointslices.discovery.k8s.io,nodes,clusterproperties.about.k8s.io")
	harness.RunKubectl(t, own, "", "create", "clusterrolebinding", user, "--clusterrole="+user, "--user="+user)
	kubeconfig, err := own.KubeconfigAs(user)
	testkit.Must(t, err)
	r := harness.StartCoreDNS(t, own, linkedCorefile, harness.WithKubeconfig(kubeconfig))
	eventuallyExpect(t, r, fooNS, dns.TypeA, dns.RcodeSuccess, local...)
	testkit.Must(t, expect(t, r, barNS, dns.TypeA, dns.RcodeNameError))
	if v := r.Metric(t, "coredns_global_links_unreadable"); v != "1" {
		t.Errorf("coredns_global_links_unreadable %q, want 1", v)
	}
	if n := strings.Count(r.Logs(), "cannot read Linkerd's Links in namespace linkerd-multicluster"); n != 1 {
		t.Errorf("%d log lines of the Links, want 1:\n%s", n, r.Logs())
	}
	// Allowed to read them, it answers the linked clusters again.
	harness.RunKubectl(t, own, "", "create", "clusterrole", user+"-links", "--verb=list,watch", "--resource=links.multicluster.linkerd.io")
	harness.RunKubectl(t, own, "", "create", "clusterrolebinding", user+"-links", "--clusterrole="+user+"-links", "--user="+user)
	eventuallyExpect(t, r, fooNS, dns.TypeA, dns.RcodeSuccess, append(local, "A "+evil.ClusterIPs["foo-0"])...)
	eventuallyExpect(t, r, barNS, dns.TypeA, dns.RcodeSuccess, "A "+lateIP) // a service of mirrors only, too
	if v := r.Metric(t, "coredns_global_links_unreadable"); v != "0" {
		t.Errorf("coredns_global_links_unreadable %q once readable, want 0", v)
	}

	// A replica whose API fails the Links' discovery at first (503, as an API server starting, or
	// an aggregated API down) answers no linked cluster's mirror, the forged one least of all,
	// until the Links can be read; then the Links count.
	faulty := harness.StartFaultyAPI(t, own, func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/apis/multicluster.linkerd.io") })
	through, err := own.KubeconfigThrough(faulty)
	testkit.Must(t, err)
	f := harness.StartCoreDNS(t, own, linkedCorefile, harness.WithKubeconfig(through))
	eventuallyExpect(t, f, fooNS, dns.TypeA, dns.RcodeSuccess, local...)
	testkit.Must(t, expect(t, f, "fake."+fooNS, dns.TypeA, dns.RcodeNameError))
	testkit.Must(t, expect(t, f, barNS, dns.TypeA, dns.RcodeNameError))
	if v := f.Metric(t, "coredns_global_links_unreadable"); v != "1" {
		t.Errorf("coredns_global_links_unreadable %q while Links are not discovered, want 1", v)
	}
	if n := strings.Count(f.Logs(), "cannot read Linkerd's Links in namespace linkerd-multicluster: discovery of multicluster.linkerd.io"); n != 1 {
		t.Errorf("%d log lines of the Links' discovery, want 1:\n%s", n, f.Logs())
	}
	faulty.Heal()
	eventuallyExpect(t, f, fooNS, dns.TypeA, dns.RcodeSuccess, append(local, "A "+evil.ClusterIPs["foo-0"])...)
	eventuallyExpect(t, f, barNS, dns.TypeA, dns.RcodeSuccess, "A "+lateIP)
	testkit.Must(t, expect(t, f, "fake."+fooNS, dns.TypeA, dns.RcodeNameError))
	if v := f.Metric(t, "coredns_global_links_unreadable"); v != "0" {
		t.Errorf("coredns_global_links_unreadable %q once discovered, want 0", v)
	}
}

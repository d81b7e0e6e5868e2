package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
)

// corefile is the Corefile template the DNS tests run: this cluster is east, in us-east-1a. It
// writes nothing (the writer has tests of its own), so DNS tests never wait on a lease, and does
// not rotate, so answers compare in order (rotation has tests of its own).
const corefile = `global:{{.Port}} {
    bind 127.0.0.1
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        endpointslices off
        rotate off
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality south zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
        locality north zone=eu-north-1a region=eu-north-1
    }
}
`

// Service port 5432 forwards to target port 15432: local pods listen on 15432; a mirror's
// per-pod ClusterIP listens on 5432.
var dbPorts = []harness.Port{{Name: "db", Port: 5432, TargetPort: 15432}}

// mirror is Linkerd's mirror of foo from cluster, with endpoints foo-0, foo-1, ... ready or not.
func mirror(ns, cluster string, ready ...bool) harness.Mirror {
	return mirrorOf(ns, "foo", cluster, ready...)
}

// mirrorOf is mirror for any service.
func mirrorOf(ns, svc, cluster string, ready ...bool) harness.Mirror {
	m := harness.Mirror{Namespace: ns, Service: svc, Cluster: cluster, Ports: dbPorts, Labels: map[string]string{"app": svc}}
	for i, r := range ready {
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("%s-%d", svc, i), Ready: r})
	}
	return m
}

// fooAndWest is the suite's common mesh in a new namespace of the shared control plane: this
// cluster's StatefulSet foo (localFoo) and west's mirror of two ready pods. It returns the
// namespace and west's objects.
func fooAndWest(t *testing.T) (string, *harness.MirrorObjects) {
	t.Helper()
	ns := namespace(t)
	return ns, meshIn(t, client(), ns, mirror(ns, "west", true, true))
}

// meshIn makes the common mesh in namespace ns of c, made if missing: this cluster's StatefulSet
// foo (localFooIn) and mirror m. It returns m's objects.
func meshIn(t *testing.T, c kubernetes.Interface, ns string, m harness.Mirror) *harness.MirrorObjects {
	t.Helper()
	ctx := context.Background()
	testkit.Must(t, harness.EnsureNamespace(ctx, c, ns))
	localFooIn(t, c, ns)
	objs, err := harness.CreateMirror(ctx, c, m)
	testkit.Must(t, err)
	return objs
}

// localFoo creates this cluster's StatefulSet foo: foo-0 and foo-1 ready in two zones, foo-2 not ready.
func localFoo(t *testing.T, ns string) { localFooIn(t, client(), ns) }

// localFooIn is localFoo in the cluster of c.
func localFooIn(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := context.Background()
	for _, n := range []harness.Node{{Name: ns + "-a", Zone: "us-east-1a", Region: "us-east-1"}, {Name: ns + "-b", Zone: "us-east-1b", Region: "us-east-1"}} {
		testkit.Must(t, harness.CreateNode(ctx, c, n))
	}
	testkit.Must(t, harness.CreateStatefulSet(ctx, c, harness.StatefulSet{
		Namespace: ns, Service: "foo", Ports: dbPorts,
		Pods: []harness.Pod{
			{Name: "foo-0", Node: ns + "-a", IP: "10.244.1.10", Ready: true},
			{Name: "foo-1", Node: ns + "-b", IP: "10.244.2.11", Ready: true},
			{Name: "foo-2", Node: ns + "-a", IP: "10.244.1.12", Ready: false},
		},
	}))
	// kube-controller-manager's endpointslice controller publishes the pods as their statuses
	// come, in one sync or in several: wait until it lists all three, so that no test takes the
	// fixture still settling for a change (a write, an answer) of its own.
	wait, cancel := context.WithTimeout(ctx, harness.Patience)
	defer cancel()
	testkit.Must(t, harness.WaitForSlices(wait, c, ns, "foo", func(sl []discoveryv1.EndpointSlice) bool {
		n := 0
		for _, es := range sl {
			n += len(es.Endpoints)
		}
		return n == 3
	}))
}

func TestCoreScenario(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, west := fooAndWest(t)
	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true, false))
	testkit.Must(t, err)
	// Linkerd objects that are never global services.
	testkit.Must(t, harness.CreateClusterIPMirror(ctx, client(), ns, "web", "west", dbPorts))
	testkit.Must(t, harness.CreateRemoteDiscoveryMirror(ctx, client(), ns, "rd", "west", dbPorts))

	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))
	zone := "global."
	fooNS := "foo." + ns + "." + zone
	target := func(host, cluster string) string { return host + "." + cluster + "." + fooNS }

	// Tier order: this cluster, then same region (west), then elsewhere (north); not-ready never.
	all := []string{
		"A 10.244.1.10", "A 10.244.2.11",
		"A " + west.ClusterIPs["foo-0"], "A " + west.ClusterIPs["foo-1"],
		"A " + north.ClusterIPs["foo-0"],
	}
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, all...)
	testkit.Must(t, expect(t, c, "foo."+zone, dns.TypeA, dns.RcodeSuccess, all...))
	testkit.Must(t, expect(t, c, "FoO."+ns+".GLOBAL.", dns.TypeA, dns.RcodeSuccess, all...))
	testkit.Must(t, expect(t, c, fooNS, dns.TypeAAAA, dns.RcodeSuccess))

	// SRV: priority = tier, equal weights within a tier; local pods on their slice (target)
	// port, mirrors on the mirror Service's port; A glue for every target.
	srv := []string{
		"SRV 0 50 15432 " + target("foo-0", "east"),
		"SRV 0 50 15432 " + target("foo-1", "east"),
		"SRV 2 50 5432 " + target("foo-0", "west"),
		"SRV 2 50 5432 " + target("foo-1", "west"),
		"SRV 3 100 5432 " + target("foo-0", "north"),
	}
	testkit.Must(t, expect(t, c, "_db._tcp."+fooNS, dns.TypeSRV, dns.RcodeSuccess, srv...))
	testkit.Must(t, expect(t, c, "_db._tcp.foo."+zone, dns.TypeSRV, dns.RcodeSuccess, srv...))
	testkit.Must(t, expect(t, c, fooNS, dns.TypeSRV, dns.RcodeSuccess, srv...))
	if m := ask(t, c, "udp", "_db._tcp."+fooNS, dns.TypeSRV); len(m.Extra) != 6 { // 5 glue + OPT
		t.Errorf("SRV additional section: %v", m.Extra)
	}

	// Per cluster and per pod.
	testkit.Must(t, expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-0"], "A "+west.ClusterIPs["foo-1"]))
	testkit.Must(t, expect(t, c, "east."+fooNS, dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11"))
	testkit.Must(t, expect(t, c, target("foo-1", "west"), dns.TypeA, dns.RcodeSuccess, "A "+west.ClusterIPs["foo-1"]))
	testkit.Must(t, expect(t, c, target("foo-1", "east"), dns.TypeA, dns.RcodeSuccess, "A 10.244.2.11"))
	testkit.Must(t, expect(t, c, target("foo-2", "east"), dns.TypeA, dns.RcodeNameError))  // not ready
	testkit.Must(t, expect(t, c, target("foo-1", "north"), dns.TypeA, dns.RcodeNameError)) // not ready
	testkit.Must(t, expect(t, c, "elsewhere."+fooNS, dns.TypeA, dns.RcodeNameError))

	// Never global services: ClusterIP mirrors, remote-discovery mirrors, per-pod endpoint mirrors.
	for _, name := range []string{"web", "rd", "foo-0", "web-west", "foo-0-west"} {
		testkit.Must(t, expect(t, c, name+"."+ns+"."+zone, dns.TypeA, dns.RcodeNameError))
	}

	// Linking a new cluster, in this cluster's zone, shows up without a restart, in tier 1.
	south, err := harness.CreateMirror(ctx, client(), mirror(ns, "south", true))
	testkit.Must(t, err)
	withSouth := append(all[:2:2], append([]string{"A " + south.ClusterIPs["foo-0"]}, all[2:]...)...)
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, withSouth...)
	testkit.Must(t, expect(t, c, "_db._tcp."+fooNS, dns.TypeSRV, dns.RcodeSuccess,
		append(srv[:2:2], append([]string{"SRV 1 100 5432 " + target("foo-0", "south")}, srv[2:]...)...)...))

	// west's gateway goes down: Linkerd marks west's per-pod mirrors not ready (liveness_test.go
	// has the details).
	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", false, nil)
	testkit.Must(t, err)
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess,
		"A 10.244.1.10", "A 10.244.2.11", "A "+south.ClusterIPs["foo-0"], "A "+north.ClusterIPs["foo-0"])
	testkit.Must(t, expect(t, c, "west."+fooNS, dns.TypeA, dns.RcodeNameError))

	// Unlinking north removes its records.
	testkit.Must(t, harness.DeleteMirror(ctx, client(), ns, "foo", "north"))
	eventuallyExpect(t, c, fooNS, dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11", "A "+south.ClusterIPs["foo-0"])

	// The local pod foo-2 becomes ready.
	testkit.Must(t, harness.SetPodReady(ctx, client(), ns, "foo-2", true))
	eventuallyExpect(t, c, "east."+fooNS, dns.TypeA, dns.RcodeSuccess, "A 10.244.1.10", "A 10.244.2.11", "A 10.244.1.12")
}

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"
)

// ecsCorefile is the plugin with every client source, the option taken from %[3]s, listening
// also on the forwarder's address, so that a CoreDNS forwarding to it there sends from that address.
const ecsCorefile = `global:{{.Port}} {
    bind 127.0.0.1 %[2]s
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        endpointslices off
        rotate off
        cluster east
        client_locality ecs node pod
        client_forwarders %[1]s/kube-dns
        client_ecs_from %[3]s
    }
}
`

// ecsForwarder is docs/install.md's forwarding block for client_locality ecs: the option set to
// the client's address (replacing any the client sent), no cache.
const ecsForwarder = `global:{{.Port}} {
    bind 127.0.0.1
    rewrite edns0 subnet set 32 128
    forward . %s
}
`

// sharedForwarder is docs/install.md's forwarding block of the cluster DNS: a cache shared by every
// client, passing the client's option along.
const sharedForwarder = `global:{{.Port}} {
    bind 127.0.0.1
    cache 30
    forward . %s
}
`

// TestECSFromTrustedSourcesOnly: the ECS option is a claim of who asks, taken from the resolvers
// of client_ecs_from only. A pod on node c sending one that names a pod of node a is answered from
// its own node, and given no option back; the trusted forwarder's option is taken. Through a real
// CoreDNS forwarding as docs/install.md configures it for ECS, the pod's claim is replaced by its
// own address: it is answered from node c, and a client on node a, asking next, from node a.
// Through the cluster DNS's shared cache in front of a plugin that does not trust it with the
// option, a pod's claim changes no one's answer: everyone gets the cluster's view.
func TestECSFromTrustedSourcesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	base := fmt.Sprintf("127.64.%d.", 1+rand.IntN(250))
	nodeA, nodeC, appPod := base+"2", base+"4", base+"20"
	fwd := hostAddr(t)
	for _, n := range []harness.Node{
		{Name: ns + "-a", Zone: "za", Region: "r1", Addresses: []string{nodeA}, PodCIDRs: []string{"10.64.1.0/24"}},
		{Name: ns + "-c", Zone: "zb", Region: "r1", Addresses: []string{nodeC}, PodCIDRs: []string{"10.64.3.0/24"}},
	} {
		testkit.Must(t, harness.CreateNode(ctx, client(), n))
	}
	zz := harness.StatefulSet{Namespace: ns, Service: "zz", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "zz-0", Node: ns + "-a", IP: "10.64.1.10", Ready: true},
		{Name: "zz-2", Node: ns + "-c", IP: "10.64.3.10", Ready: true},
	}}
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), zz))
	testkit.Must(t, harness.CreatePod(ctx, client(), harness.StatefulSet{Namespace: ns, Service: "app"}, harness.Pod{Name: "app-0", Node: ns + "-c", IP: appPod, Ready: true}))
	createForwarder(t, ns, fwd)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(ecsCorefile, ns, fwd, ns+"/kube-dns"))
	_, port, err := net.SplitHostPort(c.Addr)
	testkit.Must(t, err)
	front := harness.StartCoreDNS(t, cp, fmt.Sprintf(ecsForwarder, net.JoinHostPort(fwd, port)))
	// The plugin behind the shared cache trusts another resolver, not the cluster DNS.
	untrusting := harness.StartCoreDNS(t, cp, fmt.Sprintf(ecsCorefile, ns, fwd, "192.0.2.53"))
	_, port, err = net.SplitHostPort(untrusting.Addr)
	testkit.Must(t, err)
	shared := harness.StartCoreDNS(t, cp, fmt.Sprintf(sharedForwarder, net.JoinHostPort(fwd, port)))

	name := "zz." + ns + ".global."
	fromA, fromC := []string{"10.64.1.10", "10.64.3.10"}, []string{"10.64.3.10", "10.64.1.10"}
	answers := func(at *harness.CoreDNS, from, ecs string, want []string, scope int) func() error {
		return answersFrom(at, from, ecs, name, want, scope)
	}
	harness.Eventually(t, "the pod on node c, from its node", answers(c, appPod, "", fromC, -1))
	// A pod claiming to ask for a pod of node a, or for node a itself: not a forwarder, ignored.
	testkit.Must(t, answers(c, appPod, "10.64.1.10/32", fromC, -1)())
	testkit.Must(t, answers(c, appPod, nodeA+"/32", fromC, -1)())
	testkit.Must(t, answers(c, nodeC, "10.64.1.0/24", fromC, -1)())
	testkit.Must(t, answers(c, "127.0.0.1", "10.64.3.10/32", fromA, -1)()) // the cluster's view
	// The forwarder's option is taken: it says who its client is.
	testkit.Must(t, answers(c, fwd, "10.64.3.10/32", fromC, 32)())
	// Through the forwarder, whatever the client claims, it is answered as itself.
	harness.Eventually(t, "the pod on node c, through the forwarder", answers(front, appPod, "10.64.1.10/32", fromC, noScope))
	testkit.Must(t, answers(front, nodeA, "10.64.3.10/32", fromA, noScope)())
	testkit.Must(t, answers(front, appPod, "", fromC, noScope)())
	// The shared cache: the pod's claim of node c goes through to the plugin, which ignores it from
	// the cluster DNS; the answer cached is the cluster's view, for the pod and for node a after it.
	harness.Eventually(t, "the cluster's view through the shared cache", answers(shared, appPod, "10.64.3.10/32", fromA, noScope))
	testkit.Must(t, answers(shared, nodeA, "", fromA, noScope)())
	testkit.Must(t, answers(untrusting, fwd, "10.64.3.10/32", fromA, -1)())
}

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestClientTableNeverLies: what the table of who runs where gets wrong after ordinary churn and
// common misconfigurations, as issue 46 reproduced them on the control plane, each answered right:
// a Pod IP reused on another node while the old Pod terminates is the new Pod's, through the old
// one's updates and after it is gone; an address two Nodes give, and pod CIDRs that overlap,
// locate no one, the same whatever else changes; a pod CIDR given to a new Node while a Pod of the
// old one keeps an IP in it is answered for that one address only (RFC 7871 7.2.1), never for
// the whole CIDR.
func TestClientTableNeverLies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	base := fmt.Sprintf("127.62.%d.", 1+rand.IntN(250))
	nodeA, nodeB, shared, reused := base+"2", base+"3", base+"9", base+"30"
	fwd := hostAddr(t)
	for _, n := range []harness.Node{
		{Name: ns + "-a", Zone: "za", Region: "r1", Addresses: []string{nodeA, shared}, PodCIDRs: []string{"10.62.1.0/24"}},
		{Name: ns + "-b", Zone: "zb", Region: "r1", Addresses: []string{nodeB, shared}, PodCIDRs: []string{"10.62.2.0/24"}},
		// Overlapping pod CIDRs: c's /16 holds d's /24.
		{Name: ns + "-c", Zone: "za", Region: "r1", PodCIDRs: []string{"10.63.0.0/16"}},
		{Name: ns + "-d", Zone: "zb", Region: "r1", PodCIDRs: []string{"10.63.5.0/24"}},
	} {
		testkit.Must(t, harness.CreateNode(ctx, client(), n))
	}
	// Three answers that differ: from node a (its pod, its zone's, the rest), from node b, and the
	// cluster's (by host).
	zz := harness.StatefulSet{Namespace: ns, Service: "zz", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "zz-0", Node: ns + "-c", IP: "10.63.1.10", Ready: true},
		{Name: "zz-1", Node: ns + "-a", IP: "10.62.1.10", Ready: true},
		{Name: "zz-2", Node: ns + "-b", IP: "10.62.2.10", Ready: true},
	}}
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), zz))
	createForwarder(t, ns, fwd)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(clientsCorefile, ns))
	name := "zz." + ns + ".global."
	fromA := []string{"10.62.1.10", "10.63.1.10", "10.62.2.10"}
	fromB := []string{"10.62.2.10", "10.63.1.10", "10.62.1.10"}
	cluster := []string{"10.63.1.10", "10.62.1.10", "10.62.2.10"}
	answered := func(from, ecs string, want []string, scope int) func() error {
		return answersFrom(c, from, ecs, name, want, scope)
	}
	harness.Eventually(t, "answers from node a", answered(nodeA, "", fromA, -1))

	// An address two Nodes give: the cluster's view, also after changes to either Node.
	testkit.Must(t, answered(shared, "", cluster, -1)())
	for i := range 4 {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"example.com/touched":"%d"}}}`, i)
		_, err := client().CoreV1().Nodes().Patch(ctx, ns+"-"+[]string{"a", "b"}[i%2], types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		testkit.Must(t, err)
		testkit.Must(t, answered(shared, "", cluster, -1)())
	}

	// Overlapping pod CIDRs: an address in both, or in the wider one only, locates no one (the
	// answer holds for the source's prefix, as for any address no one is known at).
	for ecs, scope := range map[string]int{"10.63.5.7/32": 32, "10.63.9.7/32": 32, "10.63.5.0/24": 24} {
		for range 5 {
			testkit.Must(t, answered(fwd, ecs, cluster, scope)())
		}
	}

	// A Pod IP reused: the old Pod on node a terminates (no kubelet finishes it), the new one on
	// node b takes its IP.
	app := harness.StatefulSet{Namespace: ns, Service: "app"}
	testkit.Must(t, harness.CreatePod(ctx, client(), app, harness.Pod{Name: "old", Node: ns + "-a", IP: reused, Ready: true}))
	harness.Eventually(t, "the old Pod's IP on node a", answered(reused, "", fromA, -1))
	testkit.Must(t, client().CoreV1().Pods(ns).Delete(ctx, "old", metav1.DeleteOptions{}))
	testkit.Must(t, harness.CreatePod(ctx, client(), app, harness.Pod{Name: "new", Node: ns + "-b", IP: reused, Ready: true}))
	harness.Eventually(t, "the reused IP on node b", answered(reused, "", fromB, -1))
	// The old Pod's next update (its status, as a kubelet stopping it writes) changes nothing.
	old, err := client().CoreV1().Pods(ns).Get(ctx, "old", metav1.GetOptions{})
	testkit.Must(t, err)
	harness.SetPodStatus(old, harness.Pod{IP: reused, Ready: false})
	_, err = client().CoreV1().Pods(ns).UpdateStatus(ctx, old, metav1.UpdateOptions{})
	testkit.Must(t, err)
	marker := func(name, ip string) { // a Pod after the change, answered: the change was read
		testkit.Must(t, harness.CreatePod(ctx, client(), app, harness.Pod{Name: name, Node: ns + "-a", IP: ip, Ready: true}))
		harness.Eventually(t, "the marker Pod "+name, answered(ip, "", fromA, -1))
	}
	marker("marker-1", base+"31")
	testkit.Must(t, answered(reused, "", fromB, -1)())
	testkit.Must(t, harness.DeletePod(ctx, client(), ns, "old"))
	marker("marker-2", base+"32")
	testkit.Must(t, answered(reused, "", fromB, -1)())

	// A pod CIDR given to a new Node while a Pod of the old one keeps an IP in it: the CIDR's
	// answer (node b's) holds for one address, not the /24.
	testkit.Must(t, answered(fwd, "10.62.2.0/24", fromB, 24)())
	testkit.Must(t, harness.CreatePod(ctx, client(), app, harness.Pod{Name: "stray", Node: ns + "-a", IP: "10.62.2.77", Ready: true}))
	harness.Eventually(t, "the stray Pod's IP answered from its node", answered(fwd, "10.62.2.77/32", fromA, 32))
	testkit.Must(t, answered(fwd, "10.62.2.0/24", fromB, 32)())
	testkit.Must(t, answered(fwd, "10.62.2.9/32", fromB, 32)())
}

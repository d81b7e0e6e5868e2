package watch

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/globaldns/global/test/testkit"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testNode(name string, addrs []string, cidrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func terminating(p *corev1.Pod) *corev1.Pod {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	return p
}

// clientsOf returns Clients with the node table of nodes and, when pods is set, the pod table.
func clientsOf(nodes []*corev1.Node, pods bool) *Clients {
	c := &Clients{}
	t := newNodeTable(nodes)
	c.nodes.Store(t)
	if pods {
		c.pods = newPodTable()
		c.pods.synced = func() {}
		c.pods.setNodes(t)
	}
	return c
}

// locatedAt says where Pod locates prefix p: the node, and the prefix length the answer holds for.
func locatedAt(c *Clients, p string) (string, int) {
	client, bits := c.Pod(netip.MustParsePrefix(p))
	if client == nil {
		return "", bits
	}
	return client.Node, bits
}

// An IP reused on another node while its old Pod terminates is the new Pod's, through the old
// one's updates and after it is gone; while two running Pods on two nodes claim it, it is no one's.
func TestPodIPReused(t *testing.T) {
	c := clientsOf([]*corev1.Node{testNode("n1", nil, "10.244.1.0/24"), testNode("n2", nil, "10.244.2.0/24")}, true)
	tab := c.pods
	at := func(ip string) string {
		n, _ := locatedAt(c, ip+"/32")
		return n
	}
	testkit.Must(t, tab.Replace([]any{testPod("a", "old", "n1", "10.244.1.7")}, "1"))
	testkit.Must(t, tab.Update(terminating(testPod("a", "old", "n1", "10.244.1.7"))))
	testkit.Must(t, tab.Add(testPod("a", "new", "n2", "10.244.1.7")))
	if got := at("10.244.1.7"); got != "n2" {
		t.Errorf("the new Pod's IP, the old one terminating: %q", got)
	}
	testkit.Must(t, tab.Update(terminating(testPod("a", "old", "n1", "10.244.1.7")))) // the old Pod's next update
	if got := at("10.244.1.7"); got != "n2" {
		t.Errorf("after the old Pod's update: %q", got)
	}
	testkit.Must(t, tab.Delete(testPod("a", "old", "n1", "10.244.1.7")))
	if got := at("10.244.1.7"); got != "n2" {
		t.Errorf("after the old Pod is gone: %q", got)
	}
	// Two running Pods on two nodes with one IP: neither.
	testkit.Must(t, tab.Add(testPod("a", "twin", "n1", "10.244.1.7")))
	if got, bits := locatedAt(c, "10.244.1.7/32"); got != "" {
		t.Errorf("an IP two running Pods claim: %q /%d", got, bits)
	}
	testkit.Must(t, tab.Delete(testPod("a", "twin", "n1", "10.244.1.7")))
	if got := at("10.244.1.7"); got != "n2" {
		t.Errorf("after the twin is gone: %q", got)
	}
}

// Two Nodes giving one address, and pod CIDRs that overlap, locate no client, the same on every
// rebuild, whatever order the Nodes come in; the rest of the table is as it was.
func TestNodeTableConflicts(t *testing.T) {
	nodes := []*corev1.Node{
		testNode("n1", []string{"192.168.0.1", "192.168.0.9"}, "10.244.0.0/16"),
		testNode("n2", []string{"192.168.0.2", "192.168.0.9"}, "10.244.5.0/24"),
		testNode("n3", []string{"192.168.0.3", "fd00::3"}, "10.245.0.0/24", "fd00:3::/64"),
		testNode("n4", []string{"192.168.0.4", "fd00::9"}, "10.245.0.0/24"),
		testNode("n5", []string{"192.168.0.5", "fd00::9"}, "10.246.0.0/24"),
	}
	for round := range 12 {
		rotated := append(slices.Clone(nodes[round%len(nodes):]), nodes[:round%len(nodes)]...)
		if round%2 == 1 {
			slices.Reverse(rotated)
		}
		c := clientsOf(rotated, false)
		for addr, want := range map[string]string{"192.168.0.9": "", "192.168.0.1": "n1", "192.168.0.2": "n2", "192.168.0.3": "n3", "fd00::3": "n3", "fd00::9": ""} {
			if got := c.Node(netip.MustParseAddr(addr)); got != nil && got.Node != want || got == nil && want != "" {
				t.Errorf("round %d: Node(%s) = %v, want %q", round, addr, got, want)
			}
		}
		for p, want := range map[string]string{"10.244.5.9/32": "", "10.244.7.1/32": "", "10.245.0.1/32": "", "fd00:3::1/128": "n3", "10.246.0.7/32": "n5"} {
			if got, _ := locatedAt(c, p); got != want {
				t.Errorf("round %d: Pod(%s) at %q, want %q", round, p, got, want)
			}
		}
		if conflicts := c.nodes.Load().conflicts; len(conflicts) != 6 {
			t.Errorf("round %d: conflicts %q", round, conflicts)
		}
	}
}

// An answer for a pod CIDR holds for the whole CIDR only while no Pod of another Node has an IP
// in it (RFC 7871 7.2.1: the scope no wider than what the answer depends on).
func TestPodCIDRScope(t *testing.T) {
	nodes := []*corev1.Node{testNode("old", nil), testNode("new", nil, "10.244.5.0/24")}
	c := clientsOf(nodes, true)
	if err := c.pods.Replace([]any{testPod("a", "mine", "new", "10.244.5.3")}, "1"); err != nil {
		t.Fatal(err)
	}
	check := func(p, wantNode string, wantBits int) {
		t.Helper()
		if node, bits := locatedAt(c, p); node != wantNode || bits != wantBits {
			t.Errorf("Pod(%s) = %q /%d, want %q /%d", p, node, bits, wantNode, wantBits)
		}
	}
	check("10.244.5.0/24", "new", 24)
	check("10.244.5.9/32", "new", 24)
	// A Pod of the Node the CIDR had before keeps its IP in it.
	if err := c.pods.Add(testPod("a", "stray", "old", "10.244.5.7")); err != nil {
		t.Fatal(err)
	}
	check("10.244.5.0/24", "new", 32)
	check("10.244.5.9/32", "new", 32)
	check("10.244.5.7/32", "old", 32)
	// The table follows the Nodes: the CIDR back with the old Node, the count is made again.
	c.nodes.Store(newNodeTable([]*corev1.Node{testNode("old", nil, "10.244.5.0/24"), testNode("new", nil)}))
	c.pods.setNodes(c.nodes.Load())
	check("10.244.5.0/24", "old", 32) // now "mine" is the stray
	if err := c.pods.Delete(testPod("a", "mine", "new", "10.244.5.3")); err != nil {
		t.Fatal(err)
	}
	check("10.244.5.0/24", "old", 24)
}

// A Pod whose Node is deleted, its pod CIDR given to another Node since, is located nowhere: not
// on the Node that now holds the CIDR, which the table knows it is not on.
func TestPodOfDeletedNode(t *testing.T) {
	c := clientsOf([]*corev1.Node{testNode("n3", nil, "10.244.3.0/24")}, true)
	if err := c.pods.Replace([]any{testPod("a", "orphan", "n3", "10.244.3.7")}, "1"); err != nil {
		t.Fatal(err)
	}
	if node, bits := locatedAt(c, "10.244.3.7/32"); node != "n3" || bits != 32 {
		t.Fatalf("the Pod on n3: %q /%d", node, bits)
	}
	c.nodes.Store(newNodeTable([]*corev1.Node{testNode("n4", nil, "10.244.3.0/24")}))
	c.pods.setNodes(c.nodes.Load())
	if node, bits := locatedAt(c, "10.244.3.7/32"); node != "" {
		t.Errorf("the Pod of deleted n3 is located on %q /%d", node, bits)
	}
	if node, bits := locatedAt(c, "10.244.3.9/32"); node != "n4" || bits != 32 {
		t.Errorf("another address of n4's CIDR, beside a stray Pod: %q /%d, want n4 /32", node, bits)
	}
}

// A forwarder set answers alike whether it keeps its addresses in a list (a few) or a map.
func TestAddrSet(t *testing.T) {
	for _, n := range []int{0, 1, fewAddrs, fewAddrs + 1, 50} {
		addrs := map[netip.Addr]bool{}
		for i := range n {
			a := netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(i % 250)})
			if i == n-1 {
				a = netip.MustParseAddr("fd00::1") // both families
			}
			addrs[a] = true
		}
		s := newAddrSet(addrs)
		if (s.many != nil) != (len(addrs) > fewAddrs) {
			t.Errorf("%d addresses: kept in a map %v", len(addrs), s.many != nil)
		}
		for a := range addrs {
			if !s.has(a) {
				t.Errorf("%d addresses: %s not found", len(addrs), a)
			}
		}
		for _, a := range []string{"10.0.1.0", "10.9.9.9", "fd00::2", "::ffff:10.0.0.0"} {
			if s.has(netip.MustParseAddr(a)) {
				t.Errorf("%d addresses: %s found", len(addrs), a)
			}
		}
	}
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// clientsCorefile ranks answers from the client: this cluster east spans zones za and zb of
// region r1 (its Nodes say so); west is in za, north in zc.
const clientsCorefile = `global:{{.Port}} near.global:{{.Port}} {
    bind 127.0.0.1
    global global near.global {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        endpointslices off
        rotate off
        cluster east
        locality east region=r1
        locality west zone=za region=r1
        locality north zone=zc region=r1
        client_locality ecs node pod
        client_forwarders %[1]s/kube-dns
        client_ecs_from %[1]s/kube-dns
        policy nearest near.global
    }
}
`

// TestClientRankedAnswers: three Nodes whose InternalIPs are loopback addresses, local pods on
// each, linked clusters in the first two's zone and elsewhere in the region. A query sent from a
// Node's address (dig -b, Go's resolver and miekg/dns bound to it), from a Pod's IP, or by a
// forwarder with the ECS option of a pod or of a Node's pod CIDR, is answered from that node:
// its pods first, then its zone's, this cluster's, the region's. Other sources get the cluster's
// answer. A pod that moves to another node changes rank.
func TestClientRankedAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	base := fmt.Sprintf("127.61.%d.", 1+rand.IntN(250))
	nodeA, nodeB, nodeC, appPod := base+"2", base+"3", base+"4", base+"20"
	// The forwarder's address is in an EndpointSlice, which may not hold a loopback address: the
	// host's own address, from which it can send to 127.0.0.1 all the same.
	fwd := hostAddr(t)
	for _, n := range []harness.Node{
		{Name: ns + "-a", Zone: "za", Region: "r1", Addresses: []string{nodeA}, PodCIDRs: []string{"10.61.1.0/24"}},
		{Name: ns + "-b", Zone: "za", Region: "r1", Addresses: []string{nodeB}, PodCIDRs: []string{"10.61.2.0/24"}},
		{Name: ns + "-c", Zone: "zb", Region: "r1", Addresses: []string{nodeC}, PodCIDRs: []string{"10.61.3.0/24"}},
	} {
		testkit.Must(t, harness.CreateNode(ctx, client(), n))
	}
	zz := harness.StatefulSet{Namespace: ns, Service: "zz", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "zz-0", Node: ns + "-a", IP: "10.61.1.10", Ready: true},
		{Name: "zz-1", Node: ns + "-b", IP: "10.61.2.10", Ready: true},
		{Name: "zz-2", Node: ns + "-c", IP: "10.61.3.10", Ready: true},
	}}
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), zz))
	// A client pod on node c, with a loopback address to send from.
	testkit.Must(t, harness.CreatePod(ctx, client(), harness.StatefulSet{Namespace: ns, Service: "app"}, harness.Pod{Name: "app-0", Node: ns + "-c", IP: appPod, Ready: true}))
	west, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "zz", "west", true))
	testkit.Must(t, err)
	north, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "zz", "north", true))
	testkit.Must(t, err)
	createForwarder(t, ns, fwd)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(clientsCorefile, ns))

	name, near := "zz."+ns+".global.", "zz."+ns+".near.global."
	w, n := west.ClusterIPs["zz-0"], north.ClusterIPs["zz-0"]
	fromA := []string{"10.61.1.10", "10.61.2.10", w, "10.61.3.10", n}
	fromB := []string{"10.61.2.10", "10.61.1.10", w, "10.61.3.10", n}
	fromC := []string{"10.61.3.10", "10.61.1.10", "10.61.2.10", n, w}
	cluster := []string{"10.61.1.10", "10.61.2.10", "10.61.3.10", n, w}
	answers := func(from, ecs, qname string, want []string, scope int) func() error {
		return answersFrom(c, from, ecs, qname, want, scope)
	}
	harness.Eventually(t, "answers from node a", answers(nodeA, "", name, fromA, -1))
	harness.Eventually(t, "answers from node c", answers(nodeC, "", name, fromC, -1))
	testkit.Must(t, answers(nodeB, "", name, fromB, -1)())
	testkit.Must(t, answers("127.0.0.1", "", name, cluster, -1)())
	testkit.Must(t, answers(fwd, "", name, cluster, -1)())
	testkit.Must(t, answers(nodeA, "", near, fromA[:1], -1)())
	harness.Eventually(t, "answers from a pod on node c", answers(appPod, "", name, fromC, -1))
	// A forwarder passing its client's address: a pod's IP, or a prefix of a Node's pod CIDR.
	harness.Eventually(t, "ECS of a pod on node a", answers(fwd, "10.61.1.10/32", name, fromA, 32))
	testkit.Must(t, answers(fwd, "10.61.2.0/24", name, fromB, 24)())
	testkit.Must(t, answers(fwd, "10.9.9.9/32", name, cluster, 32)())

	// Real clients bound to a Node's address: dig, and Go's resolver, whose SRV answer is sorted
	// by priority, the client's tiers.
	digFrom := func(from, qname, qtype string) []string {
		host, port, _ := net.SplitHostPort(c.Addr)
		out, err := exec.Command("dig", "-b", from, "@"+host, "-p", port, "+short", "+tries=3", qname, qtype).CombinedOutput()
		testkit.Must(t, err)
		return strings.Fields(string(out))
	}
	if _, err := exec.LookPath("dig"); err != nil {
		t.Fatalf("dig is needed (make dig installs Debian's bind9-dnsutils): %v", err)
	}
	if got := digFrom(nodeC, near, "A"); !slices.Equal(got, fromC[:1]) {
		t.Errorf("dig -b %s %s: %q", nodeC, near, got)
	}
	if got := digFrom(nodeA, name, "A"); !slices.Equal(got, fromA) {
		t.Errorf("dig -b %s %s: %q", nodeA, name, got)
	}
	_, srvs, err := boundResolver(c, nodeA).LookupSRV(ctx, "db", "tcp", name)
	testkit.Must(t, err)
	var priorities []string
	for _, s := range srvs {
		priorities = append(priorities, fmt.Sprintf("%d %s", s.Priority, strings.TrimSuffix(s.Target, "."+name)))
	}
	slices.Sort(priorities)
	if want := []string{"0 zz-0.east", "1 zz-0.west", "1 zz-1.east", "2 zz-2.east", "3 zz-0.north"}; !slices.Equal(priorities, want) {
		t.Errorf("Go's resolver from node a, SRV: %q, want %q", priorities, want)
	}
	addrs, err := boundResolver(c, nodeA).LookupHost(ctx, near)
	testkit.Must(t, err)
	if !slices.Equal(addrs, fromA[:1]) {
		t.Errorf("Go's resolver from node a, %s: %q", near, addrs)
	}
	testkit.Must(t, explains(t, c, name, dns.RcodeSuccess, "service="+ns+"/zz records=5", "client=unknown"))
	lines, _ := explanationFrom(t, c, nodeA, name)
	if len(lines) == 0 || !strings.Contains(lines[0], fmt.Sprintf("client=node:%s-a,zone:za,region:r1 client-from=node", ns)) ||
		!slices.ContainsFunc(lines, func(l string) bool {
			return strings.Contains(l, fmt.Sprintf("host=zz-0 cluster=east tier=0 why=node:%s-a", ns))
		}) {
		t.Errorf("explanation from node a:\n%s", strings.Join(lines, "\n"))
	}
	// linkerd global explain --from: as a Node, as a Pod, and as an address a resolver's ECS option
	// gives (a replica whose client_locality is ecs alone), each client's answer.
	ecsOnly := harness.StartCoreDNS(t, cp, fmt.Sprintf(strings.Replace(clientsCorefile, "client_locality ecs node pod", "client_locality ecs", 1), ns))
	for _, tc := range []struct {
		replica             *harness.CoreDNS
		from, client, first string
	}{
		{c, "node/" + ns + "-a", "node:" + ns + "-a,zone:za,region:r1 client-from=node", "10.61.1.10"},
		{c, "pod/" + ns + "/app-0", "node:" + ns + "-c,zone:zb,region:r1 client-from=pod", "10.61.3.10"},
		{ecsOnly, "10.61.2.99", "node:" + ns + "-b,zone:za,region:r1 client-from=ecs", "10.61.2.10"},
	} {
		harness.Eventually(t, "explain --from "+tc.from, func() error {
			return explainsFrom(t, tc.replica, name, tc.from, tc.client, tc.first)
		})
	}

	// zz-0 moves from node a to node c: node a sees its zone first now, node c its two pods.
	testkit.Must(t, harness.DeletePod(ctx, client(), ns, "zz-0"))
	harness.Eventually(t, "zz-0 gone", answers(nodeA, "", name, []string{"10.61.2.10", w, "10.61.3.10", n}, -1))
	testkit.Must(t, harness.CreatePod(ctx, client(), zz, harness.Pod{Name: "zz-0", Node: ns + "-c", IP: "10.61.3.11", Ready: true}))
	harness.Eventually(t, "zz-0 on node c, from node a", answers(nodeA, "", name, []string{"10.61.2.10", w, "10.61.3.11", "10.61.3.10", n}, -1))
	testkit.Must(t, answers(nodeC, "", near, []string{"10.61.3.11", "10.61.3.10"}, -1)())
	testkit.Must(t, answers(nodeA, "", near, []string{"10.61.2.10", w}, -1)())
}

// explainsFrom runs `linkerd global explain qname --from from` against replica c: the explanation's
// client is client (and how it was learned), and first is its one record of tier 0.
func explainsFrom(t *testing.T, c *harness.CoreDNS, qname, from, client, first string) error {
	out, stderr, code := cli(t, cp, "", "explain", qname, "--from", from, "--dns-addr", c.Addr, "-o", "json")
	var res struct{ Lines []map[string]string }
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res.Lines) == 0 {
		return fmt.Errorf("exit %d, %v:\n%s%s", code, err, out, stderr)
	}
	if got := res.Lines[0]["client"] + " client-from=" + res.Lines[0]["client-from"]; got != client {
		return fmt.Errorf("client=%s, want %s", got, client)
	}
	var tier0 []string
	for _, l := range res.Lines[1:] {
		if l["addr"] != "" && l["tier"] == "0" {
			tier0 = append(tier0, l["addr"])
		}
	}
	if !slices.Equal(tier0, []string{first}) {
		return fmt.Errorf("tier 0: %v, want %s", tier0, first)
	}
	return nil
}

// hostAddr returns an IPv4 address of this host that is not a loopback one.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	testkit.Must(t, err)
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok && p.IP.To4() != nil && !p.IP.IsLoopback() && !p.IP.IsLinkLocalUnicast() {
			return p.IP.String()
		}
	}
	t.Fatal("no IPv4 address but loopback ones: a forwarder needs one for its EndpointSlice")
	return ""
}

// createForwarder makes a Service kube-dns in ns whose EndpointSlice holds addr: the cluster DNS.
func createForwarder(t *testing.T, ns, addr string) {
	t.Helper()
	ctx := context.Background()
	_, err := client().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
	_, err = client().DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kube-dns-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}, metav1.CreateOptions{})
	testkit.Must(t, err)
}

// noScope: the reply's ECS option is not checked (a forwarder's rewrite decides what it returns).
const noScope = -2

// answersFrom checks that qname A, asked of c from address from (with the ECS option of prefix ecs
// when not ""), over UDP and TCP, is want in this order, its reply's ECS option of scope scope (-1:
// none; noScope: not checked).
func answersFrom(c *harness.CoreDNS, from, ecs, qname string, want []string, scope int) func() error {
	return func() error {
		for _, proto := range []string{"udp", "tcp"} {
			r, err := c.AskFrom(proto, from, ecs, qname, dns.TypeA)
			if err != nil {
				return err
			}
			if got := aRecords(r); !slices.Equal(got, want) || scope != noScope && ecsScope(r) != scope {
				return fmt.Errorf("%s from %s (ECS %q) over %s at %s: %q scope %d, want %q scope %d", qname, from, ecs, proto, c.Addr, got, ecsScope(r), want, scope)
			}
		}
		return nil
	}
}

// aRecords is an answer's A records, in order.
func aRecords(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out
}

// ecsScope is the scope of the reply's ECS option, -1 without one.
func ecsScope(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_SUBNET); ok {
				return int(e.SourceScope)
			}
		}
	}
	return -1
}

// boundResolver is Go's own resolver asking c from address from.
func boundResolver(c *harness.CoreDNS, from string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var local net.Addr = &net.UDPAddr{IP: net.ParseIP(from)}
		if strings.HasPrefix(network, "tcp") {
			local = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: local}
		return d.DialContext(ctx, network, c.Addr)
	}}
}

// explanationFrom is the CH TXT explanation of qname asked over TCP from address from.
func explanationFrom(t *testing.T, c *harness.CoreDNS, from, qname string) ([]string, int) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(qname), dns.TypeTXT)
	m.Question[0].Qclass = dns.ClassCHAOS
	cl := &dns.Client{Net: "tcp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}}
	r, _, err := cl.Exchange(m, c.Addr)
	testkit.Must(t, err)
	var lines []string
	for _, rr := range r.Answer {
		if txt, ok := rr.(*dns.TXT); ok {
			lines = append(lines, strings.Join(txt.Txt, ""))
		}
	}
	return lines, r.Rcode
}

package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// policyCorefile serves foo.<ns>.global (all tiers) and foo.<ns>.near.global (the nearest tier).
const policyCorefile = `global:{{.Port}} near.global:{{.Port}} {
    bind 127.0.0.1
    global global near.global {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        endpointslices off
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
        locality north zone=eu-north-1a region=eu-north-1
        policy nearest near.global
    }
}
`

// TestPolicyClients follows a client's failover chain as applications resolve names: Go's
// resolver asked directly, and, as root, glibc's getaddrinfo (getent ahosts) and Go's resolver
// reading a pod's resolv.conf whose nameserver is a cluster DNS forwarding the zones. The nearest
// tier answers, then, as it empties, the next (this cluster, then the same region, then
// elsewhere), and back as it returns; an owner's `nearest 3` and its removal; a service with
// only linked members.
func TestPolicyClients(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	localFoo(t, ns)
	west, err := harness.CreateMirror(ctx, client(), mirror(ns, "west", true))
	testkit.Must(t, err)
	north, err := harness.CreateMirror(ctx, client(), mirror(ns, "north", true))
	testkit.Must(t, err)
	barWest, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "bar", "west", true))
	testkit.Must(t, err)
	barNorth, err := harness.CreateMirror(ctx, client(), mirrorOf(ns, "bar", "north", true))
	testkit.Must(t, err)
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(policyCorefile, ns))

	local := []string{"10.244.1.10", "10.244.2.11"}
	westIP, northIP := west.ClusterIPs["foo-0"], north.ClusterIPs["foo-0"]

	// The clients: Go's resolver, and as root the pod's view.
	type lookup func(name string) []string
	clients := map[string]lookup{"go": func(name string) []string {
		addrs, _ := goResolver(c, "udp").LookupHost(ctx, name)
		return addrs
	}}
	if os.Geteuid() == 0 && exec.Command("unshare", "-m", "true").Run() == nil {
		bin := builtLookup(t)
		ip := loopbackIPs(t, 1)[0]
		startClusterDNS(t, ip, c.Addr)
		rc := writeFile(t, "resolv.conf", fmt.Sprintf("nameserver %s\noptions ndots:1\n", ip))
		for _, client := range []string{"getent", "go"} {
			clients[client+" (resolv.conf)"] = func(name string) []string { return bin.run(t, client, rc, name).Addrs }
		}
	} else {
		t.Log("not root: glibc and the pod's resolv.conf are not tried, only Go's resolver")
	}
	t.Logf("clients: %v", slices.Sorted(maps.Keys(clients)))
	resolves := func(name string, want ...string) func() error {
		slices.Sort(want)
		return func() error {
			for what, look := range clients {
				got := look(name)
				slices.Sort(got)
				if got = slices.Compact(got); !slices.Equal(got, want) {
					return fmt.Errorf("%s resolves %s to %v, want %v", what, name, got, want)
				}
			}
			return nil
		}
	}
	near, all := "foo."+ns+".near.global.", "foo."+ns+".global."

	harness.Eventually(t, "this cluster answers", resolves(near, local...))
	testkit.Must(t, resolves(all, append(slices.Clone(local), westIP, northIP)...)())
	for _, pod := range []string{"foo-0", "foo-1"} {
		testkit.Must(t, harness.SetPodReady(ctx, client(), ns, pod, false))
	}
	harness.Eventually(t, "the same region answers", resolves(near, westIP))
	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", false, nil)
	testkit.Must(t, err)
	harness.Eventually(t, "elsewhere answers", resolves(near, northIP))
	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", true, nil)
	testkit.Must(t, err)
	harness.Eventually(t, "the same region answers again", resolves(near, westIP))
	testkit.Must(t, harness.SetPodReady(ctx, client(), ns, "foo-0", true))
	harness.Eventually(t, "this cluster answers again", resolves(near, "10.244.1.10"))
	testkit.Must(t, harness.SetPodReady(ctx, client(), ns, "foo-1", true))

	// The owner asks for at least 3 records in the zone without a policy of its own: this cluster
	// (2) and the same region (1), not elsewhere; removed, every tier again.
	annotateService(t, ns, "foo", map[string]string{"globaldns.io/policy": "nearest 3"})
	harness.Eventually(t, "the owner's nearest 3", resolves(all, append(slices.Clone(local), westIP)...))
	testkit.Must(t, resolves(near, local...)()) // the zone's policy wins
	annotateService(t, ns, "foo", map[string]string{"globaldns.io/policy": ""})
	harness.Eventually(t, "the annotation removed", resolves(all, append(slices.Clone(local), westIP, northIP)...))

	// Only linked members: the nearest of them.
	harness.Eventually(t, "bar, from the same region", resolves("bar."+ns+".near.global.", barWest.ClusterIPs["bar-0"]))
	_, err = harness.SetGatewayIn(ctx, client(), ns, "west", false, nil)
	testkit.Must(t, err)
	harness.Eventually(t, "bar, from elsewhere", resolves("bar."+ns+".near.global.", barNorth.ClusterIPs["bar-0"]))
}

// TestNearestCountsMembersOnce: under `nearest N` a member counts once whatever the question. A
// service with two named ports, one ready pod here and one in target1, and the owner's `nearest 2`:
// the nearest tier holds one member, so every answer takes the next tier too, the A answer and the
// SRV answers alike (a pod's two SRV records are one member, not two).
func TestNearestCountsMembersOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	ports := []harness.Port{{Name: "db", Port: 5432, TargetPort: 15432}, {Name: "metrics", Port: 9000, TargetPort: 19000}}
	testkit.Must(t, harness.CreateNode(ctx, client(), harness.Node{Name: ns + "-a", Zone: "us-east-1a", Region: "us-east-1"}))
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), harness.StatefulSet{Namespace: ns, Service: "duo", Ports: ports,
		Pods: []harness.Pod{{Name: "duo-0", Node: ns + "-a", IP: "10.244.7.10", Ready: true}}}))
	target1, err := harness.CreateMirror(ctx, client(), harness.Mirror{Namespace: ns, Service: "duo", Cluster: "target1", Ports: ports,
		Labels: map[string]string{"app": "duo"}, Endpoints: []harness.RemoteEndpoint{{Hostname: "duo-0", Ready: true}}})
	testkit.Must(t, err)
	annotateService(t, ns, "duo", map[string]string{"globaldns.io/policy": "nearest 2"})
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(corefile, ns))

	name := "duo." + ns + ".global."
	here, there := "duo-0.east."+name, "duo-0.target1."+name
	remote := target1.ClusterIPs["duo-0"]
	// Tiers: this cluster 0, target1 (no locality) 3; weights shared by a tier's SRV records. A
	// pod's SRV records come in its slice's order of ports, which the EndpointSlice controller
	// does not promise.
	eventuallyExpect(t, c, name, dns.TypeA, dns.RcodeSuccess, "A 10.244.7.10", "A "+remote)
	testkit.Must(t, expectAnyOrder(t, c, name, dns.TypeSRV, dns.RcodeSuccess,
		"SRV 0 50 15432 "+here, "SRV 0 50 19000 "+here, "SRV 3 50 5432 "+there, "SRV 3 50 9000 "+there))
	testkit.Must(t, expect(t, c, "_db._tcp."+name, dns.TypeSRV, dns.RcodeSuccess, "SRV 0 100 15432 "+here, "SRV 3 100 5432 "+there))
	// And the explanation says the same: both members answered, nothing beyond the nearest.
	testkit.Must(t, explains(t, c, name, dns.RcodeSuccess, "service="+ns+"/duo records=2 left-out=0 ", "policy=nearest-2 from=annotation",
		"tier=0 clusters=east ready=1 answered=true", "tier=3 clusters=target1 ready=1 answered=true"))
}

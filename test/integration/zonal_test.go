package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
)

// zonalCorefile serves, in one bin/coredns, CoreDNS's own kubernetes plugin with zonal names and
// this plugin, over the same objects.
const zonalCorefile = `cluster.local:{{.Port}} {
    bind 127.0.0.1
    kubernetes cluster.local {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        zonal
    }
}
global:{{.Port}} clusterset.local:{{.Port}} {
    bind 127.0.0.1
    global global clusterset.local {
        kubeconfig {{.Kubeconfig}}
        namespaces %[1]s
        endpointslices off
        cluster east
        names mcs clusterset.local
    }
}
`

// TestZonalNamesAsKubernetes: for a service with local members only, this plugin's zonal names
// answer what CoreDNS v1.15's kubernetes plugin answers for the same Service's: the same records
// (addresses; SRV priority, weight, port and target host) and rcodes, for pin and prefer, a zone
// with endpoints and one without, A and SRV, and a service that does not exist.
func TestZonalNamesAsKubernetes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := namespace(t)
	for _, n := range []harness.Node{{Name: ns + "-a", Zone: "za", Region: "r1"}, {Name: ns + "-b", Zone: "zb", Region: "r1"}} {
		testkit.Must(t, harness.CreateNode(ctx, client(), n))
	}
	testkit.Must(t, harness.CreateStatefulSet(ctx, client(), harness.StatefulSet{Namespace: ns, Service: "zz", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "zz-0", Node: ns + "-a", IP: "10.66.1.10", Ready: true},
		{Name: "zz-1", Node: ns + "-a", IP: "10.66.1.11", Ready: true},
		{Name: "zz-2", Node: ns + "-b", IP: "10.66.2.10", Ready: true},
		{Name: "zz-3", Node: ns + "-b", IP: "10.66.2.11", Ready: false},
	}}))
	c := harness.StartCoreDNS(t, cp, fmt.Sprintf(zonalCorefile, ns))
	eventuallyExpectAnyOrder(t, c, "zz."+ns+".svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "A 10.66.1.10", "A 10.66.1.11", "A 10.66.2.10")
	eventuallyExpectAnyOrder(t, c, "zz."+ns+".global.", dns.TypeA, dns.RcodeSuccess, "A 10.66.1.10", "A 10.66.1.11", "A 10.66.2.10")

	compared, hits := 0, 0
	for _, svc := range []string{"zz", "nope"} {
		for _, zone := range []string{"za", "zb", "zq"} {
			for _, directive := range []string{"pin", "prefer"} {
				for _, qtype := range []uint16{dns.TypeA, dns.TypeSRV, dns.TypeTXT} {
					prefix := zone + "." + directive + "._zone."
					kube := ask(t, c, "tcp", prefix+svc+"."+ns+".svc.cluster.local.", qtype)
					for _, ours := range []string{prefix + svc + "." + ns + ".global.", prefix + svc + "." + ns + ".svc.clusterset.local."} {
						got := ask(t, c, "tcp", ours, qtype)
						if got.Rcode != kube.Rcode || !slices.Equal(zonalRecords(got), zonalRecords(kube)) {
							t.Errorf("%s %s: %s %q; the kubernetes plugin: %s %q", ours, dns.TypeToString[qtype],
								dns.RcodeToString[got.Rcode], zonalRecords(got), dns.RcodeToString[kube.Rcode], zonalRecords(kube))
						}
						compared++
						if len(got.Answer) > 0 {
							hits++
						}
					}
				}
			}
		}
	}
	if hits < 12 { // za and zb pinned and preferred, zq preferred, A and SRV, in both zones of ours
		t.Errorf("only %d of %d answers have records", hits, compared)
	}
	t.Logf("%d answers compared, %d with records", compared, hits)
}

// zonalRecords renders what an answer holds, sorted, without the names that differ between the
// two plugins: addresses, and SRV priority, weight, port and the target's first label.
func zonalRecords(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, "A "+r.A.String())
		case *dns.SRV:
			host, _, _ := strings.Cut(r.Target, ".")
			out = append(out, fmt.Sprintf("SRV %d %d %d %s", r.Priority, r.Weight, r.Port, host))
		default:
			out = append(out, dns.TypeToString[rr.Header().Rrtype])
		}
	}
	slices.Sort(out)
	return out
}

// eventuallyExpectAnyOrder waits until expectAnyOrder holds.
func eventuallyExpectAnyOrder(t *testing.T, c *harness.CoreDNS, qname string, qtype uint16, rcode int, answer ...string) {
	t.Helper()
	harness.Eventually(t, "answer", func() error { return expectAnyOrder(t, c, qname, qtype, rcode, answer...) })
}

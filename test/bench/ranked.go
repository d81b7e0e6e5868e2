package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/globaldns/global/test/harness"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// rankedCorefile answers names ranked from the client's node, as issue 46 measured them: nearest,
// client_locality node.
const rankedCorefile = `global:PORT {
    bind 127.0.0.1
    global {
        kubeconfig KUBECONFIG
        namespaces rank
        endpointslices off
        cluster east
        locality east region=r1
        client_locality node
        policy nearest
    }
}
`

// rankedNodes are the Nodes the ranked step's endpoints run on, one per zone, each at a loopback
// address dnsperf sends from (-a).
var rankedNodes = []struct{ name, zone, addr string }{
	{"rank-n1", "za", "127.0.0.21"},
	{"rank-n2", "zb", "127.0.0.22"},
	{"rank-n3", "zc", "127.0.0.23"},
}

// rankedCase is one dnsperf case of the ranked step: a name, asked from an address.
type rankedCase struct {
	name, qname, from string
}

// ranked measures, in one bin/coredns and one run, answers ranked from the client's node against
// the same names unranked (asked from an address that is no Node's: the cluster's view), and
// zonal names against the plain name, for local services of 10 and of 3,000 endpoints over three
// zones and their nodes.
func ranked(ctx context.Context, cp *harness.ControlPlane, o options, r *report) error {
	sizes := []int{10, 3000}
	if err := rankedFixtures(ctx, cp, sizes); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	dns, err := harness.StartCoreDNSProcess(render(rankedCorefile, "PORT", port, "KUBECONFIG", cp.Kubeconfig), filepath.Join(o.work, "coredns-ranked"), nil)
	if err != nil {
		return err
	}
	defer dns.Stop()
	var cases []rankedCase
	for _, n := range sizes {
		name := fmt.Sprintf("r%d.rank.global", n)
		if err := waitAnswers(ctx, dns.Addr, name+".", n); err != nil {
			return err
		}
		cases = append(cases,
			rankedCase{fmt.Sprintf("%d endpoints: the cluster's view", n), name, "127.0.0.1"},
			rankedCase{fmt.Sprintf("%d endpoints: ranked from node rank-n1", n), name, rankedNodes[0].addr},
			rankedCase{fmt.Sprintf("%d endpoints: zonal name, pin zb", n), "zb.pin._zone." + name, "127.0.0.1"},
		)
	}
	qps, err := rankedRounds(ctx, o, dns.Addr, cases)
	if err != nil {
		return err
	}
	s := section{
		title: "Answers ranked from the client",
		intro: fmt.Sprintf("Local services of 10 and of 3,000 endpoints (EndpointSlices of 100) over three zones, each endpoint on its "+
			"zone's Node; `client_locality node`, `policy nearest`. dnsperf as above (EDNS, 20 clients, %v a run), from Node rank-n1's "+
			"address (ranked from it: its own endpoints, a third of the service) and from 127.0.0.1, no Node's (the cluster's view, the "+
			"same name); and a zonal name of the same service. %d interleaved rounds, medians, one `bin/coredns`.", o.duration, o.rounds),
		header: []string{"Case", "Query", "From", "QPS", "/ the cluster's view"},
	}
	for i, rc := range cases {
		base := median(qps[i-i%3])
		s.rows = append(s.rows, []string{rc.name, "`" + rc.qname + " A`", rc.from, fmt.Sprintf("%.0f", median(qps[i])), fmt.Sprintf("%.2f", median(qps[i])/base)})
	}
	r.add(s)
	var ranks, zonals []string
	for k, n := range sizes {
		plain, rank, zonal := median(qps[3*k]), median(qps[3*k+1]), median(qps[3*k+2])
		ranks = append(ranks, fmt.Sprintf("%.2f at %d (%.0f vs %.0f QPS)", rank/plain, n, rank, plain))
		zonals = append(zonals, fmt.Sprintf("%.2f at %d (%.0f vs %.0f QPS)", zonal/plain, n, zonal, plain))
	}
	r.goal("Throughput ranked from a node / the same name unranked, 10 and 3,000 endpoints", "≥ 0.8 at both", strings.Join(ranks, "; "))
	r.goal("Throughput of a zonal name / the plain name, 10 and 3,000 endpoints", "≥ 0.9 at both", strings.Join(zonals, "; "))
	return nil
}

// rankedFixtures makes the step's namespace, Nodes and services of sizes endpoints.
func rankedFixtures(ctx context.Context, cp *harness.ControlPlane, sizes []int) error {
	c := cp.Client
	if err := harness.EnsureNamespace(ctx, c, "rank"); err != nil {
		return err
	}
	for _, n := range rankedNodes {
		if err := harness.CreateNode(ctx, c, harness.Node{Name: n.name, Zone: n.zone, Region: "r1", Addresses: []string{n.addr}}); err != nil {
			return err
		}
	}
	for _, n := range sizes {
		if err := rankedService(ctx, cp, n); err != nil {
			return err
		}
	}
	return nil
}

// rankedRounds runs dnsperf on each case at addr, o.rounds interleaved rounds: each case's
// queries per second, by round.
func rankedRounds(ctx context.Context, o options, addr string, cases []rankedCase) ([][]float64, error) {
	qps := make([][]float64, len(cases))
	for round := 1; round <= o.rounds; round++ {
		for i, rc := range cases { // A B C A B C: every case once per round
			q, mean, err := dnsperfRun(ctx, o, addr, perfCase{name: rc.name, qname: rc.qname, qtype: "A", proto: "udp"}, "-a", rc.from)
			if err != nil {
				return nil, err
			}
			qps[i] = append(qps[i], q)
			fmt.Printf("round %d  %-45s %9.0f qps  mean %s\n", round, rc.name, q, ms(mean))
		}
	}
	return qps, nil
}

// rankedService makes rank/r<n>: a local selector-less headless Service, exported, with n
// endpoints in EndpointSlices of 100, endpoint e on rankedNodes[e%3] in its zone.
func rankedService(ctx context.Context, cp *harness.ControlPlane, n int) error {
	c := cp.Client
	name := fmt.Sprintf("r%d", n)
	_, err := c.CoreV1().Services("rank").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{harness.LabelExported: "true"}},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "db", Port: 5432}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	for s := 0; s*100 < n; s++ {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, s),
				// The Service's labels, as the endpointslice controller copies them: the plugin
				// watches the local slices by the export selector.
				Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench", harness.LabelExported: "true"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("db"), Port: ptr.To[int32](5432)}},
		}
		for e := s * 100; e < min(n, (s+1)*100); e++ {
			node := rankedNodes[e%len(rankedNodes)]
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 40+n/1000, e/250, e%250+1)},
				Hostname:   ptr.To(fmt.Sprintf("%s-%d", name, e)),
				NodeName:   ptr.To(node.name),
				Zone:       ptr.To(node.zone),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			})
		}
		if _, err := c.DiscoveryV1().EndpointSlices("rank").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

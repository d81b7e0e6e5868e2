package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
	"k8s.io/client-go/kubernetes"
)

// The failover service: one local pod (tier 0) and one linked cluster's (west), asked under the
// programming Corefile's nearest-tier zone.
const (
	failoverSvc   = "fo"
	failoverLocal = "10.244.60.1"
	failoverZone  = "near.global."
)

// failoverFixtures creates the failover service; it returns west's address.
func failoverFixtures(ctx context.Context, c kubernetes.Interface) (string, error) {
	ports := []harness.Port{{Name: "db", Port: 5432}}
	sts := harness.StatefulSet{Namespace: progNS, Service: failoverSvc, Ports: ports,
		Pods: []harness.Pod{{Name: failoverSvc + "-0", Node: "prog-node", IP: failoverLocal, Ready: true}}}
	if err := harness.CreateStatefulSet(ctx, c, sts); err != nil {
		return "", err
	}
	objs, err := harness.CreateMirror(ctx, c, harness.Mirror{Namespace: progNS, Service: failoverSvc, Cluster: "west", Ports: ports,
		Endpoints: []harness.RemoteEndpoint{{Hostname: failoverSvc + "-0", Ready: true}}})
	if err != nil {
		return "", err
	}
	return objs.ClusterIPs[failoverSvc+"-0"], nil
}

// failoverRow measures a client's failover chain: the local pod of the failover service turns not
// ready (as a kubelet writes it) until its nearest-tier name answers west instead, and ready again
// until it answers the local pod again, each from the API write, polled over UDP.
func failoverRow(ctx context.Context, c kubernetes.Interface, dnsAddr, west string, changes int) (section, string, error) {
	qname := fmt.Sprintf("%s.%s.%s", failoverSvc, progNS, failoverZone)
	sec := section{
		title: "Failover of a nearest-tier name",
		intro: fmt.Sprintf("`%s` under `policy nearest`: this cluster's one pod turns not ready (its Ready condition, as a kubelet writes it) "+
			"until the name answers the linked cluster's pod instead, and ready again until it answers the local pod again; from the API "+
			"write, polled over UDP, %d changes.", qname, changes),
		header: []string{"Change", "Changes", "p50", "p99"},
	}
	var lat [2][]float64 // failing over, coming back
	for i := range changes {
		back := i%2 == 1
		want := west
		if back {
			want = failoverLocal
		}
		t0 := time.Now()
		if err := harness.SetPodReady(ctx, c, progNS, failoverSvc+"-0", back); err != nil {
			return sec, "", err
		}
		if err := waitAnswer(ctx, dnsAddr, qname, want); err != nil {
			return sec, "", err
		}
		lat[i%2] = append(lat[i%2], time.Since(t0).Seconds())
	}
	for i, what := range []string{"nearest tier empties → next tier answered", "nearest tier back → answered again"} {
		sec.rows = append(sec.rows, []string{what, fmt.Sprint(len(lat[i])), ms(quantile(lat[i], .5)), ms(quantile(lat[i], .99))})
	}
	fmt.Printf("failover: p99 %s, back p99 %s\n", ms(quantile(lat[0], .99)), ms(quantile(lat[1], .99)))
	return sec, ms(quantile(lat[0], .99)), nil
}

// waitAnswer polls qname's A records until they are exactly want.
func waitAnswer(ctx context.Context, addr, qname, want string) error {
	deadline := time.Now().Add(30 * time.Second)
	cl := &dns.Client{Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(qname, dns.TypeA)
	for {
		var got []string
		if r, _, err := cl.ExchangeContext(ctx, m, addr); err == nil {
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.A); ok {
					got = append(got, a.A.String())
				}
			}
		}
		if slices.Equal(got, []string{want}) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never answered %s (last %v)", qname, want, got)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
}

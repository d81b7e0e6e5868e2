package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// gatewayCase is a linked cluster whose gateway the bench kills and revives: a mirror of svc
// from cluster, with n remote pods, so n per-pod mirrors flip at once.
type gatewayCase struct {
	svc, cluster string
	n, rounds    int
}

var gatewayCases = []gatewayCase{{"g3", "gw3", 3, 20}, {"g1k", "gw1k", 1000, 2}}

func gatewayFixtures(ctx context.Context, c kubernetes.Interface) error {
	for _, g := range gatewayCases {
		m := harness.Mirror{Namespace: progNS, Service: g.svc, Cluster: g.cluster, Ports: []harness.Port{{Name: "db", Port: 5432}}}
		for i := range g.n {
			m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("%s-%d", g.svc, i), Ready: true})
		}
		if _, err := harness.CreateMirror(ctx, c, m); err != nil {
			return err
		}
	}
	return nil
}

// gatewayRows measures, for each case, from each per-pod mirror's Endpoints write (Linkerd
// marking it not ready, or ready again, as harness.SetGateway does) until DNS stops (or starts)
// answering its address; and, apart, kube-controller-manager's share: until the per-pod mirror's
// EndpointSlice shows the change.
func gatewayRows(ctx context.Context, c kubernetes.Interface, dnsAddr, metricsAddr string) (section, []string, error) {
	sec := section{
		title: "Gateway liveness",
		intro: "Linkerd's gateway probe of one linked cluster fails (then recovers): every per-pod mirror Endpoints of that cluster " +
			"is rewritten not ready (then ready), as the service mirror does (`harness.SetGateway`, after linkerd2's `repairEndpoints`). " +
			"Latency from each Endpoints write until `bin/coredns` stops (starts) answering that record's address in the aggregate " +
			"name (polled over TCP); the mirroring share is until kube-controller-manager's EndpointSlice of that per-pod mirror shows " +
			"it; the plugin's own share is `coredns_global_programming_duration_seconds`.",
		header: []string{"Per-pod mirrors flipping", "Flips", "p50", "p99", "mirroring p99", "plugin p99"},
	}
	var goals []string
	for _, g := range gatewayCases {
		before, err := metrics(metricsAddr)
		if err != nil {
			return sec, nil, err
		}
		var total, mirroring []float64
		for round := range g.rounds * 2 {
			alive := round%2 == 1
			t, m, err := flipGateway(ctx, c, dnsAddr, g, alive)
			if err != nil {
				return sec, nil, err
			}
			total, mirroring = append(total, t...), append(mirroring, m...)
		}
		after, err := metrics(metricsAddr)
		if err != nil {
			return sec, nil, err
		}
		plugin := histogramQuantile(before, after, programmingHist, .99)
		sec.rows = append(sec.rows, []string{fmt.Sprint(g.n), fmt.Sprint(len(total)), ms(quantile(total, .5)), ms(quantile(total, .99)),
			ms(quantile(mirroring, .99)), ms(plugin)})
		goals = append(goals, fmt.Sprintf("%s (%d per-pod mirrors)", ms(quantile(total, .99)), g.n))
		fmt.Printf("gateway flips, %4d per-pod mirrors: DNS p99 %s, mirroring p99 %s, plugin p99 %s\n", g.n, ms(quantile(total, .99)), ms(quantile(mirroring, .99)), ms(plugin))
	}
	return sec, goals, nil
}

// flipGateway sets g's gateway alive (or dead) and returns, per per-pod mirror, the latency from
// its Endpoints write to DNS and to its EndpointSlice.
func flipGateway(ctx context.Context, c kubernetes.Interface, dnsAddr string, g gatewayCase, alive bool) (dnsLat, sliceLat []float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f := &gatewayFlip{g: g, alive: alive, written: map[string]time.Time{}, addrOf: map[string]string{},
		seenDNS: map[string]time.Time{}, seenSlice: map[string]time.Time{}}
	// kube-controller-manager's share: watch the per-pod mirrors' slices.
	w, err := c.DiscoveryV1().EndpointSlices(progNS).Watch(ctx, metav1.ListOptions{LabelSelector: harness.LabelClusterName + "=" + g.cluster + "," + harness.LabelHeadlessMirrorSvcName})
	if err != nil {
		return nil, nil, err
	}
	defer w.Stop()
	go f.watchSlices(w)
	done := make(chan struct{})
	polled := make(chan error, 1)
	go func() { polled <- f.pollDNS(dnsAddr, done) }()
	err = f.write(ctx, c)
	if err == nil {
		err = f.wait(ctx)
	}
	close(done)
	if err != nil {
		return nil, nil, err
	}
	if err := <-polled; err != nil {
		return nil, nil, err
	}
	for name, t := range f.written {
		// A poll may catch the change before the write's response arrives: count that as 0.
		dnsLat = append(dnsLat, max(0, f.seenDNS[name].Sub(t).Seconds()))
		sliceLat = append(sliceLat, max(0, f.seenSlice[name].Sub(t).Seconds()))
	}
	return dnsLat, sliceLat, nil
}

// gatewayFlip is one gateway change of a case, as it is seen: when each per-pod mirror's
// Endpoints was written, and when DNS and its EndpointSlice showed it.
type gatewayFlip struct {
	g         gatewayCase
	alive     bool
	mu        sync.Mutex
	written   map[string]time.Time // per-pod mirror name -> Endpoints written
	addrOf    map[string]string    // ClusterIP -> per-pod mirror name
	seenDNS   map[string]time.Time // per-pod mirror name -> DNS shows the change
	seenSlice map[string]time.Time
}

// watchSlices records when each per-pod mirror's slice shows the change, from w's events.
func (f *gatewayFlip) watchSlices(w watch.Interface) {
	for ev := range w.ResultChan() {
		es, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok || ev.Type == watch.Deleted || len(es.Endpoints) == 0 || ptr.Deref(es.Endpoints[0].Conditions.Ready, true) != f.alive {
			continue
		}
		now := time.Now()
		f.mu.Lock()
		if _, ok := f.seenSlice[es.Labels[discoveryv1.LabelServiceName]]; !ok {
			f.seenSlice[es.Labels[discoveryv1.LabelServiceName]] = now
		}
		f.mu.Unlock()
	}
}

// pollDNS polls the aggregate name at addr until done: an address is changed once it is absent
// (dead) or present (alive).
func (f *gatewayFlip) pollDNS(addr string, done <-chan struct{}) error {
	cl := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion(fmt.Sprintf("%s.%s.global.", f.g.svc, progNS), dns.TypeA)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		r, _, err := cl.Exchange(q, addr)
		now := time.Now()
		if err != nil {
			return err
		}
		present := map[string]bool{}
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				present[a.A.String()] = true
			}
		}
		f.mu.Lock()
		for a, name := range f.addrOf {
			if _, ok := f.seenDNS[name]; !ok && present[a] == f.alive {
				f.seenDNS[name] = now
			}
		}
		f.mu.Unlock()
	}
}

// write writes the gateway change. The write time is taken after the API answered; the address
// map is filled before the write, so a poll cannot see a change it does not know of.
func (f *gatewayFlip) write(ctx context.Context, c kubernetes.Interface) error {
	svcs, err := c.CoreV1().Services(progNS).List(ctx, metav1.ListOptions{LabelSelector: harness.LabelClusterName + "=" + f.g.cluster + "," + harness.LabelHeadlessMirrorSvcName})
	if err != nil {
		return err
	}
	f.mu.Lock()
	for _, s := range svcs.Items {
		f.addrOf[s.Spec.ClusterIP] = s.Name
	}
	f.mu.Unlock()
	_, err = harness.SetGatewayIn(ctx, c, progNS, f.g.cluster, f.alive, func(s *corev1.Service) {
		now := time.Now()
		f.mu.Lock()
		f.written[s.Name] = now
		f.mu.Unlock()
	})
	return err
}

// wait waits until DNS and the slices show every write.
func (f *gatewayFlip) wait(ctx context.Context) error {
	for {
		f.mu.Lock()
		complete := len(f.seenDNS) == len(f.written) && len(f.seenSlice) == len(f.written)
		dnsN, written, slices := len(f.seenDNS), len(f.written), len(f.seenSlice)
		f.mu.Unlock()
		if complete {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gateway of %s alive=%v: %d of %d records changed in DNS, %d slices", f.g.cluster, f.alive, dnsN, written, slices)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

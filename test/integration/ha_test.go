package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"
	"github.com/globaldns/global/test/testkit"

	"github.com/miekg/dns"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHA runs deploy/overlays/ha for real, as processes: three bin/coredns replicas with the
// Corefile of the rendered ConfigMap, authenticated as the rendered ServiceAccount (so its RBAC
// is all they have), under steady DNS load, through a leader crash, a rolling restart, an API
// server outage and one replica's partition from the API server.
func TestHA(t *testing.T) {
	t.Parallel()
	cp := harness.Start(t) // of its own: this test stops the API server
	ctx := context.Background()
	admin := cp.Client

	// The rendered manifests, applied for real (no kubelet runs their pods here).
	rendered, objs := kustomize(t, "deploy/overlays/ha")
	harness.RunKubectl(t, cp, rendered, "apply", "-f", "-", "--server-side")
	corefileText := corefileOf(objs)
	const deployNS = "coredns-global"
	// The Corefile names no cluster: the ClusterProperty does, as install.md tells kustomize users.
	nameCluster(t, cp, "east", "west", "north", "south")

	// The ServiceAccount's own token: every replica has exactly the rendered RBAC.
	tr, err := admin.CoreV1().ServiceAccounts(deployNS).CreateToken(ctx, "coredns-global",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](3600)}}, metav1.CreateOptions{})
	testkit.Must(t, err)
	saKubeconfig, err := cp.KubeconfigFor(tr.Status.Token)
	testkit.Must(t, err)
	proxy := harness.StartProxy(t, cp.APIServerAddr())
	viaProxy, err := cp.KubeconfigVia(proxy, tr.Status.Token)
	testkit.Must(t, err)

	// What the mesh looks like from east.
	const ns = "db"
	testkit.Must(t, harness.EnsureNamespace(ctx, admin, ns))
	testkit.Must(t, harness.CreateNode(ctx, admin, harness.Node{Name: "east-a", Zone: "us-east-1a", Region: "us-east-1"}))
	testkit.Must(t, harness.CreateStatefulSet(ctx, admin, harness.StatefulSet{Namespace: ns, Service: "foo", Ports: dbPorts, Pods: []harness.Pod{
		{Name: "foo-0", Node: "east-a", IP: "10.244.1.10", Ready: true},
		{Name: "foo-1", Node: "east-a", IP: "10.244.1.11", Ready: true},
	}}))
	// The answers of the phases: this cluster's pods, then west's, north's, south's.
	addrs := []string{"10.244.1.10", "10.244.1.11"}
	for _, cluster := range []string{"west", "north"} {
		objs, err := harness.CreateMirror(ctx, admin, mirror(ns, cluster, true, true))
		testkit.Must(t, err)
		addrs = append(addrs, objs.ClusterIPs["foo-0"], objs.ClusterIPs["foo-1"])
	}
	westToo, all := addrs[:4], slices.Clone(addrs)

	root := repoPath(t)
	tmpl := localize(corefileText, root)
	replica := func(kubeconfig string) *harness.CoreDNS {
		return harness.StartCoreDNS(t, nil, tmpl, harness.WithEnv("KUBECONFIG="+kubeconfig, "KUBERNETES_SERVICE_HOST=",
			"POD_NAMESPACE="+deployNS))
	}
	// The third replica reaches the API server through a proxy the test can cut.
	replicas := []*harness.CoreDNS{replica(saKubeconfig), replica(saKubeconfig), replica(viaProxy)}
	fooNS := "foo." + ns + ".global."
	for _, c := range replicas {
		harness.Eventually(t, "6 records on every replica", func() error { return answers(t, c, fooNS, 6) })
	}
	leader := waitLeader(t, replicas...)
	harness.Eventually(t, "the written slices", func() error { return writtenSlices(t, admin, ns, map[string]int{"east": 2, "west": 2, "north": 2}) })

	// The RBAC is enough (the above was written with it) and no more.
	sa := clientFor(t, saKubeconfig)
	for what, err := range map[string]error{
		"create a Secret": func() error {
			_, err := sa.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}(),
		"list Pods": func() error { _, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); return err }(),
		"update ConfigMaps": func() error {
			_, err := sa.CoreV1().ConfigMaps(deployNS).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns-global"}}, metav1.UpdateOptions{})
			return err
		}(),
		"get another Lease": func() error {
			_, err := sa.CoordinationV1().Leases(deployNS).Get(ctx, "someone-elses", metav1.GetOptions{})
			return err
		}(),
		"a Lease elsewhere": func() error {
			_, err := sa.CoordinationV1().Leases("kube-system").Get(ctx, "coredns-global-writer", metav1.GetOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the ServiceAccount may %s: %v", what, err)
		}
	}

	// Steady load, about 1000 queries a second over the replicas that report ready.
	pool := newPool("foo.db.global.", all, replicas...)
	defer pool.stop()

	// 1. kill -9 the leader: the others answer every query; a new leader converges the slices;
	// south is linked meanwhile.
	pool.remove(leader)
	killed := time.Now()
	leader.Kill()
	survivors := without(replicas, leader)
	southObjs, err := harness.CreateMirror(ctx, admin, mirror(ns, "south", true))
	testkit.Must(t, err)
	south := []string{southObjs.ClusterIPs["foo-0"]}
	withSouth := append(slices.Clone(all), south...)
	pool.expect(all, south)
	waitLeader(t, survivors...)
	t.Logf("kill -9: a new leader after %v", time.Since(killed).Round(100*time.Millisecond))
	harness.Eventually(t, "the new leader writing south", func() error {
		return writtenSlices(t, admin, ns, map[string]int{"east": 2, "west": 2, "north": 2, "south": 1})
	})
	for _, c := range survivors {
		harness.Eventually(t, "south answered", func() error { return answers(t, c, fooNS, 7) })
	}
	pool.expect(withSouth)
	pool.await(t, 500)
	pool.check(t, "kill -9 of the leader")

	// 2. A rolling restart, one replica at a time: SIGTERM, lameduck (the replica answers while
	// /ready says 503), its replacement ready before the next goes. The client only sends to
	// ready replicas, as a Service does: not one query may fail.
	partitioned := replicas[2] // the replica behind the proxy, and later its replacement
	replacement := replica(saKubeconfig)
	pool.add(replacement)
	current := append(survivors, replacement)
	for i, old := range current {
		wasLeader := old.Metric(t, "coredns_global_leader") == "1"
		kubeconfig := saKubeconfig
		if old == partitioned {
			kubeconfig = viaProxy
		}
		stopped := time.Now()
		testkit.Must(t, old.Signal(syscall.SIGTERM))
		current[i] = replica(kubeconfig)
		if old == partitioned {
			partitioned = current[i]
		}
		pool.add(current[i])
		if wasLeader {
			waitLeader(t, current...)
			t.Logf("rolling restart: SIGTERM to the leader, a new leader after %v", time.Since(stopped).Round(100*time.Millisecond))
		}
		old.Stop() // returns once its lameduck is over
		pool.remove(old)
	}
	pool.check(t, "the rolling restart")

	// 3. The API server is down, longer than the lease's renew deadline: the leader steps down, its
	// writer stops, and every replica keeps answering what it had.
	cp.StopAPIServer()
	harness.Eventually(t, "the leader to step down without the API server", func() error {
		for _, c := range current {
			if c.Metric(t, "coredns_global_leader") == "1" {
				return fmt.Errorf("%s still leads", c.Addr)
			}
		}
		return nil
	})
	for _, c := range current {
		if err := answers(t, c, fooNS, 7); err != nil {
			t.Errorf("with the API server down: %v", err)
		}
		// Ready stays ready: the replica answers, from what it had.
		if resp, err := http.Get("http://" + c.ReadyAddr + "/ready"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("with the API server down, /ready of %s: %v %v", c.Addr, err, resp)
		} else {
			resp.Body.Close()
		}
	}
	testkit.Must(t, cp.StartAPIServer(ctx))
	pool.check(t, "the API server outage")
	waitLeader(t, current...)
	// Afterwards, changes show up again, in DNS and in slices, without duplicates.
	pool.expect(all, south)
	testkit.Must(t, harness.DeleteMirror(ctx, admin, ns, "foo", "south"))
	for _, c := range current {
		harness.EventuallyLong(t, "south gone after the outage", func() error { return answers(t, c, fooNS, 6) })
	}
	pool.expect(all)
	harness.EventuallyLong(t, "the slices after the outage", func() error {
		return writtenSlices(t, admin, ns, map[string]int{"east": 2, "west": 2, "north": 2})
	})

	// 4. One replica loses its link to the API server: it keeps answering its last data while the
	// others follow changes (both answers are right for the phase: the last the replica saw, and
	// the current one); once the link is back, it catches up.
	proxy.Cut()
	pool.expect(westToo, all[4:])
	testkit.Must(t, harness.DeleteMirror(ctx, admin, ns, "foo", "north"))
	for _, c := range without(current, partitioned) {
		harness.Eventually(t, "north gone on the connected replicas", func() error { return answers(t, c, fooNS, 4) })
	}
	if err := answers(t, partitioned, fooNS, 6); err != nil {
		t.Errorf("the cut-off replica: %v", err)
	}
	pool.await(t, 500)
	proxy.Restore()
	harness.EventuallyLong(t, "the cut-off replica to catch up", func() error { return answers(t, partitioned, fooNS, 4) })
	pool.expect(westToo)
	pool.await(t, 500)
	pool.check(t, "the partition")
}

func ptrTo[T any](v T) *T { return &v }

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	testkit.Must(t, err)
	c, err := kubernetes.NewForConfig(rc)
	testkit.Must(t, err)
	return c
}

func without(cs []*harness.CoreDNS, drop *harness.CoreDNS) []*harness.CoreDNS {
	var out []*harness.CoreDNS
	for _, c := range cs {
		if c != drop {
			out = append(out, c)
		}
	}
	return out
}

// answers checks that c answers qname with n A records.
func answers(t *testing.T, c *harness.CoreDNS, qname string, n int) error {
	r := ask(t, c, "udp", qname, dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != n {
		return fmt.Errorf("%s on %s: %s with %d records, want %d", qname, c.Addr, dns.RcodeToString[r.Rcode], len(r.Answer), n)
	}
	return nil
}

// writtenSlices checks the written slices of foo-global hold want endpoints per cluster, with
// no endpoint twice.
func writtenSlices(t *testing.T, c kubernetes.Interface, ns string, want map[string]int) error {
	list, err := c.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=foo-global," + discoveryv1.LabelManagedBy + "=global.globaldns.io"})
	if err != nil {
		return err
	}
	got, seen := map[string]int{}, map[string]bool{}
	for _, es := range list.Items {
		for _, e := range es.Endpoints {
			id := *e.Hostname + "/" + e.Addresses[0]
			if seen[id] {
				return fmt.Errorf("endpoint %s written twice", id)
			}
			seen[id] = true
			got[es.Labels["globaldns.io/source-cluster"]]++
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("endpoints per cluster %v, want %v", got, want)
	}
	return nil
}

// waitLeader waits until exactly one of cs holds the lease and returns it.
func waitLeader(t *testing.T, cs ...*harness.CoreDNS) *harness.CoreDNS {
	t.Helper()
	var l *harness.CoreDNS
	harness.Eventually(t, "exactly one leader", func() error {
		var n int
		for _, c := range cs {
			if c.Metric(t, "coredns_global_leader") == "1" {
				l, n = c, n+1
			}
		}
		if n != 1 {
			return fmt.Errorf("%d leaders among %d replicas", n, len(cs))
		}
		return nil
	})
	return l
}

// pool is a DNS client that sends about 1000 A queries a second for one name, alternating UDP
// and TCP, spread over the replicas that report ready (polled every 100 ms, as a kubelet readiness
// probe and an EndpointSlice would tell a Service). A query fails unless its answer holds every
// address the phase requires and no other than those and the ones changing in the phase (a stale,
// partial or foreign answer fails); so does one that finds no ready replica. A replica is removed from the pool before it is stopped or killed, and remove waits for
// the queries in flight to it: a query that fails in flight counts too.
type pool struct {
	qname    string
	mu       sync.Mutex
	replicas map[*harness.CoreDNS]*replicaState
	required map[string]bool // the addresses every answer of the phase holds
	allowed  map[string]bool // those and the ones changing in the phase
	sent     [2]atomic.Int64 // UDP, TCP
	failed   atomic.Int64
	failures []string
	done     chan struct{}
	wg       sync.WaitGroup
}

// replicaState is what the pool knows of a replica: whether it reports ready, and its queries in flight.
type replicaState struct {
	ready    bool
	inFlight sync.WaitGroup
}

// newPool starts the load on cs, every answer exactly want.
func newPool(qname string, want []string, cs ...*harness.CoreDNS) *pool {
	p := &pool{qname: qname, replicas: map[*harness.CoreDNS]*replicaState{}, done: make(chan struct{})}
	p.expect(want)
	for _, c := range cs {
		p.replicas[c] = &replicaState{ready: true}
	}
	p.wg.Add(1)
	go p.probe()
	for range 4 {
		p.wg.Add(1)
		go p.send()
	}
	return p
}

// expect makes every answer from now on hold all of required and none but those and changing:
// the addresses that come or go while a change is under way, one by one as the API writes them.
func (p *pool) expect(required []string, changing ...[]string) {
	req, all := map[string]bool{}, map[string]bool{}
	for _, a := range required {
		req[a], all[a] = true, true
	}
	for _, l := range changing {
		for _, a := range l {
			all[a] = true
		}
	}
	p.mu.Lock()
	p.required, p.allowed = req, all
	p.mu.Unlock()
}

// expected reports whether an answer of addrs is what p expects now; p.mu is held.
func (p *pool) expected(addrs []string) bool {
	held := 0
	for i, a := range addrs {
		if !p.allowed[a] || slices.Contains(addrs[:i], a) {
			return false
		}
		if p.required[a] {
			held++
		}
	}
	return held == len(p.required)
}

func (p *pool) add(c *harness.CoreDNS) {
	p.mu.Lock()
	p.replicas[c] = &replicaState{} // not ready until its /ready says so
	p.mu.Unlock()
}

// remove takes c out of the pool and returns once no query is in flight to it.
func (p *pool) remove(c *harness.CoreDNS) {
	p.mu.Lock()
	st := p.replicas[c]
	delete(p.replicas, c)
	p.mu.Unlock()
	if st != nil {
		st.inFlight.Wait()
	}
}

func (p *pool) stop() {
	close(p.done)
	p.wg.Wait()
}

// probe plays the kubelet's readiness probe of every replica, every 100 ms (the chart's: every 2
// s), with the chart's timeout, as the kubelet's HTTP probe judges it (k8s.io/kubernetes v1.37.1,
// pkg/kubelet/prober/prober.go: the probe's timeoutSeconds; pkg/probe/http/http.go: a status of
// 200 to 399 succeeds): a /ready that answers so within 2 s is ready. The replicas are probed side
// by side, so that a slow one delays no other's.
func (p *pool) probe() {
	defer p.wg.Done()
	hc := &http.Client{Timeout: 2 * time.Second} // the chart's readinessProbe timeoutSeconds
	for {
		select {
		case <-p.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
		p.mu.Lock()
		cs := make([]*harness.CoreDNS, 0, len(p.replicas))
		for c := range p.replicas {
			cs = append(cs, c)
		}
		p.mu.Unlock()
		var round sync.WaitGroup
		for _, c := range cs {
			round.Go(func() {
				ready := false
				if resp, err := hc.Get("http://" + c.ReadyAddr + "/ready"); err == nil {
					ready = resp.StatusCode >= http.StatusOK && resp.StatusCode < http.StatusBadRequest
					resp.Body.Close()
				}
				p.mu.Lock()
				if st, ok := p.replicas[c]; ok {
					st.ready = ready
				}
				p.mu.Unlock()
			})
		}
		round.Wait()
	}
}

func (p *pool) send() {
	defer p.wg.Done()
	clients := [2]*dns.Client{{Net: "udp", Timeout: time.Second}, {Net: "tcp", Timeout: time.Second}}
	m := new(dns.Msg)
	m.SetQuestion(p.qname, dns.TypeA)
	tick := time.NewTicker(4 * time.Millisecond) // 4 senders: ~1000 queries a second
	defer tick.Stop()
	var i int
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		i++
		proto := i % 2
		p.sent[proto].Add(1)
		p.mu.Lock()
		var ready []*harness.CoreDNS
		for c, st := range p.replicas {
			if st.ready {
				ready = append(ready, c)
			}
		}
		if len(ready) == 0 {
			p.fail("no ready replica")
			p.mu.Unlock()
			continue
		}
		c := ready[i/2%len(ready)]
		st := p.replicas[c]
		st.inFlight.Add(1)
		p.mu.Unlock()
		r, _, err := clients[proto].Exchange(m, c.Addr)
		var got []string
		if err == nil {
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.A); ok {
					got = append(got, a.A.String())
				}
			}
		}
		p.mu.Lock()
		if err != nil || r.Rcode != dns.RcodeSuccess || !p.expected(got) {
			p.fail(fmt.Sprintf("%s over %s: %v %v", c.Addr, clients[proto].Net, err, got))
		}
		p.mu.Unlock()
		st.inFlight.Done()
	}
}

// fail counts a failed query; p.mu is held.
func (p *pool) fail(why string) {
	p.failed.Add(1)
	if len(p.failures) < 10 {
		p.failures = append(p.failures, why)
	}
}

// await waits until n queries were sent since the last check: evidence, not a sleep.
func (p *pool) await(t *testing.T, n int64) {
	t.Helper()
	harness.Eventually(t, fmt.Sprintf("%d queries", n), func() error {
		if sent := p.sent[0].Load() + p.sent[1].Load(); sent < n {
			return fmt.Errorf("%d sent", sent)
		}
		return nil
	})
}

// check reports the queries and failures since the last check.
func (p *pool) check(t *testing.T, phase string) {
	t.Helper()
	p.mu.Lock()
	failures := p.failures
	p.failures = nil
	p.mu.Unlock()
	udp, tcp, failed := p.sent[0].Swap(0), p.sent[1].Swap(0), p.failed.Swap(0)
	t.Logf("%s: %d queries (%d UDP, %d TCP), %d failed", phase, udp+tcp, udp, tcp, failed)
	if udp == 0 || tcp == 0 {
		t.Errorf("%s: %d UDP and %d TCP queries sent", phase, udp, tcp)
	}
	if failed > 0 {
		t.Errorf("%s: %d failed queries, the first ones:\n%s", phase, failed, strings.Join(failures, "\n"))
	}
}

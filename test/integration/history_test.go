package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/globaldns/global/test/harness"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

var (
	historySeed  = flag.Int64("seed", -1, "TestRandomHistory: replay this seed only")
	historySeeds = flag.Int("seeds", 3, "TestRandomHistory: how many seeds to run, from 0")
	historySteps = flag.Int("steps", 30, "TestRandomHistory: steps per seed")
)

// historyCorefile is two replicas' Corefile: every namespace of the history, one lease, and
// slices of two endpoints, so that a few endpoints fill several written slices and move between them.
const historyCorefile = `global:{{.Port}} {
    bind 127.0.0.1
    prometheus {{.Metrics}}
    global {
        kubeconfig {{.Kubeconfig}}
        namespaces %s
        lease %s writer
        endpointslice_size 2
        cluster east
        locality east zone=us-east-1a region=us-east-1
        locality west zone=us-east-1b region=us-east-1
        locality north zone=eu-north-1a region=eu-north-1
        client_locality node
    }
}
`

// TestRandomHistory plays, from a seed, a random history of what the clusters do (local pods,
// some dual-stack, created, made ready and not, deleted; services exported and not, ports renamed;
// mirrors, some IPv6, linked and unlinked; remote pods changing as Linkerd's service mirror writes it; gateways down and up;
// namespaces deleted), with faults between (one replica partitioned from the API server while
// things change, etcd compacted so watches must relist, kube-apiserver restarted, a replica
// killed, the leader stopped so the lease passes), against two bin/coredns replicas with the
// writer on. After every step, every answer of both replicas and every written object must
// equal the oracle (oracle_test.go), a function of the API's objects alone, within a generous
// deadline; no object of anyone else may carry a write of ours. A failure prints the seed and
// the history up to the step after which the two first differed (every earlier step converged);
// -seed N -steps M replays it.
func TestRandomHistory(t *testing.T) {
	t.Parallel()
	cp := harness.Start(t) // of its own: it restarts kube-apiserver and compacts etcd
	createHistoryNodes(t, cp.Client)
	seeds := []int64{*historySeed}
	if *historySeed < 0 {
		seeds = nil
		for i := range *historySeeds {
			seeds = append(seeds, int64(i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := newHistory(t, cp, seed, 4, false)
			for i := range *historySteps {
				h.step(i)
			}
			t.Logf("seed %d: %d steps converged:\n%s", seed, *historySteps, strings.Join(h.log, "\n"))
		})
	}
}

// history is the world a seed plays in: what the test made, so that it picks changes that apply.
type history struct {
	t     *testing.T
	cp    *harness.ControlPlane
	ctx   context.Context
	seed  int64
	rng   *rand.Rand
	log   []string
	ip    int // the last local pod address handed out
	proxy *harness.Proxy
	dyn   dynamic.Interface // Links

	corefile string
	viaProxy string
	mu       sync.Mutex          // replicas, for TestSoak's load
	replicas [2]*harness.CoreDNS // the second reaches the API server through proxy

	// TestSoak's: a step that does not converge is counted, not fatal; only replica 1 is
	// ever replaced, so that replica 0's growth is measured over the whole run.
	soak       bool
	changes    int
	mismatches []string

	namespaces []string // every namespace of the history, created or still to be
	live       []string // those that exist
	next       int      // index in namespaces of the next one to create
	seen       map[string]bool
	locals     map[string]*harness.StatefulSet // ns/svc -> the local StatefulSet and its live pods, as they are
	mirrors    map[string]*harness.Mirror      // ns/svc/cluster
	down       map[string]bool                 // cluster -> gateway down
	linked     map[string]bool                 // the clusters Links name
}

var (
	historyServices = []string{"foo", "bar"}
	historyClusters = []string{"west", "north"}
)

// newHistory starts two replicas for a history of seed in namespaces h<seed>-0..n-1 (two live
// at a time; each namespace deletion uses up one).
func newHistory(t *testing.T, cp *harness.ControlPlane, seed int64, namespaces int, soak bool) *history {
	h := &history{t: t, cp: cp, ctx: context.Background(), seed: seed, rng: rand.New(rand.NewPCG(uint64(seed), 0x9e3779b9)),
		seen: map[string]bool{}, locals: map[string]*harness.StatefulSet{},
		mirrors: map[string]*harness.Mirror{}, down: map[string]bool{}, soak: soak}
	for i := range namespaces {
		h.namespaces = append(h.namespaces, fmt.Sprintf("h%d-%d", seed, i))
	}
	lease := fmt.Sprintf("h%d-lease", seed)
	must(t, harness.EnsureNamespace(h.ctx, cp.Client, lease))
	h.linkClusters()
	for range 2 {
		h.createNamespace()
	}
	h.corefile = fmt.Sprintf(historyCorefile, strings.Join(h.namespaces, " "), lease)
	h.proxy = harness.StartProxy(t, cp.APIServerAddr())
	var err error
	h.viaProxy, err = cp.KubeconfigVia(h.proxy, "")
	must(t, err)
	h.replicas[0] = harness.StartCoreDNS(t, cp, h.corefile)
	h.replicas[1] = harness.StartCoreDNS(t, cp, h.corefile, harness.WithKubeconfig(h.viaProxy))
	h.converge("start")
	return h
}

// step plays one change or fault, then waits for the oracle.
func (h *history) step(i int) {
	var what string
	if h.rng.IntN(6) == 0 {
		what = h.fault()
	} else {
		what = h.change()
	}
	h.converge(fmt.Sprintf("%d: %s", i, what))
}

// converge waits until both replicas' answers and the written objects are the oracle's.
func (h *history) converge(step string) {
	h.t.Helper()
	h.log = append(h.log, step)
	start := time.Now()
	deadline := start.Add(patience + 30*time.Second) // client-go's reconnect backoff on top
	for n := 0; ; n++ {
		err := h.check([]string{"udp", "tcp"}[n%2])
		if err == nil {
			h.log[len(h.log)-1] += fmt.Sprintf(" (converged in %s)", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) && h.soak {
			h.t.Logf("seed %d: not converged after step %s: %v", h.seed, step, err)
			h.mismatches = append(h.mismatches, fmt.Sprintf("after step %s: %v", step, err))
			return
		}
		if time.Now().After(deadline) {
			want, _ := oracle(h.ctx, h.cp.Client, h.dyn, h.namespaces)
			var state []string
			for _, s := range want {
				state = append(state, fmt.Sprintf("%s/%s %v", s.ns, s.svc, sortRecords(s.records)))
			}
			slices.Sort(state)
			h.t.Fatalf("seed %d: not converged after step %s: %v\nthe oracle: %s\nthe history (replay: go test ./test/integration -run 'TestRandomHistory' -seed %d -steps %d):\n%s",
				h.seed, step, err, strings.Join(state, "; "), h.seed, len(h.log)-1, strings.Join(h.log, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *history) check(proto string) error {
	want, err := oracle(h.ctx, h.cp.Client, h.dyn, h.namespaces)
	if err != nil {
		return err
	}
	var gone []string
	for k := range h.seen {
		gone = append(gone, k)
	}
	for k := range want {
		h.seen[k] = true
	}
	for i, r := range h.replicaList() {
		if err := checkAnswers(r, proto, want, gone); err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
	}
	if err := checkWritten(h.ctx, h.cp.Client, h.namespaces, want); err != nil {
		return err
	}
	return checkNothingForeign(h.ctx, h.cp.Client, h.namespaces)
}

func (h *history) replicaList() []*harness.CoreDNS {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.replicas[:])
}

// replace stops replica i (kill -9, or SIGTERM which releases the lease) and starts another.
func (h *history) replace(i int, kill bool) {
	h.mu.Lock()
	old := h.replicas[i]
	h.mu.Unlock()
	if kill {
		old.Kill()
	} else {
		old.Stop()
	}
	c := h.start(i)
	h.mu.Lock()
	h.replicas[i] = c
	h.mu.Unlock()
}

// change makes one change a cluster makes, chosen among those that apply now.
func (h *history) change() string {
	h.changes++
	for {
		ns := h.live[h.rng.IntN(len(h.live))]
		svc := historyServices[h.rng.IntN(len(historyServices))]
		cluster := historyClusters[h.rng.IntN(len(historyClusters))]
		key := ns + "/" + svc
		local, m := h.locals[key], h.mirrors[key+"/"+cluster]
		var what string
		var err error
		switch h.rng.IntN(14) {
		case 0:
			if local != nil {
				continue
			}
			what, err = h.createLocal(ns, svc)
		case 1, 2:
			if local == nil {
				continue
			}
			what, err = h.addPod(local)
		case 3, 4:
			if local == nil || len(local.Pods) == 0 {
				continue
			}
			p := &local.Pods[h.rng.IntN(len(local.Pods))]
			p.Ready = !p.Ready
			what = fmt.Sprintf("pod %s/%s ready=%t", ns, p.Name, p.Ready)
			err = harness.SetPodReady(h.ctx, h.cp.Client, ns, p.Name, p.Ready)
		case 5:
			if local == nil || len(local.Pods) == 0 {
				continue
			}
			i := h.rng.IntN(len(local.Pods))
			what = fmt.Sprintf("pod %s/%s deleted", ns, local.Pods[i].Name)
			err = harness.DeletePod(h.ctx, h.cp.Client, ns, local.Pods[i].Name)
			local.Pods = slices.Delete(local.Pods, i, i+1)
		case 6:
			if local == nil {
				continue
			}
			what, err = h.editLocal(local)
		case 7:
			if local == nil || h.rng.IntN(2) == 0 {
				continue
			}
			what, err = h.deleteLocal(local)
		case 8:
			if m != nil {
				continue
			}
			what, err = h.link(ns, svc, cluster)
		case 9, 10:
			if m == nil {
				continue
			}
			what, err = h.remoteChange(m)
		case 11:
			if m == nil {
				continue
			}
			if h.rng.IntN(2) == 0 {
				m.Ports = renamed(m.Ports)
				what = fmt.Sprintf("remote Service %s of %s edited: port %s", key, cluster, m.Ports[0].Name)
				err = harness.UpdateMirrorService(h.ctx, h.cp.Client, *m)
			} else {
				what = fmt.Sprintf("%s unlinked from %s", key, cluster)
				err = harness.DeleteMirror(h.ctx, h.cp.Client, ns, svc, cluster)
				delete(h.mirrors, key+"/"+cluster)
			}
		case 13:
			what, err = h.toggleLink(cluster)
		case 12:
			switch {
			case h.rng.IntN(4) == 0 && h.next < len(h.namespaces):
				what, err = h.deleteNamespace(ns)
			default:
				what, err = h.flipGateway(cluster)
			}
		}
		must(h.t, err)
		return what
	}
}

// linkClusters serves Linkerd's Link CRD, as where its multicluster extension runs, and links
// every cluster of the history (Links of the control plane's, the first history's).
func (h *history) linkClusters() {
	var err error
	h.dyn, err = dynamic.NewForConfig(h.cp.Config)
	must(h.t, err)
	must(h.t, h.cp.InstallTopologyCRDs(h.ctx))
	must(h.t, harness.EnsureNamespace(h.ctx, h.cp.Client, linkerdNamespace))
	h.linked = map[string]bool{}
	for _, c := range historyClusters {
		must(h.t, harness.ApplyLink(h.ctx, h.dyn, linkerdNamespace, c, nil))
		h.linked[c] = true
	}
}

// toggleLink deletes the Link of cluster, whose mirrors stay but are no members then, or makes
// it again: after its mirrors exist, as when Links are re-created.
func (h *history) toggleLink(cluster string) (string, error) {
	links := h.dyn.Resource(harness.LinkResource).Namespace(linkerdNamespace)
	if h.linked[cluster] = !h.linked[cluster]; !h.linked[cluster] {
		return "Link of " + cluster + " deleted", links.Delete(h.ctx, cluster, metav1.DeleteOptions{})
	}
	return "Link of " + cluster + " made again", harness.ApplyLink(h.ctx, h.dyn, linkerdNamespace, cluster, nil)
}

func renamed(ports []harness.Port) []harness.Port {
	out := slices.Clone(ports)
	out[0].Name = map[string]string{"db": "sql", "sql": "db"}[out[0].Name]
	return out
}

func (h *history) pod(s *harness.StatefulSet) harness.Pod {
	h.ip++
	p := harness.Pod{Name: fmt.Sprintf("%s-%d", s.Service, h.ip), Node: []string{"east-a", "east-b"}[h.rng.IntN(2)],
		IP: fmt.Sprintf("10.%d.%d.%d", 100+h.seed%100, h.ip/250, 1+h.ip%250), Ready: h.rng.IntN(3) > 0}
	if len(s.IPFamilies) == 2 {
		p.IPv6 = netip.MustParseAddr(fmt.Sprintf("fd00:10:%x::%x", h.seed%0xffff, h.ip)).String()
	}
	return p
}

func (h *history) createLocal(ns, svc string) (string, error) {
	s := &harness.StatefulSet{Namespace: ns, Service: svc, Ports: dbPorts, NotExported: h.rng.IntN(5) == 0}
	if h.rng.IntN(3) == 0 {
		s.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	for range h.rng.IntN(3) {
		s.Pods = append(s.Pods, h.pod(s))
	}
	h.locals[ns+"/"+svc] = s
	return fmt.Sprintf("StatefulSet %s/%s created, exported=%t, families %v, pods %v", ns, svc, !s.NotExported, s.IPFamilies, s.Pods),
		harness.CreateStatefulSet(h.ctx, h.cp.Client, *s)
}

func (h *history) addPod(s *harness.StatefulSet) (string, error) {
	p := h.pod(s)
	s.Pods = append(s.Pods, p)
	return fmt.Sprintf("pod %s/%s created, %s ready=%t", s.Namespace, p.Name, p.IP, p.Ready), harness.CreatePod(h.ctx, h.cp.Client, *s, p)
}

// editLocal exports or un-exports the local Service, or renames its port.
func (h *history) editLocal(s *harness.StatefulSet) (string, error) {
	key := s.Namespace + "/" + s.Service
	rename := h.rng.IntN(2) == 0
	if rename {
		s.Ports = renamed(s.Ports)
	} else {
		s.NotExported = !s.NotExported
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc, err := h.cp.Client.CoreV1().Services(s.Namespace).Get(h.ctx, s.Service, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rename {
			svc.Spec.Ports[0].Name = s.Ports[0].Name
		} else if !s.NotExported {
			svc.Labels = map[string]string{harness.LabelExported: "true"}
		} else {
			delete(svc.Labels, harness.LabelExported)
		}
		_, err = h.cp.Client.CoreV1().Services(s.Namespace).Update(h.ctx, svc, metav1.UpdateOptions{})
		return err
	})
	if rename {
		return fmt.Sprintf("Service %s port renamed %s", key, s.Ports[0].Name), err
	}
	return fmt.Sprintf("Service %s exported=%t", key, !s.NotExported), err
}

func (h *history) deleteLocal(s *harness.StatefulSet) (string, error) {
	delete(h.locals, s.Namespace+"/"+s.Service)
	err := h.cp.Client.CoreV1().Services(s.Namespace).Delete(h.ctx, s.Service, metav1.DeleteOptions{})
	for _, p := range s.Pods {
		err = errors.Join(err, harness.DeletePod(h.ctx, h.cp.Client, s.Namespace, p.Name))
	}
	return fmt.Sprintf("StatefulSet %s/%s deleted", s.Namespace, s.Service), err
}

func (h *history) link(ns, svc, cluster string) (string, error) {
	m := &harness.Mirror{Namespace: ns, Service: svc, Cluster: cluster, Ports: dbPorts, Labels: map[string]string{"app": svc},
		GatewayDown: h.down[cluster], IPv6: h.rng.IntN(4) == 0}
	for i := range h.rng.IntN(4) {
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: fmt.Sprintf("%s-%d", svc, i), Ready: h.rng.IntN(4) > 0})
	}
	h.mirrors[ns+"/"+svc+"/"+cluster] = m
	_, err := harness.CreateMirror(h.ctx, h.cp.Client, *m)
	return fmt.Sprintf("%s/%s linked from %s (gateway down=%t, IPv6=%t): %v", ns, svc, cluster, m.GatewayDown, m.IPv6, m.Endpoints), err
}

// remoteChange adds, removes or flips a remote pod, as the service mirror then writes it.
func (h *history) remoteChange(m *harness.Mirror) (string, error) {
	switch n := len(m.Endpoints); {
	case n == 0 || h.rng.IntN(3) == 0:
		host := fmt.Sprintf("%s-%d", m.Service, n)
		for slices.ContainsFunc(m.Endpoints, func(e harness.RemoteEndpoint) bool { return e.Hostname == host }) {
			host += "x"
		}
		m.Endpoints = append(m.Endpoints, harness.RemoteEndpoint{Hostname: host, Ready: true})
	case h.rng.IntN(2) == 0:
		i := h.rng.IntN(n)
		m.Endpoints = slices.Delete(m.Endpoints, i, i+1)
	default:
		i := h.rng.IntN(n)
		m.Endpoints[i].Ready = !m.Endpoints[i].Ready
	}
	m.GatewayDown = h.down[m.Cluster]
	_, err := harness.UpdateMirror(h.ctx, h.cp.Client, *m)
	return fmt.Sprintf("remote %s/%s in %s now %v (gateway down=%t)", m.Namespace, m.Service, m.Cluster, m.Endpoints, m.GatewayDown), err
}

// flipGateway has the service mirror mark a cluster's gateway dead or alive again on every
// per-pod mirror (repairEndpoints).
func (h *history) flipGateway(cluster string) (string, error) {
	h.down[cluster] = !h.down[cluster]
	for _, m := range h.mirrors {
		if m.Cluster == cluster {
			m.GatewayDown = h.down[cluster]
		}
	}
	for _, ns := range h.live {
		if _, err := harness.SetGatewayIn(h.ctx, h.cp.Client, ns, cluster, !h.down[cluster], nil); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("gateway of %s down=%t", cluster, h.down[cluster]), nil
}

// deleteNamespace deletes a namespace and everything in it, and creates the next one.
func (h *history) deleteNamespace(ns string) (string, error) {
	pods, err := h.cp.Client.CoreV1().Pods(ns).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items { // no kubelet here ends a graceful deletion
		if err := harness.DeletePod(h.ctx, h.cp.Client, ns, p.Name); err != nil {
			return "", err
		}
	}
	if err := h.cp.Client.CoreV1().Namespaces().Delete(h.ctx, ns, metav1.DeleteOptions{}); err != nil {
		return "", err
	}
	for k := range h.locals {
		if strings.HasPrefix(k, ns+"/") {
			delete(h.locals, k)
		}
	}
	for k := range h.mirrors {
		if strings.HasPrefix(k, ns+"/") {
			delete(h.mirrors, k)
		}
	}
	h.live = slices.DeleteFunc(h.live, func(s string) bool { return s == ns })
	// kube-controller-manager's namespace controller deletes the contents; after a fault step
	// restarted the API server, its watches come back within client-go's backoff first.
	eventuallyLong(h.t, "namespace "+ns+" gone", func() error {
		_, err := h.cp.Client.CoreV1().Namespaces().Get(h.ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	created := h.createNamespace()
	return fmt.Sprintf("namespace %s deleted, %s created", ns, created), nil
}

func (h *history) createNamespace() string {
	ns := h.namespaces[h.next]
	h.next++
	must(h.t, harness.EnsureNamespace(h.ctx, h.cp.Client, ns))
	h.live = append(h.live, ns)
	return ns
}

// fault does one thing that goes wrong with the machinery rather than the clusters.
func (h *history) fault() string {
	switch h.rng.IntN(5) {
	case 0, 1:
		// One replica loses the API server while the clusters change; with etcd compacted
		// and the API server restarted meanwhile, its watches cannot resume and must relist.
		h.proxy.Cut()
		var changes []string
		for range 1 + h.rng.IntN(3) {
			changes = append(changes, h.change())
		}
		relist := h.rng.IntN(2) == 0
		if relist {
			h.compactAndRestart()
		}
		h.proxy.Restore()
		return fmt.Sprintf("replica 1 partitioned (relist=%t) while: %s", relist, strings.Join(changes, "; "))
	case 2:
		h.compactAndRestart()
		return "etcd compacted, kube-apiserver restarted"
	case 3:
		i := h.rng.IntN(2)
		if h.soak {
			i = 1
		}
		h.replace(i, true)
		return fmt.Sprintf("replica %d killed and replaced", i)
	default:
		i := slices.IndexFunc(h.replicaList(), func(c *harness.CoreDNS) bool { return metric(h.t, c, "coredns_global_leader") == "1" })
		what := fmt.Sprintf("the leader, replica %d, stopped and replaced", i)
		switch {
		case i < 0:
			i, what = 1, "replica 1 stopped and replaced, no replica leading"
		case h.soak && i != 1:
			i, what = 1, "replica 1, not the leader, stopped and replaced"
		}
		h.replace(i, false) // SIGTERM: a leader releases the lease on the way out
		return what
	}
}

func (h *history) start(i int) *harness.CoreDNS {
	if i == 1 {
		return harness.StartCoreDNS(h.t, h.cp, h.corefile, harness.WithKubeconfig(h.viaProxy))
	}
	return harness.StartCoreDNS(h.t, h.cp, h.corefile)
}

func (h *history) compactAndRestart() {
	_, err := h.cp.CompactEtcd(h.ctx)
	must(h.t, err)
	h.cp.StopAPIServer()
	ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	must(h.t, h.cp.StartAPIServer(ctx))
}

package global

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/globaldns/global/plugin/global/answer"
	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/index/indextest"
	"github.com/globaldns/global/plugin/global/watch"
	"github.com/globaldns/global/test/oracle"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

var (
	diffSeed      = flag.Int64("differential.seed", -1, "TestDifferential: replay this seed only")
	diffSeeds     = flag.Int("differential.seeds", 16, "TestDifferential: how many seeds to play, from 0")
	diffSteps     = flag.Int("differential.steps", 40, "TestDifferential: changes per seed")
	diffQuestions = flag.Int("differential.questions", 80, "TestDifferential: questions after each change")
	diffFor       = flag.Duration("differential.for", 0, "TestDifferential: play random seeds for this long instead (make hunt)")
)

// TestDifferential plays random histories of a world (oracle.Random: services of every size,
// members accepted and not, ports some endpoints only have, gateways, Links and localities that
// change after their mirrors exist, Nodes deleted and their pod CIDRs given to others), and after
// every change asks ServeDNS random questions of every form, type, transport and client, each
// twice (the second from what the first remembered), comparing each reply, as the server sends
// it, with what the README says (oracle.Expect); and measures rotation's spread over the nearest
// tier of the biggest service. A failure prints its seed and the command that replays it.
func TestDifferential(t *testing.T) {
	var seeds []uint64
	switch {
	case *diffSeed >= 0:
		seeds = []uint64{uint64(*diffSeed)}
	case *diffFor > 0:
		played := 0
		for deadline, seed := time.Now().Add(*diffFor), rand.Uint64()%1e9; time.Now().Before(deadline) && !t.Failed(); seed++ {
			playDifferential(t, seed)
			played++
		}
		t.Logf("%d seeds played in %s", played, *diffFor)
		return
	default:
		for i := range *diffSeeds {
			seeds = append(seeds, uint64(i))
		}
	}
	for _, seed := range seeds {
		playDifferential(t, seed)
		if t.Failed() {
			return
		}
	}
}

// playDifferential plays the history of seed.
func playDifferential(t *testing.T, seed uint64) {
	d := newDifferential(t, seed)
	defer d.stop()
	d.check("start")
	for i := range *diffSteps {
		d.check(fmt.Sprintf("%d: %s", i, d.r.Step()))
	}
	d.spread()
	t.Logf("seed %d: %d changes, %d questions: %v", seed, *diffSteps, d.asked, d.outcomes)
}

// differential is one history: the world, and the plugin fed what it says.
type differential struct {
	t       *testing.T
	seed    uint64
	r       *oracle.Random
	src     *indextest.Source
	ix      *index.Index
	g       *Global
	log     []string
	applied map[index.Key][]appliedMember
	slices  map[*oracle.Slice]*index.Slice // each world slice as given to the index
	topo    *index.Topology
	clients *apiClients

	asked    int
	outcomes map[string]int // of the questions asked: records, truncated, NODATA, NXDOMAIN
}

// appliedMember is a member as the index has it.
type appliedMember struct {
	om     *oracle.Member
	im     *index.Member
	slices []*oracle.Slice
	pods   []index.PodMirror
}

func newDifferential(t *testing.T, seed uint64) *differential {
	r := oracle.NewRandom(seed)
	d := &differential{t: t, seed: seed, r: r, src: indextest.New(), applied: map[index.Key][]appliedMember{}, slices: map[*oracle.Slice]*index.Slice{},
		outcomes: map[string]int{}}
	w := r.W
	d.topo = d.topology()
	d.ix = index.New(d.topo, d.src)
	policies := map[string]index.Policy{}
	for zone, n := range w.Policies {
		policies[zone] = index.Policy{Nearest: n}
	}
	d.g = &Global{Zones: w.Zones, Next: test.NextHandler(dns.RcodeNameError, nil), Answerer: answer.Answerer{
		Maker: answer.Maker{TTL: w.TTL, Rotate: w.Rotate}, Index: d.ix,
		Chooser: answer.Chooser{Policies: answer.PoliciesOf(policies), PreferNamespaces: w.PreferNamespaces}}}
	for _, source := range w.ClientLocality {
		switch source {
		case "ecs":
			d.g.Sources.ECS = true
		case "node":
			d.g.Sources.Node = true
		case "pod":
			d.g.Sources.Pod = true
		}
	}
	if len(w.ClientLocality) > 0 {
		d.g.ECSFrom = answer.Networks(w.ECSFrom)
		d.clients = startAPIClients(t, w, d.g.Sources.Pod)
		d.g.Locator = d.clients.clients
	}
	d.sync()
	d.ix.Start()
	d.ix.Publish()
	return d
}

func (d *differential) stop() {
	if d.clients != nil {
		d.clients.stop()
	}
}

// topology is the index's topology of the world.
func (d *differential) topology() *index.Topology {
	w := d.r.W
	topo := &index.Topology{Local: w.Cluster, Keys: w.Keys, ClientKeys: w.ClientKeys, Locality: map[string]map[string]string{}}
	for c, l := range w.Locality {
		topo.Locality[c] = maps.Clone(l)
	}
	if w.Linked != nil {
		topo.Linked = maps.Clone(w.Linked)
	}
	return topo
}

// sync gives the index and the client table what changed in the world, and publishes.
func (d *differential) sync() {
	seen := map[index.Key]bool{}
	for _, s := range d.r.W.Services {
		k := index.Key{Namespace: s.Namespace, Name: s.Name}
		seen[k] = true
		if d.syncService(k, s.Members) {
			d.ix.Changed(k)
		}
	}
	for k := range d.applied {
		if !seen[k] && d.syncService(k, nil) {
			d.ix.Changed(k)
		}
	}
	if topo := d.topology(); !topo.Equal(d.topo) {
		d.topo = topo
		d.ix.SetTopology(topo)
	}
	d.ix.Publish()
	if d.clients != nil {
		d.clients.sync(d.t, d.r.W)
	}
}

// syncService makes k's members in the source members, and reports whether anything changed.
func (d *differential) syncService(k index.Key, members []*oracle.Member) bool {
	prev, changed := d.applied[k], false
	var next []appliedMember
	for _, m := range members {
		i := slices.IndexFunc(prev, func(a appliedMember) bool { return a.om == m })
		a := appliedMember{om: m, slices: slices.Clone(m.Slices)}
		var sls []*index.Slice
		for _, sl := range m.Slices {
			sls = append(sls, d.slice(sl, m.Cluster == ""))
		}
		if i < 0 {
			ports := make([]index.Port, len(m.Ports))
			for j, p := range m.Ports {
				ports[j] = index.Port(p)
			}
			a.im = d.src.Add(k, &index.Member{Namespace: k.Namespace, Name: m.Name, Origin: index.Origin{Cluster: m.Cluster, Ports: ports}}, sls...)
			changed = true
		} else {
			a.im, a.pods = prev[i].im, prev[i].pods
			if !slices.Equal(prev[i].slices, a.slices) {
				d.src.SetSlices(a.im, sls...)
				changed = true
			}
		}
		if pods := podMirrors(m); !slices.Equal(pods, a.pods) {
			d.src.SetPodMirrors(a.im, pods...)
			a.pods, changed = pods, true
		}
		next = append(next, a)
	}
	for _, a := range prev {
		if !slices.ContainsFunc(next, func(n appliedMember) bool { return n.im == a.im }) {
			d.src.Remove(k, a.im)
			changed = true
		}
	}
	if next == nil {
		delete(d.applied, k)
	} else {
		d.applied[k] = next
	}
	return changed
}

// slice returns world slice sl as the index's, made once.
func (d *differential) slice(sl *oracle.Slice, local bool) *index.Slice {
	if is := d.slices[sl]; is != nil {
		return is
	}
	ports := make([]index.Port, len(sl.Ports))
	for i, p := range sl.Ports {
		ports[i] = index.Port(p)
	}
	var eps []index.Endpoint
	for _, e := range sl.Endpoints {
		ep := indextest.Endpoint(e.Host, e.Addr.String())
		if local {
			ep = indextest.Placed(ep, e.Zone, e.Node)
		}
		if !e.Ready {
			ep = indextest.NotReady(ep)
		}
		eps = append(eps, ep)
	}
	is := indextest.Slice(ports, eps...)
	d.slices[sl] = is
	return is
}

// podMirrors returns the per-pod mirrors of m's endpoints that have one.
func podMirrors(m *oracle.Member) []index.PodMirror {
	var out []index.PodMirror
	for _, sl := range m.Slices {
		for _, e := range sl.Endpoints {
			if e.Gateway != nil {
				out = append(out, index.PodMirror{Addr: e.Addr, Ready: *e.Gateway})
			}
		}
	}
	return out
}

// check gives the plugin the world's last change (step), then asks it questions, each twice.
func (d *differential) check(step string) {
	d.t.Helper()
	d.log = append(d.log, step)
	d.sync()
	for range *diffQuestions {
		q := d.r.Question()
		want := d.r.W.Expect(q)
		d.count(want)
		for round := range 2 {
			got := d.ask(q)
			if err := d.r.W.Check(q, want, got); err != nil {
				d.fail(q, round, err, got)
			}
		}
	}
}

// count counts a question by what it is answered.
func (d *differential) count(e oracle.Expected) {
	d.asked++
	switch {
	case e.Rcode == dns.RcodeNameError:
		d.outcomes["NXDOMAIN"]++
	case len(e.Tiers) == 0:
		d.outcomes["NODATA"]++
	default:
		d.outcomes[dns.TypeToString[e.Type]]++
	}
}

// fail reports a wrong answer to q, with the history that led to it and how to replay it.
func (d *differential) fail(q oracle.Question, round int, err error, got *dns.Msg) {
	d.t.Helper()
	again := ""
	if round > 0 {
		again = " asked again"
	}
	d.t.Fatalf("seed %d, after step %s: %s%s: %v\nreply:\n%v\nthe history (replay: go test ./plugin/global -run '^TestDifferential$' -differential.seed %d -differential.steps %d):\n%s",
		d.seed, d.log[len(d.log)-1], q, again, err, got, d.seed, len(d.log)-1, strings.Join(d.log, "\n"))
}

// ask sends q to the plugin as a server receives it, and returns the reply as the server sends it:
// fitted to the client's buffer (CoreDNS's ScrubWriter), and read back from the wire.
func (d *differential) ask(q oracle.Question) *dns.Msg {
	req := q.Msg()
	w := &test.ResponseWriter{TCP: q.Size == 0, RemoteIP: q.From.String()}
	rec := dnstest.NewRecorder(w)
	if _, err := d.g.ServeDNS(context.Background(), rec, req); err != nil || rec.Msg == nil {
		d.t.Fatalf("seed %d: %s: no reply (%v)", d.seed, q, err)
	}
	state := request.Request{W: w, Req: req}
	state.SizeAndDo(rec.Msg)
	wire, err := state.Scrub(rec.Msg).Pack()
	if err != nil {
		d.t.Fatalf("seed %d: %s: the reply does not pack: %v", d.seed, q, err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(wire); err != nil {
		d.t.Fatalf("seed %d: %s: the reply does not unpack: %v", d.seed, q, err)
	}
	return m
}

// spread asks the name of the service with the biggest nearest tier over and over, from one
// client over UDP, and checks that rotation put every record of that tier first for some.
func (d *differential) spread() {
	d.t.Helper()
	if !d.r.W.Rotate {
		return
	}
	var q oracle.Question
	var tier []oracle.RR
	for range 200 {
		c := d.r.Question()
		c.Form, c.Cluster, c.Host, c.Zonal, c.Type, c.Size = oracle.FormService, "", "", "", dns.TypeA, 1232
		if e := d.r.W.Expect(c); len(e.Tiers) > 0 && len(e.Tiers[0]) > len(tier) && len(e.Tiers[0]) <= 2000 {
			q, tier = c, e.Tiers[0]
		}
	}
	if len(tier) < 2 {
		return
	}
	want := d.r.W.Expect(q)
	first := map[netip.Addr]bool{}
	for i := 0; i < 30*len(tier) && len(first) < len(tier); i++ {
		got := d.ask(q)
		if err := d.r.W.Check(q, want, got); err != nil {
			d.fail(q, 0, err, got)
		}
		a, _ := netip.AddrFromSlice(got.Answer[0].(*dns.A).A)
		first[a.Unmap()] = true
	}
	if len(first) < len(tier) {
		d.t.Fatalf("seed %d: %s: %d of the nearest tier's %d records came first in %d queries (replay: -differential.seed %d)",
			d.seed, q, len(first), len(tier), 30*len(tier), d.seed)
	}
}

// apiClients is the client table the plugin runs with (watch.Clients), over a fake API holding the
// world's Nodes and Pods and the forwarder's EndpointSlice, made to follow the world's changes.
type apiClients struct {
	api     *fake.Clientset
	clients *watch.Clients
	pods    bool // the table keeps Pods (client_locality pod)
	stop    context.CancelFunc
	gen     int
}

const sentinel = "sentinel" // a Node, and Pods on it, whose changes tell that the table has followed

var (
	sentinelAddr = netip.MustParseAddr("10.1.255.254")
	forwarderFor = metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-1", Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}}
)

func startAPIClients(t *testing.T, w *oracle.World, pods bool) *apiClients {
	fwd := &discoveryv1.EndpointSlice{ObjectMeta: forwarderFor, AddressType: discoveryv1.AddressTypeIPv4}
	for _, a := range w.Forwarders {
		fwd.Endpoints = append(fwd.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()}})
	}
	c := &apiClients{api: fake.NewSimpleClientset(fwd), pods: pods}
	c.clients = watch.NewClients(c.api, nodeKeys(w.ClientKeys), pods, []string{"kube-system/kube-dns"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	synced := make(chan struct{})
	go c.clients.Run(ctx, synced)
	<-synced
	// A fake API's watch may start after a change that follows its list: until the sentinel's
	// first change is seen, make another.
	deadline := time.Now().Add(30 * time.Second)
	for !c.bump(t, c.pods, 200*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the client table never saw the sentinel")
		}
	}
	c.sync(t, w)
	if !c.clients.Forwarder(w.Forwarders[0]) {
		t.Fatal("the client table holds no forwarder")
	}
	return c
}

// sync makes the API's Nodes and Pods the world's, and waits until the table holds them.
func (c *apiClients) sync(t *testing.T, w *oracle.World) {
	ctx := context.Background()
	nodes, err := c.api.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*corev1.Node{}
	for _, n := range w.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}}
		for _, a := range n.Addrs {
			node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
		}
		for _, p := range n.CIDRs {
			node.Spec.PodCIDRs = append(node.Spec.PodCIDRs, p.String())
		}
		want[n.Name] = node
	}
	for _, n := range nodes.Items {
		if want[n.Name] == nil && n.Name != sentinel {
			noError(t, c.api.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}))
		}
		delete(want, n.Name) // a Node of the world does not change
	}
	for _, n := range want {
		_, err := c.api.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		noError(t, err)
	}
	pods, err := c.api.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	noError(t, err)
	wantPods := map[string]*oracle.Pod{}
	for _, p := range w.Pods {
		wantPods[podName(p.IP)] = p
	}
	for _, p := range pods.Items {
		if wantPods[p.Name] == nil && p.Spec.NodeName != sentinel {
			noError(t, c.api.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}))
		}
		delete(wantPods, p.Name)
	}
	for name, p := range wantPods {
		_, err := c.api.CoreV1().Pods("default").Create(ctx, pod(name, p.Node, p.IP), metav1.CreateOptions{})
		noError(t, err)
	}
	if !c.bump(t, c.pods, 30*time.Second) {
		t.Fatal("the client table did not follow the API within 30 s")
	}
}

func podName(ip netip.Addr) string {
	return "p-" + strings.NewReplacer(".", "-", ":", "-").Replace(ip.String())
}

func pod(name, node string, ip netip.Addr) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip.String()}}}}
}

// bump changes the sentinel Node's zone and makes a new Pod on it, and waits up to patience for
// the table to hold both: every change made before is in it then.
func (c *apiClients) bump(t *testing.T, pods bool, patience time.Duration) bool {
	t.Helper()
	ctx := context.Background()
	c.gen++
	zone := fmt.Sprint("s", c.gen)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: sentinel, Labels: map[string]string{index.ZoneKey: zone}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: sentinelAddr.String()}}}}
	if c.gen == 1 {
		_, err := c.api.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		noError(t, err)
	} else {
		_, err := c.api.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		noError(t, err)
	}
	ip := netip.AddrFrom4([4]byte{10, 1, 254, byte(c.gen % 250)})
	if c.gen > 1 {
		prev := netip.AddrFrom4([4]byte{10, 1, 254, byte((c.gen - 1) % 250)})
		_ = c.api.CoreV1().Pods("default").Delete(ctx, podName(prev), metav1.DeleteOptions{})
	}
	_, err := c.api.CoreV1().Pods("default").Create(ctx, pod(podName(ip), sentinel, ip), metav1.CreateOptions{})
	noError(t, err)
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		n := c.clients.Node(sentinelAddr)
		at, _ := c.clients.Pod(netip.PrefixFrom(ip, 32))
		if n != nil && n.Labels[index.ZoneKey] == zone && (!pods || at != nil && at.Node == sentinel) {
			return true
		}
	}
	return false
}

func noError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

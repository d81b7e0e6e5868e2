package watch

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Clients knows where this cluster's DNS clients run, for answers ranked from the client: each
// Node's addresses, pod CIDRs and topology labels; with the pod source, every Pod's IPs and node;
// and the addresses of the forwarders (the cluster DNS's pods), whose queries are every client's.
// Each is read with a watch that keeps only that (nodes.go, pods.go, forwarders.go).
type Clients struct {
	keys  []string // the Node labels a client's place is made of: the topology keys
	nodes atomic.Pointer[nodeTable]
	pods  *podTable // nil without the pod source
	fwd   *forwarders
	ecs   *forwarders // the resolvers whose ECS option is taken (client_ecs_from)
	runs  []func(ctx context.Context, synced func())
}

// NewClients returns the Clients of the cluster client reads: Nodes, labels keys kept; Pods when
// pods is set; the EndpointSlices of the forwarder Services and of the ECS sources' Services
// (<namespace>/<name>). Nothing runs before Run.
func NewClients(client kubernetes.Interface, keys []string, pods bool, forwarderServices, ecsServices []string) *Clients {
	c := &Clients{keys: keys, fwd: newForwarders(), ecs: newForwarders()}
	c.nodes.Store(&nodeTable{})
	c.runs = append(c.runs, func(ctx context.Context, synced func()) { c.watchNodes(ctx, client, synced) })
	if pods {
		c.pods = newPodTable()
		c.runs = append(c.runs, func(ctx context.Context, synced func()) { c.pods.run(ctx, client, synced) })
	}
	for _, set := range []struct {
		f        *forwarders
		services []string
	}{{c.fwd, forwarderServices}, {c.ecs, ecsServices}} {
		for _, s := range set.services {
			into := set.f.add()
			c.runs = append(c.runs, func(ctx context.Context, synced func()) { watchAddresses(ctx, client, s, into, synced) })
		}
	}
	return c
}

// Run watches until ctx is done; synced is closed once every watch holds its initial list.
func (c *Clients) Run(ctx context.Context, synced chan<- struct{}) {
	var all sync.WaitGroup
	all.Add(len(c.runs))
	var running sync.WaitGroup
	for _, run := range c.runs {
		running.Go(func() { run(ctx, sync.OnceFunc(all.Done)) })
	}
	go func() { all.Wait(); close(synced) }()
	running.Wait()
}

// Node implements the handler's locator: the client at a Node's address.
func (c *Clients) Node(a netip.Addr) *index.Client { return c.nodes.Load().node(a) }

// Pod implements the handler's locator: the client at a Pod's IP (a single address), else at an
// address in a Node's pod CIDRs, whose length the answer holds for unless a Pod of another Node
// has an IP in it: then it holds for the address alone. An IP that Pods on several nodes have,
// or whose Pod's Node the table does not hold (deleted, its pod CIDR maybe another's since, or
// not read yet), locates no client: the table knows the Pod is not on the CIDR's Node.
func (c *Clients) Pod(p netip.Prefix) (*index.Client, int) {
	nodes := c.nodes.Load()
	if c.pods != nil && p.IsSingleIP() {
		if name, ok := c.pods.node(p.Addr()); ok {
			return nodes.byName[name], p.Bits()
		}
	}
	client, bits := nodes.inCIDR(p)
	if client != nil && c.pods != nil && c.pods.foreignIn(netip.PrefixFrom(p.Addr(), bits).Masked()) {
		bits = p.Addr().BitLen()
	}
	return client, bits
}

// Forwarder implements the handler's locator.
func (c *Clients) Forwarder(a netip.Addr) bool { return c.fwd.has(a) }

// ECSSource implements the handler's locator.
func (c *Clients) ECSSource(a netip.Addr) bool { return c.ecs.has(a) }

// watchNodes keeps the node table current: a Node's name, addresses, pod CIDRs and the labels of
// the topology keys, nothing else of it. A conflict is logged once, when it appears.
func (c *Clients) watchNodes(ctx context.Context, client kubernetes.Interface, synced func()) {
	inf := informers.NewSharedInformerFactoryWithOptions(client, 0).Core().V1().Nodes().Informer()
	_ = inf.SetTransform(func(obj any) (any, error) { return slimNode(c.keys, obj) })
	inform(ctx, synced, inf, "Nodes", nodeChanged, nil, func(store cache.Store) {
		var nodes []*corev1.Node
		for _, o := range store.List() {
			nodes = append(nodes, o.(*corev1.Node))
		}
		t := newNodeTable(nodes)
		for _, conflict := range t.conflicts {
			if !slices.Contains(c.nodes.Load().conflicts, conflict) {
				telemetry.Log.Warningf("client_locality: %s: no client is located there", conflict)
			}
		}
		c.nodes.Store(t)
		if c.pods != nil {
			c.pods.setNodes(t)
		}
	})
}

package watch

import (
	"context"
	"hash/maphash"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/globaldns/global/plugin/global/telemetry"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// podTable is, for the pod source, the node of every Pod IP: 24 bytes of map entry per address,
// and no Pod object kept. A reflector writes into it directly (it is the reflector's store).
type podTable struct {
	mu     sync.RWMutex
	byAddr map[[16]byte]podEntry
	// more holds every Pod at an address that several claim: an IP passes from a terminating Pod
	// to a new one on another node before the first is gone. The one not terminating is there.
	more   map[[16]byte][]podEntry
	names  []string          // node names, by id
	ids    map[string]uint32 // node ids, by name
	synced func()            // called by the first Replace
	once   sync.Once
	// nodes is the node table the foreign counts are of; foreign counts, per Node pod CIDR, the
	// Pod IPs in it of Pods on another Node (a CIDR given to a new Node while a Pod of the old one
	// keeps its IP): an answer for the CIDR does not hold for those, so none claims the CIDR.
	nodes   *nodeTable
	foreign map[netip.Prefix]int32
}

// podEntry is the node of a Pod IP, and which Pod has it: when an IP passes from a deleted Pod to a
// new one, the old one's deletion must not remove the new one's.
type podEntry struct {
	node        uint32
	pod         uint32 // a hash of its namespace and name
	terminating bool
}

// podSelector leaves out what is no pod client: host-network Pods (their IP is their Node's, in
// the node table) and finished Pods, whose IPs are free for others.
const podSelector = "spec.hostNetwork=false,status.phase!=Succeeded,status.phase!=Failed"

func newPodTable() *podTable {
	return &podTable{byAddr: map[[16]byte]podEntry{}, more: map[[16]byte][]podEntry{}, ids: map[string]uint32{}, foreign: map[netip.Prefix]int32{}}
}

// node returns the name of the node of the Pod at a, "" when the Pods there are on several
// nodes (none of them leaving), and whether a Pod is there.
func (t *podTable) node(a netip.Addr) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	k := a.As16()
	if claims, ok := t.more[k]; ok {
		return t.resolve(claims), true
	}
	e, ok := t.byAddr[k]
	if !ok {
		return "", false
	}
	return t.names[e.node], true
}

// resolve returns the node of the Pods claiming one address: of the one not terminating, else of
// all, when they agree; else "".
func (t *podTable) resolve(claims []podEntry) string {
	var live []podEntry
	for _, e := range claims {
		if !e.terminating {
			live = append(live, e)
		}
	}
	if len(live) == 0 {
		live = claims
	}
	for _, e := range live[1:] {
		if e.node != live[0].node {
			return ""
		}
	}
	return t.names[live[0].node]
}

// foreignIn reports whether Node pod CIDR p holds the IP of a Pod on another Node.
func (t *podTable) foreignIn(p netip.Prefix) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.foreign[p] > 0
}

// setNodes makes nodes the table the foreign counts are of, and counts them again.
func (t *podTable) setNodes(nodes *nodeTable) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nodes = nodes
	t.foreign = map[netip.Prefix]int32{}
	for k, e := range t.byAddr {
		t.count(k, e, 1)
	}
	for k, claims := range t.more {
		for _, e := range claims {
			t.count(k, e, 1)
		}
	}
}

// count adds d to the foreign count of the CIDR holding address k, if pod entry e is of another
// Node than the CIDR's; t.mu is held.
func (t *podTable) count(k [16]byte, e podEntry, d int32) {
	if t.nodes == nil {
		return
	}
	a := netip.AddrFrom16(k).Unmap()
	if c, bits := t.nodes.inCIDR(netip.PrefixFrom(a, a.BitLen())); c != nil && c.Node != t.names[e.node] {
		p := netip.PrefixFrom(a, bits).Masked()
		if t.foreign[p] += d; t.foreign[p] <= 0 {
			delete(t.foreign, p)
		}
	}
}

// claim records that the Pod of e has address k; t.mu is held.
func (t *podTable) claim(k [16]byte, e podEntry) {
	claims, shared := t.more[k]
	if !shared {
		old, ok := t.byAddr[k]
		if !ok || old.pod == e.pod {
			if ok {
				t.count(k, old, -1)
			}
			t.byAddr[k] = e
			t.count(k, e, 1)
			return
		}
		claims = []podEntry{old}
		delete(t.byAddr, k)
	}
	if i := slices.IndexFunc(claims, func(c podEntry) bool { return c.pod == e.pod }); i >= 0 {
		t.count(k, claims[i], -1)
		claims[i] = e
	} else {
		claims = append(claims, e)
	}
	t.count(k, e, 1)
	t.more[k] = claims
}

// release records that pod no longer has address k; t.mu is held.
func (t *podTable) release(k [16]byte, pod uint32) {
	claims, shared := t.more[k]
	if !shared {
		if e, ok := t.byAddr[k]; ok && e.pod == pod {
			t.count(k, e, -1)
			delete(t.byAddr, k)
		}
		return
	}
	i := slices.IndexFunc(claims, func(c podEntry) bool { return c.pod == pod })
	if i < 0 {
		return
	}
	t.count(k, claims[i], -1)
	claims = slices.Delete(claims, i, i+1)
	if len(claims) == 1 {
		delete(t.more, k)
		t.byAddr[k] = claims[0]
		return
	}
	t.more[k] = claims
}

// run lists and watches Pods into the table until ctx is done; synced is called once it holds
// the initial list.
func (t *podTable) run(ctx context.Context, client kubernetes.Interface, synced func()) {
	t.synced = synced
	c := client.CoreV1().Pods(metav1.NamespaceAll)
	typed := watchlist.DoesClientNotSupportWatchListSemantics(client)
	var failed atomic.Bool
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (l runtime.Object, err error) {
			o.FieldSelector = podSelector
			if typed {
				l, err = c.List(ctx, o)
			} else {
				l, err = listConverted[corev1.Pod](ctx, client.CoreV1().RESTClient(), metav1.NamespaceAll, "pods", o, slimPod,
					func() *corev1.PodList { return &corev1.PodList{} }, func(l *corev1.PodList) []corev1.Pod { return l.Items })
			}
			if (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) && !failed.Swap(true) {
				// Said once; the reflector retries on its own. Until then no Pod is a client.
				telemetry.Log.Warningf("client_locality pod: cannot list Pods: %v", err)
				t.once.Do(synced)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = podSelector
			return c.Watch(ctx, o)
		},
	}, noWatchList{})
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, t, cache.ReflectorOptions{Name: "global client Pods"})
	r.RunWithContext(ctx)
}

// podAddrs is what the table keeps of a Pod: where it runs, its IPs, and whether it is leaving.
type podAddrs struct {
	namespace, name, node string
	ips                   []netip.Addr
	terminating           bool
}

// slimPod converts a Pod into its podAddrs; anything else (a deletion's last state) as is.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	o := &podAddrs{namespace: p.Namespace, name: p.Name, node: p.Spec.NodeName, terminating: p.DeletionTimestamp != nil}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			o.ips = append(o.ips, a.Unmap())
		}
	}
	return o, nil
}

var podSeed = maphash.MakeSeed()

func (o *podAddrs) id() uint32 { return uint32(maphash.String(podSeed, o.namespace+"/"+o.name)) }

// GetObjectKind implements runtime.Object.
func (*podAddrs) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object: a podAddrs is never mutated.
func (o *podAddrs) DeepCopyObject() runtime.Object { c := *o; return &c }

// GetObjectMeta implements metav1.ObjectMetaAccessor, through which client-go's reflector keys
// the objects it streams at start.
func (o *podAddrs) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: o.namespace, Name: o.name}
}

// convert returns the podAddrs of obj, nil for anything unexpected.
func (t *podTable) convert(obj any) *podAddrs {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, _ := slimPod(obj)
	p, ok := o.(*podAddrs)
	if !ok {
		telemetry.Log.Warningf("client_locality: unexpected %T from the API: ignored", obj)
	}
	return p
}

// Add implements cache.ReflectorStore.
func (t *podTable) Add(obj any) error { return t.Update(obj) }

// Update implements cache.ReflectorStore. A Pod's IPs are assigned once: an update adds them.
func (t *podTable) Update(obj any) error {
	if p := t.convert(obj); p != nil && p.node != "" {
		t.mu.Lock()
		t.put(p)
		t.mu.Unlock()
	}
	return nil
}

// Delete implements cache.ReflectorStore.
func (t *podTable) Delete(obj any) error {
	if p := t.convert(obj); p != nil {
		id := p.id()
		t.mu.Lock()
		for _, a := range p.ips {
			t.release(a.As16(), id)
		}
		t.mu.Unlock()
	}
	return nil
}

// Replace implements cache.ReflectorStore: the full list, at start and on relists.
func (t *podTable) Replace(list []any, _ string) error {
	t.mu.Lock()
	t.byAddr, t.more, t.foreign = make(map[[16]byte]podEntry, len(list)), map[[16]byte][]podEntry{}, map[netip.Prefix]int32{}
	for _, obj := range list {
		if p := t.convert(obj); p != nil && p.node != "" {
			t.put(p)
		}
	}
	t.mu.Unlock()
	t.once.Do(t.synced)
	return nil
}

// put records p's IPs; t.mu is held.
func (t *podTable) put(p *podAddrs) {
	id, ok := t.ids[p.node]
	if !ok {
		id = uint32(len(t.names))
		t.names, t.ids[p.node] = append(t.names, p.node), id
	}
	for _, a := range p.ips {
		t.claim(a.As16(), podEntry{node: id, pod: p.id(), terminating: p.terminating})
	}
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (t *podTable) Resync() error { return nil }

// Transformer implements cache.TransformingStore: a streamed initial list keeps podAddrs.
func (t *podTable) Transformer() cache.TransformFunc { return slimPod }

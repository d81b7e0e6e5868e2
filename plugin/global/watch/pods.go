package watch

import (
	"context"
	"hash/maphash"
	"net/netip"
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
	names  []string          // node names, by id
	ids    map[string]uint32 // node ids, by name
	synced func()            // called by the first Replace
	once   sync.Once
}

// podEntry is the node of a Pod IP, and which Pod has it: when an IP passes from a deleted Pod to a
// new one, the old one's deletion must not remove the new one's.
type podEntry struct {
	node uint32
	pod  uint32 // a hash of its namespace and name
}

// podSelector leaves out what is no pod client: host-network Pods (their IP is their Node's, in
// the node table) and finished Pods, whose IPs are free for others.
const podSelector = "spec.hostNetwork=false,status.phase!=Succeeded,status.phase!=Failed"

func newPodTable() *podTable {
	return &podTable{byAddr: map[[16]byte]podEntry{}, ids: map[string]uint32{}}
}

// node returns the name of the node of the Pod at a.
func (t *podTable) node(a netip.Addr) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.byAddr[a.As16()]
	if !ok {
		return "", false
	}
	return t.names[e.node], true
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

// podAddrs is what the table keeps of a Pod: where it runs and its IPs.
type podAddrs struct {
	namespace, name, node string
	ips                   []netip.Addr
}

// slimPod converts a Pod into its podAddrs; anything else (a deletion's last state) as is.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	o := &podAddrs{namespace: p.Namespace, name: p.Name, node: p.Spec.NodeName}
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
			if e, ok := t.byAddr[a.As16()]; ok && e.pod == id {
				delete(t.byAddr, a.As16())
			}
		}
		t.mu.Unlock()
	}
	return nil
}

// Replace implements cache.ReflectorStore: the full list, at start and on relists.
func (t *podTable) Replace(list []any, _ string) error {
	byAddr := make(map[[16]byte]podEntry, len(list))
	t.mu.Lock()
	t.byAddr = byAddr
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
		t.byAddr[a.As16()] = podEntry{node: id, pod: p.id()}
	}
}

// Resync implements cache.ReflectorStore; there is nothing to resync.
func (t *podTable) Resync() error { return nil }

// Transformer implements cache.TransformingStore: a streamed initial list keeps podAddrs.
func (t *podTable) Transformer() cache.TransformFunc { return slimPod }

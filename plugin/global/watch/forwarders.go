package watch

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// forwarders are the addresses of the pods behind Services: the cluster DNS's, a query from one of
// which is every client's (it forwards and caches for all), so it is never ranked from its source;
// or the resolvers trusted to set the ECS option (client_ecs_from).
type forwarders struct {
	byService map[string]*atomic.Pointer[map[netip.Addr]bool]
}

func newForwarders() *forwarders {
	return &forwarders{byService: map[string]*atomic.Pointer[map[netip.Addr]bool]{}}
}

// has reports whether a is a forwarder's address.
func (f *forwarders) has(a netip.Addr) bool {
	for _, addrs := range f.byService {
		if m := addrs.Load(); m != nil && (*m)[a] {
			return true
		}
	}
	return false
}

// add makes room for Service svc, <namespace>/<name>; call it before anything runs.
func (f *forwarders) add(svc string) { f.byService[svc] = new(atomic.Pointer[map[netip.Addr]bool]) }

// watch keeps the addresses of Service svc's EndpointSlices, ready or not: a pod starting or
// stopping forwards all the same.
func (f *forwarders) watch(ctx context.Context, client kubernetes.Interface, svc string, synced func()) {
	ns, name, _ := strings.Cut(svc, "/")
	inf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + name }),
	).Discovery().V1().EndpointSlices().Informer()
	inform(ctx, synced, inf, "the EndpointSlices of "+svc, nil, nil, func(store cache.Store) {
		addrs := map[netip.Addr]bool{}
		for _, o := range store.List() {
			for _, e := range o.(*discoveryv1.EndpointSlice).Endpoints {
				for _, s := range e.Addresses {
					if a, err := netip.ParseAddr(s); err == nil {
						addrs[a.Unmap()] = true
					}
				}
			}
		}
		f.byService[svc].Store(&addrs)
	})
}

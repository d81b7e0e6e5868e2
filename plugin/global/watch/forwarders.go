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
	// byService are the addresses of each Service, in a slice: has reads each on every query
	// from a client, and a map's iterator costs several times the lookups.
	byService []*atomic.Pointer[addrSet]
}

// addrSet is a set of addresses: up to fewAddrs in a list, compared in turn (as the cluster DNS's
// few pods are: a handful of compares costs less than hashing one address), more in a map.
type addrSet struct {
	few  []netip.Addr
	many map[netip.Addr]bool
}

const fewAddrs = 8

func newAddrSet(addrs map[netip.Addr]bool) *addrSet {
	if len(addrs) > fewAddrs {
		return &addrSet{many: addrs}
	}
	s := &addrSet{}
	for a := range addrs {
		s.few = append(s.few, a)
	}
	return s
}

func (s *addrSet) has(a netip.Addr) bool {
	if s.many != nil {
		return s.many[a]
	}
	for _, b := range s.few {
		if a == b {
			return true
		}
	}
	return false
}

func newForwarders() *forwarders { return &forwarders{} }

// has reports whether a is a forwarder's address.
func (f *forwarders) has(a netip.Addr) bool {
	for _, addrs := range f.byService {
		if set := addrs.Load(); set != nil && set.has(a) {
			return true
		}
	}
	return false
}

// add makes room for a Service's addresses, which its watch keeps; call it before anything runs.
func (f *forwarders) add() *atomic.Pointer[addrSet] {
	f.byService = append(f.byService, new(atomic.Pointer[addrSet]))
	return f.byService[len(f.byService)-1]
}

// watchAddresses keeps into the addresses of Service svc's EndpointSlices, ready or not: a pod
// starting or stopping forwards all the same.
func watchAddresses(ctx context.Context, client kubernetes.Interface, svc string, into *atomic.Pointer[addrSet], synced func()) {
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
		into.Store(newAddrSet(addrs))
	})
}

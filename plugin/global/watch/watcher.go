// Package watch feeds the index from the Kubernetes API: label-selected reflectors on Services and
// EndpointSlices, whose objects are converted on arrival into small immutable ones (object.go),
// classified by what Linkerd's service mirror writes (linkerd.go), and kept in an objectStore
// (store.go) indexed the way the index reads them, one file per kind of object: services.go,
// endpointslices.go, podmirrors.go. The objectStore is the index's Source.
package watch

import (
	"context"
	"fmt"
	"sync"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Watcher runs the reflectors and answers index.Source from their objects.
type Watcher struct {
	objects    *objectStore
	reflectors []*cache.Reflector
	stores     []*reflectorStore // one per reflector
}

// New returns a Watcher of namespaces (all when empty), taking as local members the Services that
// match exportSelector. Nothing runs before Run.
//
// Per namespace, five reflectors: the Services Linkerd mirrored here (headless and per-pod
// mirrors), the local Services selected by exportSelector, and the EndpointSlices of each:
// headless mirrors', per-pod mirrors' (their readiness is the linked cluster's gateway liveness)
// and the local Services'. They write straight into the watcher's objectStore: no informer store
// keeps a second copy, and no key strings are made.
func New(client kubernetes.Interface, namespaces []string, exportSelector string) (*Watcher, error) {
	if _, err := labels.Parse(exportSelector); err != nil {
		return nil, fmt.Errorf("export selector %q: %w", exportSelector, err)
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	w := &Watcher{objects: newObjectStore()}
	typed := watchlist.DoesClientNotSupportWatchListSemantics(client)
	for _, ns := range namespaces {
		lists := namespaceLister{client: client, namespace: ns, typed: typed}
		for _, r := range []struct {
			kind     kind
			src      feed
			selector string
			name     string
		}{
			{kindService, fromMirror, mirrorServiceSelector, "mirror Services"},
			{kindSlice, fromMirror, mirrorSliceSelector, "mirror EndpointSlices"},
			{kindSlice, fromPodMirror, podMirrorSliceSelector, "per-pod mirror EndpointSlices"},
			{kindService, fromLocal, exportSelector, "local Services"},
			{kindSlice, fromLocal, exportSelector, "local EndpointSlices"},
		} {
			var example runtime.Object = &corev1.Service{}
			log := newProblemLog("Service")
			if r.kind == kindSlice {
				example, log = &discoveryv1.EndpointSlice{}, newProblemLog("EndpointSlice")
			}
			t := &reflectorStore{objects: w.objects, namespace: ns, kind: r.kind, src: r.src, transform: transform(r.src, log), problems: log, synced: make(chan struct{})}
			lw := lists.services(r.selector, t.transform)
			if r.kind == kindSlice {
				lw = lists.endpointSlices(r.selector, t.transform)
			}
			name := "global " + r.name
			if ns != metav1.NamespaceAll {
				name += " in " + ns
			}
			w.stores = append(w.stores, t)
			w.reflectors = append(w.reflectors, cache.NewReflectorWithOptions(lw, example, t, cache.ReflectorOptions{Name: name}))
		}
	}
	return w, nil
}

// namespaceLister makes the ListerWatchers of one namespace's Services and EndpointSlices, whose
// lists are converted as they are read (listConverted) unless typed.
type namespaceLister struct {
	client    kubernetes.Interface
	namespace string
	typed     bool // client-go's fake cannot serve a list as a stream: with it, lists are typed
}

func (nl namespaceLister) services(selector string, convert func(any) (any, error)) cache.ListerWatcher {
	client, ns := nl.client, nl.namespace
	c := client.CoreV1().Services(ns)
	list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		if nl.typed {
			return c.List(ctx, o)
		}
		return listConverted[corev1.Service](ctx, client.CoreV1().RESTClient(), ns, "services", o, convert,
			func() *corev1.ServiceList { return &corev1.ServiceList{} }, func(l *corev1.ServiceList) []corev1.Service { return l.Items })
	}
	return listWatch(selector, list, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return c.Watch(ctx, o) })
}

func (nl namespaceLister) endpointSlices(selector string, convert func(any) (any, error)) cache.ListerWatcher {
	client, ns := nl.client, nl.namespace
	c := client.DiscoveryV1().EndpointSlices(ns)
	list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		if nl.typed {
			return c.List(ctx, o)
		}
		return listConverted[discoveryv1.EndpointSlice](ctx, client.DiscoveryV1().RESTClient(), ns, "endpointslices", o, convert,
			func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} },
			func(l *discoveryv1.EndpointSliceList) []discoveryv1.EndpointSlice { return l.Items })
	}
	return listWatch(selector, list, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return c.Watch(ctx, o) })
}

// listWatch lists and watches with a label selector, never streaming the initial list as watch
// events (WatchList): list is cheaper (see list.go).
func listWatch(selector string,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return watchFn(ctx, o)
		},
	}, noWatchList{})
}

// noWatchList tells the reflector not to stream initial lists.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// Run runs the reflectors, tells sink about every change, calls sink.Start once every reflector
// has stored its initial list, and stops when ctx is done.
func (w *Watcher) Run(ctx context.Context, sink Sink) error {
	w.objects.setSink(sink)
	var running sync.WaitGroup
	for _, r := range w.reflectors {
		running.Go(func() { r.RunWithContext(ctx) })
	}
	go func() {
		for _, t := range w.stores {
			select {
			case <-t.synced:
			case <-ctx.Done():
				return
			}
		}
		sink.Start()
	}()
	<-ctx.Done()
	running.Wait()
	return nil
}

// Services implements index.Source.
func (w *Watcher) Services() []index.Key { return w.objects.services() }

// Members implements index.Source.
func (w *Watcher) Members(k index.Key) []*index.Member { return w.objects.members(k) }

// Slices implements index.Source.
func (w *Watcher) Slices(m *index.Member) []*index.Slice { return w.objects.slices(m) }

// PodMirrors implements index.Source.
func (w *Watcher) PodMirrors(m *index.Member) []index.PodMirror { return w.objects.podMirrors(m) }

// PodMirrorGeneration implements index.Source.
func (w *Watcher) PodMirrorGeneration(m *index.Member) uint64 {
	return w.objects.podMirrorGeneration(m)
}

var _ index.Source = (*Watcher)(nil)

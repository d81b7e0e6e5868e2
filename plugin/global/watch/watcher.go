// Package watch feeds the index from the Kubernetes API: label-selected informers on Services
// and EndpointSlices, converted on arrival into small immutable objects (object.go) classified
// by what Linkerd's service mirror writes (linkerd.go). The informer caches are the index's Source.
package watch

import (
	"context"
	"fmt"
	"sync"

	"github.com/globaldns/global/plugin/global/index"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Sink receives what the watcher sees: Changed for every global service an event may affect, and
// Start once the caches hold the initial state. *index.Index is a Sink.
type Sink interface {
	Changed(index.Key)
	Start()
}

// Watcher runs the informers and answers index.Source from their caches.
type Watcher struct {
	informers []cache.SharedIndexInformer
	scopes    map[string]*scope // by namespace; one scope under "" when watching all namespaces
}

// scope is the informers of one namespace (or of all): Services and EndpointSlices that Linkerd
// mirrored here (the per-pod mirrors' slices apart), and the local ones selected by the export
// selector, and secondary indexes: mirror Services by global service, per-pod mirrors by headless
// mirror, slices by Service.
type scope struct {
	mirrorServices, mirrorSlices  cache.SharedIndexInformer
	localServices, localSlices    cache.SharedIndexInformer
	podMirrorSlices               cache.SharedIndexInformer
	mirrorsByGlobal, podMirrorsBy *secondary[*service]
	mirrorSlicesBy, localSlicesBy *secondary[*slice]
	podMirrorSlicesBy             *secondary[*slice]
}

// New returns a Watcher of namespaces (all when empty), taking as local members the Services that
// match exportSelector. Nothing runs before Run.
func New(client kubernetes.Interface, namespaces []string, exportSelector string) (*Watcher, error) {
	if _, err := labels.Parse(exportSelector); err != nil {
		return nil, fmt.Errorf("export selector %q: %w", exportSelector, err)
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	w := &Watcher{scopes: map[string]*scope{}}
	for _, ns := range namespaces {
		// Informers without client-go's namespace index (a set of every key, unused here), each
		// converting what it stores.
		add := func(inf cache.SharedIndexInformer, src source) cache.SharedIndexInformer {
			if err := inf.SetTransform(transform(src)); err != nil {
				panic(err) // only fails once the informer has started
			}
			w.informers = append(w.informers, inf)
			return inf
		}
		services := func(selector string) cache.SharedIndexInformer {
			return coreinformers.NewFilteredServiceInformer(client, ns, 0, cache.Indexers{}, labelSelector(selector))
		}
		endpointSlices := func(selector string) cache.SharedIndexInformer {
			return discoveryinformers.NewFilteredEndpointSliceInformer(client, ns, 0, cache.Indexers{}, labelSelector(selector))
		}
		w.scopes[ns] = &scope{
			mirrorServices:    add(services(mirrorServiceSelector), fromMirror),
			mirrorSlices:      add(endpointSlices(mirrorSliceSelector), fromMirror),
			localServices:     add(services(exportSelector), fromLocal),
			localSlices:       add(endpointSlices(exportSelector), fromLocal),
			podMirrorSlices:   add(endpointSlices(podMirrorSliceSelector), fromPodMirror),
			mirrorsByGlobal:   newSecondary(globalOf),
			podMirrorsBy:      newSecondary(podMirrorOwner),
			mirrorSlicesBy:    newSecondary(serviceOf),
			localSlicesBy:     newSecondary(serviceOf),
			podMirrorSlicesBy: newSecondary(serviceOf),
		}
	}
	return w, nil
}

// Run starts the informers, tells sink about every change, calls sink.Start once every handler
// has seen its informer's initial list, and stops the informers when ctx is done.
func (w *Watcher) Run(ctx context.Context, sink Sink) error {
	var synced []cache.InformerSynced
	for _, sc := range w.scopes {
		handlers := []struct {
			inf     cache.SharedIndexInformer
			key     func(any) (index.Key, bool)
			indexes []updater
		}{
			{sc.mirrorServices, sc.mirrorServiceKey, []updater{sc.mirrorsByGlobal, sc.podMirrorsBy}},
			{sc.localServices, serviceKey, nil},
			{sc.localSlices, localSliceKey, []updater{sc.localSlicesBy}},
			{sc.mirrorSlices, sc.mirrorSliceKey, []updater{sc.mirrorSlicesBy}},
			{sc.podMirrorSlices, sc.mirrorSliceKey, []updater{sc.podMirrorSlicesBy}},
		}
		for _, h := range handlers {
			reg, err := h.inf.AddEventHandler(changes(h.key, h.indexes, sink))
			if err != nil {
				return err
			}
			synced = append(synced, reg.HasSynced)
		}
	}
	var running sync.WaitGroup
	for _, inf := range w.informers {
		running.Go(func() { inf.Run(ctx.Done()) })
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), synced...) {
			sink.Start()
		}
	}()
	<-ctx.Done()
	running.Wait()
	return nil
}

func labelSelector(selector string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}

// updater is a secondary index kept by informer events.
type updater interface{ update(obj any, present bool) }

// changes turns informer events into sink.Changed calls for the global services involved, before
// and after the change, once the indexes reflect the event.
func changes(key func(any) (index.Key, bool), indexes []updater, sink Sink) cache.ResourceEventHandler {
	notify := func(obj any) {
		if k, ok := key(obj); ok {
			sink.Changed(k)
		}
	}
	update := func(obj any, present bool) {
		for _, idx := range indexes {
			idx.update(obj, present)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { update(obj, true); notify(obj) },
		UpdateFunc: func(old, obj any) {
			update(old, false)
			update(obj, true)
			notify(old)
			notify(obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			update(obj, false)
			notify(obj)
		},
	}
}

func serviceKey(obj any) (index.Key, bool) {
	s, ok := obj.(*service)
	if !ok || s.member == nil {
		return index.Key{}, false
	}
	return s.global, true
}

func localSliceKey(obj any) (index.Key, bool) {
	s, ok := obj.(*slice)
	if !ok || s.service == "" {
		return index.Key{}, false
	}
	return index.Key{Namespace: s.namespace, Name: s.service}, true
}

// mirrorServiceKey is the global service of a headless mirror, or of the headless mirror a per-pod
// mirror belongs to.
func (sc *scope) mirrorServiceKey(obj any) (index.Key, bool) {
	if s, ok := obj.(*service); ok && s.podOf != "" {
		return sc.mirrorKey(s.namespace, s.podOf)
	}
	return serviceKey(obj)
}

// mirrorSliceKey finds the global service of a mirror's (or a per-pod mirror's) slice through its
// Service. When the Service is not cached yet, its own add event will rebuild the global service
// with this slice.
func (sc *scope) mirrorSliceKey(obj any) (index.Key, bool) {
	s, ok := obj.(*slice)
	if !ok || s.service == "" {
		return index.Key{}, false
	}
	return sc.mirrorKey(s.namespace, s.service)
}

// mirrorKey is mirrorServiceKey of the cached mirror Service namespace/name.
func (sc *scope) mirrorKey(namespace, name string) (index.Key, bool) {
	svc, ok, _ := sc.mirrorServices.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return index.Key{}, false
	}
	return sc.mirrorServiceKey(svc)
}

func (w *Watcher) scope(namespace string) *scope {
	if sc, ok := w.scopes[metav1.NamespaceAll]; ok {
		return sc
	}
	return w.scopes[namespace]
}

// Members implements index.Source.
func (w *Watcher) Members(k index.Key) []*index.Member {
	sc := w.scope(k.Namespace)
	if sc == nil {
		return nil
	}
	var out []*index.Member
	if obj, ok, _ := sc.localServices.GetStore().GetByKey(k.String()); ok {
		if s := obj.(*service); s.member != nil {
			out = append(out, s.member)
		}
	}
	for _, s := range sc.mirrorsByGlobal.get(k.String()) {
		out = append(out, s.member)
	}
	return out
}

// Slices implements index.Source.
func (w *Watcher) Slices(m *index.Member) []*index.Slice {
	sc := w.scope(m.Namespace)
	if sc == nil {
		return nil
	}
	idx := sc.mirrorSlicesBy
	if m.Local() {
		idx = sc.localSlicesBy
	}
	objs := idx.get(m.Namespace + "/" + m.Name)
	out := make([]*index.Slice, 0, len(objs))
	for _, s := range objs {
		if s.slice != nil {
			out = append(out, s.slice)
		}
	}
	return out
}

// PodMirrors implements index.Source.
func (w *Watcher) PodMirrors(m *index.Member) []index.PodMirror {
	sc := w.scope(m.Namespace)
	if sc == nil || m.Local() {
		return nil
	}
	pods := sc.podMirrorsBy.get(m.Namespace + "/" + m.Name)
	out := make([]index.PodMirror, 0, len(pods))
	for _, p := range pods {
		slices := sc.podMirrorSlicesBy.get(p.namespace + "/" + p.name)
		out = append(out, index.PodMirror{Addr: p.clusterIP, Ready: slicesReady(slices)})
	}
	return out
}

func slicesReady(ss []*slice) bool {
	for _, s := range ss {
		if s.ready {
			return true
		}
	}
	return false
}

var _ index.Source = (*Watcher)(nil)

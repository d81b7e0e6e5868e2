// Package watch feeds the index from the Kubernetes API: label-selected informers on Services
// and EndpointSlices, converted on arrival into small immutable objects (object.go) classified
// by what Linkerd's service mirror writes (linkerd.go). The informer caches are the index's Source.
package watch

import (
	"context"
	"fmt"

	"github.com/globaldns/global/plugin/global/index"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
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
	factories []informers.SharedInformerFactory
	scopes    map[string]*scope // by namespace; one scope under "" when watching all namespaces
}

// scope is the informers of one namespace (or of all): Services and EndpointSlices that Linkerd
// mirrored here, and the local ones selected by the export selector.
type scope struct {
	mirrorServices, mirrorSlices cache.SharedIndexInformer
	localServices, localSlices   cache.SharedIndexInformer
}

const (
	byGlobal  = "global"  // Services by the key of the global service they are a member of
	byService = "service" // EndpointSlices by namespace and kubernetes.io/service-name
)

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
		factory := func(selector string, mirror bool) informers.SharedInformerFactory {
			f := informers.NewSharedInformerFactoryWithOptions(client, 0,
				informers.WithNamespace(ns),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
				informers.WithTransform(transform(mirror)))
			w.factories = append(w.factories, f)
			return f
		}
		mf, lf := factory(mirrorSelector, true), factory(exportSelector, false)
		sc := &scope{
			mirrorServices: mf.Core().V1().Services().Informer(),
			mirrorSlices:   mf.Discovery().V1().EndpointSlices().Informer(),
			localServices:  lf.Core().V1().Services().Informer(),
			localSlices:    lf.Discovery().V1().EndpointSlices().Informer(),
		}
		if err := sc.mirrorServices.AddIndexers(cache.Indexers{byGlobal: globalIndexFunc}); err != nil {
			return nil, err
		}
		for _, inf := range []cache.SharedIndexInformer{sc.mirrorSlices, sc.localSlices} {
			if err := inf.AddIndexers(cache.Indexers{byService: serviceIndexFunc}); err != nil {
				return nil, err
			}
		}
		w.scopes[ns] = sc
	}
	return w, nil
}

func globalIndexFunc(obj any) ([]string, error) {
	if s, ok := obj.(*service); ok && s.member != nil {
		return []string{s.global.String()}, nil
	}
	return nil, nil
}

func serviceIndexFunc(obj any) ([]string, error) {
	if s, ok := obj.(*slice); ok && s.service != "" {
		return []string{s.Namespace + "/" + s.service}, nil
	}
	return nil, nil
}

// Run starts the informers, tells sink about every change, calls sink.Start once every handler
// has seen its informer's initial list, and stops the informers when ctx is done.
func (w *Watcher) Run(ctx context.Context, sink Sink) error {
	var synced []cache.InformerSynced
	for _, sc := range w.scopes {
		handlers := []struct {
			inf cache.SharedIndexInformer
			key func(any) (index.Key, bool)
		}{
			{sc.mirrorServices, serviceKey},
			{sc.localServices, serviceKey},
			{sc.localSlices, localSliceKey},
			{sc.mirrorSlices, sc.mirrorSliceKey},
		}
		for _, h := range handlers {
			reg, err := h.inf.AddEventHandler(changes(h.key, sink))
			if err != nil {
				return err
			}
			synced = append(synced, reg.HasSynced)
		}
	}
	for _, f := range w.factories {
		f.Start(ctx.Done())
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), synced...) {
			sink.Start()
		}
	}()
	<-ctx.Done()
	for _, f := range w.factories {
		f.Shutdown()
	}
	return nil
}

// changes turns informer events into sink.Changed calls for the global services involved, before
// and after the change.
func changes(key func(any) (index.Key, bool), sink Sink) cache.ResourceEventHandler {
	notify := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if k, ok := key(obj); ok {
			sink.Changed(k)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { notify(obj) },
		UpdateFunc: func(old, obj any) { notify(old); notify(obj) },
		DeleteFunc: notify,
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
	return index.Key{Namespace: s.Namespace, Name: s.service}, true
}

// mirrorSliceKey finds the global service of a mirror's slice through the mirror Service. When the
// Service is not cached yet, its own add event will rebuild the global service with this slice.
func (sc *scope) mirrorSliceKey(obj any) (index.Key, bool) {
	s, ok := obj.(*slice)
	if !ok || s.service == "" {
		return index.Key{}, false
	}
	svc, ok, _ := sc.mirrorServices.GetStore().GetByKey(s.Namespace + "/" + s.service)
	if !ok {
		return index.Key{}, false
	}
	return serviceKey(svc)
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
	objs, _ := sc.mirrorServices.GetIndexer().ByIndex(byGlobal, k.String())
	for _, obj := range objs {
		out = append(out, obj.(*service).member)
	}
	return out
}

// Slices implements index.Source.
func (w *Watcher) Slices(m *index.Member) []*index.Slice {
	sc := w.scope(m.Namespace)
	if sc == nil {
		return nil
	}
	inf := sc.mirrorSlices
	if m.Local() {
		inf = sc.localSlices
	}
	objs, _ := inf.GetIndexer().ByIndex(byService, m.Namespace+"/"+m.Name)
	out := make([]*index.Slice, 0, len(objs))
	for _, obj := range objs {
		if s := obj.(*slice).slice; s != nil {
			out = append(out, s)
		}
	}
	return out
}

var _ index.Source = (*Watcher)(nil)

package writer

import (
	"sync/atomic"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

// store is the writer's view of what it wrote: informers on its own Services and EndpointSlices
// (the -global ones and the MCS ones) and, with `serviceimports on`, ServiceImports, selected by
// our labels and this writer's LabelWriter, per watched namespace. It runs on every replica, so a
// new leader starts warm.
type store struct {
	factories []informers.SharedInformerFactory
	// importFactories are started only once the ServiceImport CRD is known to be installed: a
	// reflector on a missing resource fails and logs forever.
	importFactories []mcsinformers.SharedInformerFactory
	scopes          map[string]*scoped // "" when watching all namespaces
	// importsAvailable is set once the ServiceImport CRD is found and importFactories started.
	importsAvailable atomic.Bool
}

type scoped struct {
	services, slices cache.SharedIndexInformer
	imports          cache.SharedIndexInformer // nil unless serviceimports on
}

// byGlobal indexes our objects by the global service they were written for, namespace/name,
// whatever their own names: objects written under other settings (another service_suffix) are
// found, and deleted, with the global service's.
const byGlobal = "global"

// newStore makes the informers; mcs is nil unless serviceimports on.
func newStore(client kubernetes.Interface, mcs mcsclient.Interface, namespaces []string, owner string) *store {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	c := &store{scopes: map[string]*scoped{}}
	for _, ns := range namespaces {
		factory := func(selector string) informers.SharedInformerFactory {
			f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }),
				informers.WithTransform(dropManagedFields))
			c.factories = append(c.factories, f)
			return f
		}
		sc := &scoped{
			services: factory(ServiceSelector(owner)).Core().V1().Services().Informer(),
			slices:   factory(SliceSelector(owner)).Discovery().V1().EndpointSlices().Informer(),
		}
		infs := []cache.SharedIndexInformer{sc.services, sc.slices}
		if mcs != nil {
			f := mcsinformers.NewSharedInformerFactoryWithOptions(mcs, 0, mcsinformers.WithNamespace(ns),
				mcsinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ServiceSelector(owner) }),
				mcsinformers.WithTransform(dropManagedFields))
			c.importFactories = append(c.importFactories, f)
			sc.imports = f.Multicluster().V1alpha1().ServiceImports().Informer()
			infs = append(infs, sc.imports)
		}
		for _, inf := range infs {
			if err := inf.AddIndexers(cache.Indexers{byGlobal: func(obj any) ([]string, error) {
				if k, ok := keyOf(obj); ok {
					return []string{k.String()}, nil
				}
				return nil, nil
			}}); err != nil {
				panic(err) // only fails once the informer runs
			}
		}
		c.scopes[ns] = sc
	}
	return c
}

// dropManagedFields keeps the cache small: the writer never reads them.
func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func (c *store) scope(ns string) *scoped {
	if sc, ok := c.scopes[metav1.NamespaceAll]; ok {
		return sc
	}
	return c.scopes[ns]
}

// get returns every object of ours written for global service k, as cached.
func (c *store) get(k index.Key) existing {
	sc := c.scope(k.Namespace)
	if sc == nil {
		return existing{}
	}
	var out existing
	objs, _ := sc.services.GetIndexer().ByIndex(byGlobal, k.String())
	for _, obj := range objs {
		out.services = append(out.services, obj.(*corev1.Service))
	}
	objs, _ = sc.slices.GetIndexer().ByIndex(byGlobal, k.String())
	for _, obj := range objs {
		out.slices = append(out.slices, obj.(*discoveryv1.EndpointSlice))
	}
	if sc.imports != nil {
		objs, _ = sc.imports.GetIndexer().ByIndex(byGlobal, k.String())
		for _, obj := range objs {
			out.imports = append(out.imports, obj.(*mcsv1alpha1.ServiceImport))
		}
	}
	return out
}

// importsSynced reports whether the ServiceImport informers hold what the API has.
func (c *store) importsSynced() bool {
	for _, sc := range c.scopes {
		if sc.imports == nil || !sc.imports.HasSynced() {
			return false
		}
	}
	return true
}

// keys returns the global services that have objects of ours.
func (c *store) keys() []index.Key {
	var out []index.Key
	for _, sc := range c.scopes {
		for _, inf := range []cache.SharedIndexInformer{sc.services, sc.slices, sc.imports} {
			if inf == nil {
				continue
			}
			for _, obj := range inf.GetStore().List() {
				if k, ok := keyOf(obj); ok {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// keyOf returns the global service one of our objects was written for.
func keyOf(obj any) (index.Key, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok || m.GetLabels()[LabelService] == "" {
		return index.Key{}, false
	}
	return index.Key{Namespace: m.GetNamespace(), Name: m.GetLabels()[LabelService]}, true
}

// existing is what the cache holds of ours for one global service.
type existing struct {
	services []*corev1.Service
	slices   []*discoveryv1.EndpointSlice
	imports  []*mcsv1alpha1.ServiceImport
}

// splitMCS separates the MCS objects (ServiceImports, slices labelled with an MCS service name)
// from the rest.
func (e existing) splitMCS() (mcs, rest existing) {
	mcs.imports, rest.services = e.imports, e.services
	for _, es := range e.slices {
		if _, ok := es.Labels[mcsv1alpha1.LabelServiceName]; ok {
			mcs.slices = append(mcs.slices, es)
		} else {
			rest.slices = append(rest.slices, es)
		}
	}
	return mcs, rest
}

// split separates the Service named name and its slices from the objects written under other
// settings (another service_suffix): those are obsolete.
func (e existing) split(name string) (svc *corev1.Service, slices []*discoveryv1.EndpointSlice, obsolete existing) {
	for _, s := range e.services {
		if s.Name == name {
			svc = s
		} else {
			obsolete.services = append(obsolete.services, s)
		}
	}
	for _, es := range e.slices {
		if es.Labels[discoveryv1.LabelServiceName] == name {
			slices = append(slices, es)
		} else {
			obsolete.slices = append(obsolete.slices, es)
		}
	}
	return svc, slices, obsolete
}

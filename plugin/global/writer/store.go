package writer

import (
	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// store is the writer's view of what it wrote: informers on our Services and EndpointSlices only
// (label-selected), per watched namespace. It runs on every replica, so a new leader starts warm.
type store struct {
	factories []informers.SharedInformerFactory
	scopes    map[string]*scoped // "" when watching all namespaces
}

type scoped struct {
	services, slices cache.SharedIndexInformer
}

const byService = "service" // slices by namespace/kubernetes.io/service-name

func newStore(client kubernetes.Interface, namespaces []string) *store {
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
			services: factory(LabelManagedBy + "=" + ManagedBy).Core().V1().Services().Informer(),
			slices:   factory(discoveryv1.LabelManagedBy + "=" + ControllerName).Discovery().V1().EndpointSlices().Informer(),
		}
		if err := sc.slices.AddIndexers(cache.Indexers{byService: func(obj any) ([]string, error) {
			es, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok {
				return nil, nil
			}
			return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
		}}); err != nil {
			panic(err) // only fails once the informer runs
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

// get returns our Service `name` in ns and its slices, as cached.
func (c *store) get(ns, name string) existing {
	sc := c.scope(ns)
	if sc == nil {
		return existing{}
	}
	var out existing
	if obj, ok, _ := sc.services.GetStore().GetByKey(ns + "/" + name); ok {
		out.service = obj.(*corev1.Service)
	}
	objs, _ := sc.slices.GetIndexer().ByIndex(byService, ns+"/"+name)
	for _, obj := range objs {
		out.slices = append(out.slices, obj.(*discoveryv1.EndpointSlice))
	}
	return out
}

// keys returns the global services that have objects of ours.
func (c *store) keys() []index.Key {
	var out []index.Key
	for _, sc := range c.scopes {
		for _, inf := range []cache.SharedIndexInformer{sc.services, sc.slices} {
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

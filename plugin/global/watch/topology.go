package watch

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// What the cluster's own objects say of its topology, read when the Corefile does not say it.
const (
	// clusterPropertyGroup serves the ClusterProperty cluster.clusterset.k8s.io, whose spec.value
	// is this cluster's id in its clusterset (KEP-2149, sigs.k8s.io/about-api).
	clusterPropertyGroup = "about.k8s.io"
	clusterPropertyName  = "cluster.clusterset.k8s.io"
	// linkGroup serves Linkerd's Links: one per linked cluster (spec.targetClusterName), whose
	// labels the operator can give the linked cluster's locality.
	linkGroup = "multicluster.linkerd.io"
	// recheck is how often a source whose API is not served (its CRD not installed) is looked
	// for again.
	recheck = 10 * time.Minute
)

var nodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Topology watches the objects that tell the topology: the ClusterProperty with this cluster's
// name, the Links of the linked clusters, and this cluster's Nodes, read as metadata only. Each
// source is optional: without its CRD it says nothing and is looked for again every 10 minutes;
// one it may not read says nothing, logged once, while its informer keeps trying.
type Topology struct {
	dyn     dynamic.Interface
	meta    metadata.Interface
	disc    discovery.DiscoveryInterface
	keys    []string // the locality keys read from labels
	linksNS string   // the namespace Links count in: Linkerd's multicluster namespace

	mu      sync.Mutex
	d       index.Discovered
	changed func(index.Discovered) // nil until the first state is known
}

// NewTopology returns a Topology reading the locality keys keys, and the Links of namespace links.
// Nothing runs before Run.
func NewTopology(dyn dynamic.Interface, meta metadata.Interface, disc discovery.DiscoveryInterface, keys []string, links string) *Topology {
	return &Topology{dyn: dyn, meta: meta, disc: disc, keys: keys, linksNS: links}
}

// Run watches until ctx is done. It calls changed with what the objects say once every source has
// been read (or found missing), or after timeout whatever has been, then at every change.
func (t *Topology) Run(ctx context.Context, timeout time.Duration, changed func(index.Discovered)) {
	var wg sync.WaitGroup
	synced := make(chan struct{}, 3)
	for _, run := range []func(context.Context, func()){t.clusterProperty, t.links, t.nodes} {
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx, sync.OnceFunc(func() { synced <- struct{}{} })) }()
	}
	deadline := time.After(timeout)
wait:
	for range 3 {
		select {
		case <-synced:
		case <-deadline:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	t.mu.Lock()
	t.changed = changed
	d := t.copy()
	t.mu.Unlock()
	changed(d)
	wg.Wait()
}

// set updates what the objects say with f, and reports the change.
func (t *Topology) set(f func(*index.Discovered)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&t.d)
	if t.changed != nil {
		t.changed(t.copy())
	}
}

func (t *Topology) copy() index.Discovered {
	d := index.Discovered{Cluster: t.d.Cluster, Links: map[string]map[string]string{}, Linked: maps.Clone(t.d.Linked), Nodes: maps.Clone(t.d.Nodes)}
	for c, l := range t.d.Links {
		d.Links[c] = maps.Clone(l)
	}
	return d
}

// localities returns the labels of keys among labels.
func (t *Topology) localities(labels map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range t.keys {
		if v := labels[k]; v != "" {
			out[k] = v
		}
	}
	return out
}

// clusterProperty follows the ClusterProperty cluster.clusterset.k8s.io.
func (t *Topology) clusterProperty(ctx context.Context, synced func()) {
	only := fields.OneTermEqualSelector("metadata.name", clusterPropertyName).String()
	t.informOn(ctx, synced, clusterPropertyGroup, "clusterproperties", metav1.NamespaceAll, func(o *metav1.ListOptions) { o.FieldSelector = only }, nil, nil, func(store cache.Store) {
		name := ""
		for _, o := range store.List() {
			v, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "spec", "value")
			v = strings.ToLower(v)
			if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
				telemetry.Log.Warningf("topology: ClusterProperty %s has value %s, not a DNS label: not used as this cluster's name", clusterPropertyName, quote(v))
				continue
			}
			name = v
		}
		t.set(func(d *index.Discovered) { d.Cluster = name })
	})
}

// links follows Linkerd's Links, in Linkerd's multicluster namespace only: a Link elsewhere is
// anyone's. Where the API serves Links but they have never been read, no cluster is linked (fail
// closed: a mirror counts only while a Link names its cluster), until they can be. Once read, a
// denial keeps what was read, as any API error does: an API server starting again denies for a
// moment, before its authorizer has synced.
func (t *Topology) links(ctx context.Context, synced func()) {
	var warned atomic.Bool // until the next read: discovery is looked at again and again
	denied := func(err error, read bool) {
		telemetry.LinksUnreadable.Set(1)
		if read {
			telemetry.Log.Warningf("cannot read Linkerd's Links in namespace %s: %v; the Links last read count until they can be read again", t.linksNS, err)
			return
		}
		if !warned.Swap(true) {
			telemetry.Log.Warningf("cannot read Linkerd's Links in namespace %s: %v; no linked cluster's mirror is answered until they can be read", t.linksNS, err)
		}
		t.set(func(d *index.Discovered) { d.Links, d.Linked = map[string]map[string]string{}, map[string]bool{} })
	}
	absent := func() { // no Link CRD after all: Links say nothing
		warned.Store(false)
		telemetry.LinksUnreadable.Set(0)
		t.set(func(d *index.Discovered) { d.Links, d.Linked = map[string]map[string]string{}, nil })
	}
	t.informOn(ctx, synced, linkGroup, "links", t.linksNS, nil, denied, absent, func(store cache.Store) {
		warned.Store(false)
		telemetry.LinksUnreadable.Set(0)
		links, linked := map[string]map[string]string{}, map[string]bool{}
		for _, o := range store.List() {
			u := o.(*unstructured.Unstructured)
			cluster, _, _ := unstructured.NestedString(u.Object, "spec", "targetClusterName")
			cluster = strings.ToLower(cmp.Or(cluster, u.GetName()))
			linked[cluster] = true
			if l := t.localities(u.GetLabels()); len(l) > 0 {
				links[cluster] = l
			}
		}
		t.set(func(d *index.Discovered) { d.Links, d.Linked = links, linked })
	})
}

// nodes follows the locality labels all of this cluster's Nodes share, from their metadata.
func (t *Topology) nodes(ctx context.Context, synced func()) {
	inf := metadatainformer.NewFilteredMetadataInformer(t.meta, nodes, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	inform(ctx, synced, inf, "Nodes", t.updated, nil, func(store cache.Store) {
		shared := map[string]string{}
		for i, o := range store.List() {
			l := t.localities(o.(*metav1.PartialObjectMetadata).Labels)
			if i == 0 {
				shared = l
				continue
			}
			maps.DeleteFunc(shared, func(k, v string) bool { return l[k] != v })
		}
		t.set(func(d *index.Discovered) { d.Nodes = shared })
	})
}

// informOn runs an informer on resource of group in namespace, in the group's preferred version,
// while the API serves it: until then it says nothing (and is synced), and looks again every
// recheck. Where discovery fails (an API server starting, an aggregated API down), whether it is
// served is unknown: it looks again sooner, from a second to unknownMax apart, and denied, when not
// nil, is told as when the resource may not be read (see inform): a source that gates what is
// answered fails closed, not open; absent, when not nil, is told when it is found not served after
// that.
func (t *Topology) informOn(ctx context.Context, synced func(), group, resource, namespace string, tweak dynamicinformer.TweakListOptionsFunc,
	denied func(err error, read bool), absent func(), read func(cache.Store)) {
	wait := time.Second
	for ctx.Err() == nil {
		gvr, err := t.served(group, resource)
		if err == nil && gvr.Resource != "" {
			inf := dynamicinformer.NewFilteredDynamicInformer(t.dyn, gvr, namespace, 0, cache.Indexers{}, tweak).Informer()
			inform(ctx, synced, inf, resource+"."+group, t.updated, denied, read)
			return
		}
		next := recheck
		switch {
		case err != nil:
			telemetry.Log.Debugf("topology: looking for %s.%s: %v", resource, group, err)
			if denied != nil {
				denied(fmt.Errorf("discovery of %s: %w", group, err), false)
			}
			next, wait = wait, min(2*wait, unknownMax)
		case wait > time.Second: // not served, found after discovery failed
			wait = time.Second
			if absent != nil {
				absent()
			}
		}
		synced()
		select {
		case <-ctx.Done():
		case <-time.After(next):
		}
	}
}

// unknownMax is the longest wait between two looks for a source whose discovery failed.
const unknownMax = time.Minute

// served returns the resource of group, in its preferred version, when the API serves it.
func (t *Topology) served(group, resource string) (schema.GroupVersionResource, error) {
	groups, err := t.disc.ServerGroups()
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	for _, g := range groups.Groups {
		if g.Name != group {
			continue
		}
		l, err := t.disc.ServerResourcesForGroupVersion(g.PreferredVersion.GroupVersion)
		if err != nil {
			return schema.GroupVersionResource{}, err
		}
		if slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }) {
			return schema.GroupVersionResource{Group: group, Version: g.PreferredVersion.Version, Resource: resource}, nil
		}
	}
	return schema.GroupVersionResource{}, nil
}

// inform runs inf until ctx is done, reading its store at each change once it has listed, and
// says when it has. The first error that is not passing (not allowed to read, say) is logged, once
// until the next read: the reflector retries on its own, and a source it cannot read says nothing,
// or, with denied, is denied (which logs), told whether the store was ever read. updated, when not
// nil, tells whether an update changes anything read.
func inform(ctx context.Context, synced func(), inf cache.SharedIndexInformer, what string, updated func(old, new any) bool,
	denied func(err error, read bool), read func(cache.Store)) {
	var failed, started atomic.Bool
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err)) && !failed.Swap(true) {
			if denied != nil && !apierrors.IsNotFound(err) {
				denied(err, started.Load())
			} else {
				telemetry.Log.Warningf("cannot read %s: %v; what they tell is not used until they can be read", what, err)
			}
			synced() // nothing to wait for
		}
	})
	changed := func() {
		if started.Load() {
			failed.Store(false)
			read(inf.GetStore())
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() },
		UpdateFunc: func(old, new any) {
			if updated == nil || updated(old, new) {
				changed()
			}
		},
		DeleteFunc: func(any) { changed() },
	})
	go inf.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		started.Store(true)
		failed.Store(false)
		read(inf.GetStore())
		synced()
	}
	<-ctx.Done()
}

// updated reports whether old and new, two versions of an object, may tell another topology: not
// for two versions of one Node with the same locality labels (a Node's metadata changes with
// every status update). A Link or the ClusterProperty is read again at every update: they change
// rarely.
func (t *Topology) updated(old, new any) bool {
	if o, ok := old.(*metav1.PartialObjectMetadata); ok {
		return !maps.Equal(t.localities(o.Labels), t.localities(new.(*metav1.PartialObjectMetadata).Labels))
	}
	return true
}

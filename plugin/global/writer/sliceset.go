package writer

import (
	"maps"
	"slices"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// sliceWork is what one sync writes of a slice set: plan's slices at dirty, over the cached ones
// of their names, then deletes obsolete and the cached slices at dirty that plan no longer holds.
type sliceWork struct {
	plan     *plan
	dirty    []position // in order
	cached   map[string]*discoveryv1.EndpointSlice
	obsolete []*discoveryv1.EndpointSlice
	from     string // "changes" or "whole", for the metric
}

// fromPlan is the work of a sync from p (nil: none): only when the cache shows exactly what p
// wrote (have), and what changed since s can be placed in it. Otherwise false, and p is as it
// was.
func fromPlan(p *plan, set sliceSet, s *index.Service, have []*discoveryv1.EndpointSlice, max int) (sliceWork, bool) {
	if p == nil || p.owner != set.owner.UID || !p.current(have) {
		return sliceWork{}, false
	}
	cs, ok := p.changes(s)
	if !ok {
		return sliceWork{}, false
	}
	w := sliceWork{plan: p, dirty: p.apply(cs, max), cached: make(map[string]*discoveryv1.EndpointSlice, len(have)), from: "changes"}
	p.svc = s
	for _, es := range have {
		w.cached[es.Name] = es
	}
	return w, true
}

// fromWhole is the work of a whole sync: every desired endpoint of s placed in the slices the
// cache holds (have), and every slice of either written or deleted.
func fromWhole(set sliceSet, s *index.Service, have []*discoveryv1.EndpointSlice, max int) sliceWork {
	var names map[clusterHost]string
	if !set.hosts {
		names = hostnames(s.Records())
	}
	want := desiredEndpoints(s, names)
	w := sliceWork{plan: newPlan(s, set.owner.UID, exceptions(names)), cached: map[string]*discoveryv1.EndpointSlice{}, from: "whole"}
	cached := w.sortCached(have, set.prefix)
	dirty := make(map[group][]int, len(want))
	for g := range want {
		dirty[g] = nil
	}
	for g, byIndex := range cached {
		dirty[g] = slices.Collect(maps.Keys(byIndex))
	}
	for g := range dirty {
		l := placeGroup(want[g], cached[g], max)
		for _, sl := range l.slices {
			dirty[g] = append(dirty[g], sl.index)
		}
		if len(l.slices) > 0 {
			w.plan.groups[g] = l
		}
	}
	w.dirty = positions(dirty)
	return w
}

// sortCached returns our slices of have by group and index, and adds to w.obsolete those whose
// names are not of their group's.
func (w *sliceWork) sortCached(have []*discoveryv1.EndpointSlice, prefix string) map[group]map[int]*discoveryv1.EndpointSlice {
	out := map[group]map[int]*discoveryv1.EndpointSlice{}
	for _, es := range have {
		g := group{es.Labels[LabelCluster], es.AddressType}
		i, ok := sliceIndex(es.Name, prefix, g)
		if !ok {
			w.obsolete = append(w.obsolete, es)
			continue
		}
		if out[g] == nil {
			out[g] = map[int]*discoveryv1.EndpointSlice{}
		}
		out[g][i] = es
		w.cached[es.Name] = es
	}
	return out
}

// sliceSet is one set of slices written for a global service: the -global Service's or, with
// serviceimports on, the ServiceImport's. Slices are named <prefix>-<cluster>-<family>-<i>.
type sliceSet struct {
	namespace, prefix string
	hosts             bool              // endpoint hostnames are the hosts' own (MCS), not <host>-<cluster>
	labels            map[string]string // besides the cluster's
	clusterLabels     []string          // labels whose value is the slice's member cluster
	mesh              meshFunc          // nil: nothing for mesh-aware clients (MCS)
	owner             metav1.OwnerReference
	blocks            string // what a conflict on one of its names blocks
}

// globalSet is the slices of the -global Service svc.
func globalSet(k index.Key, svc *corev1.Service, owner string, mesh meshFunc) sliceSet {
	labels := ownLabels(k.Name, owner)
	labels[discoveryv1.LabelServiceName] = svc.Name
	labels[discoveryv1.LabelManagedBy] = SlicesManagedBy
	labels[corev1.IsHeadlessService] = "" // kube-proxy ignores the slice, as the admission policy requires
	return sliceSet{
		namespace: svc.Namespace, prefix: svc.Name, labels: labels, clusterLabels: []string{LabelCluster}, mesh: mesh,
		// The Service controls its slices (the garbage collector deletes them with it). No
		// blockOwnerDeletion: it would need update rights on services/finalizers on clusters
		// that enforce owner-reference permissions, and nothing waits on it.
		owner:  metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true)},
		blocks: blocksGlobal,
	}
}

// slice builds desired slice p of group g.
func (set sliceSet) slice(g group, p placed) *discoveryv1.EndpointSlice {
	labels := maps.Clone(set.labels)
	for _, l := range set.clusterLabels {
		labels[l] = g.cluster
	}
	var annotations map[string]string
	if set.mesh != nil {
		annotations = set.mesh(g.cluster)
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       set.namespace,
			Name:            sliceName(set.prefix, g, p.index),
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{set.owner},
		},
		AddressType: g.family,
		Endpoints:   p.endpoints,
		Ports:       p.ports,
	}
}

package writer

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/globaldns/global/plugin/global/telemetry"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// sweepOutside deletes what this writer wrote in namespaces it no longer watches (`namespaces`
// lost one): the store sees the watched ones only. One cluster-wide list per kind, of our objects
// outside those namespaces, usually empty. The RBAC may not allow it (namespaced Roles): that is
// logged once, and the objects are left.
func (r *reconciler) sweepOutside(ctx context.Context) {
	if len(r.namespaces) == 0 {
		return // every namespace is watched
	}
	var outside []string
	for _, ns := range r.namespaces {
		outside = append(outside, "metadata.namespace!="+ns)
	}
	// The field selector keeps the answer small; the namespaces are checked again here all the same.
	opts := metav1.ListOptions{FieldSelector: strings.Join(outside, ",")}
	var failed []string
	deleted := map[string]int{}
	namespaces := map[string]bool{}
	del := func(kind string, m *metav1.ObjectMeta, deleteFn func(context.Context, string, metav1.DeleteOptions) error) {
		switch err := deleteFn(ctx, m.Name, preconditions(m)); {
		case apierrors.IsNotFound(err):
		case err != nil:
			failed = append(failed, err.Error())
		default:
			r.counted("delete", nil)
			deleted[kind]++
			namespaces[m.Namespace] = true
		}
	}
	// Slices first, as in deleteAll.
	client := r.client
	opts.LabelSelector = SliceSelector(r.cfg.Owner) + "," + LabelService
	if l, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, opts); err != nil {
		failed = append(failed, err.Error())
	} else {
		for i := range l.Items {
			if m := &l.Items[i].ObjectMeta; !slices.Contains(r.namespaces, m.Namespace) {
				del("EndpointSlices", m, client.DiscoveryV1().EndpointSlices(m.Namespace).Delete)
			}
		}
	}
	opts.LabelSelector = ServiceSelector(r.cfg.Owner) + "," + LabelService
	if l, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, opts); err != nil {
		failed = append(failed, err.Error())
	} else {
		for i := range l.Items {
			if m := &l.Items[i].ObjectMeta; !slices.Contains(r.namespaces, m.Namespace) {
				del("Services", m, client.CoreV1().Services(m.Namespace).Delete)
			}
		}
	}
	r.reportSweep(ctx, deleted, namespaces, failed)
}

// reportSweep logs what sweepOutside deleted in namespaces, and the first of its failures.
func (r *reconciler) reportSweep(ctx context.Context, deleted map[string]int, namespaces map[string]bool, failed []string) {
	if len(namespaces) > 0 {
		telemetry.Log.Infof("writer: deleted %d Services and %d EndpointSlices in namespaces no longer watched: %s",
			deleted["Services"], deleted["EndpointSlices"], strings.Join(slices.Sorted(maps.Keys(namespaces)), ", "))
	}
	// One warning while the failure lasts, not one per object and resync.
	if len(failed) > 0 && ctx.Err() == nil {
		if failed[0] != r.sweepErr {
			r.sweepErr = failed[0]
			telemetry.Log.Warningf("writer: cannot delete what it wrote in namespaces no longer watched (%d failures; it tries again every %v, "+
				"or delete them with: kubectl delete services,endpointslices -n <namespace> -l %s=%s,%s=%s): %s",
				len(failed), r.cfg.Resync, LabelManagedBy, ManagedBy, LabelWriter, r.cfg.Owner, failed[0])
		}
	} else {
		r.sweepErr = ""
	}
}

// sweepImports deletes the ServiceImports of this writer that no sync deletes: with
// serviceimports off, all of them (there is no informer on them; their slices are the store's, and
// go with each sync, or with the ServiceImport through the garbage collector); with it on, those
// in namespaces no longer watched. One cluster-wide, label-selected list; where ServiceImports are
// not served (no CRD) or not readable (RBAC granted for serviceimports on only), there is nothing
// this writer could have written, or nothing it may do: said at debug level only.
func (r *reconciler) sweepImports(ctx context.Context) {
	if r.mcs == nil || r.cfg.ServiceImports && (len(r.namespaces) == 0 || !r.store.importsAvailable.Load()) {
		return
	}
	items, err := r.ownImports(ctx)
	if err != nil {
		if ctx.Err() == nil {
			telemetry.Log.Debugf("writer: looking for ServiceImports written earlier: %v", err)
		}
		return
	}
	deleted := 0
	for i := range items {
		si := &items[i]
		if r.cfg.ServiceImports && slices.Contains(r.namespaces, si.Namespace) {
			continue
		}
		if err := r.deleteImport(ctx, si); err != nil {
			if ctx.Err() == nil {
				telemetry.Log.Warningf("writer: cannot delete ServiceImport %s/%s: %v", si.Namespace, si.Name, err)
			}
			continue
		}
		deleted++
	}
	if deleted > 0 {
		telemetry.Log.Infof("writer: deleted %d ServiceImports it wrote (serviceimports %s)", deleted, map[bool]string{true: "on, namespaces no longer watched", false: "off"}[r.cfg.ServiceImports])
	}
}

// ownImports lists this writer's ServiceImports, cluster-wide. With serviceimports off and
// `namespaces`, when RBAC forbids that (the chart's Roles in those namespaces), it lists them in each
// watched namespace instead: there the Roles allow it, and there is where it wrote them.
func (r *reconciler) ownImports(ctx context.Context) ([]mcsv1alpha1.ServiceImport, error) {
	opts := metav1.ListOptions{LabelSelector: ServiceSelector(r.cfg.Owner) + "," + LabelService}
	api := r.mcs.MulticlusterV1alpha1()
	l, err := api.ServiceImports(metav1.NamespaceAll).List(ctx, opts)
	if err == nil {
		return l.Items, nil
	}
	if !apierrors.IsForbidden(err) || r.cfg.ServiceImports || len(r.namespaces) == 0 {
		return nil, err
	}
	var out []mcsv1alpha1.ServiceImport
	for _, ns := range r.namespaces {
		l, err := api.ServiceImports(ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Items...)
	}
	return out, nil
}

package writer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
	"github.com/globaldns/global/plugin/global/telemetry"

	clog "github.com/coredns/coredns/plugin/pkg/log"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// Why a sync deletes what it deletes, for the debug log of each write.
const (
	whyGone          = "its global service is gone"
	whyOtherSettings = "written under other settings (another service_suffix)"
)

var (
	// errStale: the cache does not show our own last write yet, or a deletion; try again shortly.
	errStale = errors.New("cache is stale")
	// errTerminating: the namespace is being deleted, and the API refuses every create in it
	// until it is gone, with its global services. Retrying is pointless: the global service is
	// dropped, as Kubernetes' EndpointSlice reconcilers drop theirs.
	errTerminating = errors.New("namespace is terminating")
)

// reconciler writes one global service's Service and EndpointSlices from the index, the way
// Kubernetes' EndpointSliceMirroring reconciler does: from the full desired state, comparing
// with the cached state, writing nothing when they agree and as little as possible otherwise.
// It also deletes what no sync would (sweep.go).
type reconciler struct {
	cfg    Config
	client kubernetes.Interface
	// mcs writes the ServiceImports with serviceimports on, and deletes those written earlier
	// with it off; nil (no MCS client given to New), it does neither.
	mcs        mcsclient.Interface
	store      *store
	namespaces []string // watched; none: all
	tracker    *tracker
	conflicts  *conflicts
	plans      plans
	owners     ownerRefs // of `owner`
	// terminating holds the namespaces whose creates were refused as terminating, so that each
	// is logged once, until a create there succeeds.
	terminating sync.Map
	sweepErr    string // the last error of sweepOutside, logged once
}

func newReconciler(cfg Config, client kubernetes.Interface, mcs mcsclient.Interface, st *store, namespaces []string) *reconciler {
	return &reconciler{cfg: cfg, client: client, mcs: mcs, store: st, namespaces: namespaces, tracker: newTracker(), conflicts: newConflicts()}
}

// startRecording has conflicts recorded as Kubernetes Events through b, from now on.
func (r *reconciler) startRecording(b record.EventBroadcaster) {
	r.conflicts.setRecorder(b.NewRecorder(eventScheme, corev1.EventSource{Component: ManagedBy}))
}

// ownEcho is told every cached slice event, and reports whether it is exactly the echo of one of
// our own writes (see tracker.observe).
func (r *reconciler) ownEcho(obj any, gone bool) bool { return r.tracker.observe(obj, gone) }

// forgetPlans has the next sync of every service start from the cache: a new term's, as what the
// last term wrote may have been rewritten since.
func (r *reconciler) forgetPlans() { r.plans.reset() }

// newlyTerminating reports whether ns was not known to be terminating yet, and remembers that it
// is until a create there succeeds (createdIn).
func (r *reconciler) newlyTerminating(ns string) bool {
	_, known := r.terminating.LoadOrStore(ns, true)
	return !known
}

// sync makes the API hold what the index says about k (nil s: nothing). Every object of ours
// written for k that the current settings do not want is deleted, whatever its name. The -global
// objects and the MCS ones are written independently: a conflict on one leaves the other alone.
func (r *reconciler) sync(ctx context.Context, k index.Key, s *index.Service) error {
	name := k.Name + r.cfg.Suffix
	mcs, all := r.store.get(k).splitMCS()
	if r.tracker.stale(k.Namespace, name, all.slices) || r.tracker.stale(k.Namespace, k.Name+MCSSuffix, mcs.slices) {
		return errStale
	}
	if s == nil {
		r.conflicts.clear(k, "")
		r.plans.take(planKey{k, blocksGlobal})
		r.plans.take(planKey{k, blocksMCS})
		return errors.Join(r.deleteAll(ctx, k, all, whyGone), r.deleteAll(ctx, k, mcs, whyGone))
	}
	return errors.Join(r.syncGlobal(ctx, k, s, name, all), r.syncMCS(ctx, k, s, mcs))
}

// syncGlobal writes the Service <svc><suffix> and its slices.
func (r *reconciler) syncGlobal(ctx context.Context, k index.Key, s *index.Service, name string, all existing) error {
	have, haveSlices, obsolete := all.split(name)
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		if err := r.deleteAll(ctx, k, obsolete, whyOtherSettings); err != nil {
			return err
		}
		return r.conflicts.report(k, blocksGlobal, nil, fmt.Sprintf("cannot write Service %s/%s: %v", k.Namespace, name, errs))
	}
	want := desiredService(s, name, r.cfg.Owner)
	if err := r.own(ctx, &want.ObjectMeta); err != nil {
		return err
	}
	svc, err := r.syncService(ctx, k, want, have)
	if err != nil {
		return err
	}
	if err := r.syncSlices(ctx, k, globalSet(k, svc, r.cfg.Owner, meshOf(s, s.Topology().Local)), s, haveSlices); err != nil {
		return err
	}
	// Last, so that the new objects are in place before the old ones go.
	if err := r.deleteAll(ctx, k, obsolete, whyOtherSettings); err != nil {
		return err
	}
	r.conflicts.clear(k, blocksGlobal)
	return nil
}

// syncMCS writes k's ServiceImport and MCS slices, or deletes ours when they are not wanted
// (serviceimports off, the CRD missing).
func (r *reconciler) syncMCS(ctx context.Context, k index.Key, s *index.Service, have existing) error {
	switch {
	case !r.cfg.ServiceImports || !r.store.importsAvailable.Load():
		r.conflicts.clear(k, blocksMCS)
		return r.deleteAll(ctx, k, have, "serviceimports off, or no ServiceImport CRD")
	case !r.store.importsSynced():
		return errStale
	}
	var current *mcsv1alpha1.ServiceImport
	var obsolete existing
	for _, si := range have.imports {
		if si.Name == k.Name {
			current = si
		} else {
			obsolete.imports = append(obsolete.imports, si)
		}
	}
	svc := desiredService(s, k.Name+r.cfg.Suffix, r.cfg.Owner)
	want := desiredImport(k, svc, r.cfg.Owner)
	if err := r.own(ctx, &want.ObjectMeta); err != nil {
		return err
	}
	si, err := r.syncImport(ctx, k, want, current)
	if errors.Is(err, errConflict) {
		// Someone else's ServiceImport: our slices would add endpoints to it.
		obsolete.slices = have.slices
		return errors.Join(err, r.deleteAll(ctx, k, obsolete, "another's ServiceImport holds the name"))
	}
	if err != nil {
		return err
	}
	if err := r.syncSlices(ctx, k, mcsSet(k, si, r.cfg.Owner), s, have.slices); err != nil {
		return err
	}
	if err := r.deleteAll(ctx, k, obsolete, whyOtherSettings); err != nil {
		return err
	}
	r.conflicts.clear(k, blocksMCS)
	return nil
}

// deleteAll deletes cur, slices first: deleting a Service also garbage-collects its slices, but
// deleting them first makes the result independent of the garbage collector's pace. why is logged.
func (r *reconciler) deleteAll(ctx context.Context, k index.Key, cur existing, why string) error {
	var errs []error
	for _, es := range cur.slices {
		errs = append(errs, r.deleteSlice(ctx, es, why))
	}
	for _, svc := range cur.services {
		logWrite("deleting", "Service", &svc.ObjectMeta, func() string { return why })
		err := r.client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, preconditions(&svc.ObjectMeta))
		if apierrors.IsNotFound(err) {
			continue
		}
		errs = append(errs, r.counted("delete", err))
		if err == nil && svc.Name != k.Name+r.cfg.Suffix {
			telemetry.Log.Infof("writer: %s: deleted Service %s/%s, written under other settings (service_suffix)", k, svc.Namespace, svc.Name)
		}
	}
	for _, si := range cur.imports {
		logWrite("deleting", "ServiceImport", &si.ObjectMeta, func() string { return why })
		errs = append(errs, r.deleteImport(ctx, si))
	}
	return errors.Join(errs...)
}

// logWrite says at debug which object a sync writes and why, so that any write can be explained
// (why is only called when the log shows it: a diff compares the objects again).
func logWrite(verb, kind string, m *metav1.ObjectMeta, why func() string) {
	if clog.D.Value() {
		telemetry.Log.Debugf("writer: %s %s %s/%s: %s", verb, kind, m.Namespace, m.Name, why())
	}
}

func absent() string { return "absent" }

// syncService creates or updates our Service; it returns the Service the slices belong to.
func (r *reconciler) syncService(ctx context.Context, k index.Key, want, have *corev1.Service) (*corev1.Service, error) {
	api := r.client.CoreV1().Services(want.Namespace)
	if have == nil {
		logWrite("creating", "Service", &want.ObjectMeta, absent)
		created, err := api.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil, r.alreadyExists(ctx, k, blocksGlobal, func() (metav1.Object, error) {
				return api.Get(ctx, want.Name, metav1.GetOptions{})
			})
		}
		return created, r.createdIn(want.Namespace, err)
	}
	if serviceUpToDate(have, want) {
		return have, nil
	}
	logWrite("updating", "Service", &have.ObjectMeta, func() string { return diff(serviceParts, have, want) + " differ" })
	upd := have.DeepCopy()
	maps.Copy(upd.Labels, want.Labels)
	setAnnotations(&upd.ObjectMeta, want.Annotations, index.ServiceAnnotationKeys)
	upd.Spec.Ports = want.Spec.Ports
	ownedBy(&upd.ObjectMeta, want.OwnerReferences)
	// A selector would have Kubernetes' EndpointSlice controller write slices beside ours; another
	// type would not be headless. Both are restored (a headless Service's clusterIP can only be set
	// again when it stopped being ClusterIP).
	upd.Spec.Selector = nil
	if !clusterIPType(upd) {
		upd.Spec.Type, upd.Spec.ExternalName = corev1.ServiceTypeClusterIP, ""
		upd.Spec.ClusterIP, upd.Spec.ClusterIPs = want.Spec.ClusterIP, nil
	}
	updated, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	return updated, r.updated(err)
}

// syncImport creates or updates our ServiceImport, as syncService does the Service.
func (r *reconciler) syncImport(ctx context.Context, k index.Key, want, have *mcsv1alpha1.ServiceImport) (*mcsv1alpha1.ServiceImport, error) {
	api := r.mcs.MulticlusterV1alpha1().ServiceImports(want.Namespace)
	if have == nil {
		logWrite("creating", "ServiceImport", &want.ObjectMeta, absent)
		created, err := api.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil, r.alreadyExists(ctx, k, blocksMCS, func() (metav1.Object, error) {
				return api.Get(ctx, want.Name, metav1.GetOptions{})
			})
		}
		return created, r.createdIn(want.Namespace, err)
	}
	if importUpToDate(have, want) {
		return have, nil
	}
	logWrite("updating", "ServiceImport", &have.ObjectMeta, func() string { return diff(importParts, have, want) + " differ" })
	upd := have.DeepCopy()
	maps.Copy(upd.Labels, want.Labels)
	upd.Spec.Type, upd.Spec.Ports, upd.Spec.IPs = want.Spec.Type, want.Spec.Ports, nil
	ownedBy(&upd.ObjectMeta, want.OwnerReferences)
	updated, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	return updated, r.updated(err)
}

// alreadyExists tells apart a create that lost to our own cache lag (stale) from a name taken by
// someone else's object (a conflict, left alone).
func (r *reconciler) alreadyExists(ctx context.Context, k index.Key, blocks string, get func() (metav1.Object, error)) error {
	obj, err := get()
	if err != nil {
		return err
	}
	l := obj.GetLabels()
	switch {
	case l[LabelManagedBy] != ManagedBy:
		return r.conflicts.report(k, blocks, obj, fmt.Sprintf("%s/%s exists and is not managed by %s: left alone", obj.GetNamespace(), obj.GetName(), ManagedBy))
	case l[LabelWriter] != r.cfg.Owner:
		return r.conflicts.report(k, blocks, obj, fmt.Sprintf("%s/%s exists and belongs to another writer (%s=%q, this one is %q): left alone",
			obj.GetNamespace(), obj.GetName(), LabelWriter, l[LabelWriter], r.cfg.Owner))
	}
	return errStale // ours: the cache has not shown it yet
}

// syncSlices writes the slices of set for every group of s: it places the endpoints (layout.go),
// then writes the slices that may differ from the cache's. A whole sync places every desired
// endpoint in the slices the cache holds, and compares them all; a big service's sync leaves a
// plan, from which the next one places and writes what changed only (see plan).
func (r *reconciler) syncSlices(ctx context.Context, k index.Key, set sliceSet, s *index.Service, have []*discoveryv1.EndpointSlice) error {
	key := planKey{k, set.blocks}
	w, ok := fromPlan(r.plans.take(key), set, s, have, r.cfg.MaxEndpoints)
	if !ok {
		w = fromWhole(set, s, have, r.cfg.MaxEndpoints)
	}
	telemetry.WriterSliceSyncs.WithLabelValues(w.from).Inc()
	if err := r.write(ctx, k, set, w); err != nil {
		return err // the plan is dropped: it may not be what the API holds
	}
	if s.Big() {
		r.plans.put(key, w.plan)
	}
	return nil
}

// write does w: creates and updates first, deletions last, so an endpoint moving between slices
// is never missing. It records in w.plan what it wrote.
func (r *reconciler) write(ctx context.Context, k index.Key, set sliceSet, w sliceWork) error {
	var errs []error
	obsolete := w.obsolete
	for _, at := range w.dirty {
		sl := w.plan.slice(at)
		if sl == nil {
			if es := w.cached[sliceName(set.prefix, at.g, at.index)]; es != nil {
				obsolete = append(obsolete, es)
			}
			continue
		}
		desired := set.slice(at.g, *sl)
		rv, err := r.writeSlice(ctx, k, set, w.cached[desired.Name], desired)
		errs = append(errs, err)
		w.plan.written[desired.Name] = rv
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, es := range obsolete {
		errs = append(errs, r.deleteSlice(ctx, es, "no endpoint is placed in it"))
		delete(w.plan.written, es.Name)
	}
	return errors.Join(errs...)
}

// writeSlice makes want of have (nil: creates it) and returns the slice's resourceVersion then.
func (r *reconciler) writeSlice(ctx context.Context, k index.Key, set sliceSet, have, want *discoveryv1.EndpointSlice) (string, error) {
	if have != nil {
		return r.updateSlice(ctx, have, want)
	}
	return r.createSlice(ctx, k, set.blocks, want)
}

func (r *reconciler) createSlice(ctx context.Context, k index.Key, blocks string, want *discoveryv1.EndpointSlice) (string, error) {
	logWrite("creating", "EndpointSlice", &want.ObjectMeta, absent)
	api := r.client.DiscoveryV1().EndpointSlices(want.Namespace)
	created, err := api.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return "", r.alreadyExists(ctx, k, blocks, func() (metav1.Object, error) {
			return api.Get(ctx, want.Name, metav1.GetOptions{})
		})
	}
	if err != nil {
		return "", r.createdIn(want.Namespace, err)
	}
	r.tracker.wrote(created)
	return created.ResourceVersion, r.createdIn(want.Namespace, nil)
}

// updateSlice writes want over have when they differ, with have's resourceVersion: a concurrent
// writer's change makes it fail (and retry from fresh state) instead of being overwritten.
func (r *reconciler) updateSlice(ctx context.Context, have, want *discoveryv1.EndpointSlice) (string, error) {
	if sliceUpToDate(have, want) {
		return have.ResourceVersion, nil
	}
	logWrite("updating", "EndpointSlice", &have.ObjectMeta, func() string { return diff(sliceParts, have, want) + " differ" })
	upd := have.DeepCopy()
	maps.Copy(upd.Labels, want.Labels)
	setAnnotations(&upd.ObjectMeta, want.Annotations, index.SliceAnnotationKeys)
	upd.OwnerReferences = want.OwnerReferences
	upd.Endpoints, upd.Ports = want.Endpoints, want.Ports
	updated, err := r.client.DiscoveryV1().EndpointSlices(have.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return "", r.updated(err)
	}
	r.tracker.wrote(updated)
	return updated.ResourceVersion, r.updated(nil)
}

func (r *reconciler) deleteSlice(ctx context.Context, es *discoveryv1.EndpointSlice, why string) error {
	logWrite("deleting", "EndpointSlice", &es.ObjectMeta, func() string { return why })
	err := r.client.DiscoveryV1().EndpointSlices(es.Namespace).Delete(ctx, es.Name, preconditions(&es.ObjectMeta))
	if apierrors.IsNotFound(err) { // already gone (the garbage collector, or an earlier try)
		return nil
	}
	if err == nil {
		r.tracker.deleted(es)
	}
	return r.counted("delete", err)
}

func (r *reconciler) deleteImport(ctx context.Context, si *mcsv1alpha1.ServiceImport) error {
	if r.mcs == nil {
		return nil
	}
	err := r.mcs.MulticlusterV1alpha1().ServiceImports(si.Namespace).Delete(ctx, si.Name, preconditions(&si.ObjectMeta))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return r.counted("delete", err)
}

// preconditions make a delete apply only to the object we looked at, never to a newer one.
func preconditions(m *metav1.ObjectMeta) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID, ResourceVersion: &m.ResourceVersion}}
}

// createdIn counts a create in namespace ns and passes its error on: errTerminating when the
// namespace is being deleted. A create that succeeds proves ns is not (again): the next refusal
// is logged anew.
func (r *reconciler) createdIn(ns string, err error) error {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return fmt.Errorf("%w: %w", errTerminating, err)
	}
	if err == nil {
		r.terminating.Delete(ns)
	}
	return r.counted("create", err)
}

// updated counts an update and passes its error on: errStale when the object is gone, which the
// cache does not show yet (someone deleted it, the namespace controller among them).
func (r *reconciler) updated(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return r.counted("update", err)
}

// counted records a successful write in the changes metric and passes err on.
func (r *reconciler) counted(op string, err error) error {
	if err == nil {
		telemetry.EndpointSliceChanges.WithLabelValues(op).Inc()
	}
	return err
}

// own gives m, a Service or ServiceImport we are about to create or update, the owner's references,
// or returns errOwnerMissing (wrapped) while the owner cannot be read.
func (r *reconciler) own(ctx context.Context, m *metav1.ObjectMeta) error {
	refs, err := r.owners.references(ctx, r.client, r.cfg.GCOwner)
	if err == nil {
		ownedBy(m, refs)
	}
	return err
}

package writer

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsscheme "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/scheme"
)

// With `serviceimports on`, the writer also writes what an MCS implementation would, so that the
// cluster's own DNS (CoreDNS's kubernetes plugin with `multicluster`) answers the Multi-Cluster
// Services names: a Headless ServiceImport <svc> and, per member cluster, EndpointSlices labelled
// with the MCS service name and source cluster. CoreDNS reads v1alpha1 (plugin/kubernetes
// controller.go, object/serviceimport.go, object/multicluster_endpoint.go).

// eventScheme knows ServiceImports, so conflicts on them can be recorded as Events.
var eventScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), mcsscheme.AddToScheme(s)); err != nil {
		panic(err)
	}
	return s
}()

// desiredImport is the Headless ServiceImport <svc>, with the -global Service's ports.
func desiredImport(k index.Key, svc *corev1.Service, owner string) *mcsv1alpha1.ServiceImport {
	ports := []mcsv1alpha1.ServicePort{} // not nil: the CRD requires the field
	for _, p := range svc.Spec.Ports {
		ports = append(ports, mcsv1alpha1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port})
	}
	return &mcsv1alpha1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, Labels: ownLabels(k.Name, owner)},
		Spec:       mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.Headless, Ports: ports},
	}
}

func importUpToDate(have, want *mcsv1alpha1.ServiceImport) bool {
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	return have.Spec.Type == want.Spec.Type && len(have.Spec.IPs) == 0 &&
		slices.EqualFunc(have.Spec.Ports, want.Spec.Ports, func(a, b mcsv1alpha1.ServicePort) bool {
			return a.Name == b.Name && a.Port == b.Port && a.Protocol == b.Protocol && a.AppProtocol == nil
		})
}

// mcsSet is the MCS slices of ServiceImport si: no kubernetes.io/service-name (they belong to no
// Service of this cluster: Kubernetes DNS and kube-proxy must not see them as a local Service's),
// the MCS labels instead.
func mcsSet(k index.Key, si *mcsv1alpha1.ServiceImport, owner string) sliceSet {
	labels := ownLabels(k.Name, owner)
	labels[discoveryv1.LabelManagedBy] = ControllerName
	labels[mcsv1alpha1.LabelServiceName] = k.Name
	return sliceSet{
		namespace: k.Namespace, prefix: k.Name + MCSSuffix, hosts: true, labels: labels,
		clusterLabels: []string{LabelCluster, mcsv1alpha1.LabelSourceCluster},
		// The garbage collector deletes them with the ServiceImport.
		owner: metav1.OwnerReference{APIVersion: mcsv1alpha1.GroupVersion.String(), Kind: mcsv1alpha1.ServiceImportKindName,
			Name: si.Name, UID: si.UID, Controller: ptr.To(true)},
		blocks: blocksMCS,
	}
}

// syncMCS writes k's ServiceImport and MCS slices, or deletes ours when they are not wanted
// (serviceimports off, the CRD missing).
func (r *reconciler) syncMCS(ctx context.Context, k index.Key, s *index.Service, have existing) error {
	switch {
	case !r.cfg.ServiceImports || !r.store.importsAvailable.Load():
		r.conflicts.clear(k, blocksMCS)
		return r.deleteAll(ctx, k, have)
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
	si, err := r.syncImport(ctx, k, desiredImport(k, svc, r.cfg.Owner), current)
	if errors.Is(err, errConflict) {
		// Someone else's ServiceImport: our slices would add endpoints to it.
		obsolete.slices = have.slices
		return errors.Join(err, r.deleteAll(ctx, k, obsolete))
	}
	if err != nil {
		return err
	}
	if err := r.syncSlices(ctx, k, mcsSet(k, si, r.cfg.Owner), s, have.slices); err != nil {
		return err
	}
	if err := r.deleteAll(ctx, k, obsolete); err != nil {
		return err
	}
	r.conflicts.clear(k, blocksMCS)
	return nil
}

// syncImport creates or updates our ServiceImport, as syncService does the Service.
func (r *reconciler) syncImport(ctx context.Context, k index.Key, want, have *mcsv1alpha1.ServiceImport) (*mcsv1alpha1.ServiceImport, error) {
	api := r.mcs.MulticlusterV1alpha1().ServiceImports(want.Namespace)
	if have == nil {
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
	upd := have.DeepCopy()
	maps.Copy(upd.Labels, want.Labels)
	upd.Spec.Type, upd.Spec.Ports, upd.Spec.IPs = want.Spec.Type, want.Spec.Ports, nil
	updated, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	return updated, r.updated(err)
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

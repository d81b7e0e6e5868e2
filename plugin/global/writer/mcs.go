package writer

import (
	"errors"

	"github.com/globaldns/global/plugin/global/index"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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

// mcsSet is the MCS slices of ServiceImport si: no kubernetes.io/service-name (they belong to no
// Service of this cluster: Kubernetes DNS and kube-proxy must not see them as a local Service's),
// the MCS labels instead.
func mcsSet(k index.Key, si *mcsv1alpha1.ServiceImport, owner string) sliceSet {
	labels := ownLabels(k.Name, owner)
	labels[discoveryv1.LabelManagedBy] = SlicesManagedBy
	labels[mcsv1alpha1.LabelServiceName] = k.Name
	labels[corev1.IsHeadlessService] = "" // kube-proxy ignores the slice, as the admission policy requires
	return sliceSet{
		namespace: k.Namespace, prefix: k.Name + MCSSuffix, hosts: true, labels: labels,
		clusterLabels: []string{LabelCluster, mcsv1alpha1.LabelSourceCluster},
		// The garbage collector deletes them with the ServiceImport.
		owner: metav1.OwnerReference{APIVersion: mcsv1alpha1.GroupVersion.String(), Kind: mcsv1alpha1.ServiceImportKindName,
			Name: si.Name, UID: si.UID, Controller: ptr.To(true)},
		blocks: blocksMCS,
	}
}

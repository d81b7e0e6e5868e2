package harness

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
)

// The objects that tell a cluster's topology besides the Corefile, as their owners define them.
// The CRDs keep what the plugin reads (names, versions, scope) and accept any content: their
// schemas are their projects' business.
var (
	// linkerd2 multicluster/charts/linkerd-multicluster/templates/link-crd.yaml: namespaced,
	// served in v1alpha1 to v1alpha3 (stored), spec.targetClusterName naming the linked cluster.
	linkCRD = crd("links.multicluster.linkerd.io", "multicluster.linkerd.io", "Link", "links", "Namespaced", "", "v1alpha1", "v1alpha2", "v1alpha3")
	// sigs.k8s.io/about-api config/crd/about.k8s.io_clusterproperties.yaml (KEP-2149):
	// cluster-scoped, v1alpha1; the one named cluster.clusterset.k8s.io holds the cluster's id. A
	// *.k8s.io group needs its API review's approval (KEP-1111).
	clusterPropertyCRD = crd("clusterproperties.about.k8s.io", "about.k8s.io", "ClusterProperty", "clusterproperties", "Cluster",
		"https://github.com/kubernetes/enhancements/pull/3084", "v1alpha1")

	LinkResource            = schema.GroupVersionResource{Group: "multicluster.linkerd.io", Version: "v1alpha3", Resource: "links"}
	ClusterPropertyResource = schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}
)

// crd is a CustomResourceDefinition of any content, stored in its last version; approved is its
// api-approved.kubernetes.io annotation ("" for none).
func crd(name, group, kind, plural, scope, approved string, versions ...string) []byte {
	vs := ""
	for i, v := range versions {
		vs += fmt.Sprintf(`
  - name: %s
    served: true
    storage: %t
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true`, v, i == len(versions)-1)
	}
	return fmt.Appendf(nil, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %s
  annotations: {api-approved.kubernetes.io: %q}
spec:
  group: %s
  scope: %s
  names:
    kind: %s
    plural: %s
    singular: %s
  versions:%s
`, name, approved, group, scope, kind, plural, strings.ToLower(kind), vs)
}

// InstallTopologyCRDs installs the Link and ClusterProperty CRDs, as Linkerd's multicluster
// extension and sigs.k8s.io/about-api do, and returns once both are served.
func (cp *ControlPlane) InstallTopologyCRDs(ctx context.Context) error {
	if err := cp.installCRDs(ctx, "multicluster.linkerd.io/v1alpha3", "links", linkCRD); err != nil {
		return err
	}
	return cp.installCRDs(ctx, "about.k8s.io/v1alpha1", "clusterproperties", clusterPropertyCRD)
}

// ApplyLink creates or updates the Link that links cluster, in namespace, with labels (Linkerd's
// `linkerd multicluster link --cluster-name <cluster>`, linkerd2 multicluster/cmd/link.go, names
// it after the cluster and sets spec.targetClusterName to it).
func ApplyLink(ctx context.Context, dyn dynamic.Interface, namespace, cluster string, labels map[string]string) error {
	return apply(ctx, dyn.Resource(LinkResource).Namespace(namespace), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
		"metadata": map[string]any{"name": cluster, "namespace": namespace},
		"spec":     map[string]any{"targetClusterName": cluster, "gatewayAddress": GatewayIP, "gatewayPort": "4143", "gatewayIdentity": GatewayIdentity},
	}}, labels)
}

// SetClusterProperty creates or updates the ClusterProperty cluster.clusterset.k8s.io: this
// cluster's id in its clusterset.
func SetClusterProperty(ctx context.Context, dyn dynamic.Interface, value string) error {
	return apply(ctx, dyn.Resource(ClusterPropertyResource), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
		"metadata": map[string]any{"name": "cluster.clusterset.k8s.io"},
		"spec":     map[string]any{"value": value},
	}}, nil)
}

// apply creates u, or updates its labels and spec.
func apply(ctx context.Context, c dynamic.ResourceInterface, u *unstructured.Unstructured, labels map[string]string) error {
	u.SetLabels(labels)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, u, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		have.SetLabels(labels)
		have.Object["spec"] = u.Object["spec"]
		_, err = c.Update(ctx, have, metav1.UpdateOptions{})
		return err
	})
}

// LinkerdNamespace is Linkerd's multicluster namespace, where its service mirrors run as these
// ServiceAccounts (linkerd2, github.com/linkerd/linkerd2):
//   - linkerd-service-mirror-<link>: multicluster/charts/linkerd-multicluster-link/templates/
//     service-mirror.yaml, at stable-2.14.10, version-2.15 to version-2.20 and edge-26.8.3 (from 2.18
//     made by the deprecated `linkerd multicluster link`);
//   - controller-<link>: multicluster/charts/linkerd-multicluster/templates/controller/deployment.yaml
//     and controller/rbac.yaml, at version-2.18 (edge-25.3.3) to version-2.20 and edge-26.8.3;
//   - linkerd-local-service-mirror, which writes the federated services, <svc>-federated, labelled
//     mirror.linkerd.io/mirrored-service (multicluster/service-mirror/cluster_watcher.go
//     getFederatedServiceLabels): multicluster/charts/linkerd-multicluster/templates/
//     local-service-mirror.yaml, at version-2.17 (edge-24.11.2) to version-2.20 and edge-26.8.3.
//
// The namespace is the charts' {{.Release.Namespace}}: linkerd-multicluster unless `--namespace`
// (multicluster/cmd/link.go, link-gen.go) or Helm says otherwise.
const LinkerdNamespace = "linkerd-multicluster"

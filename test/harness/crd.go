package harness

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallMCSCRDs applies the ServiceImport and ServiceExport CRDs that sigs.k8s.io/mcs-api embeds
// (the pinned version's) and returns once both are Established and ServiceImports are served.
// Tests call it on a control plane of their own: the shared one stays without them, as a cluster
// without an MCS implementation is.
func (cp *ControlPlane) InstallMCSCRDs(ctx context.Context) error {
	return cp.installCRDs(ctx, "multicluster.x-k8s.io/v1alpha1", "serviceimports", mcscrd.ServiceImportCRD, mcscrd.ServiceExportCRD)
}

// installCRDs creates the CRDs of docs and returns once they are Established and resource is
// served in groupVersion (the plugin asks discovery).
func (cp *ControlPlane) installCRDs(ctx context.Context, groupVersion, resource string, docs ...[]byte) error {
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	crds := dyn.Resource(crdResource)
	var names []string
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return fmt.Errorf("CRD: %w", err)
		}
		if _, err := crds.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	for _, name := range names {
		if err := poll(ctx, "CRD "+name+" to be Established", func() (bool, error) {
			u, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return err
		}
	}
	// Established precedes discovery by a moment.
	return poll(ctx, resource+" in discovery", func() (bool, error) {
		l, err := cp.Client.Discovery().ServerResourcesForGroupVersion(groupVersion)
		if err != nil {
			return false, nil
		}
		for _, r := range l.APIResources {
			if r.Name == resource {
				return true, nil
			}
		}
		return false, nil
	})
}

// poll checks cond every 100 ms until it holds, it fails, or ctx (or readyTimeout) ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

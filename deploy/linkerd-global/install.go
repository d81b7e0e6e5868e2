package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newInstallCmd(f *globalFlags) *cobra.Command {
	var opts valueOptions
	cmd := &cobra.Command{
		Use:   "install [flags]",
		Args:  cobra.NoArgs,
		Short: "Output Kubernetes resources to install the global extension",
		Long: `Output Kubernetes resources to install the global extension: the Helm chart deploy/chart,
rendered with the values given, in a Namespace labelled linkerd.io/extension=global.

The values are the chart's (deploy/chart/values.yaml), set with --set, --set-string, --set-json,
--set-file and --values as with Helm; --ha adds the chart's values-ha.yaml first.`,
		Example: `  linkerd global install --set clusterName=east | kubectl apply -f -`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns := f.namespace
			if ns == "" {
				ns = defaultNamespace
			}
			objs, err := render(opts, ns)
			if err != nil {
				return err
			}
			return writeManifests(cmd.OutOrStdout(), objs)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&opts.files, "values", "f", nil, "Specify values in a YAML file (can specify multiple)")
	fl.StringArrayVar(&opts.values, "set", nil, "Set values on the command line (can specify multiple or separate values with commas: key1=val1,key2=val2)")
	fl.StringArrayVar(&opts.stringValues, "set-string", nil, "Set STRING values on the command line (can specify multiple or separate values with commas: key1=val1,key2=val2)")
	fl.StringArrayVar(&opts.jsonValues, "set-json", nil, "Set JSON values on the command line (can specify multiple or separate values with commas: key1=jsonval1,key2=jsonval2)")
	fl.StringArrayVar(&opts.fileValues, "set-file", nil, "Set values from respective files specified via the command line (can specify multiple or separate values with commas: key1=path1,key2=path2)")
	fl.BoolVar(&opts.ha, "ha", false, "Install in high availability mode (the chart's values-ha.yaml: 3 replicas on distinct nodes)")
	return cmd
}

func writeManifests(w io.Writer, objs []manifest) error {
	for _, o := range objs {
		if _, err := fmt.Fprintf(w, "---\n%s\n", o.text); err != nil {
			return err
		}
	}
	return nil
}

func newUninstallCmd(f *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "uninstall",
		Args:  cobra.NoArgs,
		Short: "Output Kubernetes resources to uninstall the global extension",
		Long: `Output Kubernetes resources to uninstall the global extension: its Namespace (and with it
everything in it) and the cluster-scoped objects that "linkerd global install" created, as found in
the cluster by their labels. A Helm release's objects are not listed: "helm uninstall" them.`,
		Example: `  linkerd global uninstall | kubectl delete -f -`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := f.client()
			if err != nil {
				return err
			}
			objs, err := installed(cmd.Context(), k)
			if err != nil {
				return err
			}
			if len(objs) == 0 {
				return errors.New("no resources found to uninstall")
			}
			return writeManifests(cmd.OutOrStdout(), objs)
		},
	}
}

// installed lists the extension's Namespaces and the cluster-scoped objects this CLI installed:
// the chart's cluster-scoped kinds, by the labels the chart and install put on them.
func installed(ctx context.Context, k *kube) ([]manifest, error) {
	var out []manifest
	add := func(apiVersion, kind, name string) {
		out = append(out, manifest{kind: kind, name: name, text: fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: %s", apiVersion, kind, name)})
	}
	nss, err := k.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: extensionLabel + "=" + extensionName})
	if err != nil {
		return nil, err
	}
	for _, o := range nss.Items {
		add("v1", "Namespace", o.Name)
	}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=" + partOf + ",app.kubernetes.io/managed-by=" + managedBy}
	rbac := k.client.RbacV1()
	crs, err := rbac.ClusterRoles().List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, o := range crs.Items {
		add("rbac.authorization.k8s.io/v1", "ClusterRole", o.Name)
	}
	crbs, err := rbac.ClusterRoleBindings().List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, o := range crbs.Items {
		add("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", o.Name)
	}
	pcs, err := k.client.SchedulingV1().PriorityClasses().List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, o := range pcs.Items {
		add("scheduling.k8s.io/v1", "PriorityClass", o.Name)
	}
	admission := k.client.AdmissionregistrationV1()
	vaps, err := admission.ValidatingAdmissionPolicies().List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, o := range vaps.Items {
		add("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", o.Name)
	}
	bindings, err := admission.ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, o := range bindings.Items {
		add("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", o.Name)
	}
	return out, nil
}

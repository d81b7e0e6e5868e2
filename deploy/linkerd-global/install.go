package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
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
--set-file and --values as with Helm; --ha adds the chart's values-ha.yaml first (three replicas,
one per node: it needs three schedulable nodes). The image is this CLI's build's unless
image.repository, image.tag or image.digest say otherwise; run this command of a newer build, with
the same flags, to upgrade.`,
		Example: `  linkerd global install --set clusterName=east | kubectl apply -f -`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := render(opts, f.extensionNamespace())
			if err != nil {
				return err
			}
			return writeManifests(cmd.OutOrStdout(), objs)
		},
	}
	valueFlags(cmd, &opts)
	return cmd
}

// valueFlags are the chart's values as Helm takes them, and --ha: install and prune render with them.
func valueFlags(cmd *cobra.Command, opts *valueOptions) {
	fl := cmd.Flags()
	fl.StringArrayVarP(&opts.files, "values", "f", nil, "Specify values in a YAML file (can specify multiple)")
	fl.StringArrayVar(&opts.values, "set", nil, "Set values on the command line (can specify multiple or separate values with commas: key1=val1,key2=val2)")
	fl.StringArrayVar(&opts.stringValues, "set-string", nil, "Set STRING values on the command line (can specify multiple or separate values with commas: key1=val1,key2=val2)")
	fl.StringArrayVar(&opts.jsonValues, "set-json", nil, "Set JSON values on the command line (can specify multiple or separate values with commas: key1=jsonval1,key2=jsonval2)")
	fl.StringArrayVar(&opts.fileValues, "set-file", nil, "Set values from respective files specified via the command line (can specify multiple or separate values with commas: key1=path1,key2=path2)")
	fl.BoolVar(&opts.ha, "ha", false, "Install in high availability mode (the chart's values-ha.yaml: 3 replicas on distinct nodes, so it needs 3 schedulable nodes)")
}

func writeManifests(w io.Writer, objs []manifest) error {
	for _, o := range objs {
		if _, err := fmt.Fprintf(w, "---\n%s\n", o.text); err != nil {
			return err
		}
	}
	return nil
}

func newPruneCmd(f *globalFlags) *cobra.Command {
	var opts valueOptions
	var applied string
	cmd := &cobra.Command{
		Use:   "prune [flags]",
		Args:  cobra.NoArgs,
		Short: "Output extraneous Kubernetes resources in the global extension",
		Long: `Output the Kubernetes resources that "linkerd global install" created and that install, with
the same flags, no longer renders: after an upgrade that drops --ha (the PriorityClass and the
PodDisruptionBudget) or namespaces (the Roles in them), or after an older build that rendered
something this one does not. With --manifest, those that the manifest given has not, instead of
this build's render: going back, the install output of the older build's CLI, which may have no
prune of its own. A Helm release's objects are never listed: Helm prunes its own.`,
		Example: `  linkerd global install --set clusterName=east | kubectl apply -f -
  linkerd global prune --set clusterName=east | kubectl delete -f -
  linkerd global prune --manifest previous.yaml | kubectl delete -f -`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if applied != "" && !onlyChanged(cmd, "manifest") {
				return errors.New("--manifest gives the objects to keep: the chart's values and --ha cannot be given with it")
			}
			k, err := f.client()
			if err != nil {
				return err
			}
			var rendered []manifest
			if applied != "" {
				rendered, err = readManifests(cmd.InOrStdin(), applied)
			} else {
				rendered, err = render(opts, f.extensionNamespace())
			}
			if err != nil {
				return err
			}
			objs, err := extraneous(cmd.Context(), k, rendered)
			if err != nil {
				return err
			}
			return writeManifests(cmd.OutOrStdout(), objs)
		},
	}
	valueFlags(cmd, &opts)
	cmd.Flags().StringVar(&applied, "manifest", "", "Keep the objects of this manifest (a file, or - for standard input) instead of this build's render")
	return cmd
}

// onlyChanged says whether name is the one flag of cmd's own that was set.
func onlyChanged(cmd *cobra.Command, name string) bool {
	only := true
	own := cmd.LocalNonPersistentFlags()
	cmd.Flags().Visit(func(fl *pflag.Flag) { only = only && (fl.Name == name || own.Lookup(fl.Name) == nil) })
	return only
}

// readManifests are the objects of the YAML stream in file, or standard input for "-".
func readManifests(stdin io.Reader, file string) ([]manifest, error) {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	var out []manifest
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if o.Object == nil {
			continue // an empty document
		}
		if o.GetKind() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("%s: an object without a kind or a name", file)
		}
		out = append(out, manifest{apiVersion: o.GetAPIVersion(), kind: o.GetKind(), namespace: o.GetNamespace(), name: o.GetName()})
	}
}

func newUninstallCmd(f *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "uninstall",
		Args:  cobra.NoArgs,
		Short: "Output Kubernetes resources to uninstall the global extension",
		Long: `Output Kubernetes resources to uninstall the global extension: its Namespace (and with it
everything in it) and the cluster-scoped objects that "linkerd global install" created, as found in
the cluster by their labels. A Helm release's objects, its namespace included, are not listed:
"helm uninstall" them.`,
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

// installed lists the extension's Namespaces and what this CLI installed outside them: what is in
// the Namespaces goes with them.
func installed(ctx context.Context, k *kube) ([]manifest, error) {
	nss, objs, err := labelled(ctx, k)
	if err != nil {
		return nil, err
	}
	out := nss
	for _, o := range objs {
		if !slices.ContainsFunc(nss, func(ns manifest) bool { return ns.name == o.namespace }) {
			out = append(out, o)
		}
	}
	return out, nil
}

// labelled finds what this CLI installed by the labels the chart and install put on it: the
// extension's Namespaces, and the objects of every kind the chart's templates can render
// (chartKinds) that the API serves, in every namespace (the Roles in the watched namespaces, with
// `namespaces`, are outside the extension's).
func labelled(ctx context.Context, k *kube) (namespaces, objects []manifest, err error) {
	// The Namespaces install made (namespaceManifest's labels): a Helm release's namespace, labelled
	// linkerd.io/extension=global as install.md has Helm users do, holds the release's own records.
	nss, err := k.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{
		LabelSelector: extensionLabel + "=" + extensionName + ",app.kubernetes.io/part-of=" + partOf + ",app.kubernetes.io/managed-by=" + managedBy})
	if err != nil {
		return nil, nil, err
	}
	for _, o := range nss.Items {
		namespaces = append(namespaces, deletion("v1", "Namespace", &o))
	}
	kinds, err := chartKinds()
	if err != nil {
		return nil, nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(k.client.Discovery()))
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=" + partOf + ",app.kubernetes.io/managed-by=" + managedBy}
	for _, gvk := range kinds {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			continue // not served (a CRD not installed): none can have been created
		}
		if err != nil {
			return nil, nil, err
		}
		l, err := k.dynamic.Resource(m.Resource).Namespace(metav1.NamespaceAll).List(ctx, sel)
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", m.Resource.GroupResource(), err)
		}
		for i := range l.Items {
			objects = append(objects, deletion(gvk.GroupVersion().String(), gvk.Kind, &l.Items[i]))
		}
	}
	return namespaces, objects, nil
}

// extraneous is what this CLI installed that rendered no longer has: an object is the same when
// its API group, kind, namespace and name are.
func extraneous(ctx context.Context, k *kube, rendered []manifest) ([]manifest, error) {
	nss, objs, err := labelled(ctx, k)
	if err != nil {
		return nil, err
	}
	var out []manifest
	for _, o := range append(nss, objs...) {
		if !slices.ContainsFunc(rendered, o.same) {
			out = append(out, o)
		}
	}
	return out, nil
}

// deletion is what `kubectl delete -f` needs of object o of kind.
func deletion(apiVersion, kind string, o metav1.Object) manifest {
	text := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: %s", apiVersion, kind, o.GetName())
	if ns := o.GetNamespace(); ns != "" {
		text += "\n  namespace: " + ns
	}
	return manifest{apiVersion: apiVersion, kind: kind, namespace: o.GetNamespace(), name: o.GetName(), text: text}
}

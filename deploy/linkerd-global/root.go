package main

import (
	"cmp"
	"fmt"
	"regexp"

	"github.com/spf13/cobra"
)

const (
	// extensionName is the value of the linkerd.io/extension label on the extension's Namespace,
	// by which `linkerd check` finds installed extensions.
	extensionName  = "global"
	extensionLabel = "linkerd.io/extension"
	// releaseName names the rendered release: with it, the chart names every object
	// coredns-global, as `helm install coredns-global` and deploy/base do.
	releaseName      = "coredns-global"
	defaultNamespace = "coredns-global"
	// partOf is the app.kubernetes.io/part-of label the chart and deploy/base put on every object.
	partOf = "coredns-global"
	// managedBy is the chart's app.kubernetes.io/managed-by (its Release.Service) on what this CLI
	// renders: uninstall selects by it, and so never lists a Helm release's objects.
	managedBy = "linkerd-global"
)

// version is the build's, set by the Makefile (-X main.version=...): the same string the
// plugin reports after its CoreDNS version (version=1.15.0+<this>). image is the image `make
// image` built with it (repository:tag), which install renders by default; "" in a plain `go
// build`, which renders deploy/chart as it is.
var (
	version = "dev"
	image   = ""
)

// globalFlags are the flags every Linkerd extension must accept (EXTENSIONS.md), and this one's own
// way to reach the replicas.
type globalFlags struct {
	kubeconfig, kubeContext, impersonate string
	impersonateGroup                     []string
	apiAddr, linkerdNamespace            string
	verbose                              bool

	namespace string // the extension's namespace; "" finds it
	// directPods dials Pods at their IP instead of port-forwarding to them: for a machine that
	// reaches the pod network (and the tests, whose control plane has no kubelet).
	directPods bool
}

// extensionNamespace is the namespace install renders into: --global-namespace, or the default.
func (f *globalFlags) extensionNamespace() string { return cmp.Or(f.namespace, defaultNamespace) }

var alphaNumDash = regexp.MustCompile(`^[a-zA-Z0-9-]+$`)

func newRootCmd() *cobra.Command {
	f := &globalFlags{}
	root := &cobra.Command{
		Use:   "linkerd-global",
		Short: "global manages the global DNS extension of Linkerd multicluster",
		Long: `global manages the global DNS extension of Linkerd multicluster: CoreDNS with the global
plugin, which answers one name for a StatefulSet's peers in every linked cluster.

On the PATH as linkerd-global, it runs as "linkerd global".`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if !alphaNumDash.MatchString(f.linkerdNamespace) {
				return fmt.Errorf("%s is not a valid namespace", f.linkerdNamespace)
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&f.linkerdNamespace, "linkerd-namespace", "L", "linkerd", "Namespace in which Linkerd is installed")
	pf.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests")
	pf.StringVar(&f.kubeContext, "context", "", "Name of the kubeconfig context to use")
	pf.StringVar(&f.impersonate, "as", "", "Username to impersonate for Kubernetes operations")
	pf.StringArrayVar(&f.impersonateGroup, "as-group", nil, "Group to impersonate for Kubernetes operations")
	pf.StringVar(&f.apiAddr, "api-addr", "", "Accepted as every Linkerd extension does; the extension has no API of its own")
	pf.BoolVar(&f.verbose, "verbose", false, "Turn on debug logging")
	pf.StringVar(&f.namespace, "global-namespace", "", "Namespace of the extension (install: "+defaultNamespace+"; otherwise found by its label or its Deployment)")
	pf.BoolVar(&f.directPods, "direct-pods", false, "Reach pods at their IP addresses instead of through a port-forward (the machine must reach the pod network)")
	root.AddCommand(newInstallCmd(f), newPruneCmd(f), newUninstallCmd(f), newCheckCmd(f), newStatusCmd(f), newExplainCmd(f), newVersionCmd(f), newMetadataCmd())
	return root
}

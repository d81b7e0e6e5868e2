package main

import (
	"fmt"
	"regexp"

	"github.com/spf13/cobra"
)

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

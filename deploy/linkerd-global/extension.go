package main

import "cmp"

// What the extension is: its name and labels as Linkerd and the chart know them, its build, and
// the flags every command takes.

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

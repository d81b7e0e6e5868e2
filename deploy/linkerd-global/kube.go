package main

import (
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kube is the Kubernetes API as the flags say to reach it.
type kube struct {
	config  *rest.Config
	client  kubernetes.Interface
	dynamic dynamic.Interface
}

// client builds the clients from --kubeconfig, --context, --as and --as-group, as Linkerd's CLI
// does (pkg/k8s.GetConfig): the usual kubeconfig loading rules, never a prompt.
func (f *globalFlags) client() (*kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.kubeContext}
	overrides.AuthInfo.Impersonate = f.impersonate
	overrides.AuthInfo.ImpersonateGroups = f.impersonateGroup
	config, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, err
	}
	config.Timeout = 30 * time.Second
	config.UserAgent = "linkerd-global/" + version
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &kube{config: config, client: client, dynamic: dyn}, nil
}
